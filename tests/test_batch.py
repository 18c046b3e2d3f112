"""mjbatch_jax.Batch: mjbatch 0.1.x's numpy API over mujoco.batch, checked against plain MjData."""

import copy
import threading
import time

import mujoco
import numpy as np
import pytest

from mjbatch_jax import Batch, SimulationError
from tests.models import CARTPOLE_XML, FREEBALL_XML

N = 8
INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION
COMPARED = ("qpos", "qvel", "act", "time", "sensordata", "site_xpos")


def get_state(model, data):
  row = np.empty(mujoco.mj_stateSize(model, INTEGRATION))
  mujoco.mj_getState(model, data, row, INTEGRATION)
  return row


def references(model, ctrl, nstep):
  """One fresh MjData per row of ctrl, stepped nstep times."""
  datas = [mujoco.MjData(model) for _ in range(len(ctrl))]
  for i, d in enumerate(datas):
    d.ctrl[:] = ctrl[i]
    for _ in range(nstep):
      mujoco.mj_step(model, d)
  return datas


# ------------------------------------------------------------------------- lock-step


def lockstep(nstep, num_threads, heavy=()):
  """50 calls with writes to every kind of input, against one MjData per sim."""
  model = mujoco.MjModel.from_xml_string(FREEBALL_XML)
  models = [model] * N
  batch = Batch(model, N, num_threads=num_threads)
  if heavy:
    batch.expand("body_mass")[list(heavy), 1] *= 3.0
    batch.set_const(np.array(heavy))
    for i in heavy:
      models[i] = copy.copy(model)
      models[i].body_mass[1] *= 3.0
      mujoco.mj_setConst(models[i], mujoco.MjData(models[i]))
  datas = [mujoco.MjData(m) for m in models]
  pending = [[] for _ in range(N)]
  bound = {f: batch.bind(f) for f in COMPARED}
  rng = np.random.default_rng(0)

  def write(field, ids, index, value):
    batch.bind(field)[(ids, *index)] = value
    for j, i in enumerate(ids):
      pending[i].append((field, index, value[j]))

  def apply(i):
    for field, index, value in pending[i]:
      getattr(datas[i], field)[index] = value
    pending[i].clear()

  every = list(range(N))
  for call in range(50):
    write("ctrl", every, (slice(None),), rng.uniform(-1, 1, (N, model.nu)))
    if call == 10:
      write("qpos", [1, 4, 6], (slice(0, 2),), rng.uniform(-0.3, 0.3, (3, 2)))
    if call == 15:
      write("mocap_pos", every, (0,), rng.uniform(-0.2, 0.2, (N, 3)) + [0, 1, 0.5])
    if call == 20:
      write("xfrc_applied", [2, 3], (3, slice(0, 3)), rng.uniform(-1, 1, (2, 3)))
    if call == 30:
      write("eq_active", [0, 2, 4, 6], (0,), np.zeros(4, bool))
    ids = [0, 2, 3, 7] if call % 4 == 3 else every
    if call == 25:
      ids = [1, 5]
      batch.reset(np.array(ids), keyframe=0)
      for i in ids:
        mujoco.mj_resetDataKeyframe(models[i], datas[i], 0)
        apply(i)
        mujoco.mj_forward(models[i], datas[i])
    else:
      batch.step(None if len(ids) == N else np.array(ids), nstep=nstep)
      for i in ids:
        apply(i)
        for _ in range(nstep):
          mujoco.mj_step(models[i], datas[i])
    for field, arr in bound.items():
      np.testing.assert_array_equal(arr, [getattr(d, field) for d in datas], field)
  np.testing.assert_array_equal(batch.bind("state"), [get_state(model, d) for d in datas])


@pytest.mark.parametrize("nstep", [1, 3])
@pytest.mark.parametrize("num_threads", [1, 3, 7])
def test_lockstep_with_mj_step(nstep, num_threads):
  lockstep(nstep, num_threads)


@pytest.mark.parametrize("nstep", [1, 3])
def test_lockstep_with_expanded_mass_and_set_const(nstep):
  lockstep(nstep, num_threads=4, heavy=(1, 2, 5))


# ------------------------------------------------------------------ per-sim parameters


def test_per_sim_gravity_matches_separate_models(freeball):
  batch = Batch(freeball, N, num_threads=3)
  gravity = batch.expand("gravity")
  assert gravity.shape == (N, 3)
  gravity[:, 2] = np.linspace(-9.81, -1.0, N)
  assert batch.expand("gravity") is gravity
  batch.bind("ctrl")[:, 0] = 0.5
  qpos, qvel = batch.bind("qpos"), batch.bind("qvel")
  batch.step(nstep=30)
  for i in range(N):
    m = copy.copy(freeball)
    m.opt.gravity[2] = gravity[i, 2]
    d = mujoco.MjData(m)
    d.ctrl[0] = 0.5
    for _ in range(30):
      mujoco.mj_step(m, d)
    np.testing.assert_array_equal(qpos[i], d.qpos)
    np.testing.assert_array_equal(qvel[i], d.qvel)


def test_option_names_as_mujoco_and_mjbatch(cartpole):
  batch = Batch(cartpole, N)
  np.testing.assert_array_equal(batch.expand("opt.gravity"), np.tile(cartpole.opt.gravity, (N, 1)))
  np.testing.assert_array_equal(batch.expand("o_solref"), np.tile(cartpole.opt.o_solref, (N, 1)))
  assert batch.expand("enableflags").dtype == np.int32
  assert batch.expand("timestep").shape == (N,)


