"""control.fleet: the receding horizon on many robots against receding_horizon's own loop, and the
choice among plan tails on cases whose answer is known."""

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import _ffi, control
from mjbatch_jax.control import fleet

jax.config.update("jax_enable_x64", True)

PENDULUM_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body name="pole">
      <joint name="hinge" axis="0 1 0" damping=".05"/>
      <geom name="rod" type="capsule" fromto="0 0 0 0 0 -.5" size=".03" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" ctrlrange="-4 4" ctrllimited="true"/></actuator>
  <sensor><jointpos joint="hinge"/></sensor>
</mujoco>
"""
# The tails run past the plans' end (FIRST + KNOTS + HORIZON > FRAMES): the last control is held.
FRAMES, HORIZON, NSTEP, FIRST, KNOTS = 10, 5, 2, 3, 6


@pytest.fixture(scope="module")
def pendulum():
  with mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(PENDULUM_XML), num_threads=1) as sim:
    yield sim


def hold_cost(sim) -> control.Cost:
  layout = sim.layout

  def residual(x, u, obs, t):
    return jnp.concatenate([x[layout.qpos] - 0.8, 0.3 * x[layout.qvel], 0.1 * u])

  return control.Cost(residual, (control.Term(1, 1.0), control.Term(1, 1.0),
                                 control.Term(1, 1.0)))


def robots_and_plans(sim):
  """Three robots (masses 1, 1.2, 0.8), their states at knot FIRST and their own plans."""
  params = sim.params(3, ("body_mass",))
  params = params.replace({"body_mass": params["body_mass"] * jnp.array([[1.0], [1.2], [0.8]])})
  layout = sim.layout
  starts = jnp.stack([sim.init_state(1)[0].at[layout.qpos].set(q) for q in (0.2, 0.5, -0.1)])
  ramp = jnp.linspace(0.0, 2.0, FRAMES)[:, None]
  plans = jnp.stack([ramp, 1.5 * ramp, ramp[::-1]])
  return params, starts, plans


def row(params, i):
  return params.replace({"body_mass": params["body_mass"][i : i + 1]})


def planners(sim):
  cost = hold_cost(sim)
  cem = control.sampling(cost, sim.params(1), horizon=HORIZON, nstep=NSTEP,
                         settings=control.CEMSettings(num_samples=12, num_knots=3,
                                                      num_elites=3, noise=0.3))
  ilqr = control.ilqr_planner(cost, sim.params(1), horizon=HORIZON, nstep=NSTEP)
  return {"cem": cem, "ilqr": ilqr}


@pytest.mark.parametrize("kind", ["cem", "ilqr"])
def test_one_robot_is_receding_horizon_in_a_python_loop(pendulum, kind):
  planner = planners(pendulum)[kind]
  params, starts, plans = robots_and_plans(pendulum)
  keys = jax.random.split(jax.random.key(7), (1, KNOTS))
  run = fleet.receding_horizon_fleet(planner, row(params, 1), starts[1], plans[1], keys,
                                     first=FIRST)
  assert run.states.shape == (1, KNOTS * NSTEP, pendulum.nstate)
  assert run.sensordata.shape == (1, KNOTS * NSTEP, 1) and run.ctrls.shape == (1, KNOTS, 1)
  assert not np.any(np.asarray(run.real_failed))

  step = control.receding_horizon(planner, row(params, 1))
  state = starts[1]
  plan = planner.init(plans[1, FIRST : FIRST + HORIZON])
  for j in range(KNOTS):
    state, plan, info = step(state, plan, keys[0, j])
    plan = fleet.with_tail(planner, plan, plans[1, min(FIRST + j + HORIZON, FRAMES - 1)])
    np.testing.assert_array_equal(np.asarray(run.states[0, (j + 1) * NSTEP - 1]),
                                  np.asarray(state))
    assert float(run.info.cost[0, j]) == float(info.cost)
  # Every physics step: the knot's first step is the applied control's too.
  x, _ = mjbatch_jax.rollout(starts[1][None], run.ctrls[0, :1].repeat(NSTEP, axis=0)[None],
                             row(params, 1))
  np.testing.assert_array_equal(np.asarray(run.states[0, :NSTEP]), np.asarray(x[0]))


def test_robots_are_independent_rows(pendulum):
  planner = planners(pendulum)["cem"]
  params, starts, plans = robots_and_plans(pendulum)
  keys = jax.random.split(jax.random.key(3), (3, KNOTS))
  alone_keys = keys[1:2]
  # Planned robot by robot, a robot's run is the same bits whatever runs beside it.
  three = fleet.receding_horizon_fleet(planner, params, starts, plans, keys, first=FIRST,
                                       vmap_planners=False)
  one = fleet.receding_horizon_fleet(planner, row(params, 1), starts[1:2], plans[1:2],
                                     alone_keys, first=FIRST, vmap_planners=False)
  np.testing.assert_array_equal(np.asarray(three.states[1]), np.asarray(one.states[0]))
  np.testing.assert_array_equal(np.asarray(three.sensordata[1]), np.asarray(one.sensordata[0]))
  # Vmapped (the default), XLA's batched matrix products may round otherwise in the last bits.
  vmapped = fleet.receding_horizon_fleet(planner, params, starts, plans, keys, first=FIRST)
  np.testing.assert_allclose(np.asarray(vmapped.states[1]), np.asarray(one.states[0]),
                             rtol=1e-9, atol=1e-12)
  # The robots differ (mass, start, plan), and so do their runs.
  assert np.max(np.abs(np.asarray(three.states[0] - three.states[1]))) > 1e-2


def test_with_tail_sets_the_warm_starts_last_control(pendulum):
  cem, ilqr = planners(pendulum).values()
  ctrls = jnp.linspace(-1.0, 1.0, HORIZON)[:, None]
  plan = ilqr.init(ctrls)
  tailed = fleet.with_tail(ilqr, ilqr.shift(plan, 1), jnp.array([3.0]))
  np.testing.assert_array_equal(np.asarray(tailed.ctrls),
                                np.r_[np.asarray(ctrls[1:]), [[3.0]]])
  assert float(tailed.mu) == float(plan.mu)
  # A sampling plan of a knot per control: its controls are those controls.
  dense = control.sampling(hold_cost(pendulum), pendulum.params(1), horizon=HORIZON,
                           settings=control.CEMSettings(num_samples=4, num_knots=HORIZON,
                                                        num_elites=2))
  plan = dense.init(ctrls)._replace(std=jnp.full((HORIZON, 1), 0.7))
  tailed = fleet.with_tail(dense, plan, jnp.array([2.5]))
  np.testing.assert_allclose(np.asarray(dense.controls(tailed)),
                             np.r_[np.asarray(ctrls[:-1]), [[2.5]]], atol=1e-12)
  np.testing.assert_array_equal(np.asarray(tailed.std), 0.7)
  assert isinstance(fleet.with_tail(cem, cem.init(), jnp.zeros(1)), control.SamplingPlan)


def tails(n: int) -> jnp.ndarray:
  """(n, 3, 4, 1) constant torques: robot i's candidates are -1, 0, +1 rolled by i."""
  torques = np.array([-1.0, 0.0, 1.0])
  return jnp.asarray(np.stack([np.roll(torques, -i) for i in range(n)]))[:, :, None, None] * (
    jnp.ones((1, 1, 4, 1)))


