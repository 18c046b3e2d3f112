"""Hostile and careless calls of mjbatch_jax.control, each in a child process (tests/fuzzing.py).

CASES is the table: a name, a snippet, and what it must do: raise an exception of a type whose
message matches a pattern ("raises": the pattern names the argument), or run to the end, its own
asserts included ("ok": the fixed behaviour holds). Every case sees a fresh PRELUDE: a point mass
on two slides (no contact, no gravity), a quadratic cost on it, and builders of small planners.
Most cases are refused before anything compiles; the few that plan or step compile one program.
"""

import textwrap

from tests.fuzzing import POINT_MASS, table_tests

PRELUDE = POINT_MASS + r'''
key = jax.random.PRNGKey(0)
H = 4

def settings(method="predictive", **kw):
  small = {"num_samples": 4, "num_knots": 2, **({"num_elites": 2} if method == "cem" else {})}
  return control.SETTINGS[method](**{**small, **kw})

def sampling(c=None, method="predictive", **kw):
  s = {k: kw.pop(k) for k in list(kw) if k in control.SETTINGS[method]._fields}
  return control.sampling(c or cost(), sim.params(1), horizon=kw.pop("horizon", H),
                          settings=settings(method, **s), **kw)

def old_sampling(**kw):  # the deprecated SamplingSettings
  return control.sampling(cost(), sim.params(1), horizon=H, settings=control.SamplingSettings(
    **{"num_samples": 4, "num_knots": 2, **kw}))

def ilqr(**kw):
  return control.ilqr(kw.pop("c", None) or cost(), sim.params(1), kw.pop("start", start),
                      kw.pop("ctrls", jnp.zeros((H, 2))), **kw)

def ilqr_planner(**kw):
  return control.ilqr_planner(cost(), sim.params(1), horizon=kw.pop("horizon", H), **kw)

samples = jnp.arange(12.0).reshape(4, 3)
costs = jnp.array([3.0, 1.0, 2.0, 4.0])
'''

