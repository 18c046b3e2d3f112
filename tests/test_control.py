"""mjbatch_jax.control: the planners against known answers, and their refusals of bad input."""

import ctypes
import importlib

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import _ffi, control
from mjbatch_jax.control.backward import LocalModel, backward_pass
from mjbatch_jax.control.line_search import line_search
from mjbatch_jax.control.sampling import Settings
from mjbatch_jax.tangent import StateTangent

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


def test_ilqr_gains_are_ilqrs_at_each_mu_from_one_linearisation(point):
  horizon = 30
  cost = quadratic_cost(point, horizon)
  settings = control.ILQRSettings(mu_init=0.0, mu_min=0.0, eps=1e-3)
  start, params = point_start(point), point.params(1)
  optimal = control.ilqr(cost, params, start, jnp.zeros((horizon, 2)), iterations=5,
                         settings=settings).ctrls
  mus = [0.0, 0.1, 10.0]
  ks, gains = control.ilqr_gains(cost, params, start, optimal, mus, settings=settings)
  assert ks.shape == (3, horizon, 2) and gains.shape == (3, horizon, 2, 4)
  # mu 0 about the optimum: the Riccati gains and no feedforward left to take.
  np.testing.assert_allclose(np.asarray(gains[0]), np.array(riccati(horizon)), rtol=0, atol=1e-8)
  assert float(jnp.max(jnp.abs(ks[0]))) < 1e-8
  for m, mu in enumerate(mus):
    # Bit for bit: each row is the backward pass ilqr runs, about the same linearisation.
    one = control.ilqr(cost, params, start, optimal, iterations=0, mu=mu, settings=settings)
    np.testing.assert_array_equal(np.asarray(gains[m]), np.asarray(one.gains))
    np.testing.assert_array_equal(np.asarray(ks[m]), np.asarray(one.feedforward))
  # A larger mu damps the feedback.
  sizes = [float(jnp.linalg.norm(gains[m])) for m in range(3)]
  assert sizes[0] > sizes[1] > sizes[2] > 0
  jitted = jax.jit(lambda u, mu: control.ilqr_gains(cost, params, start, u, mu,
                                                    settings=settings))
  np.testing.assert_array_equal(np.asarray(jitted(optimal, jnp.asarray(mus))[1]),
                                np.asarray(gains))


def test_ilqr_gains_refuses_bad_mu_before_any_custom_call(point, no_custom_calls):
  horizon = 5
  cost, start, params = quadratic_cost(point, horizon), point_start(point), point.params(1)
  ctrls = jnp.zeros((horizon, 2))
  for mu, pattern in (([], r"non-empty 1-D"), (1.0, r"non-empty 1-D"), ([[1.0]], r"1-D"),
                      (["a"], r"sequence of numbers"), ([1.0, np.nan], r"finite and >= 0"),
                      ([-1.0], r"finite and >= 0"), ([True], r"numbers")):
    with pytest.raises(ValueError, match=pattern):
      control.ilqr_gains(cost, params, start, ctrls, mu)
  with pytest.raises(ValueError, match=r"\(T, nu=2\)"):
    control.ilqr_gains(cost, params, start, jnp.zeros((5, 3)), [1.0])


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