def final_angle(xs, sensors, obs):
  """Lower is better: the most counter-clockwise (positive) final angle wins."""
  return -sensors[:, -1, 0]


def test_choose_tail_picks_the_least_score_and_keeps_the_first_within_its_band(pendulum):
  states = pendulum.init_state(2)
  candidates = tails(2)  # robot 0: -1, 0, +1; robot 1: 0, +1, -1
  picked, scores = fleet.choose_tail(pendulum.params(1), states, candidates, NSTEP,
                                     final_angle, return_scores=True)
  np.testing.assert_array_equal(np.asarray(picked), [2, 1])
  assert picked.dtype == jnp.int32 and scores.shape == (2, 3)
  # Each score is its tail's own rollout, scored.
  _, sensors = mjbatch_jax.rollout(states[1], jnp.repeat(candidates[1, 2], NSTEP, axis=0),
                                   pendulum.params(1))
  assert float(scores[1, 2]) == float(-sensors[-1, 0])
  # The band: candidate 0 (robot 0's -1 scores worse than robot 1's 0) kept where within it.
  band = float(scores[1, 0]) + 1e-9
  assert float(scores[0, 0]) > band
  kept = fleet.choose_tail(pendulum.params(1), states, candidates, NSTEP, final_angle,
                           keep_first=band)
  np.testing.assert_array_equal(np.asarray(kept), [2, 0])
  everything = fleet.choose_tail(pendulum.params(1), states, candidates, NSTEP, final_angle,
                                 keep_first=np.inf)
  np.testing.assert_array_equal(np.asarray(everything), [0, 0])


