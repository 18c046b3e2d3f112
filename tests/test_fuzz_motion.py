"""Hostile and careless calls of mjbatch_jax.motion, each in a child process (tests/fuzzing.py).

CASES is the table: a name, a snippet, and what it must do: raise an exception of a type whose
message matches a pattern ("raises": the pattern names the argument), or run to the end, its own
asserts included ("ok": the fixed behaviour holds). Every case sees a fresh PRELUDE: a limited
fixed-base arm (four hinges, no actuators) and a floating biped (two feet on hinges driven by
position servos, a floor), as tests/test_motion.py has them, and a few valid arguments to spoil
one at a time. Everything here is host numpy on tiny models: the table runs in seconds.
"""

import textwrap

from tests.fuzzing import table_tests

PRELUDE = r'''
import math, os, tempfile, threading
import numpy as np, mujoco
import jax
jax.config.update("jax_enable_x64", True)
import mjbatch_jax
from mjbatch_jax import archive, motion

from tests.models import ARM_XML, BIPED_XML
arm = mujoco.MjModel.from_xml_string(ARM_XML)
biped = mujoco.MjModel.from_xml_string(BIPED_XML)
q0 = arm.qpos0.copy()                     # (4,)
bq0 = biped.qpos0.copy()                  # (9,); nv 8
ik = motion.IK(arm)
reach = [motion.BodyPosition("hand", [0.4, 0.1, 0.6])]
F = 3
bqpos = np.tile(bq0, (F, 1))
bzeros = np.zeros((F, biped.nv))
down = np.ones(F, bool)
feet = ["left_foot", "right_foot"]
sole = motion.Sole((-0.06, 0.06), 0.03, -0.01)

def feasible(**kw):
  args = {"model": biped, "qpos": bqpos, "qvel": bzeros, "qacc": bzeros, "contact": down,
          "contact_bodies": feet, "sole": sole} | kw
  return motion.feasibility(**args)

folder = tempfile.mkdtemp()
clip = motion.make(arm, np.tile(q0, (F, 1)), 0.02, ["hand"])
saved = motion.save(os.path.join(folder, "clip.npz"), clip, arm)

floor = np.array([[1, 1, 2]] * 3 + [[0, 0, 0]] * 5 + [[1, 1, 2]] * 4, float)  # 12 steps
height = np.ones(len(floor))

def land(**kw):
  args = {"floor": floor, "height": height, "dt": 0.05, "min_flight": 0.1,
          "upright_height": 0.5} | kw
  return motion.landing(**args)

def spec():
  return mujoco.MjSpec.from_string(BIPED_XML)

def fly(**kw):
  args = {"model": biped, "joints": bqpos, "dt": 0.01, "pitch0": 0.0, "pitch1": -1.0,
          "com0": [0.0, 0.0, 1.0], "vel0": [0.0, 0.0, 2.0]} | kw
  return motion.ballistic_flight(**args)

sim = mjbatch_jax.Simulator(biped, num_threads=1)
bx, bq = motion.body_poses(biped, bqpos, ["torso"])

def tracking(**kw):
  args = {"sim": sim, "xpos": bx, "xquat": bq, "qpos": bqpos, "bodies": ["torso"]} | kw
  return motion.tracking_cost(**args)

scratch = mujoco.MjData(biped)

sensed = spec()
motion.floor_contact_sensors(sensed, feet, robot="torso")
ssim = mjbatch_jax.Simulator(sensed.compile(), num_threads=1)  # sensordata: left, right, robot

def standing(**kw):
  args = {"sim": ssim, "floor": [0, 1, 2], "feet": feet, "ctrl": np.zeros(2),
          "height": 0.3} | kw
  return motion.standing_cost(**args)

def program(**kw):
  args = {"synergy": np.eye(2), "base": np.zeros((10, 2)), "dt": 0.1, "ramp_s": 0.2} | kw
  return motion.SynergyProgram(**args)
'''