def test_per_sim_timestep(cartpole):
  batch = Batch(cartpole, N, num_threads=2)
  timestep = batch.expand("timestep")
  timestep[:] = 0.001 * (1 + np.arange(N))
  t = batch.bind("time")
  batch.step(nstep=4)
  want = np.zeros(N)
  for _ in range(4):
    want += timestep
  np.testing.assert_array_equal(t, want)


def test_per_sim_integrator(cartpole):
  batch = Batch(cartpole, N)
  integrator = batch.expand("integrator")
  assert integrator.dtype == np.int32 and integrator.shape == (N,)
  np.testing.assert_array_equal(integrator, cartpole.opt.integrator)
  integrator[::2] = mujoco.mjtIntegrator.mjINT_RK4
  batch.bind("ctrl")[:, 0] = 1.0
  qvel = batch.bind("qvel")
  batch.step(nstep=20)
  ref = copy.copy(cartpole)
  ref.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
  rk4 = references(ref, np.tile([1.0, 0.0], (1, 1)), 20)[0]
  euler = references(cartpole, np.tile([1.0, 0.0], (1, 1)), 20)[0]
  for i in range(N):
    np.testing.assert_array_equal(qvel[i], (rk4 if i % 2 == 0 else euler).qvel)


def test_set_const_makes_derived_constants_per_sim(cartpole):
  pole = cartpole.body("pole").id
  results = []
  for num_threads in (1, 4):
    batch = Batch(cartpole, N, num_threads=num_threads)
    mass = batch.expand("body_mass")
    mass[:, pole] = np.linspace(0.1, 1.0, N)
    batch.set_const()
    np.testing.assert_allclose(batch.expand("body_subtreemass")[:, pole], mass[:, pole])
    assert batch.expand("dof_invweight0").shape == (N, cartpole.nv)
    batch.bind("ctrl")[:, 0] = 1.0
    batch.step(nstep=20)
    results.append(batch.bind("qvel").copy())
  np.testing.assert_array_equal(results[0], results[1])
  ref = copy.copy(cartpole)
  ref.body_mass[pole] = 1.0
  mujoco.mj_setConst(ref, mujoco.MjData(ref))
  np.testing.assert_array_equal(results[0][-1], references(ref, [[1.0, 0.0]], 20)[0].qvel)


def test_first_set_const_on_a_subset_keeps_every_sim_consistent(cartpole):
  batch = Batch(cartpole, 4)
  pole = cartpole.body("pole").id
  mass = batch.expand("body_mass")
  mass[:, pole] = [1.0, 2.0, 3.0, 4.0]
  batch.set_const(np.array([1]))
  np.testing.assert_array_equal(batch.expand("body_subtreemass")[:, pole], [1, 2, 3, 4])
  mass[:, pole] = 5.0
  batch.set_const(np.array([0, 1]))  # later subsets touch only their sims
  np.testing.assert_array_equal(batch.expand("body_subtreemass")[:, pole], [5, 5, 3, 4])


def test_expanded_option_seeds_from_the_model(cartpole):
  batch, ref = Batch(cartpole, N), Batch(cartpole, N)
  batch.expand("gravity")
  batch.expand("o_solref")
  for b in (batch, ref):
    b.bind("ctrl")[:, 0] = 1.0
    b.step(nstep=20)
  np.testing.assert_array_equal(batch.bind("state"), ref.bind("state"))


# ----------------------------------------------------------------------------- sleep


def test_sleep_model_is_rejected_unless_persistent(freeball):
  xml = FREEBALL_XML.replace("<option", '<option><flag sleep="enable"/></option><option')
  model = mujoco.MjModel.from_xml_string(xml)
  with pytest.raises(ValueError, match="sleep.*persistent=True"):
    Batch(model, N)
  batch = Batch(model, 2, persistent=True)
  batch.step()
  assert batch.bind("time")[0] == model.opt.timestep


def test_per_sim_sleep_is_rejected_before_anything_runs(cartpole):
  batch = Batch(cartpole, N, num_threads=2)
  enableflags = batch.expand("enableflags")
  enableflags[3] |= int(mujoco.mjtEnableBit.mjENBL_SLEEP)
  batch.step(np.array([0, 1]))  # sim 3 is not in this call
  t = batch.bind("time").copy()
  for call in (batch.step, batch.forward, batch.set_const, batch.reset):
    with pytest.raises(ValueError, match="sim 3: sleep"):
      call()
  np.testing.assert_array_equal(batch.bind("time"), t)
  enableflags[3] = cartpole.opt.enableflags
  batch.step()


# --------------------------------------------------------------------------- history


def test_step_history_matches_a_loop(cartpole):
  batch, ref = Batch(cartpole, N, num_threads=3), Batch(cartpole, N, num_threads=3)
  for b in (batch, ref):
    b.bind("ctrl")[:, 0] = np.linspace(-1, 1, N)
  history = np.empty((N, 7, batch.nstate))
  batch.step(nstep=7, history=history)
  np.testing.assert_array_equal(history[:, -1], batch.bind("state"))
  for k in range(7):
    ref.step()
    np.testing.assert_array_equal(history[:, k], ref.bind("state"))
  np.testing.assert_array_equal(batch.bind("sensordata"), ref.bind("sensordata"))


