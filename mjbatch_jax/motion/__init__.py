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
  done = motion.landing(sensordata[:, columns], qpos[:, 2], dt, min_flight=0.1,
                        upright_height=0.6)                   # a jump's flight and landing
  first, bad = motion.first_touchdown(sensordata[..., columns], early=30)  # traced, many runs
  com = motion.quintic(p0, v0, a0, p1, v1, a1, duration, t)   # smooth segments, their rates
  ctrls = motion.SynergyProgram(synergy, stand_ctrl, dt=0.02, frames=150, ramp_s=0.5)(z)
  cost = motion.standing_cost(sim, columns, ["foot"], stand_ctrl, 0.75)  # a landing's MPC
  flight = motion.ballistic_flight(model, tuck, dt, pitch0=0.3, pitch1=0.2 - 2 * np.pi,
                                   com0=com, vel0=v)          # a flip's turn in the air

Each module holds one idea: ik (IK and its tasks), clip (the clip format), feasibility (inverse
dynamics of a motion against a robot's limits), sensors (floor-contact sensors on an MjSpec),
flight (a run's flight and landing from those sensors), trajectory (quintic segments, velocities
of a pose sequence, angular momentum), ballistic (a flip's flight from conservation of momentum),
tracking (a cost that tracks a clip's bodies), standing (a cost that keeps a robot standing),
program (a plan of synergy targets in a few numbers, for a search).
See docs/motion.md.
"""

from mjbatch_jax.motion.ballistic import Flight, ballistic_flight, pitch_quat, quat_pitch
from mjbatch_jax.motion.clip import Clip, body_poses, fingerprint, load, make, save
from mjbatch_jax.motion.feasibility import Feasibility, Sole, feasibility
from mjbatch_jax.motion.flight import Landing, first_touchdown, landing
from mjbatch_jax.motion.ik import (
  IK,
  BodyOrientation,
  BodyPosition,
  CentreOfMass,
  JointAngles,
  Solution,
  SolvedFrames,
  Task,
)
from mjbatch_jax.motion.program import SynergyProgram
from mjbatch_jax.motion.sensors import floor_contact_sensors
from mjbatch_jax.motion.standing import StandingWeights, standing_cost
from mjbatch_jax.motion.tracking import pose_errors, tracking_cost
from mjbatch_jax.motion.trajectory import (
  angular_momentum,
  phase_derivatives,
  quintic,
  velocities,
)

__all__ = [
  "IK",
  "BodyOrientation",
  "BodyPosition",
  "CentreOfMass",
  "Clip",
  "Feasibility",
  "Flight",
  "JointAngles",
  "Landing",
  "Sole",
  "Solution",
  "SolvedFrames",
  "StandingWeights",
  "SynergyProgram",
  "Task",
  "angular_momentum",
  "ballistic_flight",
  "body_poses",
  "feasibility",
  "fingerprint",
  "first_touchdown",
  "floor_contact_sensors",
  "landing",
  "load",
  "phase_derivatives",
  "make",
  "pitch_quat",
  "pose_errors",
  "quat_pitch",
  "quintic",
  "save",
  "standing_cost",
  "tracking_cost",
  "velocities",
]
