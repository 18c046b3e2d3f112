"""mjbatch_jax.motion: inverse kinematics, feasibility, clips and floor-contact sensors."""

import json
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from mjbatch_jax import archive, motion
from mjbatch_jax.motion.ik import MODES
from tests.models import ARM_XML, BIPED_XML, G1, robot


@pytest.fixture(scope="module")
def arm():
  return mujoco.MjModel.from_xml_string(ARM_XML)


@pytest.fixture(scope="module")
def g1():
  return mujoco.MjModel.from_xml_path(str(robot(G1)))


def hand_at(model, qpos, body="hand"):
  data = mujoco.MjData(model)
  data.qpos[:] = qpos
  mujoco.mj_kinematics(model, data)
  return data.xpos[model.body(body).id].copy()


# ---------------------------------------------------------------------------------------- IK


@pytest.mark.parametrize("mode", MODES)
def test_ik_reaches_an_arm_target(arm, mode):
  target = hand_at(arm, [0.4, -0.5, -1.0, 0.3])  # reachable: a pose within the limits made it
  ik = motion.IK(arm, mode=mode, posture_weight=0.0)
  solution = ik.solve(arm.qpos0, [motion.BodyPosition("hand", target)], iterations=200)
  assert np.linalg.norm(hand_at(arm, solution.qpos) - target) < 1e-6
  assert solution.error < 1e-5 and 0 < solution.iterations <= 200


def test_null_space_posture_leaves_the_task_alone(arm):
  target = hand_at(arm, [0.4, -0.5, -1.0, 0.3])
  task = [motion.BodyPosition("hand", target)]
  poses = []
  for wrist in (-0.6, 0.6):  # two postures, two of the many poses that reach the target
    ik = motion.IK(arm, [0.0, 0.0, -1.0, wrist], mode="null_space")
    qpos = ik.solve(arm.qpos0, task, iterations=300).qpos
    assert np.linalg.norm(hand_at(arm, qpos) - target) < 1e-9
    poses.append(qpos)
  assert abs(poses[0][3] - poses[1][3]) > 0.3  # the posture chose the wrist
  # A weighted posture, by contrast, pulls the task off its target.
  ik = motion.IK(arm, [0.0, 0.0, -1.0, 0.6], posture_weight=0.5)
  qpos = ik.solve(arm.qpos0, task, iterations=300).qpos
  assert np.linalg.norm(hand_at(arm, qpos) - target) > 1e-4


def test_no_task_rows_leaves_the_posture_in_either_mode(arm):
  """JointAngles({}) asks for nothing: both modes move to the posture alone (null_space raised
  "need at least one array to concatenate" before)."""
  posture = np.array([0.2, -0.3, -0.8, 0.4])
  for mode in ("weighted", "null_space"):
    ik = motion.IK(arm, posture, mode=mode, posture_weight=1.0)
    qpos = ik.solve(arm.qpos0, [motion.JointAngles({})], iterations=300).qpos
    np.testing.assert_allclose(qpos, posture, atol=1e-6)


def test_solve_frames_solves_each_frame_from_the_last(arm):
  """A hand path solved as a clip: each frame is solve's answer from the previous frame's pose
  (frame 0's from the start), from a generator as from a list; each frame reaches its target."""
  path = [hand_at(arm, [0.4 + 0.05 * k, -0.5, -1.0 + 0.1 * k, 0.3]) for k in range(5)]
  ik = motion.IK(arm, mode="null_space")
  frames = ik.solve_frames(arm.qpos0, ([motion.BodyPosition("hand", p)] for p in path), 40)
  assert frames.qpos.shape == (5, arm.nq) and frames.error.shape == frames.iterations.shape == (5,)
  qpos = arm.qpos0
  for k, target in enumerate(path):
    alone = ik.solve(qpos, [motion.BodyPosition("hand", target)], 40)
    np.testing.assert_array_equal(frames.qpos[k], alone.qpos)
    assert frames.error[k] == alone.error and frames.iterations[k] == alone.iterations
    assert np.linalg.norm(hand_at(arm, frames.qpos[k]) - target) < 1e-6
    qpos = alone.qpos
  again = ik.solve_frames(arm.qpos0, [[motion.BodyPosition("hand", p)] for p in path], 40)
  np.testing.assert_array_equal(again.qpos, frames.qpos)
  assert ik.solve_frames(arm.qpos0, []).qpos.shape == (0, arm.nq)


@pytest.mark.parametrize("mode", MODES)
def test_ik_keeps_joints_within_their_limits(arm, mode):
  lo, hi = arm.jnt_range.T
  ik = motion.IK(arm, mode=mode)
  # Out of reach, behind and below the shoulder: the elbow ends at a limit, others short of it.
  reach = ik.solve(arm.qpos0, [motion.BodyPosition("hand", [-0.4, 0.0, 0.1])], 100).qpos
  assert np.all(reach >= lo) and np.all(reach <= hi)
  assert np.any((reach == lo) | (reach == hi))
  wrist = ik.solve(arm.qpos0, [motion.JointAngles({"wrist": 3.0})], 100).qpos
  assert wrist[3] == hi[3]  # asked past its limit, it stops at it


def test_joint_angles_and_orientation_tasks(arm):
  # A yaw then a pitch: an orientation the arm's joints can give.
  yaw, pitch, quat = np.zeros(4), np.zeros(4), np.zeros(4)
  mujoco.mju_axisAngle2Quat(yaw, np.array([0.0, 0.0, 1.0]), 0.2)
  mujoco.mju_axisAngle2Quat(pitch, np.array([0.0, 1.0, 0.0]), -0.7)
  mujoco.mju_mulQuat(quat, yaw, pitch)
  tasks = [motion.BodyOrientation("hand", quat), motion.JointAngles({"pitch": -0.3})]
  solution = motion.IK(arm, mode="null_space").solve(arm.qpos0, tasks, iterations=100)
  data = mujoco.MjData(arm)
  data.qpos[:] = solution.qpos
  mujoco.mj_kinematics(arm, data)
  error = np.zeros(3)
  mujoco.mju_subQuat(error, quat, data.xquat[arm.body("hand").id])
  assert np.linalg.norm(error) < 1e-8 and abs(solution.qpos[1] + 0.3) < 1e-9
  assert solution.error == 0.0  # no position task


def test_ik_holds_the_root_when_asked():
  model = mujoco.MjModel.from_xml_string(BIPED_XML)
  qpos = model.qpos0.copy()
  qpos[:7] = (0.1, 0.2, 0.4, np.cos(0.2), 0.0, np.sin(0.2), 0.0)
  target = hand_at(model, np.r_[qpos[:7], 0.5, 0.0], "left_foot")
  ik = motion.IK(model, mode="null_space")
  held = ik.solve(qpos, [motion.BodyPosition("left_foot", target, axes=(0, 2))], 50,
                  free_root=False).qpos
  assert np.array_equal(held[:7], qpos[:7]) and abs(held[7] - 0.5) < 1e-8
  moved = ik.solve(qpos, [motion.BodyPosition("left_foot", target + 0.05)], 50).qpos
  assert not np.array_equal(moved[:7], qpos[:7])