def test_step_history_with_ids(cartpole):
  batch = Batch(cartpole, N)
  batch.bind("ctrl")[:, 0] = np.linspace(-1, 1, N)
  ids = np.array([1, 4, 6])
  history = np.empty((len(ids), 5, batch.nstate))
  batch.step(ids, nstep=5, history=history)
  state, t = batch.bind("state"), batch.bind("time")
  np.testing.assert_array_equal(history[:, -1], state[ids])
  datas = references(cartpole, batch.bind("ctrl")[ids], 0)
  for k in range(5):
    for j, d in enumerate(datas):
      mujoco.mj_step(cartpole, d)
      np.testing.assert_array_equal(history[j, k], get_state(cartpole, d))
  assert not np.any(t[[0, 2, 3, 5, 7]])


def test_step_history_validation_runs_nothing(cartpole):
  batch = Batch(cartpole, N)
  nstate = batch.nstate
  for bad in (
    np.empty((N, 3)),
    np.empty((N, 2, nstate)),
    np.empty((N - 1, 3, nstate)),
    np.empty((N, 3, nstate), np.float32),
    np.empty((N, 3, nstate + 1))[:, :, :-1],
    [[[0.0] * nstate] * 3] * N,
  ):
    with pytest.raises(ValueError, match="history"):
      batch.step(nstep=3, history=bad)
  with pytest.raises(ValueError, match="history"):
    batch.step(np.array([0, 1]), nstep=3, history=np.empty((N, 3, nstate)))
  assert not np.any(batch.bind("time"))


def test_step_history_accepts_degenerate_strides(cartpole):
  batch = Batch(cartpole, N)
  batch.step(np.zeros(N, dtype=bool), nstep=3, history=np.empty((0, 3, batch.nstate)))
  history = np.empty((4, batch.nstate))
  batch.step(np.array([2]), nstep=4, history=history[None])
  np.testing.assert_array_equal(history[-1], batch.bind("state")[2])
  assert not np.any(np.delete(batch.bind("time"), 2))


# An ellipsoid pressed into a box: a convex pair, whose collider takes a buffer for
# ccd_iterations polytope vertices from the arena, so a large ccd_iterations makes MuJoCo raise
# (out of memory) in that simulation alone. A motor pushes it along x.
CCD_XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom type="box" size=".5 .5 .05"/>
    <body pos="0 0 .1">
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="z" type="slide" axis="0 0 1"/>
      <geom type="ellipsoid" size=".05 .05 .06" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="x"/></actuator>
