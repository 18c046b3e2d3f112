"""mjbatch_jax.control: the planners against known answers, and their refusals of bad input."""

import itertools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import _ffi, control

jax.config.update("jax_enable_x64", True)

# A point mass on two slides, no gravity, no contact, Euler steps: x' = A x + B u exactly.
POINT_XML = """
<mujoco>
  <option timestep="0.05" integrator="Euler" gravity="0 0 0"><flag contact="disable"/></option>
  <worldbody>
    <body>
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="y" type="slide" axis="0 1 0"/>
      <geom type="sphere" size=".1" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="x"/><motor joint="y"/></actuator>
</mujoco>
"""
H = 0.05
Q = np.diag([1.0, 2.0, 0.5, 0.3])
R = np.diag([0.1, 0.2])
Q_FINAL = 10 * Q


def point_dynamics() -> tuple[np.ndarray, np.ndarray]:
  """Semi-implicit Euler of a unit mass: v' = v + h u, q' = q + h v'."""
  a = np.eye(4)
  a[:2, 2:] = H * np.eye(2)
  b = np.zeros((4, 2))
  b[2:] = H * np.eye(2)
  b[:2] = H * H * np.eye(2)
  return a, b


def riccati(horizon: int) -> list[np.ndarray]:
  """The finite-horizon discrete LQR gains u_t = K_t x_t of cost sum x'Qx/2 + u'Ru/2 + final."""
  a, b = point_dynamics()
  p, gains = Q_FINAL, []
  for _ in range(horizon):
    k = -np.linalg.solve(R + b.T @ p @ b, b.T @ p @ a)
    gains.append(k)
    p = Q + a.T @ p @ (a + b @ k)
  return gains[::-1]


@pytest.fixture(scope="module")
def point():
  with mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(POINT_XML), num_threads=1) as sim:
    yield sim


def quadratic_cost(sim, horizon: int) -> control.Cost:
  layout = sim.layout

  def residual(x, u, obs, t):
    s = jnp.concatenate([x[layout.qpos], x[layout.qvel]])
    return jnp.concatenate([np.sqrt(np.diag(Q)) * s, np.sqrt(np.diag(R)) * u,
                            np.sqrt(np.diag(Q_FINAL)) * s])

  running = np.r_[np.ones(horizon), 0.0]
  return control.Cost(residual, (control.Term(4, running), control.Term(2, running),
                                 control.Term(4, 1.0 - running)))


def point_start(sim):
  layout = sim.layout
  return sim.init_state(1)[0].at[layout.qpos].set(jnp.array([1.0, -0.5])).at[layout.qvel].set(
    jnp.array([0.2, 0.3]))


def test_ilqr_on_a_linear_quadratic_problem_is_riccati_in_one_iteration(point):
  horizon = 30
  # No regularisation, and a larger difference step: linear dynamics make it exact, and it keeps
  # the finite differences' rounding far below the tolerance.
  settings = control.ILQRSettings(mu_init=0.0, mu_min=0.0, eps=1e-3)
  result = control.ilqr(quadratic_cost(point, horizon), point.params(1), point_start(point),
                        jnp.zeros((horizon, 2)), iterations=5, settings=settings)
  gains = riccati(horizon)
  np.testing.assert_allclose(np.asarray(result.gains), np.array(gains), rtol=0, atol=1e-8)
  a, b = point_dynamics()
  x, optimum, ctrls = np.r_[1.0, -0.5, 0.2, 0.3], 0.0, []
  for k in gains:
    u = k @ x
    optimum += 0.5 * (x @ Q @ x + u @ R @ u)
    ctrls.append(u)
    x = a @ x + b @ u
  optimum += 0.5 * x @ Q_FINAL @ x
  np.testing.assert_allclose(np.asarray(result.ctrls), np.array(ctrls), rtol=0, atol=1e-8)
  costs = np.asarray(result.costs)
  assert costs[0] > 2 * optimum
  assert costs[1] == pytest.approx(optimum, rel=1e-10)  # the first iteration reaches it
  assert bool(result.converged) and int(result.iterations) <= 2
  assert np.all(np.isnan(costs[int(result.iterations) + 1 :]))
  # The returned states are the trajectory of the returned controls.
  states, _ = mjbatch_jax.rollout(point_start(point)[None], result.ctrls[None], point.params(1))
  np.testing.assert_array_equal(np.asarray(states[0]), np.asarray(result.states[1:]))


def test_ilqr_is_jittable_and_warm_starts(point):
  horizon = 20
  cost = quadratic_cost(point, horizon)
  solve = jax.jit(lambda s, u: control.ilqr(cost, point.params(1), s, u, iterations=3))
  first = solve(point_start(point), jnp.zeros((horizon, 2)))
  again = solve(point_start(point), first.ctrls)  # warm start: already optimal
  assert float(again.costs[0]) == pytest.approx(float(first.cost), rel=1e-12)
  assert float(again.cost) <= float(first.cost)
  shifted = control.shift(first.ctrls, 3)
  np.testing.assert_array_equal(np.asarray(shifted[:-3]), np.asarray(first.ctrls[3:]))
  np.testing.assert_array_equal(np.asarray(shifted[-3:]),
                                np.broadcast_to(np.asarray(first.ctrls[-1]), (3, 2)))