# Snippets that must raise ValueError, with the regex its message must match (the argument's
# name, and what was wrong): (name, snippet, pattern).
REFUSED = [
  # control.norm: the parameter of huber and smooth_abs is > 0 (at 0 huber is 0 for every r).
  ("norm huber default param", "control.norm('huber', jnp.ones(3))",
   r"param must be finite and > 0 for the 'huber' norm, got 0.0"),
  ("norm huber negative param", "control.norm('huber', jnp.ones(3), -0.5)",
   r"param must be finite and > 0 for the 'huber'"),
  ("norm smooth_abs zero param", "control.norm('smooth_abs', jnp.ones(3), 0.0)",
   r"param .* > 0 for the 'smooth_abs'"),
  ("norm l2 NaN param", "control.norm('l2', jnp.ones(3), math.nan)", r"param .*'l2'.*nan"),
  ("norm l2 negative param", "control.norm('l2', jnp.ones(3), -1.0)", r"param .*>= 0 .*'l2'"),
  ("norm quadratic string param", "control.norm('quadratic', jnp.ones(3), 'a')", r"param "),
  ("norm bool param", "control.norm('huber', jnp.ones(3), True)", r"param .*True"),
  ("norm unknown name", "control.norm('l1', jnp.ones(3), 1.0)", r"name must be one of"),
  ("norm scalar r", "control.norm('quadratic', 1.0)", r"r must have shape \(\.\.\., any\)"),
  ("norm string r", "control.norm('quadratic', 'abc')", r"r must be an array of numbers"),
  # Terms: size, norm, parameter and weight, named by their place in Cost.terms.
  ("term huber param 0", "sampling(cost(control.Term(2, 1.0, 'huber'), control.Term(2)))",
   r"Cost.terms\[0\].param must be finite and > 0 for the 'huber' norm"),
  ("term param NaN", "sampling(cost(control.Term(2), control.Term(2, 1.0, 'l2', math.nan)))",
   r"Cost.terms\[1\].param"),
  ("term weight NaN", "sampling(cost(control.Term(2, math.nan), control.Term(2)))",
   r"Cost.terms\[0\].weight must be finite and >= 0"),
  ("term weight negative", "sampling(cost(control.Term(2), control.Term(2, -0.1)))",
   r"Cost.terms\[1\].weight must be finite and >= 0, got -0.1"),
  ("term weight per knot negative",
   "sampling(cost(control.Term(2, np.r_[np.ones(H), -1.0]), control.Term(2)))",
   r"Cost.terms\[0\].weight must be finite and >= 0"),
  ("term weight bool", "sampling(cost(control.Term(2, True), control.Term(2)))",
   r"Cost.terms\[0\].weight must be float32 or float64 numbers"),
  ("term weight string", "sampling(cost(control.Term(2, 'heavy'), control.Term(2)))",
   r"Cost.terms\[0\].weight must be an array of numbers"),
  ("term size bool", "sampling(cost(control.Term(True), control.Term(3)))",
   r"Cost.terms\[0\].size must be an int >= 1, got True"),
  ("term size float", "sampling(cost(control.Term(2.0), control.Term(2)))",
   r"Cost.terms\[0\].size must be an int"),
  ("terms a string", "sampling(control.Cost(lambda x, u, o, t: u, 'ab'))", r"Cost.terms must be"),
  # cem_update, mppi_update, gaussian_samples: every argument's shape and range.
  ("cem costs wrong length", "control.cem_update(jnp.zeros(3), 1.0, samples, costs[:3], 2)",
   r"costs must have shape \(4,\), got \(3,\)"),
  ("cem samples wrong shape", "control.cem_update(jnp.zeros(2), 1.0, samples, costs, 2)",
   r"samples must have shape \(any, 2\), got \(4, 3\)"),
  ("cem std wrong shape", "control.cem_update(jnp.zeros(3), jnp.ones(2), samples, costs, 2)",
   r"std must be a number or broadcast to mean's shape \(3,\)"),
  ("cem std negative", "control.cem_update(jnp.zeros(3), -1.0, samples, costs, 2)",
   r"std must be >= 0"),
  ("cem mean NaN", "control.cem_update(jnp.full(3, jnp.nan), 1.0, samples, costs, 2)",
   r"mean must not hold NaN"),
  ("cem num_elites 0", "control.cem_update(jnp.zeros(3), 1.0, samples, costs, 0)",
   r"num_elites must be an int in \[1, 4\], got 0"),
  ("cem num_elites above K", "control.cem_update(jnp.zeros(3), 1.0, samples, costs, 5)",
   r"num_elites must be an int in \[1, 4\], got 5"),
  ("cem num_elites bool", "control.cem_update(jnp.zeros(3), 1.0, samples, costs, True)",
   r"num_elites must be an int .*got True"),
  ("cem num_elites traced",
   "jax.jit(lambda n: control.cem_update(jnp.zeros(3), 1.0, samples, costs, n))(2)",
   r"num_elites must be a Python value known at trace time"),
  ("cem smoothing 1", "control.cem_update(jnp.zeros(3), 1.0, samples, costs, 2, smoothing=1.0)",
   r"smoothing must be a finite number in \[0, 1\)"),
  ("cem smoothing NaN",
   "control.cem_update(jnp.zeros(3), 1.0, samples, costs, 2, smoothing=math.nan)",
   r"smoothing must be a finite number >= 0"),
  ("cem std_min negative",
   "control.cem_update(jnp.zeros(3), 1.0, samples, costs, 2, std_min=-0.1)",
   r"std_min must be a finite number >= 0"),
  ("mppi temperature 0", "control.mppi_update(samples, costs, 0.0)",
   r"temperature must be a finite number > 0"),
  ("mppi temperature NaN", "control.mppi_update(samples, costs, np.float32('nan'))",
   r"temperature must be a finite number > 0.0, got nan"),
  ("mppi temperature string", "control.mppi_update(samples, costs, '1')",
   r"temperature must be .*got '1'"),
  ("mppi temperature vector", "control.mppi_update(samples, costs, jnp.ones(2))",
   r"temperature must be a finite number"),
  ("mppi costs wrong length", "control.mppi_update(samples, jnp.ones(5), 1.0)",
   r"costs must have shape \(4,\), got \(5,\)"),
  ("mppi samples scalar", "control.mppi_update(1.0, costs, 1.0)", r"samples must be \(K, \.\.\.\)"),
  ("gaussian num 0", "control.gaussian_samples(key, jnp.zeros(2), 1.0, 0)",
   r"num must be an int >= 1, got 0"),
  ("gaussian num float", "control.gaussian_samples(key, jnp.zeros(2), 1.0, 2.5)",
   r"num must be an int >= 1, got 2.5"),
  ("gaussian key int", "control.gaussian_samples(0, jnp.zeros(2), 1.0, 3)",
   r"key must be one PRNG key"),
  ("gaussian keys of a batch",
   "control.gaussian_samples(jax.random.split(jax.random.key(0), 2), jnp.zeros(2), 1.0, 3)",
   r"key must be one PRNG key .*got keys of shape \(2,\)"),
  ("gaussian lower above upper", "control.gaussian_samples(key, jnp.zeros(2), 1.0, 3, 1.0, 0.0)",
   r"lower must be <= upper"),
  ("gaussian lower wrong shape",
   "control.gaussian_samples(key, jnp.zeros(2), 1.0, 3, jnp.zeros(3))",
   r"lower must be a number or broadcast to mean's shape \(2,\)"),
  ("gaussian std NaN", "control.gaussian_samples(key, jnp.zeros(2), math.nan, 3)",
   r"std must not hold NaN"),
  # ilqr: mu, counts, flags, bounds, shapes; all before any custom call.
  ("ilqr mu NaN", "ilqr(mu=math.nan)", r"mu must be a finite number >= 0.0, got nan"),
  ("ilqr mu negative", "ilqr(mu=-1e-3)", r"mu must be a finite number >= 0.0, got -0.001"),
  ("ilqr mu vector", "ilqr(mu=jnp.ones(3))", r"mu must be a finite number"),
  ("ilqr mu bool", "ilqr(mu=True)", r"mu must be a finite number >= 0.0, got True"),
  ("ilqr mu traced vector", "jax.jit(lambda mu: ilqr(mu=mu))(jnp.ones(2))",
   r"mu must have shape \(\)"),
  ("ilqr iterations bool", "ilqr(iterations=True)", r"iterations must be an int >= 0, got True"),
  ("ilqr iterations float", "ilqr(iterations=2.0)", r"iterations must be an int >= 0, got 2.0"),
  ("ilqr nstep numpy 0", "ilqr(nstep=np.int64(0))", r"nstep must be an int >= 1, got 0$"),
  ("ilqr verbose int", "ilqr(verbose=1)", r"verbose must be True or False, got 1"),
  ("ilqr bounds wrong length", "ilqr(bounds=(jnp.zeros(3), 1.0))",
   r"bounds\[0\] must be a number or have shape \(2,\), got \(3,\)"),
  ("ilqr bounds NaN", "ilqr(bounds=(math.nan, 1.0))", r"bounds\[0\] must not hold NaN"),
  ("ilqr bounds string", "ilqr(bounds='ab')", r"bounds must be a pair \(lower, upper\)"),
  ("ilqr bounds three", "ilqr(bounds=(0.0, 1.0, 2.0))", r"bounds must be a pair"),
  # An infinite bound is no bound on its own side: +inf below or -inf above left no control
  # (ilqr returned controls of 0, the sampling planner's own init failed its update).
  ("ilqr lower bound +inf", "ilqr(bounds=(math.inf, math.inf))",
   r"bounds\[0\] must not be inf \(an infinite bound is no bound, on its own side only\), got "
   r"it at \[0, 1\]"),
  ("sampling upper bound -inf", "sampling(bounds=(-math.inf, jnp.array([1.0, -math.inf])))",
   r"bounds: lower > upper|bounds\[1\] must not be -inf"),
  ("gaussian lower +inf", "control.gaussian_samples(key, jnp.zeros(2), 1.0, 2, lower=math.inf)",
   r"lower must not be inf"),
  ("gaussian upper -inf", "control.gaussian_samples(key, jnp.zeros(2), 1.0, 2, upper=-math.inf)",
   r"upper must not be -inf"),
  ("sampling update a NaN state", "(lambda p: p.update(p.init(), start.at[lay.qpos].set("
   "jnp.nan), key))(sampling())", r"state must not hold NaN or inf: nan at index"),

  ("ilqr ctrls 1-D", "ilqr(ctrls=jnp.zeros(H))", r"ctrls must be \(T, nu=2\) controls"),
  ("ilqr ctrls strings", "ilqr(ctrls=[['a', 'b']])", r"ctrls must be an array of numbers"),
  ("ilqr start string", "ilqr(start='state')", r"start must be an array of numbers"),
  ("ilqr start 2-D", "ilqr(start=start[None])", r"start must be one state row"),
  # ILQRSettings: every field checked, named.
  *[(f"ILQRSettings {field} {label}", f"ilqr(settings=control.ILQRSettings({field}={value}))",
     pattern) for field, label, value, pattern in (
       ("step_sizes", "empty", "()", r"settings.step_sizes must be a non-empty sequence"),
       ("step_sizes", "string", "'ab'", r"settings.step_sizes must be a non-empty sequence"),
       ("step_sizes", "negative", "(1.0, -0.5)", r"settings.step_sizes\[1\] must be .*> 0"),
       ("step_sizes", "NaN", "(math.nan,)", r"settings.step_sizes\[0\]"),
       ("step_sizes", "a 0-d array", "np.array(0.5)",  # once: len() of unsized object
        r"settings.step_sizes must be a non-empty sequence of finite numbers > 0, got 0.5"),
       ("mu_init", "NaN", "math.nan", r"settings.mu_init must be a finite number, got nan"),
       ("mu_min", "above mu_init", "1.0", r"mu_min <= mu_init"),
       ("mu_factor", "below 1", "0.5", r"settings.mu_factor must be a finite number >= 1"),
       ("mu_fail_factor", "1", "1", r"settings.mu_fail_factor must be a finite number > 1"),
       ("trust_step", "NaN", "math.nan", r"settings.trust_step"),
       ("distrust_step", "negative", "-1.0", r"settings.distrust_step must be .*>= 0"),
       ("max_retries", "negative", "-1", r"settings.max_retries must be an int >= 0"),
       ("max_retries", "float", "1.5", r"settings.max_retries must be an int"),
       ("tolerance", "NaN", "math.nan", r"settings.tolerance"),
       ("eps", "0", "0.0", r"settings.eps must be a finite number > 0"),
       ("boxqp_iterations", "0", "0", r"settings.boxqp_iterations must be an int >= 1"),
       ("final_gains", "int", "1", r"settings.final_gains must be True or False"),
       ("linearization", "unknown", "'exact'", r"settings.linearization must be one of"),
       ("plateau", "negative", "-1e-3", r"settings.plateau must be a finite number >= 0"),
       ("plateau", "NaN", "math.nan", r"settings.plateau must be a finite number"))],
  # shift, box_qp, splines.
  ("shift negative", "control.shift(jnp.zeros((H, 2)), -1)", r"knots must be an int >= 0, got -1"),
  ("shift float", "control.shift(jnp.zeros((H, 2)), 1.0)", r"knots must be an int >= 0, got 1.0"),
  ("shift bool", "control.shift(jnp.zeros((H, 2)), True)", r"knots must be an int >= 0, got True"),
  ("shift 1-D plan", "control.shift(jnp.zeros(H), 1)",
   r"ctrls must have shape \(\.\.\., any, any\)"),
  ("shift empty plan", "control.shift(jnp.zeros((0, 2)), 1)", r"ctrls must hold T >= 1"),
  ("box_qp h wrong shape",
   "control.box_qp(jnp.eye(3), jnp.ones(2), jnp.eye(2), -1.0, 1.0, 5)",
   r"h must have shape \(2, 2\) to match g of shape \(2,\), got \(3, 3\)"),
  ("box_qp lower wrong length",
   "control.box_qp(jnp.eye(2), jnp.ones(2), jnp.eye(2), -jnp.ones(3), 1.0, 5)",
   r"lower must be a number or have shape \(2,\)"),
  ("box_qp iterations negative",
   "control.box_qp(jnp.eye(2), jnp.ones(2), jnp.eye(2), -1.0, 1.0, -1)",
   r"iterations must be an int >= 0"),
  ("splines horizon bool", "control.splines.matrix(2, True, 'linear')",
   r"horizon must be an int >= 1, got True"),
  ("splines times NaN", "control.splines.matrix(2, 4, 'linear', [0.0, math.nan])",
   r"times must not hold NaN"),
  ("splines shift negative", "control.splines.shift_matrix(2, 4, 'linear', -1)",
   r"controls must be a finite number >= 0.0, got -1"),
  # The per-method settings and sampling's own arguments.
  *[(f"{method} settings {field} {label}", f"sampling(method={method!r}, {field}={value})",
     pattern)
    for method, field, label, value, pattern in (
      ("mppi", "temperature", "0", "0.0", r"settings.temperature must be a finite number > 0"),
      ("mppi", "temperature", "NaN", "math.nan", r"settings.temperature"),
      ("cem", "smoothing", "1", "1.0", r"settings.smoothing must be a finite number in \[0, 1\)"),
      ("cem", "std_min", "negative", "-0.1", r"settings.std_min must be a finite number >= 0"),
      ("predictive", "noise", "NaN", "math.nan", r"settings.noise must be a finite number >= 0"),
      ("cem", "noise", "schedule with inf", "(0.1, math.inf)", r"settings.noise\[1\]"),
      ("predictive", "noise", "string", "'loud'", r"settings.noise must be a finite number"),
      ("mppi", "noise_decay", "0", "0.0", r"settings.noise_decay must be a finite number > 0"),
      ("predictive", "num_samples", "bool", "True",
       r"settings.num_samples must be an int >= 2, got True"),
      ("cem", "num_elites", "string", "'2'", r"settings.num_elites must be an int >= 1, got '2'"),
      ("cem", "num_elites", "above num_samples", "5",
       r"settings.num_elites must be in \[1, num_samples=4\], got 5"),
      ("mppi", "iterations", "0", "0", r"settings.iterations must be an int >= 1, got 0"),
      ("cem", "num_knots", "above the horizon", "5", r"num_knots \(5\) must be at most"))],
  ("sampling settings of another type", "control.sampling(cost(), sim.params(1), horizon=H, "
   "settings=control.ILQRSettings())",
   r"settings must be control.PredictiveSettings, control.MPPISettings or control.CEMSettings, "
   r"got ILQRSettings"),
  ("sampling settings a dict", "control.sampling(cost(), sim.params(1), horizon=H, "
   "settings={'num_samples': 4})", r"settings must be control.PredictiveSettings.*got dict"),
  # The deprecated SamplingSettings: every field checked as before, other methods' too.
  *[(f"SamplingSettings (deprecated) {field} {label}", f"old_sampling({field}={value})", pattern)
    for field, label, value, pattern in (
      ("temperature", "0", "0.0", r"settings.temperature must be a finite number > 0"),
      ("smoothing", "1", "1.0", r"settings.smoothing must be a finite number in \[0, 1\)"),
      ("num_elites", "string", "'2'", r"settings.num_elites must be an int >= 1, got '2'"),
      ("noise_decay", "0", "0.0", r"settings.noise_decay must be a finite number > 0"),
      ("noise", "NaN", "math.nan", r"settings.noise must be a finite number >= 0"),
      ("method", "unknown", "'random'", r"settings.method must be one of"))],
  ("sampling nstep 0", "sampling(nstep=0)", r"nstep must be an int >= 1, got 0"),
  ("sampling horizon float", "sampling(horizon=4.0)", r"horizon must be an int >= 1, got 4.0"),
  ("sampling bounds wrong length", "sampling(bounds=(-jnp.ones(3), 1.0))",
   r"bounds\[0\] must be a number or have shape \(2,\)"),
  # Planners: init refuses non-finite controls; update and shift check the plan they get.
  ("sampling init NaN", "sampling().init(jnp.full((H, 2), jnp.nan))",
   r"ctrls must not hold NaN or inf"),
  ("sampling init inf", "sampling().init(jnp.full((H, 2), jnp.inf))",
   r"ctrls must not hold NaN or inf"),
  ("ilqr_planner init NaN", "ilqr_planner().init(jnp.zeros((H, 2)).at[1, 0].set(jnp.nan))",
   r"ctrls must not hold NaN or inf: nan at index \(1, 0\)"),
  ("sampling plan wrong shape", textwrap.dedent("""
    p = sampling()
    plan = p.init()
    p.update(plan._replace(knots=jnp.zeros((3, 2))), start, key)
    """), r"plan.knots must have shape \(2, 2\), got \(3, 2\)"),
  ("sampling plan a tuple", "p = sampling(); p.update(tuple(p.init()), start, key)",
   r"plan must be a control.SamplingPlan"),
  ("sampling plan NaN", textwrap.dedent("""
    p = sampling()
    p.update(p.init()._replace(std=jnp.full((2, 2), jnp.nan)), start, key)
    """), r"plan.std must not hold NaN"),
  ("sampling update key float", "p = sampling(); p.update(p.init(), start, 0.5)",
   r"key must be one PRNG key"),
  ("sampling update state wrong", "p = sampling(); p.update(p.init(), start[:3], key)",
   r"state must be one state row"),
  ("sampling shift negative", "p = sampling(); p.shift(p.init(), -2)", r"n must be an int >= 0"),
  ("ilqr_planner settings checked at once",
   "ilqr_planner(settings=control.ILQRSettings(eps=-1.0))", r"settings.eps must be"),
  ("ilqr_planner iterations bool", "ilqr_planner(iterations=False)", r"iterations must be an int"),
  ("ilqr_planner bounds", "ilqr_planner(bounds=(1.0, -1.0))", r"bounds: lower > upper"),
  ("ilqr_planner plan mu NaN",
   "p = ilqr_planner(); p.update(p.init()._replace(mu=jnp.asarray(jnp.nan)), start)",
   r"plan.mu must be a finite number >= 0.0, got nan"),
  ("ilqr_planner shift float", "p = ilqr_planner(); p.shift(p.init(), 0.5)", r"n must be an int"),
  # receding_horizon: its own arguments and the step's.
  ("receding apply 0", "control.receding_horizon(sampling(), sim.params(1), apply=0)",
   r"apply must be an int >= 1, got 0"),
  ("receding apply bool", "control.receding_horizon(sampling(), sim.params(1), apply=True)",
   r"apply must be an int >= 1, got True"),
  ("receding apply above horizon", "control.receding_horizon(sampling(), sim.params(1), apply=5)",
   r"apply \(5\) must be at most the planner's horizon \(4\)"),
  ("receding planner not a Planner", "control.receding_horizon(lambda s: s, sim.params(1))",
   r"planner must be a control.Planner"),
  ("receding randomize not callable",
   "control.receding_horizon(sampling(), sim.params(1), randomize=3)",
   r"randomize must be a function"),
  ("receding params of 2", "control.receding_horizon(sampling(), sim.params(2, ('body_mass',)))",
   r"params\['body_mass'\] must have shape \(1, 2\)"),
  ("receding state wrong size", textwrap.dedent("""
    p = sampling()
    control.receding_horizon(p, sim.params(1))(start[:2], p.init(), key)
    """), r"state must be one state row of shape"),
  ("receding key string", textwrap.dedent("""
    p = sampling()
    control.receding_horizon(p, sim.params(1))(start, p.init(), 'key')
    """), r"key must be one PRNG key"),
  # fly_variants(params, believed, start, variants, choices, nstep, score, ...).
  ("fly_variants variants NaN", "control.fly_variants(sim.params(1), sim.params(1), start, "
   "np.full((2, 3, 2), math.nan), (1,), 1, lambda *a: 0)", r"variants must not hold NaN"),
  ("fly_variants choices a string", "control.fly_variants(sim.params(1), sim.params(1), start, "
   "np.zeros((2, 3, 2)), 'ab', 1, lambda *a: 0)", r"choices must be a sequence of knots"),
  ("fly_variants choice at 0", "control.fly_variants(sim.params(1), sim.params(1), start, "
   "np.zeros((2, 3, 2)), (0,), 1, lambda *a: 0)", r"choices\[0\] must be an int in \[1, 2\]"),
  ("fly_variants variants empty", "control.fly_variants(sim.params(1), sim.params(1), start, "
   "np.zeros((0, 3, 2)), (1,), 1, lambda *a: 0)", r"variants must be a grid .*none empty"),
  # plan_variants(ctrl, at, holds=, offsets=, actuators=, window=, ctrlrange=).
  ("plan_variants ctrl 1-D", "control.plan_variants(np.zeros(3), 1)",
   r"ctrl must have shape \(any, any\), got \(3,\)"),
  ("plan_variants ctrl NaN", "control.plan_variants(np.full((3, 2), math.nan), 1)",
   r"ctrl must not hold NaN or inf"),
  ("plan_variants ctrl empty", "control.plan_variants(np.zeros((0, 2)), 1)",
   r"ctrl must hold at least one knot"),
  ("plan_variants ctrl a list of no control", "control.plan_variants([[], []], 1)",
   r"ctrl must hold at least one knot of at least one control, got shape \(2, 0\)"),
  ("plan_variants at 0", "control.plan_variants(np.zeros((3, 2)), 0)",
   r"at must be an int in \[1, 3\], got 0"),
  ("plan_variants at past the end", "control.plan_variants(np.zeros((3, 2)), 4)",
   r"at must be an int in \[1, 3\], got 4"),
  ("plan_variants holds 0", "control.plan_variants(np.zeros((3, 2)), 1, holds=0)",
   r"holds must be an int >= 1, got 0"),
  ("plan_variants no offsets", "control.plan_variants(np.zeros((3, 2)), 1, offsets=[])",
   r"offsets must hold at least one number"),
  ("plan_variants offset NaN", "control.plan_variants(np.zeros((3, 2)), 1, offsets=[math.nan])",
   r"offsets\[0\] must be a finite number"),
  ("plan_variants offsets a number", "control.plan_variants(np.zeros((3, 2)), 1, offsets=0.1)",
   r"offsets must be a sequence of numbers"),
  ("plan_variants actuator past nu", "control.plan_variants(np.zeros((3, 2)), 1, actuators=[2])",
   r"actuators\[0\] must be an int in \[0, 1\], got 2"),
  ("plan_variants actuators a name",
   "control.plan_variants(np.zeros((3, 2)), 1, actuators='waist')",
   r"actuators must be a sequence of control indices"),
  ("plan_variants window reversed", "control.plan_variants(np.zeros((3, 2)), 1, window=(2, 1))",
   r"window\[1\] must be an int in \[2, 3\], got 1"),
  ("plan_variants window one number", "control.plan_variants(np.zeros((3, 2)), 1, window=(2,))",
   r"window must be \(begin, end\) knots"),
  ("plan_variants ctrlrange of an actuator without ctrllimited",  # once: every control 0
   "control.plan_variants(np.ones((3, 2)), 1, ctrlrange=[[-1.0, 1.0], [0.0, 0.0]])",
   r"ctrlrange has lower == upper for controls \[1\] \(MuJoCo's \(0, 0\) of an actuator "
   r"without ctrllimited\?\): give -inf, inf where a control is not limited"),
  ("plan_variants ctrlrange reversed",
   "control.plan_variants(np.zeros((3, 2)), 1, ctrlrange=[[1.0, -1.0]] * 2)",
   r"ctrlrange must be \(nu, 2\) limits"),
  ("plan_variants ctrlrange other nu",
   "control.plan_variants(np.zeros((3, 2)), 1, ctrlrange=[[-1.0, 1.0]] * 3)",
   r"ctrlrange must have shape \(2, 2\), got \(3, 2\)"),
]