</mujoco>
"""
TOO_MANY_CCD_ITERATIONS = 1_000_000


def test_step_history_error_names_the_sim():
  model = mujoco.MjModel.from_xml_string(CCD_XML)
  batch = Batch(model, N, num_threads=2)
  batch.expand("ccd_iterations")[2] = TOO_MANY_CCD_ITERATIONS
  history = np.zeros((N, 3, batch.nstate))
  before = batch.bind("state")[2].copy()
  with pytest.raises(SimulationError, match="sim 2: "):
    batch.step(nstep=3, history=history)
  assert np.all(history[0, :, 0] > 0)  # the others ran
  np.testing.assert_array_equal(batch.bind("state")[2], before)


# A stiff spring that explicit integration blows up: sims started away from rest exceed
# mjMAXVAL after a few substeps, and mj_step resets them and carries on.
DIVERGE_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body><joint name="x" type="slide" stiffness="4e5"/><geom size=".1" mass="1"/></body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("forward", [False, True])
def test_step_history_continues_after_divergence_like_mj_step(forward):
  model = mujoco.MjModel.from_xml_string(DIVERGE_XML)
  batch = Batch(model, N, num_threads=2, forward=forward)
  qpos = batch.bind("qpos")
  qpos[:, 0] = np.linspace(0, 1e-3, N)
  start = qpos.copy()
  ids = np.arange(1, N)
  nstep = 30
  history = np.empty((len(ids), nstep, batch.nstate))
  xpos = batch.bind("xpos")
  batch.step(ids, nstep=nstep, history=history)
  warning = batch.bind("warning")
  assert warning[ids, mujoco.mjtWarning.mjWARN_BADQACC, 1].min() >= 1  # all of them diverged
  for j, i in enumerate(ids):
    d = mujoco.MjData(model)
    d.qpos[:] = start[i]
    for k in range(nstep):
      mujoco.mj_step(model, d)
      np.testing.assert_array_equal(history[j, k], get_state(model, d), f"sim {i} step {k}")
    if forward:
      mujoco.mj_forward(model, d)
    np.testing.assert_array_equal(batch.bind("state")[i], get_state(model, d))
    np.testing.assert_array_equal(xpos[i], d.xpos)
    np.testing.assert_array_equal(warning[i, :, 1], [w.number for w in d.warning])


# ----------------------------------------------------------------- errors and warnings


@pytest.mark.parametrize("num_threads", [1, 3])
def test_step_error_keeps_the_failing_sim(num_threads):
  model = mujoco.MjModel.from_xml_string(CCD_XML)
  batch = Batch(model, N, num_threads=num_threads)
  ccd_iterations = batch.expand("ccd_iterations")
  ccd_iterations[2] = TOO_MANY_CCD_ITERATIONS
  ctrl, qpos = batch.bind("ctrl"), batch.bind("qpos")
  ctrl[:, 0] = np.linspace(-1, 1, N)
  with pytest.raises(SimulationError, match="sim 2: .*out of memory"):
    batch.step(nstep=3)
  # sim 2 kept its state and pending write; the worker it failed on serves others correctly
  ccd_iterations[2] = model.opt.ccd_iterations
  batch.step()
  one, four = references(model, ctrl, 1), references(model, ctrl, 4)
  for i in range(N):
    np.testing.assert_array_equal(qpos[i], (one if i == 2 else four)[i].qpos)


@pytest.mark.parametrize("num_threads", [1, 2])
def test_zero_mass_raises_naming_the_sim(cartpole, num_threads):
  batch = Batch(cartpole, N, num_threads=num_threads)
  mass = batch.expand("body_mass")
  puck, pole = cartpole.body("puck").id, cartpole.body("pole").id
  mass[3, puck] = 0.0
  mass[5, pole] = 2.0
  with pytest.raises(RuntimeError, match="sim 3: .*0 mass") as info:
    batch.set_const()
  assert isinstance(info.value, SimulationError)
  # the other sims ran; a later call works after fixing the input
  assert batch.expand("body_subtreemass")[5, pole] == 2.0
  mass[3, puck] = 1.0
  batch.set_const()


def test_warning_counters(cartpole):
  batch = Batch(cartpole, N)
  warning = batch.bind("warning")
  assert warning.shape == (N, mujoco.mjtWarning.mjNWARNING.value, 2)
  assert warning.dtype == np.int32
  batch.bind("qpos")[2] = np.nan
  batch.step()
  assert warning[2, mujoco.mjtWarning.mjWARN_BADQPOS, 1] == 1
  assert warning[:, :, 1].sum() == 1


# ------------------------------------------------------------------ bindings and views


def test_shapes_and_dtypes_match_mjdata(freeball):
  batch = Batch(freeball, N)
  d = mujoco.MjData(freeball)
  nbound = 0
  for name in dir(d):
    val = getattr(d, name, None)
    if name.startswith("_") or not isinstance(val, np.ndarray):
      continue
    try:
      arr = batch.bind(name)
    except ValueError:
      continue
    nbound += 1
    assert arr.shape == (N, *val.shape), name
    assert arr.dtype == val.dtype, name
  assert nbound > 50
  assert batch.bind("eq_active").dtype == d.eq_active.dtype
  assert batch.bind("time").shape == (N,)
  assert batch.bind("state").shape == (N, batch.nstate)


def test_bind_and_expand_errors(cartpole):
  batch = Batch(cartpole, N)
  assert batch.bind("qpos", np.float32).dtype == np.float32
  with pytest.raises(ValueError, match="already bound with another dtype"):
    batch.bind("qpos")
  with pytest.raises(ValueError, match="already bound with another dtype"):
    batch.bind("qpos", np.float64)
  assert batch.bind("qpos", np.float32) is batch.bind("qpos", np.float32)
  for name, dtype in (("eq_active", np.float32), ("state", np.float32), ("qpos", np.int32)):
    with pytest.raises(ValueError):
      Batch(cartpole, 2).bind(name, dtype)
  with pytest.raises(ValueError, match="nope"):
    batch.bind("nope")
  with pytest.raises(ValueError, match=r'use expand\("geom_friction"\)'):
    batch.bind("geom_friction")
  with pytest.raises(ValueError, match=r'use expand\("gravity"\)'):
    batch.bind("gravity")
  with pytest.raises(ValueError, match=r'use bind\("qpos"\)'):
    batch.expand("qpos")
  with pytest.raises(ValueError, match="mesh_vert"):
    batch.expand("mesh_vert")
  with pytest.raises(ValueError, match="nope"):
    batch.expand("nope")
  with pytest.raises(ValueError, match="num_sims"):
    Batch(cartpole, 0)


def test_derived_fields_are_writable_and_overwritten(cartpole):
  batch = Batch(cartpole, N)
  xpos = batch.bind("xpos")
  assert xpos.flags.writeable
  batch.forward()
  want = xpos.copy()
  xpos[:] = 42.0
  batch.forward()
  np.testing.assert_array_equal(xpos, want)


def test_forward_flag_makes_derived_fields_current(cartpole):
  for forward in (False, True):
    batch = Batch(cartpole, N, forward=forward)
    ctrl, xpos, sensordata = (batch.bind(f) for f in ("ctrl", "xpos", "sensordata"))
    ctrl[:, 0] = np.linspace(-1, 1, N)
    batch.step(nstep=10)
    behind = xpos.copy(), sensordata.copy()
    d = references(cartpole, ctrl, 10)[3]
    if forward:
      mujoco.mj_forward(cartpole, d)
    np.testing.assert_array_equal(xpos[3], d.xpos)
    np.testing.assert_array_equal(sensordata[3], d.sensordata)
    batch.forward()
    same = np.array_equal(behind[0], xpos) and np.array_equal(behind[1], sensordata)
    assert same == forward


def test_float32_bindings_are_change_tracked_copies(cartpole):
  batch = Batch(cartpole, N, num_threads=2)
  ctrl = batch.bind("ctrl", np.float32)
  qpos = batch.bind("qpos", np.float32)
  ctrl[:, 0] = 0.3
  for _ in range(100):
    batch.step()
  # physics ran in float64: untouched float32 elements never round-trip
  ref_ctrl = np.zeros((1, cartpole.nu))
  ref_ctrl[:, 0] = np.float32(0.3)
  d = references(cartpole, ref_ctrl, 100)[0]
  state = batch.bind("state")
  np.testing.assert_array_equal(state[0, 1 : 1 + cartpole.nq], d.qpos)
  np.testing.assert_array_equal(qpos[0], d.qpos.astype(np.float32))
  # a written element takes effect at the sim's next call
  qpos[1, 1] = 0.7
  batch.forward(np.array([0]))
  assert state[1, 2] == np.float32(0.7)
  batch.forward()
  # a state-row write is not overwritten by the stale copy
  state[2, 2] = 0.123456789
  batch.step(np.array([0]))
  assert state[2, 2] == 0.123456789
  # float32 derived fields and expanded fields
  site_xpos = batch.bind("site_xpos", np.float32)
  batch.forward()
  np.testing.assert_array_equal(site_xpos, batch.bind("site_xpos", np.float32))
  gravity = batch.expand("gravity", np.float32)
  gravity[:, 2] = -1.0
  with pytest.raises(ValueError, match="another dtype"):
    batch.expand("gravity")


def test_float32_timestep_expand_is_a_copy(cartpole):
  batch = Batch(cartpole, 2)
  timestep = batch.expand("timestep", np.float32)
  timestep[1] = 0.004
  batch.step()
  np.testing.assert_array_equal(batch.bind("time"), [0.002, np.float64(np.float32(0.004))])


def test_eq_active_binding_is_a_bool_copy(cartpole):
  batch = Batch(cartpole, 2)
  eq = batch.bind("eq_active")
  assert eq.dtype == mujoco.MjData(cartpole).eq_active.dtype and not eq.any()
  eq[1, 0] = True
  batch.bind("mocap_pos")[:, 0, 0] += 0.5  # the weld, where active, pulls the cart along
  qacc = batch.bind("qacc")
  batch.forward()
  mocap, cart = cartpole.body("mocap").id, cartpole.body("cart").id
  d = mujoco.MjData(cartpole)
  d.eq_active[0] = True
  d.mocap_pos[0, 0] += 0.5
  mujoco.mj_forward(cartpole, d)
  np.testing.assert_array_equal(qacc[1], d.qacc)
  assert not np.array_equal(qacc[0], d.qacc)
  assert mocap != cart and eq[1, 0] and not eq[0, 0]


def test_named_views(cartpole):
  batch = Batch(cartpole, N)
  hinge, tip = batch.joint("hinge"), batch.site("tip")
  assert hinge.qpos.shape == (N, 1) and hinge.qvel.shape == (N, 1)
  batch.bind("ctrl")[:, 0] = 1.0
  batch.step(nstep=10)
  np.testing.assert_array_equal(hinge.qpos[:, 0], batch.bind("qpos")[:, 1])
  np.testing.assert_array_equal(tip.xpos, batch.bind("site_xpos")[:, cartpole.site("tip").id])
  assert tip.xmat.shape == (N, 9)
  pole = batch.body("pole")
  assert pole.xquat.shape == (N, 4) and pole.xpos.shape == (N, 3) and pole.cvel.shape == (N, 6)
  np.testing.assert_array_equal(batch.sensor("angle")[:, 0], batch.bind("sensordata")[:, 0])
  assert batch.sensor("tip_pos").shape == (N, 3)
  servo = batch.actuator("servo")
  servo.ctrl[:] = 0.5  # live: a write through the view is a write to the rows
  assert (batch.bind("ctrl")[:, 1] == 0.5).all()
  batch.forward()
  np.testing.assert_array_equal(servo.force, batch.bind("actuator_force")[:, 1])


def test_named_views_of_free_and_ball_joints(freeball):
  batch = Batch(freeball, 2)
  ball = batch.joint("ball")
  assert ball.qpos.shape == (2, 7) and ball.qvel.shape == (2, 6)
  np.testing.assert_array_equal(ball.qpos, np.tile(freeball.qpos0[2:9], (2, 1)))


# --------------------------------------------------------------- resets, ids, the rows


def test_reset_keyframe_and_pending_writes(cartpole):
  batch = Batch(cartpole, N)
  qpos0 = batch.expand("qpos0")
  qpos0[:, 1] = np.arange(N) * 0.1
  qpos = batch.bind("qpos")
  batch.bind("ctrl")[:, 0] = 1.0
  batch.step()
  qpos[5, 0] = 0.25  # a write survives a reset of its sim and lands on top of it
  xpos = batch.bind("xpos")
  batch.reset(np.array([2, 5]))
  np.testing.assert_array_equal(qpos[2], qpos0[2])
  assert qpos[5, 0] == 0.25
  np.testing.assert_array_equal(qpos[5, 1:], qpos0[5, 1:])
  assert qpos[0, 0] != 0.0
  assert xpos[2, 1, 2] != 0.0  # reset runs mj_forward
  mask = np.zeros(N, dtype=bool)
  mask[0] = True
  batch.reset(mask)
  assert qpos[0, 0] == 0.0
  batch.reset(keyframe=0)
  np.testing.assert_array_equal(qpos, np.tile(cartpole.key_qpos[0], (N, 1)))
  for bad in (1, -2):
    with pytest.raises(ValueError, match="keyframe"):
      batch.reset(keyframe=bad)


def test_reset_applies_pending_float32_writes(cartpole):
  batch = Batch(cartpole, 2, 1)
  q = batch.bind("qpos", np.float32)
  batch.step()
  q[0, 0] = 0.25
  batch.reset()
  np.testing.assert_array_equal(q[:, 0], [0.25, 0.0])


def test_ids_validation_and_time(cartpole):
  batch = Batch(cartpole, N, num_threads=3)
  t = batch.bind("time")
  batch.step(np.array([1, 3]))
  np.testing.assert_array_equal(t, [0, 0.002, 0, 0.002, 0, 0, 0, 0])
  batch.step(np.array([1, 3], dtype=np.int32))
  np.testing.assert_array_equal(t, [0, 0.004, 0, 0.004, 0, 0, 0, 0])
  for bad in ([N], [1, 1], [3, 1], [1.0, 2.0], [-1, 2], [[1]], np.ones(N - 1, bool)):
    for call in (batch.step, batch.forward, batch.reset, batch.set_const):
      with pytest.raises(ValueError):
        call(np.array(bad))
  np.testing.assert_array_equal(t, [0, 0.004, 0, 0.004, 0, 0, 0, 0])


def test_bad_input_runs_nothing(cartpole):
  batch = Batch(cartpole, N)
  t = batch.bind("time")
  with pytest.raises(ValueError, match="nstep"):
    batch.step(nstep=0)
  with pytest.raises(ValueError, match="keyframe"):
    batch.reset(keyframe=5)
  with pytest.raises(ValueError, match="ids"):
    batch.step(np.array([0, 0]))
  assert not t.any()


def test_state_rows_copy_restore_and_compose(cartpole):
  batch = Batch(cartpole, N)
  state, qpos, xpos = batch.bind("state"), batch.bind("qpos"), batch.bind("xpos")
  assert batch.nstate == mujoco.mj_stateSize(cartpole, INTEGRATION)
  assert state.shape == (N, batch.nstate) and state.dtype == np.float64
  batch.bind("ctrl")[:] = np.arange(N)[:, None] * 0.1
  batch.step(nstep=5)
  # copying a row copies the physics
  state[1] = state[0]
  batch.forward(np.array([0, 1]))
  np.testing.assert_array_equal(qpos[1], qpos[0])
  np.testing.assert_array_equal(xpos[1], xpos[0])
  # a state write and a field write compose, the later winning
  data = mujoco.MjData(cartpole)
  saved = state[3].copy()
  batch.step(nstep=3)
  state[3] = saved
  qpos[3, 0] = 0.7
  mujoco.mj_setState(cartpole, data, saved, INTEGRATION)
  data.qpos[0] = 0.7
  batch.step(np.array([3]))
  mujoco.mj_step(cartpole, data)
  np.testing.assert_array_equal(state[3], get_state(cartpole, data))
  # restoring the rows replays the same steps bit for bit
  before = state.copy()
  batch.step(nstep=2)
  once = state.copy()
  state[:] = before
  batch.step(nstep=2)
  np.testing.assert_array_equal(state, once)
  # reset applies a pending state write element by element
  state[2] = once[5]
  reset = get_state(cartpole, mujoco.MjData(cartpole))
  written = np.where(once[5] != once[2], once[5], reset)
  batch.reset(np.array([2]))
  np.testing.assert_array_equal(state[2], written)
  assert np.shares_memory(batch.bind("state"), state)


SLIDER_XML = """
<mujoco>
  <option gravity="0 0 0"/>
  <worldbody>
    <body><joint name="j" type="slide"/><geom size=".1" mass="1"/></body>
    <body name="mocap" mocap="true"><geom size=".02" contype="0" conaffinity="0"/></body>
  </worldbody>
  <actuator><motor joint="j"/></actuator>
