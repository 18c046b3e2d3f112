"""mjbatch_jax.ensemble and control.ensemble_guard: robots per purpose, verdicts, the iLQR guard."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import control
from mjbatch_jax import ensemble as ens
from mjbatch_jax.control import guard as guard_lib

jax.config.update("jax_enable_x64", True)

# A motor-driven pendulum hanging at rest (an exact equilibrium: zero controls keep every state
# at zero), with a sensor, so replays have sensordata.
PENDULUM_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body name="pole">
      <joint name="hinge" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0 0 -.5" size=".02" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" gear="1" ctrlrange="-5 5" ctrllimited="true"/></actuator>
  <sensor><jointpos joint="hinge"/></sensor>
</mujoco>
"""
MASS_SCALE = (0.8, 1.2)
DAMPING = (0.0, 0.1)
HORIZON, NSTEP = 12, 2


@pytest.fixture(scope="module")
def sim():
  with mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(PENDULUM_XML), num_threads=1) as sim:
    yield sim


draw = functools.partial(mjbatch_jax.randomize, scale={"body_mass": MASS_SCALE},
                         uniform={"dof_damping": DAMPING})


def robots(sim, **kwargs) -> ens.Ensemble:
  return ens.Ensemble(sim, ("body_mass", "dof_damping"), draw, select={"body_mass": ["pole"]},
                      set_const=True, **kwargs)


def open_loop(params, start, ctrls):
  """Every physics step's states and sensordata of ctrls held for NSTEP steps, per robot."""
  rows = len(params["body_mass"])
  held = jnp.broadcast_to(jnp.repeat(ctrls, NSTEP, axis=0), (rows, len(ctrls) * NSTEP, 1))
  return mjbatch_jax.rollout(jnp.broadcast_to(start, (rows, start.shape[-1])), held, params)


def leaves(params) -> list[np.ndarray]:
  return [np.asarray(leaf) for leaf in jax.tree.leaves(params)]


def test_rows_are_fixed_per_purpose_seed_and_iteration(sim):
  ensemble = robots(sim)
  params = ensemble.params("search", 5)
  assert params["body_mass"].shape == (6, 1) and params["dof_damping"].shape == (6, 1)
  # Row 0 is the nominal robot: sim.params' values bit for bit.
  nominal = sim.params(1, ("body_mass", "dof_damping"), select={"body_mass": ["pole"]},
                       set_const=True)
  for got, want in zip(leaves(params), leaves(nominal), strict=True):
    np.testing.assert_array_equal(got[:1], want)
  # The same purpose, seed and iteration: the same robots, from another Ensemble object too.
  for again in (ensemble.params("search", 5), robots(sim).params("search", 5)):
    for a, b in zip(leaves(params), leaves(again), strict=True):
      np.testing.assert_array_equal(a, b)
  # Another purpose, iteration or seed: other robots (the nominal row stays).
  others = [ensemble.params("validation", 5), ensemble.params("evaluation", 5),
            ensemble.params("search", 5, iteration=1),
            robots(sim, seeds={"search": 7}).params("search", 5)]
  for other in others:
    np.testing.assert_array_equal(np.asarray(other["body_mass"])[0],
                                  np.asarray(params["body_mass"])[0])
    assert not np.any(np.asarray(other["body_mass"])[1:] == np.asarray(params["body_mass"])[1:])
  # Purposes under one seed still draw apart: the purpose's name is part of the key.
  same = robots(sim, seeds=dict.fromkeys(("search", "evaluation"), 3))
  a, b = same.params("search", 5), same.params("evaluation", 5)
  assert not np.any(np.asarray(a["dof_damping"])[1:] == np.asarray(b["dof_damping"])[1:])
  # Without the nominal row: the same randomised robots.
  bare = ensemble.params("search", 5, nominal=False)
  for a, b in zip(leaves(bare), leaves(params), strict=True):
    np.testing.assert_array_equal(a, b[1:])


