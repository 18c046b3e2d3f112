"""Hostile and careless calls of the low-level helpers: rotations, tangent, check_grads,
randomize and tree_replace, each case in a child process (see tests/fuzzing.py).

Wrong last dimensions, leading dimensions that do not broadcast, strings, bools, NaN, None and
NumPy scalars: every bad argument is a ValueError naming it (eager, traced or vmapped), never a
number read past an array's end; NumPy scalars work as the numbers they hold. Every case sees a
fresh prelude: a model with a free, a ball and a hinge joint (nq 12, nv 10; 4 bodies with the
world), its joints, and params for N = 3 simulations.
"""

import textwrap

from tests.fuzzing import table_tests

PRELUDE = r'''
import numpy as np, jax, jax.numpy as jnp, mujoco
jax.config.update("jax_enable_x64", True)
import mjbatch_jax
from mjbatch_jax import rotations, tangent

XML = """
<mujoco>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body pos="0 0 1"><freejoint/><geom size=".1" mass="1"/>
      <body pos="0 0 .3"><joint type="ball"/><geom size=".1" mass="1"/>
        <body pos="0 0 .3"><joint type="hinge" axis="0 1 0"/><geom size=".1" mass="1"/></body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""
N = 3
m = mujoco.MjModel.from_xml_string(XML)
joints = tangent.Joints.of(m)
qpos = jnp.asarray(m.qpos0)
qvel = jnp.linspace(-1.0, 1.0, m.nv)
q = rotations.exp(jnp.array([0.1, 0.2, 0.3]))
v = jnp.array([1.0, 2.0, 3.0])
key = jax.random.key(0)
sim = mjbatch_jax.Simulator(m, num_threads=1)
params = sim.params(N, ("body_mass", "opt.gravity"), shared=("opt.gravity",))
'''


def _raises(pattern: str, kind: str = "ValueError") -> tuple[str, str, str]:
  return ("raises", kind, pattern)


OK = ("ok",)

