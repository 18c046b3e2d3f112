"""Hostile and careless calls of robot ensembles and the search and replay layers of control, each
in a child process (tests/fuzzing.py): mjbatch_jax.ensemble (Ensemble, evaluate, per_robot) and
control's cem_search, open_loop, closed_loop, plan_cost, receding_horizon_fleet, with_tail,
choose_tail and ensemble_guard (tests/test_fuzz_control.py has the planners themselves).

CASES is the table: a name, a snippet, and what it must do: raise an exception of a type whose
message matches a pattern ("raises": the pattern names the argument), or run to the end, its own
asserts included ("ok": the fixed behaviour holds). Every case sees a fresh PRELUDE: a point mass
on two slides (no contact, no gravity), an ensemble of its masses, a quadratic cost, and valid
arguments to spoil one at a time. Most cases are refused before anything compiles; the few that
search, replay or plan compile one small program.
"""

import textwrap

from tests.fuzzing import POINT_MASS, table_tests

PRELUDE = POINT_MASS + r'''
import functools, threading
from mjbatch_jax.ensemble import Ensemble, EnsembleResult, evaluate, per_robot

NSTATE = start.shape[0]
key = jax.random.key(0)
H = 3
p1 = sim.params(1)
plan = jnp.full((H, 2), 0.1)

draw = functools.partial(mjbatch_jax.randomize, scale={"body_mass": (0.9, 1.1)})

def robots(**kw):
  return Ensemble(kw.pop("sim", sim), kw.pop("fields", ("body_mass",)), kw.pop("draw", draw), **kw)

p3 = robots().params("search", 2)  # 3 rows: the nominal robot, then 2 randomised

def quadratic(z, iteration):
  return jnp.sum((z - 0.3) ** 2, axis=-1)

def search(objective=quadratic, mean=None, std=1.0, **kw):
  options = {"key": key, "iterations": 2, "num_samples": 4} | kw
  return control.cem_search(objective, jnp.zeros(2) if mean is None else mean, std, **options)

def planner():
  return control.sampling(cost(), p1, horizon=2, settings=control.PredictiveSettings(
    num_samples=2, num_knots=2))

NX = 4  # 2 nv
gains = jnp.zeros((H, 2, NX))
trajectory = jnp.tile(start, (H + 1, 1))

def closed(**kw):
  args = {"params": p1, "start": start, "ctrls": plan, "gains": gains,
          "states": trajectory} | kw
  return control.closed_loop(**args)

def fleet(**kw):
  args = {"planner": planner(), "params": p1, "starts": start, "ctrls": plan,
          "keys": jax.random.split(key, (1, 2))} | kw
  return control.receding_horizon_fleet(**args)

def final_x(xs, sensors, obs):
  return xs[:, -1, lay.qpos.start]

tails = jnp.zeros((1, 2, 2, 2))  # 1 robot, 2 tails of 2 controls

def choose(**kw):
  args = {"params": p1, "states": start[None], "candidates": tails, "nstep": 1,
          "score": final_x} | kw
  return control.choose_tail(**args)

def replay(u):
  return control.open_loop(p3, start, u)

def near(row):  # one robot's (states, sensordata): still left of x = 1
  return bool(row[0][-1, lay.qpos.start] < 1.0)

def guard(**kw):
  args = {"replay": replay, "predicate": near, "warm_start": plan} | kw
  return control.ensemble_guard(**args)
'''