def test_choose_tail_per_robot_params_observations_and_failures(pendulum):
  params = pendulum.params(2, ("dof_damping",))
  # Robot 1's joint is wildly unstable: MuJoCo resets every rollout of it, each scoring inf.
  params = params.replace({"dof_damping": jnp.array([[0.05], [-1e12]])})
  states = pendulum.init_state(2).at[:, pendulum.layout.qpos].set(0.1)
  rod = pendulum.model.geom("rod").id

  def high_rod(xs, sensors, obs):  # the rod's centre as high as it can swing
    return -obs["geom_xpos"][:, -1, rod, 2]

  picked, scores = fleet.choose_tail(params, states, tails(2), NSTEP, high_rod,
                                     observe=("geom_xpos",), return_scores=True)
  assert int(picked[0]) == 2 and int(picked[1]) == 0
  assert np.all(np.isfinite(np.asarray(scores[0]))) and np.all(np.isinf(np.asarray(scores[1])))
  # A failed candidate 0 is never kept by the band, even an infinite one (inf <= inf kept it).
  def first_fails(xs, sensors, obs):  # each robot's candidate 0 (rows 0 and 3) scores NaN
    score = high_rod(xs, sensors, obs)
    return jnp.where(jnp.arange(score.shape[0]) % 3 == 0, jnp.nan, score)

  picked, scores = fleet.choose_tail(pendulum.params(1), states, tails(2), NSTEP, first_fails,
                                     observe=(f for f in ["geom_xpos"]),  # type: ignore[arg-type]
                                     keep_first=np.inf,
                                     return_scores=True)  # observe from a generator, read once
  assert np.all(np.isinf(np.asarray(scores[:, 0]))) and np.all(np.asarray(picked) != 0)


@pytest.fixture
def no_custom_calls(monkeypatch):
  """Every custom call raises: a refusal must come before any of them."""
  def refuse(*args, **kwargs):
    raise AssertionError("a custom call ran before the input was refused")

  for module in _ffi.TARGETS.values():
    monkeypatch.setattr(module, "call", refuse)


def test_fleet_refuses_bad_input_before_any_custom_call(pendulum, no_custom_calls):
  planner = planners(pendulum)["cem"]
  params, starts, plans = robots_and_plans(pendulum)
  keys = jax.random.split(jax.random.key(0), (3, KNOTS))

  def refused(pattern, **change):
    args = {"planner": planner, "params": params, "starts": starts, "ctrls": plans,
            "keys": keys, **change}
    with pytest.raises(ValueError, match=pattern):
      fleet.receding_horizon_fleet(args.pop("planner"), args.pop("params"), args.pop("starts"),
                                   args.pop("ctrls"), args.pop("keys"), **args)

  refused(r"planner must be a control.Planner", planner="cem")
  refused(r"keys must be \(N, knots\) PRNG keys", keys=jax.random.key(0))
  refused(r"keys must be \(N, knots\) PRNG keys", keys=jax.random.split(jax.random.key(0), 3))
  refused(r"keys must be \(N, knots\)", keys=jnp.zeros((3, KNOTS)))
  refused(r"disagree .*: starts 3, .*keys 2", keys=keys[:2])
  refused(r"disagree .*: starts 2, ctrls 3", starts=starts[:2])
  refused(r"first must be an int in \[0, 9\]", first=10)
  refused(r"ctrls must not hold NaN", ctrls=plans.at[0, 2, 0].set(jnp.nan))
  refused(r"ctrls must be plans of shape \(F, nu=1\)", ctrls=jnp.zeros((3, FRAMES, 2)))
  refused(r"starts must be a state row", starts=starts[:, :-1])
  refused(r"params' fields must have the same number of rows|disagree",
          params=pendulum.params(2, ("body_mass",)))
  refused(r"vmap_planners must be True or False", vmap_planners=1)
  with pytest.raises(ValueError, match=r"ctrl must have shape \(1,\)"):
    fleet.with_tail(planner, planner.init(), jnp.zeros(2))


SLIDER_XML = """
<mujoco>
  <worldbody>
    <body><joint name="x" type="slide" axis="1 0 0"/><joint name="y" type="slide" axis="0 1 0"/>
      <geom type="sphere" size=".1" mass="1"/></body>
  </worldbody>
  <actuator><motor joint="x"/><motor joint="y"/></actuator>
</mujoco>
"""


