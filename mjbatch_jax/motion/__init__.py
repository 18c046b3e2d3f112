"""Whole-body motion: inverse kinematics, reference clips, feasibility, contact sensors.

The pieces that turn a motion idea into something a tracker can follow, for any MuJoCo robot
named by its bodies and joints:

  from mjbatch_jax import motion
  ik = motion.IK(model, posture)                        # tasks -> joint angles, per frame
  qpos = ik.solve(qpos, [motion.BodyPosition("foot", p), motion.CentreOfMass(c)]).qpos
  clip = motion.make(model, frames_qpos, dt=0.02, bodies=("pelvis",))  # poses per frame
  motion.save("clip.npz", clip, model); clip = motion.load("clip.npz", model)
  result = motion.feasibility(model, qpos, qvel, qacc, contact, ["foot"], motion.Sole(...))
  names = motion.floor_contact_sensors(spec, ["left_foot", "right_foot"], robot="pelvis")

Each module holds one idea: ik (IK and its tasks), clip (the clip format), feasibility (inverse
dynamics of a motion against a robot's limits), sensors (floor-contact sensors on an MjSpec),
tracking (a cost that tracks a clip's bodies).
See docs/motion.md.
"""

from mjbatch_jax.motion.clip import Clip, body_poses, fingerprint, load, make, save
from mjbatch_jax.motion.feasibility import Feasibility, Sole, feasibility
from mjbatch_jax.motion.ik import (
  IK,
  BodyOrientation,
  BodyPosition,
  CentreOfMass,
  JointAngles,
  Solution,
  Task,
)
from mjbatch_jax.motion.sensors import floor_contact_sensors
from mjbatch_jax.motion.tracking import pose_errors, tracking_cost

__all__ = [
  "IK",
  "BodyOrientation",
  "BodyPosition",
  "CentreOfMass",
  "Clip",
  "Feasibility",
  "JointAngles",
  "Sole",
  "Solution",
  "Task",
  "body_poses",
  "feasibility",
  "fingerprint",
  "floor_contact_sensors",
  "load",
  "make",
  "pose_errors",
  "save",
  "tracking_cost",
]
