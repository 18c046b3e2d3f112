"""A backflip on the Unitree G1: a reference built from physics, tracked whole-body by iLQR.

  python examples/g1_backflip.py [--frames 200] [--iterations 60] [--threads 0]
  python examples/g1_backflip.py --reference      # build and check the reference only
  python examples/g1_backflip.py --play           # replay the saved plan: metrics, plots, GIF

The reference (no motion-capture clip ships offline, so it is made here):

- phases: stand, crouch with the arms back, push-off with the arms swinging overhead, a ballistic
  flight, a tucked backward turn, landing on both feet, absorbing, standing up, standing;
- the centre of mass follows quintic paths on the ground and, in flight, the parabola of the
  take-off velocity under g: the flight time is when that parabola brings the centre of mass to
  the height of the landing pose; its apex is v_z^2 / 2g above the take-off;
- in flight the angular momentum about the centre of mass is constant, so the pelvis's pitch rate
  is (L - h(q, dq)) / I(q), with I the whole body's pitch inertia about its centre of mass and h
  the momentum of the joints' motion (mj_subtreeVel) as the legs tuck and extend. L is the one
  value that turns the pelvis from its take-off pitch to its landing pitch a full turn later,
  and the push-off's pitch rate at take-off is solved so that the ground phase hands exactly
  that L to the flight;
- joint angles at every frame by damped least squares on MuJoCo's Jacobians (mj_jacBody,
  mj_jacSubtreeCom): feet fixed on the floor, centre of mass and pelvis pitch on their paths,
  arm swing as joint targets; in flight the tuck is solved in the pelvis frame and the root is
  placed by the momentum and the parabola.

Feasibility: the reference's velocities and accelerations (finite differences of a 5 ms grid)
go through inverse dynamics (mj_inverse without contacts): the root's rows give the wrench the
floor must supply, split between the feet; the rest are joint torques, compared with the G1's
actuator limits (jnt_actfrcrange). The floor's wrench must push (normal force > 0), stay in the
friction cone and keep each foot's centre of pressure under the sole. The take-off velocity,
apex, flight time, angular momentum and the worst margins are printed; when a flip exceeds a
limit, the nearest feasible one (higher apex, longer tuck) is searched for and used.
"""

import argparse
import copy
import dataclasses
import os
import sys
import time
from pathlib import Path

# --play renders headless; the GL backend is chosen when mujoco first renders.
os.environ.setdefault("MUJOCO_GL", "egl")

import common  # noqa: E402
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

G = 9.81  # m/s^2, checked against the model's gravity
FRAME_DT = 0.02  # s per frame of the clip and per knot of the plan
FINE = 4  # the reference is built on a grid FINE times finer, for its derivatives
CLIP_FRAMES = 200
FEET = ("left_ankle_roll_link", "right_ankle_roll_link")
SIDES = ("left", "right")
# The sole: the four contact spheres of each foot (radius 0.005) in the ankle roll link's frame.
SOLE_X = (-0.05, 0.12)  # m, heel and toe
SOLE_HALF_WIDTH = 0.025  # m, the inner edge of the narrower (heel) pair
SOLE_Z = -0.035  # m, the sole's height under the ankle roll link


# ------------------------------------------------------------------------------ small helpers


def quintic(p0, v0, a0, p1, v1, a1, duration: float, t):
  """The quintic from (position, velocity, acceleration) at 0 to those at duration, at t."""
  p0, v0, a0, p1, v1, a1 = (np.asarray(x, float) for x in (p0, v0, a0, p1, v1, a1))
  T = duration
  s = np.clip(np.asarray(t, float) / T, 0.0, 1.0)
  s = s.reshape(s.shape + (1,) * p0.ndim)
  # Coefficients of the normalised polynomial in s (velocities scaled by T, accelerations T^2).
  c0, c1, c2 = p0, v0 * T, 0.5 * a0 * T * T
  d = p1 - c0 - c1 - c2
  e = v1 * T - c1 - 2 * c2
  f = a1 * T * T - 2 * c2
  c3 = 10 * d - 4 * e + 0.5 * f
  c4 = -15 * d + 7 * e - f
  c5 = 6 * d - 3 * e + 0.5 * f
  return c0 + s * (c1 + s * (c2 + s * (c3 + s * (c4 + s * c5))))


def pitch_quat(angle: float) -> np.ndarray:
  """A rotation by angle about the world's y axis (positive: nose down)."""
  return np.array([np.cos(angle / 2), 0.0, np.sin(angle / 2), 0.0])