ROTATIONS = [
  ("rotate a 3-vector quaternion", "rotations.rotate(jnp.ones(3), v)",
   _raises(r"^q must have shape \(\.\.\., 4\), got \(3,\)")),
  ("rotate a 4-vector", "rotations.rotate(q, jnp.ones(4))",
   _raises(r"^v must have shape \(\.\.\., 3\), got \(4,\)")),
  ("rotate a scalar quaternion", "rotations.rotate(1.0, v)", _raises(r"^q must have shape")),
  ("rotate_inverse a 2-vector", "rotations.rotate_inverse(q, jnp.ones((5, 2)))",
   _raises(r"^v must have shape \(\.\.\., 3\), got \(5, 2\)")),
  ("rotate leading clash", "rotations.rotate(jnp.tile(q, (5, 1)), jnp.ones((3, 3)))",
   _raises(r"q \(5,\) and v \(3,\) do not broadcast")),
  ("multiply leading clash", "rotations.multiply(jnp.ones((5, 4)), jnp.ones((3, 4)))",
   _raises(r"a \(5,\) and b \(3,\) do not broadcast")),
  ("multiply broadcasts one against many", textwrap.dedent("""
    out = rotations.multiply(q, jnp.tile(q, (2, 1)))
    assert out.shape == (2, 4)
    np.testing.assert_allclose(out[1], rotations.multiply(q, q))
    """), OK),
  ("multiply b of 3", "rotations.multiply(q, jnp.ones(3))", _raises(r"^b must have shape")),
  ("conjugate a string", "rotations.conjugate('1 0 0 0')",
   _raises(r"^q must be an array of numbers, got '1 0 0 0'")),
  ("conjugate None", "rotations.conjugate(None)", _raises(r"^q must be an array")),
  ("rotate bool quaternion", "rotations.rotate(np.array([True, False, False, False]), v)",
   _raises(r"^q must be float32 or float64 numbers, got booleans")),
  ("rotate complex quaternion", "rotations.rotate(np.ones(4, complex), v)",
   _raises(r"^q must be an array of numbers")),
  ("rotate int quaternion is a float one", textwrap.dedent("""
    out = rotations.rotate(np.array([1, 0, 0, 0]), np.array([1, 2, 3]))
    assert out.dtype == jnp.float64
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])
    """), OK),
  ("exp of a quaternion", "rotations.exp(q)", _raises(r"^v must have shape \(\.\.\., 3\)")),
  ("log of a rotation vector", "rotations.log(v)", _raises(r"^q must have shape \(\.\.\., 4\)")),
  ("log of a list", textwrap.dedent("""
    np.testing.assert_array_equal(rotations.log([1.0, 0.0, 0.0, 0.0]), np.zeros(3))
    """), OK),
  ("to_matrix of a matrix", "rotations.to_matrix(jnp.eye(3))",
   _raises(r"^q must have shape \(\.\.\., 4\), got \(3, 3\)")),
  ("from_matrix of 9 numbers", "rotations.from_matrix(jnp.ones(9))",
   _raises(r"^mat must have shape \(\.\.\., 3, 3\), got \(9,\)")),
  ("from_matrix of 3x4", "rotations.from_matrix(jnp.ones((2, 3, 4)))",
   _raises(r"^mat must have shape \(\.\.\., 3, 3\), got \(2, 3, 4\)")),
  ("from_axis_angle axis of 4", "rotations.from_axis_angle(jnp.ones(4), 0.5)",
   _raises(r"^axis must have shape")),
  ("from_axis_angle angle a string", "rotations.from_axis_angle(v, '0.5')",
   _raises(r"^angle must be an array of numbers, got '0.5'")),
  ("from_axis_angle angle NaN", "rotations.from_axis_angle(v, float('nan'))",
   _raises(r"^angle must be a finite number, got nan")),
  ("from_axis_angle leading clash", "rotations.from_axis_angle(jnp.ones((2, 3)), jnp.ones(3))",
   _raises(r"axis \(2,\) and angle \(3,\) do not broadcast")),
  ("from_axis_angle numpy angle", textwrap.dedent("""
    np.testing.assert_allclose(rotations.from_axis_angle(v, np.float32(0.5)),
                               rotations.from_axis_angle(v, 0.5))
    """), OK),
  ("integrate dt a string", "rotations.integrate(q, v, '0.1')", _raises(r"^dt must be")),
  ("integrate dt None", "rotations.integrate(q, v, None)", _raises(r"^dt must be")),
  ("integrate dt True", "rotations.integrate(q, v, True)",
   _raises(r"^dt must be float32 or float64 numbers, got booleans")),
  ("integrate dt inf", "rotations.integrate(q, v, np.inf)",
   _raises(r"^dt must be a finite number, got inf")),
  ("integrate dt numpy", textwrap.dedent("""
    for dt in (np.float32(0.25), np.float64(0.25)):
      np.testing.assert_array_equal(rotations.integrate(q, v, dt), rotations.integrate(q, v, 0.25))
    np.testing.assert_array_equal(rotations.integrate(q, v, np.int64(2)),
                                  rotations.integrate(q, v, 2))
    """), OK),
  ("integrate dt per row", textwrap.dedent("""
    out = rotations.integrate(jnp.tile(q, (5, 1)), v, jnp.linspace(0, 1, 5))
    np.testing.assert_allclose(out[2], rotations.integrate(q, v, 0.5))
    """), OK),
  ("integrate dt clash", "rotations.integrate(jnp.tile(q, (5, 1)), v, jnp.ones(3))",
   _raises(r"q \(5,\) and dt \(3,\) do not broadcast")),
  ("integrate omega of 4", "rotations.integrate(q, q, 0.1)", _raises(r"^omega must have shape")),
  ("difference qb of 3", "rotations.difference(q, v)", _raises(r"^qb must have shape")),
  ("difference leading clash", "rotations.difference(jnp.ones((2, 4)), jnp.ones((3, 4)))",
   _raises(r"qa \(2,\) and qb \(3,\) do not broadcast")),
  ("rotate traced wrong shape", "jax.jit(rotations.rotate)(jnp.ones(3), v)",
   _raises(r"^q must have shape \(\.\.\., 4\), got \(3,\)")),
  ("rotate vmapped wrong shape", "jax.vmap(rotations.rotate)(jnp.ones((5, 3)), jnp.ones((5, 3)))",
   _raises(r"^q must have shape \(\.\.\., 4\), got \(3,\)")),
  ("grad of a wrong shape", "jax.grad(lambda x: rotations.log(x).sum())(jnp.ones(3))",
   _raises(r"^q must have shape")),
  ("checks add nothing to the compiled cost", textwrap.dedent("""
    # The shape checks run while tracing: the program has no callback, only the arithmetic.
    text = str(jax.make_jaxpr(lambda q, w: rotations.integrate(q, w, 0.1))(q, v))
    assert "callback" not in text and "debug" not in text, text
    """), OK),
]