def test_randomised_fields_stay_in_their_bounds(sim):
  params = robots(sim).params("evaluation", 64)
  mass = sim.model.body_mass[sim.model.body("pole").id]
  masses, damping = np.asarray(params["body_mass"])[1:, 0], np.asarray(params["dof_damping"])[1:]
  assert np.all((masses >= MASS_SCALE[0] * mass) & (masses < MASS_SCALE[1] * mass))
  assert np.all((damping >= DAMPING[0]) & (damping < DAMPING[1]))
  assert len(np.unique(masses)) == 64  # each robot its own draw


def test_nominal_rows_concatenate_with_randomised_ones(sim):
  ensemble = robots(sim)
  nominal = ensemble.nominal(3)
  drawn = ensemble.params("validation", 2, nominal=False)
  assert nominal.spec == drawn.spec
  both = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), nominal, drawn)
  assert both["body_mass"].shape == (5, 1)
  for got in leaves(nominal):
    np.testing.assert_array_equal(got, np.broadcast_to(got[:1], got.shape))


def test_a_randomised_row_is_that_robot_in_mujoco(sim):
  """Replaying a row equals mj_step on a model with that row's values (and mj_setConst)."""
  params = robots(sim).params("evaluation", 3)
  ctrls = jnp.asarray(np.linspace(-2.0, 3.0, HORIZON)[:, None])
  start = sim.init_state(1)[0]
  states, sensordata = open_loop(params, start, ctrls)
  assert states.shape == (4, HORIZON * NSTEP, sim.nstate)
  for row in (0, 2):
    model = mujoco.MjModel.from_xml_string(PENDULUM_XML)
    model.body_mass[model.body("pole").id] = float(params["body_mass"][row, 0])
    model.dof_damping[:] = np.asarray(params["dof_damping"][row])
    mujoco.mj_setConst(model, mujoco.MjData(model))
    data = mujoco.MjData(model)
    qpos = []
    for u in np.repeat(np.asarray(ctrls), NSTEP, axis=0):
      data.ctrl[:] = u
      mujoco.mj_step(model, data)
      qpos.append(data.qpos.copy())
    np.testing.assert_array_equal(np.asarray(states[row][:, sim.layout.qpos]), np.array(qpos))
  # The robots differ: the same controls move them differently.
  assert not np.array_equal(np.asarray(sensordata[0]), np.asarray(sensordata[2]))


def test_bad_ensembles_and_requests_are_refused(sim):
  ensemble = robots(sim)
  with pytest.raises(ValueError, match=r"count must be an int >= 1, got 0"):
    ensemble.params("search", 0)
  with pytest.raises(ValueError, match=r"purpose must be one of \('search', 'validation', "):
    ensemble.params("training", 4)
  with pytest.raises(ValueError, match=r"iteration must be an int in \[0, 2147483647\], got -1"):
    ensemble.params("search", 4, iteration=-1)
  with pytest.raises(ValueError, match=r"iteration must be an int in \[0, 2147483647\], got 1.0"):
    ensemble.params("search", 4, iteration=1.0)
  for seed in (1.5, True, "3", -1):
    with pytest.raises(ValueError, match=r"seeds\['search'\] must be an int in \[0, "):
      robots(sim, seeds={"search": seed})
  with pytest.raises(ValueError, match=r"iteration must be an int in .*got a traced float"):
    jax.jit(lambda i: ensemble.params("search", 4, iteration=i))(1.0)
  with pytest.raises(TypeError):  # the robots of a purpose are fixed once made
    ensemble.seeds["search"] = 5  # type: ignore[index]
  with pytest.raises(dataclasses.FrozenInstanceError):
    ensemble.draw = draw  # type: ignore[misc]
  with pytest.raises(ValueError, match=r"seeds must be a dict .* at least one purpose"):
    robots(sim, seeds={})
  with pytest.raises(ValueError, match=r"fields must name at least one model field"):
    ens.Ensemble(sim, (), draw)
  with pytest.raises(ValueError, match=r"draw must be a function"):
    ens.Ensemble(sim, ("body_mass",), None)  # type: ignore[arg-type]
  with pytest.raises(ValueError, match=r"sim must be a mjbatch_jax.Simulator or a mujoco"):
    ens.Ensemble("pendulum.xml", ("body_mass",), draw)  # type: ignore[arg-type]
  with pytest.raises(ValueError, match=r"body_mas"):  # Simulator.params' own message
    ens.Ensemble(sim, ("body_mas",), draw)

  # A draw must hand back the Params it was given, with new values only.
  def bad(make):
    return ens.Ensemble(sim, ("body_mass", "dof_damping"), lambda key, p: make(p))

  with pytest.raises(ValueError, match=r"draw must return the Params it was given .* got dict"):
    bad(lambda p: dict(p)).params("search", 2)
  with pytest.raises(ValueError, match=r"draw must return Params of the fields \('body_mass', "
                     r"'dof_damping'\).*got Params of \('body_mass',\)"):
    bad(lambda p: sim.params(2, ("body_mass",))).params("search", 2)
  with pytest.raises(ValueError, match=r"draw changed the leaf 'dof_damping': it must keep shape "
                     r"\(2, 1\)"):
    bad(lambda p: p.replace({"dof_damping": p["dof_damping"][:1]})).params("search", 2)
  with pytest.raises(ValueError, match=r"draw changed the leaf 'body_mass'.*dtype int"):
    bad(lambda p: p.replace({"body_mass": jnp.zeros((2, 2), int)})).params("search", 2)
  # The same fields with set_const: the message says what differs.
  with pytest.raises(ValueError, match=r"got Params of the same fields but of another model, "
                     r"select or set_const"):
    bad(lambda p: sim.params(2, ("body_mass", "dof_damping"), set_const=True)).params("search", 2)