# Snippets that must raise ValueError, with the regex its message must match (the argument's
# name, and what was wrong): (name, snippet, pattern).
REFUSED = [
  # IK(model, posture, ...): every option.
  ("IK model None", "motion.IK(None)", r"model must be a mujoco.MjModel, got NoneType"),
  ("IK model an MjData", "motion.IK(mujoco.MjData(arm))", r"model must be a mujoco.MjModel"),
  ("IK posture wrong length", "motion.IK(arm, np.zeros(5))",
   r"posture must have shape \(4,\), got \(5,\)"),
  ("IK posture NaN", "motion.IK(arm, [0, math.nan, 0, 0])", r"posture must be finite"),
  ("IK posture strings", "motion.IK(arm, ['a', 'b', 'c', 'd'])",
   r"posture must be an array of numbers"),
  ("IK posture 2-D", "motion.IK(arm, np.zeros((1, 4)))",
   r"posture must have shape \(4,\), got \(1, 4\)"),
  ("IK posture a dict", "motion.IK(arm, {'yaw': 0.0})",
   r"posture must be an array of numbers"),
  ("IK mode unknown", "motion.IK(arm, mode='pseudo_inverse')", r"mode must be one of"),
  ("IK mode not a string", "motion.IK(arm, mode=None)", r"mode must be one of"),
  ("IK posture_weight negative", "motion.IK(arm, posture_weight=-0.1)",
   r"posture_weight must be a finite number >= 0"),
  ("IK damping NaN", "motion.IK(arm, damping=math.nan)", r"damping must be a finite number"),
  ("IK damping 0", "motion.IK(arm, damping=0.0)",
   r"damping must be a finite number > 0.0, got 0.0"),  # once: two equal tasks, LinAlgError
  ("IK trust_region 0", "motion.IK(arm, trust_region=0.0)",
   r"trust_region must be a finite number > 0"),
  ("IK trust_region inf", "motion.IK(arm, trust_region=math.inf)", r"trust_region must be"),
  ("IK tolerance negative", "motion.IK(arm, tolerance=-1e-9)", r"tolerance must be"),
  ("IK active_set_passes 0", "motion.IK(arm, active_set_passes=0)",
   r"active_set_passes must be an int >= 1, got 0"),
  ("IK active_set_passes bool", "motion.IK(arm, active_set_passes=True)",
   r"active_set_passes must be an int >= 1, got True"),
  # IK.solve: the start, the counts, the task list.
  ("IK solve qpos wrong length", "ik.solve(np.zeros(3), reach)",
   r"qpos must have shape \(4,\), got \(3,\)"),
  ("IK solve qpos NaN", "ik.solve(q0 + math.nan, reach)", r"qpos must be finite"),
  ("IK solve qpos inf", "ik.solve(np.r_[0, 0, math.inf, 0], reach)",
   r"qpos must be finite: inf at index \(2,\)"),
  ("IK solve qpos string", "ik.solve('home', reach)", r"qpos must be an array of numbers"),
  ("IK solve a weight that overflows", "ik.solve(q0, [motion.BodyPosition('hand', "
   "[0.4, 0.1, 0.6], weight=1e200)])", r"IK step 0 is not finite"),  # once: NaN, error 0.0
  ("IK solve_frames a weight that overflows", "ik.solve_frames(q0, [reach, [motion."
   "BodyPosition('hand', [0.4, 0.1, 0.6], weight=1e200)]])", r"frame 1: IK step 0 is not finite"),
  ("IK kinematics a scalar", "ik.kinematics(0.5)", r"qpos must have shape \(4,\), got \(\)"),
  ("IK kinematics NaN", "ik.kinematics(q0 + math.nan)", r"qpos must be finite"),
  ("IK kinematics wrong length", "ik.kinematics(np.zeros(5))",
   r"qpos must have shape \(4,\), got \(5,\)"),
  ("IK solve iterations negative", "ik.solve(q0, reach, iterations=-1)",
   r"iterations must be an int >= 0, got -1"),
  ("IK solve iterations float", "ik.solve(q0, reach, iterations=10.0)",
   r"iterations must be an int >= 0, got 10.0"),
  ("IK solve free_root int", "ik.solve(q0, reach, free_root=1)",
   r"free_root must be True or False, got 1"),
  ("IK solve no tasks", "ik.solve(q0, [])", r"tasks must hold at least one task"),
  ("IK solve one task, not a list", "ik.solve(q0, reach[0])",
   r"tasks must be a sequence of tasks"),
  ("IK solve tasks a string", "ik.solve(q0, 'hand')", r"tasks must be a sequence of tasks"),
  ("IK solve tasks a generator", "ik.solve(q0, (t for t in reach))",
   r"tasks must be a sequence of tasks, got <generator"),
  ("IK solve tasks a dict", "ik.solve(q0, {'hand': [0, 0, 0]})",
   r"tasks must be a sequence of tasks"),
  # IK.solve_frames: solve's checks, and the frames.
  ("IK solve_frames qpos wrong length", "ik.solve_frames(np.zeros(3), [reach])",
   r"qpos must have shape \(4,\), got \(3,\)"),
  ("IK solve_frames iterations negative", "ik.solve_frames(q0, [reach], iterations=-1)",
   r"iterations must be an int >= 0, got -1"),
  ("IK solve_frames free_root None", "ik.solve_frames(q0, [reach], free_root=None)",
   r"free_root must be True or False"),
  ("IK solve_frames frames None", "ik.solve_frames(q0, None)",
   r"frames must be an iterable of task sequences, one per frame, got NoneType"),
  ("IK solve_frames frames a string", "ik.solve_frames(q0, 'hand')",
   r"frames must be an iterable of task sequences"),
  ("IK solve_frames frames one task list", "ik.solve_frames(q0, reach)",
   r"frame 0: tasks must be a sequence of tasks"),
  ("IK solve_frames a bad later frame", "ik.solve_frames(q0, [reach, reach, []])",
   r"frame 2: tasks must hold at least one task"),
  ("IK solve task of another kind", "ik.solve(q0, [('hand', [0, 0, 0])])",
   r"tasks must be BodyPosition, BodyOrientation, CentreOfMass or JointAngles"),
  # The tasks: a body or joint the model lacks, targets, axes, weights.
  ("BodyPosition body the model lacks", "ik.solve(q0, [motion.BodyPosition('hnd', [0, 0, 0])])",
   r"no body named 'hnd' \(did you mean 'hand'"),
  ("BodyPosition body of the other model",
   "ik.solve(q0, [motion.BodyPosition('left_foot', [0, 0, 0])])", r"no body named 'left_foot'"),
  ("BodyPosition target NaN", "motion.BodyPosition('hand', [0, math.nan, 0])",
   r"BodyPosition target must be finite"),
  ("BodyPosition target wrong length", "motion.BodyPosition('hand', [0, 0])",
   r"BodyPosition target must have shape \(3,\) or \(3,\)"),
  ("BodyPosition target string", "motion.BodyPosition('hand', 'up')",
   r"BodyPosition target must be an array of numbers"),
  ("BodyPosition target None", "motion.BodyPosition('hand', None)",
   r"BodyPosition target must be an array of numbers"),
  ("BodyPosition axis 3", "motion.BodyPosition('hand', [0, 0, 0], axes=(3,))",
   r"BodyPosition axis must be an int in \[0, 2\], got 3"),
  ("BodyPosition axis twice", "motion.BodyPosition('hand', [0, 0, 0], axes=(0, 0))",
   r"BodyPosition axes must name each of its axes in 0..2 once"),
  ("BodyPosition no axes", "motion.BodyPosition('hand', [0, 0, 0], axes=())",
   r"BodyPosition axes must name each of its axes"),
  ("BodyPosition axes an int", "motion.BodyPosition('hand', [0, 0, 0], axes=2)",
   r"BodyPosition axes must be a sequence of axes in 0..2, got 2"),
  ("BodyPosition axis float", "motion.BodyPosition('hand', [0, 0, 0], axes=(1.0,))",
   r"BodyPosition axis must be an int"),
  ("BodyPosition weight negative", "motion.BodyPosition('hand', [0, 0, 0], weight=-1.0)",
   r"BodyPosition weight must be a finite number >= 0"),
  ("BodyPosition weight NaN", "motion.BodyPosition('hand', [0, 0, 0], weight=math.nan)",
   r"BodyPosition weight must be a finite number >= 0"),
  ("BodyPosition weight bool", "motion.BodyPosition('hand', [0, 0, 0], weight=True)",
   r"BodyPosition weight must be a finite number >= 0.0, got True"),
  ("BodyOrientation not unit", "motion.BodyOrientation('hand', [1, 1, 0, 0])",
   r"BodyOrientation target must be a unit quaternion"),
  ("BodyOrientation zero quaternion", "motion.BodyOrientation('hand', [0, 0, 0, 0])",
   r"BodyOrientation target must be a unit quaternion .* of norm 0"),
  ("BodyOrientation three numbers", "motion.BodyOrientation('hand', [0, 0, 1])",
   r"BodyOrientation target must have shape \(4,\), got \(3,\)"),
  ("BodyOrientation NaN", "motion.BodyOrientation('hand', [math.nan, 0, 0, 0])",
   r"BodyOrientation target must be finite"),
  ("BodyOrientation body the model lacks",
   "ik.solve(q0, [motion.BodyOrientation('palm', [1, 0, 0, 0])])", r"no body named 'palm'"),
  ("CentreOfMass body the model lacks",
   "ik.solve(q0, [motion.CentreOfMass([0, 0, 0.5], body='pelvis')])", r"no body named 'pelvis'"),
  ("CentreOfMass target per axis wrong", "motion.CentreOfMass([0.0], axes=(0, 1))",
   r"CentreOfMass target must have shape \(3,\) or \(2,\) \(one value per axis\), got \(1,\)"),
  ("CentreOfMass target inf", "motion.CentreOfMass([0, 0, math.inf])",
   r"CentreOfMass target must be finite"),
  ("CentreOfMass weight string", "motion.CentreOfMass([0, 0, 0], weight='1')",
   r"CentreOfMass weight must be a finite number"),
  ("JointAngles not a mapping", "motion.JointAngles([('elbow', 0.5)])",
   r"JointAngles angles must be a mapping from joint names to positions"),
  ("JointAngles key not a string", "motion.JointAngles({2: 0.5})",
   r"JointAngles names joints by strings, got 2"),
  ("JointAngles angle NaN", "motion.JointAngles({'elbow': math.nan})",
   r"JointAngles angle of 'elbow' must be a finite number"),
  ("JointAngles angle array", "motion.JointAngles({'elbow': np.zeros(2)})",
   r"JointAngles angle of 'elbow' must be a finite number"),
  ("JointAngles joint the model lacks", "ik.solve(q0, [motion.JointAngles({'elbo': 0.5})])",
   r"no joint named 'elbo' \(did you mean 'elbow'"),
  ("JointAngles on a free joint",
   "motion.IK(biped).solve(bq0, [motion.JointAngles({'root': 0.0})])",
   r"JointAngles: joint 'root' is not a hinge or a slide"),
  ("JointAngles weight negative", "motion.JointAngles({'elbow': 0.5}, weight=-2)",
   r"JointAngles weight must be a finite number >= 0"),
  # feasibility and Sole.
  ("Sole heel above toe", "motion.Sole((0.1, -0.1), 0.03)",
   r"Sole x must be \(heel, toe\) with heel < toe, got \(0.1, -0.1\)"),
  ("Sole heel equals toe", "motion.Sole((0.1, 0.1), 0.03)", r"heel < toe"),
  ("Sole x a number", "motion.Sole(0.1, 0.03)", r"Sole x must be \(heel, toe\), got 0.1"),
  ("Sole x three", "motion.Sole((0, 0.1, 0.2), 0.03)", r"Sole x must be \(heel, toe\)"),
  ("Sole heel a string", "motion.Sole(('a', 'b'), 0.03)",
   r"Sole heel must be a finite number, got 'a'"),
  ("Sole heel NaN", "motion.Sole((math.nan, 0.1), 0.03)", r"Sole heel must be a finite number"),
  ("Sole half_width 0", "motion.Sole((-0.1, 0.1), 0.0)",
   r"Sole half_width must be a finite number > 0"),
  ("Sole z inf", "motion.Sole((-0.1, 0.1), 0.03, math.inf)", r"Sole z must be a finite number"),
  ("feasibility a robot without actuators", textwrap.dedent("""
    # Ran the whole inverse dynamics, then: "attempt to get argmax of an empty sequence".
    bare = spec()
    for actuator in list(bare.actuators):
      bare.delete(actuator)
    feasible(model=bare.compile())
    """), r"model must have actuators \(their torques are what is checked\), it has none"),
  ("feasibility a site actuator", textwrap.dedent("""
    # Its trnid (a site id) was read as a joint id: IndexError.
    sited = spec()
    sited.worldbody.first_body().add_site(name="thrust")
    sited.add_actuator(trntype=mujoco.mjtTrn.mjTRN_SITE, target="thrust")
    feasible(model=sited.compile())
    """), r"every actuator must drive a hinge or slide joint; these do not: \['#2'\]"),
  ("feasibility model None", "feasible(model=None)", r"model must be a mujoco.MjModel"),
  ("feasibility no frames", "feasible(qpos=np.zeros((0, 9)))",
   r"qpos must hold at least one frame"),
  ("feasibility qpos wrong width", "feasible(qpos=np.zeros((F, 8)))",
   r"qpos must have shape \(any, 9\), got \(3, 8\)"),
  ("feasibility qpos booleans", "feasible(qpos=np.ones((F, 9), bool))",
   r"qpos must be an array of numbers, got a bool array of shape \(3, 9\)"),
  ("feasibility qpos one frame 1-D", "feasible(qpos=bq0)", r"qpos must have shape \(any, 9\)"),
  ("feasibility qvel wrong frames", "feasible(qvel=np.zeros((2, 8)))",
   r"qvel must have shape \(3, 8\), got \(2, 8\)"),
  ("feasibility qacc NaN", "feasible(qacc=bzeros + math.nan)", r"qacc must be finite"),
  ("feasibility contact ints", "feasible(contact=np.ones(F, int))",
   r"contact must be booleans of shape \(3,\) or \(3, 2\)"),
  ("feasibility contact wrong bodies", "feasible(contact=np.ones((F, 3), bool))",
   r"contact must be booleans of shape \(3,\) or \(3, 2\)"),
  ("feasibility no contact bodies", "feasible(contact_bodies=[])",
   r"contact_bodies must name at least one body"),
  ("feasibility contact bodies a string", "feasible(contact_bodies='left_foot')",
   r"contact_bodies must be a sequence of body names, got 'left_foot'"),
  ("feasibility contact body the model lacks", "feasible(contact_bodies=['left_fot'])",
   r"no body named 'left_fot' \(did you mean 'left_foot'"),
  ("feasibility sole a tuple", "feasible(sole=((-0.06, 0.06), 0.03))",
   r"sole must be a Sole or 2 of them \(one per contact body\)"),
  ("feasibility a sole that is not a Sole", "feasible(sole=[sole, 1])",
   r"sole must be a Sole or 2 of them \(one per contact body\)"),
  ("feasibility three soles for two feet", "feasible(sole=[sole] * 3)",
   r"sole must be a Sole or 2 of them"),
  ("feasibility friction 0", "feasible(friction=0.0)", r"friction must be a finite number > 0"),
  ("feasibility lever NaN", "feasible(lever=math.nan)", r"lever must be a finite number > 0"),
  ("feasibility checked wrong length", "feasible(checked=np.ones(F + 1, bool))",
   r"checked must be booleans of shape \(3,\)"),
  ("feasibility checked floats", "feasible(checked=np.ones(F))",
   r"checked must be booleans of shape \(3,\)"),
  ("feasibility model without a free root",
   "motion.feasibility(arm, np.zeros((1, 4)), np.zeros((1, 4)), np.zeros((1, 4)), "
   "np.ones(1, bool), ['hand'], sole)", r"model must have one free root joint .* it has 0"),
  ("feasibility a contact body twice", "feasible(contact_bodies=['left_foot', 'left_foot'])",
   r"contact_bodies must name distinct bodies of the robot \(not the world\), got \['left_foot'"),
  ("feasibility the world as a contact body", "feasible(contact_bodies=['world'])",
   r"contact_bodies must name distinct bodies of the robot \(not the world\)"),
  # make, save, load, body_poses: the clip format.
  ("make qpos wrong width", "motion.make(arm, np.zeros((F, 5)), 0.02)",
   r"qpos must have shape \(any, 4\), got \(3, 5\)"),
  ("make no frames", "motion.make(arm, np.zeros((0, 4)), 0.02)",
   r"qpos must hold at least one frame"),
  ("make qpos NaN", "motion.make(arm, np.full((F, 4), math.nan), 0.02)", r"qpos must be finite"),
  ("make dt 0", "motion.make(arm, np.zeros((F, 4)), 0.0)", r"dt must be a finite number > 0"),
  ("make dt NaN", "motion.make(arm, np.zeros((F, 4)), math.nan)", r"dt must be a finite number"),
  ("make dt string", "motion.make(arm, np.zeros((F, 4)), '0.02')", r"dt must be a finite number"),
  ("make bodies a string", "motion.make(arm, np.zeros((F, 4)), 0.02, 'hand')",
   r"bodies must be a sequence of body names, got 'hand'"),
  ("make bodies of ints", "motion.make(arm, np.zeros((F, 4)), 0.02, [3])",
   r"bodies must be body names \(strings\)"),
  ("make body the model lacks", "motion.make(arm, np.zeros((F, 4)), 0.02, ['hands'])",
   r"no body named 'hands' \(did you mean 'hand'"),
  ("make qvel wrong shape", "motion.make(arm, np.zeros((F, 4)), 0.02, qvel=np.zeros((F, 3)))",
   r"qvel must have shape \(3, 4\)"),
  ("make contact ints", "motion.make(arm, np.zeros((F, 4)), 0.02, contact=np.ones(F, int))",
   r"contact must be booleans with 3 rows"),
  ("make contact a scalar", "motion.make(arm, np.zeros((F, 4)), 0.02, contact=True)",
   r"contact must be booleans with 3 rows"),
  ("make metadata a list", "motion.make(arm, np.zeros((F, 4)), 0.02, metadata=[1])",
   r"metadata must be a mapping"),
  ("make model None", "motion.make(None, np.zeros((F, 4)), 0.02)",
   r"model must be a mujoco.MjModel, got NoneType"),
  ("make model an MjSpec", "motion.make(spec(), np.zeros((F, 9)), 0.02)",
   r"model must be a mujoco.MjModel, got MjSpec \(spec.compile\(\) makes one"),
  ("make metadata JSON cannot hold",
   "motion.make(arm, np.zeros((F, 4)), 0.02, metadata={'f': object()})",
   r"metadata must hold only what JSON can .*not JSON serializable"),
  ("save a Clip whose metadata JSON cannot hold", textwrap.dedent("""
    import dataclasses
    bad = dataclasses.replace(clip, metadata={'f': {1, 2}})
    motion.save(os.path.join(folder, 'set.npz'), bad, arm)
    """), r"metadata must hold only what JSON can"),
  ("save model None", "motion.save(os.path.join(folder, 'y.npz'), clip, None)",
   r"model must be a mujoco.MjModel, got NoneType"),
  ("save path None", "motion.save(None, clip, arm)",
   r"path must be a file name \(a str or os.PathLike\), got NoneType"),
  ("save path bytes", "motion.save(b'clip.npz', clip, arm)",
   r"path must be a file name \(a str or os.PathLike\), got bytes"),
  ("save path a folder", "motion.save(folder, clip, arm)",
   r"path .* is a folder, not a file name"),
  ("save path under a file", "motion.save(os.path.join(saved, 'x.npz'), clip, arm)",
   r"path .*clip.npz/x.npz cannot be written: its folder .*clip.npz cannot be made"),
  ("save clip a dict", "motion.save(os.path.join(folder, 'x.npz'), {'qpos': clip.qpos}, arm)",
   r"clip must be a Clip, got dict"),
  ("save clip of another model", "motion.save(os.path.join(folder, 'x.npz'), clip, biped)",
   r"qpos must have shape \(any, 9\), got \(3, 4\)"),
  ("load missing file", "motion.load(os.path.join(folder, 'none.npz'), arm)",
   r"no file .*none.npz \(a motion clip expected there\)"),
  ("load model None", "motion.load(saved, None)", r"model must be a mujoco.MjModel, got NoneType"),
  ("load path None", "motion.load(None, arm)",
   r"path must be a file name \(a str or os.PathLike\), got NoneType"),
  ("load a folder", "motion.load(folder, arm)", r"no file .* \(a motion clip expected there\)"),
  ("load a clip of another model", "motion.load(saved, biped)",
   r"clip.npz is a clip of another model \(kinematic fingerprint"),
  ("load a clip of a longer arm",
   "motion.load(saved, mujoco.MjModel.from_xml_string(ARM_XML.replace('0.25 0 0\"', "
   "'0.3 0 0\"')))", r"a clip of another model"),
  ("load a wrong version", textwrap.dedent("""
    arrays, header = archive.read(saved)
    archive.write(os.path.join(folder, 'v9.npz'), arrays, {**header, 'version': 9})
    motion.load(os.path.join(folder, 'v9.npz'), arm)
    """), r"v9.npz is a motion clip of format version 9; this version reads version 1"),
  ("load a version string", textwrap.dedent("""
    arrays, header = archive.read(saved)
    archive.write(os.path.join(folder, 'vs.npz'), arrays, {**header, 'version': '1'})
    motion.load(os.path.join(folder, 'vs.npz'), arm)
    """), r"format version '1'; this version reads version 1"),
  ("load another format", textwrap.dedent("""
    arrays, header = archive.read(saved)
    archive.write(os.path.join(folder, 'plan.npz'), arrays, {**header, 'format': 'plan'})
    motion.load(os.path.join(folder, 'plan.npz'), arm)
    """), r"plan.npz is not a motion clip: its header's format is 'plan'"),
  ("load a plain npz", textwrap.dedent("""
    np.savez(os.path.join(folder, 'plain.npz'), qpos=np.zeros((3, 4)))
    motion.load(os.path.join(folder, 'plain.npz'), arm)
    """), r"plain.npz.*no .* header"),
  ("load a text file", textwrap.dedent("""
    with open(os.path.join(folder, 'clip.txt'), 'w') as f:
      f.write('not a clip')
    motion.load(os.path.join(folder, 'clip.txt'), arm)
    """), r"clip.txt.*not an .npz archive"),
  ("load a truncated clip", textwrap.dedent("""
    data = open(saved, 'rb').read()
    with open(os.path.join(folder, 'cut.npz'), 'wb') as f:
      f.write(data[:len(data) // 2])
    motion.load(os.path.join(folder, 'cut.npz'), arm)
    """), r"cut.npz"),
  ("load a clip with a short xquat", textwrap.dedent("""
    arrays, header = archive.read(saved)
    arrays['xquat'] = arrays['xquat'][:, :, :3]
    archive.write(os.path.join(folder, 'short.npz'), arrays, header)
    motion.load(os.path.join(folder, 'short.npz'), arm)
    """), r"short.npz: xquat must have shape \(3, 1, 4\), got \(3, 1, 3\)"),
  ("load a clip with NaN poses", textwrap.dedent("""
    arrays, header = archive.read(saved)
    arrays['qpos'] = arrays['qpos'] * math.nan
    archive.write(os.path.join(folder, 'nan.npz'), arrays, header)
    motion.load(os.path.join(folder, 'nan.npz'), arm)
    """), r"nan.npz: qpos must be finite"),
  ("load a clip with dt 0", textwrap.dedent("""
    arrays, header = archive.read(saved)
    archive.write(os.path.join(folder, 'dt0.npz'), arrays, {**header, 'dt': 0})
    motion.load(os.path.join(folder, 'dt0.npz'), arm)
    """), r"dt0.npz: dt must be a finite number > 0"),
  ("body_poses model None", "motion.body_poses(None, np.zeros((1, 4)), ['hand'])",
   r"model must be a mujoco.MjModel"),
  ("body_poses qpos 1-D", "motion.body_poses(arm, q0, ['hand'])",
   r"qpos must have shape \(any, 4\), got \(4,\)"),
  ("body_poses qpos NaN", "motion.body_poses(arm, np.full((1, 4), math.nan), ['hand'])",
   r"qpos must be finite"),
  ("body_poses bodies a string", "motion.body_poses(arm, np.zeros((1, 4)), 'hand')",
   r"bodies must be a sequence of body names"),
  ("body_poses body the model lacks", "motion.body_poses(arm, np.zeros((1, 4)), ['torso'])",
   r"no body named 'torso'"),
  # floor_contact_sensors.
  ("floor sensors spec a model", "motion.floor_contact_sensors(biped, feet)",
   r"spec must be a mujoco.MjSpec, got MjModel"),
  ("floor sensors bodies a string", "motion.floor_contact_sensors(spec(), 'left_foot')",
   r"bodies must be a mapping from labels to body names or a sequence of body names"),
  ("floor sensors bodies None", "motion.floor_contact_sensors(spec(), None)",
   r"bodies must be a mapping"),
  ("floor sensors no contact bodies", "motion.floor_contact_sensors(spec(), [])",
   r"bodies must name at least one body \(or robot a subtree\)"),
  ("floor sensors body the spec lacks", "motion.floor_contact_sensors(spec(), ['left_fot'])",
   r"the spec has no body named 'left_fot' \(did you mean 'left_foot'"),
  ("floor sensors robot the spec lacks",
   "motion.floor_contact_sensors(spec(), feet, robot='pelvis')",
   r"the spec has no body named 'pelvis'"),
  ("floor sensors label not a string", "motion.floor_contact_sensors(spec(), {1: 'left_foot'})",
   r"labels and body names must be strings"),
  ("floor sensors body not a string", "motion.floor_contact_sensors(spec(), [None])",
   r"labels and body names must be strings"),
  ("floor sensors floor the spec lacks", "motion.floor_contact_sensors(spec(), feet, "
   "floor='ground')", r"the spec has no geom named 'ground'.*floor must name the floor geom"),
  ("floor sensors floor None", "motion.floor_contact_sensors(spec(), feet, floor=None)",
   r"floor must be the floor geom's name \(a string\), got None"),
  ("floor sensors prefix an int", "motion.floor_contact_sensors(spec(), feet, prefix=3)",
   r"prefix must be a string .*got 3"),
  ("floor sensors twice on one spec", textwrap.dedent("""
    s = spec()
    motion.floor_contact_sensors(s, feet)
    motion.floor_contact_sensors(s, feet)
    """), r"sensor names must be new and distinct.*already in the spec"),
  ("floor sensors one body twice", "motion.floor_contact_sensors(spec(), feet + ['left_foot'])",
   r"sensor names must be new and distinct"),
  # landing: flight and landing from floor contacts.
  ("landing floor 1-D", "land(floor=floor[:, 0])", r"floor must have shape \(any, any\)"),
  ("landing floor one column", "land(floor=floor[:, :1])",
   r"floor must have a column per foot and one for the robot \(at least 2\)"),
  ("landing floor NaN", "land(floor=floor * math.nan)", r"floor must be finite"),
  ("landing floor strings", "land(floor=[['a', 'b']])", r"floor must be an array of numbers"),
  ("landing floor booleans", "land(floor=floor > 0)", r"floor must be an array of numbers"),
  ("landing height wrong length", "land(height=height[:-1])",
   r"height must have shape \(12,\), got \(11,\)"),
  ("landing height NaN", "land(height=height * math.nan)", r"height must be finite"),
  ("landing dt 0", "land(dt=0.0)", r"dt must be a finite number > 0"),
  ("landing dt bool", "land(dt=True)", r"dt must be a finite number > 0.0, got True"),
  ("landing dt negative", "land(dt=-0.01)", r"dt must be a finite number > 0"),
  ("landing min_flight negative", "land(min_flight=-0.1)",
   r"min_flight must be a finite number >= 0"),
  ("landing min_flight NaN", "land(min_flight=math.nan)", r"min_flight must be"),
  ("landing upright_height inf", "land(upright_height=math.inf)", r"upright_height must be"),
  ("landing upright_height string", "land(upright_height='0.5')", r"upright_height must be"),
  ("landing floor negative counts", "land(floor=-floor)",
   r"floor must hold contact counts \(whole numbers >= 0\), got -1.0 at index \(0, 0\)"),
  ("landing floor fractional counts", "land(floor=floor * 0.5)",
   r"floor must hold contact counts \(whole numbers >= 0\), got 0.5 at index \(0, 0\)"),
  # Feasibility.summary's count of actuators.
  ("feasibility summary top 0", "feasible().summary(0)", r"top must be an int >= 1, got 0"),
  ("feasibility summary top negative", "feasible().summary(-2)", r"top must be an int >= 1"),
  ("feasibility summary top float", "feasible().summary(1.5)", r"top must be an int >= 1"),
  ("feasibility summary top NaN", "feasible().summary(math.nan)", r"top must be an int >= 1"),
  ("feasibility summary top string", "feasible().summary('6')", r"top must be an int >= 1"),
  ("feasibility summary top bool", "feasible().summary(True)", r"top must be an int >= 1"),
  ("feasibility summary top an array", "feasible().summary(np.ones(2, int))",
   r"top must be an int >= 1"),
  # first_touchdown: the same counts for many runs, traced or not.
  ("touchdown floor 1-D", "motion.first_touchdown(floor[:, 0], 1)",
   r"floor must have shape \(\.\.\., any, any\), got \(12,\)"),
  ("touchdown floor one column", "motion.first_touchdown(floor[None, :, :1], 1)",
   r"floor must have a column per foot and one for the robot \(at least 2\)"),
  ("touchdown floor no steps", "motion.first_touchdown(floor[:0], 1)",
   r"floor must hold at least one step \(S >= 1\), got shape \(0, 3\)"),
  ("touchdown floor NaN", "motion.first_touchdown(floor * math.nan, 1)", r"floor must be finite"),
  ("touchdown floor strings", "motion.first_touchdown([['a', 'b']], 1)",
   r"floor must be an array of numbers"),
  ("touchdown floor booleans", "motion.first_touchdown(floor > 0, 1)",
   r"floor must be an array of numbers"),
  ("touchdown floor booleans traced",
   "jax.jit(motion.first_touchdown, static_argnums=1)(floor > 0, 1)",
   r"floor must be an array of numbers, got bool"),
  ("touchdown floor one column traced",
   "jax.jit(motion.first_touchdown, static_argnums=1)(floor[:, :1], 1)",
   r"floor must have a column per foot and one for the robot \(at least 2\)"),
  ("touchdown floor negative counts", "motion.first_touchdown(-floor, 1)",
   r"floor must hold contact counts \(whole numbers >= 0\), got -1.0 at index \(0, 0\)"),
  ("touchdown floor fractional counts", "motion.first_touchdown(floor * 0.5, 1)",
   r"floor must hold contact counts \(whole numbers >= 0\)"),
  ("touchdown early negative", "motion.first_touchdown(floor, -1)",
   r"early must be an int >= 0, got -1"),
  ("touchdown early float", "motion.first_touchdown(floor, 1.5)",
   r"early must be an int >= 0, got 1.5"),
  ("touchdown early bool", "motion.first_touchdown(floor, True)",
   r"early must be an int >= 0, got True"),
  ("touchdown early an array", "motion.first_touchdown(floor, np.ones(2))",
   r"early must be an int >= 0, got \[1.0, 1.0\] \(shape \(2,\)\)"),
  # quintic, velocities, angular_momentum.
  ("quintic duration 0", "motion.quintic(0, 0, 0, 1, 0, 0, 0.0, 0.5)",
   r"duration must be a finite number > 0"),
  ("quintic duration NaN", "motion.quintic(0, 0, 0, 1, 0, 0, math.nan, 0.5)",
   r"duration must be a finite number > 0"),
  ("quintic duration negative", "motion.quintic(0, 0, 0, 1, 0, 0, -1.0, 0.5)",
   r"duration must be a finite number > 0"),
  ("quintic duration an array", "motion.quintic(0, 0, 0, 1, 0, 0, np.ones(2), 0.5)",
   r"duration must be a finite number > 0"),
  ("quintic p0 NaN", "motion.quintic(math.nan, 0, 0, 1, 0, 0, 1.0, 0.5)",
   r"p0 must be finite: nan"),
  ("quintic v1 inf", "motion.quintic(0, 0, 0, 1, [0, math.inf], 0, 1.0, 0.5)",
   r"v1 must be finite: inf at index \(1,\)"),
  ("quintic p0 a string", "motion.quintic('a', 0, 0, 1, 0, 0, 1.0, 0.5)",
   r"p0 must be an array of numbers, got 'a'"),
  ("quintic a1 None", "motion.quintic(0, 0, 0, 1, 0, None, 1.0, 0.5)",
   r"a1 must be an array of numbers, got None"),
  ("quintic a0 booleans", "motion.quintic(0, 0, [True, False], 1, 0, 0, 1.0, 0.5)",
   r"a0 must be an array of numbers"),
  ("quintic p0 and p1 of other shapes", "motion.quintic([0, 0], 0, 0, [1, 1, 1], 0, 0, 1.0, 0.5)",
   r"p1 must broadcast with the other ends to one shape P, got shape \(3,\) against p0 \(2,\)"),
  ("quintic v0 of another shape", "motion.quintic([0, 0], [0, 0, 0], 0, [1, 1], 0, 0, 1.0, 0.5)",
   r"v0 must broadcast with the other ends to one shape P, got shape \(3,\)"),
  ("quintic t NaN", "motion.quintic(0, 0, 0, 1, 0, 0, 1.0, math.nan)", r"t must be finite: nan"),
  ("quintic t inf in an array", "motion.quintic(0, 0, 0, 1, 0, 0, 1.0, [0.0, math.inf])",
   r"t must be finite: inf at index \(1,\)"),
  ("quintic t a string", "motion.quintic(0, 0, 0, 1, 0, 0, 1.0, 'now')",
   r"t must be an array of numbers, got 'now'"),
  ("velocities one pose", "motion.velocities(biped, bq0[None], 0.01)",
   r"qpos must have at least 2 poses to difference, got 1"),
  ("velocities qpos wrong width", "motion.velocities(biped, np.zeros((3, 8)), 0.01)",
   r"qpos must have shape \(any, 9\), got \(3, 8\)"),
  ("velocities qpos NaN", "motion.velocities(biped, bqpos * math.nan, 0.01)",
   r"qpos must be finite"),
  ("velocities dt 0", "motion.velocities(biped, bqpos, 0.0)", r"dt must be a finite number > 0"),
  ("velocities dt NaN", "motion.velocities(biped, bqpos, math.nan)", r"dt must be"),
  ("velocities dt inf", "motion.velocities(biped, bqpos, math.inf)",
   r"dt must be a finite number > 0.0, got inf"),
  ("velocities model None", "motion.velocities(None, bqpos, 0.01)",
   r"model must be a mujoco.MjModel, got NoneType"),
  # ballistic_flight.
  ("pitch_quat NaN", "motion.pitch_quat(math.nan)", r"angle must be a finite number, got nan"),
  ("pitch_quat two angles", "motion.pitch_quat(np.array([0.1, 0.2]))",
   r"angle must be a finite number, got \[0.1, 0.2\]"),
  ("quat_pitch a string", "motion.quat_pitch('w x y z')", r"quat must be an array of numbers"),
  ("quat_pitch None", "motion.quat_pitch(None)", r"quat must be an array of numbers"),
  ("quat_pitch three numbers", "motion.quat_pitch(np.zeros(3))",
   r"quat must have shape \(\.\.\., 4\), got \(3,\)"),
  ("quat_pitch a scalar", "motion.quat_pitch(1.0)",
   r"quat must have shape \(\.\.\., 4\), got \(\)"),
  ("quat_pitch booleans", "motion.quat_pitch(np.ones((2, 4), bool))",
   r"quat must be float32 or float64 numbers, got booleans"),
  ("ballistic_flight joints a string", "fly(joints='tuck')", r"joints must be an array of numbers"),
  ("ballistic_flight joints None", "fly(joints=None)", r"joints must be an array of numbers"),
  ("ballistic_flight one frame", "fly(joints=bqpos[:1])", r"joints must hold at least 2 frames"),
  ("ballistic_flight joints of the arm", "fly(joints=np.zeros((3, 4)))",
   r"joints must have shape \(any, 9\), got \(3, 4\)"),
  ("ballistic_flight joints inf", "fly(joints=bqpos * math.inf)", r"joints must be finite"),
  ("ballistic_flight dt NaN", "fly(dt=math.nan)", r"dt must be"),
  ("ballistic_flight dt negative", "fly(dt=-0.01)", r"dt must be a finite number > 0.0"),
  ("ballistic_flight pitch bool", "fly(pitch0=True)", r"pitch0 must be a finite number"),
  ("ballistic_flight pitch inf", "fly(pitch1=-math.inf)", r"pitch1 must be a finite number"),
  ("ballistic_flight com0 NaN", "fly(com0=[0.0, math.nan, 1.0])", r"com0 must be finite"),
  ("ballistic_flight vel0 a scalar", "fly(vel0=3.0)", r"vel0 must have shape \(3,\)"),
  ("ballistic_flight a fixed-base arm", "fly(model=arm, joints=np.zeros((3, 4)))",
   r"model's first joint must be a free joint"),
  ("ballistic_flight a model without joints", textwrap.dedent("""
    fly(model=mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom size="1"/></worldbody>'
                                             '</mujoco>'), joints=np.zeros((3, 0)))
    """), r"model's first joint must be a free joint"),
  ("ballistic_flight a body before the robot's root", textwrap.dedent("""
    # Body 1's subtree (a table) was measured as the robot: NaN momentum, no error.
    fly(model=mujoco.MjModel.from_xml_string(BIPED_XML.replace('<body name="torso"',
      '<body name="table" pos="5 0 0"><geom type="box" size=".5 .5 .5"/></body>'
      '<body name="torso"')))
    """), r"model's first joint must be a free joint at body 1"),
  ("ballistic_flight in zero gravity", textwrap.dedent("""
    still = mujoco.MjModel.from_xml_string(BIPED_XML)
    still.opt.gravity[:] = 0
    fly(model=still)
    """), r"model's gravity must point along -z, got \[0.0, 0.0, 0.0\]"),
  ("angular_momentum model None", "motion.angular_momentum(None, scratch, bq0, np.zeros(8))",
   r"model must be a mujoco.MjModel, got NoneType"),
  ("angular_momentum data a model", "motion.angular_momentum(biped, biped, bq0, np.zeros(8))",
   r"data must be a mujoco.MjData of model \(mujoco.MjData\(model\)\) or None, got MjModel"),
  ("angular_momentum data of another model",
   "motion.angular_momentum(biped, mujoco.MjData(arm), bq0, np.zeros(8))",
   r"data must be a mujoco.MjData of model .*got an MjData of another model \(nq 4, model's 9\)"),
  ("angular_momentum data of a model of the same nq and nv", textwrap.dedent("""
    # A data too small for the model's bodies: written past its arrays' ends, it corrupted the
    # heap (malloc_consolidate) or gave a wrong number when this table was written.
    big = mujoco.MjModel.from_xml_string(BIPED_XML.replace('<body name="left_foot"',
      '<body name="hat" pos="0 0 0.1"><geom type="sphere" size="0.01"/><body name="b2">'
      '<geom type="sphere" size="0.01"/><body name="b3"><geom type="sphere" size="0.01"/>'
      '</body></body></body><body name="left_foot"'))
    assert (big.nq, big.nv) == (biped.nq, biped.nv) and big.nbody > biped.nbody
    motion.angular_momentum(big, mujoco.MjData(biped), bq0, np.zeros(8), body=5)
    """), r"data must be a mujoco.MjData of model .*another model \(nbody 4, model's 7\)"),
  ("angular_momentum qpos wrong length",
   "motion.angular_momentum(biped, scratch, np.zeros(8), np.zeros(8))",
   r"qpos must have shape \(9,\), got \(8,\)"),
  ("angular_momentum qvel NaN",
   "motion.angular_momentum(biped, scratch, bq0, np.full(8, math.nan))", r"qvel must be finite"),
  ("angular_momentum body beyond nbody",
   "motion.angular_momentum(biped, scratch, bq0, np.zeros(8), body=biped.nbody)",
   r"body must be an int in \[0, 3\], got 4"),
  ("angular_momentum body negative",
   "motion.angular_momentum(biped, scratch, bq0, np.zeros(8), body=-1)", r"body must be an int"),
  ("angular_momentum body bool",
   "motion.angular_momentum(biped, scratch, bq0, np.zeros(8), body=True)",
   r"body must be an int in \[0, 3\], got True"),
  ("angular_momentum body a name",
   "motion.angular_momentum(biped, scratch, bq0, np.zeros(8), body='torso')",
   r"body must be an int in \[0, 3\], got 'torso'"),
  # pose_errors and tracking_cost.
  ("tracking_cost no bodies", "tracking(bodies=[])",
   r"bodies must be a non-empty sequence of body names"),
  ("tracking_cost body not a string", "tracking(bodies=[1])",
   r"bodies must be a non-empty sequence of body names"),
  ("tracking_cost body the model lacks", "tracking(bodies=['pelvis'])",
   r"no body named 'pelvis'"),
  ("tracking_cost xpos of two bodies", "tracking(xpos=np.zeros((F, 2, 3)))",
   r"xpos must have shape \(any, 1, 3\), got \(3, 2, 3\)"),
  ("tracking_cost xquat fewer frames", "tracking(xquat=bq[:2])",
   r"xquat must have shape \(3, 1, 4\), got \(2, 1, 4\)"),
  ("tracking_cost qpos wrong width", "tracking(qpos=np.zeros((F, 8)))",
   r"qpos must have shape \(3, 9\), got \(3, 8\)"),
  ("tracking_cost xpos NaN", "tracking(xpos=bx * math.nan)", r"xpos must be finite"),
  ("tracking_cost pos_weight negative", "tracking(pos_weight=-1.0)", r"pos_weight must be >= 0"),
  ("tracking_cost pos_weight NaN", "tracking(pos_weight=math.nan)", r"pos_weight must be finite"),
  ("tracking_cost pos_weight a string", "tracking(pos_weight='x')",
   r"pos_weight must be an array of numbers, got 'x'"),
  ("tracking_cost rot_weight negative", "tracking(rot_weight=-1.0)",
   r"rot_weight must be a finite number >= 0"),
  ("tracking_cost ctrl_weight NaN", "tracking(ctrl_weight=math.nan)", r"ctrl_weight must be"),
  ("tracking_cost pos_threshold inf", "tracking(pos_threshold=math.inf)", r"pos_threshold must be"),
  ("tracking_cost rot_threshold string", "tracking(rot_threshold='0.2')",
   r"rot_threshold must be"),
  ("tracking_cost model without a free root", textwrap.dedent("""
    s = mjbatch_jax.Simulator(arm, num_threads=1)
    x, q = motion.body_poses(arm, np.zeros((1, 4)), ['hand'])
    motion.tracking_cost(s, x, q, np.zeros((1, 4)), ['hand'])
    """), r"one actuator per hinge after a free root \(nu 0, nq 4\)"),
  ("pose_errors leading dimensions that do not broadcast",
   "motion.pose_errors(np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((3, 3)), np.zeros((3, 4)))",
   r"xpos, xquat, ref_pos and ref_quat must be .* broadcast to one shape, got xpos \(2, 3\), "
   r"xquat \(2, 4\), ref_pos \(3, 3\), ref_quat \(3, 4\)"),
  ("pose_errors xquat of three numbers",
   "motion.pose_errors(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 4)))",
   r"xquat must have shape \(\.\.\., any, 4\), got \(2, 3\)"),
  ("pose_errors ref_pos one position", "motion.pose_errors(bx, bq, np.zeros(3), bq)",
   r"ref_pos must have shape \(\.\.\., any, 3\), got \(3,\)"),
  ("pose_errors strings", "motion.pose_errors('a', 'b', 'c', 'd')",
   r"xpos must be an array of numbers, got 'a'"),
  ("pose_errors ref_quat None", "motion.pose_errors(bx, bq, bx, None)",
   r"ref_quat must be an array of numbers, got None"),
  ("pose_errors loose_root an int", "motion.pose_errors(bx, bq, bx, bq, loose_root=1)",
   r"loose_root must be True or False, got 1"),
  ("tracking_cost sim an MjModel", "tracking(sim=biped)",
   r"sim must be a mjbatch_jax.Simulator \(of the tracked model\), got MjModel"),
  ("tracking_cost sim None", "tracking(sim=None)",
   r"sim must be a mjbatch_jax.Simulator .*got NoneType"),
  ("tracking_cost bodies a string", "tracking(bodies='torso')",
   r"bodies must be a non-empty sequence of body names, got 'torso'"),
  ("tracking_cost bodies None", "tracking(bodies=None)",
   r"bodies must be a non-empty sequence of body names, got None"),
  ("tracking_cost pos_weight of two bodies", "tracking(pos_weight=np.ones((2, 3)))",
   r"pos_weight must be a number or have shape \(B, 3\) = \(1, 3\) .*got shape \(2, 3\)"),
  ("tracking_cost no frames",
   "tracking(xpos=np.zeros((0, 1, 3)), xquat=np.zeros((0, 1, 4)), qpos=np.zeros((0, 9)))",
   r"xpos must hold at least one frame, got shape \(0, 1, 3\)"),
  ("tracking_cost loose_root an int", "tracking(loose_root=1)",
   r"loose_root must be True or False, got 1"),
  # standing_cost(sim, floor, feet, ctrl, height, weights).
  ("standing_cost sim None", "standing(sim=None)", r"sim must be a mjbatch_jax.Simulator"),
  ("standing_cost fixed base", "standing(sim=mjbatch_jax.Simulator(arm, num_threads=1))",
   r"free joint at its root body"),
  ("standing_cost floor a string", "standing(floor='feet')", r"floor must be sensordata columns"),
  ("standing_cost floor one column", "standing(floor=[2])",
   r"floor must hold at least two columns"),
  ("standing_cost floor past the sensors", "standing(floor=[0, 1, 3])",
   r"floor\[2\] must be an int in \[0, 2\], got 3"),
  ("standing_cost floor a float", "standing(floor=[0, 1.0, 2])", r"floor\[1\] must be an int"),
  ("standing_cost foot unknown", "standing(feet=['left_foot', 'nose'])", r"no body named 'nose'"),
  ("standing_cost feet a string", "standing(feet='left_foot')",
   r"feet must be a non-empty sequence of body names"),
  ("standing_cost feet empty", "standing(feet=[])", r"feet must be a non-empty sequence"),
  ("standing_cost ctrl wrong length", "standing(ctrl=np.zeros(3))",
   r"ctrl must have shape \(2,\), got \(3,\)"),
  ("standing_cost ctrl NaN", "standing(ctrl=[0.0, math.nan])", r"ctrl must be finite"),
  ("standing_cost height NaN", "standing(height=math.nan)", r"height must be a finite number"),
  ("standing_cost height a string", "standing(height='tall')", r"height must be"),
  ("standing_cost weight negative", "standing(weights=motion.StandingWeights(touch=-1.0))",
   r"weights.touch must be a finite number >= 0(.0)?, got -1.0"),
  ("standing_cost weights three numbers", "standing(weights=(1.0, 2.0, 3.0))",
   r"weights must be a motion.StandingWeights \(seven numbers\)"),
  ("standing_cost weights a dict", "standing(weights={'touch': 1.0})",
   r"weights must be a motion.StandingWeights"),
  # phase_derivatives(model, qpos, dt, contact).
  ("phase_derivatives contact ints", "motion.phase_derivatives(biped, bqpos, 0.01, [1, 0, 1])",
   r"contact must be \(3,\) booleans, one per pose"),
  ("phase_derivatives contact short", "motion.phase_derivatives(biped, bqpos, 0.01, down[:2])",
   r"contact must be \(3,\) booleans"),
  ("phase_derivatives a lone pose on the floor",
   "motion.phase_derivatives(biped, bqpos, 0.01, np.array([False, False, True]))",
   r"the phase of poses 2..2 \(on the floor\) has fewer than 2 poses"),
  ("phase_derivatives one pose", "motion.phase_derivatives(biped, bqpos[:1], 0.01, down[:1])",
   r"qpos must have at least 2 poses"),
  ("phase_derivatives qpos NaN", "motion.phase_derivatives(biped, bqpos * math.nan, 0.01, down)",
   r"qpos must be finite"),
  ("phase_derivatives dt 0", "motion.phase_derivatives(biped, bqpos, 0.0, down)",
   r"dt must be a finite number > 0"),
  # SynergyProgram(synergy, base, dt, ...) and its calls.
  ("SynergyProgram synergy not 0 or 1", "program(synergy=[[0.5, 0.0], [0.0, 1.0]])",
   r"synergy must hold 0 and 1, each actuator in at most one synergy"),
  ("SynergyProgram synergies overlap", "program(synergy=[[1.0, 1.0], [0.0, 1.0]])",
   r"each actuator in at most one synergy"),
  ("SynergyProgram synergy NaN", "program(synergy=[[math.nan, 0.0]])", r"synergy must be finite"),
  ("SynergyProgram synergy empty", "program(synergy=np.zeros((0, 2)))",
   r"synergy must be \(S, nu\) with S, nu >= 1"),
  ("SynergyProgram base other width", "program(base=np.zeros((10, 3)))",
   r"base must have shape \(any, 2\), got \(10, 3\)"),
  ("SynergyProgram base NaN", "program(base=np.full(2, math.nan), frames=5)",
   r"base must be finite"),
  ("SynergyProgram one base and no frames", "program(base=np.zeros(2))",
   r"frames must be an int >= 1, got None"),
  ("SynergyProgram frames against base", "program(frames=11)",
   r"frames \(11\) must be base's first dimension \(10\)"),
  ("SynergyProgram dt 0", "program(dt=0.0)", r"dt must be a finite number > 0"),
  ("SynergyProgram start negative", "program(start=-0.1)", r"start must be a finite number >= 0"),
  ("SynergyProgram ramp 0", "program(ramp_s=0.0)", r"ramp_s must be a finite number > 0"),
  ("SynergyProgram interpolation unknown", "program(interpolation='cubic')",
   r"interpolation must be one of \('hold', 'linear'\)"),
  ("SynergyProgram durations reversed", "program(durations=(0.5, 0.1))",
   r"durations must be \(lo, hi\) with lo <= hi"),
  ("SynergyProgram durations NaN", "program(durations=(math.nan, 0.1))", r"durations\[0\] must"),
  ("SynergyProgram ctrlrange reversed", "program(ctrlrange=[[1.0, -1.0]] * 2)",
   r"ctrlrange must be \(nu, 2\) limits, each lower <= upper"),
  ("SynergyProgram z of a partial phase", "program()(np.zeros(5))",
   r"a program must be P phases of 3 numbers .*got shape \(5,\)"),
  ("SynergyProgram z empty", "program().masks(np.zeros(0))", r"a program must be P phases"),
  ("SynergyProgram z a string", "program()('crouch')", r"z must be an array of numbers"),
  ("SynergyProgram base of no knot", "program(base=np.zeros((0, 2)))",
   r"base must hold at least one knot's controls"),
  ("SynergyProgram retarget ctrl 1-D",
   "program().retarget(np.zeros(2), np.ones((1, 1), bool), [0])",
   r"ctrl must be \(F, 2\), got shape \(2,\)"),
  ("SynergyProgram retarget ctrl of other actuators",
   "program().retarget(np.zeros((10, 3)), np.ones((1, 10), bool), [0])",
   r"ctrl must be \(F, 2\), got shape \(10, 3\)"),
  ("SynergyProgram retarget ctrl NaN", "program().retarget(np.full((10, 2), math.nan), "
   "np.ones((1, 10), bool), [0])", r"ctrl must not hold NaN or inf: nan at index \(0, 0\)"),
  ("SynergyProgram retarget masks of 0 and 1",
   "program().retarget(np.zeros((10, 2)), np.ones((1, 10)), [0])",
   r"masks must be \(K, 10\) bool, got float64 of shape \(1, 10\)"),
  ("SynergyProgram retarget masks of other knots",
   "program().retarget(np.zeros((10, 2)), np.ones((1, 8), bool), [0])",
   r"masks must be \(K, 10\) bool"),
  ("SynergyProgram retarget targets short",
   "program().retarget(np.zeros((10, 2)), np.ones((2, 10), bool), [0])",
   r"targets must be 2 phases of 2 synergy targets, \(2, 2\) or flat \(4,\), got shape \(1,\)"),
  ("SynergyProgram retarget targets (S, K)",  # once taken as (K, S): the phases mixed
   "program(synergy=np.eye(3), base=np.zeros((10, 3))).retarget(np.zeros((10, 3)), "
   "np.ones((2, 10), bool), np.zeros((3, 2)))",
   r"targets must be 2 phases of 3 synergy targets, \(2, 3\) or flat \(6,\), got shape \(3, 2\)"),
  ("SynergyProgram z transposed", "program()(np.zeros((3, 2)))",  # once reshaped, mixed
   r"a program must be P phases of 3 numbers \(S targets and a duration\), flat or \(P, 3\), "
   r"got shape \(3, 2\)"),
  ("SynergyProgram z 3-D", "program()(np.zeros((1, 2, 3)))",
   r"flat or \(P, 3\), got shape \(1, 2, 3\)"),
  ("SynergyProgram z NaN", "program()(np.array([math.nan, 0.0, 0.1]))",
   r"z must not hold NaN or inf: nan at index \(0,\)"),
  ("SynergyProgram masks z inf", "program().masks(np.array([0.0, 0.0, math.inf]))",
   r"z must not hold NaN or inf: inf at index \(2,\)"),
  ("SynergyProgram durations one number", "program(durations=0.5)",
   r"durations must be \(lo, hi\), a phase's shortest and longest duration \(s\), or None, "
   r"got 0.5"),
  ("SynergyProgram durations three numbers", "program(durations=(0.1, 0.2, 0.3))",
   r"durations must be \(lo, hi\)"),
  ("SynergyProgram retarget targets strings",
   "program().retarget(np.zeros((10, 2)), np.ones((1, 10), bool), ['a'])",
   r"targets must be an array of numbers"),
]