TANGENT = [
  ("Joints.of a string", "tangent.Joints.of('model.xml')",
   _raises(r"^model must be a mujoco.MjModel, got str")),
  ("Joints lengths differ", "tangent.Joints((0, 1), (0,), (0,), 8, 7)",
   _raises(r"one entry per joint")),
  ("Joints past nq", "tangent.Joints((0,), (3,), (0,), 8, 6)",
   _raises(r"at qpos 3, dof 0 does not fit nq=8, nv=6")),
  ("Joints out of dof order", "tangent.Joints((3, 3), (0, 1), (1, 0), 2, 2)",
   _raises(r"^Joints.dofadr must increase")),
  ("Joints unknown type", "tangent.Joints((9,), (0,), (0,), 1, 1)", _raises(r"type 9")),
  ("Joints nq negative", "tangent.Joints((), (), (), -1, 0)", _raises(r"^Joints.nq must be")),
  ("integrate_pos joints a model", "tangent.integrate_pos(m, qpos, qvel, 1.0)",
   _raises(r"^joints must be a tangent.Joints")),
  ("integrate_pos qpos too short", "tangent.integrate_pos(joints, qpos[:-1], qvel, 1.0)",
   _raises(r"^qpos must have shape \(\.\.\., 12\), got \(11,\)")),
  ("integrate_pos qvel of nq", "tangent.integrate_pos(joints, qpos, jnp.zeros(m.nq), 1.0)",
   _raises(r"^qvel must have shape \(\.\.\., 10\), got \(12,\)")),
  ("integrate_pos leading clash",
   "tangent.integrate_pos(joints, jnp.tile(qpos, (3, 1)), jnp.zeros((2, m.nv)), 1.0)",
   _raises(r"qpos \(3,\) and qvel \(2,\) do not broadcast")),
  ("integrate_pos scale a vector", "tangent.integrate_pos(joints, qpos, qvel, jnp.ones(m.nv))",
   _raises(r"^scale must be a number \(shape \(\)\), got shape \(10,\)")),
  ("integrate_pos scale a string", "tangent.integrate_pos(joints, qpos, qvel, '1')",
   _raises(r"^scale must be")),
  ("integrate_pos scale NaN", "tangent.integrate_pos(joints, qpos, qvel, np.float64('nan'))",
   _raises(r"^scale must be a finite number, got nan")),
  ("integrate_pos traced wrong width",
   "jax.jit(lambda a, b: tangent.integrate_pos(joints, a, b, 1.0))(qpos, qvel[:-1])",
   _raises(r"^qvel must have shape \(\.\.\., 10\), got \(9,\)")),
  ("integrate_pos one pose many directions", textwrap.dedent("""
    out = tangent.integrate_pos(joints, qpos, jnp.eye(m.nv)[:4], np.float32(0.5))
    assert out.shape == (4, m.nq)
    d = mujoco.MjData(m)
    expected = np.array(m.qpos0)
    mujoco.mj_integratePos(m, expected, np.eye(m.nv)[2], 0.5)
    np.testing.assert_allclose(out[2], expected, atol=1e-12)
    """), OK),
  ("differentiate_pos dt zero", "tangent.differentiate_pos(joints, qpos, qpos, 0)",
   _raises(r"^dt must be a nonzero number")),
  ("differentiate_pos qpos2 of nv", "tangent.differentiate_pos(joints, qpos, qvel, 1.0)",
   _raises(r"^qpos2 must have shape \(\.\.\., 12\), got \(10,\)")),
  ("differentiate_pos qpos1 scalar", "tangent.differentiate_pos(joints, 0.0, qpos, 1.0)",
   _raises(r"^qpos1 must have shape")),
  ("differentiate_pos numpy dt", textwrap.dedent("""
    moved = tangent.integrate_pos(joints, qpos, qvel, 0.1)
    np.testing.assert_allclose(tangent.differentiate_pos(joints, qpos, moved, np.float32(0.1)),
                               qvel, atol=1e-6)
    """), OK),
]