def test_an_iteration_may_be_traced(sim):
  """The same robots inside jit, up to the last bit: XLA may fuse the draw's arithmetic."""
  ensemble = robots(sim)
  # A concrete JAX integer is taken as numpy's is (it was refused: "got 3 (shape ())").
  for a, b in zip(leaves(ensemble.params("search", 3, iteration=jnp.int32(3))),
                  leaves(ensemble.params("search", 3, iteration=np.int64(3))), strict=True):
    np.testing.assert_array_equal(a, b)
  at = jax.jit(lambda i: ensemble.params("search", 3, iteration=i))
  for i in (0, 4):
    for a, b in zip(leaves(at(i)), leaves(ensemble.params("search", 3, iteration=i)),
                    strict=True):
      np.testing.assert_allclose(a, b, rtol=4e-16, atol=0)
  assert not np.any(np.asarray(at(0)["dof_damping"])[1:] == np.asarray(at(4)["dof_damping"])[1:])


def test_evaluate_gives_the_share_and_the_nominal_verdict():
  landed = [{"landed": True, "upright_s": 2.0}, {"landed": True, "upright_s": 0.5},
            {"landed": False, "upright_s": 0.0}, {"landed": True, "upright_s": 1.5},
            {"landed": True, "upright_s": 1.0}]
  result = ens.evaluate(landed, lambda m: m["landed"] and m["upright_s"] >= 1.0)
  np.testing.assert_array_equal(result.passed, [True, False, False, True, True])
  assert result.nominal_passed is True
  assert (result.passing, result.robots, result.share) == (2, 4, 0.5)
  assert result.meets(0.5) and not result.meets(0.6) and result.metrics == tuple(landed)
  assert str(result) == "the nominal robot passes; 2 of 4 randomised robots pass (50%)"
  assert result.summary() == {"nominal_passed": True, "passing": 2, "robots": 4, "share": 0.5,
                              "passed": [True, False, False, True, True]}
  # A nominal robot that fails fails meets whatever the share, unless asked otherwise.
  failed = ens.evaluate(np.array([False, True, True]))
  assert failed.share == 1.0 and not failed.meets(0.8) and failed.meets(0.8, nominal=False)
  assert str(failed) == "the nominal robot fails; 2 of 2 randomised robots pass (100%)"
  # Whole percents, never 100% short of all nor 0% above none (199 of 200 read 100%).
  almost = ens.evaluate(np.r_[True, np.arange(200) > 0])
  assert str(almost) == "the nominal robot passes; 199 of 200 randomised robots pass (99%)"
  one = ens.evaluate(np.r_[True, np.arange(200) == 0])
  assert str(one) == "the nominal robot passes; 1 of 200 randomised robots pass (1%)"
  # Go1-style: per-env arrays, no nominal row, a rule on two metrics.
  envs = {"error": np.array([0.01, 0.2, 0.03, 0.04]), "fell": np.array([0, 0, 1, 0], bool)}
  walked = ens.evaluate(envs, lambda m: bool(m["error"] <= 0.05) and not m["fell"],
                        nominal=False)
  assert walked.nominal_passed is None and walked.passing == 2 and walked.share == 0.5
  assert walked.summary()["passed"] == [True, False, False, True]
  # A predicate on rows of an array; JAX booleans count as verdicts.
  rows = ens.evaluate(jnp.arange(6.0).reshape(3, 2), lambda r: jnp.sum(r) > 2.0)
  np.testing.assert_array_equal(rows.passed, [False, True, True])


