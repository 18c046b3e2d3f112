"""mjbatch_jax.Batch under attack: every bad input is a clear error, never a crash.

Each case runs in its own Python process, so that a segfault inside MuJoCo fails that case alone
and names the signal. A case is a snippet run after SETUP; it passes if it raises the expected
exception with a message matching the pattern (the last line of its stderr), or, expecting None,
if it exits cleanly (the snippet's own asserts check what happened).
"""

import re
import signal
import subprocess
import sys
import textwrap

import pytest

# Small, but with every geom type for rays and collisions, a free body, a delayed actuator
# (whose history buffer keeps a cursor in the state rows), sensors and a keyframe.
SETUP = '''
import sys, threading
import mujoco
import numpy as np
from mjbatch_jax import Batch, SimulationError

XML = """
<mujoco>
  <asset>
    <mesh name="wedge" vertex="0 0 0  .4 0 0  0 .4 0  0 0 .3"/>
    <hfield name="hills" nrow="3" ncol="3" size="1 1 .3 .1" elevation="0 .2 .4 .1 .3 1 .6 .2 .1"/>
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1"/>
    <geom type="hfield" hfield="hills" pos="3 0 0"/>
    <geom type="mesh" mesh="wedge" pos="-2 0 0"/>
    <geom type="cylinder" size=".1 .1" pos="0 -2 .1"/>
    <body name="arm" pos="0 0 1">
      <joint name="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 .5 0 0" size=".05"/>
      <site name="tip" pos=".5 0 0"/>
    </body>
    <body name="box" pos="0 1 .3">
      <freejoint/>
      <geom type="box" size=".1 .1 .1"/>
      <geom type="ellipsoid" size=".05 .05 .08" pos="0 0 .15"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="m" joint="hinge" delay="0.004" nsample="3"/>
  </actuator>
  <sensor><jointpos joint="hinge"/><framepos objtype="site" objname="tip"/></sensor>
  <keyframe><key qpos="0.3  0 1 .3 1 0 0 0"/></keyframe>
</mujoco>
"""
model = mujoco.MjModel.from_xml_string(XML)
batch = Batch(model, 4, num_threads=2)
nray = 5
pnt = np.zeros((4, nray, 3)); pnt[..., 2] = 2.0
vec = np.zeros((4, nray, 3)); vec[..., 2] = -1.0
dist = np.full((4, nray), 7.0)
'''

E = ValueError