CHECK_GRADS = [
  ("check_grads numpy counts", textwrap.dedent("""
    r = mjbatch_jax.check_grads(jnp.sin, (jnp.ones(3),), directions=np.int64(2),
                                rtol=np.float32(1e-2), seed=np.int32(1), jit=False)
    assert r.passed and len(r.directions) == 2
    """), OK),
  ("check_grads directions 0", "mjbatch_jax.check_grads(jnp.sin, (jnp.ones(3),), directions=0)",
   _raises(r"^directions must be an int >= 1, got 0")),
  ("check_grads directions float",
   "mjbatch_jax.check_grads(jnp.sin, (jnp.ones(3),), directions=2.5)",
   _raises(r"^directions must be an int >= 1, got 2.5")),
  ("check_grads directions True",
   "mjbatch_jax.check_grads(jnp.sin, (jnp.ones(3),), directions=True)",
   _raises(r"^directions must be an int >= 1, got True")),
  ("check_grads rtol NaN", "mjbatch_jax.check_grads(jnp.sin, (jnp.ones(3),), rtol=np.nan)",
   _raises(r"^rtol must be a finite number > 0.0, got nan")),
  ("check_grads step negative", "mjbatch_jax.check_grads(jnp.sin, (jnp.ones(3),), step=-1e-3)",
   _raises(r"^step must be a finite number > 0.0")),
  ("check_grads step a string", "mjbatch_jax.check_grads(jnp.sin, (jnp.ones(3),), step='1e-3')",
   _raises(r"^step must be")),
  ("check_grads seed negative", "mjbatch_jax.check_grads(jnp.sin, (jnp.ones(3),), seed=-1)",
   _raises(r"^seed must be an int >= 0")),
  ("check_grads reverse a string",
   "mjbatch_jax.check_grads(jnp.sin, (jnp.ones(3),), reverse='yes')",
   _raises(r"^reverse must be True or False, got 'yes'")),
  ("check_grads jit 0", "mjbatch_jax.check_grads(jnp.sin, (jnp.ones(3),), jit=0)",
   _raises(r"^jit must be True or False")),
  ("check_grads raise_on_failure None",
   "mjbatch_jax.check_grads(jnp.sin, (jnp.ones(3),), raise_on_failure=None)",
   _raises(r"^raise_on_failure must be True or False")),
  ("check_grads args a bare array", "mjbatch_jax.check_grads(jnp.sum, jnp.ones(3))",
   _raises(r"^args must be a tuple or list")),
  ("check_grads NaN input",
   "mjbatch_jax.check_grads(jnp.sum, (jnp.ones(2), {'w': jnp.array([1.0, jnp.nan])}))",
   _raises(r"^args\[1\]\['w'\] must not hold NaN or inf: nan at index \(1,\)")),
  ("check_grads fun not callable", "mjbatch_jax.check_grads('sum', (jnp.ones(3),))",
   _raises(r"^fun must be a function")),
  ("check_grads a string leaf", "mjbatch_jax.check_grads(jnp.sum, (jnp.ones(3), 'abc'))",
   _raises(r"^args\[1\] must be an array or a number")),
  ("check_grads traced", "jax.jit(lambda x: mjbatch_jax.check_grads(jnp.sum, (x,)).worst)(v)",
   _raises(r"^args\[0\] is traced")),
]