def pitch_of(xmat: np.ndarray) -> float:
  """The pitch of a frame about y, from where its x axis points in the x-z plane."""
  m = np.asarray(xmat).reshape(3, 3)
  return float(np.arctan2(-m[2, 0], m[0, 0]))


def _wrap(angle: float) -> float:
  """angle in (-pi, pi]."""
  return float(np.angle(np.exp(1j * angle)))


def rotation_error(target: np.ndarray, current: np.ndarray, xmat: np.ndarray) -> np.ndarray:
  """World-frame rotation vector taking current to target (mj_jacBody's jacr is world-frame)."""
  local = np.zeros(3)
  mujoco.mju_subQuat(local, target, current)
  return np.asarray(xmat).reshape(3, 3) @ local


# ------------------------------------------------------------------------------------ the flip


@dataclasses.dataclass(frozen=True)
class Flip:
  """What shapes the flip. Times in s, heights in m, angles in rad (pitch: positive nose down).

  Centre-of-mass positions along x are relative to the ankles; heights are above the floor.
  Upper-body poses are (shoulder pitch, elbow, waist pitch): the waist tilts the torso relative
  to the pelvis (positive: forward).
  """

  stand_s: float = 0.20  # standing still at the start
  crouch_s: float = 0.60  # down into the crouch, the arms swinging back
  tuck_in_s: float = 0.15  # in flight: from take-off to the full tuck
  tuck_out_s: float = 0.15  # in flight: from the full tuck to the landing pose
  absorb_s: float = 0.40  # after touchdown, down into the landing crouch
  rise_s: float = 0.80  # standing up
  stand_com: float = 0.665  # standing, knees slightly bent
  com_ahead: float = 0.02  # standing and crouched
  crouch_com: float = 0.42
  crouch_pitch: float = 0.60  # the pelvis leaning forward in the crouch ...
  # The push: the centre of mass rises from the crouch to take-off at constant acceleration (its
  # duration follows), the pelvis turns back to its take-off pitch.
  takeoff_com: float = 0.68
  takeoff_com_x: float = -0.02
  takeoff_vz: float = 2.7  # vertical take-off velocity (m/s): the flight time follows
  takeoff_vx: float = -0.3  # horizontal take-off velocity (m/s, negative: backwards)
  takeoff_pitch: float = 0.20
  # In flight the pelvis turns back a full turn (plus extra_turn) to its landing pitch. The
  # waist and hips flex from take-off to landing, which turns the light pelvis further back than
  # the rest of the body (the pitch counted is the pelvis's).
  landing_pitch: float = 0.0
  extra_turn: float = 0.0
  tuck_hip_pitch: float = -2.4  # the tuck as joint angles; in flight the target is the pose of
  tuck_knee: float = 2.6  # the feet in the pelvis frame that these give
  tuck_ankle: float = -0.3
  landing_com: float = 0.58  # at touchdown: the height ends the flight
  landing_com_x: float = 0.06
  absorb_com: float = 0.47  # at the bottom of the landing
  absorb_pitch: float = 0.30
  # Upper body: (shoulder pitch, elbow, waist pitch). The G1's shoulders have 25 N m: the swing
  # is slow; the waist keeps the torso upright while the pelvis leans, and arches at take-off.
  stand_upper: tuple = (0.2, 1.28, 0.0)
  crouch_upper: tuple = (0.5, 0.6, -0.45)
  takeoff_upper: tuple = (-1.4, 0.4, -0.45)
  landing_upper: tuple = (-0.8, 0.6, 0.40)
  arm_rate: float = 0.0  # shoulder pitch rate at take-off (negative: still swinging up)

  def scaled(self, **changes) -> "Flip":
    return dataclasses.replace(self, **changes)


# ----------------------------------------------------------------- inverse kinematics