# Snippets that must raise ValueError, with the regex its message must match (the argument's
# name, and what was wrong): (name, snippet, pattern).
REFUSED = [
  # Ensemble(sim, fields, draw, select, set_const, seeds).
  ("Ensemble sim None", "robots(sim=None)",
   r"sim must be a mjbatch_jax.Simulator or a mujoco.MjModel, got None"),
  ("Ensemble sim a path", "robots(sim='point.xml')", r"sim must be a mjbatch_jax.Simulator"),
  ("Ensemble no fields", "robots(fields=())", r"fields must name at least one model field"),
  ("Ensemble field not a string", "robots(fields=[1])", r"fields names must be strings, got 1"),
  ("Ensemble field twice", "robots(fields=('body_mass', 'body_mass'))",
   r"fields must be unique, got \('body_mass', 'body_mass'\)"),
  ("Ensemble fields None", "robots(fields=None)", r"fields must name at least one model field"),
  ("Ensemble unknown field", "robots(fields=('body_mas',))", r"body_mas"),
  ("Ensemble field not floating", "robots(fields=('body_parentid',))", r"body_parentid"),
  ("Ensemble draw not callable", "robots(draw={'body_mass': (0.9, 1.1)})",
   r"draw must be a function \(key, params\) -> params"),
  ("Ensemble select unknown body", "robots(select={'body_mass': ['nobody']})", r"nobody"),
  ("Ensemble select a field not among fields", "robots(select={'geom_friction': [0]})",
   r"geom_friction"),
  ("Ensemble select a list of fields", "robots(select=['body_mass'])",
   r"select must be a mapping \{field: rows \(indices or names\)\}.*got \['body_mass'\]"),
  ("Ensemble select a field name", "robots(select='body_mass')",
   r"select must be a mapping \{field: rows .*got 'body_mass'"),
  ("Ensemble set_const int", "robots(set_const=1)", r"set_const must be True or False, got 1"),
  ("Ensemble no purposes", "robots(seeds={})",
   r"seeds must be a dict of purpose -> seed with at least one purpose"),
  ("Ensemble seeds a list", "robots(seeds=[0, 1, 2])", r"seeds must be a dict of purpose"),
  ("Ensemble seed negative", "robots(seeds={'search': -1})",
   r"seeds\['search'\] must be an int in \[0, 4294967295\], got -1"),
  ("Ensemble seed above 32 bits", "robots(seeds={'search': 2**32})",
   r"seeds\['search'\] must be an int in \[0, 4294967295\]"),
  ("Ensemble seed float", "robots(seeds={'search': 1.0})", r"seeds\['search'\] must be an int"),
  ("Ensemble seed bool", "robots(seeds={'search': True})",
   r"seeds\['search'\] must be an int .*got True"),
  ("Ensemble seed NaN", "robots(seeds={'search': math.nan})", r"seeds\['search'\] must be an int"),
  ("Ensemble seed numpy float", "robots(seeds={'a': np.float64(1.0)})",
   r"seeds\['a'\] must be an int in \[0, 4294967295\], got 1.0"),
  ("Ensemble purpose not a string", "robots(seeds={0: 0})",
   r"seeds' keys must be purposes' names \(strings\), got 0"),
  ("Ensemble purpose empty", "robots(seeds={'': 0})", r"seeds' keys must be purposes' names"),
  ("Ensemble of a closed simulator", textwrap.dedent("""
    other = mjbatch_jax.Simulator(m, num_threads=1)
    other.close()
    robots(sim=other)
    """), r"this Simulator is closed"),
  # Ensemble.params, nominal, key.
  ("params unknown purpose", "robots().params('training', 2)",
   r"purpose must be one of \('search', 'validation', 'evaluation'\), got 'training'"),
  ("params purpose None", "robots().params(None, 2)", r"purpose must be one of"),
  ("params 0 robots", "robots().params('search', 0)", r"count must be an int >= 1, got 0"),
  ("params negative robots", "robots().params('search', -3)", r"count must be an int >= 1"),
  ("params robots float", "robots().params('search', 2.0)",
   r"count must be an int >= 1, got 2.0"),
  ("params robots bool", "robots().params('search', True)",
   r"count must be an int >= 1, got True"),
  ("params robots traced", "jax.jit(lambda n: robots().params('search', n))(2)",
   r"count must be a Python value known at trace time"),
  ("params nominal int", "robots().params('search', 2, nominal=1)",
   r"nominal must be True or False, got 1"),
  ("params iteration negative", "robots().params('search', 2, iteration=-1)",
   r"iteration must be an int in \[0, 2147483647\], got -1"),
  ("params iteration above int32", "robots().params('search', 2, iteration=2**31)",
   r"iteration must be an int in \[0, 2147483647\]"),
  ("params iteration float", "robots().params('search', 2, iteration=0.5)",
   r"iteration must be an int"),
  ("params iteration traced float",
   "jax.jit(lambda i: robots().params('search', 2, iteration=i))(1.0)",
   r"iteration must be an int in \[0, 2147483647\], got a traced float64 array of shape \(\)"),
  ("params iteration traced vector",
   "jax.jit(lambda i: robots().params('search', 2, iteration=i))(jnp.arange(2))",
   r"iteration must be an int .*shape \(2,\)"),
  ("params draw returns a dict",
   "robots(draw=lambda k, p: {'body_mass': p['body_mass']}).params('search', 2)",
   r"draw must return the Params it was given with new values, got dict"),
  ("params draw returns a leaf of another shape", textwrap.dedent("""
    robots(draw=lambda k, p: p.replace({'body_mass': p['body_mass'][:1]})).params('search', 2)
    """), r"draw changed the leaf 'body_mass': it must keep shape \(2, 2\)"),
  ("params draw returns float32", textwrap.dedent("""
    robots(draw=lambda k, p: p.replace({'body_mass': p['body_mass'].astype(jnp.float32)})
           ).params('search', 2)
    """), r"draw changed the leaf 'body_mass'.*dtype float64.*float32"),
  ("params draw returns other fields",
   "robots(draw=lambda k, p: sim.params(2, ('dof_damping',))).params('search', 2)",
   r"draw must return Params of the fields \('body_mass',\)"),
  ("params draw gives a NaN mass", textwrap.dedent("""
    robots(draw=lambda k, p: p.replace({'body_mass': p['body_mass'].at[1, 0].set(jnp.nan)})
           ).params('search', 2)
    """), r"draw gave 'body_mass' a value that is not finite \(robot 1 of the draw\)"),
  ("params draw divides by zero", textwrap.dedent("""
    robots(draw=lambda k, p: p.replace({'body_mass': p['body_mass'] / 0.0})).params('search', 1)
    """), r"draw gave 'body_mass' a value that is not finite \(robot 0 of the draw\)"),
  ("nominal 0 rows", "robots().nominal(0)", r"count must be an int >= 1, got 0"),
  ("key unknown purpose", "robots().key('test')", r"purpose must be one of"),
  ("key iteration string", "robots().key('search', '1')", r"iteration must be an int"),
  # evaluate and EnsembleResult.meets.
  ("evaluate no robots", "evaluate([], bool)",
   r"metrics must hold the nominal robot and at least one randomised robot, got 0 row"),
  ("evaluate only the nominal robot", "evaluate([True])",
   r"metrics must hold the nominal robot and at least one randomised robot, got 1 row"),
  ("evaluate no robots without nominal", "evaluate(np.zeros((0, 2)), nominal=False)",
   r"metrics must hold at least one randomised robot, got 0 row"),
  ("evaluate empty dict", "evaluate({}, bool)", r"metrics must hold at least one metric"),
  ("evaluate dict of unequal lengths", "evaluate({'a': np.ones(3), 'b': np.ones(2)}, bool)",
   r"metrics' arrays must have one entry per robot .*'a': 3, 'b': 2"),
  ("evaluate dict of a scalar", "evaluate({'a': np.ones(3), 'b': 1.0}, bool)",
   r"metrics' arrays must have one entry per robot"),
  ("evaluate a 0-d array", "evaluate(np.asarray(True))",
   r"metrics must have one entry per robot, got True"),
  ("evaluate a number", "evaluate(3)", r"metrics must be a list of per-robot metrics"),
  ("evaluate a string", "evaluate('pass pass')", r"metrics must be a list of per-robot metrics"),
  ("evaluate None", "evaluate(None)", r"metrics must be a list"),
  ("evaluate a generator", "evaluate(x for x in [True, True])",
   r"metrics must be a list of per-robot metrics, a dict of \(N, \.\.\.\) arrays or an"),
  ("evaluate predicate not callable", "evaluate([1, 2], predicate='x > 0')",
   r"predicate must be a function \(a robot's metrics\) -> bool, or None, got 'x > 0'"),
  ("evaluate predicate gives an int", "evaluate([1, 2], lambda m: m)",
   r"predicate must give True or False for each robot, got 1 for row 0"),
  ("evaluate predicate gives None", "evaluate([1, 2], lambda m: None)",
   r"predicate must give True or False for each robot, got None for row 0"),
  ("evaluate predicate gives an array", "evaluate(np.ones((2, 3)), lambda m: m > 0)",
   r"predicate must give True or False .*shape \(3,\)"),
  ("evaluate predicate gives a float array", "evaluate([0.5, 2.0], lambda m: np.float64(m))",
   r"predicate must give True or False"),
  ("evaluate verdicts of floats", "evaluate(np.array([1.0, 0.0]))",
   r"the metrics \(no predicate\) must give True or False for each robot, got 1.0 for row 0"),
  ("evaluate NaN verdict", "evaluate([True, math.nan])",
   r"the metrics \(no predicate\) must give True or False .*nan for row 1"),
  ("evaluate nominal int", "evaluate([True, False], nominal=0)",
   r"nominal must be True or False, got 0"),
  ("meets share above 1", "evaluate([True, True]).meets(1.5)",
   r"share must be a finite number in \[0.0, 1.0\], got 1.5"),
  ("meets share NaN", "evaluate([True, True]).meets(math.nan)", r"share must be"),
  ("meets share bool", "evaluate([True, True]).meets(True)",
   r"share must be a finite number in \[0.0, 1.0\], got True"),
  ("meets nominal string", "evaluate([True, True]).meets(0.5, nominal='yes')",
   r"nominal must be True or False"),
  # per_robot.
  ("per_robot no arrays", "per_robot({})",
   r"outputs must be arrays with one row per robot \(a common first dimension\), got shapes \[\]"),
  ("per_robot None", "per_robot(None)", r"outputs must be arrays with one row per robot"),
  ("per_robot strings", "per_robot(['ab', 'cd'])",
   r"outputs must be arrays with one row per robot .*got shapes \[\(\), \(\)\]"),
  ("per_robot a scalar leaf", "per_robot((np.zeros((2, 3)), 1.0))",
   r"outputs must be arrays with one row per robot .*\[\(2, 3\), \(\)\]"),
  ("per_robot unequal rows", "per_robot((np.zeros((2, 3)), np.zeros((3, 3))), 'replay')",
   r"replay must be arrays with one row per robot .*\[\(2, 3\), \(3, 3\)\]"),
  # cem_search: every argument.
  ("cem_search objective not callable", "control.cem_search('min', jnp.zeros(2), 1.0, key=key, "
   "iterations=1, num_samples=4)", r"objective must be a function \(z, iteration\) -> values"),
  ("cem_search mean NaN", "search(mean=jnp.array([0.0, jnp.nan]))", r"mean must .*(NaN|finite)"),
  ("cem_search mean inf", "search(mean=jnp.array([jnp.inf, 0.0]))", r"mean must .*(inf|finite)"),
  ("cem_search mean empty", "search(mean=jnp.zeros(0))",
   r"mean must have shape \(D,\) or \(restarts, D\) = \(1, D\) with D >= 1, got \(0,\)"),
  ("cem_search mean scalar", "search(mean=jnp.asarray(0.0))",
   r"mean must have shape \(D,\) or \(restarts, D\)"),
  ("cem_search mean rows not restarts", "search(mean=jnp.zeros((3, 2)), restarts=2)",
   r"mean must have shape \(D,\) or \(restarts, D\) = \(2, D\) with D >= 1, got \(3, 2\)"),
  ("cem_search mean strings", "search(mean=['a', 'b'])", r"mean must be an array of numbers"),
  ("cem_search mean booleans", "search(mean=jnp.array([True, False]))",
   r"mean must be float32 or float64 numbers, got booleans"),
  ("cem_search std 0", "search(std=0.0)", r"std must be > 0"),
  ("cem_search std negative entry", "search(std=jnp.array([1.0, -1.0]))", r"std must be > 0"),
  ("cem_search std NaN", "search(std=math.nan)", r"std must .*(NaN|finite)"),
  ("cem_search std inf", "search(std=math.inf)", r"std must .*(inf|finite)"),
  ("cem_search std wrong length", "search(std=jnp.ones(3))",
   r"std must be a number, \(D,\) = \(2,\) or \(restarts, D\) = \(1, 2\), got shape \(3,\)"),
  ("cem_search std of other restarts", "search(std=jnp.ones((3, 2)), restarts=2)",
   r"std must be a number, \(D,\) = \(2,\) or \(restarts, D\) = \(2, 2\), got shape \(3, 2\)"),
  ("cem_search lower NaN", "search(lower=math.nan)", r"lower must .*NaN"),
  ("cem_search upper NaN entry", "search(upper=jnp.array([1.0, jnp.nan]))", r"upper must .*NaN"),
  ("cem_search lower wrong length", "search(lower=jnp.zeros(3))", r"lower must .*\(2,\)"),
  ("cem_search lower above upper", "search(lower=1.0, upper=-1.0)", r"lower must be <= upper"),
  ("cem_search lower +inf", "search(lower=math.inf)",  # once: best [inf, inf], no error
   r"lower must not be inf \(an infinite bound is no bound, on its own side only\)"),
  ("cem_search upper -inf", "search(upper=-math.inf)", r"upper must not be -inf"),
  ("cem_search lower string", "search(lower='-1')", r"lower must be"),
  ("cem_search key an int", "search(key=0)", r"key must be one PRNG key or restarts = 1 of them"),
  ("cem_search key None", "search(key=None)", r"key must be one PRNG key"),
  ("cem_search keys of a grid", "search(key=jax.random.split(key, (2, 2)))",
   r"key must be one PRNG key or restarts = 1 of them .*got PRNG keys of shape \(2, 2\)"),
  ("cem_search keys of other restarts", "search(key=jax.random.split(key, 3), restarts=2)",
   r"key must be one PRNG key or restarts = 2 of them, got 3 keys"),
  ("cem_search iterations negative", "search(iterations=-1)",
   r"iterations must be an int >= 0, got -1"),
  ("cem_search iterations float", "search(iterations=2.0)", r"iterations must be an int >= 0"),
  ("cem_search iterations bool", "search(iterations=True)",
   r"iterations must be an int >= 0, got True"),
  ("cem_search zero samples", "search(num_samples=0)", r"num_samples must be an int >= 2, got 0"),
  ("cem_search one sample", "search(num_samples=1)", r"num_samples must be an int >= 2, got 1"),
  ("cem_search num_elites 0", "search(num_elites=0)",
   r"num_elites must be an int in \[1, 4\], got 0"),
  ("cem_search num_elites above num_samples", "search(num_elites=5)",
   r"num_elites must be an int in \[1, 4\], got 5"),
  ("cem_search num_elites bool", "search(num_elites=True)", r"num_elites must be an int"),
  ("cem_search restarts 0", "search(restarts=0)", r"restarts must be an int >= 1, got 0"),
  ("cem_search smoothing 1", "search(smoothing=1.0)",
   r"smoothing must be a finite number in \[0.0, 1.0\)"),
  ("cem_search smoothing NaN", "search(smoothing=math.nan)", r"smoothing must be"),
  ("cem_search std_min negative", "search(std_min=-1e-3)",
   r"std_min must be a finite number >= 0"),
  ("cem_search keep_best int", "search(keep_best=1)", r"keep_best must be True or False, got 1"),
  ("cem_search maximize string", "search(maximize='yes')",
   r"maximize must be True or False, got 'yes'"),
  ("cem_search log not callable", "search(log=[])",
   r"log must be None or a function of a CEMIteration"),
  ("cem_search objective of one argument", "search(objective=lambda z: jnp.sum(z, axis=-1))",
   r"objective\(z \(4, 2\), iteration\) failed: TypeError"),
  ("cem_search objective returns a column", "search(objective=lambda z, i: z[:, :1])",
   r"objective must return \(restarts \* num_samples,\) = \(4,\) real numbers for z of shape "
   r"\(4, 2\), got shape \(4, 1\)"),
  ("cem_search objective returns a scalar", "search(objective=lambda z, i: jnp.sum(z))",
   r"objective must return .*got shape \(\) of dtype float64"),
  ("cem_search objective ignores restarts",
   "search(objective=lambda z, i: jnp.zeros(4), restarts=2)",
   r"objective must return \(restarts \* num_samples,\) = \(8,\) real numbers.*got shape \(4,\)"),
  ("cem_search objective returns booleans",
   "search(objective=lambda z, i: jnp.sum(z, axis=-1) > 0)",
   r"objective must return .*real numbers .*dtype bool"),
  ("cem_search objective returns complex",
   "search(objective=lambda z, i: jnp.sum(z, axis=-1) * 1j)",
   r"objective must return .*real numbers .*complex128"),
  ("cem_search objective returns None", "search(objective=lambda z, i: None)",
   r"objective must return .*got NoneType"),
  ("cem_search objective returns a list", "search(objective=lambda z, i: [0.0] * 4)",
   r"objective must return \(restarts \* num_samples,\) = \(4,\) real numbers .*got list"),
  ("cem_search objective in numpy", "search(objective=lambda z, i: np.sum(np.asarray(z), axis=-1))",
   r"objective\(z \(4, 2\), iteration\) failed: TracerArrayConversionError"),
  ("cem_search objective raises", "search(objective=lambda z, i: z.not_there)",
   r"objective\(z \(4, 2\), iteration\) failed: AttributeError"),
  ("cem_search under jit, its mean traced",
   "jax.jit(lambda mu: search(mean=mu).best)(jnp.zeros(2))",
   r"mean must be concrete, got a traced float64 array of shape \(2,\): cem_search runs on the "
   r"host .*must be called outside jax.jit"),
  ("cem_search under jit, its key traced",
   "jax.jit(lambda k: search(mean=np.zeros(2), key=k).best)(key)",
   r"key must be concrete, got a traced .*cem_search runs on the host"),
  ("cem_search under grad, its std traced",
   "jax.grad(lambda s: search(mean=np.zeros(2), std=s).best_value)(1.0)",
   r"std must be concrete, got a traced .*must be called outside jax.jit, vmap and grad"),
  ("cem_search under vmap, its lower traced",
   "jax.vmap(lambda lo: search(mean=np.zeros(2), lower=lo).best)(-jnp.ones(2))",
   r"lower must be concrete, got a traced"),
  ("cem_search under jit, every argument concrete",
   "jax.jit(lambda x: search(mean=np.zeros(2)).best + x)(1.0)",
   r"cem_search was called inside a traced function: cem_search runs on the host"),
  # open_loop, closed_loop, plan_cost: params, start, ctrls, nstep, gains, states, bounds.
  ("open_loop params a dict", "control.open_loop({'body_mass': jnp.ones((1, 2))}, start, plan)",
   r"params must come from Simulator.params\(num_sims, fields\), got dict"),
  ("open_loop params None", "control.open_loop(None, start, plan)",
   r"params must come from Simulator.params\(num_sims, fields\), got NoneType"),
  ("open_loop start wrong size", "control.open_loop(p1, start[:3], plan)",
   r"start must be a state row of shape \(\d+,\) or \(N, \d+\) \(a row per robot\), got \(3,\)"),
  ("open_loop start NaN", "control.open_loop(p1, start.at[1].set(jnp.nan), plan)",
   r"start must .*(NaN|finite)"),
  ("open_loop start 3-D", "control.open_loop(p1, start[None, None], plan)",
   r"start must be a state row"),
  ("open_loop ctrls wrong nu", "control.open_loop(p1, start, jnp.zeros((H, 3)))",
   r"ctrls must be a plan of shape \(T, nu=2\) or \(N, T, nu=2\) .*got \(3, 3\)"),
  ("open_loop no controls", "control.open_loop(p1, start, jnp.zeros((0, 2)))",
   r"ctrls must be a plan .*with T >= 1, got \(0, 2\)"),
  ("open_loop ctrls 1-D", "control.open_loop(p1, start, jnp.zeros(2))", r"ctrls must be a plan"),
  ("open_loop ctrls inf", "control.open_loop(p1, start, plan.at[0, 0].set(jnp.inf))",
   r"ctrls must .*(inf|finite)"),
  ("open_loop ctrls booleans", "control.open_loop(p1, start, jnp.zeros((H, 2), bool))",
   r"ctrls must be float32 or float64 numbers, got booleans"),
  ("open_loop ctrls strings", "control.open_loop(p1, start, [['a', 'b']])",
   r"ctrls must be an array of numbers"),
  ("open_loop nstep 0", "control.open_loop(p1, start, plan, 0)", r"nstep must be an int >= 1"),
  ("open_loop nstep float", "control.open_loop(p1, start, plan, 2.0)",
   r"nstep must be an int >= 1, got 2.0"),
  ("open_loop robots disagree", "control.open_loop(p3, jnp.tile(start, (2, 1)), plan)",
   r"the arguments disagree on the number of robots .*start 2, params 3"),
  ("open_loop params leaf of another shape",
   "control.open_loop(p3.replace({'body_mass': jnp.ones((3, 5))}), start, plan)",
   r"params\['body_mass'\] must have shape"),
  ("open_loop params of a closed simulator", textwrap.dedent("""
    other = mjbatch_jax.Simulator(m, num_threads=1)
    p = other.params(1)
    other.close()
    control.open_loop(p, start, plan)
    """), r"closed"),
  ("closed_loop gains wrong nx", "closed(gains=jnp.zeros((H, 2, 3)))",
   r"gains must be the plan's feedback gains \(T, nu, nx\) of shape \(3, 2, 4\)"),
  ("closed_loop gains of another horizon", "closed(gains=jnp.zeros((H + 1, 2, NX)))",
   r"gains must be .*of shape \(3, 2, 4\)"),
  ("closed_loop gains NaN", "closed(gains=gains.at[0, 0, 0].set(jnp.nan))",
   r"gains must .*(NaN|finite)"),
  ("closed_loop states one short", "closed(states=trajectory[:-1])",
   r"states must be the plan's trajectory \(T \+ 1 states\) of shape \(4, \d+\)"),
  ("closed_loop states NaN", "closed(states=trajectory.at[2, 0].set(jnp.nan))",
   r"states must .*(NaN|finite)"),
  ("closed_loop bounds reversed", "closed(bounds=(1.0, -1.0))", r"bounds: lower > upper"),
  ("closed_loop bounds NaN", "closed(bounds=(math.nan, 1.0))", r"bounds\[0\] must not hold NaN"),
  ("closed_loop bounds one number", "closed(bounds=1.0)", r"bounds must be a pair"),
  ("closed_loop bounds wrong length", "closed(bounds=(jnp.zeros(3), 1.0))",
   r"bounds\[0\] must be a number or have shape \(2,\), got \(3,\)"),
  ("closed_loop nstep negative", "closed(nstep=-1)", r"nstep must be an int >= 1"),
  ("closed_loop robots disagree", "closed(params=p3, gains=jnp.zeros((2, H, 2, NX)))",
   r"the arguments disagree on the number of robots .*gains 2, params 3"),
  ("plan_cost cost a function", "control.plan_cost(lambda x, u: 0.0, p1, start, plan)",
   r"cost must be a control.Cost, got function"),
  ("plan_cost residual of the wrong size",
   "control.plan_cost(cost(control.Term(2), control.Term(3)), p1, start, plan)",
   r"Cost.residual"),
  ("plan_cost residual that fails",
   "control.plan_cost(control.Cost(lambda x, u, o, t: x.nope, (control.Term(2),)), p1, start, "
   "plan)", r"Cost.residual\(state .*failed: AttributeError"),
  ("plan_cost cost observes an unknown field", "control.plan_cost(control.Cost(lambda x, u, o, t: "
   "u, (control.Term(2),), observe=('xposs',)), p1, start, plan)",
   r"Cost.observe names 'xposs': 'xposs' is not an mjData array of fixed size"),
  ("plan_cost start NaN", "control.plan_cost(cost(), p1, start * jnp.nan, plan)",
   r"start must .*(NaN|finite)"),
  ("plan_cost ctrls wrong nu", "control.plan_cost(cost(), p1, start, jnp.zeros((H, 1)))",
   r"ctrls must be a plan of shape \(T, nu=2\)"),
  ("plan_cost nstep bool", "control.plan_cost(cost(), p1, start, plan, True)",
   r"nstep must be an int >= 1, got True"),
  # receding_horizon_fleet and with_tail.
  ("fleet planner a function", "fleet(planner=lambda *a: a)",
   r"planner must be a control.Planner \(control.sampling, control.ilqr_planner\), got function"),
  ("fleet params None", "fleet(params=None)", r"params must come from Simulator.params"),
  ("fleet starts wrong size", "fleet(starts=start[:2])",
   r"starts must be a state row of shape \(\d+,?\) or \(N, \d+\)"),
  ("fleet starts NaN", "fleet(starts=start.at[0].set(jnp.nan))", r"starts must .*(NaN|finite)"),
  ("fleet ctrls wrong nu", "fleet(ctrls=jnp.zeros((H, 1)))",
   r"ctrls must be plans of shape \(F, nu=2\) or \(N, F, nu=2\) with F >= 1, got \(3, 1\)"),
  ("fleet no controls", "fleet(ctrls=jnp.zeros((0, 2)))",
   r"ctrls must be plans .*F >= 1, got \(0, 2\)"),
  ("fleet ctrls NaN", "fleet(ctrls=plan.at[1, 1].set(jnp.nan))", r"ctrls must .*(NaN|finite)"),
  ("fleet keys one key", "fleet(keys=key)",
   r"keys must be \(N, knots\) PRNG keys, one per robot and knot.*got keys of shape \(\)"),
  ("fleet keys a row", "fleet(keys=jax.random.split(key, 2))",
   r"keys must be \(N, knots\) PRNG keys.*got keys of shape \(2,\)"),
  ("fleet keys no knots", "fleet(keys=jax.random.split(key, (1, 0)))",
   r"keys must be \(N, knots\) PRNG keys.*\(1, 0\)"),
  ("fleet keys ints", "fleet(keys=[[0, 1]])",
   r"keys must be \(N, knots\) PRNG keys.*got \[\[0, 1\]\]"),
  ("fleet keys floats", "fleet(keys=jnp.zeros((1, 2, 2)))",
   r"keys\[0, 0\] must be one PRNG key .*got a float64 array of shape \(2,\)"),
  ("fleet keys a list of keys", "fleet(keys=[[key, key]])",
   r"keys must be \(N, knots\) PRNG keys, one per robot and knot"),
  ("fleet keys raw of the wrong width", "fleet(keys=jnp.zeros((1, 2, 3), jnp.uint32))",
   r"keys\[0, 0\] must be one PRNG key"),
  ("fleet first negative", "fleet(first=-1)", r"first must be an int in \[0, 2\], got -1"),
  ("fleet first past the plan", "fleet(first=H)", r"first must be an int in \[0, 2\], got 3"),
  ("fleet first float", "fleet(first=1.0)", r"first must be an int in \[0, 2\], got 1.0"),
  ("fleet vmap_planners int", "fleet(vmap_planners=0)",
   r"vmap_planners must be True or False, got 0"),
  ("fleet robots disagree",
   "fleet(starts=jnp.tile(start, (2, 1)), keys=jax.random.split(key, (3, 2)))",
   r"the arguments disagree on the number of robots .*starts 2.*keys 3"),
  ("fleet params rows disagree", "fleet(params=p3, keys=jax.random.split(key, (2, 2)))",
   r"the arguments disagree on the number of robots .*keys 2.*params 3"),
  ("fleet on a closed simulator", "p = planner(); sim.close(); fleet(planner=p)",
   r"the Simulator of these params \(engine \d+\) is closed"),
  ("with_tail plan of another planner", textwrap.dedent("""
    q = control.ilqr_planner(cost(), p1, horizon=2)
    control.with_tail(planner(), q.init(), jnp.zeros(2))
    """), r"plan must be a control.SamplingPlan \(from planner.init\), got ILQRPlan"),
  ("with_tail plan a tuple", "p = planner(); control.with_tail(p, tuple(p.init()), jnp.zeros(2))",
   r"plan must be a control.SamplingPlan \(from planner.init\), got tuple"),
  ("with_tail plan None", "control.with_tail(planner(), None, jnp.zeros(2))",
   r"plan must be a control.SamplingPlan .*got NoneType"),
  ("with_tail plan NaN", textwrap.dedent("""
    p = planner()
    control.with_tail(p, p.init()._replace(knots=jnp.full((2, 2), jnp.nan)), jnp.zeros(2))
    """), r"plan.knots must not hold NaN or inf: nan at index \(0, 0\)"),
  ("with_tail planner None", "control.with_tail(None, planner().init(), jnp.zeros(2))",
   r"planner must be a control.Planner .*got NoneType"),
  ("with_tail ctrl wrong length", "p = planner(); control.with_tail(p, p.init(), jnp.zeros(3))",
   r"ctrl must have shape \(2,\)"),
  ("with_tail ctrl NaN", "p = planner(); control.with_tail(p, p.init(), jnp.array([0, jnp.nan]))",
   r"ctrl must .*(NaN|finite)"),
  ("with_tail ctrl a plan", "p = planner(); control.with_tail(p, p.init(), jnp.zeros((2, 2)))",
   r"ctrl must have shape \(2,\)"),
  # choose_tail.
  ("choose_tail states one row 1-D", "choose(states=start)",
   r"states must be the robots' state rows \(N, nstate=\d+\), got \(\d+,\)"),
  ("choose_tail states NaN", "choose(states=start[None] * jnp.nan)",
   r"states must .*(NaN|finite)"),
  ("choose_tail states wrong size", "choose(states=start[None, :3])",
   r"states must be the robots' state rows"),
  ("choose_tail candidates 3-D", "choose(candidates=tails[0])",
   r"candidates must be \(N=1, K, T, nu=2\) tails, got \(2, 2, 2\)"),
  ("choose_tail candidates of other robots", "choose(candidates=jnp.zeros((2, 2, 2, 2)))",
   r"candidates must be \(N=1, K, T, nu=2\) tails, got \(2, 2, 2, 2\)"),
  ("choose_tail candidates wrong nu", "choose(candidates=jnp.zeros((1, 2, 2, 3)))",
   r"candidates must be \(N=1, K, T, nu=2\)"),
  ("choose_tail no candidates", "choose(candidates=jnp.zeros((1, 0, 2, 2)))",
   r"candidates must hold K >= 1 tails of T >= 1 controls, got \(1, 0, 2, 2\)"),
  ("choose_tail empty tails", "choose(candidates=jnp.zeros((1, 2, 0, 2)))",
   r"candidates must hold K >= 1 tails of T >= 1 controls"),
  ("choose_tail candidates inf", "choose(candidates=tails.at[0, 0, 0, 0].set(jnp.inf))",
   r"candidates must .*(inf|finite)"),
  ("choose_tail params of other robots", "choose(params=p3, states=jnp.tile(start, (2, 1)), "
   "candidates=jnp.zeros((2, 2, 2, 2)))",
   r"params must be of one simulation or of the N=2 robots, got 3 rows"),
  ("choose_tail nstep 0", "choose(nstep=0)", r"nstep must be an int >= 1, got 0"),
  ("choose_tail score not callable", "choose(score='height')",
   r"score must be a function \(states, sensordata, obs\) -> \(N K,\) numbers"),
  ("choose_tail score of the wrong shape", "choose(score=lambda xs, s, o: xs[:, -1])",
   r"score must return \(2,\) floating-point numbers, one per rollout \(N K = 1 x 2\)"),
  ("choose_tail score of ints", "choose(score=lambda xs, s, o: jnp.zeros(2, jnp.int32))",
   r"score must return \(2,\) floating-point numbers.*int32"),
  ("choose_tail score that fails", "choose(score=lambda xs, s, o: o['xpos'])",
   r"score\(states \(2, 2, \d+\), sensordata \(2, 2, 0\), obs\) failed: KeyError"),
  ("choose_tail observe a string", "choose(observe='xpos')",
   r"observe must be a sequence of mjData field names, got 'xpos'"),
  ("choose_tail observe unknown field", "choose(observe=('xposs',))", r"xposs"),
  ("choose_tail keep_first NaN", "choose(keep_first=math.nan)", r"keep_first must be"),
  ("choose_tail keep_first string", "choose(keep_first='0.1')", r"keep_first must be"),
  ("choose_tail keep_first bool", "choose(keep_first=True)",
   r"keep_first must be a number, got True"),
  ("choose_tail params None", "choose(params=None)",
   r"params must come from Simulator.params\(num_sims, fields\), got NoneType"),
  ("choose_tail on a closed simulator", "sim.close(); choose()", r"is closed"),
  ("choose_tail return_scores int", "choose(return_scores=1)",
   r"return_scores must be True or False, got 1"),
  # ensemble_guard.
  ("guard replay not callable", "guard(replay=p3)",
   r"replay must be a function ctrls -> per-robot outputs"),
  ("guard predicate not callable", "guard(predicate=True)",
   r"predicate must be a function \(one robot's outputs\) -> bool, got True"),
  ("guard warm start traced", "jax.jit(lambda u: guard(warm_start=u).accept)(plan)",
   r"warm_start must be concrete"),
  ("guard warm start NaN", "guard(warm_start=plan.at[0, 0].set(jnp.nan))",
   r"warm_start must .*(NaN|finite)"),
  ("guard warm start 1-D", "guard(warm_start=plan[0])",
   r"warm_start must have shape \(any, any\), got \(2,\)"),
  ("guard warm start 3-D", "guard(warm_start=plan[None])",
   r"warm_start must have shape \(any, any\), got \(1, 3, 2\)"),
  ("guard nominal int", "guard(nominal=1)", r"nominal must be True or False, got 1"),
  ("guard log not callable", "guard(log='stdout')",
   r"log must be a function of one line of text, or None"),
  ("guard cost not callable", "guard(cost=cost())", r"cost must be a function ctrls -> "),
  ("guard replay without rows", "guard(replay=lambda u: (jnp.zeros((3, 1)), jnp.zeros(2)))",
   r"replay's outputs must be arrays with one row per robot"),
  ("guard replay gives None", "guard(replay=lambda u: None)",
   r"replay's outputs must be arrays with one row per robot .*got shapes \[\]"),
  ("guard accept of a plan of another nu", "guard().accept(trajectory, jnp.zeros((H, 3)))",
   r"ctrls must be a plan of shape \(T, nu=2\)"),
  ("guard predicate gives a number", "guard(predicate=lambda row: 1)",
   r"predicate must give True or False for each robot, got 1 for row 0"),
  ("guard replay of the nominal robot only", "guard(replay=lambda u: control.open_loop(p1, "
   "start, u))", r"metrics must hold the nominal robot and at least one randomised robot"),
]