</mujoco>
"""


def test_field_and_state_writes_compose_per_sim():
  model = mujoco.MjModel.from_xml_string(SLIDER_XML)
  s0 = get_state(model, mujoco.MjData(model))
  batch = Batch(model, 3)
  ctrl, state, qvel = batch.bind("ctrl"), batch.bind("state"), batch.bind("qvel")
  mocap_pos, xpos = batch.bind("mocap_pos"), batch.bind("xpos")
  ctrl[:] = 1.0
  mocap_pos[:, 0] = [0.3, 0.2, 0.1]
  batch.step()
  state[:] = s0
  assert ctrl[0, 0] == 0.0 and np.shares_memory(ctrl, state)
  ctrl[:2] = 1.0  # the value the view held before the state write still reaches the sim
  batch.step(np.array([0, 2]))
  np.testing.assert_array_equal(qvel[:, 0], [0.002, 0.0, 0.0])
  batch.step(np.array([1]))  # sim 1's writes waited for its next call
  np.testing.assert_array_equal(qvel[:, 0], [0.002, 0.002, 0.0])
  np.testing.assert_array_equal(xpos[2, model.body("mocap").id], 0.0)


def test_to_and_from_jax(cartpole):
  jnp = pytest.importorskip("jax.numpy")
  batch = Batch(cartpole, N)
  batch.bind("ctrl")[:, 0] = 1.0
  batch.step(nstep=3)
  rows = batch.to_jax()
  assert isinstance(rows, jnp.ndarray) and rows.shape == (N, batch.nstate)
  np.testing.assert_array_equal(np.asarray(rows), batch.bind("state").astype(rows.dtype))
  batch.step(nstep=3)
  batch.from_jax(rows)
  np.testing.assert_array_equal(batch.bind("state"), np.asarray(rows, np.float64))
  with pytest.raises(ValueError, match="shape"):
    batch.from_jax(rows[1:])


def test_close_and_context_manager(cartpole):
  with Batch(cartpole, 2) as batch:
    qpos = batch.bind("qpos")
    batch.step()
  for call in (batch.step, batch.forward, batch.reset, lambda: batch.bind("qvel")):
    with pytest.raises(ValueError, match="closed"):
      call()
  assert qpos.shape == (2, cartpole.nq)  # arrays already bound stay readable


def test_num_threads_and_properties(cartpole):
  batch = Batch(cartpole, 3, num_threads=7)
  assert batch.num_sims == 3 and batch.num_threads == 3 and batch.model is cartpole
  assert Batch(cartpole, 5, num_threads=2).num_threads == 2


# ----------------------------------------------------------------------- concurrency


def test_concurrent_calls_are_serialized(cartpole):
  batch = Batch(cartpole, N, num_threads=2)
  other = Batch(cartpole, N, num_threads=2)
  t, other_t = batch.bind("time"), other.bind("time")

  def work(b, nstep):
    for _ in range(30):
      b.step(nstep=nstep)

  args = ((batch, 1), (batch, 5), (other, 2))
  threads = [threading.Thread(target=work, args=a) for a in args]
  for th in threads:
    th.start()
  for th in threads:
    th.join()
  np.testing.assert_allclose(t, 180 * 0.002)
  np.testing.assert_allclose(other_t, 60 * 0.002)
  ref = Batch(cartpole, N, num_threads=1)
  ref.step(nstep=180)
  np.testing.assert_array_equal(batch.bind("state"), ref.bind("state"))


def test_gil_is_released_during_physics(freeball):
  batch = Batch(freeball, 64, num_threads=1)
  count, done = [0], threading.Event()

  def spin():
    while not done.is_set():
      count[0] += 1

  th = threading.Thread(target=spin)
  th.start()
  time.sleep(0.01)
  start = count[0]
  batch.step(nstep=200)  # about 0.1 s of physics on the caller's thread
  progressed = count[0] - start
  done.set()
  th.join()
  assert progressed > 1000


# ------------------------------------------------------------------------ rays and jac

RAY_XML = """
<mujoco>
  <asset>
    <mesh name="wedge" vertex="0 0 0  .4 0 0  0 .4 0  0 0 .3"/>
    <hfield name="hills" nrow="4" ncol="4" size="1 1 .3 .1"
            elevation="0 .2 .4 .1  .3 1 .6 .2  .1 .5 .9 .3  0 .2 .3 .1"/>
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1"/>
    <geom name="hills" type="hfield" hfield="hills" pos="3 0 0"/>
    <geom name="wedge" type="mesh" mesh="wedge" pos="-2 0 0"/>
    <body name="box" pos="0 0 .5">
      <freejoint/>
      <geom name="box" type="box" size=".3 .2 .1"/>
      <geom name="ball" type="sphere" size=".15" pos="0 0 .3" group="1"/>
    </body>
    <body name="target" mocap="true" pos="1 1 1">
      <geom name="target" type="capsule" size=".1 .2"/>
    </body>
  </worldbody>