class IK:
  """Damped least squares on MuJoCo's Jacobians, one frame's task targets at a time.

  Targets (a dict): "feet": {body: (pos, quat)} world poses; "com": (3,) world position of the
  whole body's centre of mass; "pelvis_quat": (4,); "joints": {qpos index: angle} joint-space
  tasks (the arm swing); the free root takes part unless free_root is False (the flight's tuck,
  solved in the pelvis frame with the pelvis at the origin).
  """

  def __init__(self, model: mujoco.MjModel, posture: np.ndarray):
    self.model, self.data = model, mujoco.MjData(model)
    self.posture = posture
    self.feet = [model.body(f).id for f in FEET]
    self.pelvis = model.body("pelvis").id
    hinge = model.jnt_type != mujoco.mjtJoint.mjJNT_FREE
    self.hinge_qpos = model.jnt_qposadr[hinge]
    self.hinge_range = model.jnt_range[hinge]
    self.hinge_limited = model.jnt_limited[hinge].astype(bool)
    legs = np.array(["hip" in n or "knee" in n or "ankle" in n
                     for n in (model.joint(j).name for j in np.flatnonzero(hinge))])
    self.posture_weight = np.where(legs, 0.003, 0.1)

  def kinematics(self, qpos: np.ndarray) -> mujoco.MjData:
    self.data.qpos[:] = qpos
    mujoco.mj_kinematics(self.model, self.data)
    mujoco.mj_comPos(self.model, self.data)  # cdof and subtree_com, which the Jacobians read
    return self.data

  def solve(self, qpos: np.ndarray, targets: dict, iterations: int = 60,
            free_root: bool = True) -> tuple[np.ndarray, float]:
    """(qpos, the largest foot / centre-of-mass position error in m) after at most iterations.

    Gauss-Newton with priorities: the tasks are met first (damped pseudo-inverse), the posture
    only in their null space, so it never pulls the tasks off their targets and each frame
    converges in a few steps to the same pose from any nearby start.
    """
    m, d, nv = self.model, self.data, self.model.nv
    jacp, jacr = np.zeros((3, nv)), np.zeros((3, nv))
    qpos = qpos.copy()
    eye = np.eye(nv)
    lo, hi = self.hinge_range[:, 0], self.hinge_range[:, 1]
    error_m = np.inf
    for _ in range(iterations):
      self.kinematics(qpos)
      rows, errors = [], []
      error_m = 0.0
      for b, (pos, quat) in zip(self.feet, targets["feet"], strict=True):
        mujoco.mj_jacBody(m, d, jacp, jacr, b)
        e = pos - d.xpos[b]
        error_m = max(error_m, float(np.linalg.norm(e)))
        rows += [jacp.copy(), jacr.copy()]
        errors += [e, rotation_error(quat, d.xquat[b], d.xmat[b])]
      if free_root:
        mujoco.mj_jacSubtreeCom(m, d, jacp, self.pelvis)  # the pelvis's subtree is the robot
        e = targets["com"] - d.subtree_com[self.pelvis]
        error_m = max(error_m, float(np.linalg.norm(e)))
        mujoco.mj_jacBody(m, d, None, jacr, self.pelvis)
        rows += [jacp.copy(), jacr.copy()]
        errors += [e, rotation_error(targets["pelvis_quat"], d.xquat[self.pelvis],
                                     d.xmat[self.pelvis])]
      for adr, angle in targets["joints"].items():
        rows.append(eye[adr - 1:adr])
        errors.append(np.array([angle - qpos[adr]]))
      jac, error = np.concatenate(rows), np.concatenate(errors)
      posture = self.posture[7:] - qpos[7:]
      # Joints at a limit that the step would push further are frozen and the step solved
      # again: clipping them afterwards would stall the others (an active set).
      free = np.ones(nv, bool)
      free[:6] = free_root
      for _ in range(4):
        j = jac * free
        pinv = j.T @ np.linalg.inv(j @ j.T + 1e-9 * np.eye(len(j)))
        step = pinv @ error
        null = (eye - pinv @ j) * free
        step += null[:, 6:] @ np.linalg.lstsq(null[6:, 6:], posture - step[6:], rcond=1e-6)[0]
        step *= free
        q, dq = qpos[self.hinge_qpos], step[self.hinge_qpos - 1]
        blocked = self.hinge_limited & (((q <= lo + 1e-9) & (dq < 0)) | ((q >= hi - 1e-9) &
                                                                        (dq > 0)))
        if not blocked.any():
          break
        free[self.hinge_qpos[blocked] - 1] = False
      step *= min(1.0, 0.3 / max(float(np.linalg.norm(step)), 1e-12))  # a trust region
      mujoco.mj_integratePos(m, qpos, step, 1.0)
      clipped = np.clip(qpos[self.hinge_qpos], lo, hi)
      qpos[self.hinge_qpos] = np.where(self.hinge_limited, clipped, qpos[self.hinge_qpos])
      if np.linalg.norm(step) < 1e-9:
        break
    return qpos, error_m


# --------------------------------------------------------------------------- the reference