# Snippets whose own asserts state the fixed behaviour: (name, snippet).
HOLDS = [
  ("norm values", textwrap.dedent("""
    r = jnp.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(control.norm('huber', r, np.float32(0.5)), [0.5 * (5 - 0.25), 0])
    np.testing.assert_allclose(control.norm('l2', r), [5.0, 0.0])  # |r| at p = 0
    np.testing.assert_allclose(control.norm('quadratic', [1, 2]), 2.5)  # ints are numbers
    traced = jax.jit(lambda p: control.norm('smooth_abs', r, p))(1.0)
    np.testing.assert_allclose(traced, [np.sqrt(10) + np.sqrt(17) - 2, 0.0])
    """)),
  ("numpy scalars are numbers", textwrap.dedent("""
    p = control.sampling(cost(control.Term(np.int64(2), np.float32(1.0), 'huber',
                                           np.float64(0.1)), control.Term(2)),
                         sim.params(1), horizon=np.int64(H), nstep=np.int32(1),
                         settings=settings('mppi', temperature=np.float32(2.0),
                                           num_samples=np.int64(4),
                                           noise=np.float32(0.2)))
    assert p.horizon == H
    mean, std = control.cem_update(jnp.zeros(3), 1.0, samples, costs, np.int64(2),
                                   np.float32(0.5), np.float64(0.0))
    assert mean.shape == (3,) and std.shape == (3,)
    draws = control.gaussian_samples(jax.random.key(1), jnp.zeros(2), 1.0, np.int32(5))
    assert draws.shape == (5, 2)
    np.testing.assert_array_equal(control.shift(jnp.arange(8.0).reshape(4, 2), np.int64(1)),
                                  [[2, 3], [4, 5], [6, 7], [6, 7]])
    """)),
  ("shift beyond the horizon holds the last control", textwrap.dedent("""
    plan = jnp.arange(8.0).reshape(4, 2)
    for n in (4, 5, 10**12):
      np.testing.assert_array_equal(control.shift(plan, n), np.tile([6.0, 7.0], (4, 1)))
    np.testing.assert_array_equal(control.shift(plan, 0), plan)
    """)),
  ("cem keeps mean and std when every cost is non-finite", textwrap.dedent("""
    mean, std = jnp.array([0.5, -1.0, 2.0]), jnp.array([0.1, 0.2, 0.3])
    for bad in (jnp.full(4, jnp.inf), jnp.array([jnp.nan, jnp.inf, jnp.nan, -jnp.inf])):
      new_mean, new_std = control.cem_update(mean, std, samples, bad, 2, std_min=1.0)
      np.testing.assert_array_equal(new_mean, mean)
      np.testing.assert_array_equal(new_std, std)
    # One finite cost among NaNs: NaN is never an elite before a finite cost.
    new_mean, _ = control.cem_update(mean, std, samples, jnp.array([jnp.nan, jnp.nan, 5.0,
                                                                    jnp.nan]), 1)
    np.testing.assert_array_equal(new_mean, samples[2])
    """)),
  ("cem planner keeps its plan when every candidate fails", textwrap.dedent("""
    # A start too fast to simulate: MuJoCo resets every candidate, so every cost is infinite.
    # (A NaN start is refused before any candidate runs.)
    p = sampling(method='cem', num_elites=2, noise=0.5)
    plan = p.init(jnp.tile(jnp.array([0.2, -0.1]), (H, 1)))
    new, info = p.update(plan, start.at[lay.qvel].set(1e300), key)
    assert int(info.failed) == 4 and not np.isfinite(float(info.cost))
    np.testing.assert_array_equal(new.knots, plan.knots)
    np.testing.assert_array_equal(new.std, plan.std)
    """)),
  ("cem planner: a failed candidate is no elite while finite ones remain", textwrap.dedent("""
    # Once 5 of the 6 elites were failed candidates (7 of 8 failed), averaged into the plan:
    # a plan that had cost 0.51 failed.
    def res(x, u, obs, t):  # NaN (a failed candidate) whenever a control is > 0
      return jnp.where(jnp.any(u > 0.0), jnp.nan, 1.0) * jnp.concatenate([x[lay.qpos], u])
    c = control.Cost(res, (control.Term(2, 1.0), control.Term(2, 0.1)))
    p = control.sampling(c, sim.params(1), horizon=2, settings=control.CEMSettings(
      num_samples=8, num_knots=2, num_elites=6, noise=0.5, interpolation="zero"))
    plan = p.init()
    new, info = p.update(plan, start, key)
    assert 0 < int(info.failed) < 8
    after = control.plan_cost(c, sim.params(1), start, p.controls(new))[0]
    assert np.isfinite(float(after)), float(after)
    """)),
  ("predictive sampling never ends worse than its plan, knots out of bounds", textwrap.dedent("""
    # A least-squares init put knots outside the bounds; candidate 0 was then the clipped knots,
    # another plan, and the update could end worse than the plan it was given.
    target = jnp.array([1.0, 1.0, -1.0])
    cost = control.Cost(lambda x, u, obs, t: u - target[t], (control.Term(2, 1.0),))
    p = control.sampling(cost, sim.params(1), horizon=3, bounds=(-1.0, 1.0),
                         settings=control.PredictiveSettings(num_samples=2, num_knots=2,
                                                             noise=0.0))
    plan = p.init(jnp.stack([target, target], axis=1))
    assert float(jnp.abs(plan.knots).max()) > 1.0
    before = float(control.plan_cost(cost, sim.params(1), start, p.controls(plan))[0])
    new, info = p.update(plan, start, key)
    assert float(info.nominal_cost) == before
    assert float(control.plan_cost(cost, sim.params(1), start, p.controls(new))[0]) <= before
    """)),
  ("plan_variants arrays for offsets, window and an unlimited ctrlrange", textwrap.dedent("""
    # A JAX array of offsets and a numpy window were refused ('must be a sequence ..., got
    # [3, 6]'); infinite limits are no limits.
    out = control.plan_variants(np.ones((4, 2)), 2, offsets=jnp.array([0.0, 0.5]),
                                actuators=[1], window=np.array([1, 3]),
                                ctrlrange=[[-1.0, 1.0], [-math.inf, math.inf]])
    assert out.shape == (1, 2, 4, 2)
    np.testing.assert_array_equal(out[0, 1, :, 1], [1.0, 1.5, 1.5, 1.0])
    np.testing.assert_array_equal(out[0, 0], np.ones((4, 2)))
    """)),
  ("receding horizon reports the real system's step", textwrap.dedent("""
    p = sampling(noise=0.5)
    step = control.receding_horizon(p, sim.params(1), apply=2)
    state, plan, info = step(start, p.init(), key)
    assert isinstance(info, control.StepInfo)
    assert info.real_warnings.shape == (2, mjbatch_jax.NWARNING)
    assert int(info.real_warnings.sum()) == 0 and not bool(info.real_failed)
    assert info.real_reset.shape == (2,) and not bool(info.real_reset.any())
    # The planner's info reads through, as before.
    assert float(info.cost) == float(info.planner.cost) and int(info.failed) == 0
    # The state is what the plan's first two controls do, bit for bit.
    planned, _ = p.update(p.init(), start, jax.random.split(key)[0])
    states, _ = mjbatch_jax.rollout(start[None], p.controls(planned)[None, :2], sim.params(1))
    np.testing.assert_array_equal(state, states[0, -1])
    # A NaN state: MuJoCo resets the real system, and the info says so.
    bad = start.at[lay.qvel].set(jnp.nan)
    state, plan, info = step(bad, p.init(), key)
    assert bool(info.real_failed) and bool(info.real_reset[0]), info.real_warnings
    assert np.all(np.isfinite(np.asarray(state)))
    assert int(info.real_warnings[0, int(mujoco.mjtWarning.mjWARN_BADQVEL)]) == 1
    # Under the caller's jit, the same step.
    jitted = jax.jit(step)(start, p.init(), key)
    np.testing.assert_array_equal(jitted[0], step(start, p.init(), key)[0])
    """)),
  ("receding horizon real step error is a SimulationError", textwrap.dedent("""
    from tests.test_partial import PILE, SPHERES
    pile = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(PILE), num_threads=1)
    slide = pile.layout.qpos.start
    c = control.Cost(lambda x, u, obs, t: jnp.concatenate([x[slide:slide + 1], u]),
                     (control.Term(1), control.Term(pile.nu)))
    p = control.sampling(c, pile.params(1), horizon=2,
                         settings=control.PredictiveSettings(num_samples=2, num_knots=1))
    # The real system's spheres drawn into one another: its step overflows MuJoCo's stack.
    real = pile.params(1, ('geom_pos',), select={'geom_pos': list(range(2, 2 + SPHERES))},
                       set_const=True)
    into = np.array([[0.05 * i - i % 4, -(i // 4), 0.01 * i] for i in range(SPHERES)])
    real = real.replace({'geom_pos': real['geom_pos'].at[0].set(into)})
    step = control.receding_horizon(p, real)
    try:
      step(pile.init_state(1)[0], p.init(), key)
    except mjbatch_jax.SimulationError as e:
      assert e.ids == (0,), e.ids
    else:
      raise AssertionError('the real step failed silently')
    """)),
  ("ilqr mu as numpy scalar and 0-d array", textwrap.dedent("""
    # Up to the solve, not through it (a compile): the solve is replaced by a recorder.
    import sys
    ilqr_module = sys.modules['mjbatch_jax.control.ilqr']  # control.ilqr is the function
    seen = []
    ilqr_module._check_initial = lambda *args: None
    ilqr_module._solve = lambda *args: seen.append(args[7])
    for mu in (np.float32(0.25), jnp.asarray(0.25, jnp.float32), np.int64(0), 0.25):
      ilqr(mu=mu, iterations=np.int64(1))
    assert [float(mu) for mu in seen] == [0.25, 0.25, 0.0, 0.25], seen
    assert all(mu.dtype == jnp.float64 for mu in seen)
    """)),
]

CASES = ([(name, code, ("raises", "ValueError", pattern)) for name, code, pattern in REFUSED]
         + [(name, code, ("ok",)) for name, code in HOLDS])


results, test_names_are_unique, test_case = table_tests(PRELUDE, CASES)