</mujoco>
"""


def ray_setup(dtype):
  """Each sim's box and mocap body moved by a write, not stepped."""
  model = mujoco.MjModel.from_xml_string(RAY_XML)
  batch = Batch(model, N, 3)
  rng = np.random.default_rng(0)
  qpos = batch.bind("qpos")
  qpos[:, :3] += rng.uniform(-0.3, 0.3, (N, 3))
  quat = rng.normal(size=(N, 4))
  qpos[:, 3:] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
  batch.bind("mocap_pos")[:] += rng.uniform(-0.5, 0.5, (N, 1, 3))
  nray = 64
  pnt = rng.uniform(-4, 4, (N, nray, 3))
  pnt[..., 2] = rng.uniform(1.5, 3, (N, nray))
  vec = rng.normal(size=(N, nray, 3))
  vec[..., 2] = -np.abs(vec[..., 2]) - 1
  vec /= np.linalg.norm(vec, axis=-1, keepdims=True)
  pnt[:, :2] = batch.bind("mocap_pos") + [0, 0, 1]  # straight down onto the mocap body
  vec[:, :2] = [0, 0, -1]
  return model, batch, pnt.astype(dtype), vec.astype(dtype)


def reference_rays(model, batch, pnt, vec, geomgroup, flg_static, bodyexclude):
  data = mujoco.MjData(model)
  dist = np.empty(pnt.shape[:2])
  geomid = np.empty(pnt.shape[:2], np.int32)
  normal = np.zeros(pnt.shape)
  hit, n = np.zeros(1, np.int32), np.zeros(3)
  for i in range(N):
    data.qpos[:] = batch.bind("qpos")[i]
    data.mocap_pos[:] = batch.bind("mocap_pos")[i]
    mujoco.mj_forward(model, data)
    for k in range(pnt.shape[1]):
      exclude = -1 if bodyexclude is None else int(bodyexclude[k])
      p, v = pnt[i, k].astype(np.float64), vec[i, k].astype(np.float64)
      dist[i, k] = mujoco.mj_ray(model, data, p, v, geomgroup, flg_static, exclude, hit, n)
      geomid[i, k] = hit[0]
      if dist[i, k] >= 0:
        normal[i, k] = n
  return dist, geomid, normal


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("filtered", [False, True])
def test_rays_match_mj_ray(dtype, filtered):
  model, batch, pnt, vec = ray_setup(dtype)
  nray = pnt.shape[1]
  geomgroup = np.array([1, 0, 0, 0, 0, 0], np.uint8) if filtered else None
  bodyexclude = None
  if filtered:
    bodyexclude = np.where(np.arange(nray) % 2, model.body("target").id, -1).astype(np.int32)
  dist = np.empty((N, nray), dtype)
  geomid = np.empty((N, nray), np.int32)
  normal = np.empty((N, nray, 3), dtype)
  batch.rays(pnt, vec, dist, geomid, normal, geomgroup, not filtered, bodyexclude)
  want = reference_rays(model, batch, pnt, vec, geomgroup, not filtered, bodyexclude)
  np.testing.assert_array_equal(geomid, want[1])
  if dtype == np.float64:
    np.testing.assert_array_equal(dist, want[0])
    np.testing.assert_array_equal(normal, want[2])
  else:
    np.testing.assert_array_equal(dist, want[0].astype(np.float32))
    np.testing.assert_array_equal(normal, want[2].astype(np.float32))
  hit = {model.geom(g).name for g in np.unique(geomid) if g >= 0}
  if filtered:
    assert hit == {"box", "target"}
    assert (geomid[:, 0] == model.geom("target").id).all()
    assert (geomid[:, 1::2] != model.geom("target").id).all()
  else:
    assert hit == {"floor", "hills", "wedge", "box", "ball", "target"}


