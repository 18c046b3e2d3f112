"""Why control.ilqr stopped (ILQRResult.stop) and its planning linearisation ("substeps")."""

import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import _ffi, control
from mjbatch_jax.control.ilqr import _dynamics
from mjbatch_jax.tangent import StateTangent
from tests.models import CHEETAH_XML, POINT_XML

jax.config.update("jax_enable_x64", True)

HORIZON = 10


@pytest.fixture(scope="module")
def point():
  with mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(POINT_XML), num_threads=1) as sim:
    yield sim


def start_of(sim):
  return sim.init_state(1)[0].at[sim.layout.qpos].set(jnp.array([1.0, -0.5]))


def tracking(sim, goal=(0.0, 0.0), control_weight=0.1) -> control.Cost:
  """Drive the point mass to goal and stop there: a convex quadratic (LQR up to the bounds)."""
  layout, goal = sim.layout, jnp.asarray(goal)

  def residual(x, u, obs, t):
    return jnp.concatenate([x[layout.qpos] - goal, x[layout.qvel], u])

  return control.Cost(residual, (control.Term(2, 1.0), control.Term(2, 0.1),
                                 control.Term(2, control_weight)))


def solve(sim, cost, **kwargs) -> control.ILQRResult:
  return control.ilqr(cost, sim.params(1), start_of(sim), jnp.zeros((HORIZON, 2)), **kwargs)


def test_the_stop_names_are_public_and_in_order():
  assert control.ILQR_STOPS == ("iterations", "tolerance", "plateau", "mu_max", "not_finite")
  assert "ILQR_STOPS" in control.__all__
  # Appended last: a positional unpacking of the nine older fields still works.
  assert control.ILQRResult._fields[-1] == "stop"
  assert control.ILQRSettings._fields[-1] == "plateau"


def test_a_linear_quadratic_solve_stops_on_tolerance(point):
  # Controls inside their range: iLQR is Newton's method here, exact after one step (up to the
  # finite differences); the next gains nothing.
  result = solve(point, tracking(point, control_weight=1.0), iterations=10)
  assert np.abs(np.asarray(result.ctrls)).max() < 0.5
  assert result.stopped == "tolerance" and int(result.stop) == 1
  assert bool(result.converged) and int(result.iterations) <= 3
  assert result.stop.dtype == jnp.int32


def test_running_out_of_iterations_is_not_convergence(point):
  result = solve(point, tracking(point), iterations=1, bounds=(-np.inf, np.inf))
  assert result.stopped == "iterations" and not bool(result.converged)
  assert int(result.iterations) == 1 and float(result.costs[1]) < float(result.costs[0])
  assert solve(point, tracking(point), iterations=0).stopped == "iterations"


def test_controls_held_at_their_bounds_are_a_plateau(point):
  # The goal is far beyond what controls in [-0.05, 0.05] reach in 10 knots: the best plan
  # pushes at the bound throughout, the box QP then keeps every control there, no step can
  # improve and mu climbs to its limit; the model promises no decrease, so this is converged.
  cost = tracking(point, goal=(50.0, -50.0), control_weight=1e-4)
  result = solve(point, cost, iterations=20, bounds=(-0.05, 0.05))
  assert result.stopped == "plateau" and int(result.stop) == 2 and bool(result.converged)
  np.testing.assert_array_equal(np.abs(np.asarray(result.ctrls)), 0.05)
  steps = int(result.iterations)
  assert steps >= 2 and result.costs[steps] == result.costs[steps - 1]  # the last one failed


def test_a_cost_still_falling_when_no_step_is_accepted_is_mu_max(point):
  # accept refuses every plan: nothing improves, but the model promises a large decrease.
  result = solve(point, tracking(point), iterations=5, accept=lambda xs, us: jnp.asarray(False))
  assert result.stopped == "mu_max" and int(result.stop) == 3 and not bool(result.converged)
  assert int(result.iterations) == 1 and float(result.cost) == float(result.costs[0])


