"""Hostile and careless calls of mjbatch_jax.sysid, each in a child process (tests/fuzzing.py).

Every public name of sysid (Inertia, Field, Parameters, windows, Problem, fit, report and the
Report's methods) is given wrong types, shapes, ranges, NaN and numpy scalars: a bad argument
is a ValueError naming it before anything is simulated, a numpy scalar in range is a Python
number, and what is not finite at theta is refused by report as it is by fit. Every case sees a
fresh prelude: a one-hinge pendulum, its Parameters (one log damping), four windows of 25
controls recorded at rest and a Problem; only the cases that fit or report compile anything.
"""


from tests.fuzzing import table_tests

PRELUDE = r'''
import numpy as np, jax, jax.numpy as jnp, mujoco
jax.config.update("jax_enable_x64", True)
import mjbatch_jax
from mjbatch_jax import sysid

XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body name="link">
      <joint name="hinge" axis="0 1 0" damping="0.2"/>
      <geom name="rod" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge"/></actuator>
</mujoco>
"""
sim = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(XML), num_threads=1)
parameters = sysid.Parameters(sim, [sysid.Field("dof_damping", ["hinge"], log=True)])
qpos = sim.layout.qpos
states = np.repeat(np.asarray(sim.init_state(1)), 100, axis=0)
ctrls = np.zeros((100, 1))
measured = np.zeros((100, 1))
data = sysid.windows(states, ctrls, measured, 25)
residual = lambda s, y, q: (s[:, qpos] - q) / 1e-3
problem = sysid.Problem(parameters, residual)
report = sysid.Report(("a", "b"), np.diag([4.0, 0.0]), np.array([2.0, 0.0]), np.eye(2), 1,
                      np.array([0.5, np.inf]), np.array([np.inf, np.inf]), np.array([0.0, 1.0]))
'''


def refused(pattern: str) -> tuple:
  return ("raises", "ValueError", pattern)


OK = ("ok",)

