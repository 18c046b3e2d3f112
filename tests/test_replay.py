"""control.replay: a plan replayed open and closed loop against iLQR and MuJoCo's own mj_step."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import _ffi, control
from mjbatch_jax.control import replay

jax.config.update("jax_enable_x64", True)

# A torque-driven pendulum with sensors.
PENDULUM_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body name="pole">
      <joint name="hinge" axis="0 1 0" damping=".05"/>
      <geom type="capsule" fromto="0 0 0 0 0 -.5" size=".03" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" ctrlrange="-4 4" ctrllimited="true"/></actuator>
  <sensor><jointpos joint="hinge"/><jointvel joint="hinge"/></sensor>
</mujoco>
"""

# A body on a ball joint, three torques: the feedback's position difference is a rotation.
BALL_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body name="arm">
      <joint name="ball" type="ball" damping=".1"/>
      <geom type="capsule" fromto="0 0 0 .3 .1 -.4" size=".03" mass="1"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="ball" gear="1 0 0" ctrlrange="-2 2" ctrllimited="true"/>
    <motor joint="ball" gear="0 1 0" ctrlrange="-2 2" ctrllimited="true"/>
    <motor joint="ball" gear="0 0 1"/>
  </actuator>
  <sensor><ballquat joint="ball"/></sensor>
