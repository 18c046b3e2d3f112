"""Derivatives as batches: transition_fd against mjd_transitionFD, gradients against central
differences, and one custom call per Jacobian."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import _rules, tangent
from mjbatch_jax._extension import ext
from tests import models
from tests.models import G1, GO1
from tests.models import SMOOTH_CARTPOLE as CARTPOLE

jax.config.update("jax_enable_x64", True)

N = 3


def settled(sim, model, rng, keyframe, calls=20):
  """Rows that differ per simulation: randomised controls, stepped into contact."""
  state = sim.init_state(N, keyframe=keyframe)
  base = model.key_ctrl[0] if model.nkey else np.zeros(model.nu)
  ctrl = jnp.asarray(base + rng.uniform(-0.2, 0.2, (N, model.nu)))
  state = state.at[:, sim.layout.qvel].add(rng.normal(0, 0.02, (N, model.nv)))
  params = sim.params(N)
  for _ in range(calls):
    state = mjbatch_jax.step(state, ctrl, params)
  return np.asarray(state), np.asarray(ctrl), params


@pytest.mark.parametrize("method", ["rows", "plain rows", "native"])
@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("which", ["go1", "g1", "cartpole"])
def test_transition_fd_matches_mjd_transition_fd(which, centered, method):
  # "plain rows": the rows method without regime checks, which is mjd_transitionFD's arithmetic.
  # The default rows method equals it too, except in columns whose copies crossed a switch of
  # the dynamics (there it differences another side: tests/test_contact_derivatives.py).
  source, key = {"go1": (GO1, "home"), "g1": (G1, 0), "cartpole": (CARTPOLE, None)}[which]
  model = models.load(source)
  rng = np.random.default_rng(0)
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    state, ctrl, params = settled(sim, model, rng, key)
    if which == "go1":
      assert (np.asarray(mjbatch_jax.forward(state, params, ("qacc",))["qacc"]) != 0).any()
    before, totals = ext.handler_calls(), ext.finite_difference_totals()
    _rules.REGIME_CHECKED = method != "plain rows"
    try:
      A, B, C, D = mjbatch_jax.transition_fd(
        state, ctrl, params, centered=centered, sensors=True,
        method="native" if method == "native" else "rows")
    finally:
      _rules.REGIME_CHECKED = True
    after = ext.handler_calls()
    switched = ext.finite_difference_totals()["switched"] - totals["switched"]
  # All columns of all simulations in one custom call.
  name = "mjbatch_jax_transition_fd" if method == "native" else "mjbatch_jax_finite_difference"
  assert after[name] - before[name] == 1
  nx, nu, ns = 2 * model.nv + model.na, model.nu, model.nsensordata
  off = 0  # columns that differ from mjd_transitionFD's
  for i in range(N):
    data = mujoco.MjData(model)
    mujoco.mj_setState(model, data, state[i], mujoco.mjtState.mjSTATE_INTEGRATION)
    data.ctrl[:] = ctrl[i]
    want = [np.zeros(shape) for shape in ((nx, nx), (nx, nu), (ns, nx), (ns, nu))]
    mujoco.mjd_transitionFD(model, data, 1e-6, centered, *want)
    columns_x = np.vstack([np.asarray(A[i]), np.asarray(C[i])])
    columns_u = np.vstack([np.asarray(B[i]), np.asarray(D[i])])
    for got, ref in ((columns_x, np.vstack(want[::2])), (columns_u, np.vstack(want[1::2]))):
      close = np.isclose(got, ref, atol=1e-6, rtol=1e-4).all(axis=0)
      off += int((~close).sum())
    assert np.abs(want[0]).max() > 1  # a real Jacobian, not zeros
  assert off <= (switched if method == "rows" else 0), (off, switched)
  # Every simulation has its own state, so its own Jacobian.
  assert not np.allclose(A[0], A[1])


@pytest.mark.parametrize("method", ["rows", "native"])
def test_transition_fd_respects_control_limits(method):
  model = models.load(CARTPOLE)
  with mjbatch_jax.Simulator(model) as sim:
    state = sim.init_state(N)
    ctrl = jnp.asarray([[1.0], [-1.0], [0.3]])  # at the upper limit, the lower, inside
    for centered in (False, True):
      _, B = mjbatch_jax.transition_fd(state, ctrl, sim.params(N), centered=centered,
                                       method=method)
      for i in range(N):
        data = mujoco.MjData(model)
        mujoco.mj_setState(model, data, np.asarray(state[i]), mujoco.mjtState.mjSTATE_INTEGRATION)
        data.ctrl[:] = ctrl[i]
        nx = 2 * model.nv
        want = np.zeros((nx, 1))
        mujoco.mjd_transitionFD(model, data, 1e-6, centered, None, want, None, None)
        np.testing.assert_allclose(B[i], want, atol=1e-6, rtol=1e-4)
        assert np.abs(want).max() > 0


def test_rows_are_the_default_and_native_takes_one_substep():
  model = models.load(CARTPOLE)
  with mjbatch_jax.Simulator(model) as sim:
    state, ctrl, params = sim.init_state(N), jnp.zeros((N, model.nu)), sim.params(N)
    for nstep, method in ((1, "rows"), (2, "rows"), (1, "auto")):
      before = ext.handler_calls()["mjbatch_jax_finite_difference"]
      jax.block_until_ready(mjbatch_jax.transition_fd(state, ctrl, params, nstep=nstep,
                                                      method=method))
      assert ext.handler_calls()["mjbatch_jax_finite_difference"] - before == 1
    with pytest.raises(ValueError, match="native"):
      mjbatch_jax.transition_fd(state, ctrl, params, nstep=2, method="native")


def test_tangent_maps_match_mujoco():
  model = models.load(G1)
  rng = np.random.default_rng(1)
  qpos = model.qpos0.copy()
  qpos[3:7] = rng.normal(size=4)
  qpos[3:7] /= np.linalg.norm(qpos[3:7])
  qvel = rng.normal(size=model.nv)
  joints = tangent.Joints.of(model)
  want = qpos.copy()
  mujoco.mj_integratePos(model, want, qvel, 0.3)
  got = tangent.integrate_pos(joints, jnp.asarray(qpos), jnp.asarray(qvel), 0.3)
  np.testing.assert_allclose(got, want, atol=1e-14)
  # Leading axes broadcast: two poses, each moved along three directions.
  poses = np.stack([qpos, model.qpos0])
  moves = rng.normal(size=(3, model.nv))
  got = tangent.integrate_pos(joints, jnp.asarray(poses)[:, None], jnp.asarray(moves), 0.3)
  assert got.shape == (2, 3, model.nq)
  for i, j in np.ndindex(2, 3):
    one = poses[i].copy()
    mujoco.mj_integratePos(model, one, moves[j], 0.3)
    np.testing.assert_allclose(got[i, j], one, atol=1e-14)
  back = np.empty(model.nv)
  mujoco.mj_differentiatePos(model, back, 0.3, qpos, want)
  got = tangent.differentiate_pos(joints, jnp.asarray(qpos), jnp.asarray(want), 0.3)
  np.testing.assert_allclose(got, back, atol=1e-12)


NKNOT = 50


def loss_setup():
  model = models.load(CARTPOLE)
  sim = mjbatch_jax.Simulator(model, num_threads=2)
  rng = np.random.default_rng(2)
  state = np.array(sim.init_state(N))
  state[:, sim.layout.qpos] = rng.uniform(-0.3, 0.3, (N, model.nq))
  params = sim.params(N, ("body_mass",))
  ctrls = jnp.asarray(rng.uniform(-0.5, 0.5, (N, NKNOT, model.nu)))
  target = jnp.asarray(rng.uniform(-0.5, 0.5, (N, NKNOT, model.nsensordata)))

  def loss(mass, ctrls):
    p = params.replace({"body_mass": mass})
    states, sensordata = mjbatch_jax.rollout(jnp.asarray(state), ctrls, p)
    return jnp.sum((sensordata - target) ** 2) + 0.1 * jnp.sum(states[:, :, sim.layout.qvel] ** 2)

  return sim, params["body_mass"], ctrls, loss


def central_difference(f, x, index, h):
  e = jnp.zeros_like(x).at[index].set(h)
  return (f(x + e) - f(x - e)) / (2 * h)


def test_grad_through_rollout_matches_central_differences():
  sim, mass, ctrls, loss = loss_setup()
  grad_mass, grad_ctrls = jax.jit(jax.grad(loss, argnums=(0, 1)))(mass, ctrls)
  assert grad_mass.shape == mass.shape and grad_ctrls.shape == ctrls.shape
  for index in [(0, 1), (1, 2), (2, 1)]:
    want = central_difference(lambda m: loss(m, ctrls), mass, index, 1e-5)
    np.testing.assert_allclose(grad_mass[index], want, rtol=1e-4)
  for index in [(0, 0, 0), (1, 10, 0), (2, 40, 0)]:
    want = central_difference(lambda u: loss(mass, u), ctrls, index, 1e-5)
    np.testing.assert_allclose(grad_ctrls[index], want, rtol=1e-4)
  assert np.abs(grad_mass[:, 1:]).min() > 0  # the masses matter
  sim.close()


def test_jacfwd_agrees_with_jacrev():
  model = models.load(CARTPOLE)
  with mjbatch_jax.Simulator(model) as sim:
    state = sim.init_state(2).at[:, sim.layout.qpos].set(jnp.asarray([[0.1, 0.2], [-0.2, 0.4]]))
    params = sim.params(2, ("body_mass", "opt.gravity"))

    def f(ctrl, mass):
      p = params.replace({"body_mass": mass})
      return mjbatch_jax.step(state, ctrl, p, nstep=3)[:, sim.layout.qvel]

    ctrl = jnp.asarray([[0.3], [-0.2]])
    mass = params["body_mass"]
    forward = jax.jacfwd(f, argnums=(0, 1))(ctrl, mass)
    reverse = jax.jacrev(f, argnums=(0, 1))(ctrl, mass)
    for a, b in zip(forward, reverse, strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert np.abs(forward[0]).max() > 0

    fwd = jax.jacfwd(lambda s: mjbatch_jax.forward(s, params, ("site_xpos",))["site_xpos"])(state)
    rev = jax.jacrev(lambda s: mjbatch_jax.forward(s, params, ("site_xpos",))["site_xpos"])(state)
    np.testing.assert_allclose(fwd, rev, rtol=1e-9, atol=1e-12)


def test_one_call_per_jacobian():
  model = models.load(CARTPOLE)
  with mjbatch_jax.Simulator(model) as sim:
    state, ctrl = sim.init_state(8), jnp.zeros((8, model.nu))
    params = sim.params(8, ("body_mass", "dof_damping"))
    jac = jax.jit(jax.jacfwd(lambda c: mjbatch_jax.step(state, c, params)))
    jac(ctrl).block_until_ready()
    before = ext.handler_calls()["mjbatch_jax_finite_difference"]
    jac(ctrl).block_until_ready()
    assert ext.handler_calls()["mjbatch_jax_finite_difference"] - before == 1

    fd = jax.jit(mjbatch_jax.param_fd)
    jax.block_until_ready(fd(state, ctrl, params))
    before = ext.handler_calls()["mjbatch_jax_finite_difference"]
    out = jax.block_until_ready(fd(state, ctrl, params))
    assert ext.handler_calls()["mjbatch_jax_finite_difference"] - before == 1
    assert out["body_mass"].shape == (8, sim.nstate, model.nbody)
    assert out["dof_damping"].shape == (8, sim.nstate, model.nv)
    # param_fd is the params part of the step's derivative.
    by_jvp = jax.jacfwd(
      lambda d: mjbatch_jax.step(state, ctrl, params.replace({"dof_damping": d}))
    )(params["dof_damping"])  # (8, nstate, 8, nv)
    np.testing.assert_allclose(
      out["dof_damping"], jnp.einsum("isiv->isv", by_jvp), rtol=1e-9, atol=1e-12
    )


@pytest.mark.parametrize("which", ["go1", "cartpole"])
def test_float32_derivatives_have_float64_quality(which):
  # The differences are float64 inside the engine: float32 arrays cost only the final rounding.
  # (Before, float32 rows made jacfwd(step) on the standing Go1 off by up to 181%.)
  source, key = {"go1": (GO1, "home"), "cartpole": (CARTPOLE, None)}[which]
  model = models.load(source)
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    state, ctrl, params = settled(sim, model, np.random.default_rng(1), key, calls=100)
    s32, c32 = jnp.asarray(state, jnp.float32), jnp.asarray(ctrl, jnp.float32)
    one = sim.params(1)
    jac = jax.jacfwd(lambda s, c: mjbatch_jax.step(s[None], c[None], one)[0], argnums=(0, 1))
    for i in range(N):
      got = jac(s32[i], c32[i])
      want = jac(s32[i].astype(jnp.float64), c32[i].astype(jnp.float64))
      assert got[0].dtype == jnp.float32
      for g, w in zip(got, want, strict=True):
        err = np.linalg.norm(np.asarray(g, np.float64) - w) / np.linalg.norm(w)
        assert err < 1e-6, (which, i, err)  # the bar was 5%
      qv, qp = sim.layout.qvel, sim.layout.qpos
      block = np.asarray(want[0])[qv][:, qp]
      assert np.abs(block).max() > 0.1  # a real d qvel'/d qpos block, contacts in the Go1's
    a32, b32 = mjbatch_jax.transition_fd(s32, c32, params)
    a64, b64 = mjbatch_jax.transition_fd(s32.astype(jnp.float64), c32.astype(jnp.float64), params)
    assert a32.dtype == jnp.float32
    np.testing.assert_allclose(a32, a64, rtol=1e-5, atol=1e-5 * float(np.abs(a64).max()))
    np.testing.assert_allclose(b32, b64, rtol=1e-5, atol=1e-5 * float(np.abs(b64).max()))