def test_rays_are_a_query():
  model, batch, pnt, vec = ray_setup(np.float64)
  xpos = batch.bind("xpos")
  before = xpos.copy()
  dist = np.full(pnt.shape[:2], 7.0)
  ids = np.array([1, 4])
  batch.rays(pnt, vec, dist, ids=ids)
  assert (dist[ids] != 7.0).all()
  assert (np.delete(dist, ids, axis=0) == 7.0).all()
  np.testing.assert_array_equal(xpos, before)
  assert not batch.bind("time").any()
  # the pending qpos write the rays read still reaches the next call
  batch.forward()
  np.testing.assert_array_equal(xpos[:, model.body("box").id], batch.bind("qpos")[:, :3])


def test_rays_see_per_sim_geometry():
  model, batch, _, _ = ray_setup(np.float64)
  batch.bind("qpos")[:, :7] = model.qpos0[:7]
  half_height = np.linspace(0.05, 0.4, N)
  batch.expand("geom_size")[:, model.geom("box").id, 2] = half_height
  pnt = np.tile([0.25, 0.15, 3.0], (N, 1, 1))
  vec = np.tile([0.0, 0.0, -1.0], (N, 1, 1))
  dist = np.empty((N, 1))
  batch.rays(pnt, vec, dist)
  np.testing.assert_allclose(dist[:, 0], 3.0 - (0.5 + half_height), rtol=0, atol=1e-12)