# Snippets whose own asserts state the fixed behaviour: (name, snippet).
HOLDS = [
  ("Ensemble of one robot, numpy seeds, one purpose", textwrap.dedent("""
    e = robots(seeds={'check': np.uint32(7)}, set_const=np.bool_(True))
    assert e.purposes == ('check',)
    p = e.params('check', np.int64(1))
    assert p['body_mass'].shape == (2, 2)
    np.testing.assert_array_equal(p['body_mass'][0], m.body_mass)
    q = e.params('check', 1, nominal=False, iteration=np.int32(2**31 - 1))
    assert q['body_mass'].shape == (1, 2)
    """)),
  ("Ensemble of an MjModel, a field name as a string", textwrap.dedent("""
    e = Ensemble(m, 'body_mass', draw, seeds={'search': 2**32 - 1})
    assert e.fields == ('body_mass',) and e.params('search', 1)['body_mass'].shape == (2, 2)
    """)),
  ("Ensemble keeps its seeds when the caller's dict changes", textwrap.dedent("""
    seeds = {'search': 0}
    e = robots(seeds=seeds)
    before = e.params('search', 2)['body_mass']
    seeds['search'] = 5
    np.testing.assert_array_equal(e.params('search', 2)['body_mass'], before)
    """)),
  ("Ensemble params from several threads are the same rows", textwrap.dedent("""
    e = robots()
    want = np.asarray(e.params('evaluation', 4)['body_mass'])
    out = [None] * 4
    def run(i):
      out[i] = np.asarray(e.params('evaluation', 4)['body_mass'])
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for got in out:
      np.testing.assert_array_equal(got, want)
    """)),
  ("Ensemble traced iteration", textwrap.dedent("""
    e = robots()
    traced = jax.jit(lambda i: e.params('search', 2, iteration=i)['body_mass'])(jnp.int32(3))
    np.testing.assert_allclose(traced, e.params('search', 2, iteration=3)['body_mass'],
                               rtol=1e-15)
    """)),
  ("evaluate two rows and one without nominal", textwrap.dedent("""
    r = evaluate([True, jnp.asarray(False)])
    assert r.nominal_passed and r.robots == 1 and r.passing == 0 and r.share == 0.0
    assert r.meets(0.0) and not r.meets(0.5)
    s = evaluate({'x': np.array([3.0])}, lambda row: bool(row['x'] > 1), nominal=False)
    assert s.nominal_passed is None and s.passing == 1 and s.meets(1.0)
    assert s.summary() == {'nominal_passed': None, 'passing': 1, 'robots': 1, 'share': 1.0,
                           'passed': [True]}
    """)),
  ("per_robot of one robot", textwrap.dedent("""
    rows = per_robot({'states': np.zeros((1, 5, 3)), 'sensors': np.zeros((1, 5, 0))})
    assert len(rows) == 1 and rows[0]['states'].shape == (5, 3)
    """)),
  ("cem_search of the smallest size", textwrap.dedent("""
    r = control.cem_search(lambda z, i: z[:, 0] ** 2, jnp.array([1.0]), 0.5, key=key,
                           iterations=1, num_samples=2, num_elites=1)
    assert r.best.shape == (1,) and r.means.shape == (2, 1, 1) and r.std.shape == (1, 1)
    assert float(r.best_value) <= 1.0  # candidate 0 is the start mean
    """)),
  ("cem_search of zero iterations", textwrap.dedent("""
    r = search(iterations=0, lower=-0.5, upper=0.5, mean=jnp.array([2.0, 0.0]))
    np.testing.assert_array_equal(r.best, [0.5, 0.0])  # the start mean, clipped
    assert r.best_value == jnp.inf and r.best_value_per_iteration.shape == (0,)
    """)),
  ("cem_search of an objective that is always NaN", textwrap.dedent("""
    seen = []
    r = search(objective=lambda z, i: jnp.full(z.shape[0], jnp.nan), iterations=3,
               maximize=True, log=seen.append)
    assert r.best_value == -jnp.inf and len(seen) == 3 and math.isnan(seen[-1].mean_value)
    np.testing.assert_array_equal(r.means[-1], r.means[0])  # nothing finite: no move
    np.testing.assert_array_equal(r.std, jnp.ones((1, 2)))
    """)),
  ("cem_search of an integer objective, raw keys per restart", textwrap.dedent("""
    r = search(objective=lambda z, i: jnp.sum(jnp.abs(z) > 0.5, axis=-1), restarts=2,
               key=jax.random.split(jax.random.PRNGKey(1), 2), lower=-1.0, upper=jnp.inf)
    assert r.best_value.dtype == jnp.float64 and r.best_per_restart.shape == (2, 2)
    """)),
  ("cem_search from several threads", textwrap.dedent("""
    want = np.asarray(search().best)
    out = [None] * 3
    def run(i):
      out[i] = np.asarray(search().best)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for got in out:
      np.testing.assert_array_equal(got, want)
    """)),
  ("open_loop of one control, closed_loop with zero gains equal", textwrap.dedent("""
    xs, s = control.open_loop(p1, start, plan[:1])
    assert xs.shape == (1, 1, NSTATE) and s.shape == (1, 1, 0)
    # closed_loop on the same point mass with a sensor (the sensorless model: the next case).
    sensed = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(XML.replace(
      '</actuator>', '</actuator><sensor><jointpos joint="x"/></sensor>')), num_threads=1)
    p = sensed.params(2, ('body_mass',))
    p = p.replace({'body_mass': p['body_mass'] * jnp.array([[1.0], [1.5]])})
    a, _ = control.open_loop(p, start, plan, 2)
    b, sensors = closed(params=p, nstep=2)
    np.testing.assert_array_equal(a, b)
    assert sensors.shape == (2, 2 * H, 1)
    """)),
  ("closed_loop, open_loop and the fleet on a model without sensors", textwrap.dedent("""
    # sensordata of width 0: closed_loop raised ZeroDivisionError reshaping it (-1 of size 0)
    # when this table was written.
    assert m.nsensordata == 0
    b, sensors = closed(params=p3, nstep=2)
    assert b.shape == (3, 2 * H, NSTATE) and sensors.shape == (3, 2 * H, 0)
    a, open_sensors = control.open_loop(p3, start, plan, 2)
    np.testing.assert_array_equal(a, b)
    assert open_sensors.shape == (3, 2 * H, 0)
    q = control.ilqr_planner(cost(), p1, horizon=2)
    run = fleet(planner=q)
    assert run.states.shape == (1, 2, NSTATE) and run.sensordata.shape == (1, 2, 0)
    pick = choose(candidates=jnp.zeros((1, 2, 2, 2)), score=lambda xs, s, o: s.sum(axis=(1, 2)))
    assert pick.shape == (1,)
    """)),
  ("plan_cost of one robot, and a NaN residual costs inf", textwrap.dedent("""
    c = control.plan_cost(cost(), p1, start, plan)
    assert c.shape == (1,) and np.isfinite(c[0])
    assert control.plan_cost(cost(), p3, start, plan).shape == (3,)
    nan = control.Cost(lambda x, u, o, t: jnp.full(4, jnp.nan), (control.Term(2), control.Term(2)))
    np.testing.assert_array_equal(control.plan_cost(nan, p1, start, plan), [jnp.inf])
    """)),
  ("open_loop from several threads", textwrap.dedent("""
    want = np.asarray(control.open_loop(p3, start, plan)[0])
    out = [None] * 4
    def run(i):
      out[i] = np.asarray(control.open_loop(p3, start, plan)[0])
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for got in out:
      np.testing.assert_array_equal(got, want)
    """)),
  ("fleet of one robot for one knot", textwrap.dedent("""
    run = fleet(keys=jax.random.split(key, (1, 1)), first=H - 1)
    assert run.states.shape == (1, 1, NSTATE) and run.ctrls.shape == (1, 1, 2)
    assert not bool(run.real_failed.any())
    """)),
  ("with_tail of a sampling and an iLQR plan", textwrap.dedent("""
    p = planner()
    plan0 = p.init(jnp.ones((2, 2)))
    new = control.with_tail(p, plan0, np.float32([0.5, -0.5]))
    np.testing.assert_allclose(p.controls(new)[-1], [0.5, -0.5], atol=1e-12)
    np.testing.assert_array_equal(new.std, plan0.std)
    q = control.ilqr_planner(cost(), p1, horizon=2)
    new = control.with_tail(q, q.init(), [0.2, 0.1])
    np.testing.assert_allclose(q.controls(new)[-1], [0.2, 0.1])
    """)),
  ("choose_tail of one candidate, a NaN score scores inf", textwrap.dedent("""
    pick, scores = choose(candidates=tails[:, :1, :1], return_scores=True)
    assert pick.shape == (1,) and int(pick[0]) == 0 and scores.shape == (1, 1)
    pick, scores = choose(score=lambda xs, s, o: jnp.array([jnp.nan, 1.0]), return_scores=True,
                          keep_first=math.inf)
    assert int(pick[0]) == 1 and scores[0, 0] == jnp.inf  # a failed first is never kept
    pick = choose(score=lambda xs, s, o: jnp.array([jnp.nan, 1.0]))
    assert int(pick[0]) == 1
    """)),
  ("ensemble_guard of a warm start that fails the nominal robot", textwrap.dedent("""
    lines = []
    g = guard(predicate=lambda row: False, log=lines.append)
    assert g.accept is None and g.warm.nominal_passed is False and len(lines) == 1
    g = guard()
    assert g.accept is not None and g.warm.passing == 2 and g.asked == 0
    assert bool(jax.jit(g.accept)(trajectory, plan)) and g.asked == 1
    """)),
  ("ensemble_guard inside ilqr", textwrap.dedent("""
    g = guard()
    result = control.ilqr(cost(), p1, start, plan, iterations=2, accept=g.accept)
    assert g.asked >= 1 and np.isfinite(float(result.cost))
    """)),
]

CASES = ([(name, code, ("raises", "ValueError", pattern)) for name, code, pattern in REFUSED]
         + [(name, code, ("ok",)) for name, code in HOLDS])


results, test_names_are_unique, test_case = table_tests(PRELUDE, CASES)