# (name, snippet, expectation): ("raises", exception type name, regex) or ("ok",).
CASES = [
  # -- Inertia and Field: checked where they are made ------------------------------------------
  ("Inertia bodies float", "sysid.Inertia(1.5)", refused(r"Inertia bodies must be names or ids")),
  ("Inertia bodies None", "sysid.Inertia(None)", refused(r"Inertia bodies must be names or ids")),
  ("Inertia bodies bool", "sysid.Inertia([True])", refused(r"names or ids .*got True")),
  ("Inertia bodies empty", "sysid.Inertia([])", refused(r"Inertia bodies is empty")),
  ("Inertia form list", "sysid.Inertia(['link'], form=['mass'])",
   refused(r"Inertia form must be one of \('principal'")),
  ("Inertia body numpy int", """
p = sysid.Parameters(sim, [sysid.Inertia(np.int64(1), form="mass")])
assert p.names == ("link.log_mass",), p.names
""", OK),
  ("Field name int", "sysid.Field(3)", refused(r"Field name must be a params field's name")),
  ("Field rows float", "sysid.Field('geom_friction', 1.5)",
   refused(r"Field 'geom_friction' rows must be names or ids")),
  ("Field rows empty", "sysid.Field('geom_friction', [])",
   refused(r"rows is empty.*None takes every row")),
  ("Field log string", "sysid.Field('dof_damping', log='yes')",
   refused(r"Field log must be True or False, got 'yes'")),
  ("Field numpy row and log", """
p = sysid.Parameters(sim, [sysid.Field("geom_friction", np.int64(0), log=np.bool_(True))])
assert p.names[0] == "log geom_friction[rod][0]", p.names
""", OK),
  # -- Parameters --------------------------------------------------------------------------------
  ("Parameters maps string", "sysid.Parameters(sim, 'dof_damping')",
   refused(r"maps must be a non-empty list of Inertia and Field")),
  ("Parameters set_const int", "sysid.Parameters(sim, [sysid.Field('dof_damping')], set_const=1)",
   refused(r"set_const must be True or False, got 1")),
  ("Parameters closed sim", "sim.close(); sysid.Parameters(sim, [sysid.Field('dof_damping')])",
   refused(r"sim is closed")),
  ("values string", "parameters.values('ab')", refused(r"theta must be an array of numbers")),
  ("values bool", "parameters.values(np.array([True]))", refused(r"theta must be .*booleans")),
  ("values ints are numbers", """
out = parameters.values([1])["dof_damping"]
assert out.dtype == jnp.float64 and abs(float(out[0]) - np.e) < 1e-12, out
""", OK),
  ("params num negative", "parameters.params(parameters.initial, -1)",
   refused(r"num must be an int >= 0, got -1")),
  ("params num float", "parameters.params(parameters.initial, 2.0)",
   refused(r"num must be an int >= 0, got 2.0")),
  ("params num numpy", """
assert parameters.params(parameters.initial, np.int64(3))["dof_damping"].shape == (3, 1)
""", OK),
  ("params rows against num", "parameters.params(np.zeros((3, 1)), 5)",
   refused(r"theta must be \(1,\) or \(5, 1\) with num=5, got shape \(3, 1\)")),
  ("params NaN", "parameters.params(np.full(1, np.nan), 1)",
   refused(r"theta must not hold NaN or inf")),
  # -- windows -----------------------------------------------------------------------------------
  ("windows states string", "sysid.windows('abc', ctrls, measured, 25)",
   refused(r"states must be an array of numbers")),
  ("windows ctrls bool", "sysid.windows(states, ctrls > 0, measured, 25)",
   refused(r"ctrls must be an array of numbers \(ints or floats\), got dtype bool")),
  ("windows length float", "sysid.windows(states, ctrls, measured, 25.0)",
   refused(r"length must be an int >= 1, got 25.0")),
  ("windows length bool", "sysid.windows(states, ctrls, measured, True)",
   refused(r"length must be an int >= 1, got True")),
  ("windows length numpy", """
w = sysid.windows(states, ctrls, measured, np.int64(30))
assert w.ctrls.shape == (3, 30, 1) and w.starts.shape == (3, states.shape[1])
""", OK),
  ("windows measured scalar leaf", "sysid.windows(states, ctrls, {'q': 1.0}, 25)",
   refused(r"measured leaf 0 must be \(T=100, ...\)")),
  ("windows measured string leaf", "sysid.windows(states, ctrls, ['abc'], 25)",
   refused(r"measured leaf 0 must be an array of numbers")),
  # -- Problem: checked where it is made ---------------------------------------------------------
  ("Problem numpy scalars", """
p = sysid.Problem(parameters, residual, nstep=np.int64(2), max_step=np.float32(1.5),
                  dampings=np.array([0.0, 1e-4], np.float32), eps=np.float32(1e-6))
assert sysid.problem._options(p) == (2, (0.0, float(np.float32(1e-4))), 1.5,
                                     float(np.float32(1e-6)), None, "squared", None)
""", OK),
  ("Problem nstep float", "sysid.Problem(parameters, residual, nstep=1.5)",
   refused(r"problem.nstep must be an int in \[1, 2147483647\], got 1.5")),
  ("Problem max_step NaN", "sysid.Problem(parameters, residual, max_step=float('nan'))",
   refused(r"problem.max_step must be a finite number > 0.0, got nan")),
  ("Problem dampings string", "sysid.Problem(parameters, residual, dampings='abc')",
   refused(r"problem.dampings must be one or more finite numbers >= 0")),
  ("Problem dampings negative", "sysid.Problem(parameters, residual, dampings=(0.0, -1.0))",
   refused(r"problem.dampings\[1\] must be a finite number >= 0.0, got -1.0")),
  ("Problem eps string", "sysid.Problem(parameters, residual, eps='1e-6')",
   refused(r"problem.eps must be a finite number > 0.0, got '1e-6'")),
  ("Problem centered int", "sysid.Problem(parameters, residual, centered=1)",
   refused(r"problem.centered must be True or False, got 1")),
  ("Problem residual int", "sysid.Problem(parameters, 3)",
   refused(r"problem.residual must be a function")),
  ("Problem parameters None", "sysid.Problem(None, residual)",
   refused(r"problem.parameters must be sysid.Parameters, got NoneType")),
  ("Problem prior_width length", "sysid.Problem(parameters, residual, prior_width=[1.0, 2.0])",
   refused(r"prior_width must have shape \(1,\)")),
  ("Problem bounds NaN", "sysid.Problem(parameters, residual, bounds=([np.nan], [1.0]))",
   refused(r"bounds low\[0\] \(log dof_damping\[hinge\]\) must be a finite number or inf, got "
           r"nan")),
  ("Problem bounds length", "sysid.Problem(parameters, residual, bounds=(-1.0, [1.0, 2.0]))",
   refused(r"bounds high must have shape \(1,\)")),
  ("Problem bounds three", "sysid.Problem(parameters, residual, bounds=(0, 1, 2))",
   refused(r"bounds must be \(low, high\)")),
  ("Problem bounds array", """
p = sysid.Problem(parameters, residual, bounds=np.array([[-5.0], [5.0]]))
assert sysid.problem._priors(p)[3].tolist() == [-5.0]
""", OK),
  ("Problem scale string", "sysid.Problem(parameters, residual, scale='big')",
   refused(r"scale must be 1 numbers \(one per number of theta\), got 'big'")),
  ("Problem start_width negative", "sysid.Problem(parameters, residual, start_width=-1.0)",
   refused(r"start_width\[0\] \(start 0\) must be a number > 0")),
  # -- fit: checked before anything runs ---------------------------------------------------------
  ("fit theta0 string", "sysid.fit(problem, data, 'abc')",
   refused(r"theta0 must be 1 numbers \(one per number of theta\), got 'abc'")),
  ("fit theta0 strings", "sysid.fit(problem, data, ['a'])",
   refused(r"theta0 must be numbers \(ints or floats\), got dtype <U1")),
  ("fit iterations zero", "sysid.fit(problem, data, iterations=0)",
   refused(r"iterations must be an int >= 1, got 0")),
  ("fit iterations float", "sysid.fit(problem, data, iterations=2.0)",
   refused(r"iterations must be an int >= 1, got 2.0")),
  ("fit tolerance NaN", "sysid.fit(problem, data, tolerance=float('nan'))",
   refused(r"tolerance must be a finite number >= 0.0, got nan")),
  ("fit tolerance negative", "sysid.fit(problem, data, tolerance=-1)",
   refused(r"tolerance must be a finite number >= 0.0, got -1")),
  ("fit starts shape", "sysid.fit(problem, data, starts=np.zeros((3, 2)))",
   refused(r"starts must be \(4, 2\) \(this process's windows")),
  ("fit starts string", "sysid.fit(problem, data, starts='zero')",
   refused(r"starts must be an array of numbers")),
  ("fit no windows", "sysid.fit(problem, data._replace(starts=data.starts[:0], "
   "ctrls=data.ctrls[:0], measured=data.measured[:0]))",
   refused(r"windows.starts must be \(W >= 1, nstate=")),
  ("fit windows tuple", "sysid.fit(problem, tuple(data))",
   refused(r"windows must be sysid.Windows")),
  ("fit dist string", "sysid.fit(problem, data, dist='mesh')",
   refused(r"dist must be a mjbatch_jax.distributed.Distributed")),
  ("fit closed sim", "sim.close(); sysid.fit(problem, data)",
   refused(r"the Simulator of problem.parameters is closed")),
  ("fit numpy scalars", """
result = sysid.fit(problem, data, iterations=np.int64(1), tolerance=np.float32(0.5))
assert result.iterations == 1 and np.all(np.isfinite(result.costs)), result
""", OK),
  ("fit NaN residual", "sysid.fit(sysid.Problem(parameters, lambda s, y, q: s[:, qpos] * jnp.nan),"
   " data, iterations=1)", refused(r"the cost at theta0 is nan: the residual is not finite")),
  # sqrt(|0 x|) is 0 with a NaN derivative: every step NaN, which fit once called convergence.
  ("fit NaN Jacobian", "sysid.fit(sysid.Problem(parameters, lambda s, y, q: "
   "jnp.sqrt(jnp.abs(0.0 * s[:, qpos])) + s[:, qpos] - q), data, iterations=2)",
   refused(r"the residual's Jacobian is not finite at theta0")),
  ("fit xtol NaN", "sysid.fit(problem, data, xtol=float('nan'))",
   refused(r"xtol must be a finite number >= 0.0, got nan")),
  ("fit ftol negative", "sysid.fit(problem, data, ftol=-1e-3)",
   refused(r"ftol must be a finite number >= 0.0, got -0.001")),
  ("Problem loss unknown", "sysid.Problem(parameters, residual, loss='l1')",
   refused(r"problem.loss must be one of \('squared', 'huber', 'cauchy'\), got 'l1'")),
  ("Problem loss_scale zero", "sysid.Problem(parameters, residual, loss='huber', loss_scale=0)",
   refused(r"problem.loss_scale must be a finite number > 0.0, got 0")),
  ("Problem loss_scale numpy", """
p = sysid.Problem(parameters, residual, loss='cauchy', loss_scale=np.float32(50.0))
result = sysid.fit(p, data, iterations=1)
assert result.loss_scale == 50.0 and result.window_weights.shape == (4,), result
""", OK),
  ("fitted_starts owner string", "sysid.fitted_starts('sim', data, np.zeros((4, 2)))",
   refused(r"problem must be a sysid.Problem, sysid.Parameters or Simulator, got str")),
  ("fitted_starts data tuple", "sysid.fitted_starts(problem, tuple(data), np.zeros((4, 2)))",
   refused(r"data must be sysid.Windows")),
  ("fitted_starts offsets shape", "sysid.fitted_starts(problem, data, np.zeros((3, 2)))",
   refused(r"starts must be \(4, 2\)")),
  ("fitted_starts offsets NaN", "sysid.fitted_starts(problem, data, np.full((4, 2), np.nan))",
   refused(r"starts has NaN or inf")),
  # -- report ------------------------------------------------------------------------------------
  ("report NaN residual", "sysid.report(sysid.Problem(parameters, lambda s, y, q: "
   "s[:, qpos] * jnp.nan), data, parameters.initial)",
   refused(r"the cost at theta is nan: the residual is not finite")),
  ("report rtol zero", "sysid.report(problem, data, parameters.initial, rtol=0)",
   refused(r"rtol must be a finite number in \(0.0, 1.0\), got 0")),
  ("report rtol string", "sysid.report(problem, data, parameters.initial, rtol='small')",
   refused(r"rtol must be a finite number in \(0.0, 1.0\), got 'small'")),
  ("report result None", "sysid.report(problem, data, None)",
   refused(r"result must be a sysid.Fit or a theta")),
  ("report result string", "sysid.report(problem, data, 'abc')",
   refused(r"result must be a sysid.Fit or a theta .*got 'abc'")),
  ("report Fit with starts", """
fake = sysid.Fit(parameters.initial, np.zeros((4, 2)), np.zeros(1), True, np.zeros(0),
                 np.zeros(0))
sysid.report(problem, data, fake, starts=np.zeros((4, 2)))
""", refused(r"a Fit carries its own starts")),
  ("report Fit of another size", """
fake = sysid.Fit(np.zeros(3), np.zeros((4, 2)), np.zeros(1), True, np.zeros(0), np.zeros(0))
sysid.report(problem, data, fake)
""", refused(r"result.theta must have shape \(1,\)")),
  # -- Report's methods --------------------------------------------------------------------------
  ("unidentifiable threshold NaN", "report.unidentifiable(float('nan'))",
   refused(r"threshold must be a finite number in \[0.0, 1.0\], got nan")),
  ("summary most negative", "report.summary(most=-1)",
   refused(r"most must be an int >= 0, got -1")),
  ("outliers factor below 1", "report.outliers(0.5)",
   refused(r"factor must be a finite number >= 1.0, got 0.5")),
  ("outliers of no windows", "assert report.outliers(np.float32(3.0)).size == 0", OK),
  ("Report methods numpy scalars", """
assert report.unidentifiable(np.float32(0.5)) == [{"b": 1.0}]
assert report.summary(np.float64(0.2), most=np.int64(1)).count("unidentifiable 1") == 1
""", OK),
]


results, test_names_are_unique, test_case = table_tests(PRELUDE, CASES)