@dataclasses.dataclass
class Reference:
  """The clip on the fine grid (every FINE-th row is a frame) and what its physics needs."""

  flip: Flip
  t: np.ndarray  # (n,) s
  qpos: np.ndarray  # (n, nq)
  qvel: np.ndarray  # (n, nv), central differences
  qacc: np.ndarray  # (n, nv)
  contact: np.ndarray  # (n,) bool: the feet on the floor
  takeoff_s: float
  touchdown_s: float
  flight_s: float
  apex_m: float  # the pelvis's highest point
  takeoff_velocity: np.ndarray  # (3,) of the centre of mass
  momentum: float  # L, kg m^2/s about the centre of mass (negative: backwards)
  ik_error_m: float  # the largest foot / centre-of-mass error of the IK over the clip
  momentum_error: float  # kg m^2/s, how far the push's momentum at take-off misses L
  takeoff_rate: float  # rad/s, the pelvis's pitch rate at take-off
  touchdown_rate: float  # rad/s, the pelvis's pitch rate at touchdown

  def frames(self, count: int | None = None) -> slice:
    return slice(0, None if count is None else FINE * count, FINE)


class _Builder:
  """The reference's pieces: standing, ground phases and flight, on the fine grid."""

  def __init__(self, model: mujoco.MjModel):
    self.model = model
    posture = model.key_qpos[0].copy()
    # The keyframe's legs are straight, where the knee's Jacobian is singular: the posture that
    # the IK is pulled towards bends them.
    for side in SIDES:
      for joint, angle in (("hip_pitch", -0.3), ("knee", 0.6), ("ankle_pitch", -0.3)):
        posture[self.adr(f"{side}_{joint}_joint")] = angle
    self.ik = IK(model, posture)
    self.data = mujoco.MjData(model)
    d = self.ik.kinematics(model.key_qpos[0])
    self.feet = [(d.xpos[b].copy(), np.array([1.0, 0, 0, 0])) for b in self.ik.feet]
    self.feet_centre = np.mean([p for p, _ in self.feet], axis=0)
    self.dt = FRAME_DT / FINE

  def adr(self, joint: str) -> int:
    return int(self.model.joint(joint).qposadr[0])

  def upper(self, shoulder_pitch: float, elbow: float, waist_pitch: float) -> dict:
    """Joint-space targets of the upper body: both arms alike, the waist's pitch (its yaw and
    roll straight). With the waist given, the centre of mass is the pelvis position's task."""
    out = {self.adr("waist_yaw_joint"): 0.0, self.adr("waist_roll_joint"): 0.0,
           self.adr("waist_pitch_joint"): waist_pitch}
    for side in SIDES:
      out[self.adr(f"{side}_shoulder_pitch_joint")] = shoulder_pitch
      out[self.adr(f"{side}_shoulder_roll_joint")] = 0.25 if side == "left" else -0.25
      out[self.adr(f"{side}_elbow_joint")] = elbow
    return out

  def feet_at(self, x: float) -> list:
    """The standing feet moved to x (their centre)."""
    shift = np.array([x - self.feet_centre[0], 0.0, 0.0])
    return [(p + shift, q) for p, q in self.feet]

  def pose(self, qpos, targets, free_root=True, iterations=60):
    return self.ik.solve(qpos, targets, iterations, free_root)

  def com_of(self, qpos: np.ndarray) -> np.ndarray:
    return self.ik.kinematics(qpos).subtree_com[1].copy()

  def momentum(self, qpos: np.ndarray, qvel: np.ndarray) -> float:
    """The y component of the whole body's angular momentum about its centre of mass."""
    m, d = self.model, self.data
    d.qpos[:], d.qvel[:] = qpos, qvel
    mujoco.mj_kinematics(m, d)
    mujoco.mj_comPos(m, d)
    mujoco.mj_comVel(m, d)
    mujoco.mj_subtreeVel(m, d)
    return float(d.subtree_angmom[1, 1])

  def pitch_inertia(self, qpos: np.ndarray) -> float:
    """The whole body's moment of inertia about the lateral axis through its centre of mass."""
    qvel = np.zeros(self.model.nv)
    qvel[4] = 1.0  # the root's angular velocity about its own y axis (the world's: pure pitch)
    return self.momentum(qpos, qvel)

  def velocities(self, qpos: np.ndarray) -> np.ndarray:
    """Central differences of a fine-grid qpos sequence (one-sided at the ends)."""
    m, n = self.model, len(qpos)
    diff = np.zeros((n - 1, m.nv))
    for i in range(n - 1):
      mujoco.mj_differentiatePos(m, diff[i], self.dt, qpos[i], qpos[i + 1])
    out = np.empty((n, m.nv))
    out[0], out[-1] = diff[0], diff[-1]
    out[1:-1] = 0.5 * (diff[:-1] + diff[1:])
    return out

  def stance(self, t: np.ndarray, qpos: np.ndarray, targets_at) -> tuple[np.ndarray, float]:
    """IK at each time of a ground phase, warm-started from the previous frame."""
    out, worst = [], 0.0
    for ti in t:
      qpos, error = self.pose(qpos, targets_at(ti))
      out.append(qpos)
      worst = max(worst, error)
    return np.array(out).reshape(len(t), -1), worst

  def pitch(self, qpos: np.ndarray) -> float:
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, qpos[3:7])
    return pitch_of(rot)

  def relative_feet(self, qpos: np.ndarray) -> np.ndarray:
    """(2, 4): each foot's x, y, z and pitch in the pelvis frame."""
    d = self.ik.kinematics(qpos)
    rot = d.xmat[self.ik.pelvis].reshape(3, 3)
    out = []
    for b in self.ik.feet:
      pos = rot.T @ (d.xpos[b] - d.xpos[self.ik.pelvis])
      out.append([*pos, pitch_of(rot.T @ d.xmat[b].reshape(3, 3))])
    return np.array(out)

  def frozen(self, rel: np.ndarray) -> list:
    """Foot targets for a tuck solved with the pelvis at the origin: rel (2, 4) as poses."""
    return [(r[:3].copy(), pitch_quat(r[3])) for r in rel]