def test_per_robot_splits_outputs_into_rows():
  states, sensors = np.arange(24.0).reshape(3, 4, 2), {"height": np.array([0.1, 0.9, 0.5])}
  rows = ens.per_robot((states, sensors))
  assert len(rows) == 3
  np.testing.assert_array_equal(rows[1][0], states[1])
  assert rows[2][1] == {"height": 0.5}
  tall = ens.evaluate(rows, lambda row: bool(row[1]["height"] > 0.3))
  np.testing.assert_array_equal(tall.passed, [False, True, True])
  with pytest.raises(ValueError, match=r"outputs must be arrays with one row per robot"):
    ens.per_robot((states, np.float64(1.0)))
  with pytest.raises(ValueError, match=r"got shapes \[\]"):
    ens.per_robot({})


def test_evaluate_refuses_what_is_no_verdict():
  with pytest.raises(ValueError, match=r"the nominal robot and at least one randomised robot, "
                     r"got 1 row"):
    ens.evaluate([True])
  with pytest.raises(ValueError, match=r"at least one randomised robot, got 0 row"):
    ens.evaluate([], nominal=False)
  with pytest.raises(ValueError, match=r"predicate must give True or False for each robot, got "
                     r"0.5 for row 0"):
    ens.evaluate([0.5, 1.0], lambda m: m)
  with pytest.raises(ValueError, match=r"the metrics \(no predicate\) must give True or False"):
    ens.evaluate(np.array([1, 0]))
  with pytest.raises(ValueError, match=r"one entry per robot .* got lengths \{'a': 3, 'b': 2\}"):
    ens.evaluate({"a": np.zeros(3), "b": np.zeros(2)}, lambda m: True)
  with pytest.raises(ValueError, match=r"metrics' values must be arrays with one entry per robot"):
    ens.evaluate({"a": [[1], [2, 3], [4]]}, lambda m: True)  # numpy's "inhomogeneous shape"
  with pytest.raises(ValueError, match=r"predicate must be a function"):
    ens.evaluate([True, True], predicate=0.5)  # type: ignore[arg-type]
  with pytest.raises(ValueError, match=r"metrics must be a list of per-robot metrics"):
    ens.evaluate("robots")
  with pytest.raises(ValueError, match=r"share must be a finite number in \[0.0, 1.0\], got 80"):
    ens.evaluate([True, True]).meets(80)


# The guard's rule on a replay without physics: row i's output is SIGNS[i] times the plan's first
# control plus OFFSETS[i], and a robot passes when its output is > 0 (row 0 the nominal robot).
# With first control c: the nominal robot passes for c > -1, the others for c > 1, c < 0.5 and
# c > -2.
SIGNS = jnp.asarray([1.0, 1.0, -1.0, 1.0])
OFFSETS = jnp.asarray([1.0, -1.0, 0.5, 2.0])


def shifted(ctrls):
  return {"value": SIGNS * ctrls[0, 0] + OFFSETS}


def plan(first: float) -> jax.Array:
  return jnp.full((HORIZON, 1), first)