# (name, snippet, expected exception or None for a clean exit, regex for its message)
CASES = [
  # --- constructor arguments
  ("num_sims float", "Batch(model, 1.5)", E, r"num_sims must be an int in \[1, "),
  ("num_sims str", 'Batch(model, "4")', E, r"num_sims must be an int.*'4'"),
  ("num_sims bool", "Batch(model, True)", E, r"num_sims must be an int.*True"),
  ("num_sims zero", "Batch(model, 0)", E, r"num_sims must be an int in \[1, .*got 0"),
  ("num_threads negative", "Batch(model, 4, num_threads=-1)", E, r"num_threads must be"),
  ("num_threads huge", "Batch(model, 4, num_threads=10**6)", E, r"num_threads .*at most 4 per CPU"),
  ("num_threads float", "Batch(model, 4, num_threads=2.0)", E, r"num_threads must be an int"),
  ("model not a model", 'Batch("robot.xml", 4)', E, r"model must be a mujoco.MjModel, got str"),
  # --- structural fields cannot be expanded
  # (with mujoco.batch alone, the first three write then step into a segfault)
  (
    "expand geom_type",
    'batch.expand("geom_type")[1] = 10**6; batch.step(nstep=200)',
    E,
    r"geom_type is a structural field \(an index, address, count, type or size\), it cannot "
    r"vary per simulation",
  ),
  (
    "expand body_parentid",
    'batch.expand("body_parentid")[1, 1] = 10**6; batch.step()',
    E,
    r"body_parentid is a structural field",
  ),
  (
    "expand jnt_qposadr",
    'batch.expand("jnt_qposadr")[1] = 10**8; batch.step()',
    E,
    r"jnt_qposadr is a structural field",
  ),
  # eq_type is a type that MuJoCo checks at use: a value outside mjtEq fails that simulation
  # with MuJoCo's error, which names it, while the others run; a valid type other than the
  # model's (joint for a weld) would read body ids as joint ids, out of bounds, and is refused.
  (
    "eq_type outside mjtEq fails only that simulation",
    """
    own = mujoco.MjModel.from_xml_string(XML.replace(
        '</worldbody>', '<body name="m" mocap="true"/></worldbody>'
        '<equality><weld body1="m" body2="box"/></equality>'))
    b = Batch(own, 4, num_threads=2)
    b.expand("eq_type")[1] = 99
    before = b.bind("state").copy()
    hist = np.full((4, 3, b.nstate), np.nan)
    for call in (lambda: b.step(nstep=3, history=hist), lambda: b.step(), b.forward):
      try:
        call()
      except SimulationError as e:
        assert isinstance(e, RuntimeError) and str(e).startswith("sim 1: ") and "99" in str(e)
        assert e.ids == (1,), e.ids
      else:
        raise AssertionError("no error")
    assert np.isfinite(hist[[0, 2, 3]]).all()  # the others wrote their history rows
    np.testing.assert_array_equal(b.bind("state")[1], before[1])
    assert (b.bind("time")[[0, 2, 3]] > 0).all() and b.bind("time")[1] == 0
    b.expand("eq_type")[1] = int(mujoco.mjtEq.mjEQ_CONNECT)  # reads the same two bodies
    b.step()
    assert b.bind("time")[1] > 0
    """,
    None,
    "",
  ),
  (
    "eq_type of another kind of object",
    """
    own = mujoco.MjModel.from_xml_string(XML.replace(
        '</worldbody>', '<body name="m" mocap="true"/></worldbody>'
        '<equality><weld body1="m" body2="box"/></equality>'))
    b = Batch(own, 4, num_threads=2)
    b.expand("eq_type")[2] = int(mujoco.mjtEq.mjEQ_JOINT)
    b.step()
    """,
    E,
    r"sim 2: eq_type\[0\] is 2, but must be the model's mjtEq",
  ),
  (
    "expand dyntype",
    'batch.expand("actuator_dyntype")[:] = 2; batch.step()',
    E,
    r"actuator_dyntype is a structural field",
  ),
  (
    "every structural integer field is refused",
    """
    import mujoco.batch as mb
    from mjbatch_jax.batch import _INT_PARAMS, _TYPES_AT_USE
    refused = 0
    for f in sorted(mb.MODEL_FIELDS):
      v = getattr(model.opt, f[4:]) if f.startswith("opt.") else getattr(model, f)
      if np.asarray(v).dtype.kind in "biu" and f not in _INT_PARAMS | _TYPES_AT_USE.keys():
        try:
          batch.expand(f)
        except ValueError as e:
          # plugin is also an MjData field, which is said first
          assert "structural" in str(e) or f == "plugin", (f, e)
          refused += 1
        else:
          raise AssertionError(f + " was expanded")
    assert refused > 150, refused
    batch.step()
    """,
    None,
    "",
  ),
  # --- expandable integer parameters are range-checked before every call
  (
    "integrator out of range",
    'batch.expand("integrator")[2] = 99; batch.step()',
    E,
    r"sim 2: opt.integrator is 99, but must be one of \[0, 1, 2, 3, 4\]",
  ),
  (
    "condim 2",
    'batch.expand("geom_condim")[1, 0] = 2; batch.step()',
    E,
    r"sim 1: geom_condim\[0\] is 2, but must be one of \[1, 3, 4, 6\]",
  ),
  (
    "negative iterations",
    'batch.expand("opt.iterations")[3] = -1; batch.forward()',
    E,
    r"sim 3: opt.iterations is -1, but must be in \[0, ",
  ),
  # MuJoCo 4.0 sizes the convex collider's buffer as 472 * ccd_iterations + 320 bytes in an
  # int: at 9099507 that wraps to 328 bytes, which the collider overruns (a segfault)
  (
    "ccd_iterations whose buffer size wraps",
    'batch.expand("ccd_iterations")[0] = 9_099_507; batch.step()',
    E,
    r"sim 0: opt.ccd_iterations is 9099507, but must be in \[0, 1000000\]",
  ),
  (
    "unknown enable bit",
    'batch.expand("enableflags")[0] = 1 << 20; batch.step()',
    E,
    r"opt.enableflags is 1048576, but must be in \[0, 255\]",
  ),
  (
    "negative disableflags",
    'batch.expand("disableflags")[1] = -1; batch.reset()',
    E,
    r"sim 1: opt.disableflags is -1",
  ),
  (
    "cone checked before a query",
    'batch.expand("cone")[0] = 5; batch.rays(pnt, vec, dist)',
    E,
    r"sim 0: opt.cone is 5",
  ),
  ("solver before set_const", 'batch.expand("solver")[0] = 7; batch.set_const()', E, r"solver"),
  (
    "a bad value outside the call's ids does not matter, and can be fixed",
    """
    integrator = batch.expand("integrator")
    integrator[3] = -1
    batch.step(np.array([0, 1]))
    try:
      batch.step()
    except ValueError as e:
      assert "sim 3" in str(e)
    else:
      raise AssertionError("stepped")
    integrator[3] = mujoco.mjtIntegrator.mjINT_RK4
    batch.step()
    assert (batch.bind("time") > 0).all()
    """,
    None,
    "",
  ),
  (
    "masks, priorities and groups take any value",
    """
    batch.expand("geom_contype")[:] = -1
    batch.expand("geom_conaffinity")[:] = 2**31 - 1
    batch.expand("geom_priority")[:] = -(2**31)
    batch.expand("geom_group")[:] = 99
    batch.expand("actuator_group")[:] = -5
    batch.expand("disableactuator")[:] = -1
    batch.expand("jnt_limited")[:] = True
    batch.step(nstep=20)
    batch.rays(pnt, vec, dist, geomgroup=[1, 1, 1, 1, 1, 1])
    """,
    None,
    "",
  ),
  # --- nstep, keyframe
  (
    "nstep float",
    "batch.step(nstep=2.7)",
    E,
    r"nstep must be an int in \[1, 2147483647\], got 2\.7",
  ),
  ("nstep bool", "batch.step(nstep=True)", E, r"nstep must be an int.*True"),
  ("nstep zero", "batch.step(nstep=0)", E, r"nstep must be an int in \[1, "),
  ("nstep 2**31", "batch.step(nstep=2**31)", E, r"nstep must be .*got 2147483648"),
  (
    "nstep numpy int",
    "batch.step(nstep=np.int64(3)); assert batch.bind('time')[0] == 3 * model.opt.timestep",
    None,
    "",
  ),
  ("keyframe float", "batch.reset(keyframe=0.0)", E, r"keyframe must be an int in \[-1, 0\]"),
  ("keyframe out of range", "batch.reset(keyframe=1)", E, r"keyframe must be .*got 1"),
  # --- ids
  ("ids out of range", "batch.step([0, 4])", E, r"ids must be in \[0, 4\), got 4"),
  ("ids negative", "batch.forward([-1, 2])", E, r"ids must be in \[0, 4\), got -1"),
  ("ids unsorted", "batch.step([2, 1])", E, r"ids must be sorted and unique, got 2 before 1"),
  ("ids duplicate", "batch.reset([1, 1])", E, r"sorted and unique, got 1 before 1"),
  ("ids float", "batch.step([0.0, 1.0])", E, r"ids must be integers, got float64"),
  ("ids str", 'batch.step(["0"])', E, r"ids must be integers"),
  ("ids 2**32+1", "batch.step(np.array([2**32 + 1]))", E, r"got 4294967297"),
  ("ids uint64", "batch.step(np.array([2**63], np.uint64))", E, r"ids must be in \[0, 4\)"),
  ("ids 2-D", "batch.step([[0, 1]])", E, r"ids must be one-dimensional"),
  ("ids scalar", "batch.step(3)", E, r"ids must be one-dimensional"),
  ("mask wrong length", "batch.step(np.ones(3, bool))", E, r"mask of ids must have shape \(4,\)"),
  (
    "ids empty and all-false mask run nothing",
    "batch.step([]); batch.step(np.zeros(4, bool)); assert not batch.bind('time').any()",
    None,
    "",
  ),
  # --- history
  (
    "history aliasing the rows",
    "batch.step(history=batch.bind('state')[:, None, :])",
    E,
    r"history must not share memory with the state rows",
  ),
  (
    "history float32",
    "batch.step(nstep=2, history=np.empty((4, 2, batch.nstate), np.float32))",
    E,
    r"history must be a writable C-contiguous float64 array",
  ),
  # --- bind and expand arguments
  ("bind non-str", "batch.bind(3)", E, r"a field name must be a str, got int"),
  ("bind junk dtype", 'batch.bind("qpos", "nope")', E, r"dtype must be a numpy dtype"),
  ("bind int qpos", 'batch.bind("qpos", np.int32)', E, r"qpos cannot be int32"),
  ("bind typo", 'batch.bind("qpoz")', E, r"unknown field qpoz \(did you mean 'qpos'"),
  ("expand typo", 'batch.expand("body_mas")', E, r"did you mean 'body_mass'"),
  ("expand int as float32", 'batch.expand("integrator", np.float32)', E, r"cannot be float32"),
  ("named view unknown name", 'batch.joint("nope")', KeyError, r"Invalid name 'nope'"),
  ("from_jax shape", "batch.from_jax(np.zeros((4, 2)))", E, r"state must be real numbers of"),
  (
    "from_jax strings",
    "batch.from_jax(np.full((4, batch.nstate), 'a'))",
    E,
    r"state must be real numbers",
  ),
  # --- NaN and Inf: MuJoCo's documented behaviour (warnings, resets, misses), no crash
  (
    "NaN and Inf state",
    """
    batch.bind("qpos")[1] = np.nan
    batch.bind("ctrl")[2] = np.inf
    batch.bind("qvel")[3] = -np.inf
    batch.step(nstep=3)
    warning = batch.bind("warning")
    assert warning[1:, :, 1].sum(axis=1).min() >= 1
    assert np.isfinite(batch.bind("qpos")).all()  # mj_step reset them
    """,
    None,
    "",
  ),
  (
    "NaN, Inf and negative float parameters",
    """
    batch.expand("geom_size")[1] = np.nan
    batch.expand("geom_size")[2] = -1.0
    batch.expand("geom_size")[3] = 1e300
    batch.expand("body_mass")[1] = np.inf
    batch.expand("timestep")[2] = np.nan
    batch.expand("gravity")[3] = -np.inf
    batch.expand("geom_margin")[1] = 1e300
    batch.step(nstep=5)
    batch.rays(pnt, vec, dist)
    """,
    None,
    "",
  ),
  (
    "NaN and Inf rays",
    """
    pnt[1] = np.nan
    vec[2] = np.inf
    pnt[3, :, 0] = 1e300
    batch.rays(pnt, vec, dist)
    assert (dist[0] > 0).all()
    """,
    None,
    "",
  ),
  ("geomgroup 256", "batch.rays(pnt, vec, dist, geomgroup=[256, 1, 1, 1, 1, 1])", E, r"\[0, 255\]"),
  ("geomgroup negative", "batch.rays(pnt, vec, dist, geomgroup=[-1, 1, 1, 1, 1, 1])", E, r"255"),
  ("geomgroup float", "batch.rays(pnt, vec, dist, geomgroup=[1.0] * 6)", E, r"integers, got float"),
  ("geomgroup shape", "batch.rays(pnt, vec, dist, geomgroup=[1] * 5)", E, r"must be \(6,\)"),
  (
    "a failing ray writes only the rows of the simulations that succeeded",
    """
    vec[2, 1] = 0.0  # mj_ray: vector length is too small
    normal = np.full((4, nray, 3), 7.0)
    try:
      batch.rays(pnt, vec, dist, normal=normal)
    except SimulationError as e:
      assert str(e).startswith("sim 2: mj_ray: vector length"), e
    else:
      raise AssertionError("no error")
    assert (dist[2] == 7.0).all() and (normal[2] == 7.0).all()
    assert (np.delete(dist, 2, axis=0) != 7.0).all()
    """,
    None,
    "",
  ),
  (
    "a jac call that MuJoCo refuses writes nothing",
    """
    mujoco.set_mjcb_control(lambda m, d: None)
    jacp = np.full((4, 3, model.nv), 7.0)
    try:
      batch.jac(jacp, None, np.zeros((4, 3)), np.ones(4, np.int32))
    except ValueError as e:
      assert "mjcb_control" in str(e)
    assert (jacp == 7.0).all()
    """,
    None,
    "",
  ),
  ("jac body out of range", "batch.jac(None, None, np.zeros((4, 3)), [0, 1, 2, 9])", E, "nbody"),
  ("jac body float", "batch.jac(None, None, np.zeros((4, 3)), np.ones(4))", E, "integer body ids"),
  (
    "jac NaN point",
    """
    jacp = np.empty((4, 3, model.nv))
    batch.jac(jacp, None, np.full((4, 3), np.nan), np.ones(4, np.int32))
    """,
    None,
    "",
  ),
  # --- the history buffer's cursor, an index stored in the rows as a float
  (
    "NaN history cursor",
    'batch.bind("history")[1, 1] = np.nan; batch.step()',
    E,
    r"sim 1: state row element \d+ is nan, but it is a history buffer's cursor, an integer in "
    r"\[0, 3\)",
  ),
  (
    "negative history cursor from a state write",
    "state = batch.bind('state').copy(); state[2, 1 + model.nq + model.nv + 1] = -7e9; "
    "batch.from_jax(state); batch.forward()",
    E,
    r"sim 2: .* is -7000000000.0, but it is a history buffer's cursor",
  ),
  # --- closing
  (
    "close twice, then every method raises",
    """
    q = batch.bind("qpos")
    batch.close()
    batch.close()
    with batch:
      pass
    calls = [
      batch.step, batch.forward, batch.reset, batch.set_const, batch.to_jax,
      lambda: batch.bind("qvel"), lambda: batch.expand("body_mass"), lambda: batch.sensor("x"),
      lambda: batch.rays(pnt, vec, dist), lambda: batch.jac(None, None, 0, 0),
      lambda: batch.from_jax(0), lambda: batch.num_threads, lambda: batch.joint("hinge"),
    ]
    for call in calls:
      try:
        call()
      except ValueError as e:
        assert str(e) == "this Batch is closed", e
      else:
        raise AssertionError("ran after close")
    assert np.isfinite(q).all()  # bound arrays stay readable
    """,
    None,
    "",
  ),
  (
    "close while other threads call",
    """
    def work():
      for _ in range(200):
        try:
          batch.step()
          batch.bind("xpos")[0, 0]
          batch.rays(pnt, vec, dist)
        except ValueError as e:
          assert "closed" in str(e), e
          return
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
      t.start()
    batch.step(nstep=50)
    batch.close()
    for t in threads:
      t.join()
    """,
    None,
    "",
  ),
  (
    "calls from several threads",
    """
    errors = []
    def work(k):
      try:
        for i in range(30):
          batch.step(np.array([k]))
          batch.expand("body_mass")[k, 1] = 1.0 + i
          batch.bind("qpos", np.float32)
          batch.rays(pnt, vec, dist, ids=np.array([k]))
          batch.jac(np.empty((4, 3, model.nv)), None, np.zeros((4, 3)), np.ones(4, np.int32))
      except Exception as e:
        errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
    assert not errors, errors
    np.testing.assert_allclose(batch.bind("time"), 30 * model.opt.timestep)
    """,
    None,
    "",
  ),
]


