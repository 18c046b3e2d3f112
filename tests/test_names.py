"""Names: every lookup against MuJoCo's own ids and addresses, and against simulated values."""

import copy
import pickle

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax.layout import StateLayout
from mjbatch_jax.names import JointSlices, Names
from tests.models import GO1, load

jax.config.update("jax_enable_x64", True)

# One of each joint type (free, ball, hinge, slide), sensors of 1, 3 and 4 values, unnamed
# objects of several kinds, and a keyframe that sets every joint to a distinct value.
EVERY_KIND = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <light name="top" pos="0 0 3"/>
    <geom name="floor" type="plane" size="2 2 .1"/>
    <geom name="ramp" type="box" pos="1 0 0" size=".3 .3 .05" euler="0 10 0"/>
    <camera name="overhead" pos="0 0 3"/>
    <body name="ball" pos="0 0 .5">
      <freejoint name="free"/>
      <geom name="ball_geom" type="sphere" size=".05" mass=".2"/>
      <site name="ball_site"/>
    </body>
    <body name="arm" pos="0 1 1">
      <joint name="shoulder" type="ball"/>
      <geom type="capsule" fromto="0 0 0 0 0 -.3" size=".02" mass=".3"/>
      <site name="elbow" pos="0 0 -.3"/>
      <body name="forearm" pos="0 0 -.3">
        <joint name="elbow_hinge" axis="0 1 0"/>
        <geom name="forearm_geom" type="capsule" fromto="0 0 0 0 0 -.3" size=".02" mass=".2"/>
        <site name="hand" pos="0 0 -.3"/>
        <body name="slider" pos="0 0 -.3">
          <joint name="extend" type="slide" axis="0 0 1"/>
          <geom name="finger" type="sphere" size=".03" mass=".05"/>
          <site name="fingertip"/>
          <site/>
        </body>
      </body>
    </body>
  </worldbody>
  <tendon>
    <spatial name="cable"><site site="elbow"/><site site="fingertip"/></spatial>
  </tendon>
  <actuator>
    <motor name="elbow_motor" joint="elbow_hinge" gear="2"/>
    <position name="extend_servo" joint="extend" kp="10"/>
    <motor joint="elbow_hinge"/>
  </actuator>
  <sensor>
    <jointpos name="elbow_angle" joint="elbow_hinge"/>
    <framepos name="hand_pos" objtype="site" objname="hand"/>
    <gyro name="gyro" site="ball_site"/>
    <jointvel joint="extend"/>
    <tendonpos name="cable_length" tendon="cable"/>
    <ballquat name="shoulder_quat" joint="shoulder"/>
    <framepos name="fingertip_pos" objtype="site" objname="fingertip"/>
  </sensor>
  <keyframe>
    <key name="rest"/>
    <key name="home" qpos="0.1 0.2 0.5 0.6 0 0.8 0  0.8 0 0.6 0  0.3  -0.05"
         qvel="1 2 3 0.1 0.2 0.3  0.4 0.5 0.6  0.7  0.8" ctrl="0.5 0.01 -0.2"/>
  </keyframe>