def test_the_guard_keeps_the_nominal_robot_and_the_count():
  log = []
  guard = control_guard(shifted, plan(0.0), log)  # the nominal robot and 2 of 3 pass
  assert guard.accept is not None and guard.warm.passing == 2 and guard.warm.nominal_passed
  assert log == ["ensemble_guard: under the warm start the nominal robot passes; 2 of 3 "
                 "randomised robots pass (67%): iLQR refuses steps under which the nominal robot "
                 "fails or fewer randomised robots pass"]
  judge = jax.jit(guard.accept)
  states = jnp.zeros((HORIZON + 1, 3))
  verdicts = [bool(judge(states, plan(first))) for first in (1.5, -0.3, 0.7, -1.5)]
  # 1.5 and -0.3: 2 of 3 as before (other ones at 1.5); 0.7: 1 of 3; -1.5: 2 of 3, but the
  # nominal robot fails.
  assert verdicts == [True, True, False, False]
  assert guard.asked == 4 and len(guard.refusals) == 2
  first, second = guard.refusals
  assert first.nominal_passed and first.passing == 1 and first.metrics is None
  np.testing.assert_array_equal(first.passed, [True, False, False, True])
  assert not second.nominal_passed and second.passing == 2
  assert log[1] == ("ensemble_guard: refused a step that lowers the cost: under its plan the "
                    "nominal robot passes; 1 of 3 randomised robots pass (33%) (under the warm "
                    "start 2 pass)")
  assert len(log) == 3 and "under its plan the nominal robot fails; 2 of 3" in log[2]
  assert repr(guard) == ("EnsembleGuard(guarding; warm start: the nominal robot passes; 2 of 3 "
                         "randomised robots pass (67%); asked 4, refused 2)")
  # With the plan's cost, a refusal's line says what the refused plan would have cost.
  priced = guard_lib.ensemble_guard(shifted, lambda row: bool(row["value"] > 0), plan(0.0),
                                    log=log.append, cost=lambda u: jnp.sum(u**2))
  assert priced.accept is not None and not bool(priced.accept(states, plan(0.7)))
  assert log[-1].startswith("ensemble_guard: refused a step that lowers the cost to 5.88: ")


def test_a_warm_start_that_fails_on_the_nominal_robot_gives_no_guard():
  log = []
  guard = control_guard(shifted, plan(-1.5), log)
  assert guard.accept is None and guard.warm.nominal_passed is False and guard.asked == 0
  assert len(log) == 1 and log[0].endswith("iLQR runs unguarded")
  # Without a nominal row only the count is kept, and there is always a guard.
  bare = guard_lib.ensemble_guard(shifted, lambda row: bool(row["value"] > 0), plan(-1.5),
                                  nominal=False)
  assert bare.accept is not None and bare.warm.passing == 2 and bare.warm.nominal_passed is None
  judge = jax.jit(bare.accept)
  assert bool(judge(jnp.zeros((HORIZON + 1, 3)), plan(-1.2)))  # 2 of 4 again, row 0 failing
  assert not bool(judge(jnp.zeros((HORIZON + 1, 3)), plan(-2.5)))  # 1 of 4


def test_bad_guards_are_refused():
  good = plan(0.0)
  with pytest.raises(ValueError, match=r"replay must be a function"):
    guard_lib.ensemble_guard(None, bool, good)  # type: ignore[arg-type]
  with pytest.raises(ValueError, match=r"predicate must be a function"):
    guard_lib.ensemble_guard(shifted, "lands", good)  # type: ignore[arg-type]
  with pytest.raises(ValueError, match=r"warm_start must have shape \(any, any\)"):
    guard_lib.ensemble_guard(shifted, bool, jnp.zeros(HORIZON))
  with pytest.raises(ValueError, match=r"warm_start must be concrete"):
    jax.jit(lambda w: guard_lib.ensemble_guard(shifted, bool, w).asked)(good)
  with pytest.raises(ValueError, match=r"replay's outputs must be arrays with one row per robot "
                     r"\(a common first dimension\), got shapes \[\(4,\), \(3,\)\]"):
    guard_lib.ensemble_guard(lambda u: (OFFSETS, OFFSETS[:3]), bool, good)
  with pytest.raises(ValueError, match=r"predicate must give True or False .* got 1.0 for row"):
    guard_lib.ensemble_guard(shifted, lambda row: row["value"], good)
  with pytest.raises(ValueError, match=r"log must be a function"):
    guard_lib.ensemble_guard(shifted, bool, good, log="stdout")  # type: ignore[arg-type]
  with pytest.raises(ValueError, match=r"cost must be a function ctrls -> the plan's cost"):
    guard_lib.ensemble_guard(shifted, bool, good, cost=1.0)  # type: ignore[arg-type]
  # A cost of the wrong shape: refused now, not by ilqr's first accept (a reshape error then).
  def never(u):
    raise AssertionError("the warm start was replayed before cost was checked")
  with pytest.raises(ValueError, match=r"cost must return the plan's cost, one number, got "
                     r"shape \(12,\)"):
    guard_lib.ensemble_guard(never, bool, jnp.zeros((12, 2)),
                             cost=lambda u: jnp.sum(u**2, axis=1))
  with pytest.raises(ValueError, match=r"cost\(ctrls \(12, 2\)\) failed: KeyError"):
    guard_lib.ensemble_guard(never, bool, jnp.zeros((12, 2)), cost=lambda u: {}["u"])