# Snippets whose own asserts state the fixed behaviour: (name, snippet).
HOLDS = [
  # An array in metadata is kept as JSON keeps it, a list (as a numpy scalar is kept as a number).
  ("make metadata of an array: a list, saved and loaded", textwrap.dedent("""
    made = motion.make(arm, np.zeros((F, 4)), 0.02, metadata={'a': q0, 'n': np.int64(2)})
    assert made.metadata == {'a': q0.tolist(), 'n': 2}
    motion.save(os.path.join(folder, 'meta.npz'), made, arm)
    assert motion.load(os.path.join(folder, 'meta.npz'), arm).metadata == made.metadata
    """)),
  ("first_touchdown reads each run", textwrap.dedent("""
    first, bad = motion.first_touchdown(np.stack([floor[3:], floor[3:] * 0]), 2)
    assert first.tolist() == [5, 0] and bad.tolist() == [False, True]
    """)),
  ("standing_cost is zero standing still, counts other bodies on the floor", textwrap.dedent("""
    import jax.numpy as jnp
    cost = standing()
    data = mujoco.MjData(ssim.model)
    mujoco.mj_kinematics(ssim.model, data)
    mujoco.mj_comPos(ssim.model, data)
    obs = {'sensordata': jnp.array([2.0, 2.0, 4.0]), 'subtree_com': jnp.asarray(data.subtree_com),
           'xpos': jnp.asarray(data.xpos)}
    x = jnp.zeros(ssim.nstate).at[ssim.layout.qpos].set(bq0)
    r = cost.residual(x, jnp.zeros(2), obs, 0)
    np.testing.assert_allclose(r, 0.0, atol=1e-12)
    r = cost.residual(x, jnp.zeros(2), obs | {'sensordata': jnp.array([2.0, 1.0, 5.0])}, 0)
    assert r[0] == 2.0 and r.shape == (1 + 1 + 2 + 2 + 6 + 2 + 2,)
    """)),
  ("SynergyProgram holds its base outside its phases, then ramps to its last", textwrap.dedent("""
    base = np.arange(20.0).reshape(10, 2)
    u = np.asarray(program(base=base, synergy=[[1.0, 0.0]], start=0.3)([5.0, 0.2]))
    assert np.array_equal(u[:5, 1], base[:5, 1]) and np.array_equal(u[:3, 0], base[:3, 0])
    assert np.array_equal(u[3:6, 0], [5.0, 5.0, 5.0])  # the ramp's first knot: still the target
    assert np.array_equal(u[7:], np.broadcast_to(base[-1], (3, 2)))
    assert program(base=base, synergy=[[1.0, 0.0]], start=0.3).masks([5.0, 0.2]).tolist() == [
      [False] * 3 + [True] * 2 + [False] * 5]
    """)),
  ("make and phase_derivatives check every argument before any kinematics", textwrap.dedent("""
    # Checked once only after every frame's kinematics (1.4 s on the G1's 200,000 frames).
    from mjbatch_jax.motion import clip as clip_module, trajectory
    def refuse(*args, **kwargs):
      raise AssertionError("kinematics ran before the arguments were checked")
    kept = clip_module.body_poses, trajectory.velocities
    clip_module.body_poses, trajectory.velocities = refuse, refuse
    try:
      for bad, pattern in ((dict(dt=0.0), "dt must be"), (dict(qvel=np.zeros(3)), "qvel must"),
                           (dict(contact=np.zeros(3, int)), "contact must be booleans")):
        try:
          motion.make(arm, np.tile(q0, (F, 1)), **({"dt": 0.02} | bad))
        except ValueError as e:
          assert pattern in str(e), e
        else:
          raise AssertionError(f"make accepted {bad}")
      # The last pose alone on the floor: found before the phases ahead of it are differenced.
      try:
        motion.phase_derivatives(biped, np.tile(bq0, (4, 1)), 0.01,
                                 np.r_[True, True, False, True])
      except ValueError as e:
        assert "poses 3..3 (on the floor) has fewer than 2 poses" in str(e), e
      else:
        raise AssertionError("a one-pose phase accepted")
    finally:
      clip_module.body_poses, trajectory.velocities = kept
    """)),
  ("IK zero iterations returns the start", textwrap.dedent("""
    solution = ik.solve(q0 + 0.1, reach, iterations=0)
    np.testing.assert_array_equal(solution.qpos, q0 + 0.1)
    assert solution.iterations == 0 and solution.error == math.inf
    """)),
  ("IK one axis, numpy scalars, a zero weight", textwrap.dedent("""
    # The zero-weight centre of mass pulls nothing (its error still counts in Solution.error).
    tasks = [motion.BodyPosition('hand', [0.5], axes=(np.int64(0),), weight=np.float32(2)),
             motion.CentreOfMass([0.0, 0.0, 0.0], weight=0),
             motion.JointAngles({'wrist': np.float32(0.3)})]
    bent = np.array([0.0, 0.3, -0.8, 0.0])  # the straight arm cannot shorten at first order
    solution = ik.solve(bent, tasks, iterations=np.int64(40))
    data = ik.kinematics(solution.qpos)
    assert abs(data.xpos[arm.body('hand').id][0] - 0.5) < 1e-3, solution
    assert abs(solution.qpos[3] - 0.3) < 0.01 and solution.error > 0.1, solution
    """)),
  ("IK null_space on the biped with a held root", textwrap.dedent("""
    solver = motion.IK(biped, bq0, mode='null_space', active_set_passes=1)
    solution = solver.solve(bq0, [motion.JointAngles({'left_hip': 0.5})], iterations=5,
                            free_root=False)
    np.testing.assert_array_equal(solution.qpos[:7], bq0[:7])
    assert abs(solution.qpos[7] - 0.5) < 1e-6
    """)),
  ("IK keeps joints in range for a target out of reach", textwrap.dedent("""
    solution = ik.solve(q0, [motion.BodyPosition('hand', [5.0, 5.0, 5.0])], iterations=30)
    lo, hi = arm.jnt_range.T
    assert np.all(solution.qpos >= lo) and np.all(solution.qpos <= hi), solution.qpos
    """)),
  ("IK objects solve from several threads", textwrap.dedent("""
    targets = [[0.4, 0.1, 0.6], [0.3, -0.2, 0.7], [0.5, 0.0, 0.4], [0.2, 0.3, 0.5]]
    def solve(target):
      return motion.IK(arm).solve(q0, [motion.BodyPosition('hand', target)], iterations=30).qpos
    serial = [solve(t) for t in targets]
    out = [None] * len(targets)
    def run(i):
      out[i] = solve(targets[i])
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(targets))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for a, b in zip(out, serial):
      np.testing.assert_array_equal(a, b)
    """)),
  ("one IK shared by 8 threads gives each its serial answer", textwrap.dedent("""
    # The IK computes in one MjData: threads that interleave within a solve read each other's
    # kinematics (silently wrong answers when this table was written). The first task's target
    # sleeps when subtracted from, so that every iteration lets the other threads run.
    import time
    class Yielding(np.ndarray):
      def __sub__(self, other):
        time.sleep(1e-4)
        return np.asarray(self) - other
    targets = [[0.4, 0.1, 0.6], [0.3, -0.2, 0.7], [0.5, 0.0, 0.4], [0.2, 0.3, 0.5]] * 2
    def solve(target):
      hand = motion.BodyPosition('hand', target)
      object.__setattr__(hand, 'target', hand.target.view(Yielding))
      tasks = [hand, motion.BodyPosition('fore', [0.2, 0.0, 0.6], weight=0.1)]
      return ik.solve(q0, tasks, iterations=20).qpos
    serial = [solve(t) for t in targets]
    out = [None] * len(targets)
    def run(i):
      out[i] = solve(targets[i])
      ik.kinematics(q0)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(targets))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for a, b in zip(out, serial):
      np.testing.assert_array_equal(a, b)
    """)),
  ("feasibility of one frame, per-body contact", textwrap.dedent("""
    result = feasible(qpos=bq0[None], qvel=np.zeros((1, 8)), qacc=np.zeros((1, 8)),
                      contact=np.array([[True, False]]), sole=[sole, sole],
                      checked=np.ones(1, bool))
    assert result.torque.shape == (1, 2) and result.force.shape == (1, 2, 3)
    assert np.all(result.force[0, 1] == 0)  # off the floor: no force
    """)),
  ("feasibility in flight has no contact margins", textwrap.dedent("""
    result = feasible(contact=np.zeros(F, bool))
    assert 'normal force N' not in result.worst and result.flight_wrench > 0
    """)),
  ("make, save and load of one frame and no bodies", textwrap.dedent("""
    one = motion.make(arm, q0[None], 1e-3)
    path = motion.save(os.path.join(folder, 'one.npz'), one, arm)
    back = motion.load(str(path), arm)
    assert back.frames == 1 and back.xpos.shape == (1, 0, 3) and back.bodies == ()
    np.testing.assert_array_equal(back.qpos, one.qpos)
    """)),
  ("load refuses nothing a clip of its model holds", textwrap.dedent("""
    c = motion.make(biped, bqpos, 0.02, ('torso', 'left_foot'), qvel=bzeros,
                    contact=np.ones((F, 2), bool), metadata={'name': 'stand', 'n': 3})
    back = motion.load(motion.save(os.path.join(folder, 'full.npz'), c, biped), biped)
    assert back.metadata == {'name': 'stand', 'n': 3} and back.contact.dtype == bool
    """)),
  ("floor sensors of a robot subtree only", textwrap.dedent("""
    s = spec()
    names = motion.floor_contact_sensors(s, {}, robot='torso', prefix='ground')
    assert names == ('ground robot',)
    model = s.compile()
    assert model.nsensor == 1
    """)),
  ("landing of empty and contact-free runs", textwrap.dedent("""
    none = land(floor=np.zeros((0, 3)), height=np.zeros(0))
    assert (none.takeoff, none.touchdown, none.landed) == (0, 0, False)
    away = land(floor=np.zeros((5, 2)), height=np.ones(5))  # never comes down
    assert away.touchdown == 5 and not away.landed and away.flight_s == 0.25
    done = land()
    assert done.landed and done.takeoff == 3 and done.touchdown == 8, done
    """)),
  ("feasibility summary and record name every actuator, from threads too", textwrap.dedent("""
    import json
    result = feasible()
    names = [f"#{i}" for i in range(biped.nu)]  # the biped's servos have no names
    assert list(result.actuators) == names and all(not biped.actuator(i).name for i in range(2))
    assert result.summary(np.int64(1)).count(",") == 0
    assert result.summary(100).count(",") == biped.nu - 1  # top beyond nu: every actuator
    record = json.loads(json.dumps(result.record()))
    assert list(record["torque_ratio"]) == names and record["feasible"] == result.ok
    lines = []
    workers = [threading.Thread(target=lambda: lines.append(result.summary())) for _ in range(4)]
    [w.start() for w in workers]; [w.join() for w in workers]
    assert len(set(lines)) == 1 and len(lines) == 4
    """)),
  ("quintic holds its ends and takes numpy scalars", textwrap.dedent("""
    out = motion.quintic(np.float32(0), 0, 0, 1, 0, 0, np.float64(2.0), np.array([-1.0, 5.0]))
    np.testing.assert_array_equal(out, [0.0, 1.0])
    assert motion.quintic(0, 0, 0, [1, 2], 0, 0, 1, 0.5).shape == (2,)
    """)),
  ("quintic broadcasts scalar ends against array ends over times", textwrap.dedent("""
    t = np.array([0.0, 0.25, 0.5, 1.0])
    out = motion.quintic(0, 0, 0, [1.0, 2.0], 0, 0, 1.0, t)
    assert out.shape == (4, 2)  # t.shape + P (a scalar p0 once left it (4,) against (2,))
    np.testing.assert_array_equal(out, motion.quintic([0.0, 0.0], 0, 0, [1.0, 2.0], 0, 0, 1.0, t))
    """)),
  ("velocities of two poses", textwrap.dedent("""
    out = motion.velocities(biped, np.stack([bq0, bq0]), np.float32(0.01))
    assert out.shape == (2, 8) and np.all(out == 0)
    """)),
  ("angular_momentum of a model at rest", textwrap.dedent("""
    out = motion.angular_momentum(biped, scratch, bq0, np.zeros(8), body=np.int64(0))
    assert out.shape == (3,) and np.all(out == 0)
    """)),
  ("angular_momentum without data, or with a data of a copy of the model", textwrap.dedent("""
    import copy
    qvel = np.linspace(-1, 1, 8)
    want = motion.angular_momentum(biped, scratch, bq0, qvel)
    np.testing.assert_array_equal(motion.angular_momentum(biped, None, bq0, qvel), want)
    other = mujoco.MjData(copy.copy(biped))  # another MjModel object of the same sizes
    np.testing.assert_array_equal(motion.angular_momentum(biped, other, bq0, qvel), want)
    """)),
  ("save leaves no file where it refuses or fails", textwrap.dedent("""
    before = sorted(os.listdir(folder))
    for path in (folder, os.path.join(saved, 'x.npz')):
      try:
        motion.save(path, clip, arm)
      except ValueError:
        pass
    real = archive.np.savez_compressed
    def failing(file, **arrays):  # a write that fails half way (a full disk)
      real(file, **arrays)
      raise OSError('no space left on device')
    archive.np.savez_compressed = failing
    try:
      motion.save(os.path.join(folder, 'full.npz'), clip, arm)
      raise AssertionError('the failing write raised nothing')
    except OSError:
      pass
    finally:
      archive.np.savez_compressed = real
    assert sorted(os.listdir(folder)) == before, (before, os.listdir(folder))
    assert not os.path.exists(folder + '.tmp.npz')  # what saving to the folder itself left
    """)),
  ("ballistic_flight leaves its joints alone", textwrap.dedent("""
    joints = bqpos.copy()
    out = fly(joints=joints)
    assert np.array_equal(joints, bqpos) and np.array_equal(out.qpos[:, 7:], bqpos[:, 7:])
    assert np.isfinite(out.qpos).all() and out.pitch[0] == 0.0 and out.pitch[-1] == -1.0
    """)),
  ("tracking_cost is zero on its own clip", textwrap.dedent("""
    import jax.numpy as jnp
    cost = tracking(pos_weight=np.ones((1, 3)))
    data = mujoco.MjData(biped)
    data.qpos[:] = bq0
    mujoco.mj_kinematics(biped, data)
    obs = {'xpos': jnp.asarray(data.xpos), 'xquat': jnp.asarray(data.xquat)}
    r = cost.residual(None, jnp.asarray(bq0[7:]), obs, 0)
    np.testing.assert_allclose(r, 0.0, atol=1e-12)
    """)),
]

CASES = ([(name, code, ("raises", "ValueError", pattern)) for name, code, pattern in REFUSED]
         + [(name, code, ("ok",)) for name, code in HOLDS])


results, test_names_are_unique, test_case = table_tests(PRELUDE, CASES)