def test_ilqr_accept_guards_the_steps_about_one_linearisation(point):
  """A step accept refuses counts as no improvement: mu grows and the same linearisation is
  solved again; the solve ends on plans the guard accepts."""
  horizon = 20
  cost, start, params = quadratic_cost(point, horizon), point_start(point), point.params(1)
  settings = control.ILQRSettings(mu_init=1.0, mu_min=1e-6, mu_fail_factor=10.0, max_retries=3)
  zeros = jnp.zeros((horizon, 2))
  free = control.ilqr(cost, params, start, zeros, iterations=10, settings=settings)
  # Accepting every plan is no guard: the same solve, bit for bit.
  same = control.ilqr(cost, params, start, zeros, iterations=10, settings=settings,
                      accept=lambda xs, us: jnp.asarray(True))
  for a, b in zip(free, same, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

  # Refusing every plan: asked once per try (the first and max_retries more, mu 1 to 1e3), the
  # start plan stays and the solve stops after the one iteration.
  asked = []

  def record(us):
    asked.append(np.asarray(us).copy())
    return np.asarray(False)

  def refuse_all(xs, us):
    return jax.pure_callback(record, jax.ShapeDtypeStruct((), jnp.bool_), us)

  stuck = control.ilqr(cost, params, start, zeros, iterations=10, settings=settings,
                       accept=refuse_all)
  assert len(asked) == 4
  np.testing.assert_array_equal(np.asarray(stuck.ctrls), np.zeros((horizon, 2)))
  assert float(stuck.cost) == float(stuck.costs[0]) and int(stuck.iterations) == 1
  assert float(stuck.mu) == pytest.approx(1e4)
  # Each retry is a shorter step about the same plan (a larger mu, one linearisation).
  steps = [float(np.abs(u).max()) for u in asked]
  assert steps[0] > steps[1] > steps[2] > steps[3] > 0

  # A guard the cost does not know: no control above 0.3 in size. The unguarded optimum breaks
  # it; the guarded solve keeps to it and still lowers the cost.
  limit = 0.3
  assert float(jnp.max(jnp.abs(free.ctrls))) > limit
  guarded = control.ilqr(cost, params, start, zeros, iterations=10, settings=settings,
                         accept=lambda xs, us: jnp.max(jnp.abs(us)) <= limit)
  assert float(jnp.max(jnp.abs(guarded.ctrls))) <= limit
  assert float(free.cost) < float(guarded.cost) < float(guarded.costs[0])


@pytest.mark.slow
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


def test_the_backward_pass_alone_is_the_discrete_lqr_solution():
  """On a linear-quadratic model the Riccati pass gives the LQR gains, and the feedforward at
  the start is the LQR control there (the nominal plan: zero controls from x0)."""
  horizon = 12
  a, b = point_dynamics()
  x0 = np.r_[1.0, -0.5, 0.2, 0.3]
  xs = [x0]
  for _ in range(horizon):
    xs.append(a @ xs[-1])
  xs = np.array(xs)
  l_xx = np.array([Q] * horizon + [Q_FINAL])
  model = LocalModel(
    a=jnp.asarray(np.broadcast_to(a, (horizon, 4, 4))),
    b=jnp.asarray(np.broadcast_to(b, (horizon, 4, 2))),
    l_x=jnp.asarray(np.einsum("tij,tj->ti", l_xx, xs)), l_u=jnp.zeros((horizon + 1, 2)),
    l_xx=jnp.asarray(l_xx), l_ux=jnp.zeros((horizon + 1, 2, 4)),
    l_uu=jnp.asarray(np.array([R] * horizon + [np.zeros((2, 2))])))
  us = jnp.zeros((horizon, 2))
  pass_ = jax.jit(backward_pass, static_argnums=5)
  ks, gains, dv, ok = pass_(model, us, 0.0, -jnp.inf * jnp.ones(2), jnp.inf * jnp.ones(2), 10)
  gains_lqr = riccati(horizon)
  assert bool(ok)
  np.testing.assert_allclose(np.asarray(gains), np.array(gains_lqr), rtol=0, atol=1e-10)
  np.testing.assert_allclose(np.asarray(ks[0]), gains_lqr[0] @ x0, rtol=0, atol=1e-10)
  assert float(dv[0]) < 0  # the expected decrease's linear term: a descent
  # A tight box: every control clamped, so no feedback and the feedforward at the bound.
  ks, gains, _, ok = pass_(model, us, 0.0, -1e-3 * jnp.ones(2), 1e-3 * jnp.ones(2), 10)
  assert bool(ok) and np.all(np.abs(np.asarray(ks)) <= 1e-3)
  clamped = np.abs(np.asarray(ks)) == 1e-3
  assert clamped[0].all() and np.all(np.asarray(gains)[clamped] == 0.0)
  # A Q_uu + mu I that is not positive definite fails the pass.
  assert not bool(pass_(model._replace(l_uu=-model.l_uu), us, 0.0, -jnp.ones(2), jnp.ones(2),
                        10)[3])


def test_the_line_search_alone_rolls_out_each_step_size(point):
  horizon = 6
  cost = quadratic_cost(point, horizon)
  params, start = point.params(1), point_start(point)
  us = 0.1 * jnp.ones((horizon, 2))
  states, _ = mjbatch_jax.rollout(start[None], us[None], params)
  states = jnp.concatenate([start[None], states[0]])
  w = control.cost.weights(cost.terms, horizon)
  tangent = StateTangent.of(point.model)
  search = jax.jit(line_search, static_argnums=(0, 3), static_argnames=("step_sizes", "nstep"))

  def run(ks, gains, step_sizes, lower=-np.inf, upper=np.inf):
    lower, upper = jnp.full(2, lower), jnp.full(2, upper)
    return search(control.cost.static(cost), w, params, tangent, states, us, ks, gains, {},
                  step_sizes=step_sizes, lower=lower, upper=upper, nstep=1)

  zero_k, zero_gain = jnp.zeros((horizon, 2)), jnp.zeros((horizon, 2, 4))
  # No change: every row is the nominal plan; the first of equal costs is the one picked.
  xs, new_us, value, best = run(zero_k, zero_gain, (1.0, 0.5))
  np.testing.assert_array_equal(np.asarray(xs), np.asarray(states))
  np.testing.assert_array_equal(np.asarray(new_us), np.asarray(us))
  assert int(best) == 0
  # Step 1 of a feedforward that cancels the plan reaches zero controls, the cheaper plan
  # (the mass coasts from its start); the controls are clipped to the box.
  xs, new_us, value, best = run(-us, zero_gain, (0.25, 1.0))
  assert int(best) == 1
  np.testing.assert_allclose(np.asarray(new_us), 0.0, atol=1e-15)
  coast, _ = mjbatch_jax.rollout(start[None], jnp.zeros((1, horizon, 2)), params)
  np.testing.assert_array_equal(np.asarray(xs[1:]), np.asarray(coast[0]))
  _, clipped, _, _ = run(10.0 * jnp.ones((horizon, 2)), zero_gain, (1.0,), -0.2, 0.3)
  np.testing.assert_array_equal(np.asarray(clipped), 0.3)


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
  refused(r"one boolean .*got ShapeDtypeStruct\(shape=\(5,\)", accept=lambda xs, us: us[:, 0] > 0)
  refused(r"one boolean .*dtype=float", accept=lambda xs, us: jnp.sum(us))
  with pytest.raises(ValueError, match=r"accept must be a function"):
    control.ilqr(good, params, start, ctrls, accept=True)  # type: ignore[arg-type]


def test_ilqr_refuses_a_cost_that_is_not_finite_on_the_initial_plan(point):
  horizon = 5
  good = quadratic_cost(point, horizon)
  nan = good._replace(residual=lambda x, u, obs, t: good.residual(x, u, obs, t) * jnp.where(
    t == 3, jnp.nan, 1.0))
  with pytest.raises(ValueError, match=r"not finite.*term 0 at knot 3"):
    control.ilqr(nan, point.params(1), point_start(point), jnp.zeros((horizon, 2)))


# -- plans as knots ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", control.splines.INTERPOLATIONS)
def test_splines_with_a_knot_per_control_are_the_identity(kind):
  np.testing.assert_allclose(control.splines.matrix(7, 7, kind), np.eye(7), atol=1e-15)
  np.testing.assert_allclose(control.splines.shift_matrix(7, 7, kind, 0), np.eye(7), atol=1e-15)


def test_splines_interpolate_and_shift():
  horizon, knots = 25, 6
  ramp = np.arange(knots, dtype=float)
  linear = control.splines.matrix(knots, horizon, "linear")
  cubic = control.splines.matrix(knots, horizon, "cubic")
  # Both reproduce a straight line through their knots (cubic: its slopes are exact for it).
  line = np.linspace(0, knots - 1, horizon)
  np.testing.assert_allclose(linear @ ramp, line, atol=1e-12)
  np.testing.assert_allclose(cubic @ ramp, line, atol=1e-12)
  np.testing.assert_allclose(linear.sum(axis=1), 1.0)
  zero = control.splines.matrix(5, 25, "zero")
  np.testing.assert_array_equal(zero @ np.arange(5.0), np.repeat(np.arange(5.0), 5))
  # Shifting by a whole knot interval moves the knots one place, holding the last.
  step = 24 / 5
  np.testing.assert_allclose(control.splines.shift_matrix(knots, horizon, "linear", step) @ ramp,
                             np.r_[ramp[1:], ramp[-1]], atol=1e-12)


# -- sampling planners ---------------------------------------------------------------------------


def test_sampling_planners_reduce_a_convex_cost_monotonically_in_expectation(point):
  horizon = 20
  cost = quadratic_cost(point, horizon)
  start = point_start(point)
  common = {"num_samples": 64, "num_knots": 5, "noise": 0.3}
  for settings in (control.PredictiveSettings(**common),
                   control.MPPISettings(**common, temperature=0.05),
                   control.CEMSettings(**common, num_elites=8)):
    method = settings.method
    planner = control.sampling(cost, point.params(1), horizon=horizon, settings=settings,
                               bounds=(-2.0, 2.0))
    seeds, rounds = 8, 6
    nominal = np.zeros((seeds, rounds))
    for seed in range(seeds):
      plan = planner.init()
      for i in range(rounds):
        plan, info = planner.update(plan, start, jax.random.PRNGKey(100 * seed + i))
        nominal[seed, i] = float(info.nominal_cost)  # the cost of the plan it started from
    mean = nominal.mean(axis=0)
    assert np.all(np.diff(mean) < 0), (method, mean)
    if method == "predictive":  # the plan is a candidate: never worse, in every run
      assert np.all(np.diff(nominal, axis=1) <= 0)


def test_a_diverging_candidate_never_aborts_a_planning_step(point):
  horizon = 10
  cost = quadratic_cost(point, horizon)
  # Unlimited controls and a spread of 1e11 N: every candidate but the plan itself makes qacc
  # exceed MuJoCo's limit, and MuJoCo resets that simulation.
  settings = control.PredictiveSettings(num_samples=16, num_knots=10, noise=1e11)
  planner = control.sampling(cost, point.params(1), horizon=horizon, settings=settings)
  plan, info = planner.update(planner.init(), point_start(point), jax.random.PRNGKey(0))
  assert int(info.failed) == 15
  assert np.isfinite(float(info.cost)) and float(info.cost) == float(info.nominal_cost)
  np.testing.assert_array_equal(np.asarray(plan.knots), 0.0)  # the plan stands
  for others in (control.MPPISettings(16, 10, noise=1e11),
                 control.CEMSettings(16, 10, noise=1e11, num_elites=2)):
    other = control.sampling(cost, point.params(1), horizon=horizon, settings=others)
    plan, info = other.update(other.init(), point_start(point), jax.random.PRNGKey(0))
    assert int(info.failed) == 15 and np.all(np.isfinite(np.asarray(plan.knots)))


@pytest.mark.slow
def test_receding_horizon_is_the_planner_then_the_first_control(point):
  horizon = 10
  cost = quadratic_cost(point, horizon)
  settings = control.CEMSettings(num_samples=32, num_knots=4, noise=0.5, num_elites=4)
  planner = control.sampling(cost, point.params(1), horizon=horizon, settings=settings)
  step = control.receding_horizon(planner, point.params(1), apply=2)
  start, plan, key = point_start(point), planner.init(), jax.random.PRNGKey(3)
  state, new_plan, info = step(start, plan, key)
  planned, _ = planner.update(plan, start, jax.random.split(key)[0])
  ctrls = planner.controls(planned)[:2]
  states, _ = mjbatch_jax.rollout(start[None], ctrls[None], point.params(1))
  np.testing.assert_array_equal(np.asarray(state), np.asarray(states[0, -1]))
  np.testing.assert_array_equal(np.asarray(new_plan.knots),
                                np.asarray(planner.shift(planned, 2).knots))
  # iLQR as the planner drives the mass to the origin; per-candidate params for sampling.
  ilqr_step = control.receding_horizon(control.ilqr_planner(cost, point.params(1),
                                                            horizon=horizon), point.params(1))
  state, plan = start, control.ilqr_planner(cost, point.params(1), horizon=horizon).init()
  distances = []
  for k in range(60):
    state, plan, result = ilqr_step(state, plan, jax.random.PRNGKey(k))
    distances.append(float(np.linalg.norm(np.asarray(state[point.layout.qpos]))))
  assert distances[-1] < 0.1 * distances[0], distances
  masses = point.params(32, ("body_mass",))
  randomized = control.receding_horizon(
    control.sampling(cost, masses, horizon=horizon, settings=settings), point.params(1),
    randomize=lambda k: mjbatch_jax.randomize(k, masses, scale={"body_mass": (0.5, 2.0)}))
  state, _, info = randomized(start, planner.init(), key)
  assert np.isfinite(float(info.cost))


def test_sampling_refuses_bad_input_before_any_custom_call(point, no_custom_calls):
  cost, params = quadratic_cost(point, 10), point.params(1)

  def refused(pattern, horizon=10, kind: type[Settings] = control.PredictiveSettings, **change):
    settings = kind(num_samples=8, num_knots=4)._replace(
      **{k: v for k, v in change.items() if k in kind._fields})
    rest = {k: v for k, v in change.items() if k not in kind._fields}
    settings = rest.pop("settings", settings)
    with pytest.raises(ValueError, match=pattern):
      control.sampling(rest.pop("cost", cost), rest.pop("params", params), horizon=horizon,
                       settings=settings, **rest)

  refused(r"num_knots \(11\) must be at most the horizon \(10", num_knots=11)
  refused(r"horizon must be an int >= 1, got 0", horizon=0, num_knots=1)
  refused(r"lower > upper", bounds=(1.0, -1.0))
  refused(r"interpolation must be one of", interpolation="quadratic")
  refused(r"settings must be control.PredictiveSettings, control.MPPISettings or "
          r"control.CEMSettings, got ILQRSettings", settings=control.ILQRSettings())
  refused(r"num_elites must be in \[1, num_samples=8\]", kind=control.CEMSettings, num_elites=9)
  refused(r"temperature must be a finite number > 0", kind=control.MPPISettings, temperature=0.0)
  refused(r"noise must be a number >= 0 or num_knots=4", noise=(0.1, 0.2))
  refused(r"must return one vector", cost=cost._replace(residual=lambda x, u, o, t: u))
  refused(r"params\['body_mass'\] must have shape \(1, 2\) or \(8, 2\)",
          params=point.params(3, ("body_mass",)))
  planner = control.sampling(cost, params, horizon=10,
                             settings=control.PredictiveSettings(num_samples=8, num_knots=4))
  with pytest.raises(ValueError, match=r"state must be one state row"):
    planner.update(planner.init(), jnp.zeros(2), jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match=r"horizon's 10 controls"):
    planner.init(jnp.zeros((9, 2)))
  with pytest.raises(ValueError, match=r"apply \(11\) must be at most"):
    control.receding_horizon(planner, params, apply=11)


def test_cem_and_mppi_updates_on_vectors():
  samples = jnp.array([[0.0, 0.0], [1.0, 2.0], [3.0, 4.0], [10.0, 10.0]])
  costs = jnp.array([3.0, 1.0, 2.0, jnp.inf])
  mean, std = control.cem_update(jnp.zeros(2), jnp.ones(2), samples, costs, num_elites=2)
  np.testing.assert_allclose(mean, [2.0, 3.0])
  np.testing.assert_allclose(std, [1.0, 1.0])
  mean, _ = control.cem_update(jnp.zeros(2), jnp.ones(2), samples, costs, 2, smoothing=0.5,
                               std_min=2.0)
  np.testing.assert_allclose(mean, [1.0, 1.5])
  weights = np.exp(-(np.array([3.0, 1.0, 2.0]) - 1.0) / 0.5)
  np.testing.assert_allclose(control.mppi_update(samples, costs, 0.5),
                             weights @ np.asarray(samples[:3]) / weights.sum())
  np.testing.assert_array_equal(control.mppi_update(samples, jnp.full(4, jnp.inf), 1.0),
                                samples[0])
  draws = control.gaussian_samples(jax.random.PRNGKey(0), jnp.array([0.5, -0.5]),
                                   jnp.array(10.0), 100, -1.0, 1.0)
  assert draws.shape == (100, 2) and float(jnp.abs(draws).max()) <= 1.0
  np.testing.assert_array_equal(draws[0], [0.5, -0.5])


def test_the_deprecated_sampling_names_warn_and_plan_as_the_new_ones(point):
  cost = quadratic_cost(point, 10)
  with pytest.warns(DeprecationWarning, match=r"SamplingSettings is deprecated"):
    # num_elites is CEM's: checked, then dropped for MPPI (it was never > num_samples there).
    old = control.SamplingSettings("mppi", 8, 4, noise=0.5, temperature=0.2, num_elites=99)
  new = control.MPPISettings(8, 4, noise=0.5, temperature=0.2)
  infos = []
  for settings in (old, new):
    planner = control.sampling(cost, point.params(1), horizon=10, settings=settings)
    plan, info = planner.update(planner.init(), point_start(point), jax.random.PRNGKey(1))
    infos.append((np.asarray(plan.knots), info))
  np.testing.assert_array_equal(infos[0][0], infos[1][0])  # the same plan, to the bit
  assert isinstance(infos[1][1], control.SamplingResult)
  # Every field of the old bag is still checked, the other methods' too.
  with pytest.warns(DeprecationWarning):
    bad = control.SamplingSettings("cem", 8, 4, temperature=0.0)
  with pytest.raises(ValueError, match=r"settings.temperature must be a finite number > 0"):
    control.sampling(cost, point.params(1), horizon=10, settings=bad)
  with pytest.warns(DeprecationWarning):
    bad = control.SamplingSettings("random", 8, 4)
  with pytest.raises(ValueError, match=r"settings.method must be one of"):
    control.sampling(cost, point.params(1), horizon=10, settings=bad)
  sampling_module = importlib.import_module("mjbatch_jax.control.sampling")
  for module in (control, sampling_module):
    with pytest.warns(DeprecationWarning, match=r"SamplingInfo is control.SamplingResult now"):
      assert module.SamplingInfo is control.SamplingResult
    assert not hasattr(module, "SamplingNothing")
  assert control.SETTINGS == {"predictive": control.PredictiveSettings,
                              "mppi": control.MPPISettings, "cem": control.CEMSettings}
  assert {kind().method for kind in control.SETTINGS.values()} == set(control.METHODS)


def test_a_diverging_line_search_row_never_aborts_an_ilqr_iteration(point):
  horizon = 5
  layout = point.layout
  # A target 1e9 m away with almost free controls: the full step asks for accelerations beyond
  # MuJoCo's 1e10 limit, which resets those rows (a warning): only shorter steps count.
  far = jnp.array([1e9, 0.0])

  def residual(x, u, obs, t):
    return jnp.concatenate([x[layout.qpos] - far, 1e-6 * u])

  cost = control.Cost(residual, (control.Term(2), control.Term(2)))
  result = control.ilqr(cost, point.params(1), point_start(point), jnp.zeros((horizon, 2)),
                        iterations=1, settings=control.ILQRSettings(mu_init=0.0, mu_min=0.0))
  costs = np.asarray(result.costs)
  assert float(np.abs(np.asarray(result.feedforward)).max()) > 1e11  # a full step diverges
  assert np.isfinite(costs[1]) and costs[1] < costs[0]  # a shorter step was accepted
  assert float(np.abs(np.asarray(result.ctrls)).max()) < 1e10  # not the diverging full step
  states, _, warnings = mjbatch_jax.rollout(point_start(point)[None], result.ctrls[None],
                                            point.params(1), return_warnings=True)
  assert int(warnings.sum()) == 0


def test_a_non_finite_backward_pass_never_reaches_mujoco(point, capfd):
  # sqrt(|u|) at u = 0: a finite cost whose control Jacobian is 0 * inf = NaN, so every
  # feedforward is NaN. Those rows are refused before they are stepped: MuJoCo never sees a NaN
  # control (it would print a warning per row and reset the simulation).
  layout = point.layout

  def residual(x, u, obs, t):
    return jnp.concatenate([x[layout.qpos], jnp.sqrt(jnp.abs(u))])

  cost = control.Cost(residual, (control.Term(2), control.Term(2)))
  ctrls = jnp.zeros((4, 2))
  result = jax.block_until_ready(
    control.ilqr(cost, point.params(1), point_start(point), ctrls, iterations=2))
  ctypes.CDLL(None).fflush(None)  # MuJoCo prints its warnings with C stdio, buffered in a pipe
  out, err = capfd.readouterr()
  assert "WARNING" not in out + err
  assert not np.isfinite(np.asarray(result.feedforward)).all()  # the backward pass did fail
  np.testing.assert_array_equal(np.asarray(result.ctrls), np.asarray(ctrls))  # kept the plan
  assert int(result.iterations) == 1 and np.isfinite(float(result.cost))


def test_sampling_with_observations_and_per_candidate_params(point):
  horizon, samples = 8, 16
  target = jnp.array([0.5, -0.2, 0.0])

  def residual(x, u, obs, t):
    return jnp.concatenate([obs["xpos"][1] - target, 0.1 * u])

  cost = control.Cost(residual, (control.Term(3, 10.0), control.Term(2)), observe=("xpos",))
  masses = mjbatch_jax.randomize(jax.random.PRNGKey(0), point.params(samples, ("body_mass",)),
                                 scale={"body_mass": (0.5, 2.0)})
  settings = control.PredictiveSettings(samples, 4, noise=0.5)
  planner = control.sampling(cost, masses, horizon=horizon, settings=settings)
  plan, info = planner.update(planner.init(), point_start(point), jax.random.PRNGKey(1))
  # The plan's own cost, by hand: candidate 0 with the first candidate's params.
  ctrls = planner.controls(planner.init())
  first = masses.replace({"body_mass": masses["body_mass"][:1]})
  states, _, obs = mjbatch_jax.rollout(point_start(point)[None], ctrls[None], first,
                                       observe=("xpos",))
  xpos = np.concatenate([np.asarray(mjbatch_jax.forward(point_start(point)[None], first,
                                                        ("xpos",))["xpos"]), obs["xpos"][0]])
  held = np.concatenate([ctrls, ctrls[-1:]])
  r = np.concatenate([xpos[:, 1] - np.asarray(target), 0.1 * held], axis=1)
  expected = 10.0 * 0.5 * np.sum(r[:, :3] ** 2) + 0.5 * np.sum(r[:, 3:] ** 2)
  assert float(info.nominal_cost) == pytest.approx(expected, rel=1e-12)
  assert float(info.cost) <= float(info.nominal_cost)


def test_a_candidate_whose_simulation_errors_costs_infinity_and_the_plan_goes_on():
  from tests.test_partial import PILE, SPHERES

  model = mujoco.MjModel.from_xml_string(PILE)
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    samples, jam = 32, 5
    spheres = list(range(2, 2 + SPHERES))
    params = sim.params(samples, ("geom_pos",), select={"geom_pos": spheres}, set_const=True)
    # Candidate 5's spheres drawn into one another: its every step overflows MuJoCo's stack, a
    # MuJoCo error, which the rollout's partial results keep as that candidate's error code.
    into = np.array([[0.05 * i - i % 4, -(i // 4), 0.01 * i] for i in range(SPHERES)])
    params = params.replace({"geom_pos": params["geom_pos"].at[jam].set(into)})
    slide = sim.layout.qpos.start

    def residual(x, u, obs, t):
      return jnp.concatenate([x[slide : slide + 1] - 1.0, 0.1 * u])

    cost = control.Cost(residual, (control.Term(1), control.Term(1)))
    settings = control.PredictiveSettings(samples, 4, noise=0.5)
    planner = control.sampling(cost, params, horizon=10, nstep=2, settings=settings)
    plan, state = planner.init(), sim.init_state(1)[0]
    step = control.receding_horizon(planner, sim.params(1))
    for k in range(5):
      state, plan, info = step(state, plan, jax.random.PRNGKey(k))
      assert int(info.failed) == 1 and np.isfinite(float(info.cost))
    assert float(state[slide]) > 0.0  # the cart moved towards its target