def test_rays_validation():
  _, batch, pnt, vec = ray_setup(np.float64)
  dist = np.empty(pnt.shape[:2])
  with pytest.raises(ValueError, match="dist"):
    batch.rays(pnt, vec, dist.astype(np.float32))
  with pytest.raises(ValueError, match="vec"):
    batch.rays(pnt, vec[:, :-1], dist)
  with pytest.raises(ValueError, match="pnt"):
    batch.rays(pnt[:-1], vec[:-1], dist[:-1])
  with pytest.raises(ValueError, match="bodyexclude"):
    batch.rays(pnt, vec, dist, bodyexclude=np.zeros(3, np.int32))
  with pytest.raises(ValueError, match="geomid"):
    batch.rays(pnt, vec, dist, geomid=np.empty(pnt.shape[:2]))


def jac_setup(dtype):
  model = mujoco.MjModel.from_xml_string(CARTPOLE_XML)
  batch = Batch(model, N, 3)
  rng = np.random.default_rng(0)
  batch.bind("qpos")[:] = rng.uniform(-1, 1, (N, model.nq))
  point = rng.uniform(-1, 1, (N, 3)).astype(dtype)
  body = (1 + np.arange(N) % 3).astype(np.int32)  # cart, pole, puck
  return model, batch, point, body


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_jac_matches_mj_jac(dtype):
  model, batch, point, body = jac_setup(dtype)
  jacp = np.empty((N, 3, model.nv), dtype)
  jacr = np.empty((N, 3, model.nv), dtype)
  batch.jac(jacp, jacr, point, body)
  data = mujoco.MjData(model)
  want_p, want_r = np.empty((N, 3, model.nv)), np.empty((N, 3, model.nv))
  for i in range(N):
    data.qpos[:] = batch.bind("qpos")[i]
    mujoco.mj_forward(model, data)
    mujoco.mj_jac(model, data, want_p[i], want_r[i], point[i].astype(np.float64), body[i])
  np.testing.assert_array_equal(jacp, want_p.astype(dtype))
  np.testing.assert_array_equal(jacr, want_r.astype(dtype))
  assert np.abs(want_p).max() > 0.1 and np.abs(want_r).max() > 0.1
  only_p, only_r = np.empty_like(jacp), np.empty_like(jacr)
  batch.jac(only_p, None, point, body)
  batch.jac(None, only_r, point, body)
  np.testing.assert_array_equal(only_p, jacp)
  np.testing.assert_array_equal(only_r, jacr)


def test_jac_is_a_query():
  model, batch, point, body = jac_setup(np.float64)
  xpos = batch.bind("xpos")
  jacp = np.full((N, 3, model.nv), 7.0)
  ids = np.array([1, 4])
  batch.jac(jacp, None, point, body, ids)
  assert (jacp[ids] != 7.0).any(axis=(1, 2)).all()
  assert (np.delete(jacp, ids, axis=0) == 7.0).all()
  assert not xpos.any() and not batch.bind("time").any()


def test_jac_validation():
  model, batch, point, body = jac_setup(np.float64)
  jacp = np.zeros((N, 3, model.nv))  # zeros: the float32 copy below must not cast garbage
  with pytest.raises(ValueError, match="jacp"):
    batch.jac(jacp[:, :, :-1], None, point, body)
  with pytest.raises(ValueError, match="jacr"):
    batch.jac(jacp, jacp.astype(np.float32), point, body)
  with pytest.raises(ValueError, match="point"):
    batch.jac(jacp, None, point[:, :2], body)
  with pytest.raises(ValueError, match="num_sims"):
    batch.jac(jacp, None, point, body[:-1])
  with pytest.raises(ValueError, match="nbody"):
    batch.jac(jacp, None, point, np.full(N, model.nbody, np.int32))