def control_guard(replay, warm, log):
  return guard_lib.ensemble_guard(replay, lambda row: bool(row["value"] > 0), warm,
                                  log=log.append)


# iLQR swings the pendulum towards 1 rad; the ensemble replays its plans on 4 robots.
TARGET = 1.0


def swing_cost(sim) -> control.Cost:
  qpos = sim.layout.qpos

  def residual(x, u, obs, t):
    return jnp.concatenate([x[qpos] - TARGET, u])

  return control.Cost(residual, (control.Term(1, 10.0), control.Term(1, 0.01)))


def solve(sim, accept):
  settings = control.ILQRSettings(mu_init=1.0, max_retries=3, final_gains=False)
  return control.ilqr(swing_cost(sim), sim.params(1), sim.init_state(1)[0],
                      jnp.zeros((HORIZON, 1)), nstep=NSTEP, iterations=3, settings=settings,
                      accept=accept)


@pytest.fixture(scope="module")
def replay(sim):
  return functools.partial(open_loop, robots(sim).params("search", 3), sim.init_state(1)[0])


def test_a_guard_that_passes_every_plan_is_no_guard(sim, replay):
  guard = guard_lib.ensemble_guard(replay, lambda row: True, jnp.zeros((HORIZON, 1)))
  free, guarded = solve(sim, None), solve(sim, guard.accept)
  for a, b in zip(free, guarded, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert float(free.cost) < float(free.costs[0])  # the solve moved, and the guard was asked
  assert guard.asked >= int(free.iterations) >= 1 and guard.refusals == []


def test_a_guard_that_refuses_every_step_keeps_the_warm_start(sim, replay):
  qpos = sim.layout.qpos
  # At rest: zero controls keep the pendulum at exactly 0; any step the cost wants moves it.
  log = []
  guard = guard_lib.ensemble_guard(replay, lambda row: bool(np.all(row[0][:, qpos] == 0.0)),
                                   jnp.zeros((HORIZON, 1)), log=log.append)
  assert guard.accept is not None and guard.warm.share == 1.0
  stuck = solve(sim, guard.accept)
  np.testing.assert_array_equal(np.asarray(stuck.ctrls), np.zeros((HORIZON, 1)))
  assert float(stuck.cost) == float(stuck.costs[0]) and int(stuck.iterations) == 1
  # Asked once per try (the first and max_retries more), and each one refused.
  assert guard.asked == len(guard.refusals) == 4 and len(log) == 5
  assert all(not r.nominal_passed and r.passing == 0 for r in guard.refusals)


def test_a_guard_holds_the_ensemble_to_a_limit_the_cost_does_not_know(sim, replay):
  """Robots pass while the pendulum stays below 0.4 rad: the guarded plan lowers the cost and
  still passes on the nominal robot and on as many randomised ones as the warm start."""
  qpos = sim.layout.qpos

  def below(row):
    return bool(np.max(row[0][:, qpos]) <= 0.4)

  guard = guard_lib.ensemble_guard(replay, below, jnp.zeros((HORIZON, 1)))
  free, guarded = solve(sim, None), solve(sim, guard.accept)
  assert not ens.evaluate(ens.per_robot(replay(free.ctrls)), below).nominal_passed
  after = ens.evaluate(ens.per_robot(replay(guarded.ctrls)), below)
  assert after.nominal_passed and after.passing >= guard.warm.passing
  assert float(free.cost) < float(guarded.cost) < float(guarded.costs[0])
  assert len(guard.refusals) >= 1