def test_a_planner_of_another_model_is_refused_naming_both(pendulum, no_custom_calls):
  """Its states and controls would not fit the robots': refused before the trace, which would
  have named arrays the caller never passed."""
  params, starts, plans = robots_and_plans(pendulum)
  keys = jax.random.split(jax.random.key(0), (3, KNOTS))
  with mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(SLIDER_XML), num_threads=1) as other:
    cost = control.Cost(lambda x, u, obs, t: u, (control.Term(2, 1.0),))
    planner = control.sampling(cost, other.params(1), horizon=HORIZON, nstep=NSTEP,
                               settings=control.PredictiveSettings(num_knots=3))
    assert (planner.nstate, planner.nu) == (other.nstate, 2)
    want = (rf"the planner plans with a model of nstate={other.nstate}, nu=2, but params is of a "
            rf"model of nstate={pendulum.nstate}, nu=1")
    with pytest.raises(ValueError, match=want):
      fleet.receding_horizon_fleet(planner, params, starts, plans, keys)
    with pytest.raises(ValueError, match=want):
      control.receding_horizon(planner, pendulum.params(1))


def test_a_planner_of_your_own_without_model_sizes_runs(pendulum):
  """Planner's model sizes default to None (a Planner built by hand): nothing to check, and the
  run is the same."""
  params, starts, plans = robots_and_plans(pendulum)
  keys = jax.random.split(jax.random.key(0), (3, KNOTS))
  planner = planners(pendulum)["cem"]
  own = control.Planner(*planner[:6])
  assert (own.nstate, own.nu) == (None, None)
  a = fleet.receding_horizon_fleet(planner, params, starts, plans, keys)
  b = fleet.receding_horizon_fleet(own, params, starts, plans, keys)
  np.testing.assert_array_equal(a.states, b.states)


def test_choose_tail_refuses_bad_input_before_any_custom_call(pendulum, no_custom_calls):
  states, candidates = pendulum.init_state(2), tails(2)

  def refused(pattern, **change):
    args = {"params": pendulum.params(1), "states": states, "candidates": candidates,
            "nstep": NSTEP, "score": final_angle, **change}
    with pytest.raises(ValueError, match=pattern):
      fleet.choose_tail(args.pop("params"), args.pop("states"), args.pop("candidates"),
                        args.pop("nstep"), args.pop("score"), **args)

  refused(r"candidates must be \(N=2, K, T, nu=1\)", candidates=candidates[0])
  refused(r"candidates must be \(N=2", candidates=tails(3))
  refused(r"candidates must not hold NaN", candidates=candidates.at[0, 0, 0, 0].set(jnp.nan))
  refused(r"states must be the robots' state rows", states=states[0])
  refused(r"score must return \(6,\) floating-point numbers",
          score=lambda xs, sensors, obs: xs[:, -1, 0:2])
  refused(r"score\(states \(6, 8, \d+\).*failed: KeyError",
          score=lambda xs, sensors, obs: obs["xpos"][:, 0, 0, 0])
  refused(r"score must be a function", score=None)
  refused(r"observe must be a sequence of mjData field names", observe="xpos")
  refused(r"observe must be a sequence of mjData field names, got None", observe=None)
  refused(r"no_such_field", observe=("no_such_field",))
  refused(r"keep_first must be a number, got nan", keep_first=float("nan"))
  refused(r"nstep must be an int >= 1", nstep=0)
  refused(r"params must be of one simulation or of the N=2 robots, got 3 rows",
          params=pendulum.params(3, ("body_mass",)))


def test_plan_variants_hold_a_knot_and_offset_a_window():
  """Variant [h, k]: knot at - 1 repeated h more times, the rest delayed and its end dropped,
  offsets[k] on the chosen controls over the window only, then clipped; [0, 0] with offset 0 is
  the plan itself."""
  ctrl = np.arange(24.0).reshape(8, 3) / 10
  variants = control.plan_variants(ctrl, 3, holds=3, offsets=(0.0, 0.5, -3.0), actuators=[0, 2],
                                   window=(4, 6), ctrlrange=np.tile([-1.0, 2.5], (3, 1)))
  assert variants.shape == (3, 3, 8, 3) and variants.dtype == np.float64
  np.testing.assert_array_equal(variants[0, 0], ctrl)
  for h in range(3):
    unshifted = np.concatenate([ctrl[:3], np.repeat(ctrl[2:3], h, axis=0), ctrl[3:8 - h]])
    for k, amount in enumerate((0.0, 0.5, -3.0)):
      want = unshifted.copy()
      want[4:6, [0, 2]] += amount
      np.testing.assert_array_equal(variants[h, k], np.clip(want, -1.0, 2.5))
  assert np.array_equal(variants[1, 0, 3], ctrl[2]) and np.array_equal(variants[1, 0, 4], ctrl[3])
  assert variants[0, 2, 4, 0] == -1.0 and variants[0, 2, 4, 1] == ctrl[4, 1]  # clipped; not chosen
  plain = control.plan_variants(ctrl, 8, holds=2)  # at the end: nothing to delay
  assert plain.shape == (2, 1, 8, 3) and np.array_equal(plain[1, 0], ctrl)