def test_ilqr_keeps_controls_in_their_box(point):
  horizon = 30
  result = control.ilqr(quadratic_cost(point, horizon), point.params(1), point_start(point),
                        jnp.zeros((horizon, 2)), iterations=20, bounds=(-0.5, 0.3))
  ctrls = np.asarray(result.ctrls)
  assert ctrls.min() >= -0.5 and ctrls.max() <= 0.3
  assert np.any(ctrls == -0.5) or np.any(ctrls == 0.3)  # the box binds
  unboxed = control.ilqr(quadratic_cost(point, horizon), point.params(1), point_start(point),
                         jnp.zeros((horizon, 2)), iterations=20)
  assert float(unboxed.cost) < float(result.cost) < float(result.costs[0])
  # No clamped control has feedback.
  clamped = (ctrls == -0.5) | (ctrls == 0.3)
  assert np.all(np.asarray(result.gains)[clamped] == 0.0)


def test_box_qp_matches_enumerated_active_sets():
  rng = np.random.default_rng(0)
  for _ in range(20):
    m = 3
    root = rng.normal(size=(m, m))
    h = root @ root.T + 0.1 * np.eye(m)
    g = rng.normal(size=m) * 3
    lower, upper = -rng.uniform(0.1, 1, m), rng.uniform(0.1, 1, m)
    d, gain, pd = control.box_qp(jnp.asarray(h), jnp.asarray(g), jnp.eye(m), jnp.asarray(lower),
                                 jnp.asarray(upper), 20)
    best = np.inf
    # Every assignment of each entry to free, lower or upper: the feasible KKT point is the
    # minimum of a strictly convex QP.
    for assignment in itertools.product((0, 1, 2), repeat=m):
      fixed = np.array([np.nan, 0, 0])[list(assignment)]
      x = np.where(np.array(assignment) == 1, lower, np.where(np.array(assignment) == 2, upper,
                                                              fixed))
      free = np.array(assignment) == 0
      if free.any():
        rhs = -(g[free] + h[np.ix_(free, ~free)] @ x[~free])
        x[free] = np.linalg.solve(h[np.ix_(free, free)], rhs)
      if np.all(x >= lower - 1e-12) and np.all(x <= upper + 1e-12):
        best = min(best, 0.5 * x @ h @ x + g @ x)
    value = 0.5 * np.asarray(d) @ h @ np.asarray(d) + g @ np.asarray(d)
    assert bool(pd)
    assert value == pytest.approx(best, rel=1e-9, abs=1e-12)
    free = (np.asarray(d) > lower) & (np.asarray(d) < upper)
    assert np.all(np.asarray(gain)[~free] == 0)
  assert not bool(control.box_qp(-jnp.eye(2), jnp.ones(2), jnp.eye(2), -jnp.ones(2),
                                 jnp.ones(2), 5)[2])


@pytest.fixture
def no_custom_calls(monkeypatch):
  """Every custom call raises: a refusal must come before any of them."""
  def refuse(*args, **kwargs):
    raise AssertionError("a custom call ran before the input was refused")

  for module in _ffi.TARGETS.values():
    monkeypatch.setattr(module, "call", refuse)


def test_ilqr_refuses_bad_input_before_any_custom_call(point, no_custom_calls):
  horizon = 5
  good = quadratic_cost(point, horizon)
  start, ctrls, params = point_start(point), jnp.zeros((horizon, 2)), point.params(1)

  def refused(pattern, **change):
    args = {"cost": good, "params": params, "start": start, "ctrls": ctrls, **change}
    with pytest.raises(ValueError, match=pattern):
      control.ilqr(args.pop("cost"), args.pop("params"), args.pop("start"), args.pop("ctrls"),
                   **args)

  refused(r"horizon of 0", ctrls=jnp.zeros((0, 2)))
  refused(r"\(T, nu=2\)", ctrls=jnp.zeros((5, 3)))
  refused(r"shape \(\d+,\)", start=jnp.zeros(3))
  wrong = good._replace(residual=lambda x, u, obs, t: jnp.zeros(3))
  refused(r"must return one vector of shape \(10,\).*got \(3,\)", cost=wrong)
  refused(r"lower > upper for controls \[1\]", bounds=(jnp.array([-1.0, 1.0]),
                                                      jnp.array([1.0, 0.0])))
  refused(r"one value per knot", cost=good._replace(terms=(control.Term(4, np.ones(3)),
                                                           *good.terms[1:])))
  refused(r"norm must be one of", cost=good._replace(terms=(control.Term(10, 1.0, "l1"),)))
  refused(r"param must be finite and > 0", cost=good._replace(
    terms=(control.Term(10, 1.0, "huber"),)))
  refused(r"iterations must be an int >= 0", iterations=-1)
  refused(r"nstep must be an int >= 1", nstep=0)
  refused(r"params\['body_mass'\] must have shape \(1, 2\)",
          params=point.params(3, ("body_mass",)))
  refused(r"mu_min <= mu_init", settings=control.ILQRSettings(mu_init=-1.0))
  refused(r"Cost.observe must be a sequence", cost=good._replace(observe="xpos"))


def test_ilqr_refuses_a_cost_that_is_not_finite_on_the_initial_plan(point):
  horizon = 5
  good = quadratic_cost(point, horizon)
  nan = good._replace(residual=lambda x, u, obs, t: good.residual(x, u, obs, t) * jnp.where(
    t == 3, jnp.nan, 1.0))
  with pytest.raises(ValueError, match=r"not finite.*term 0 at knot 3"):
    control.ilqr(nan, point.params(1), point_start(point), jnp.zeros((horizon, 2)))