def test_ik_on_the_g1_places_a_foot_and_the_centre_of_mass(g1):
  data = mujoco.MjData(g1)
  data.qpos[:] = g1.key_qpos[0]
  mujoco.mj_kinematics(g1, data)
  mujoco.mj_comPos(g1, data)
  left, right = g1.body("left_ankle_roll_link").id, g1.body("right_ankle_roll_link").id
  foot = data.xpos[left] + [0.05, 0.0, 0.04]  # the left foot forward and up
  com = data.subtree_com[0] + [0.0, -0.03, -0.05]  # over the right foot, lower
  posture = g1.key_qpos[0].copy()
  for side in ("left", "right"):  # knees bent: the straight keyframe is singular
    posture[g1.joint(f"{side}_knee_joint").qposadr[0]] = 0.6
  tasks = [motion.BodyPosition("left_ankle_roll_link", foot),
           motion.BodyOrientation("left_ankle_roll_link", data.xquat[left].copy()),
           motion.BodyPosition("right_ankle_roll_link", data.xpos[right].copy()),
           motion.BodyOrientation("right_ankle_roll_link", data.xquat[right].copy()),
           motion.CentreOfMass(com)]
  solution = motion.IK(g1, posture, mode="null_space").solve(g1.key_qpos[0], tasks, 100)
  data.qpos[:] = solution.qpos
  mujoco.mj_kinematics(g1, data)
  mujoco.mj_comPos(g1, data)
  assert np.linalg.norm(data.xpos[left] - foot) < 1e-6
  assert np.linalg.norm(data.subtree_com[0] - com) < 1e-6
  lo, hi = g1.jnt_range[1:].T
  assert np.all(solution.qpos[7:] >= lo) and np.all(solution.qpos[7:] <= hi)


def test_ik_refuses_bad_tasks(arm):
  ik = motion.IK(arm)
  with pytest.raises(ValueError, match=r"no body named 'hnd' \(did you mean 'hand'"):
    ik.solve(arm.qpos0, [motion.BodyPosition("hnd", [0, 0, 0])])
  with pytest.raises(ValueError, match=r"no joint named 'elbo' \(did you mean 'elbow'"):
    ik.solve(arm.qpos0, [motion.JointAngles({"elbo": 0.0})])
  with pytest.raises(ValueError, match="tasks must hold at least one task"):
    ik.solve(arm.qpos0, [])
  with pytest.raises(ValueError, match="tasks must be BodyPosition"):
    ik.solve(arm.qpos0, [("hand", [0, 0, 0])])  # pyright: ignore[reportArgumentType]
  with pytest.raises(ValueError, match=r"qpos must have shape \(4,\)"):
    ik.solve(np.zeros(5), [motion.BodyPosition("hand", [0, 0, 0])])
  with pytest.raises(ValueError, match="qpos must be finite"):
    ik.solve([0, np.nan, 0, 0], [motion.BodyPosition("hand", [0, 0, 0])])
  with pytest.raises(ValueError, match="iterations must be an int >= 0"):
    ik.solve(arm.qpos0, [motion.BodyPosition("hand", [0, 0, 0])], iterations=-1)
  with pytest.raises(ValueError, match="BodyPosition target must be finite"):
    motion.BodyPosition("hand", [0, np.inf, 0])
  with pytest.raises(ValueError, match=r"shape \(3,\) or \(1,\)"):
    motion.BodyPosition("hand", [0, 0], axes=(2,))
  with pytest.raises(ValueError, match="each of its axes in 0..2 once"):
    motion.CentreOfMass([0, 0, 0], axes=(0, 0))
  with pytest.raises(ValueError, match="BodyPosition axis must be an int in"):
    motion.BodyPosition("hand", [0, 0, 0], axes=(3,))
  with pytest.raises(ValueError, match="BodyPosition weight must be a finite number >= 0"):
    motion.BodyPosition("hand", [0, 0, 0], weight=-1.0)
  with pytest.raises(ValueError, match="unit quaternion"):
    motion.BodyOrientation("hand", [2.0, 0, 0, 0])
  with pytest.raises(ValueError, match="mode must be one of"):
    motion.IK(arm, mode="priority")
  with pytest.raises(ValueError, match="trust_region must be"):
    motion.IK(arm, trust_region=0.0)
  with pytest.raises(ValueError, match="not a hinge or a slide"):
    motion.IK(mujoco.MjModel.from_xml_string(BIPED_XML)).solve(
      np.r_[0, 0, 0.3, 1, 0, 0, 0, 0, 0], [motion.JointAngles({"root": 0.0})])


# ------------------------------------------------------------------------------ feasibility


G1_SOLE = motion.Sole(x=(-0.05, 0.12), half_width=0.025, z=-0.035)
G1_FEET = ["left_ankle_roll_link", "right_ankle_roll_link"]


def test_feasibility_of_the_g1_standing_at_rest(g1):
  qpos = np.tile(g1.key_qpos[0], (2, 1))
  zeros = np.zeros((2, g1.nv))
  result = motion.feasibility(g1, qpos, zeros, zeros, np.ones(2, bool), G1_FEET, G1_SOLE)
  weight = float(np.sum(g1.body_mass)) * -g1.opt.gravity[2]
  total = result.force.sum(axis=1)
  assert np.all(np.abs(total[:, 2] - weight) <= 1e-6 * weight)
  assert np.all(np.abs(total[:, :2]) <= 1e-6 * weight)
  assert np.all(result.force[..., 2] > 0.3 * weight)  # both feet carry it
  assert np.all(result.torque_ratio < 1.0) and result.worst["torque"][0] < 1.0
  heel, toe = G1_SOLE.x
  assert np.all((result.cop[..., 0] > heel) & (result.cop[..., 0] < toe))
  assert np.all(np.abs(result.cop[..., 1]) < G1_SOLE.half_width)
  assert result.ok and result.flight_wrench == 0.0
  # The servo targets that hold the pose are the pose plus the sag that gravity asks.
  kp = g1.actuator_gainprm[:, 0]
  assert np.allclose(result.servo, qpos[:, 7:] + result.torque / kp)
  assert np.array_equal(result.peak_ratio(np.array([True, False])), result.torque_ratio)



