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
  # mj_step leaves subtree_linvel and cacc alone: "step" refuses them (test_fields_refused...).
  fields = FIELDS if at == "new" else tuple(f for f in FIELDS if f not in _AFTER_FORWARD)
  with sim:
    plain = mjbatch_jax.step(state, ctrl, params, nstep=3)
    new, obs = jax.jit(lambda s: mjbatch_jax.step(s, ctrl, params, nstep=3, observe=fields,
                                                  observe_at=at))(state)
    # Asking for observations leaves the rows bit for bit as they were.
    np.testing.assert_array_equal(new, plain)
    for i in range(N):
      row, want = reference(model, state[i], ctrl[i], params["body_mass"][i], 3, at)
      np.testing.assert_array_equal(new[i], row)
      for f in fields:
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


# ---------------------------------------------------------------------------------------------
# Every field that forward and observe accept, against a fresh MjData: a field whose values are
# left in a batch's per-thread MjData by another simulation (as qH was, by mj_step's implicit
# integrators) shows here as a row that differs.

_INTEGRATORS = {
  "euler": mujoco.mjtIntegrator.mjINT_EULER,
  "rk4": mujoco.mjtIntegrator.mjINT_RK4,
  "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT,
  "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST,
}
# mj_forward's callers that compute what mj_forward leaves alone, by field.
_AFTER_FORWARD = {
  "subtree_linvel": mujoco.mj_subtreeVel, "subtree_angmom": mujoco.mj_subtreeVel,
  "cacc": mujoco.mj_rnePostConstraint, "cfrc_int": mujoco.mj_rnePostConstraint,
  "cfrc_ext": mujoco.mj_rnePostConstraint, "qfrc_inverse": mujoco.mj_inverse,
}


def _accepted_fields(sim, in_step: bool) -> list[str]:
  """Every mjData name that forward (or observe at "step") takes, found by asking for each."""
  data = mujoco.MjData(sim.model)
  names = [n for n in dir(data) if not n.startswith("_")]
  accepted = []
  for name in names:
    try:
      ext.data_field_size(sim.spec.engine, name, in_step)
    except ValueError:
      continue
    accepted.append(name)
  return accepted


def _fields_model(which: str) -> mujoco.MjModel:
  if which == "go1":
    model = models.load(GO1)  # contacts, a floating base
  else:
    model = models.load(models.CARTPOLE_XML)
    model.opt.integrator = _INTEGRATORS[which]
  model.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
  return model


def _fresh(model, row, nstep: int) -> mujoco.MjData:
  data = mujoco.MjData(model)
  mujoco.mj_setState(model, data, np.asarray(row), mujoco.mjtState.mjSTATE_INTEGRATION)
  mujoco.mj_step(model, data, nstep) if nstep else mujoco.mj_forward(model, data)
  return data


@pytest.mark.parametrize("which", [*_INTEGRATORS, "go1"])
def test_every_accepted_field_equals_a_fresh_mjdata(which):
  model = _fields_model(which)
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    rng = np.random.default_rng(1)
    state = np.array(sim.init_state(N, keyframe=0 if model.nkey else None))
    state[:, sim.layout.qvel] += rng.normal(0, 0.3, (N, model.nv))
    state[:, sim.layout.ctrl] = rng.uniform(-1, 1, (N, model.nu))
    params = sim.params(N)
    state = np.asarray(mjbatch_jax.step(state, state[:, sim.layout.ctrl], params, nstep=5))
    ctrl = state[:, sim.layout.ctrl]
    new_fields, step_fields = _accepted_fields(sim, False), _accepted_fields(sim, True)
    assert "energy" in new_fields and "xpos" in step_fields and len(new_fields) > 50
    assert not {"qH", "qHDiagInv", "qDeriv", "qLU"} & set(new_fields)
    assert not set(_AFTER_FORWARD) & set(step_fields)
    # Other rows in the same per-thread MjData first, in reverse order, so that anything left
    # behind by one simulation would show in another's results.
    mjbatch_jax.step(state[::-1].copy(), ctrl[::-1], params, nstep=3, observe=("xpos",))
    got = {
      "forward": mjbatch_jax.forward(state, params, tuple(new_fields)),
      "new": mjbatch_jax.step(state, ctrl, params, nstep=2, observe=tuple(new_fields))[1],
      "step": mjbatch_jax.step(state, ctrl, params, nstep=2, observe=tuple(step_fields),
                               observe_at="step")[1],
    }
    for how, values in got.items():
      for i in range(N):
        data = _fresh(model, state[i], 0 if how == "forward" else 2)
        if how == "new":
          mujoco.mj_forward(model, data)
        for name, value in values.items():
          if how != "step" and name in _AFTER_FORWARD:
            _AFTER_FORWARD[name](model, data)
          np.testing.assert_array_equal(np.asarray(value[i]).reshape(-1),
                                        np.asarray(getattr(data, name)).reshape(-1),
                                        err_msg=f"{how} {name} sim {i}")


def test_fields_refused_with_the_reason():
  model = models.load(models.CARTPOLE_XML)
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    state, params = sim.init_state(N), sim.params(N)
    ctrl = jnp.zeros((N, model.nu))
    for name in ("qH", "qHDiagInv", "qDeriv", "qLU"):
      with pytest.raises(ValueError, match=f"'{name}' is scratch of mj_step's integrators"):
        mjbatch_jax.forward(state, params, (name,))
      with pytest.raises(ValueError, match="scratch"):
        mjbatch_jax.step(state, ctrl, params, observe=(name,), observe_at="step")
    with pytest.raises(ValueError, match="energy flag"):
      mjbatch_jax.forward(state, params, ("energy",))
    with pytest.raises(ValueError, match="observe_at='new'"):
      mjbatch_jax.rollout(state, jnp.zeros((N, 2, model.nu)), params, observe=("cacc",),
                          observe_at="step")