def run_case(snippet: str) -> subprocess.CompletedProcess:
  code = SETUP + textwrap.dedent(snippet)
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
  ("snippet", "exc", "pattern"),
  [pytest.param(s, e, p, id=name) for name, s, e, p in CASES],
)
def test_bad_input_is_a_clear_error(snippet, exc, pattern):
  out = run_case(snippet)
  if out.returncode < 0:
    name = signal.Signals(-out.returncode).name
    pytest.fail(f"the process died of {name}; stderr:\n{out.stderr[-2000:]}")
  if exc is None:
    assert out.returncode == 0, out.stderr[-2000:]
    return
  assert out.returncode == 1, f"expected {exc.__name__}, exited {out.returncode}\n{out.stderr}"
  last = out.stderr.strip().splitlines()[-1]
  assert last.startswith(f"{exc.__name__}: "), out.stderr[-2000:]
  assert re.search(pattern, last), f"{last!r} does not match {pattern!r}"


def test_importing_batch_does_not_import_jax():
  code = "import mjbatch_jax, sys; from mjbatch_jax import Batch; assert 'jax' not in sys.modules"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr
  code = "import sys; from mjbatch_jax import step, Simulator; assert 'jax' in sys.modules"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr


def test_mjbatch_names_at_the_top_level():
  import mjbatch_jax
  from mjbatch_jax import batch

  for name in ("Batch", "Joint", "Actuator", "Body", "Site", "SimulationError"):
    assert name in mjbatch_jax.__all__
    assert getattr(mjbatch_jax, name) is getattr(batch, name)