def build_reference(model: mujoco.MjModel, flip: Flip, frames: int = CLIP_FRAMES,
                    log=print) -> Reference:
  """The whole clip, `frames` frames long; see the module docstring for the physics."""
  b = _Builder(model)
  dt, nq = b.dt, model.nq
  n = FINE * (frames - 1) + 1
  t_all = dt * np.arange(n)
  # The push's duration: constant acceleration over the stroke (on the grid).
  stroke = flip.takeoff_com - flip.crouch_com
  speed = float(np.hypot(flip.takeoff_vz, flip.takeoff_vx))
  push_s = dt * max(round(2 * stroke / flip.takeoff_vz / dt), 4)
  t_crouch = flip.stand_s
  t_push = t_crouch + flip.crouch_s
  t_off = t_push + push_s
  i_push, i_off = round(t_push / dt), round(t_off / dt)
  if not np.isclose(i_push * dt, t_push):
    raise ValueError(f"standing and crouching ({t_push} s) must be whole multiples of {dt} s")
  feet = b.feet_at(b.feet_centre[0])
  ankle_x = feet[0][0][0]
  stand_com = np.array([ankle_x + flip.com_ahead, 0.0, flip.stand_com])
  crouch_com = np.array([ankle_x + flip.com_ahead, 0.0, flip.crouch_com])

  def ground(com, pitch, upper, feet=feet) -> dict:
    return {"feet": feet, "com": com, "pelvis_quat": pitch_quat(pitch),
            "joints": b.upper(*upper)}

  # Standing, from the posture, to convergence; then down into the crouch.
  stand_target = ground(stand_com, 0.0, flip.stand_upper)
  q_stand, _ = b.pose(b.ik.posture.copy(), stand_target, 500)

  def before_push(ti: float) -> dict:
    if ti <= t_crouch:
      return stand_target
    s = ti - t_crouch
    com = quintic(stand_com, 0, 0, crouch_com, 0, 0, flip.crouch_s, s)
    pitch = quintic(0.0, 0, 0, flip.crouch_pitch, 0, 0, flip.crouch_s, s)
    upper = quintic(flip.stand_upper, 0, 0, flip.crouch_upper, 0, 0, flip.crouch_s, s)
    return ground(com, float(pitch), upper)

  q_before, err_before = b.stance(t_all[:i_push + 1], q_stand, before_push)

  # The landing pose (the feet where they stood, the centre of mass above them): its feet in the
  # pelvis frame end the flight's untuck. The tuck, from its joint angles: its feet likewise.
  land_com = np.array([ankle_x + flip.landing_com_x, 0.0, flip.landing_com])
  q_land, _ = b.pose(q_stand, ground(land_com, flip.landing_pitch, flip.landing_upper), 500)
  rel_land = b.relative_feet(q_land)
  q_tuck = q_stand.copy()
  for side in SIDES:
    for joint, angle in (("hip_pitch", flip.tuck_hip_pitch), ("knee", flip.tuck_knee),
                         ("ankle_pitch", flip.tuck_ankle)):
      q_tuck[b.adr(f"{side}_{joint}_joint")] = angle
  rel_tuck = b.relative_feet(q_tuck)

  # Flight time: the parabola from the take-off height to the landing pose's, on the fine grid
  # (the vertical take-off velocity is adjusted by less than one grid step's worth for that).
  rise = flip.landing_com - flip.takeoff_com
  flight = (flip.takeoff_vz + np.sqrt(flip.takeoff_vz**2 - 2 * G * rise)) / G
  k_flight = max(round(flight / dt), 2)
  flight = k_flight * dt
  vz = (rise + 0.5 * G * flight**2) / flight
  if flight < flip.tuck_in_s + flip.tuck_out_s:
    raise ValueError(f"a flight of {flight:.3f} s is shorter than tucking in and out "
                     f"({flip.tuck_in_s + flip.tuck_out_s:.3f} s): jump higher")
  v_off = np.array([flip.takeoff_vx, 0.0, vz])
  c_off = np.array([ankle_x + flip.takeoff_com_x, 0.0, flip.takeoff_com])
  accel = 2 * (c_off - crouch_com - v_off * push_s) / push_s**2 + 2 * v_off / push_s
  theta_down = flip.landing_pitch - 2 * np.pi - flip.extra_turn
  s_flight = dt * np.arange(k_flight + 1)
  t_out = flight - flip.tuck_out_s
  del speed

  def push(omega_off: float):
    """The push, ending at the take-off pitch with pitch rate omega_off."""
    def push_at(ti: float) -> dict:
      s = ti - t_push
      com = quintic(crouch_com, 0, accel, c_off, v_off, accel, push_s, s)
      pitch = quintic(flip.crouch_pitch, 0, 0, flip.takeoff_pitch, omega_off, 0, push_s, s)
      upper = quintic(flip.crouch_upper, 0, 0, flip.takeoff_upper, (flip.arm_rate, 0, 0), 0,
                      push_s, s)
      return ground(com, float(pitch), upper)

    return b.stance(t_all[i_push + 1:i_off + 1], q_before[-1], push_at)

  def fly(q_push: np.ndarray):
    """The flight from the push's last frames: the L that turns the pelvis to its landing pitch
    a turn later, and the frames."""
    rel_off = b.relative_feet(q_push[-1])
    rel_rate = (rel_off - b.relative_feet(q_push[-2])) / dt
    frozen = q_push[-1].copy()
    frozen[:7] = (0, 0, 0, 1, 0, 0, 0)
    q_rel, com_rel, worst = [], [], 0.0
    for s in s_flight:
      if s <= flip.tuck_in_s:
        rel = quintic(rel_off, rel_rate, 0, rel_tuck, 0, 0, flip.tuck_in_s, s)
      else:
        rel = quintic(rel_tuck, 0, 0, rel_land, 0, 0, flip.tuck_out_s, s - t_out)
      upper = quintic(flip.takeoff_upper, (flip.arm_rate, 0, 0), 0, flip.landing_upper, 0, 0,
                      flight, s)
      frozen, error = b.pose(frozen, {"feet": b.frozen(rel), "joints": b.upper(*upper)},
                             free_root=False)
      worst = max(worst, error)
      q_rel.append(frozen)
      com_rel.append(b.com_of(frozen))
    q_rel = np.array(q_rel)
    # theta' = (L - own) / inertia, with the joints' own momentum (the root still) from their
    # rates (central differences, the push's last frame before take-off): L is the one value
    # that turns the take-off pitch into theta_down over the flight.
    rates = np.gradient(np.concatenate([q_push[-2:-1, 7:], q_rel[:, 7:]]), dt, axis=0)[1:]
    inertia = np.array([b.pitch_inertia(q) for q in q_rel])
    own = np.array([b.momentum(q, np.r_[np.zeros(6), rate]) for q, rate in
                    zip(q_rel, rates, strict=True)])
    cumulative = lambda f: np.concatenate([[0.0], np.cumsum(0.5 * dt * (f[1:] + f[:-1]))])  # noqa: E731
    inv, own_term = cumulative(1.0 / inertia), cumulative(own / inertia)
    momentum = (theta_down - flip.takeoff_pitch + own_term[-1]) / inv[-1]
    theta = flip.takeoff_pitch + momentum * inv - own_term
    c = c_off + v_off * s_flight[:, None] + np.outer(0.5 * s_flight**2, [0, 0, -G])
    q_flight = q_rel.copy()
    for k in range(len(s_flight)):
      rot = np.zeros(9)
      mujoco.mju_quat2Mat(rot, pitch_quat(theta[k]))
      q_flight[k, 3:7] = pitch_quat(theta[k])
      q_flight[k, :3] = c[k] - rot.reshape(3, 3) @ com_rel[k]
    return q_flight, momentum, (momentum - own[-1]) / inertia[-1], worst

  # The push's take-off pitch rate that hands the flight its L (secant iterations).
  guesses, misses = [-4.0, -8.0], []
  while True:
    q_push, err_push = push(guesses[len(misses)])
    q_flight, momentum, omega_down, err_flight = fly(q_push)
    frames3 = np.concatenate([q_push[-2:], q_flight[1:2]])
    misses.append(b.momentum(q_push[-1], b.velocities(frames3)[1]) - momentum)
    if abs(misses[-1]) < 1e-3 * abs(momentum) or len(misses) == 10:
      break
    if len(misses) >= 2:
      slope = (misses[-1] - misses[-2]) / (guesses[len(misses) - 1] - guesses[len(misses) - 2])
      guesses.append(guesses[len(misses) - 1] - misses[-1] / slope)
  omega_off = guesses[len(misses) - 1]
  log(f"reference: the flight's turn needs L = {momentum:.2f} kg m^2/s; the push hands it over "
      f"with the pelvis turning at {omega_off:.2f} rad/s at take-off (missed by "
      f"{abs(misses[-1]):.1e} after {len(misses)} tries)")

  # Landing: the feet stay where they touched down; the pelvis's turn is caught while the legs
  # absorb the fall; then standing up and standing. Pitch continues unwrapped (a turn later).
  i_down = i_off + k_flight
  t_down = i_down * dt
  d = b.ik.kinematics(q_flight[-1])
  feet_down = [(d.xpos[f].copy(), np.array([1.0, 0, 0, 0])) for f in b.ik.feet]
  c_down = b.com_of(q_flight[-1])
  v_down = v_off + np.array([0, 0, -G * flight])
  ankle_down = feet_down[0][0][0]
  absorb_com = np.array([ankle_down + flip.com_ahead, 0.0, flip.absorb_com])
  end_com = np.array([ankle_down + flip.com_ahead, 0.0, flip.stand_com])
  t_rise = t_down + flip.absorb_s
  if t_rise + flip.rise_s > t_all[-1]:
    raise ValueError(f"the flip ends at {t_rise + flip.rise_s:.2f} s, after the clip's "
                     f"{t_all[-1]:.2f} s")

  def after_touchdown(ti: float) -> dict:
    s = ti - t_down
    if s <= flip.absorb_s:
      com = quintic(c_down, v_down, 0, absorb_com, 0, 0, flip.absorb_s, s)
      pitch = quintic(flip.landing_pitch, omega_down, 0, flip.absorb_pitch, 0, 0,
                      flip.absorb_s, s)
      upper = flip.landing_upper
    else:
      s -= flip.absorb_s
      com = quintic(absorb_com, 0, 0, end_com, 0, 0, flip.rise_s, s)
      pitch = quintic(flip.absorb_pitch, 0, 0, 0.0, 0, 0, flip.rise_s, s)
      upper = quintic(flip.landing_upper, 0, 0, flip.stand_upper, 0, 0, flip.rise_s, s)
    return ground(com, float(pitch), upper, feet_down)

  q_after, err_after = b.stance(t_all[i_down + 1:], q_flight[-1], after_touchdown)

  qpos = np.concatenate([q_before, q_push, q_flight[1:], q_after])
  assert qpos.shape == (n, nq), (qpos.shape, n)
  # Touchdown is an impact: derivatives are taken on each side of it, not across it. Row i_down
  # holds the state just after the impact.
  before = b.velocities(qpos[:i_down + 1])
  qvel = np.concatenate([before[:-1], b.velocities(qpos[i_down:])])
  qacc = np.concatenate([np.gradient(before, dt, axis=0)[:-1],
                         np.gradient(qvel[i_down:], dt, axis=0)])
  contact = np.ones(n, bool)
  contact[i_off + 1:i_down] = False
  apex = float(qpos[i_off:i_down + 1, 2].max())
  return Reference(flip, t_all, qpos, qvel, qacc, contact, t_off, t_down, flight, apex, v_off,
                   float(momentum), max(err_before, err_push, err_flight, err_after),
                   abs(misses[-1]), float(omega_off), float(omega_down))


