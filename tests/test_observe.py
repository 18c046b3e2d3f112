"""Observations from the step itself: fields at the new state (or MuJoCo's in-step values)
computed inside the same custom call, against plain MuJoCo on fresh MjData."""

import copy

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax._extension import ext
from tests import models
from tests.models import FREEBALL_XML, GO1

jax.config.update("jax_enable_x64", True)

N = 3
FIELDS = ("sensordata", "site_xpos", "xquat", "cvel", "qacc", "subtree_linvel", "cacc")


def inputs(which: str):
  source, key = {"go1": (GO1, "home"), "toy": (FREEBALL_XML, 0)}[which]
  model = models.load(source)
  sim = mjbatch_jax.Simulator(model, num_threads=2)
  rng = np.random.default_rng(0)
  state = np.array(sim.init_state(N, keyframe=key))
  state[:, sim.layout.qvel] += rng.normal(0, 0.1, (N, model.nv))
  base = model.key_ctrl[0] if model.nkey else np.zeros(model.nu)
  ctrl = base + rng.uniform(-0.2, 0.2, (N, model.nu))
  params = sim.params(N, ("body_mass",))
  params = params.replace({"body_mass": params["body_mass"] * rng.uniform(0.9, 1.1, (N, 1))})
  return model, sim, jnp.asarray(state), jnp.asarray(ctrl), params


def reference(model, row, ctrl, mass, nstep, at):
  m = copy.copy(model)
  m.body_mass[:] = mass
  data = mujoco.MjData(m)
  mujoco.mj_setState(m, data, np.asarray(row), mujoco.mjtState.mjSTATE_INTEGRATION)
  data.ctrl[:] = ctrl
  for _ in range(nstep):
    mujoco.mj_step(m, data)
  new = np.empty(mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_INTEGRATION))
  mujoco.mj_getState(m, data, new, mujoco.mjtState.mjSTATE_INTEGRATION)
  if at == "new":
    mujoco.mj_forward(m, data)
    mujoco.mj_subtreeVel(m, data)
    mujoco.mj_rnePostConstraint(m, data)
  return new, {f: np.array(getattr(data, f)) for f in FIELDS}


@pytest.mark.parametrize("at", ["new", "step"])
@pytest.mark.parametrize("which", ["go1", "toy"])
def test_step_observations_equal_mujoco(which, at):
  model, sim, state, ctrl, params = inputs(which)
  with sim:
    plain = mjbatch_jax.step(state, ctrl, params, nstep=3)
    new, obs = jax.jit(lambda s: mjbatch_jax.step(s, ctrl, params, nstep=3, observe=FIELDS,
                                                  observe_at=at))(state)
    # Asking for observations leaves the rows bit for bit as they were.
    np.testing.assert_array_equal(new, plain)
    for i in range(N):
      row, want = reference(model, state[i], ctrl[i], params["body_mass"][i], 3, at)
      np.testing.assert_array_equal(new[i], row)
      for f in FIELDS:
        np.testing.assert_array_equal(obs[f][i], want[f], err_msg=f"{which} {at} {f} sim {i}")
    assert obs["site_xpos"].shape == (N, model.nsite, 3)
    if at == "new":  # the same as forward on the new state
      fwd = mjbatch_jax.forward(new, params, FIELDS)
      for f in FIELDS:
        np.testing.assert_array_equal(obs[f], fwd[f])


@pytest.mark.parametrize("at", ["new", "step"])
def test_rollout_observations_per_knot(at):
  model, sim, state, ctrl, params = inputs("toy")
  with sim:
    ctrls = jnp.stack([ctrl, -ctrl, 0.5 * ctrl, ctrl], axis=1)  # (N, 4, nu)
    before = ext.handler_calls()["mjbatch_jax_rollout"]
    states, sensordata, obs = mjbatch_jax.rollout(state, ctrls, params, nstep=2,
                                                  observe=("xpos", "sensordata"), observe_at=at)
    assert ext.handler_calls()["mjbatch_jax_rollout"] - before == 1
    plain_states, plain_sensors = mjbatch_jax.rollout(state, ctrls, params, nstep=2)
    np.testing.assert_array_equal(states, plain_states)
    np.testing.assert_array_equal(sensordata, plain_sensors)
    assert obs["xpos"].shape == (N, 4, model.nbody, 3)
    for k in range(4):
      prev = state if k == 0 else states[:, k - 1]
      _, want = mjbatch_jax.step(prev, ctrls[:, k], params, nstep=2, observe=("xpos",),
                                 observe_at=at)
      np.testing.assert_array_equal(obs["xpos"][:, k], want["xpos"])
    if at == "step":  # in-step sensordata is what rollout records
      np.testing.assert_array_equal(obs["sensordata"], sensordata)


def test_observation_derivatives_are_step_then_forward():
  model, sim, state, ctrl, params = inputs("toy")
  with sim:
    def fused(c):
      return mjbatch_jax.step(state, c, params, observe=("xpos",))[1]["xpos"].sum()

    def composed(c):
      new = mjbatch_jax.step(state, c, params)
      return mjbatch_jax.forward(new, params, ("xpos",))["xpos"].sum()

    # The fused derivative differences the observations of the perturbed copies directly; the
    # composed one chains forward's Jacobian after the step's: the same derivative, two
    # difference quotients, equal to the truncation error.
    np.testing.assert_allclose(jax.grad(fused)(ctrl), jax.grad(composed)(ctrl), rtol=1e-8)
    assert np.abs(np.asarray(jax.grad(fused)(ctrl))).max() > 0
    with pytest.raises(ValueError, match="in-step"):
      jax.grad(lambda c: mjbatch_jax.step(state, c, params, observe=("xpos",),
                                          observe_at="step")[1]["xpos"].sum())(ctrl)


def test_bad_observe_arguments():
  model, sim, state, ctrl, params = inputs("toy")
  with sim:
    with pytest.raises(ValueError, match="site_xposs"):
      mjbatch_jax.step(state, ctrl, params, observe=("site_xposs",))
    with pytest.raises(ValueError, match="observe_at"):
      mjbatch_jax.step(state, ctrl, params, observe=("xpos",), observe_at="before")
    with pytest.raises(ValueError, match="string"):
      mjbatch_jax.step(state, ctrl, params, observe="xpos")