def test_feasibility_summary_and_record_name_the_actuators(g1):
  """summary ranks the actuators by peak torque / limit (ties in model order) and says whether
  every margin is met; record is the same as plain JSON values, floor margins without torque."""
  import json

  qpos = np.tile(g1.key_qpos[0], (2, 1))
  zeros = np.zeros((2, g1.nv))
  result = motion.feasibility(g1, qpos, zeros, zeros, np.ones(2, bool), G1_FEET, G1_SOLE)
  names = [g1.actuator(i).name for i in range(g1.nu)]
  assert list(result.actuators) == names
  order = sorted(range(g1.nu), key=lambda i: (-result.torque_ratio[i], i))[:3]
  assert result.summary(3) == ("peak torque / limit " + ", ".join(
    f"{names[i]} {result.torque_ratio[i]:.2f}" for i in order) + "; within the robot's limits")
  assert result.summary().count(",") == 5  # six actuators by default
  record = json.loads(json.dumps(result.record()))
  assert record["feasible"] is True and list(record["torque_ratio"]) == names
  assert record["torque_ratio"][names[order[0]]] == float(result.torque_ratio[order[0]])
  assert "torque" not in record["floor"] and set(record["floor"]) == set(result.worst) - {"torque"}
  lifted = motion.feasibility(g1, qpos, zeros, zeros + 50.0, np.ones(2, bool), G1_FEET, G1_SOLE)
  assert not lifted.ok and lifted.summary().endswith("; NOT within the robot's limits")
  assert lifted.record()["feasible"] is False
  for top in (0, -1, 1.5, "6", True):
    with pytest.raises(ValueError, match="top"):
      result.summary(top)  # pyright: ignore[reportArgumentType]


def test_feasibility_in_flight_and_per_body_contact():
  model = mujoco.MjModel.from_xml_string(BIPED_XML)
  sole = motion.Sole((-0.06, 0.06), 0.03, z=-0.01)
  qpos = np.tile(model.qpos0, (3, 1))
  qacc = np.zeros((3, model.nv))
  qacc[0, 2] = model.opt.gravity[2]  # frame 0 falls freely: nothing is left unexplained
  contact = np.array([[False, False], [True, False], [True, True]])
  result = motion.feasibility(model, qpos, np.zeros_like(qacc), qacc, contact,
                              ["left_foot", "right_foot"], sole)
  assert result.flight_wrench < 1e-9
  weight = float(np.sum(model.body_mass)) * -model.opt.gravity[2]
  assert np.allclose(result.force[1, 0, 2], weight) and np.all(result.force[1, 1] == 0)
  assert np.allclose(result.force[2, :, 2].sum(), weight)
  # Standing on the left foot alone puts the centre of pressure off its sole's side.
  assert result.worst["cop side m"][0] > sole.half_width and not result.ok


def test_feasibility_refusals(arm):
  model = mujoco.MjModel.from_xml_string(BIPED_XML)
  sole = motion.Sole((-0.06, 0.06), 0.03)
  q, z, c = np.tile(model.qpos0, (2, 1)), np.zeros((2, model.nv)), np.ones(2, bool)
  with pytest.raises(ValueError, match="contact_bodies must name at least one body"):
    motion.feasibility(model, q, z, z, c, [], sole)
  with pytest.raises(ValueError, match=r"qvel must have shape \(2, 8\)"):
    motion.feasibility(model, q, z[:1], z, c, ["left_foot"], sole)
  with pytest.raises(ValueError, match="qacc must be finite"):
    motion.feasibility(model, q, z, z + np.nan, c, ["left_foot"], sole)
  with pytest.raises(ValueError, match=r"contact must be booleans of shape \(2,\) or \(2, 1\)"):
    motion.feasibility(model, q, z, z, np.ones(3, bool), ["left_foot"], sole)
  with pytest.raises(ValueError, match=r"no body named 'left_fot' \(did you mean 'left_foot'"):
    motion.feasibility(model, q, z, z, c, ["left_fot"], sole)
  with pytest.raises(ValueError, match="sole must be a Sole or 2 of them"):
    motion.feasibility(model, q, z, z, c, ["left_foot", "right_foot"], [sole])
  with pytest.raises(ValueError, match="one free root joint"):
    motion.feasibility(arm, np.zeros((2, 4)), np.zeros((2, 4)), np.zeros((2, 4)), c, ["hand"],
                       sole)
  with pytest.raises(ValueError, match="heel < toe"):
    motion.Sole((0.1, -0.1), 0.03)
  with pytest.raises(ValueError, match="friction must be"):
    motion.feasibility(model, q, z, z, c, ["left_foot"], sole, friction=0.0)


# -------------------------------------------------------------------------------------- clip


def test_clip_round_trip(arm, tmp_path):
  qpos = np.linspace([0.0, 0.0, -1.0, 0.0], [0.5, -0.4, -0.5, 0.2], 6)
  qvel = np.gradient(qpos, 0.02, axis=0)
  contact = np.zeros((6, 2), bool)
  contact[2:, 1] = True
  clip = motion.make(arm, qpos, 0.02, ["hand", "fore"], qvel=qvel, contact=contact,
                     metadata={"name": "wave", "keyframes": [0.0, 0.1]})
  xpos, xquat = motion.body_poses(arm, qpos, ["hand", "fore"])
  assert np.array_equal(clip.xpos, xpos) and np.array_equal(clip.xquat, xquat)
  assert np.array_equal(clip.xpos[3, 0], hand_at(arm, qpos[3]))
  path = motion.save(tmp_path / "wave.npz", clip, arm)
  loaded = motion.load(path, arm)
  assert loaded.dt == 0.02 and loaded.bodies == ("hand", "fore") and loaded.frames == 6
  for name in ("qpos", "xpos", "xquat", "qvel", "contact"):
    assert np.array_equal(getattr(loaded, name), getattr(clip, name)), name
  assert loaded.metadata == {"name": "wave", "keyframes": [0.0, 0.1]}
  bare = motion.load(motion.save(tmp_path / "bare.npz", motion.make(arm, qpos, 0.1), arm), arm)
  assert bare.qvel is None and bare.contact is None and bare.xpos.shape == (6, 0, 3)
  # Sensors and masses are not the clip's business: the fingerprint is the kinematic tree's.
  heavier = mujoco.MjModel.from_xml_string(ARM_XML.replace('size="0.03"', 'size="0.05"'))
  assert motion.fingerprint(heavier) == motion.fingerprint(arm)