def test_fly_variants_chooses_along_each_axis_from_each_robots_state(pendulum):
  """Three robots of other masses fly a (hold x offset) grid, choosing the hold at knot 3 and the
  offset at knot 6 by the final angle on the nominal model: each choice is choose_tail's from
  that robot's state then, and the run is one open-loop rollout of the controls each robot flew,
  bit for bit; after the last choice it flies on to `end`."""
  params, starts, plans = robots_and_plans(pendulum)
  start = starts[0]
  variants = control.plan_variants(np.asarray(plans[0]), 3, holds=3, offsets=(0.0, -3.0, 3.0),
                                   actuators=[0], window=(6, 10),
                                   ctrlrange=pendulum.model.actuator_ctrlrange)
  flown = control.fly_variants(params, pendulum.params(1), start, variants, (3, 6), NSTEP,
                               final_angle, end=8, span=3)
  assert flown.states.shape == (3, 8 * NSTEP, pendulum.nstate) and flown.chosen.shape == (3, 2)
  before, _ = control.open_loop(params, start, variants[0, 0, :3], NSTEP)
  hold = fleet.choose_tail(pendulum.params(1), before[:, -1], np.broadcast_to(
    variants[:, 0, 3:6], (3, 3, 3, 1)), NSTEP, final_angle)
  np.testing.assert_array_equal(flown.chosen[:, 0], np.asarray(hold))
  flew = np.stack([np.concatenate([variants[0, 0, :3], variants[h, 0, 3:6],
                                   variants[h, k, 6:8]]) for h, k in flown.chosen])
  states, sensors = control.open_loop(params, start, flew, NSTEP)
  np.testing.assert_array_equal(flown.states, np.asarray(states))
  np.testing.assert_array_equal(flown.sensordata, np.asarray(sensors))
  offset = fleet.choose_tail(pendulum.params(1), states[:, 6 * NSTEP - 1],
                             variants[flown.chosen[:, 0], :, 6:9], NSTEP, final_angle)
  np.testing.assert_array_equal(flown.chosen[:, 1], np.asarray(offset))
  assert set(flown.chosen[:, 1].tolist()) == {2}  # +3 turns every robot furthest
  np.testing.assert_array_equal(flown.ctrls, variants[tuple(flown.chosen.T)])
  for choices, end, span, match in (((6, 3), 8, None, r"choices\[1\] must be an int in \[7, 8\]"),
                                    ((3,), 8, None, r"variants must be a grid .* one axis per "
                                     r"choice \(1\)"),
                                    ((3, 6), 11, None, r"end must be an int in \[1, 10\]"),
                                    ((3, 6), 8, 0, r"span must be an int >= 1")):
    with pytest.raises(ValueError, match=match):
      control.fly_variants(params, pendulum.params(1), start, variants, choices, NSTEP,
                           final_angle, end=end, span=span)


def test_fly_variants_refuses_bad_input_before_any_custom_call(pendulum, no_custom_calls):
  """Every choice's score, the believed model and the first flight's arguments are checked
  before the first physics step: a score of the wrong shape for the second choice too."""
  params, starts, plans = robots_and_plans(pendulum)
  variants = control.plan_variants(np.asarray(plans[0]), 3, holds=3, offsets=(0.0, 1.0))

  def per_step(xs, sensors, obs):  # (rows, steps): not one number per rollout
    return sensors[..., 0]

  fly = functools.partial(control.fly_variants, params, pendulum.params(1), starts[0], variants,
                          (3, 6), NSTEP)
  with pytest.raises(ValueError, match=r"score must return \(9,\) floating-point numbers"):
    fly(per_step)
  with pytest.raises(ValueError, match=r"keep_first must be"):
    fly(final_angle, keep_first="tight")  # pyright: ignore[reportArgumentType]
  with pytest.raises(ValueError, match=r"observe must be a sequence of mjData field names"):
    fly(final_angle, observe="xpos")
  with pytest.raises(ValueError, match=r"start must be a state row"):
    control.fly_variants(params, pendulum.params(1), np.zeros(5), variants, (3, 6), NSTEP,
                         final_angle)
  with pytest.raises(ValueError, match=r"variants must end in nu=1 controls"):
    control.fly_variants(params, pendulum.params(1), starts[0], np.zeros((3, 2, 10, 2)), (3, 6),
                         NSTEP, final_angle)
  with pytest.raises(ValueError, match=r"choices\[1\] must be an int in \[4, 9\], got 10"):
    fly.func(*fly.args[:4], (3, 10), NSTEP, final_angle)