RANDOMIZE = [
  ("randomize key an int", "mjbatch_jax.randomize(0, params, uniform={'body_mass': (1, 2)})",
   _raises(r"^key must be one PRNG key")),
  ("randomize key a batch",
   "mjbatch_jax.randomize(jax.random.split(key, 3), params, uniform={'body_mass': (1, 2)})",
   _raises(r"^key must be one PRNG key .*got keys of shape \(3,\)")),
  ("randomize key floats",
   "mjbatch_jax.randomize(jnp.zeros(2), params, uniform={'body_mass': (1, 2)})",
   _raises(r"^key must be one PRNG key")),
  ("randomize raw key", textwrap.dedent("""
    out = mjbatch_jax.randomize(jax.random.PRNGKey(1), params, uniform={'body_mass': (1, 2)})
    assert out['body_mass'].shape == params['body_mass'].shape
    """), OK),
  ("randomize uniform a list",
   "mjbatch_jax.randomize(key, params, uniform=[('body_mass', (1, 2))])",
   _raises(r"^uniform must be a dict of field name -> \(low, high\)")),
  ("randomize field an int", "mjbatch_jax.randomize(key, params, scale={3: (1, 2)})",
   _raises(r"^scale's keys must be field names \(strings\), got 3")),
  ("randomize bound a bool", "mjbatch_jax.randomize(key, params, uniform={'body_mass': (0, True)})",
   _raises(r"^uniform\['body_mass'\] high must be float32 or float64 numbers, got booleans")),
  ("randomize bound a string",
   "mjbatch_jax.randomize(key, params, uniform={'body_mass': ('1', 2)})",
   _raises(r"^uniform\['body_mass'\] low must be an array of numbers, got '1'")),
  ("randomize bound of the wrong shape",
   "mjbatch_jax.randomize(key, params, uniform={'body_mass': (jnp.zeros(3), 1.0)})",
   _raises(r"bounds of shapes \(3,\) and \(\) must broadcast to the leaf's shape \(3, 4\)")),
  ("randomize bound that would grow the leaf",
   "mjbatch_jax.randomize(key, params, uniform={'body_mass': (jnp.zeros((2, 3, 4)), 1.0)})",
   _raises(r"must broadcast to the leaf's shape \(3, 4\)")),
  ("randomize traced bound of the wrong shape", textwrap.dedent("""
    jax.jit(lambda lo: mjbatch_jax.randomize(key, params, uniform={'body_mass': (lo, 2.0)}))(
        jnp.ones(5))
    """), _raises(r"uniform\['body_mass'\] bounds of shapes \(5,\)")),
  ("randomize per-body bounds", textwrap.dedent("""
    low = np.arange(4.0)
    out = mjbatch_jax.randomize(key, params, uniform={'body_mass': (low, low + np.float32(0.5))})
    assert np.all(out['body_mass'] >= low) and np.all(out['body_mass'] < low + 0.5)
    """), OK),
  ("randomize log_uniform negative",
   "mjbatch_jax.randomize(key, params, log_uniform={'body_mass': (-1.0, 1.0)})",
   _raises(r"> 0")),
  ("randomize scale low above high",
   "mjbatch_jax.randomize(key, params, scale={'body_mass': (np.float32(2), 1)})",
   _raises(r"needs low <= high, got low=2.0, high=1: swap them")),
  ("randomize -inf bound",
   "mjbatch_jax.randomize(key, params, uniform={'body_mass': (-np.inf, 1.0)})",
   _raises(r"bounds must be finite")),
  ("tree_replace updates a list", "mjbatch_jax.tree_replace({'a': 1}, [('a', 2)])",
   _raises(r"^updates must be a dict of dotted path -> value")),
  ("tree_replace a path not a string", "mjbatch_jax.tree_replace({'a': 1}, {('a',): 2})",
   _raises(r"^updates' keys must be dotted paths")),
  ("tree_replace an empty step", "mjbatch_jax.tree_replace({'a': {'b': 1}}, {'a..b': 2})",
   _raises(r"^updates' keys must be dotted paths such as 'info.steps', got 'a..b'")),
  ("tree_replace unknown params field",
   "mjbatch_jax.tree_replace({'p': params}, {'p.body_masss': jnp.ones((N, 4))})",
   _raises(r"'body_masss' is not among these params' fields")),
  ("tree_replace params value of the wrong width",
   "mjbatch_jax.tree_replace({'p': params}, {'p.body_mass': jnp.ones((N, 5))})",
   _raises(r"^'p.body_mass' must have shape \(\.\.\., 4\), got \(3, 5\)")),
  ("tree_replace shared value per simulation",
   "mjbatch_jax.tree_replace(params, {'opt.gravity': jnp.ones((N, 3))})",
   _raises(r"^'opt.gravity' must have shape \(3,\), got \(3, 3\)")),
  ("tree_replace params value a string", "mjbatch_jax.tree_replace(params, {'body_mass': 'x'})",
   _raises(r"^'body_mass' must be an array of numbers")),
  ("tree_replace params and a dict", textwrap.dedent("""
    out = mjbatch_jax.tree_replace({'p': params, 'info': {'steps': 3}},
                                   {'p.body_mass': 2 * params['body_mass'], 'info.steps': 0})
    np.testing.assert_array_equal(out['p']['body_mass'], 2 * params['body_mass'])
    assert out['info']['steps'] == 0
    """), OK),
]

CASES = ROTATIONS + TANGENT + CHECK_GRADS + RANDOMIZE


results, test_names_are_unique, test_case = table_tests(PRELUDE, CASES)