def test_clip_refusals(arm, tmp_path):
  clip = motion.make(arm, np.zeros((3, 4)), 0.02, ["hand"])
  path = motion.save(tmp_path / "clip.npz", clip, arm)
  longer = mujoco.MjModel.from_xml_string(ARM_XML.replace('pos="0.25 0 0"', 'pos="0.3 0 0"'))
  with pytest.raises(ValueError, match="a clip of another model"):
    motion.load(path, longer)
  arrays, header = archive.read(path)
  archive.write(tmp_path / "v2.npz", arrays, {**header, "version": 2})
  with pytest.raises(ValueError, match="format version 2; this version reads version 1"):
    motion.load(tmp_path / "v2.npz", arm)
  archive.write(tmp_path / "partial.npz", {"qpos": arrays["qpos"]}, header)
  with pytest.raises(ValueError, match="missing xpos, xquat"):
    motion.load(tmp_path / "partial.npz", arm)
  archive.write(tmp_path / "other.npz", arrays, {"kind": "plan"})
  with pytest.raises(ValueError, match="is not a motion clip"):
    motion.load(tmp_path / "other.npz", arm)
  arrays["xpos"] = arrays["xpos"][:2]
  archive.write(tmp_path / "short.npz", arrays, header)
  with pytest.raises(ValueError, match=r"short.npz: xpos must have shape \(3, 1, 3\)"):
    motion.load(tmp_path / "short.npz", arm)
  with pytest.raises(ValueError, match="no file"):
    motion.load(tmp_path / "none.npz", arm)
  with pytest.raises(ValueError, match=r"qpos must have shape \(any, 4\)"):
    motion.make(arm, np.zeros((3, 5)), 0.02)
  with pytest.raises(ValueError, match="dt must be a finite number > 0"):
    motion.make(arm, np.zeros((3, 4)), 0.0)
  with pytest.raises(ValueError, match="contact must be booleans with 3 rows"):
    motion.make(arm, np.zeros((3, 4)), 0.02, contact=np.ones(2, bool))
  with pytest.raises(ValueError, match=r"no body named 'hands' \(did you mean 'hand'"):
    motion.make(arm, np.zeros((3, 4)), 0.02, ["hands"])
  with pytest.raises(ValueError, match="metadata must be a mapping"):
    motion.make(arm, np.zeros((3, 4)), 0.02, metadata=[1])  # pyright: ignore[reportArgumentType]
  assert json.loads(json.dumps(header))["model"] == motion.fingerprint(arm)


# ----------------------------------------------------------------------------------- sensors


def test_floor_contact_sensors_count_contacts_and_leave_the_physics_alone():
  spec = mujoco.MjSpec.from_string(BIPED_XML)
  names = motion.floor_contact_sensors(spec, {"left": "left_foot", "right": "right_foot"},
                                       robot="torso")
  assert names == ("floor contact left", "floor contact right", "floor contact robot")
  sensed, plain = spec.compile(), mujoco.MjModel.from_xml_string(BIPED_XML)
  assert sensed.nsensor == 3 and plain.nsensor == 0
  runs = []
  for model in (sensed, plain):
    data = mujoco.MjData(model)
    data.qpos[2] = 0.35  # dropped onto its feet
    data.qvel[4] = 0.5  # pitching: the feet land one after the other
    trace = []
    for _ in range(300):
      mujoco.mj_step(model, data)
      trace.append(np.r_[data.qpos, data.qvel])
    runs.append((np.array(trace), data))
  assert np.array_equal(runs[0][0], runs[1][0])  # bit for bit
  data = runs[0][1]
  counts = [data.sensordata[sensed.sensor(n).adr[0]] for n in names]
  found = [sum(1 for c in data.contact[:data.ncon] if sensed.geom_bodyid[c.geom[1]] == b
               or sensed.geom_bodyid[c.geom[0]] == b) for b in (2, 3)]
  assert counts[0] == found[0] > 0 and counts[1] == found[1] > 0
  assert counts[2] == data.ncon == counts[0] + counts[1]


def test_floor_contact_sensors_refusals():
  spec = mujoco.MjSpec.from_string(BIPED_XML)
  with pytest.raises(ValueError, match=r"no body named 'left_fot' \(did you mean 'left_foot'"):
    motion.floor_contact_sensors(spec, ["left_fot"])
  with pytest.raises(ValueError, match=r"no geom named 'ground'"):
    motion.floor_contact_sensors(spec, ["left_foot"], floor="ground")
  with pytest.raises(ValueError, match="must name at least one body"):
    motion.floor_contact_sensors(spec, [])
  motion.floor_contact_sensors(spec, ["left_foot"])
  with pytest.raises(ValueError, match="already in the spec"):
    motion.floor_contact_sensors(spec, ["left_foot"])
  with pytest.raises(ValueError, match="spec must be a mujoco.MjSpec"):
    motion.floor_contact_sensors(BIPED_XML, ["left_foot"])  # pyright: ignore[reportArgumentType]


def test_g1_floor_contact_sensors_see_the_feet(g1):
  spec = mujoco.MjSpec.from_file(str(G1))
  feet = {"left foot": G1_FEET[0], "right foot": G1_FEET[1]}
  names = motion.floor_contact_sensors(spec, feet, robot="pelvis")
  model = spec.compile()
  data = mujoco.MjData(model)
  mujoco.mj_resetDataKeyframe(model, data, 0)
  mujoco.mj_forward(model, data)
  left, right, whole = (data.sensordata[model.sensor(n).adr[0]] for n in names)
  assert left > 0 and right > 0 and whole == left + right == data.ncon


def test_tracking_cost_is_zero_on_the_clip_and_counts_each_body(g1):
  """At the clip's own poses and controls only the last knot's missing control term is left:
  zero; a body moved by d (below its threshold) costs its weight times d^2 (x2 for Huber's
  half), the others nothing."""
  import jax.numpy as jnp

  import mjbatch_jax
  from mjbatch_jax.control import cost as cost_terms

  bodies = ("pelvis", "left_ankle_roll_link", "right_wrist_yaw_link")
  qpos = np.stack([g1.key_qpos[0]] * 3)
  qpos[1, 2] += 0.01
  xpos, xquat = motion.body_poses(g1, qpos, bodies)
  with mjbatch_jax.Simulator(g1, num_threads=1) as sim:
    cost = motion.tracking_cost(sim, xpos, xquat, qpos, bodies, pos_weight=np.array(
      [[1.0, 1.0, 1000.0], [100.0] * 3, [100.0] * 3]), ctrl_weight=0.0)
    obs = {"xpos": jnp.zeros((g1.nbody, 3)), "xquat": jnp.zeros((g1.nbody, 4))}
    ids = np.asarray(sim.names.bodies(list(bodies)))
    weights = cost_terms.weights(cost.terms, 3)

    def value(t, moved):
      pos = obs["xpos"].at[ids].set(jnp.asarray(xpos[t] + moved))
      r = cost.residual(jnp.zeros(sim.nstate), jnp.asarray(qpos[min(t + 1, 2), 7:]),
                        {"xpos": pos, "xquat": obs["xquat"].at[ids].set(jnp.asarray(xquat[t]))},
                        jnp.asarray(t))
      return float(cost_terms.knot_cost(cost.terms, r[None], weights[t][None])[0])

    assert value(1, 0.0) == pytest.approx(0.0, abs=1e-9)  # rotations.difference rounds
    d = 0.02  # a hand 2 cm off in x, the root where it should be
    moved = np.zeros((3, 3))
    moved[2, 0] = d
    assert value(1, moved) == pytest.approx(100.0 * d * d, rel=1e-6)  # float32 without x64
    moved = np.zeros((3, 3))
    moved[:, 0] = d  # the whole robot drifts: the root's loose x weight alone
    assert value(1, moved) == pytest.approx(1.0 * d * d, rel=1e-5)
    with pytest.raises(ValueError, match="xquat must have shape"):
      motion.tracking_cost(sim, xpos, xquat[:, :2], qpos, bodies)
    with pytest.raises(ValueError, match="no_such_body"):
      motion.tracking_cost(sim, xpos, xquat, qpos, ("pelvis", "no_such_body", "torso_link"))