@pytest.mark.parametrize("plateau", [0.0, None])
def test_a_plateau_of_the_accepted_gains_is_the_rule_of_the_docstring(point, plateau):
  # Plans whose controls exceed 0.2 are refused: the solve creeps towards that cap by ever
  # smaller gains (tolerance 0 never stops it) until no step is accepted, although the model
  # (which knows no guard) still promises much: the issue's "the cost flattens, the solve ends
  # at mu_max". Whether that is a plateau is the last gain against settings.plateau.
  def capped(xs, us):
    return jnp.all(jnp.abs(us) <= 0.2)

  settings = control.ILQRSettings(tolerance=0.0)
  if plateau is not None:
    settings = settings._replace(plateau=plateau)
  result = solve(point, tracking(point, control_weight=1e-3), iterations=40, accept=capped,
                 settings=settings)
  steps = int(result.iterations)
  assert 2 <= steps < 40 and result.costs[steps] == result.costs[steps - 1]
  gained = float(result.costs[steps - 2] - result.costs[steps - 1])
  flat = gained <= settings.plateau * abs(float(result.cost))
  assert result.stopped == ("plateau" if flat else "mu_max")
  assert bool(result.converged) == flat
  assert flat == (plateau is None)  # both branches are reached; the default calls it a plateau


def test_a_cost_not_finite_at_the_start_stops_under_jit(point):
  layout = point.layout

  def residual(x, u, obs, t):  # NaN left of x = 2, where the plan starts
    return jnp.concatenate([jnp.sqrt(x[layout.qpos][:1] - 2.0), u])

  cost = control.Cost(residual, (control.Term(1), control.Term(2)))
  result = jax.jit(lambda s: control.ilqr(cost, point.params(1), s, jnp.zeros((HORIZON, 2)),
                                          iterations=3))(start_of(point))
  assert result.stopped == "not_finite" and not bool(result.converged)
  assert int(result.iterations) == 0


def test_stopped_names_one_solve_and_reads_through_the_planner_info(point):
  results = jax.vmap(lambda s: control.ilqr(tracking(point), point.params(1), s,
                                            jnp.zeros((HORIZON, 2)), iterations=1))(
    jnp.stack([start_of(point)] * 2))
  with pytest.raises(ValueError, match="index the result first"):
    _ = results.stopped
  planner = control.ilqr_planner(tracking(point), point.params(1), horizon=HORIZON)
  step = control.receding_horizon(planner, point.params(1))
  _, _, info = step(start_of(point), planner.init(), jax.random.key(0))
  assert info.stopped in control.ILQR_STOPS


@pytest.mark.parametrize("bad", [-1.0, math.nan, "0.1"])
def test_a_bad_plateau_is_refused_by_name_before_any_custom_call(point, monkeypatch, bad):
  def refuse(*args, **kwargs):
    raise AssertionError("a custom call ran before the input was refused")

  for module in _ffi.TARGETS.values():
    monkeypatch.setattr(module, "call", refuse)
  with pytest.raises(ValueError, match=r"settings.plateau must be a finite number >= 0"):
    solve(point, tracking(point), settings=control.ILQRSettings(plateau=bad))


# -- the planning linearisation ----------------------------------------------------------------


@pytest.fixture(scope="module")
def runner():
  """The planar cheetah fallen onto the floor: contacts at every knot."""
  model = mujoco.MjModel.from_xml_string(CHEETAH_XML)
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    start = sim.init_state(1)[0]
    rng = np.random.default_rng(0)
    ctrls = jnp.asarray(rng.uniform(-0.5, 0.5, (80, model.nu)))
    states = np.asarray(mjbatch_jax.rollout(start[None], ctrls[None], sim.params(1))[0][0])
    knots = jnp.asarray(np.concatenate([start[None], states])[70:])  # 11 states, 10 knots
    yield sim, model, knots, ctrls[70:80]