# ---------------------------------------------------------------------------- feasibility


@dataclasses.dataclass
class Feasibility:
  """What the reference asks of the robot, frame by frame on the fine grid, and the verdict."""

  torque: np.ndarray  # (n, nu) joint torques by inverse dynamics
  servo: np.ndarray  # (n, nu) position-servo targets that give those torques
  feet_force: np.ndarray  # (n, 2, 3) each foot's force from the floor (world frame)
  cop: np.ndarray  # (n, 2, 2) each foot's centre of pressure in its sole frame (x, y)
  flight_wrench: float  # N, the largest root force the flight's physics leaves unexplained
  torque_ratio: np.ndarray  # (nu,) peak |torque| / limit per actuator
  worst: dict  # the binding margins: name -> (value, limit)
  ok: bool


def feasibility(model: mujoco.MjModel, ref: Reference, friction: float = 0.6) -> Feasibility:
  """Inverse dynamics of the reference against the G1's limits (see the module docstring)."""
  m = _contactless(model)
  d = mujoco.MjData(m)
  n, nv, nu = len(ref.t), m.nv, m.nu
  joint_of = m.actuator_trnid[:, 0]
  dof = m.jnt_dofadr[joint_of]
  limit = m.jnt_actfrcrange[joint_of, 1]
  kp, kv = m.actuator_gainprm[:, 0], -m.actuator_biasprm[:, 2]
  feet = [m.body(f).id for f in FEET]
  torque, servo = np.zeros((n, nu)), np.zeros((n, nu))
  feet_force, cop = np.zeros((n, 2, 3)), np.zeros((n, 2, 2))
  flight_wrench = 0.0
  jacp, jacr = np.zeros((3, nv)), np.zeros((3, nv))
  # Moments are solved for in units of force times this length, so that the least-squares split
  # between the feet weighs forces and moments alike.
  lever = 0.1
  for i in range(n):
    d.qpos[:], d.qvel[:], d.qacc[:] = ref.qpos[i], ref.qvel[i], ref.qacc[i]
    mujoco.mj_inverse(m, d)
    qfrc = d.qfrc_inverse.copy()
    if ref.contact[i]:
      rows, points = [], []
      for b in feet:
        point = d.xpos[b] + d.xmat[b].reshape(3, 3) @ np.array([0.0, 0.0, SOLE_Z])
        mujoco.mj_jac(m, d, jacp, jacr, point, b)
        rows.append(np.concatenate([jacp, jacr / lever]))
        points.append(point)
      jac = np.concatenate(rows)  # (12, nv): the feet's wrenches to generalised forces
      wrench = np.linalg.lstsq(jac[:, :6].T, qfrc[:6], rcond=None)[0]
      qfrc -= jac.T @ wrench
      for k, b in enumerate(feet):
        force, moment = wrench[6 * k:6 * k + 3], wrench[6 * k + 3:6 * k + 6] / lever
        feet_force[i, k] = force
        rot = d.xmat[b].reshape(3, 3)
        local_force, local_moment = rot.T @ force, rot.T @ moment
        fz = max(local_force[2], 1e-9)
        cop[i, k] = (-local_moment[1] / fz, local_moment[0] / fz)
    else:
      flight_wrench = max(flight_wrench, float(np.linalg.norm(qfrc[:3])))
    torque[i] = qfrc[dof]
    servo[i] = ref.qpos[i, m.jnt_qposadr[joint_of]] + (torque[i] + kv * ref.qvel[i, dof]) / kp
  ratio = np.abs(torque).max(axis=0) / limit
  inside = ref.contact.copy()
  inside[[0, -1]] = False
  fz = feet_force[inside, :, 2]
  slip = np.linalg.norm(feet_force[inside, :, :2], axis=-1) / np.maximum(fz, 1e-9)
  x, y = cop[inside, :, 0], cop[inside, :, 1]
  lo, hi = m.actuator_ctrlrange.T
  outside_range = np.maximum(lo - servo, servo - hi).max()
  worst_actuator = int(np.argmax(ratio))
  worst = {
    "torque": (float(ratio[worst_actuator]), 1.0, m.actuator(worst_actuator).name),
    "normal force N": (float(fz.min()), 0.0),
    "friction ratio": (float(slip.max()), friction),
    "cop heel m": (float(x.min()), SOLE_X[0]),
    "cop toe m": (float(x.max()), SOLE_X[1]),
    "cop side m": (float(np.abs(y).max()), SOLE_HALF_WIDTH),
    "servo beyond range rad": (float(outside_range), 0.0),
  }
  ok = (ratio.max() <= 1.0 and fz.min() > 0 and slip.max() <= friction
        and x.min() >= SOLE_X[0] and x.max() <= SOLE_X[1]
        and np.abs(y).max() <= SOLE_HALF_WIDTH and outside_range <= 0)
  return Feasibility(torque, servo, feet_force, cop, flight_wrench, ratio, worst, bool(ok))


def _contactless(model: mujoco.MjModel) -> mujoco.MjModel:
  """A copy of the model without contacts: the floor's wrench is solved for instead."""
  m = copy.deepcopy(model)
  m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
  return m