# ------------------------------------------------------------------ flight, landing, trajectory


def _floor(*runs: tuple[int, int, int, int]) -> np.ndarray:
  """Floor counts (S, 3) from runs of (steps, left, right, robot)."""
  return np.concatenate([np.tile([left, right, robot], (steps, 1))
                         for steps, left, right, robot in runs]).astype(float)


def test_landing_reads_the_longest_flight_and_how_it_ended():
  dt = 0.01
  floor = _floor((5, 1, 1, 2), (3, 0, 0, 0), (4, 1, 1, 2), (20, 0, 0, 0), (2, 1, 0, 1),
                 (16, 1, 1, 2))
  height = np.r_[np.full(34, 0.8), 0.5, 0.5, np.full(14, 0.8)]
  done = motion.landing(floor, height, dt, min_flight=0.1, upright_height=0.6)
  assert (done.takeoff, done.touchdown) == (12, 32)  # the 20 steps, not the first 3
  assert done.flight_s == pytest.approx(0.2) and done.takeoff_s == pytest.approx(0.12)
  assert done.landed and done.upright_s == pytest.approx(0.14)  # from step 36 on
  # Another body down after touchdown, or never both feet: not landed.
  fallen = floor.copy()
  fallen[40, 2] += 1
  assert not motion.landing(fallen, height, dt, min_flight=0.1, upright_height=0.6).landed
  one_foot = _floor((5, 1, 1, 2), (20, 0, 0, 0), (25, 1, 0, 1))
  result = motion.landing(one_foot, np.ones(50), dt, min_flight=0.1, upright_height=0.6)
  assert not result.landed and result.upright_s == 0.0
  # Too short a flight, no flight, a flight that never ends; equal flights: the first.
  assert not motion.landing(floor, height, dt, min_flight=0.25, upright_height=0.6).landed
  stays = motion.landing(_floor((10, 1, 1, 2)), np.ones(10), dt, min_flight=0, upright_height=0)
  assert (stays.takeoff, stays.touchdown, stays.flight_s, stays.landed) == (0, 0, 0.0, False)
  away = motion.landing(_floor((3, 1, 1, 2), (7, 0, 0, 0)), np.ones(10), dt, min_flight=0.01,
                        upright_height=0)
  assert (away.takeoff, away.touchdown, away.landed) == (3, 10, False)
  twice = _floor((2, 1, 1, 2), (4, 0, 0, 0), (2, 1, 1, 2), (4, 0, 0, 0), (2, 1, 1, 2))
  assert motion.landing(twice, np.ones(14), dt, min_flight=0, upright_height=0).takeoff == 2


def test_landing_of_a_dropped_biped_matches_the_fall():
  spec = mujoco.MjSpec.from_string(BIPED_XML)
  names = motion.floor_contact_sensors(spec, ["left_foot", "right_foot"], robot="torso")
  model = spec.compile()
  data = mujoco.MjData(model)
  data.qpos[2] = 0.6  # the feet about 0.39 m above the floor
  columns = [model.sensor(n).adr[0] for n in names]
  floor, height = [], []
  for _ in range(1500):
    mujoco.mj_step(model, data)
    floor.append(data.sensordata[columns].copy())
    height.append(data.qpos[2])
  done = motion.landing(floor, height, model.opt.timestep, min_flight=0.1, upright_height=0.05)
  fall = np.sqrt(2 * (0.6 - 0.2 - 0.01) / 9.81)  # the soles, 0.21 m below the torso, drop
  assert done.takeoff == 0 and done.landed
  assert done.flight_s == pytest.approx(fall, abs=0.02)


def test_landing_refusals():
  good = _floor((5, 1, 1, 2))
  for kwargs, message in (
      ({"floor": good[:, :1]}, "a column per foot and one for the robot"),
      ({"floor": np.full((5, 3), np.nan)}, "floor must be finite"),
      ({"height": np.ones(4)}, "height must have shape (5,)"),
      ({"dt": 0.0}, "dt must be"), ({"min_flight": -1.0}, "min_flight must be"),
      ({"upright_height": np.nan}, "upright_height must be")):
    args: dict = {"floor": good, "height": np.ones(5), "dt": 0.01, "min_flight": 0.1,
                  "upright_height": 0.5} | kwargs
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
      motion.landing(**args)


def test_first_touchdown_finds_each_runs_touchdown_and_its_falls():
  """Traced over a batch of runs that start in the air, as a search's objective calls it."""
  lands = _floor((4, 0, 0, 0), (6, 1, 1, 2))
  knee_soon = _floor((4, 0, 0, 0), (2, 1, 1, 2), (1, 1, 1, 3), (3, 1, 1, 2))  # knee at step 6
  knee_late = _floor((4, 0, 0, 0), (5, 1, 1, 2), (1, 1, 1, 3))  # at step 9: after 5 steps
  never = _floor((10, 0, 0, 0))
  hands_first = _floor((2, 0, 0, 0), (8, 0, 0, 1))  # down on something else than the feet
  floor = np.stack([lands, knee_soon, knee_late, never, hands_first])
  first, bad = jax.jit(motion.first_touchdown, static_argnums=1)(floor[None], 5)
  assert first.shape == bad.shape == (1, 5)
  assert first[0].tolist() == [4, 4, 4, 0, 2]
  assert bad[0].tolist() == [False, True, False, True, True]
  # Each row as landing reads it: the touchdown is its, once the run started in the air.
  for row, step in zip(floor[[0, 1, 2]], first[0][:3], strict=True):
    assert motion.landing(row, np.ones(10), 0.01, min_flight=0.0,
                          upright_height=0.0).touchdown == step
  assert motion.first_touchdown(knee_late, 6)[1]  # within 6 steps it is a fall
  bad_args: Any = ((lands[:, :1], 1, "a column per foot and one for the robot"),
                   (lands[:0], 1, r"at least one step \(S >= 1\)"), (lands, -1, "early must be"),
                   (lands, 1.5, "early must be"))
  for floor_, early, message in bad_args:
    with pytest.raises(ValueError, match=message):
      motion.first_touchdown(floor_, early)


