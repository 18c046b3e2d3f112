"""Derivatives through contact: right by default where a finite-difference copy crosses a switch
of the dynamics (contact onset, limits, cone states, clamps, solver iterations)."""

import importlib.util
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import _rules
from mjbatch_jax._extension import ext
from tests import models
from tests.models import CHEETAH_XML, GO1, SMOOTH_CARTPOLE

jax.config.update("jax_enable_x64", True)

SECANT = 1e-7
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def record(model: mujoco.MjModel, steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Rows (steps + 1, nstate) and controls (steps, nu) of plain MuJoCo under random controls
  held for 20 steps each."""
  rng = np.random.default_rng(seed)
  data = mujoco.MjData(model)
  ctrls = np.repeat(rng.uniform(-1, 1, (steps // 20 + 1, model.nu)), 20, axis=0)[:steps]
  rows = [models.row(model, data)]
  for u in ctrls:
    data.ctrl[:] = u
    mujoco.mj_step(model, data)
    rows.append(models.row(model, data))
  return np.array(rows), ctrls


class CheetahIdentification:
  """The issue's case: 4 masses and 6 dampings of the planar cheetah from multiple-shooting
  windows of 10 steps (x64, set_const=True), the loss's directional derivatives."""

  BODIES = ["torso", "bthigh", "bshin", "bfoot"]

  def __init__(self, windows: int = 30, length: int = 10):
    self.model = mujoco.MjModel.from_xml_string(CHEETAH_XML)
    rows, ctrls = record(self.model, 20 + windows * length, seed=0)
    self.sim = mjbatch_jax.Simulator(self.model, num_threads=2)
    first = 20 + np.arange(windows) * length  # after the drop onto the floor
    self.starts = jnp.asarray(rows[first])
    self.ctrls = jnp.asarray(np.stack([ctrls[s : s + length] for s in first]))
    layout = self.sim.layout
    columns = np.r_[layout.qpos.start : layout.qpos.stop, layout.qvel.start : layout.qvel.stop]
    self.columns = columns
    targets = np.stack([rows[s + 1 : s + length + 1] for s in first])
    self.targets = jnp.asarray(targets[..., columns])
    self.params = self.sim.params(windows, ("body_mass", "dof_damping"),
                                  shared=("body_mass", "dof_damping"),
                                  select={"body_mass": self.BODIES, "dof_damping": range(3, 9)},
                                  set_const=True)
    self.truth = np.concatenate([np.asarray(self.params["body_mass"]),
                                 np.asarray(self.params["dof_damping"])])

  def loss(self, theta: jax.Array, eps: float | None = None, centered: bool | None = None
           ) -> jax.Array:
    params = mjbatch_jax.tree_replace(self.params, {"body_mass": theta[:4],
                                                    "dof_damping": theta[4:]})
    states, _ = mjbatch_jax.rollout(self.starts, self.ctrls, params, eps=eps, centered=centered)
    return jnp.sum((states[..., self.columns] - self.targets) ** 2)


def directional_errors(problem: CheetahIdentification, points: int, seed: int,
                       variants: dict) -> tuple[dict[str, list[float]], list[bool]]:
  """Relative errors of jax.jvp against the central secant at 1e-7, per variant and point, and
  whether the loss is smooth there (forward and backward secants agree to 1e-3)."""
  loss = jax.jit(problem.loss)
  jvps = {}
  for name, (eps, centered, checked) in variants.items():
    _rules.REGIME_CHECKED = checked  # read when the rule is traced
    try:
      fn = jax.jit(lambda th, v, eps=eps, c=centered: jax.jvp(
        lambda t: problem.loss(t, eps, c), (th,), (v,))[1])
      fn(jnp.asarray(problem.truth), jnp.asarray(problem.truth)).block_until_ready()
    finally:
      _rules.REGIME_CHECKED = True
    jvps[name] = fn
  rng = np.random.default_rng(seed)
  errors: dict[str, list[float]] = {name: [] for name in variants}
  smooth = []
  for _ in range(points):
    theta = problem.truth * (1 + 0.3 * rng.uniform(-1, 1, 10))
    v = rng.normal(size=10) * problem.truth
    f0, fp, fm = (float(loss(jnp.asarray(theta + s * SECANT * v))) for s in (0, 1, -1))
    secant = (fp - fm) / (2 * SECANT)
    smooth.append(abs((fp - f0) - (f0 - fm)) / SECANT <= 1e-3 * abs(secant))
    for name, fn in jvps.items():
      errors[name].append(abs(float(fn(jnp.asarray(theta), jnp.asarray(v))) - secant)
                          / abs(secant))
  return errors, smooth


def test_cheetah_identification_derivatives_are_right_by_default():
  problem = CheetahIdentification()
  errors, smooth = directional_errors(
    problem, points=24, seed=0,
    variants={"default": (None, None, True), "plain": (1e-6, False, False)})
  problem.sim.close()
  assert sum(smooth) >= 20, f"only {sum(smooth)} of 24 points smooth at the secant's scale"
  default = [e for e, s in zip(errors["default"], smooth, strict=True) if s]
  plain = [e for e, s in zip(errors["plain"], smooth, strict=True) if s]
  # Plain forward differences at 1e-6 (the old default) cross contact switches at some points.
  assert max(plain) > 0.01, f"plain differences were right everywhere: {max(plain):.2e}"
  assert max(default) < 0.01, f"default derivatives off by {max(default):.2e}"


def test_regime_checks_add_no_rows_on_a_smooth_model():
  model = models.load(SMOOTH_CARTPOLE)
  with mjbatch_jax.Simulator(model) as sim:
    params = sim.params(8, ("body_mass",))
    state = sim.init_state(8).at[:, sim.layout.qpos].set(0.3)
    ctrls = jnp.full((8, 20, model.nu), 0.2)
    before = ext.finite_difference_totals()
    jax.block_until_ready(jax.jacfwd(lambda c: mjbatch_jax.rollout(state, c, params)[0])(ctrls))
    after = ext.finite_difference_totals()
  assert after["columns"] > before["columns"]
  assert after["switched"] == before["switched"]
  assert after["extra_rows"] == before["extra_rows"]


BALL_XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom type="plane" size="1 1 .1"/>
    <body pos="0 0 1"><freejoint/><geom type="sphere" size=".1" mass="1"/></body>
  </worldbody>
</mujoco>
"""


def test_a_copy_that_leaves_the_contact_is_differenced_on_the_contact_side():
  # A resting ball 5e-7 m into the floor: moving it up by eps = 1e-6 lifts it out of contact,
  # and the contact carried its weight, so a plain forward difference of d(next vz)/dz measures
  # that jump over eps. The regime-checked difference stays in contact.
  model = mujoco.MjModel.from_xml_string(BALL_XML)
  data = mujoco.MjData(model)
  data.qpos[2] = 0.1 - 5e-7
  row = models.row(model, data)

  def vz_after(z_shift: float) -> float:
    d = mujoco.MjData(model)
    mujoco.mj_setState(model, d, row, mujoco.mjtState.mjSTATE_INTEGRATION)
    d.qpos[2] += z_shift
    mujoco.mj_step(model, d)
    return float(d.qvel[2])

  in_contact = (vz_after(0.0) - vz_after(-1e-8)) / 1e-8  # backward: stays in contact
  with mjbatch_jax.Simulator(model) as sim:
    params = sim.params(1)
    state = jnp.asarray(row[None])
    z = sim.layout.qpos.start + 2
    vz = sim.layout.qvel.start + 2
    tangent = jnp.zeros_like(state).at[0, z].set(1.0)
    _, checked = jax.jvp(lambda s: mjbatch_jax.step(s, jnp.zeros((1, 0)), params),
                         (state,), (tangent,))
    _rules.REGIME_CHECKED = False
    try:
      _, plain = jax.jvp(lambda s: mjbatch_jax.step(s, jnp.zeros((1, 0)), params, centered=False),
                         (state,), (tangent,))
    finally:
      _rules.REGIME_CHECKED = True
    A, _ = mjbatch_jax.transition_fd(state, jnp.zeros((1, 0)), params)
  assert abs(float(plain[0, vz]) - in_contact) > 100 * abs(in_contact)  # the jump
  # One-sided at 1e-6 against one-sided at 1e-8: the contact's impedance curves on a 1 mm scale.
  np.testing.assert_allclose(float(checked[0, vz]), in_contact, rtol=2e-3)
  np.testing.assert_allclose(float(A[0, model.nv + 2, 2]), in_contact, rtol=2e-3)


@models.requires_models
def test_float32_transition_fd_rows_on_the_standing_go1():
  model = models.load(GO1)
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    params = sim.params(4)
    state = sim.init_state(4, keyframe="home")
    ctrl = jnp.broadcast_to(jnp.asarray(model.key_ctrl[0]), (4, model.nu))
    state = mjbatch_jax.step(state, ctrl, params, nstep=300)  # standing on its feet
    wide = mjbatch_jax.transition_fd(state, ctrl, params, method="rows")
    narrow = mjbatch_jax.transition_fd(state.astype(jnp.float32), ctrl.astype(jnp.float32),
                                       params, method="rows")
  for w, n in zip(wide, narrow, strict=True):
    assert n.dtype == jnp.float32
    error = np.linalg.norm(np.asarray(n, np.float64) - np.asarray(w)) / np.linalg.norm(w)
    assert error < 0.01, error


@models.requires_models
def test_the_solver_warm_start_is_differenced():
  # The Go1 trotting in place (as benchmarks/derivative_accuracy.py drives it), at a step where
  # its Newton solver stops on its tolerance with the next velocities depending on where it
  # started: d qvel' / d qacc_warmstart has a norm of about 1e-3, the same at secant steps of
  # 1e-4, 1e-6 and 1e-8. A chain of Jacobians without these columns misses it.
  model = models.load(GO1)
  data = mujoco.MjData(model)
  mujoco.mj_resetDataKeyframe(model, data, 0)
  home = model.key_ctrl[0].copy()
  for _ in range(400):
    lift = np.maximum(0.0, np.sin(2 * np.pi * 2.0 * data.time) * np.array([1, -1, -1, 1]))
    data.ctrl[:] = home
    data.ctrl[1::3] += 0.4 * lift
    data.ctrl[2::3] -= 0.8 * lift
    mujoco.mj_step(model, data)
  row, ctrl = models.row(model, data), data.ctrl.copy()
  with mjbatch_jax.Simulator(model) as sim:
    warm, qvel = sim.layout.qacc_warmstart, sim.layout.qvel
    params = sim.params(1)
    state = jnp.asarray(row[None])
    jacobian = jax.jacfwd(lambda w: mjbatch_jax.step(state.at[0, warm].set(w), ctrl[None],
                                                     params)[0, qvel])(state[0, warm])

  def secant(j: int, h: float = 1e-6) -> np.ndarray:
    ends = []
    for sign in (1, -1):
      d = mujoco.MjData(model)
      shifted = row.copy()
      shifted[warm.start + j] += sign * h
      mujoco.mj_setState(model, d, shifted, mujoco.mjtState.mjSTATE_INTEGRATION)
      d.ctrl[:] = ctrl
      mujoco.mj_step(model, d)
      ends.append(d.qvel.copy())
    return (ends[0] - ends[1]) / (2 * h)

  expected = np.stack([secant(j) for j in range(model.nv)], axis=1)
  assert np.linalg.norm(expected) > 1e-4  # the dependence this test is about
  error = np.linalg.norm(np.asarray(jacobian) - expected) / np.linalg.norm(expected)
  assert error < 1e-2, error


def test_a_float32_rollouts_derivative_follows_its_float64_path():
  # rollout keeps each simulation's state in float64 between knots and rounds what it returns;
  # with x64 on, the rule's chain follows that path (not one rounded at each knot), so the jvp's
  # primal is the rollout's, bit for bit.
  model = mujoco.MjModel.from_xml_string(CHEETAH_XML)
  with mjbatch_jax.Simulator(model) as sim:
    params = sim.params(4, ("body_mass",))
    state = sim.init_state(4).astype(jnp.float32)
    ctrls = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (4, 30, model.nu)), jnp.float32)
    states, sensordata = mjbatch_jax.rollout(state, ctrls, params)
    primal, tangent = jax.jvp(lambda c: mjbatch_jax.rollout(state, c, params), (ctrls,),
                              (ctrls,))
    jax.block_until_ready(tangent)
  assert tangent[0].dtype == jnp.float32
  np.testing.assert_array_equal(np.asarray(primal[0]), np.asarray(states))
  np.testing.assert_array_equal(np.asarray(primal[1]), np.asarray(sensordata))


def _benchmark(name: str) -> Any:
  spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
  assert spec is not None and spec.loader is not None
  sys.path.insert(0, str(BENCHMARKS))
  try:
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(str(BENCHMARKS))
  return module


@pytest.mark.slow
@models.requires_models
@pytest.mark.parametrize("model, knots, point", [
  ("unitree_go1", 50, 6),  # the solver's warm start, chained over 50 knots: 25% off
  ("unitree_g1", 10, 15),  # a position's copy at -1e-6 crossing a switch the hash misses: 2.8x
])
def test_points_where_the_rules_were_wrong(model: str, knots: int, point: int):
  # Points of benchmarks/derivative_accuracy.py's float64 run (seed 0) where the default without
  # the warm start's columns and the disagreement check was off (docs/derivatives.md); smooth at
  # the secant's scale.
  accuracy = _benchmark("derivative_accuracy")
  problem = accuracy.Problem(accuracy.TASKS[model](), 400 // knots, knots, 2, jnp.float64)
  rng = np.random.default_rng(0)
  for _ in range(point + 1):
    theta, ctrls, d_theta, d_ctrls = problem.point(rng)
  loss = jax.jit(problem.loss)
  values = [float(loss({k: theta[k] + s * SECANT * d_theta[k] for k in theta}, ctrls + s * SECANT
                       * d_ctrls)) for s in (1, 0, -1)]
  secant = (values[0] - values[2]) / (2 * SECANT)
  assert abs((values[0] - values[1]) - (values[1] - values[2])) / SECANT < 1e-3 * abs(secant)
  _, tangent = jax.jit(lambda *a: jax.jvp(problem.loss, a[:2], a[2:]))(theta, ctrls, d_theta,
                                                                       d_ctrls)
  derivative = float(tangent)
  problem.sim.close()
  assert abs(derivative - secant) < 0.01 * abs(secant), (derivative, secant)


def test_float32_accuracy_problem_rounds_a_copy_of_the_model():
  # The float32 run rounds the fields the loss varies to float32 in the model it simulates; the
  # task's own model keeps its float64 values (it was rounded in place before).
  accuracy = _benchmark("derivative_accuracy")
  task = accuracy.TASKS["cheetah"]()
  before = {name: getattr(task.model, name).copy() for name in task.fields}
  problem = accuracy.Problem(task, 1, 2, 1, jnp.float32)
  try:
    changed = False
    for name, values in before.items():
      np.testing.assert_array_equal(getattr(task.model, name), values)
      rounded = values.astype(np.float32).astype(np.float64)
      np.testing.assert_array_equal(getattr(problem.task.model, name), rounded)
      changed |= bool(np.any(rounded != values))
    assert changed  # the rounding changes some value: the first check can fail
  finally:
    problem.sim.close()


def test_check_grads_passes_right_rules_and_catches_wrong_ones():
  model = models.load(SMOOTH_CARTPOLE)
  with mjbatch_jax.Simulator(model) as sim:
    params = sim.params(2, ("body_mass",))
    state = sim.init_state(2).at[:, sim.layout.qpos].set(0.2)

    def loss(mass, ctrls):
      p = mjbatch_jax.tree_replace(params, {"body_mass": mass})
      return jnp.sum(mjbatch_jax.rollout(state, ctrls, p)[0] ** 2)

    report = mjbatch_jax.check_grads(loss, (params["body_mass"], jnp.full((2, 10, 1), 0.3)),
                                     directions=6)
    assert report.passed and report.worst < 1e-4 and len(report.smooth) == 6
    assert {d.leaf for d in report.directions} == {"[0]", "[1]", "all"}

  wrong = jax.custom_jvp(jnp.sin)
  wrong.defjvp(lambda primals, tangents: (jnp.sin(primals[0]), 1.1 * jnp.cos(primals[0])
                                          * tangents[0]))
  with pytest.raises(AssertionError, match="worst relative error 1.00e-01"):
    mjbatch_jax.check_grads(lambda x: jnp.sum(wrong(x)), (jnp.arange(1.0, 4.0),))
  # A kink within the secant's step is reported, not judged.
  report = mjbatch_jax.check_grads(lambda x: jnp.abs(x[0]) + x[1], (jnp.array([0.0, 1.0]),),
                                   directions=4, raise_on_failure=False)
  assert not all(d.smooth for d in report.directions)
  bad_arguments: list[dict[str, Any]] = [{"directions": 0}, {"rtol": -1.0},
                                          {"step": float("nan")}]
  for bad in bad_arguments:
    with pytest.raises(ValueError):
      mjbatch_jax.check_grads(jnp.sum, (jnp.ones(2),), **bad)
  with pytest.raises(ValueError, match="floating"):
    mjbatch_jax.check_grads(lambda i: i, (jnp.arange(3),))


def test_a_state_on_a_switch_differences_to_the_least_wrong_quotient():
  # Knot 49 of a G1 backflip (10 substeps): the arms swing into the torso and the mesh contacts'
  # count flickers with rounding (8, 2, 8 over three substeps), so for some columns every copy,
  # on either side and at every step down to eps * 1e-4, changes regime. The centred pair of the
  # last level read the jump over 2e-10 (9.5e8 in A, 9.5e9 in B); the smallest one-sided
  # quotient reads the slope (entries of about 50, as at the knots beside it).
  fixture = np.load(Path(__file__).parent / "data" / "g1_arms_on_torso.npz")
  model = models.load(models.G1)
  with mjbatch_jax.Simulator(model) as sim:
    state, ctrl = jnp.asarray(fixture["state"])[None], jnp.asarray(fixture["ctrl"])[None]
    before = ext.finite_difference_totals()
    a, b = mjbatch_jax.transition_fd(state, ctrl, sim.params(1), nstep=10)
    after = ext.finite_difference_totals()
  assert after["unresolved"] > before["unresolved"], "the fixture no longer sits on a switch"
  assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
  assert float(jnp.abs(a).max()) < 1e3, f"a jump over a tiny step in A: {jnp.abs(a).max():.3g}"
  assert float(jnp.abs(b).max()) < 1e3, f"a jump over a tiny step in B: {jnp.abs(b).max():.3g}"