</mujoco>
"""

JOINT_WIDTHS = {"free": (7, 6), "shoulder": (4, 3), "elbow_hinge": (1, 1), "extend": (1, 1)}


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
  return load(EVERY_KIND)


@pytest.fixture(scope="module")
def names(model) -> Names:
  return Names.of(model)


@pytest.fixture(scope="module")
def sim(model):
  with mjbatch_jax.Simulator(model, num_threads=1) as s:
    yield s


def home_data(model: mujoco.MjModel) -> mujoco.MjData:
  data = mujoco.MjData(model)
  mujoco.mj_resetDataKeyframe(model, data, model.keyframe("home").id)
  mujoco.mj_forward(model, data)
  return data


def test_ids_of_every_kind_are_mujocos(model, names):
  checked = 0
  for kind in names.kinds():
    for name in names.named(kind):
      assert names.id(kind, name) == getattr(model, kind)(name).id, (kind, name)
      assert names.has(kind, name)
      checked += 1
  assert checked == 31
  assert names.body("forearm") == model.body("forearm").id
  assert names.geom("ramp") == model.geom("ramp").id
  assert names.site("hand") == model.site("hand").id
  assert names.camera("overhead") == model.camera("overhead").id
  assert names.tendon("cable") == model.tendon("cable").id
  assert names.keyframe("home") == 1
  assert names.actuator("extend_servo") == model.actuator("extend_servo").id
  assert names.id("light", "top") == model.light("top").id
  for name in ("world", "ball", "arm", "forearm", "slider"):
    assert isinstance(names.body(name), int)


def test_plural_lookups_keep_the_given_order(model, names):
  for ids, kind, chosen in (
    (names.bodies("slider", "ball"), "body", ("slider", "ball")),
    (names.geoms("ramp", "floor"), "geom", ("ramp", "floor")),
    (names.sites("fingertip", "hand", "elbow"), "site", ("fingertip", "hand", "elbow")),
    (names.joints("extend", "free"), "joint", ("extend", "free")),
    (names.actuators("extend_servo", "elbow_motor"), "actuator", ("extend_servo", "elbow_motor")),
    (names.tendons("cable"), "tendon", ("cable",)),
    (names.cameras("overhead"), "camera", ("overhead",)),
    (names.ids("geom", "finger", "ball_geom"), "geom", ("finger", "ball_geom")),
  ):
    assert ids.dtype == np.intp
    np.testing.assert_array_equal(ids, [getattr(model, kind)(n).id for n in chosen])
  # A list works as well as separate arguments; nothing gives an empty selection.
  np.testing.assert_array_equal(names.geoms(["ramp", "floor"]), names.geoms("ramp", "floor"))
  np.testing.assert_array_equal(names.geoms(g for g in ("ramp",)), names.geoms("ramp"))
  assert names.bodies().shape == (0,)


def test_joint_slices_are_mujocos_addresses(model, names):
  layout = StateLayout.of(model)
  for name, (nq, nv) in JOINT_WIDTHS.items():
    joint = names.joint(name)
    j = model.joint(name)
    qadr, dadr = int(j.qposadr[0]), int(j.dofadr[0])
    assert joint.name == name and joint.id == j.id and joint.type == int(j.type[0])
    assert joint.qpos_index == slice(qadr, qadr + nq)
    assert joint.dof_index == slice(dadr, dadr + nv)
    assert joint.qpos == slice(layout.qpos.start + qadr, layout.qpos.start + qadr + nq)
    assert joint.qvel == slice(layout.qvel.start + dadr, layout.qvel.start + dadr + nv)
  # The joints' slices tile qpos and qvel: every position and dof belongs to one joint.
  assert sorted(names.qpos_columns(*JOINT_WIDTHS)) == list(range(layout.qpos.start,
                                                                 layout.qpos.stop))
  assert sorted(names.qvel_columns(*JOINT_WIDTHS)) == list(range(layout.qvel.start,
                                                                 layout.qvel.stop))
  np.testing.assert_array_equal(
    names.qpos_columns("extend", "shoulder"),
    np.r_[names.joint("extend").qpos, names.joint("shoulder").qpos],
  )


def test_sensor_slices_are_mujocos_addresses(model, names):
  dims = set()
  for name in names.named("sensor"):
    s = model.sensor(name)
    adr, dim = int(s.adr[0]), int(s.dim[0])
    assert names.sensor(name) == slice(adr, adr + dim)
    dims.add(dim)
  assert dims == {1, 3, 4}
  chosen = ("gyro", "elbow_angle", "shoulder_quat")
  obs = names.sensors(*chosen)
  assert obs.dtype == np.intp and obs.shape == (8,)
  np.testing.assert_array_equal(obs, np.r_[tuple(names.sensor(n) for n in chosen)])


def test_actuator_columns_are_the_rows_ctrl(model, names):
  layout = StateLayout.of(model)
  for name in names.named("actuator"):
    assert names.actuator_column(name) == layout.ctrl.start + model.actuator(name).id
  np.testing.assert_array_equal(
    names.actuator_columns("extend_servo", "elbow_motor"),
    layout.ctrl.start + np.array([1, 0]),
  )


def test_state_rows_by_name_hold_the_keyframe(model, names, sim):
  state = np.asarray(sim.init_state(2, keyframe=names.keyframe("home")))
  key = model.keyframe("home")
  for name in JOINT_WIDTHS:
    joint = names.joint(name)
    for row in state:
      np.testing.assert_array_equal(row[joint.qpos], key.qpos[joint.qpos_index])
      np.testing.assert_array_equal(row[joint.qvel], key.qvel[joint.dof_index])
  # Spot values written in the XML, so that a slice that is merely consistent cannot pass.
  np.testing.assert_array_equal(state[:, names.joint("shoulder").qpos], [[0.8, 0, 0.6, 0]] * 2)
  np.testing.assert_array_equal(state[:, names.joint("extend").qpos], [[-0.05]] * 2)
  np.testing.assert_array_equal(state[:, names.joint("free").qvel], [[1, 2, 3, .1, .2, .3]] * 2)
  np.testing.assert_array_equal(state[:, names.actuator_column("extend_servo")], [0.01] * 2)
  np.testing.assert_array_equal(
    state[:, names.qvel_columns("extend", "elbow_hinge")], [[0.8, 0.7]] * 2
  )


def test_forward_outputs_by_name_are_mjdatas(model, names, sim):
  state = sim.init_state(2, keyframe="home")
  fields = ("sensordata", "site_xpos", "xpos", "geom_xpos", "ten_length", "cam_xpos", "qfrc_bias")
  out = {k: np.asarray(v) for k, v in mjbatch_jax.forward(state, sim.params(2), fields).items()}
  data = home_data(model)
  for name in names.named("sensor"):
    np.testing.assert_allclose(out["sensordata"][:, names.sensor(name)],
                               [data.sensor(name).data] * 2, rtol=0, atol=1e-12)
  for name in names.named("site"):
    np.testing.assert_allclose(out["site_xpos"][:, names.site(name)], [data.site(name).xpos] * 2,
                               rtol=0, atol=1e-12)
  for name in names.named("body"):
    np.testing.assert_allclose(out["xpos"][:, names.body(name)], [data.body(name).xpos] * 2,
                               rtol=0, atol=1e-12)
  for name in names.named("geom"):
    np.testing.assert_allclose(out["geom_xpos"][:, names.geom(name)], [data.geom(name).xpos] * 2,
                               rtol=0, atol=1e-12)
  np.testing.assert_allclose(out["ten_length"][:, names.tendon("cable")],
                             [data.tendon("cable").length[0]] * 2, rtol=0, atol=1e-12)
  np.testing.assert_allclose(out["cam_xpos"][:, names.camera("overhead")],
                             [data.camera("overhead").xpos] * 2, rtol=0, atol=1e-12)
  shoulder = names.joint("shoulder")
  np.testing.assert_allclose(out["qfrc_bias"][:, shoulder.dof_index],
                             [data.joint("shoulder").qfrc_bias] * 2, rtol=0, atol=1e-12)
  # An observation of several sensors, in the order asked for.
  obs = out["sensordata"][:, names.sensors("hand_pos", "elbow_angle")]
  np.testing.assert_allclose(obs[0], np.r_[data.sensor("hand_pos").data,
                                           data.sensor("elbow_angle").data], rtol=0, atol=1e-12)


def test_params_leaves_by_name_are_the_models(model, names, sim):
  params = sim.params(2, fields=("body_mass", "geom_friction", "dof_damping", "actuator_gear"))
  np.testing.assert_array_equal(params["body_mass"][:, names.body("forearm")],
                                [model.body("forearm").mass[0]] * 2)
  floor = names.geoms("floor", "ramp")
  np.testing.assert_array_equal(params["geom_friction"][:, floor, 0],
                                [model.geom_friction[floor, 0]] * 2)
  np.testing.assert_array_equal(params["dof_damping"][:, names.joint("shoulder").dof_index],
                                [model.dof_damping[names.joint("shoulder").dof_index]] * 2)
  np.testing.assert_array_equal(params["actuator_gear"][:, names.actuator("elbow_motor"), 0],
                                [2.0, 2.0])


def test_lookups_index_traced_arrays_under_jit(model, names, sim):
  params = sim.params(2, fields=("body_mass",))

  @jax.jit
  def observe(state, params):
    heavier = params.replace({
      "body_mass": params["body_mass"].at[:, names.body("slider")].mul(2.0)
    })
    out = mjbatch_jax.forward(state, heavier, ("sensordata", "site_xpos"))
    return jnp.concatenate([
      state[:, names.joint("shoulder").qpos],
      state[:, names.qvel_columns("elbow_hinge", "extend")],
      out["sensordata"][:, names.sensors("gyro", "elbow_angle")],
      out["site_xpos"][:, names.site("hand"), :],
      out["site_xpos"][:, names.sites("elbow", "fingertip"), 2],
    ], axis=-1)

  state = sim.init_state(2, keyframe="home")
  got = np.asarray(observe(state, params))
  data = home_data(model)
  want = np.r_[
    data.joint("shoulder").qpos, data.joint("elbow_hinge").qvel, data.joint("extend").qvel,
    data.sensor("gyro").data, data.sensor("elbow_angle").data, data.site("hand").xpos,
    data.site("elbow").xpos[2], data.site("fingertip").xpos[2],
  ]
  assert got.shape == (2, 4 + 2 + 3 + 1 + 3 + 2)
  np.testing.assert_allclose(got, [want] * 2, rtol=0, atol=1e-12)

  # Names as a static argument: hashable, and equal Names reuse the compiled function.
  traces = []

  def extension(state, names):
    traces.append(names)
    return state[:, names.joint("extend").qpos]

  f = jax.jit(extension, static_argnums=1)
  np.testing.assert_array_equal(f(state, names), [[-0.05]] * 2)
  np.testing.assert_array_equal(f(state, Names.of(copy.copy(model))), [[-0.05]] * 2)
  assert len(traces) == 1


def test_unknown_names_say_what_is_there(names):
  with pytest.raises(ValueError, match=r"no sensor named 'gyroo' \(did you mean 'gyro'\?\); "
                                       r"sensors: 'elbow_angle', 'hand_pos', 'gyro'"):
    names.sensor("gyroo")
  with pytest.raises(ValueError, match=r"no joint named 'elbow' \(did you mean 'elbow_hinge'"):
    names.joint("elbow")
  with pytest.raises(ValueError, match=r"no body named 'forarm' \(did you mean 'forearm'"):
    names.bodies("ball", "forarm")
  with pytest.raises(ValueError, match=r"no geom named 'flor' \(did you mean 'floor'"):
    names.geoms(["flor"])
  with pytest.raises(ValueError, match=r"no actuator named 'zzz'; actuators: 'elbow_motor'"):
    names.actuator_column("zzz")
  with pytest.raises(ValueError, match=r"no site named 'hnd' \(did you mean 'hand'"):
    names.sites("hnd")
  with pytest.raises(ValueError, match=r"no sensor named 'gyro ' \(did you mean 'gyro'"):
    names.sensors("elbow_angle", "gyro ")
  with pytest.raises(ValueError, match=r"no keyframe named 'hme' \(did you mean 'home'"):
    names.keyframe("hme")
  with pytest.raises(ValueError, match=r"no mesh named 'x': the model has no named meshes"):
    names.id("mesh", "x")
  with pytest.raises(ValueError, match=r"unnamed sensors cannot be looked up by name"):
    names.sensor("")
  with pytest.raises(ValueError, match=r"unnamed geoms cannot be looked up by name"):
    names.geoms("floor", "")
  with pytest.raises(ValueError, match=r"unknown kind 'bodie' \(did you mean 'body'"):
    names.id("bodie", "ball")
  with pytest.raises(ValueError, match=r"unknown kind 'sensors'.*; kinds: body, joint"):
    names.named("sensors")
  with pytest.raises(ValueError, match=r"body names are strings, got 3"):
    names.body(3)  # pyright: ignore[reportArgumentType]
  with pytest.raises(ValueError, match=r"must be a mujoco.MjModel, got str"):
    Names.of("scene.xml")  # pyright: ignore[reportArgumentType]


def test_long_kinds_list_a_few_names_and_a_count(names):
  go = load(GO1)
  with pytest.raises(ValueError, match=r"; bodies: 'world', 'trunk', .*, \.\.\. \(\d+ in all\)$"):
    Names.of(go).body("trunkk")


def test_names_are_hashable_values(model, names):
  same = Names.of(copy.copy(model))
  assert same == names and hash(same) == hash(names)
  assert pickle.loads(pickle.dumps(names)) == names
  other = Names.of(load(EVERY_KIND.replace('name="gyro"', 'name="gyro2"')))
  assert other != names and other.sensor("gyro2") == names.sensor("gyro")
  assert repr(names) == ("Names(body=5, joint=4, geom=5, site=4, camera=1, light=1, tendon=1, "
                         "actuator=2, sensor=6, keyframe=2)")
  joint = names.joint("shoulder")
  assert isinstance(joint, JointSlices)
  assert hash(joint) == hash(names.joint("shoulder")) and joint == names.joint("shoulder")
  with pytest.raises(AttributeError):
    names.row_qpos = 0  # pyright: ignore[reportAttributeAccessIssue]


def test_listing_names(names):
  assert "sensor" in names.kinds() and "keyframe" in names.kinds()
  assert names.named("sensor") == ("elbow_angle", "hand_pos", "gyro", "cable_length",
                                   "shoulder_quat", "fingertip_pos")
  assert names.named("actuator") == ("elbow_motor", "extend_servo")
  assert names.named("geom") == ("floor", "ramp", "ball_geom", "forearm_geom", "finger")
  assert names.named("mesh") == ()
  assert not names.has("sensor", "") and not names.has("sensor", "gyroo")
  assert not names.has("body", 0)  # pyright: ignore[reportArgumentType]


def test_every_go1_name_resolves():
  go = load(GO1)
  names = Names.of(go)
  layout = StateLayout.of(go)
  for kind in ("joint", "body", "site", "sensor", "actuator", "geom", "keyframe"):
    count = len(names.named(kind))
    for i in range(count):
      name = names.named(kind)[i]
      assert names.id(kind, name) == getattr(go, kind)(name).id, (kind, name)
  # Menagerie leaves the floating base's free joint unnamed; everything else has a name.
  unnamed = [i for i in range(go.njnt) if not mujoco.mj_id2name(go, mujoco.mjtObj.mjOBJ_JOINT, i)]
  assert unnamed == [0] and go.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE
  assert len(names.named("actuator")) == go.nu and len(names.named("body")) == go.nbody
  for name in names.named("joint"):
    joint = names.joint(name)
    j = go.joint(name)
    assert joint.qpos.start == layout.qpos.start + int(j.qposadr[0])
    assert joint.qvel.start == layout.qvel.start + int(j.dofadr[0])
  for name in names.named("sensor"):
    s = go.sensor(name)
    assert names.sensor(name) == slice(int(s.adr[0]), int(s.adr[0] + s.dim[0]))
  # The named joints' columns together are all of qpos and qvel after the free joint's.
  np.testing.assert_array_equal(names.qpos_columns(names.named("joint")),
                                np.arange(layout.qpos.start + 7, layout.qpos.stop))
  np.testing.assert_array_equal(names.qvel_columns(names.named("joint")),
                                np.arange(layout.qvel.start + 6, layout.qvel.stop))
  np.testing.assert_array_equal(names.actuator_columns(names.named("actuator")),
                                np.arange(layout.ctrl.start, layout.ctrl.stop))