def test_quintic_meets_its_ends():
  p0, v0, a0, p1, v1, a1, duration = 0.2, -1.0, 3.0, 1.5, 0.5, -2.0, 0.8
  h = 1e-5

  def at(t):
    return float(motion.quintic(p0, v0, a0, p1, v1, a1, duration, t))

  for t, p, vel, acc in ((0.0, p0, v0, a0), (duration, p1, v1, a1)):
    inside = min(max(t, 2 * h), duration - 2 * h)  # differences inside [0, duration]
    assert at(t) == pytest.approx(p, abs=1e-12)
    assert (at(inside + h) - at(inside - h)) / (2 * h) == pytest.approx(vel, abs=1e-3)
    assert (at(inside + h) - 2 * at(inside) + at(inside - h)) / h**2 == pytest.approx(acc, abs=0.1)
  assert at(-1.0) == at(0.0) and at(duration + 1) == at(duration)  # held at the ends
  arrays = motion.quintic([0, 1], 0, 0, [1, 3], 0, 0, 1.0, np.array([0.0, 0.5, 1.0]))
  assert arrays.shape == (3, 2) and np.allclose(arrays[1], [0.5, 2.0])
  with pytest.raises(ValueError, match="duration must be"):
    motion.quintic(0, 0, 0, 1, 0, 0, 0.0, 0.5)


def test_velocities_recover_a_free_bodys_constant_velocity():
  model = mujoco.MjModel.from_xml_string(BIPED_XML)
  qvel = np.r_[0.3, -0.2, 0.1, 1.0, -2.0, 0.5, 0.4, -0.4]
  qpos = [model.qpos0.copy()]
  for _ in range(9):
    q = qpos[-1].copy()
    mujoco.mj_integratePos(model, q, qvel, 0.01)
    qpos.append(q)
  out = motion.velocities(model, np.array(qpos), 0.01)
  assert out.shape == (10, model.nv) and np.allclose(out, qvel, atol=1e-9)
  with pytest.raises(ValueError, match="at least 2 poses"):
    motion.velocities(model, np.array(qpos[:1]), 0.01)
  with pytest.raises(ValueError, match=r"qpos must have shape \(\*, 9\)|qpos must have shape"):
    motion.velocities(model, np.zeros((3, 4)), 0.01)


def test_angular_momentum_is_mujocos_subtree_momentum_sensor():
  spec = mujoco.MjSpec.from_string(BIPED_XML)
  sensor = spec.add_sensor(type=mujoco.mjtSensor.mjSENS_SUBTREEANGMOM,
                           objtype=mujoco.mjtObj.mjOBJ_BODY, objname="torso")
  del sensor
  model = spec.compile()
  data, scratch = mujoco.MjData(model), mujoco.MjData(model)
  rng = np.random.default_rng(0)
  data.qpos[:] = model.qpos0
  quat = np.array([0.9, 0.1, -0.3, 0.2])
  data.qpos[3:7] = quat / np.linalg.norm(quat)
  data.qpos[7:] = [0.3, -0.5]
  data.qvel[:] = rng.normal(size=model.nv)
  mujoco.mj_forward(model, data)
  out = motion.angular_momentum(model, scratch, data.qpos, data.qvel)
  assert np.allclose(out, data.sensordata[:3], rtol=1e-12, atol=1e-12)
  with pytest.raises(ValueError, match="body must be"):
    motion.angular_momentum(model, scratch, data.qpos, data.qvel, body=model.nbody)


# ------------------------------------------------------------------------ a flip's flight


def _biped_in_the_air(seconds: float):
  """The biped thrown up and turning, its legs swung by their servos: every step's qpos, the
  centre of mass and its velocity at the start, the y momentum at the start and the end."""
  model = mujoco.MjModel.from_xml_string(BIPED_XML)
  model.opt.timestep = 0.001
  data = mujoco.MjData(model)
  data.qpos[2] = 5.0  # far above the floor: no contact
  data.qvel[:3], data.qvel[4] = (0.3, 0.0, 2.0), -3.0
  mujoco.mj_forward(model, data)
  mujoco.mj_subtreeVel(model, data)  # on demand only: no sensor asks for it
  com0, vel0 = data.subtree_com[1].copy(), data.subtree_linvel[1].copy()
  qpos, momenta = [data.qpos.copy()], [motion.angular_momentum(model, None, data.qpos,
                                                                data.qvel)[1]]
  for k in range(round(seconds / model.opt.timestep)):
    data.ctrl[:] = 0.9 * np.sin(12.0 * k * model.opt.timestep)
    mujoco.mj_step(model, data)
    qpos.append(data.qpos.copy())
  momenta.append(motion.angular_momentum(model, None, data.qpos, data.qvel)[1])
  return model, np.array(qpos), com0, vel0, momenta


def test_ballistic_flight_follows_mujocos_flight():
  """Fed the joints of a MuJoCo flight (legs swinging while the body turns), ballistic_flight
  gives back MuJoCo's pitch and root position at every step and its angular momentum."""
  model, qpos, com0, vel0, momenta = _biped_in_the_air(0.5)
  pitch = 2 * np.arctan2(qpos[:, 5], qpos[:, 3])  # a turn about y only: (cos, 0, sin, 0)
  assert np.allclose(qpos[:, [4, 6]], 0.0, atol=1e-12) and abs(pitch[-1] - pitch[0]) > 1.0
  flight = motion.ballistic_flight(model, qpos, model.opt.timestep, pitch0=pitch[0],
                                   pitch1=pitch[-1], com0=com0, vel0=vel0)
  assert flight.qpos.shape == qpos.shape and np.array_equal(flight.qpos[:, 7:], qpos[:, 7:])
  assert flight.pitch[0] == pitch[0] and abs(flight.pitch[-1] - pitch[-1]) < 1e-12
  assert np.max(np.abs(flight.pitch - pitch)) < 2e-3
  # MuJoCo's semi-implicit Euler falls 0.5 g h t below the parabola at time t (h its step).
  euler = 0.5 * 9.81 * model.opt.timestep * 0.5
  assert np.max(np.abs(flight.qpos[:, :3] - qpos[:, :3])) < euler + 2e-4
  assert flight.momentum == pytest.approx(momenta[0], rel=2e-3)
  assert momenta[-1] == pytest.approx(momenta[0], rel=2e-3)  # MuJoCo's flight keeps it too