def mujoco_jacobians(model, states, ctrls, eps, nstep):
  """Each knot's A, B: MuJoCo's forward-difference mjd_transitionFD of each physics step,
  chained."""
  data, nx = mujoco.MjData(model), 2 * model.nv + model.na
  a, b = np.zeros((nx, nx)), np.zeros((nx, model.nu))
  out_a, out_b = [], []
  for state, ctrl in zip(states, ctrls, strict=True):
    mujoco.mj_setState(model, data, np.asarray(state), mujoco.mjtState.mjSTATE_INTEGRATION)
    data.ctrl[:] = ctrl
    a_knot, b_knot = np.eye(nx), np.zeros((nx, model.nu))
    for _ in range(nstep):
      mujoco.mjd_transitionFD(model, data, eps, False, a, b, None, None)
      a_knot, b_knot = a @ a_knot, a @ b_knot + b
      mujoco.mj_step(model, data)
    out_a.append(a_knot)
    out_b.append(b_knot)
  return np.stack(out_a), np.stack(out_b)


def test_substeps_at_one_step_a_knot_is_mujocos_transition_fd(runner):
  sim, model, states, ctrls = runner
  tangent = StateTangent.of(model)
  settings = control.ILQRSettings(linearization="substeps", eps=1e-6)
  a, b = _dynamics(sim.params(1), tangent, states, ctrls, 1, settings)
  want_a, want_b = mujoco_jacobians(model, np.asarray(states[:-1]), np.asarray(ctrls), 1e-6, 1)
  np.testing.assert_array_equal(a, want_a)  # MuJoCo's own function: bit for bit
  np.testing.assert_array_equal(b, want_b)
  # The kink-safe default differs through contact (centred positions, copies kept on one side).
  a_knot, b_knot = _dynamics(sim.params(1), tangent, states, ctrls, 1,
                             settings._replace(linearization="knot"))
  assert not np.array_equal(a_knot, a)
  scale = np.abs(want_a).max()
  assert np.abs(np.asarray(a_knot) - want_a).max() < 0.5 * scale  # the same Jacobians, roughly
  assert np.abs(np.asarray(b_knot) - want_b).max() < 0.5 * np.abs(want_b).max()


def test_substeps_chains_each_physics_steps_transition_fd(runner):
  sim, model, states, ctrls = runner
  tangent = StateTangent.of(model)
  settings = control.ILQRSettings(linearization="substeps")
  nstep = 2
  starts = np.asarray(mjbatch_jax.rollout(states[:1], ctrls[None], sim.params(1), nstep=nstep)
                      [0][0])
  knots = jnp.asarray(np.concatenate([np.asarray(states[:1]), starts]))
  a, b = _dynamics(sim.params(1), tangent, knots, ctrls, nstep, settings)
  want_a, want_b = mujoco_jacobians(model, knots[:-1], np.asarray(ctrls), settings.eps, nstep)
  np.testing.assert_allclose(a, want_a, rtol=1e-9, atol=1e-9 * np.abs(want_a).max())
  np.testing.assert_allclose(b, want_b, rtol=1e-9, atol=1e-9 * np.abs(want_b).max())


def test_an_ilqr_solve_with_the_planning_linearisation_lowers_the_cost(runner):
  sim, model, states, ctrls = runner
  layout = sim.layout

  def residual(x, u, obs, t):  # torso up and forward
    return jnp.concatenate([x[layout.qpos][:3] - jnp.array([1.0, 0.0, 0.0]), 0.1 * u])

  cost = control.Cost(residual, (control.Term(3), control.Term(model.nu)))
  settings = control.ILQRSettings(linearization="substeps")
  result = control.ilqr(cost, sim.params(1), states[0], ctrls, iterations=3, settings=settings)
  assert float(result.cost) < float(result.costs[0])
  assert result.stopped in control.ILQR_STOPS