</mujoco>
"""

HORIZON, NSTEP = 15, 2
GOAL = 0.8


@pytest.fixture(scope="module")
def pendulum():
  with mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(PENDULUM_XML), num_threads=1) as sim:
    yield sim


def swing_cost(sim) -> control.Cost:
  """To GOAL rad and held there (inside the torque limits: the plan gets feedback everywhere);
  the position weighed again, heavily, at the last knot."""
  layout = sim.layout

  def residual(x, u, obs, t):
    up = x[layout.qpos] - GOAL
    return jnp.concatenate([up, x[layout.qvel], u, up])

  final = np.r_[np.zeros(HORIZON), 1.0]
  return control.Cost(residual, (control.Term(1, 1.0), control.Term(1, 0.1),
                                 control.Term(1, 0.01), control.Term(1, 50.0 * final)))


@pytest.fixture(scope="module")
def plan(pendulum):
  """An iLQR plan from rest at 0.3 rad: (start, result, cost)."""
  cost = swing_cost(pendulum)
  start = pendulum.init_state(1)[0].at[pendulum.layout.qpos].set(0.3)
  result = control.ilqr(cost, pendulum.params(1), start, jnp.zeros((HORIZON, 1)), nstep=NSTEP,
                        iterations=10)
  return start, result, cost


def mj_loop(model: mujoco.MjModel, start, ctrls: np.ndarray, nstep: int, feedback=None):
  """Plain MuJoCo: every physics step's state and sensordata; feedback (gains, states, bounds)
  closes the loop as closed_loop documents, with mj_differentiatePos."""
  data = mujoco.MjData(model)
  spec = mujoco.mjtState.mjSTATE_INTEGRATION
  mujoco.mj_setState(model, data, np.asarray(start, np.float64), spec)
  layout = mjbatch_jax.StateLayout.of(model)
  states, sensors = [], []
  row = np.empty(mujoco.mj_stateSize(model, spec))
  for t, u in enumerate(np.asarray(ctrls)):
    if feedback is not None:
      gains, nominal, (lo, hi) = feedback
      dq = np.empty(model.nv)
      mujoco.mj_differentiatePos(model, dq, 1.0, nominal[t][layout.qpos], data.qpos)
      dx = np.r_[dq, data.qvel - nominal[t][layout.qvel]]
      u = np.clip(u + gains[t] @ dx, lo, hi)
    for _ in range(nstep):
      data.ctrl[:] = u
      mujoco.mj_step(model, data)
      mujoco.mj_getState(model, data, row, spec)
      states.append(row.copy())
      sensors.append(data.sensordata.copy())
  return np.array(states), np.array(sensors)


def test_open_loop_is_ilqrs_trajectory_and_mujocos_steps(pendulum, plan):
  start, result, _ = plan
  states, sensors = replay.open_loop(pendulum.params(1), start, result.ctrls, NSTEP)
  assert states.shape == (1, HORIZON * NSTEP, pendulum.nstate)
  np.testing.assert_array_equal(np.asarray(states[0, NSTEP - 1::NSTEP]),
                                np.asarray(result.states[1:]))
  want_states, want_sensors = mj_loop(pendulum.model, start, np.asarray(result.ctrls), NSTEP)
  np.testing.assert_array_equal(np.asarray(states[0]), want_states)
  np.testing.assert_array_equal(np.asarray(sensors[0]), want_sensors)
  # Robots as rows: each its own mass and start, the one plan.
  robots = pendulum.params(2, ("body_mass",))
  robots = robots.replace({"body_mass": robots["body_mass"] * jnp.array([[1.0], [1.3]])})
  starts = jnp.stack([start, start.at[pendulum.layout.qpos].set(-0.2)])
  states, _ = replay.open_loop(robots, starts, result.ctrls, NSTEP)
  heavy = mujoco.MjModel.from_xml_string(PENDULUM_XML)
  heavy.body_mass[:] = np.asarray(robots["body_mass"][1])
  np.testing.assert_array_equal(np.asarray(states[1]), mj_loop(heavy, starts[1],
                                                               np.asarray(result.ctrls), NSTEP)[0])


def test_plan_cost_is_ilqrs_cost(pendulum, plan):
  start, result, cost = plan
  costs = replay.plan_cost(cost, pendulum.params(1), start, result.ctrls, NSTEP)
  assert costs.shape == (1,)
  # The solve's cost comes from its line search, whose rows (step sizes) round the sum in their
  # own order; iLQR's cost of the plan as given (no iteration) is the same computation.
  np.testing.assert_allclose(float(costs[0]), float(result.cost), rtol=1e-13)
  given = control.ilqr(cost, pendulum.params(1), start, result.ctrls, nstep=NSTEP, iterations=0)
  assert float(costs[0]) == float(given.cost)
  # Per robot: a second start's cost is that start's own.
  other = start.at[pendulum.layout.qpos].set(-0.4)
  both = replay.plan_cost(cost, pendulum.params(1), jnp.stack([start, other]), result.ctrls,
                          NSTEP)
  alone = replay.plan_cost(cost, pendulum.params(1), other, result.ctrls, NSTEP)
  assert float(both[0]) == float(costs[0]) and float(both[1]) == float(alone[0])
  assert float(both[1]) != float(both[0])


def test_closed_loop_with_zero_gains_is_open_loop(pendulum, plan):
  start, result, _ = plan
  robots = pendulum.params(3, ("body_mass",))
  robots = robots.replace({"body_mass": robots["body_mass"] * jnp.array([[1.0], [0.8], [1.2]])})
  starts = jnp.stack([start + 0.0, start.at[pendulum.layout.qpos].add(0.1),
                      start.at[pendulum.layout.qvel].add(-0.5)])
  opened = replay.open_loop(robots, starts, result.ctrls, NSTEP)
  closed = replay.closed_loop(robots, starts, result.ctrls, jnp.zeros_like(result.gains),
                              result.states, NSTEP)
  for a, b in zip(opened, closed, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_closed_loop_tracks_the_plan_from_perturbed_starts(pendulum, plan):
  start, result, cost = plan
  # The solve ends with mu grown where no step helped: tracking gains at a small mu instead.
  _, gains = control.ilqr_gains(cost, pendulum.params(1), start, result.ctrls, [1e-4],
                                nstep=NSTEP)
  layout = pendulum.layout
  starts = jnp.stack([start.at[layout.qpos].add(d) for d in (0.15, -0.15, 0.3)])
  robots = pendulum.params(3, ("body_mass",))
  robots = robots.replace({"body_mass": robots["body_mass"] * jnp.array([[1.0], [1.1], [0.9]])})
  opened, _ = replay.open_loop(robots, starts, result.ctrls, NSTEP)
  closed, _ = replay.closed_loop(robots, starts, result.ctrls, gains[0], result.states, NSTEP)
  goal = np.asarray(result.states[-1])
  q, v = layout.qpos, layout.qvel

  def miss(xs):
    last = np.asarray(xs[:, -1])
    return np.hypot(last[:, q] - goal[q], 0.1 * (last[:, v] - goal[v]))[:, 0]

  assert np.all(miss(closed) < 0.8 * miss(opened)), (miss(closed), miss(opened))


def test_closed_loop_is_mujocos_loop_with_rotation_differences():
  model = mujoco.MjModel.from_xml_string(BALL_XML)
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    rng = np.random.default_rng(0)
    horizon, nstep = 6, 3
    # A nominal trajectory that is not the one flown: the differences are real rotations.
    ctrls = rng.uniform(-1, 1, (horizon, 3))
    nominal, _ = mj_loop(model, sim.init_state(1)[0], 1.5 * ctrls, nstep)
    states = np.concatenate([np.asarray(sim.init_state(1)[0])[None], nominal[nstep - 1::nstep]])
    gains = rng.normal(0.0, 0.5, (horizon, 3, 6))
    start = np.array(sim.init_state(1)[0])
    quat = np.array([0.9, 0.1, -0.3, 0.2])
    start[sim.layout.qpos] = quat / np.linalg.norm(quat)
    got, sensors = replay.closed_loop(sim.params(1), start, ctrls, gains, states, nstep)
    bounds = (np.array([-2.0, -2.0, -np.inf]), np.array([2.0, 2.0, np.inf]))
    want, want_sensors = mj_loop(model, start, ctrls, nstep, (gains, states, bounds))
    np.testing.assert_allclose(np.asarray(got[0]), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(np.asarray(sensors[0]), want_sensors, rtol=1e-7, atol=1e-9)
    # The gains matter here: without them the robot flies elsewhere.
    opened, _ = replay.open_loop(sim.params(1), start, ctrls, nstep)
    assert np.max(np.abs(np.asarray(opened[0]) - want)) > 1e-3


@pytest.fixture
def no_custom_calls(monkeypatch):
  """Every custom call raises: a refusal must come before any of them."""
  def refuse(*args, **kwargs):
    raise AssertionError("a custom call ran before the input was refused")

  for module in _ffi.TARGETS.values():
    monkeypatch.setattr(module, "call", refuse)


def test_replays_refuse_bad_input_before_any_custom_call(pendulum, plan, no_custom_calls):
  start, result, cost = plan
  params = pendulum.params(1)
  ctrls, gains, states = result.ctrls, result.gains, result.states

  def refused(pattern, fn, *args, **kwargs):
    with pytest.raises(ValueError, match=pattern):
      fn(*args, **kwargs)

  nan = ctrls.at[3, 0].set(jnp.nan)
  refused(r"ctrls must not hold NaN", replay.open_loop, params, start, nan, NSTEP)
  refused(r"ctrls must not hold NaN", replay.closed_loop, params, start, nan, gains, states)
  refused(r"ctrls must not hold NaN", replay.plan_cost, cost, params, start, nan)
  refused(r"ctrls must be a plan of shape \(T, nu=1\)", replay.open_loop, params, start,
          jnp.zeros((5, 2)))
  refused(r"ctrls must be a plan .* T >= 1", replay.open_loop, params, start, jnp.zeros((0, 1)))
  refused(r"start must be a state row", replay.open_loop, params, start[:-1], ctrls)
  refused(r"nstep must be an int >= 1", replay.open_loop, params, start, ctrls, 0)
  refused(r"gains must be the plan's feedback gains .*\(15, 1, 2\).*got \(15, 1, 3\)",
          replay.closed_loop, params, start, ctrls, jnp.zeros((HORIZON, 1, 3)), states)
  refused(r"gains must be", replay.closed_loop, params, start, ctrls, gains[:-1], states)
  refused(r"gains must not hold NaN", replay.closed_loop, params, start, ctrls,
          gains.at[0, 0, 0].set(jnp.nan), states)
  refused(r"states must be the plan's trajectory \(T \+ 1 states\)", replay.closed_loop, params,
          start, ctrls, gains, states[:-1])
  refused(r"bounds: lower > upper", replay.closed_loop, params, start, ctrls, gains, states,
          bounds=(1.0, -1.0))
  refused(r"disagree on the number of robots .*: start 2, ctrls 3", replay.open_loop, params,
          jnp.stack([start, start]), jnp.zeros((3, HORIZON, 1)))
  refused(r"disagree on the number of robots .*: start 2, params 3", replay.open_loop,
          pendulum.params(3, ("body_mass",)), jnp.stack([start, start]), ctrls)
  refused(r"disagree .*: start 2, gains 4", replay.closed_loop, params,
          jnp.stack([start, start]), ctrls, jnp.zeros((4, *gains.shape)), states)
  refused(r"cost must be a control.Cost", replay.plan_cost, "cost", params, start, ctrls)
  wrong = cost._replace(residual=lambda x, u, obs, t: jnp.zeros(2))
  refused(r"Cost.residual must return one vector", replay.plan_cost, wrong, params, start, ctrls)