def test_ballistic_flight_with_still_joints_turns_at_a_constant_rate():
  model = mujoco.MjModel.from_xml_string(BIPED_XML)
  still = np.tile(model.qpos0, (101, 1))
  still[:, 7:] = (0.4, -0.2)
  dt, turn = 0.005, -2 * np.pi
  flight = motion.ballistic_flight(model, still, dt, pitch0=0.0, pitch1=turn, com0=[0, 0, 1],
                                   vel0=[0.5, 0, 3])
  rate = turn / (100 * dt)
  assert np.allclose(flight.pitch, rate * dt * np.arange(101), atol=1e-12)
  assert flight.final_rate == pytest.approx(rate, rel=1e-12)
  inertia = motion.angular_momentum(model, None, flight.qpos[0], np.eye(model.nv)[4])[1]
  assert flight.momentum == pytest.approx(inertia * rate, rel=1e-12)
  data = mujoco.MjData(model)
  s = dt * np.arange(101)
  for k in (0, 37, 100):  # the centre of mass on the parabola
    data.qpos[:] = flight.qpos[k]
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    want = np.array([0.5 * s[k], 0, 1 + 3 * s[k] + 0.5 * model.opt.gravity[2] * s[k] ** 2])
    assert np.allclose(data.subtree_com[1], want, atol=1e-12)
  assert np.allclose(motion.pitch_quat(flight.pitch[50]), flight.qpos[50, 3:7])


def test_quat_pitch_inverts_pitch_quat_and_reads_mujocos_frames():
  """Against pitch_quat over a whole turn and more, and against MuJoCo's rotation matrix of
  quaternions that also yaw and roll a little (the pitch read from where the x axis points);
  jitted on a batch, as a rollout's states are read."""
  angles = np.linspace(-np.pi + 1e-9, np.pi, 41)
  pitched = np.array([motion.pitch_quat(a) for a in angles])
  assert np.allclose(motion.quat_pitch(pitched), angles, atol=1e-12)
  assert np.allclose(motion.quat_pitch(-pitched), angles, atol=1e-12)  # q and -q: one rotation
  rng = np.random.default_rng(0)
  quats = rng.normal(size=(20, 4)) * [1, 0.1, 1, 0.1]
  quats /= np.linalg.norm(quats, axis=1, keepdims=True)
  mats = np.zeros((20, 9))
  for q, m in zip(quats, mats, strict=True):
    mujoco.mju_quat2Mat(m, q)
  want = np.arctan2(-mats[:, 6], mats[:, 0])
  batch = jax.jit(motion.quat_pitch)(jnp.asarray(quats.reshape(4, 5, 4)))
  assert batch.shape == (4, 5) and np.allclose(np.ravel(batch), want, atol=1e-12)
  for bad in (np.zeros(3), np.zeros((2, 5)), np.array(1.0)):
    with pytest.raises(ValueError, match=r"quat must have shape \(\.\.\., 4\), got"):
      motion.quat_pitch(bad)
  for bad in ("w x y z", None, np.ones((2, 4), bool)):
    with pytest.raises(ValueError, match=r"quat must be"):
      motion.quat_pitch(bad)


def test_ballistic_flight_refusals():
  model = mujoco.MjModel.from_xml_string(BIPED_XML)
  joints = np.tile(model.qpos0, (5, 1))
  good = {"pitch0": 0.0, "pitch1": -6.0, "com0": [0, 0, 1], "vel0": [0, 0, 3]}
  arm = mujoco.MjModel.from_xml_string(ARM_XML)
  for bad, call, match in (
      ("no free root", lambda: motion.ballistic_flight(arm, np.zeros((5, arm.nq)), 0.01, **good),
       "first joint must be a free joint"),
      ("one frame", lambda: motion.ballistic_flight(model, joints[:1], 0.01, **good),
       "at least 2 frames"),
      ("shape", lambda: motion.ballistic_flight(model, joints[:, :-1], 0.01, **good),
       "joints must have shape"),
      ("NaN", lambda: motion.ballistic_flight(model, joints * np.nan, 0.01, **good),
       "joints must be finite"),
      ("dt", lambda: motion.ballistic_flight(model, joints, 0.0, **good), "dt must be"),
      ("pitch", lambda: motion.ballistic_flight(model, joints, 0.01, **{**good, "pitch1": "x"}),
       "pitch1 must be"),
      ("com0", lambda: motion.ballistic_flight(model, joints, 0.01, **{**good, "com0": [0, 0]}),
       "com0 must have shape"),
      ("model", lambda: motion.ballistic_flight("m", joints, 0.01, **good),  # pyright: ignore
       "model must be")):
    with pytest.raises(ValueError, match=match):
      call()
    del bad
  sideways = mujoco.MjModel.from_xml_string(BIPED_XML)
  sideways.opt.gravity[:] = (1.0, 0, -9.81)
  with pytest.raises(ValueError, match="gravity must point along -z"):
    motion.ballistic_flight(sideways, joints, 0.01, **good)


# ------------------------------------------------------------------ standing cost and programs


def test_standing_cost_reads_mujocos_tilt_balance_and_floor_contacts():
  """Each term of the residual against MuJoCo's own numbers for the biped tipped over in a
  rollout: the root's z axis (xmat's third column), the subtree's centre of mass against the
  feet's mean position, the other bodies' floor contacts (the torso's own, on its side)."""
  import mjbatch_jax

  spec = mujoco.MjSpec.from_string(BIPED_XML)
  motion.floor_contact_sensors(spec, ["left_foot", "right_foot"], robot="torso")
  model = spec.compile()
  data = mujoco.MjData(model)
  data.qpos[3:7] = [np.cos(0.6), np.sin(0.6), 0.0, 0.0]  # rolled 1.2 rad: it falls on its side
  data.qvel[6:] = [0.3, -0.2]
  with jax.enable_x64(True), mjbatch_jax.Simulator(model, num_threads=1) as sim:
    stand = np.array([0.1, -0.1])
    cost = motion.standing_cost(sim, [0, 1, 2], ["left_foot", "right_foot"], stand, 0.3,
                                motion.StandingWeights(*range(1, 8)))
    start = sim.init_state(1)[0].at[sim.layout.qpos].set(data.qpos).at[sim.layout.qvel].set(
      data.qvel)
    ctrls = np.full((300, 1, model.nu), 0.2)
    states, sensors, obs = mjbatch_jax.rollout(start[None], ctrls.reshape(1, 300, -1),
                                               sim.params(1), observe=cost.observe)
    assert [t.weight for t in cost.terms] == list(range(1, 8))
    checked = 0
    for k in (0, 60, 200, 299):  # the torso on the floor from step 121 on
      x, o = states[0, k], {name: value[0, k] for name, value in obs.items()}
      r = np.asarray(cost.residual(x, jnp.asarray(ctrls[k, 0]), o, jnp.asarray(0)))
      mujoco.mj_setState(model, data, np.asarray(x), mujoco.mjtState.mjSTATE_INTEGRATION)
      mujoco.mj_forward(model, data)
      root = data.xmat[1].reshape(3, 3)
      feet = data.xpos[[model.body("left_foot").id, model.body("right_foot").id], :2].mean(0)
      counts = np.asarray(sensors[0, k])
      np.testing.assert_allclose(r[0], counts[2] - counts[0] - counts[1])
      np.testing.assert_allclose(r[1], data.qpos[2] - 0.3, atol=1e-12)
      np.testing.assert_allclose(r[2:4], root[:2, 2], atol=1e-12)
      np.testing.assert_allclose(r[4:6], data.subtree_com[1, :2] - feet, atol=1e-12)
      np.testing.assert_allclose(r[6:14], data.qvel, atol=1e-12)
      np.testing.assert_allclose(r[14:], ctrls[k, 0] - stand)
      checked += r[0] > 0
    assert checked >= 1, "the torso never lay on the floor: the touch term went untested"


def test_synergy_program_holds_or_reaches_each_phases_targets():
  """Hold: each phase's targets on exactly its knots (program.masks), the base before the first
  and in the columns of no synergy; linear: each target reached at its phase's end, halfway at
  its middle; both: the ramp ends on the base's last control; clipped to ctrlrange; jit and vmap
  give the same. Times are binary fractions: no knot falls on a rounding."""
  with jax.enable_x64(True):
    _synergy_program_checks()


def _synergy_program_checks():
  synergy = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]])  # actuator 3: in neither
  base = np.linspace(0.0, 0.5, 40)[:, None] + np.arange(4.0) * 0.01
  z = np.array([0.3, -0.2, 0.25, 0.6, 0.1, 0.5, 2.0, 0.0, 0.375])  # targets, durations
  ctrlrange = np.tile([-1.0, 1.5], (4, 1))  # 2.0 is clipped
  program = motion.SynergyProgram(synergy, base, 0.0625, start=0.25, ramp_s=0.25,
                                  durations=(0.05, 1.0), ctrlrange=ctrlrange)
  u, masks = np.asarray(program(z)), program.masks(z)
  assert u.shape == (40, 4) and masks.shape == (3, 40)
  assert [np.flatnonzero(m).tolist() for m in masks] == [
    list(range(4, 8)), list(range(8, 16)), list(range(16, 22))]
  np.testing.assert_array_equal(u[:4], base[:4])
  np.testing.assert_array_equal(u[:23, 3], base[:23, 3])
  for k, phase in enumerate(z.reshape(3, 3)):
    held = np.clip(phase[[0, 1, 0]], -1.0, 1.5)
    np.testing.assert_array_equal(u[masks[k]][:, :3], np.broadcast_to(held, (masks[k].sum(), 3)))
  np.testing.assert_allclose(u[26:], np.broadcast_to(base[-1], (14, 4)))  # ramped at 1.625 s
  np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(program))(jnp.stack([z, z]))[1]), u)
  # retarget: the held program again from its base, then two phases given new targets on a plan.
  again = np.asarray(program.retarget(base, masks, z.reshape(3, 3)[:, :2]))
  np.testing.assert_array_equal(again[:22], u[:22])  # the ramp after knot 22 is not retarget's
  plan = u[:20] - 0.125  # within ctrlrange: clipping leaves it as it is
  new = np.array([[0.5, 0.75], [-2.0, 0.25]])  # -2.0 is clipped
  moved, kept = np.asarray(program.retarget(plan, masks[:2, :20], new)), ~(masks[0] | masks[1])[:20]
  np.testing.assert_array_equal(moved[kept], plan[kept])
  for k in range(2):
    np.testing.assert_array_equal(moved[masks[k, :20]][:, :3],
                                  np.broadcast_to(np.clip(new[k, [0, 1, 0]], -1.0, 1.5),
                                                  (masks[k].sum(), 3)))
    np.testing.assert_array_equal(moved[masks[k, :20]][:, 3], plan[masks[k, :20]][:, 3])
  tuned = jax.jit(jax.vmap(lambda t: program.retarget(plan, masks[:2, :20], t)))(
    jnp.stack([new.ravel(), new.ravel()]))
  np.testing.assert_array_equal(np.asarray(tuned[1]), moved)

  linear = motion.SynergyProgram(synergy, base[0], 0.0625, frames=40, ramp_s=0.25,
                                 interpolation="linear")
  phases = np.c_[z.reshape(3, 3)[:, :2], [0.25, 0.25, 0.125]]  # ends at knots 4, 8 and 10
  v = np.asarray(linear(phases))
  for phase, end in zip(phases, (4, 8, 10), strict=True):
    np.testing.assert_allclose(v[end, :3], phase[[0, 1, 0]], atol=1e-12)
  np.testing.assert_allclose(v[2, :3], (base[0, :3] + phases[0, [0, 1, 0]]) / 2, atol=1e-12)
  np.testing.assert_allclose(v[14:], np.broadcast_to(base[0], (26, 4)), atol=1e-12)
  np.testing.assert_allclose(v[:, 3], base[0, 3])


def test_phase_derivatives_keep_a_take_off_and_a_touchdown_sharp():
  """A free body sliding at 1 m/s, thrown up at 2 m/s, caught: on the floor the velocity is
  exactly the slide's up to the take-off and from the touchdown on (plain differences across
  the jump smear it), and inside the flight the acceleration is gravity's."""
  model = mujoco.MjModel.from_xml_string(BIPED_XML)
  dt, g, off, down, count = 0.01, 9.81, 20, 60, 90
  t = dt * np.arange(count)
  qpos = np.tile(model.qpos0, (count, 1))
  qpos[:, 0] = t
  s = np.clip(t - t[off], 0.0, t[down] - t[off])
  qpos[:, 2] = 0.3 + 2.0 * s - 0.5 * g * s * s  # held where the flight ends (0.4 s)
  contact = np.ones(count, bool)
  contact[off + 1:down] = False
  qvel, qacc = motion.phase_derivatives(model, qpos, dt, contact)
  np.testing.assert_allclose(qvel[:, 0], 1.0, atol=1e-12)
  np.testing.assert_allclose(qvel[: off + 1, 2], 0.0, atol=1e-12)
  np.testing.assert_allclose(qvel[down:, 2], 0.0, atol=1e-9)
  np.testing.assert_allclose(qvel[off + 1:down, 2], 2.0 - g * (t[off + 1:down] - t[off]),
                             atol=1e-9)
  np.testing.assert_allclose(qacc[off + 2:down - 1, 2], -g, atol=1e-6)
  np.testing.assert_allclose(qacc[: off + 1], 0.0, atol=1e-9)
  smeared = motion.velocities(model, qpos, dt)
  assert abs(smeared[off, 2]) > 0.5 and abs(smeared[down, 2]) > 0.5
  with pytest.raises(ValueError, match=r"contact: the phase of poses 89..89 \(on the floor\)"):
    motion.phase_derivatives(model, qpos, dt, np.r_[np.ones(88, bool), False, True])
  with pytest.raises(ValueError, match=r"contact must be \(90,\) booleans"):
    motion.phase_derivatives(model, qpos, dt, contact[:-1])
