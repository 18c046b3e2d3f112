"""A backflip on the Unitree G1: a reference built from physics, tracked whole-body by iLQR.

  python examples/g1_backflip.py [--frames 200] [--samples 48] [--iterations 12] [--threads 0]
  python examples/g1_backflip.py --program knees-first --cem-iterations 0  # the other push,
      # with the landing: --out examples/results/g1_backflip_knees_first.npz
  python examples/g1_backflip.py --reference        # build the reference, check it, stop
  python examples/g1_backflip.py --play [--profile] # replay the saved plan: metrics, plots, GIF

The reference (no motion-capture clip ships offline, so it is made here), 200 frames of 0.02 s:

- stand; crouch (the arms swing back, the waist keeps the torso upright); push off at constant
  acceleration of the centre of mass to the take-off velocity, the arms swinging forward and up
  and the pelvis turning back; a ballistic flight; the tucked backward turn; landing on both
  feet, the fall stopped at constant deceleration; settling; standing up; standing;
- in flight the centre of mass follows the parabola of the take-off velocity under g: the flight
  time is when it brings the centre of mass to the landing pose's height, the apex v_z^2 / 2g
  above take-off. The angular momentum about the centre of mass is constant, so the pelvis's
  pitch rate is (L - h) / I, with I(q) the whole body's pitch inertia about its centre of mass
  and h(q, dq) the momentum of the joints' own motion (mj_subtreeVel) as the legs tuck and the
  arms come down. L is the one value that turns the pelvis a full turn back from its take-off
  pitch to its landing pitch; the push's pitch rate at take-off is then solved (secant steps)
  so that the ground phase hands exactly that L to the flight. At take-off the legs stop
  extending and at touchdown the feet stop: both change joint velocities at once, not the whole
  body's momentum, and derivatives are taken on each side;
- joint angles at every frame of a 5 ms grid by motion.IK (Gauss-Newton on MuJoCo's Jacobians,
  null-space mode): feet fixed on the floor, centre of mass and pelvis pitch on their paths,
  arms and waist as joint targets, a posture in the null space; in flight the tuck is solved in
  the pelvis frame and the root placed by the momentum and the parabola.

Feasibility (motion.feasibility): the reference's velocities and accelerations go through inverse
dynamics (mj_inverse without contacts): the root's rows give the wrench the floor must supply, split
between the feet; the rest are joint torques, compared with the G1's actuator limits
(jnt_actfrcrange), per phase. The floor must push, within the friction cone, with each foot's
centre of pressure under its sole. The take-off velocity, apex, flight time, angular momentum and
the worst margins are printed: the shared G1 cannot do this flip (see the printout), mostly
because flat feet leave the pelvis and torso to make L, which takes a whip the hips and waist
cannot give. The plan that iLQR finds is what the robot can do nearest to it: the simulation
clamps every joint's torque at its limit.

Tracking: the seed's cost (twelve bodies, weights per m^2 and rad^2, Huber-like above a
threshold, the root loose in x/y and 1000x tighter in z) against the reference, over 200 knots
of 10 physics steps. The warm start is the better of the reference's joint angles and its
inverse-dynamics servo targets as the servos' targets, up to the push. From the push on, a
cross-entropy search over whole-body synergy targets held for sampled times (push, tuck, open,
settle, or with --program knees-first a push in two phases; then a ramp to standing) replaces
it, scored on the flip's own terms beside a fifth of the tracking cost (the turn in flight,
bodies other than the feet on the floor, the pelvis up and level at the end), each candidate run
on four randomised robots: all of an iteration's runs are the rows of one rollout call. Then
`control.ilqr` with the seed's cost alone (one transition_fd call per iteration, contact-rich
take-off and landing): the reference asks more than the robot can give, so the tracking cost can
prefer a plan that follows it further and falls, or lands on fewer robots; ilqr's accept guard
refuses such a step, and ilqr tries a shorter one about the same linearisation (see track).

Landing (--program knees-first): that push turns far enough on the nominal robot but not on
robots whose links weigh up to 10% more or less. In flight, at the end of the tuck, the closed
loop chooses from the measured state how many knots longer to hold the tuck (0-4), each choice
predicted on the nominal model to touchdown; after iLQR the push's targets are searched again so
that on randomised robots some hold lands the feet with the centre of mass where the landing
catches it (its capture offset, see CAPTURE_TAU), the nominal robot turning far enough; the waist
and hips tilt the pelvis back about the touchdown, by an amount chosen in flight as the hold is;
from that choice, before touchdown, a sampling MPC (control.sampling's CEM, planned each knot from
the measured state) lands the robot on its feet and keeps it there upright to the end.
That closed loop has no gains (see plan_landing).

Replays: open-loop (the controls) and closed-loop with the plan's time-varying gains (the state
measured each knot, u = ctrl + K dx; K from a backward pass about the plan at the mu, of a few,
whose closed loop stands on the most of 16 validation robots), both from the same start, one
rollout call per knot and every physics step's floor contacts from contact sensors added to the
model (they do not change the physics); the closed loop again on randomised robots (link masses
x[0.9, 1.1], floor friction [0.6, 1.0]) as the rows of the same calls. The last line printed
is one JSON object: rotation_rad, flight_s, apex_m, landed, upright_s, mean_pos_err_mm,
mean_rot_err_deg, open_loop_landed, robust_landed_share. --profile times an iLQR iteration
against its physics calls on 1 and 2 threads.
"""

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path

# --play renders headless; the GL backend is chosen when mujoco first renders.
os.environ.setdefault("MUJOCO_GL", "egl")


def _avx2_blas_kernels_where_the_cpu_has_them() -> None:
  """OPENBLAS_CORETYPE=Haswell where the CPU has AVX2 and FMA, unless set or numpy is loaded.

  The reference's inverse kinematics runs on numpy's BLAS, whose kernels OpenBLAS picks by CPU,
  and the kernels round differently in the last bits (AVX-512's against AVX2's). The flip's
  search is chaotic: such a change ends CEM at another plan (docs/backflip.md, "How repeatable
  the solve is"). AVX2's kernels on every CPU that has them make the command give the saved plan
  on any such x86 CPU, with the numpy it was solved with (2.4.6, OpenBLAS 0.3.31). Read when
  OpenBLAS loads, so before numpy is imported; a user's own setting stands.
  """
  if "numpy" in sys.modules or "OPENBLAS_CORETYPE" in os.environ:
    return
  try:
    flags = set(Path("/proc/cpuinfo").read_text().split())
  except OSError:
    return  # not Linux: nothing to read the CPU's features from
  if {"avx2", "fma"} <= flags:
    os.environ["OPENBLAS_CORETYPE"] = "Haswell"


_avx2_blas_kernels_where_the_cpu_has_them()

import common  # noqa: E402
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import control, motion, tangent  # noqa: E402
from mjbatch_jax.control import cost as cost_terms  # noqa: E402

# The seed's tracking cost (examples/common.py: twelve bodies and their weights).
TRACKED, LABELS = common.G1_TRACKED, common.g1_labels(common.G1_TRACKED)
G = 9.81  # m/s^2, checked against the model's gravity
FRAME_DT = 0.02  # s per frame of the clip and per knot of the plan
FINE = 4  # the reference is built on a grid FINE times finer, for its derivatives
CLIP_FRAMES = 200
FEET = ("left_ankle_roll_link", "right_ankle_roll_link")
SIDES = ("left", "right")
# The sole under the four contact spheres of each foot (radius 0.005), in the ankle roll link's
# frame: heel and toe, the inner edge of the narrower (heel) pair, the height under the link (m).
SOLE = motion.Sole(x=(-0.05, 0.12), half_width=0.025, z=-0.035)


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
  tuck_in_s: float = 0.20  # in flight: from take-off to the full tuck
  tuck_out_s: float = 0.15  # in flight: from the full tuck to the landing pose
  catch_s: float = 0.25  # after touchdown: the pelvis's turn stopped (at least the fall's stop)
  settle_s: float = 0.40  # then the centre of mass settles over the feet in the crouch
  rise_s: float = 0.80  # standing up
  stand_com: float = 0.665  # standing, knees slightly bent
  com_ahead: float = 0.02  # standing and crouched
  crouch_com: float = 0.40
  crouch_pitch: float = 0.60  # the pelvis leaning forward in the crouch ...
  # The push: the centre of mass rises from the crouch to take-off at constant acceleration (its
  # duration follows), the pelvis turns back to its take-off pitch.
  takeoff_com: float = 0.70
  takeoff_com_x: float = -0.02
  takeoff_vz: float = 3.5  # vertical take-off velocity (m/s): the flight time follows
  takeoff_vx: float = -0.3  # horizontal take-off velocity (m/s, negative: backwards)
  takeoff_pitch: float = 0.30
  # In flight the pelvis turns back a full turn plus the take-off pitch less the landing pitch. The
  # waist and hips flex from take-off to landing, which turns the light pelvis further back than
  # the rest of the body (the pitch counted is the pelvis's).
  landing_pitch: float = 0.20
  tuck_hip_pitch: float = -2.4  # the tuck as joint angles; in flight the target is the pose of
  tuck_knee: float = 2.6  # the feet in the pelvis frame that these give
  tuck_ankle: float = -0.3
  landing_com: float = 0.58  # at touchdown: the height ends the flight
  landing_com_x: float = 0.12
  absorb_com: float = 0.42  # at the bottom of the landing
  absorb_pitch: float = 0.60
  # Upper body: (shoulder pitch, elbow, waist pitch). The G1's shoulders have 25 N m: the swing
  # is slow; the waist keeps the torso upright while the pelvis leans, and arches at take-off.
  stand_upper: tuple = (0.2, 1.28, 0.0)
  crouch_upper: tuple = (0.5, 0.6, -0.45)
  takeoff_upper: tuple = (-1.4, 0.4, -0.45)
  landing_upper: tuple = (-0.8, 0.6, 0.40)
  arm_rate: float = 0.0  # shoulder pitch rate at take-off (negative: still swinging up)

  def scaled(self, **changes) -> "Flip":
    return dataclasses.replace(self, **changes)

  @property
  def push_start(self) -> float:
    """When the push begins (s): after standing and crouching."""
    return self.stand_s + self.crouch_s


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
    # Null-space posture: the tasks are met first, so each frame converges in a few steps to the
    # same pose from any nearby start.
    self.ik = motion.IK(model, posture, mode="null_space")
    self.data = mujoco.MjData(model)
    self.foot_ids = [model.body(f).id for f in FEET]
    self.pelvis = model.body("pelvis").id
    d = self.ik.kinematics(model.key_qpos[0])
    self.feet = [(d.xpos[b].copy(), np.array([1.0, 0, 0, 0])) for b in self.foot_ids]
    self.feet_centre = np.mean([p for p, _ in self.feet], axis=0)
    self.dt = FRAME_DT / FINE

  def adr(self, joint: str) -> int:
    return int(self.model.joint(joint).qposadr[0])

  def upper(self, shoulder_pitch: float, elbow: float, waist_pitch: float) -> dict:
    """Joint-space targets of the upper body: both arms alike, the waist's pitch (its yaw and
    roll straight). With the waist given, the centre of mass is the pelvis position's task."""
    out = {"waist_yaw_joint": 0.0, "waist_roll_joint": 0.0, "waist_pitch_joint": waist_pitch}
    for side in SIDES:
      out[f"{side}_shoulder_pitch_joint"] = shoulder_pitch
      out[f"{side}_shoulder_roll_joint"] = 0.25 if side == "left" else -0.25
      out[f"{side}_elbow_joint"] = elbow
    return out

  def feet_at(self, x: float) -> list:
    """The standing feet moved to x (their centre)."""
    shift = np.array([x - self.feet_centre[0], 0.0, 0.0])
    return [(p + shift, q) for p, q in self.feet]

  def pose(self, qpos, targets, free_root=True, iterations=60) -> tuple[np.ndarray, float]:
    """(qpos, the largest foot / centre-of-mass error in m) for targets: "feet", each foot's
    (pos, quat) in the world; "com" and "pelvis_quat" when the root is free; "joints" (upper)."""
    tasks = []
    for foot, (pos, quat) in zip(FEET, targets["feet"], strict=True):
      tasks += [motion.BodyPosition(foot, pos), motion.BodyOrientation(foot, quat)]
    if free_root:
      tasks += [motion.CentreOfMass(targets["com"], body="pelvis"),  # its subtree: the robot
                motion.BodyOrientation("pelvis", targets["pelvis_quat"])]
    tasks.append(motion.JointAngles(targets["joints"]))
    solution = self.ik.solve(qpos, tasks, iterations, free_root)
    return solution.qpos, solution.error

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
    rot = d.xmat[self.pelvis].reshape(3, 3)
    out = []
    for b in self.foot_ids:
      pos = rot.T @ (d.xpos[b] - d.xpos[self.pelvis])
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
  t_push = flip.push_start
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
  q_stand, _ = b.pose(b.ik.posture.copy(), stand_target, iterations=500)

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
  q_land, _ = b.pose(q_stand, ground(land_com, flip.landing_pitch, flip.landing_upper),
                     iterations=500)
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
  theta_down = flip.landing_pitch - 2 * np.pi
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
    # At take-off the legs stop extending: the feet leave the floor with the body (an internal
    # impulse: it changes the joints' velocities, not the whole body's momentum).
    rel_off = b.relative_feet(q_push[-1])
    frozen = q_push[-1].copy()
    frozen[:7] = (0, 0, 0, 1, 0, 0, 0)
    q_rel, com_rel, worst = [], [], 0.0
    for s in s_flight:
      if s <= flip.tuck_in_s:
        rel = quintic(rel_off, 0, 0, rel_tuck, 0, 0, flip.tuck_in_s, s)
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
    # rates (central differences): L is the one value that turns the take-off pitch into
    # theta_down over the flight.
    rates = np.gradient(q_rel[:, 7:], dt, axis=0)
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

  # The push's take-off pitch rate that hands the flight its L: secant steps, kept inside the
  # bracket of the last guesses whose misses differ in sign (bisection when a step leaves it).
  guesses, misses, bracket = [-4.0, -8.0], [], None
  while True:
    omega = guesses[len(misses)]
    q_push, err_push = push(omega)
    q_flight, momentum, omega_down, err_flight = fly(q_push)
    misses.append(b.momentum(q_push[-1], b.velocities(q_push[-3:])[-1]) - momentum)
    if abs(misses[-1]) < 1e-3 * abs(momentum) or len(misses) == 12:
      break
    for other, miss in zip(guesses[:len(misses) - 1], misses[:-1], strict=True):
      if miss * misses[-1] < 0 and (bracket is None or abs(other - omega) <
                                    abs(bracket[1] - bracket[0])):
        bracket = (other, omega)
    if len(misses) >= 2:
      slope = (misses[-1] - misses[-2]) / (guesses[len(misses) - 1] - guesses[len(misses) - 2])
      step = guesses[len(misses) - 1] - misses[-1] / slope
      if bracket is not None and not min(bracket) < step < max(bracket):
        step = 0.5 * sum(bracket)
      guesses.append(step)
  omega_off = guesses[len(misses) - 1]
  log(f"reference: the flight's turn needs L = {momentum:.2f} kg m^2/s; the push hands it over "
      f"with the pelvis turning at {omega_off:.2f} rad/s at take-off (missed by "
      f"{abs(misses[-1]):.1e} after {len(misses)} tries)")

  # Landing: the feet stay where they touched down; the pelvis's turn is caught while the legs
  # absorb the fall; then standing up and standing. Pitch continues unwrapped (a turn later).
  i_down = i_off + k_flight
  t_down = i_down * dt
  d = b.ik.kinematics(q_flight[-1])
  feet_down = [(d.xpos[f].copy(), np.array([1.0, 0, 0, 0])) for f in b.foot_ids]
  c_down = b.com_of(q_flight[-1])
  v_down = v_off + np.array([0, 0, -G * flight])
  ankle_down = feet_down[0][0][0]
  # The fall is stopped at constant deceleration over the drop to the landing crouch (its time
  # follows), the pelvis's turn caught meanwhile; then the centre of mass settles over the feet.
  drop = c_down[2] - flip.absorb_com
  stop_s = 2 * drop / -v_down[2]
  low_com = c_down + 0.5 * v_down * stop_s
  decel = -v_down / stop_s
  catch_s = max(stop_s, flip.catch_s)
  settle_com = np.array([ankle_down + flip.com_ahead, 0.0, flip.absorb_com])
  end_com = np.array([ankle_down + flip.com_ahead, 0.0, flip.stand_com])
  t_rise = t_down + stop_s + flip.settle_s
  if t_rise + flip.rise_s > t_all[-1]:
    raise ValueError(f"the flip ends at {t_rise + flip.rise_s:.2f} s, after the clip's "
                     f"{t_all[-1]:.2f} s")

  def after_touchdown(ti: float) -> dict:
    s = ti - t_down
    pitch = quintic(flip.landing_pitch, omega_down, 0, flip.absorb_pitch, 0, 0, catch_s, s)
    upper = flip.landing_upper
    if s <= stop_s:
      com = quintic(c_down, v_down, decel, low_com, 0, decel, stop_s, s)
    elif s <= stop_s + flip.settle_s:
      com = quintic(low_com, 0, 0, settle_com, 0, 0, flip.settle_s, s - stop_s)
    else:
      s -= stop_s + flip.settle_s
      com = quintic(settle_com, 0, 0, end_com, 0, 0, flip.rise_s, s)
      pitch = quintic(flip.absorb_pitch, 0, 0, 0.0, 0, 0, flip.rise_s, s)
      upper = quintic(flip.landing_upper, 0, 0, flip.stand_upper, 0, 0, flip.rise_s, s)
    return ground(com, float(pitch), upper, feet_down)

  q_after, err_after = b.stance(t_all[i_down + 1:], q_flight[-1], after_touchdown)

  qpos = np.concatenate([q_before, q_push, q_flight[1:], q_after])
  assert qpos.shape == (n, nq), (qpos.shape, n)
  # Take-off and touchdown change the joints' velocities at once: derivatives are taken within
  # the ground phases and the flight, not across them. Row i_off holds the state just before
  # take-off, row i_down the state just after touchdown.
  qvel, qacc = np.zeros((n, model.nv)), np.zeros((n, model.nv))
  for lo, hi, keep in ((0, i_off + 1, slice(0, i_off + 1)), (i_off, i_down + 1, slice(1, -1)),
                       (i_down, n, slice(0, None))):
    v = b.velocities(qpos[lo:hi])
    a = np.gradient(v, dt, axis=0)
    qvel[lo:hi][keep], qacc[lo:hi][keep] = v[keep], a[keep]
  contact = np.ones(n, bool)
  contact[i_off + 1:i_down] = False
  apex = float(qpos[i_off:i_down + 1, 2].max())
  return Reference(flip, t_all, qpos, qvel, qacc, contact, t_off, t_down, flight, apex, v_off,
                   float(momentum), max(err_before, err_push, err_flight, err_after),
                   abs(misses[-1]), float(omega_off), float(omega_down))


# ---------------------------------------------------------------------------- feasibility


def feasibility(model: mujoco.MjModel, ref: Reference, friction: float = 0.6
                ) -> motion.Feasibility:
  """Inverse dynamics of the reference against the G1's limits (see the module docstring).

  The clip's first and last frames are left out of the floor's margins: their accelerations are
  one-sided differences.
  """
  checked = np.ones(len(ref.t), bool)
  checked[[0, -1]] = False
  return motion.feasibility(model, ref.qpos, ref.qvel, ref.qacc, ref.contact, FEET, SOLE,
                            friction=friction, checked=checked)


def phases(ref: Reference) -> dict:
  """Phase name -> the fine-grid rows in it: crouch, push, flight and landing (the impact rows,
  touchdown and the next two, left out of the landing)."""
  t_push = ref.flip.push_start
  i_down = round(ref.touchdown_s / (ref.t[1] - ref.t[0]))
  return {"crouch": ref.t < t_push - 1e-9,
          "push": (ref.t >= t_push - 1e-9) & ref.contact & (ref.t <= ref.takeoff_s + 1e-9),
          "flight": ~ref.contact, "landing": np.arange(len(ref.t)) > i_down + 2}


# ----------------------------------------------------------------- the model and the cost

# The floor's contacts, as contact sensors added to the model (sensors do not change the
# physics): with each foot, and with any body of the robot (the pelvis's subtree).
FOOT_SENSORS = {"left foot": FEET[0], "right foot": FEET[1]}
PELVIS_UPRIGHT = 0.6  # m: standing after the landing means the pelvis above this
MIN_FLIGHT = 0.1  # s: a shorter stretch off the floor is a stumble, not a jump to land from


def load_model(path: Path | None) -> mujoco.MjModel:
  """The G1 scene with floor-contact sensors; SystemExit saying what is wrong otherwise."""
  path = common.robot_scene(path, "unitree_g1")
  spec = mujoco.MjSpec.from_file(str(path))
  bodies = {b.name for b in spec.bodies}
  missing = [name for name in (*TRACKED, *FEET) if name not in bodies]
  if missing:
    raise SystemExit(f"{path} has no bodies named {sorted(set(missing))}: the tracking cost and "
                     "the reference name the Unitree G1's bodies")
  if "floor" not in {g.name for g in spec.geoms}:
    raise SystemExit(f"{path}: expected a geom named 'floor' (the G1's scene.xml has one)")
  motion.floor_contact_sensors(spec, FOOT_SENSORS, robot="pelvis")
  model = spec.compile()
  free = mujoco.mjtJoint.mjJNT_FREE
  if model.njnt == 0 or model.jnt_type[0] != free or np.any(model.jnt_type[1:] == free):
    raise SystemExit(f"{path}: expected one free root joint followed by hinges, as the G1 has")
  servo = (model.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT) & np.isclose(
    model.actuator_gainprm[:, 0], -model.actuator_biasprm[:, 1])
  if model.nu != model.nv - 6 or not np.all(servo):
    raise SystemExit(f"{path}: expected one position actuator per hinge (controls are joint "
                     "targets), as the G1 has")
  if not np.isclose(-model.opt.gravity[2], G, rtol=1e-3):
    raise SystemExit(f"{path}: the reference assumes g = {G} m/s^2, the model has "
                     f"{-model.opt.gravity[2]}")
  return model


# -------------------------------------------------------------------------------- the clip


def tracking_cost(sim: mjbatch_jax.Simulator, clip: dict) -> control.Cost:
  """The tracked bodies against the clip (motion.tracking_cost with the seed's weights)."""
  return motion.tracking_cost(sim, clip["xpos"], clip["xquat"], clip["qpos"], TRACKED,
                              **common.G1_TRACKING)


def clip_of(model: mujoco.MjModel, ref: Reference, feasible: motion.Feasibility,
            frames: int) -> dict:
  """The tracker's clip: per frame, qpos and the tracked bodies' poses; per knot, the servo
  targets that give the reference's torques over it ("servo") and the joint angles it ends at
  ("angles"): the two initial guesses."""
  data = mujoco.MjData(model)
  ids = [model.body(name).id for name in TRACKED]
  rows = ref.frames(frames)
  qpos = ref.qpos[rows]
  xpos, xquat = [], []
  for q in qpos:
    data.qpos[:] = q
    mujoco.mj_kinematics(model, data)
    xpos.append(data.xpos[ids].copy())
    xquat.append(data.xquat[ids].copy())
  # Knot t runs from frame t to frame t + 1: the mean of the fine grid's servo targets over it.
  servo = feasible.servo[1:FINE * (frames - 1) + 1].reshape(frames - 1, FINE, -1).mean(axis=1)
  servo = np.concatenate([servo, qpos[-1:, 7:]])  # the last knot holds the last frame
  lo, hi = model.actuator_ctrlrange.T
  angles = qpos[np.minimum(np.arange(1, frames + 1), frames - 1), 7:]
  return {"qpos": qpos, "xpos": np.array(xpos), "xquat": np.array(xquat),
          "servo": np.clip(servo, lo, hi), "angles": np.clip(angles, lo, hi),
          "contact": ref.contact[rows]}


def start_state(sim: mjbatch_jax.Simulator, clip: dict) -> jax.Array:
  """At rest in the clip's first pose, the servos holding it."""
  layout = sim.layout
  return sim.init_state(1)[0].at[layout.qpos].set(clip["qpos"][0]).at[layout.ctrl].set(
    clip["qpos"][0, 7:])


# ---------------------------------------------------------------------------- replays


def replay(sim: mjbatch_jax.Simulator, params, start, plan: dict, nstep: int, feedback
           ) -> tuple[jax.Array, jax.Array]:
  """The plan from start (N, nstate) on N simulations, one rollout call per knot.

  feedback (N,): 1 where u_t = ctrl_t + K_t dx_t, dx_t the measured state's tangent difference
  from the plan's state t (what a tracking controller on the robot does each knot); 0 where
  u_t = ctrl_t (open loop: the feedback term is multiplied by zero, exactly). Returns every
  physics step's states (N, F * nstep, nstate) and sensordata.
  """
  joints = tangent.Joints.of(sim.model)
  lay = sim.layout
  lo, hi = (jnp.asarray(b) for b in sim.model.actuator_ctrlrange.T)
  feedback = jnp.asarray(feedback, start.dtype)[:, None]

  def knot(x, inputs):
    u, gain, nominal = inputs
    dq = tangent.differentiate_pos(joints, nominal[lay.qpos], x[:, lay.qpos], 1.0)
    dx = jnp.concatenate([dq, x[:, lay.qvel] - nominal[lay.qvel]], axis=-1)
    u = jnp.clip(u + feedback * (dx @ gain.T), lo, hi)
    held = jnp.broadcast_to(u[:, None], (x.shape[0], nstep, u.shape[-1]))
    xs, sensors = mjbatch_jax.rollout(x, held, params)
    return xs[:, -1], (xs, sensors)

  ctrl, gains, states = (jnp.asarray(plan[k]) for k in ("ctrl", "gains", "states"))
  _, (xs, sensors) = jax.lax.scan(knot, start, (ctrl, gains.astype(ctrl.dtype), states[:-1]))
  return xs.swapaxes(0, 1).reshape(start.shape[0], -1, sim.nstate), sensors.swapaxes(
    0, 1).reshape(start.shape[0], -1, sensors.shape[-1])


def flip_metrics(qpos: np.ndarray, floor: np.ndarray, dt: float) -> dict:
  """The flip's numbers from one replay's physics steps.

  qpos (S, nq) and floor (S, 3): each step's contact counts with the floor of the left foot,
  the right foot and the whole robot. The flight is the longest stretch with nothing on the
  floor (a robot lying with its feet up is not flying); landing is its end.
  """
  feet = floor[:, 2] > 0
  rot = np.zeros((len(qpos), 9))
  for i, q in enumerate(qpos):
    mujoco.mju_quat2Mat(rot[i], q[3:7])
  pitch = np.unwrap(np.arctan2(-rot[:, 6], rot[:, 0]))
  best, begin = (0, 0), None
  for i, airborne in enumerate(np.r_[~feet, False]):
    if airborne and begin is None:
      begin = i
    elif not airborne and begin is not None:
      best = max(best, (i - begin, begin))
      begin = None
  length, off = best
  down = off + length  # the first step on the floor again
  height = qpos[:, 2]
  out = {"rotation_rad": float(pitch[off] - pitch[min(down, len(pitch) - 1)]) if length else 0.0,
         "flight_s": length * dt, "apex_m": float(height.max())}
  after = slice(down, None)
  only_feet = np.all(floor[after, 2] == floor[after, 0] + floor[after, 1])
  both = np.any((floor[after, 0] > 0) & (floor[after, 1] > 0))
  out["landed"] = bool(length * dt >= MIN_FLIGHT and down < len(qpos) and only_feet and both)
  low = np.flatnonzero(height[after] <= PELVIS_UPRIGHT)
  first_up = down + (low[-1] + 1 if len(low) else 0)
  out["upright_s"] = float(max(len(qpos) - first_up, 0) * dt) if out["landed"] else 0.0
  out["takeoff_s"], out["touchdown_s"] = off * dt, down * dt
  # Where the pelvis points at either end (positive: leaning forward): a full turn in flight
  # lands it where it took off.
  last = min(down, len(pitch) - 1)
  out["takeoff_pitch"], out["touchdown_pitch"] = _wrap(pitch[off]), _wrap(pitch[last])
  return out


def robot_params(sim: mjbatch_jax.Simulator, count: int):
  """count nominal robots with the fields robust_params randomises."""
  return sim.params(count, ("body_mass", "geom_friction"), select={"geom_friction": ["floor"]},
                    set_const=True)


def robust_params(sim: mjbatch_jax.Simulator, count: int, seed: int):
  """count simulations with every link's mass scaled by a factor in [0.9, 1.1] and the floor's
  sliding friction in [0.6, 1.0] (the feet's is 0.6; MuJoCo takes the larger)."""
  params = robot_params(sim, count)
  friction = sim.model.geom_friction[sim.model.geom("floor").id]
  return mjbatch_jax.randomize(
    jax.random.key(seed), params, scale={"body_mass": (0.9, 1.1)},
    uniform={"geom_friction": (np.r_[0.6, friction[1:]], np.r_[1.0, friction[1:]])})


# ------------------------------------------------------------------ the initial guess: CEM

DIVERGED = np.array([mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL,
                     mujoco.mjtWarning.mjWARN_BADQACC], dtype=int)
# The sampling planner's plan: the warm start up to the push; then phases whose knots hold
# whole-body synergy targets (both sides alike) for a sampled time each; then a ramp to the
# standing targets. CEM samples the knots' targets and times.
SYNERGIES = ("hip_pitch", "knee", "ankle_pitch", "waist_pitch", "shoulder_pitch", "elbow")
# Where the search starts (--program): per phase, (synergy targets in rad, duration in s) in the
# order of SYNERGIES; targets beyond a joint's range are clipped.
PROGRAMS = {
  # Phases push, tuck, open, settle: a hard hip and knee extension together with the arms
  # swinging up, a full tuck, the legs out for the landing, a crouch (where earlier searches
  # ended). It leaves with the pelvis already pitched back about 1 rad, and the turn the flight
  # counts is 2 pi + take-off pitch - touchdown pitch: about 4.7 rad. It is the robust one.
  "together": np.array([
    [0.525, 0.870, 0.032, 0.592, -2.365, 1.768, 0.241],
    [-2.714, 2.499, -0.723, 0.209, -1.226, 1.330, 0.197],
    [-1.766, 1.527, -0.688, 0.123, -0.998, 0.694, 0.068],
    [-2.038, 2.700, -1.441, 0.535, -0.452, 0.382, 0.705],
  ]),
  # Phases rise, push, tuck, open, settle: the push in two, knees before hips. First the knees and
  # ankles extend with the hips held flexed and the arms swinging forward, so the centre of mass
  # rises over the toes with the pelvis still pitched forward; then the hips extend, the ankles
  # point and the arms go overhead, and the floor's push passes in front of the centre of mass. It
  # leaves with the pelvis leaning forward, angular momentum to spare but a low jump, and turns
  # about 5.9 rad on the nominal robot; its short, fast flight is what the landing (see the
  # landing's notes) makes robust. Its targets are kept to 4 decimals: rounded to 3 (0.5 mrad)
  # they land it on a knee.
  "knees-first": np.array([
    [-2.1958, 0.8237, -0.0834, -0.2063, -1.2559, 1.1478, 0.0790],
    [0.0892, 0.2708, 0.9235, -0.2046, -2.7890, -0.2516, 0.2000],
    [-3.1659, 2.5694, -0.7904, -0.1028, -1.4005, 1.1663, 0.0800],
    [-2.2016, 1.3584, -0.5946, 0.4386, -0.5518, 0.6483, 0.0600],
    [-1.7602, 2.2354, -2.2249, 0.5736, -1.1879, 0.4252, 0.7600],
  ]),
}
PROGRAM_SPREAD = np.array([0.15] * len(SYNERGIES) + [0.03])  # CEM's first standard deviations
RAMP_S = 0.6  # from the settling crouch to standing
# The sampling planner's objective (for the initial guess only: iLQR then refines with the
# seed's cost alone) is the flip's, with the tracking cost a fifth of it: at full weight it
# prefers a plan that follows the infeasible reference's bodies early and never lands. Added:
# each knot from the push on that ends with a body other than the feet on the floor; each radian
# by which the backward turn in flight (between knots that end off the floor) falls short of a
# full turn; and over the last STAND_KNOTS, each knot with the pelvis below PELVIS_UPRIGHT and
# the pelvis's tilt (1 - cos pitch) summed.
TRACK_SHARE = 0.2
TOUCH_PENALTY = 200.0
TURN_PENALTY = 2000.0
TURN_GOAL = 6.15  # rad: a little past the target 2 pi - 0.3, so the search keeps turning
LOW_PENALTY = 50.0
TILT_PENALTY = 100.0
STAND_KNOTS = 55  # 1.1 s: upright_s's target is 1 s
# Each candidate is run on this many randomised robots (as robust_params, drawn afresh each
# iteration and apart from the robustness replay's) and scored by the mean: a plan that lands
# only on the nominal robot is found easily and lands on a quarter of the others.
CEM_ROBOTS = 4
CEM_SEED = 1000


def pelvis_pitch(sim: mjbatch_jax.Simulator, states) -> jax.Array:
  """The pelvis's pitch (as pitch_of) in each of states (..., nstate)."""
  quat = sim.layout.qpos.start + 3
  w, x, y, z = (states[..., quat + i] for i in range(4))
  return jnp.arctan2(-2 * (x * z - w * y), 1 - 2 * (y * y + z * z))


def synergy_matrix(model: mujoco.MjModel) -> np.ndarray:
  """(len(SYNERGIES), nu): each synergy's servo targets (both sides alike)."""
  rows = np.zeros((len(SYNERGIES), model.nu))
  for k, joint in enumerate(SYNERGIES):
    for i in range(model.nu):
      name = model.actuator(i).name
      if name.endswith(f"{joint}_joint") and (name.startswith(SIDES) or "waist" in name):
        rows[k, i] = 1.0
  return rows


def program(model: mujoco.MjModel, guess: np.ndarray, t_push: float):
  """z (phases * 7,) -> the plan (F, nu): see PROGRAMS."""
  synergy = jnp.asarray(synergy_matrix(model))
  chosen = jnp.asarray(synergy_matrix(model).sum(axis=0) > 0)
  base = jnp.asarray(guess)
  lo, hi = (jnp.asarray(b) for b in model.actuator_ctrlrange.T)
  t = FRAME_DT * jnp.arange(len(base))  # each knot's start
  stand = base[-1]

  def plan(z):
    z = z.reshape(-1, len(SYNERGIES) + 1)
    targets = jnp.where(chosen, z[:, :-1] @ synergy, base[None, 0])  # (P, nu)
    ends = t_push + jnp.cumsum(jnp.clip(z[:, -1], 0.04, 1.0))
    begins = jnp.concatenate([jnp.array([t_push]), ends[:-1]])
    u = base
    for k in range(len(z)):
      on = (t >= begins[k]) & (t < ends[k])
      u = jnp.where(on[:, None], jnp.where(chosen, targets[k], base), u)
    ramp = jnp.clip((t - ends[-1]) / RAMP_S, 0.0, 1.0)[:, None]
    settle = jnp.where(chosen, targets[-1], base)
    u = jnp.where((t >= ends[-1])[:, None], (1 - ramp) * settle + ramp * stand, u)
    return jnp.clip(u, lo, hi)

  return plan


def cem(sim, cost: control.Cost, start, base: np.ndarray, t_push: float, nstep: int,
        samples: int, iterations: int, seed: int, start_program: np.ndarray, log=print
        ) -> tuple[jax.Array, np.ndarray]:
  """Cross-entropy search over a program's knots (see PROGRAMS) from start_program (phases, 7)
  for the flip's objective (see TRACK_SHARE); every iteration's candidates are the rows of one
  rollout call. The best plan and its program (phases, 7); with no iterations, start_program's."""
  frames = len(base)
  plan = program(sim.model, base, t_push)
  weights = cost_terms.weights(cost.terms, frames)
  rows = samples * CEM_ROBOTS
  cols = floor_columns(sim)
  pushing = jnp.asarray(FRAME_DT * np.arange(1, frames + 1) > t_push)
  standing = jnp.asarray(np.arange(1, frames + 1) > frames - STAND_KNOTS)
  height = sim.layout.qpos.start + 2

  @jax.jit
  def evaluate(z, params):
    ctrls = jnp.repeat(jax.vmap(plan)(z), CEM_ROBOTS, axis=0)  # each candidate's robots in turn
    x0 = jnp.broadcast_to(start, (rows, start.shape[-1]))
    states, sensors, obs, warnings = mjbatch_jax.rollout(
      x0, ctrls, params, nstep=nstep, observe=cost.observe, return_warnings=True)
    held = jnp.concatenate([ctrls[:, 1:], ctrls[:, -1:]], axis=1)
    t = jnp.broadcast_to(jnp.arange(1, frames + 1), (rows, frames))
    r = jax.vmap(jax.vmap(cost.residual))(states, held, obs, t)
    total = TRACK_SHARE * jnp.sum(cost_terms.knot_cost(cost.terms, r, weights[1:]), axis=-1)
    floor = sensors[..., cols]
    touches = jnp.sum(pushing & (floor[..., 2] > floor[..., 0] + floor[..., 1]), axis=-1)
    pitch = pelvis_pitch(sim, states)
    flown = turn_in_flight(sim, states, floor)
    low = jnp.sum(standing & (states[..., height] < PELVIS_UPRIGHT), axis=-1)
    tilt = jnp.sum(standing * (1 - jnp.cos(pitch)), axis=-1)
    total += (TOUCH_PENALTY * touches + TURN_PENALTY * jnp.maximum(TURN_GOAL - flown, 0.0)
              + LOW_PENALTY * low + TILT_PENALTY * tilt)
    bad = jnp.any(warnings[:, DIVERGED] > 0, axis=-1) | ~jnp.isfinite(total)
    return jnp.where(bad, jnp.inf, total).reshape(samples, CEM_ROBOTS).mean(axis=1)

  elites = max(samples // 8, 2)
  mean = jnp.asarray(start_program.ravel())
  std = jnp.asarray(np.tile(PROGRAM_SPREAD, len(start_program)))
  key = jax.random.key(seed)
  best_z, best = mean, jnp.inf
  for i in range(iterations):
    key, sub = jax.random.split(key)
    z = control.gaussian_samples(sub, mean, std, samples)  # the mean is candidate 0
    z = z.at[1].set(best_z)  # and the best so far candidate 1
    costs = evaluate(z, robust_params(sim, rows, CEM_SEED + i))
    mean, std = control.cem_update(mean, std, z, costs, elites, std_min=0.01)
    if costs.min() < best:
      best, best_z = costs.min(), z[jnp.argmin(costs)]
    log(f"CEM {i + 1:3d}: best {float(best):10.1f}  elite mean "
        f"{float(jnp.sort(costs)[:elites].mean()):10.1f}")
  return plan(best_z), np.asarray(best_z).reshape(start_program.shape)


# ----------------------------------------------------------------------------------- solve

# Contacts make the linearisation good only near the trajectory: a strong start for mu, and mu
# raised after short steps (see control.ILQRSettings).
SETTINGS = control.ILQRSettings(mu_init=10.0, mu_min=1e-3, mu_max=1e8, tolerance=1e-4)
# The solve's gains are computed apart (closed_loop_gains), about the plan it ends with.
ROUND = SETTINGS._replace(final_gains=False)
GUARD_ROBOTS = 8  # randomised robots on which an iLQR step's plan must still stand (see track)
UPRIGHT_GOAL = 1.0  # s upright after landing: what counts as standing
VALIDATION = 16  # randomised robots on which the closed loop's gains are chosen
KIND = "g1_backflip"
# And either "gains" (the closed loop is the plan's gains) or "holds" and "landing_knots" (the
# closed loop is the landing's: see plan_landing).
PLAN_KEYS = ("ctrl", "states", "start", "ref_qpos", "ref_xpos", "ref_xquat")


def version(model: mujoco.MjModel, flip: Flip) -> str:
  """What a saved plan depends on: the model's bytes, the flip, the clip's grid and the cost."""
  return common.model_fingerprint(model, dataclasses.astuple(flip), FRAME_DT, FINE, TRACKED,
                                  *common.g1_tracking_parts())


def report_reference(model: mujoco.MjModel, ref: Reference, f: motion.Feasibility,
                     log=print) -> dict:
  """Prints what the flip asks of the robot against its limits; returns it as a dict."""
  v = ref.takeoff_velocity
  i_off = round(ref.takeoff_s / (FRAME_DT / FINE))
  rise = ref.apex_m - ref.qpos[i_off, 2]
  log(f"reference: take-off at {ref.takeoff_s:.3f} s with the centre of mass at "
      f"({v[0]:+.2f}, {v[2]:.2f}) m/s; flight {ref.flight_s:.3f} s; pelvis apex {ref.apex_m:.2f} "
      f"m ({rise:.2f} m above take-off); L = {ref.momentum:.2f} kg m^2/s (the pelvis turning at "
      f"{ref.takeoff_rate:.1f} rad/s at take-off, {ref.touchdown_rate:.1f} at touchdown); IK "
      f"within {1e3 * ref.ik_error_m:.2f} mm")
  names = [model.actuator(i).name.removesuffix("_joint") for i in range(model.nu)]
  order = np.argsort(-f.torque_ratio)
  over = [i for i in order if f.torque_ratio[i] > 1.0]
  log("feasibility: peak torque / limit: " + ", ".join(
    f"{names[i]} {f.torque_ratio[i]:.2f}" for i in order[:6]))
  phase_ratio = {phase: f.peak_ratio(rows) for phase, rows in phases(ref).items()}
  for phase, ratio in phase_ratio.items():
    top = np.argsort(-ratio)[:4]
    log(f"feasibility:   {phase:8s} " + ", ".join(f"{names[i]} {ratio[i]:.2f}" for i in top))
  floor = {k: v for k, v in f.worst.items() if k != "torque"}
  log("feasibility: floor wrench: " + ", ".join(
    f"{k} {value:.3g} (limit {limit:.3g})" for k, (value, limit) in floor.items())
      + f"; the flight's physics leaves {f.flight_wrench:.0f} N unexplained")
  if f.ok:
    log("feasibility: within the G1's limits")
  else:
    worst = ", ".join(f"{names[i]} {f.torque_ratio[i]:.1f}x" for i in over[:8])
    log(f"feasibility: NOT within the G1's limits: torques exceed them ({worst or 'none'})"
        + ("" if f.worst["cop toe m"][0] <= SOLE.x[1] and f.worst["cop heel m"][0] >= SOLE.x[0]
           else "; the centre of pressure leaves the soles"))
  return {"takeoff_velocity": v, "flight_s": ref.flight_s, "apex_m": ref.apex_m,
          "momentum": ref.momentum, "takeoff_rate": ref.takeoff_rate,
          "torque_ratio": dict(zip(names, f.torque_ratio.tolist(), strict=True)),
          "phase_torque_ratio": {phase: dict(zip(names, r.tolist(), strict=True))
                                 for phase, r in phase_ratio.items()},
          "floor": floor, "feasible": f.ok}


def prepare(args: argparse.Namespace, log=print):
  """The model, the reference, its feasibility and the clip the tracker follows."""
  model = load_model(args.model)
  nstep = round(FRAME_DT / model.opt.timestep)
  if not np.isclose(nstep * model.opt.timestep, FRAME_DT):
    raise SystemExit(f"the model's timestep {model.opt.timestep} does not divide {FRAME_DT} s")
  flip = Flip()
  with common.Stopwatch()() as watch:
    ref = build_reference(model, flip, CLIP_FRAMES, log=log)
    feasible = feasibility(model, ref)
  log(f"reference: {CLIP_FRAMES} frames of {FRAME_DT} s by IK on a {1e3 * FRAME_DT / FINE:g} ms "
      f"grid, and its inverse dynamics, in {watch.wall:.1f} s")
  report = report_reference(model, ref, feasible, log)
  return model, flip, ref, clip_of(model, ref, feasible, args.frames), nstep, report


def floor_columns(sim: mjbatch_jax.Simulator) -> np.ndarray:
  return np.array([sim.names.sensor(f"floor contact {label}").start
                   for label in (*FOOT_SENSORS, "robot")])


def evaluate(sim, clip: dict, start, plan: dict, nstep: int, robust: int, seed: int) -> dict:
  """Open- and closed-loop replays, tracking errors, and the closed loop on randomised robots."""
  if "holds" in plan:
    return _evaluate_landing(sim, clip, start, plan, nstep, robust, seed)
  cols = floor_columns(sim)
  dt = sim.model.opt.timestep
  run = jax.jit(replay, static_argnums=(0, 4))
  out = {}
  # The open and the closed loop on the nominal robot: the two rows of the same calls.
  xs, sensors = run(sim, sim.params(2), jnp.broadcast_to(start, (2, sim.nstate)), plan, nstep,
                    np.array([0.0, 1.0]))
  for row, name in enumerate(("open_loop", "closed_loop")):
    _keep_replay(out, name, sim, xs[row], sensors[row])
  knots = _tracking_errors(out, sim, clip, nstep)
  # The saved plan replayed open-loop must give its states bit for bit; the closed loop on the
  # nominal robot differs only by the feedback of rounding-level state differences.
  nominal = np.asarray(plan["states"])[1:]
  out["replay_gap"] = float(np.max(np.abs(out["open_loop_states"][nstep - 1::nstep] - nominal)))
  out["closed_loop_gap"] = float(np.max(np.abs(np.asarray(knots) - nominal)))
  if robust:
    # Each randomised robot twice, closed loop then open loop: rows of the same calls.
    params = jax.tree.map(lambda leaf: jnp.concatenate([leaf, leaf]),
                          robust_params(sim, robust, seed))
    starts = jnp.broadcast_to(start, (2 * robust, sim.nstate))
    xs, sensors = run(sim, params, starts, plan, nstep, np.repeat([1.0, 0.0], robust))
    qpos, floor = np.asarray(xs[..., sim.layout.qpos]), np.asarray(sensors[..., cols])
    landed = {}
    for half, name in enumerate(("robust", "robust_open_loop")):
      each = [flip_metrics(qpos[i], floor[i], dt) for i in range(half * robust,
                                                                 (half + 1) * robust)]
      landed[name] = float(np.mean([stands(m) for m in each]))
      out[name] = each
    out["robust_landed_share"] = landed["robust"]
    out["robust_open_loop_landed_share"] = landed["robust_open_loop"]
  return out


def _keep_replay(out: dict, name: str, sim: mjbatch_jax.Simulator, xs, sensors) -> None:
  """out[name] = one replay's flip_metrics, with its states and floor contacts beside."""
  floor = np.asarray(sensors)[:, floor_columns(sim)]
  out[name] = flip_metrics(np.asarray(xs)[:, sim.layout.qpos], floor, sim.model.opt.timestep)
  out[name + "_states"], out[name + "_floor"] = np.asarray(xs), floor


def _tracking_errors(out: dict, sim: mjbatch_jax.Simulator, clip: dict, nstep: int) -> np.ndarray:
  """out["errors"]: the closed loop's twelve bodies against the clip after each knot; returns
  the closed loop's knot states."""
  knots = out["closed_loop_states"][nstep - 1::nstep]
  obs = mjbatch_jax.forward(jnp.asarray(knots), sim.params(len(knots)), ("xpos", "xquat"))
  ids = np.asarray(sim.names.bodies(list(TRACKED)))
  held = np.minimum(np.arange(1, len(knots) + 1), len(clip["qpos"]) - 1)
  out["errors"] = np.asarray(motion.pose_errors(obs["xpos"][:, ids], obs["xquat"][:, ids],
                                                clip["xpos"][held], clip["xquat"][held]))
  return knots


def _evaluate_landing(sim, clip: dict, start, plan: dict, nstep: int, robust: int, seed: int
                      ) -> dict:
  """evaluate for a plan with a landing (see the landing's notes): the nominal robot and the
  randomised ones are the rows of the same calls, open loop (the plan's controls: its first
  hold) and closed loop (landing_replay)."""
  holds = np.asarray(plan["holds"])
  decide, tilt_at, land_from = (int(k) for k in plan["landing_knots"])
  landing_knots = (decide, tilt_at, land_from)
  params = robot_params(sim, 1)
  if robust:
    params = with_nominal(sim, robust_params(sim, robust, seed))
  open_xs, open_sensors = jax.jit(control.open_loop, static_argnums=3)(params, start, holds[0, 0],
                                                                       nstep)
  stand_height = float(np.asarray(start)[sim.layout.qpos][2])
  xs, sensors, chosen = landing_replay(sim, params, start, holds, landing_knots, nstep,
                                       stand_height)
  out: dict = {"holds_chosen": chosen}
  _keep_replay(out, "open_loop", sim, open_xs[0], open_sensors[0])
  _keep_replay(out, "closed_loop", sim, xs[0], sensors[0])
  knots = _tracking_errors(out, sim, clip, nstep)
  nominal = np.asarray(plan["states"])[1:]
  out["replay_gap"] = float(np.max(np.abs(out["open_loop_states"][nstep - 1::nstep] - nominal)))
  # Before the landing MPC the closed loop flies a hold: the plan's own on the nominal robot.
  before = land_from if not chosen[0].any() else decide
  out["closed_loop_gap"] = float(np.max(np.abs(knots[:before] - nominal[:before])))
  if robust:
    cols = floor_columns(sim)
    dt = sim.model.opt.timestep
    for name, (x, s) in (("robust", (xs, sensors)), ("robust_open_loop", (open_xs, open_sensors))):
      x, s = np.asarray(x), np.asarray(s)
      out[name] = [flip_metrics(x[i][:, sim.layout.qpos], s[i][:, cols], dt)
                   for i in range(1, robust + 1)]
    out["robust_landed_share"] = float(np.mean([stands(m) for m in out["robust"]]))
    out["robust_open_loop_landed_share"] = float(np.mean([stands(m) for m in
                                                          out["robust_open_loop"]]))
  return out


def summary_of(result: dict) -> dict:
  """The line Must show 1 asks for."""
  closed, e = result["closed_loop"], result["errors"]
  return {
    "rotation_rad": closed["rotation_rad"], "flight_s": closed["flight_s"],
    "apex_m": closed["apex_m"], "landed": closed["landed"], "upright_s": closed["upright_s"],
    "mean_pos_err_mm": 1e3 * float(np.linalg.norm(e[..., :3], axis=-1).mean()),
    "mean_rot_err_deg": float(np.degrees(np.linalg.norm(e[..., 3:], axis=-1).mean())),
    "open_loop_landed": result["open_loop"]["landed"],
    "robust_landed_share": result.get("robust_landed_share"),
  }


def print_result(result: dict, log=print) -> None:
  for name in ("open_loop", "closed_loop"):
    m = result[name]
    log(f"{name.replace('_', ' ')}: backward pelvis rotation {m['rotation_rad']:.2f} rad "
        f"({np.degrees(m['rotation_rad']):.0f} deg) over a flight of {m['flight_s']:.3f} s "
        f"({m['takeoff_s']:.2f}-{m['touchdown_s']:.2f} s), pelvis apex {m['apex_m']:.2f} m, "
        f"{'landed on the feet' if m['landed'] else 'did NOT land on the feet'}, upright for "
        f"{m['upright_s']:.2f} s after; the pelvis pitched {m['takeoff_pitch']:+.2f} rad at "
        f"take-off, {m['touchdown_pitch']:+.2f} at touchdown")
  e = result["errors"]
  pos, rot = 1e3 * np.linalg.norm(e[..., :3], axis=-1), np.degrees(np.linalg.norm(e[..., 3:],
                                                                               axis=-1))
  log("tracking error (closed loop, mean over frames): " + ", ".join(
    f"{label} {p:.0f} mm / {r:.1f} deg" for label, p, r in
    zip(LABELS, pos.mean(0), rot.mean(0), strict=True)))
  log(f"open-loop replay differs from the plan's states by {result['replay_gap']:.1e} (0: bit "
      f"for bit); the closed loop by {result['closed_loop_gap']:.1e}")
  if "holds_chosen" in result:
    held, tilt = result["holds_chosen"].T
    log(f"landing: in flight the nominal robot holds the tuck {held[0]} knots longer; "
        f"{np.count_nonzero(held[1:])} of {len(held) - 1} randomised robots hold it longer "
        f"({', '.join(f'{h}: {np.count_nonzero(held[1:] == h)}' for h in range(1, TUCK_HOLDS))})")
    log(f"landing: the nominal robot tilts {LANDING_TILTS[tilt[0]]:g} rad; "
        f"{np.count_nonzero(tilt[1:])} of {len(tilt) - 1} randomised robots tilt otherwise (" +
        ", ".join(f"{LANDING_TILTS[t]:g}: {np.count_nonzero(tilt[1:] == t)}"
                  for t in range(1, len(LANDING_TILTS))) + ")")
  if "robust" in result:
    n = len(result["robust"])
    log(f"robustness ({n} robots, link masses x[0.9, 1.1], floor friction [0.6, 1.0]): "
        f"closed loop lands {100 * result['robust_landed_share']:.0f}%, open loop "
        f"{100 * result['robust_open_loop_landed_share']:.0f}%")


def solve(args: argparse.Namespace) -> dict:
  model, flip, ref, clip, nstep, report = prepare(args)
  frames = args.frames
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    cost = tracking_cost(sim, clip)
    start = start_state(sim, clip)
    one = sim.params(1)
    total = jax.jit(lambda u: control.plan_cost(cost, one, start, u, nstep)[0])
    angles, servo = jnp.asarray(clip["angles"]), jnp.asarray(clip["servo"])
    costs = float(total(angles)), float(total(servo))
    guess = angles if costs[0] <= costs[1] else servo
    print(f"cost of the reference's joint angles as servo targets {costs[0]:.1f}, of its "
          f"inverse-dynamics servo targets {costs[1]:.1f}: the warm start is the "
          f"{'former' if costs[0] <= costs[1] else 'latter'}")
    sampling, solving = common.Stopwatch(), common.Stopwatch()
    program_z = PROGRAMS[args.program]
    with sampling():
      if args.samples:
        guess, program_z = cem(sim, cost, start, np.asarray(guess), flip.push_start, nstep,
                               args.samples, args.cem_iterations, args.seed, program_z)
        print(f"cost of the sampled plan {float(total(guess)):.1f}")
        jax.block_until_ready(guess)
    with solving():
      result, costs, refused = track(sim, cost, start, guess, nstep, args.iterations,
                                     args.seed)
      jax.block_until_ready(result)
    iterations = len(costs) - 1
    sampled, ilqr_s = sampling.wall, solving.wall
    print(f"solve: CEM {sampled:.1f} s, iLQR {iterations} iterations accepted, {refused} steps "
          f"refused by the guard, in {ilqr_s:.1f} s with compilation ({frames} knots of {nstep} "
          f"steps, {sim.num_threads} threads); cost {costs[0]:.1f} -> {costs[-1]:.1f}")
    landing = None
    if args.program in LANDING_PROGRAMS and args.samples:  # else the plan has no program
      with common.Stopwatch()() as landing_watch:
        landing = plan_landing(sim, start, np.asarray(result.ctrls), program_z,
                               flip.push_start, nstep, args.push_iterations)
      print(f"landing: planned in {landing_watch.wall:.1f} s")
    if landing is None:
      gains, gains_mu = closed_loop_gains(sim, cost, start, result, nstep, args.gains_mu,
                                          args.seed)
      plan = {"ctrl": np.asarray(result.ctrls), "gains": np.asarray(gains, np.float32),
              "states": np.asarray(result.states)}
    else:
      plan, gains_mu = landing, None
    evaluated = evaluate(sim, clip, start, plan, nstep, args.robust, args.seed)
  print_result(evaluated)
  summary = summary_of(evaluated)
  common.save_result(args.out, KIND, {**plan, "start": np.asarray(start),
                                      "ref_qpos": clip["qpos"], "ref_xpos": clip["xpos"],
                                      "ref_xquat": clip["xquat"]},
                     {"frames": frames, "nstep": nstep, "iterations": iterations,
                      "threads": args.threads, "robust": args.robust, "seed": args.seed,
                      "gains_mu": gains_mu, "program": args.program,
                      "landing": None if landing is None else landing_settings()},
                     version=version(model, flip))
  record = {"reference": report, "solve": {"cem_seconds": sampled, "ilqr_seconds": ilqr_s,
                                           "iterations": iterations, "costs": costs,
                                           "gains_mu": gains_mu},
            "summary": summary}
  common.write_json(args.out.with_suffix(".json"), record)
  print(f"plan saved to {args.out}")
  common.print_summary(summary)
  return summary


def open_loop_stands(sim: mjbatch_jax.Simulator, params, start, ctrls, nstep: int) -> list:
  """Whether ctrls replayed open-loop stands (see stands) on each robot of params."""
  return stands_per_row(sim, *control.open_loop(params, start, ctrls, nstep))


def stands_per_row(sim: mjbatch_jax.Simulator, xs, sensors) -> list:
  """stands for each row of a replay's physics steps (N, S, nstate) and sensordata."""
  qpos, floor = np.asarray(xs[..., sim.layout.qpos]), np.asarray(sensors[..., floor_columns(sim)])
  return [stands(flip_metrics(qpos[i], floor[i], sim.model.opt.timestep))
          for i in range(len(qpos))]


def with_nominal(sim: mjbatch_jax.Simulator, params):
  """The nominal robot as row 0 before the rows of params (robust_params' fields)."""
  return jax.tree.map(lambda a, b: jnp.concatenate([a, b]), robot_params(sim, 1), params)


def stands(metrics: dict) -> bool:
  """Landed on the feet and upright for the time the target asks."""
  return bool(metrics["landed"] and metrics["upright_s"] >= UPRIGHT_GOAL)


def flip_guard(sim: mjbatch_jax.Simulator, start, guess, nstep: int, seed: int, log=print,
               cost: control.Cost | None = None) -> tuple[Callable | None, list[int]]:
  """track's accept for control.ilqr, and the list it appends each refusal's stand count to.

  None when the warm start guess does not land and stand on the nominal robot (open loop):
  there is no flip to keep. Else accept(states, ctrls) replays ctrls open loop on the nominal
  robot and GUARD_ROBOTS randomised ones (one rollout call; traceable, the verdict through
  jax.pure_callback) and is True when the nominal robot still stands and at least as many
  randomised ones stand as under the warm start. With cost, a refusal's log line also gives the
  refused plan's cost (ilqr asks only about a step that lowers it; one more rollout per ask).
  """
  robots = with_nominal(sim, robust_params(sim, GUARD_ROBOTS, seed + 2))
  first = open_loop_stands(sim, robots, start, guess, nstep)
  refused: list[int] = []
  if not first[0]:
    log("the warm start does not land and stand on the nominal robot (open loop): iLQR runs "
        "unguarded")
    return None, refused
  log(f"the warm start stands on the nominal robot and on {sum(first[1:])} of {GUARD_ROBOTS} "
      "randomised ones (open loop): iLQR refuses steps that stand on fewer")

  def keeps_the_flip(xs, sensors, value) -> np.ndarray:
    ok = stands_per_row(sim, xs, sensors)
    keep = ok[0] and sum(ok[1:]) >= sum(first[1:])
    if not keep:
      refused.append(sum(ok[1:]))
      to = "" if np.isnan(value) else f" to {float(value):.1f}"
      log(f"iLQR: a step lowers the cost{to}, but its plan "
          f"{'stands' if ok[0] else 'no longer lands and stands'} on the nominal robot and on "
          f"{sum(ok[1:])} of {GUARD_ROBOTS} randomised ones, open loop (the warm start: "
          f"{sum(first[1:])}): refused, a shorter step about the same linearisation")
    return np.asarray(keep)

  def accept(states, ctrls):
    del states  # the plan is judged by its controls on the randomised robots
    xs, sensors = control.open_loop(robots, start, ctrls, nstep)
    value = (jnp.asarray(jnp.nan) if cost is None else
             control.plan_cost(cost, sim.params(1), start, ctrls, nstep)[0])
    return jax.pure_callback(keeps_the_flip, jax.ShapeDtypeStruct((), jnp.bool_), xs, sensors,
                             value)

  return accept, refused


def track(sim: mjbatch_jax.Simulator, cost: control.Cost, start, guess, nstep: int,
          iterations: int, seed: int, log=print) -> tuple[control.ILQRResult, list[float], int]:
  """control.ilqr from guess, guarded; (its result, the costs before the first and after each
  accepted iteration, how many steps the guard refused).

  The reference asks more than the G1 can give (see the feasibility printout), so the seed's
  tracking cost can prefer a plan that follows its bodies more closely through the flight and
  then falls, or lands only on the nominal robot. When the warm start lands and stands, ilqr's
  accept (flip_guard) refuses a step whose plan, replayed open loop, no longer does, or does on
  fewer of GUARD_ROBOTS randomised robots than the warm start (asked only about a step that
  lowers the cost): ilqr solves the same linearisation again with a larger mu (a shorter step),
  as when no step lowers the cost, and the solve ends when no step is left.
  """
  accept, refused = flip_guard(sim, start, guess, nstep, seed, log, cost)
  result = control.ilqr(cost, sim.params(1), start, guess, nstep=nstep, iterations=iterations,
                        settings=ROUND, accept=accept)
  history = np.asarray(result.costs)
  costs = [float(c) for c in history[:1]]
  for i, value in enumerate(history[1:]):
    if np.isnan(value) or value >= costs[-1]:
      break  # NaN: the solve had stopped; the same cost: that iteration found no step
    costs.append(float(value))
    log(f"iLQR iteration {i + 1}: cost {costs[-1]:.2f}")
  if len(costs) <= int(result.iterations):
    log(f"iLQR iteration {len(costs)}: no step lowers the cost and keeps the flip: done")
  return result, costs, len(refused)


def closed_loop_gains(sim: mjbatch_jax.Simulator, cost: control.Cost, start,
                      result: control.ILQRResult, nstep: int, candidates: tuple[float, ...],
                      seed: int, log=print) -> tuple[jax.Array, float]:
  """The closed loop's gains: a backward pass about the plan at each candidate mu (one
  linearisation, control.ilqr_gains); the one whose closed loop stands on the most of
  VALIDATION randomised robots (drawn apart from the robustness replay's) and on the nominal
  one, ties to the smaller mu.

  The solve's own last gains are no choice: its mu is whatever the last step needed, and how
  much feedback helps depends on the plan (docs/backflip.md).
  """
  one = sim.params(1)
  params = with_nominal(sim, robust_params(sim, VALIDATION, seed + 1))
  run = jax.jit(replay, static_argnums=(0, 4))
  starts = jnp.broadcast_to(start, (VALIDATION + 1, sim.nstate))
  best_score, best_gains, best_mu = (False, -1), None, 0.0
  mus = sorted(candidates)
  _, each = control.ilqr_gains(cost, one, start, result.ctrls, mus, nstep=nstep,
                               settings=SETTINGS)
  # float32 as saved: the choice is made on what is replayed.
  for mu, gains in zip(mus, each.astype(jnp.float32), strict=True):
    plan = {"ctrl": result.ctrls, "gains": gains, "states": result.states}
    xs, sensors = run(sim, params, starts, plan, nstep, np.ones(VALIDATION + 1))
    ok = stands_per_row(sim, xs, sensors)
    score = (ok[0], sum(ok[1:]))
    log(f"closed-loop gains at mu {mu:g}: largest {float(jnp.max(jnp.abs(gains))):.3g}; the "
        f"nominal robot {'stands' if ok[0] else 'falls'}, {sum(ok[1:])} of {VALIDATION} "
        "validation robots stand")
    if best_gains is None or score > best_score:
      best_score, best_gains, best_mu = score, gains, mu
  assert best_gains is not None  # candidates is never empty (the parser's)
  return best_gains, best_mu


# ----------------------------------------------------------------------------- the landing

# knees-first turns far enough on the nominal robot, but link masses within 10% move its turn in
# flight by up to 0.7 rad: alone it stands few randomised robots. For it (LANDING_PROGRAMS) three
# remedies follow the solve, in the order they act on the robot (docs/backflip.md):
# 1. landing_push: the push phases' synergy targets searched again (iLQR's tracking cost does
#    not see the randomised robots) for what the landing needs of the flight: that some hold of
#    the choice in 2. lands each robot on its feet alone where the landing MPC catches it
#    (landing_miss: its capture offset near CAPTURE_GOAL, the pelvis not short of PITCH_FLOOR).
# 2. In flight, at the end of the tuck, a choice (choose_landing): the tuck held 0 to
#    TUCK_HOLDS - 1 knots longer and the rest of the plan later by as much, each run from the
#    measured state on the nominal model to touchdown; the one with the least landing_miss and
#    only the feet on the floor is flown, the plan's own while its miss is within CAPTURE_BAND
#    (in metres of offset). Held longer, the tucked body turns more before it opens; the robots
#    that spin slowly touch down forward, on a knee or a hand, without it.
# 3. The waist and both hips tilt the pelvis back over the knots about the nominal touchdown,
#    by an amount chosen per robot two knots before (a second choice, as in 2., among
#    LANDING_TILTS; the plan's own is TILT), and from that choice on (LAND_LEAD) a sampling MPC
#    (landing_mpc), warm started from the chosen plan, lands the robot on its feet and holds it
#    there upright to the end of the clip, planning on the nominal model from the state measured
#    each knot. The plan's own controls stand only the nominal robot: the landing is where the
#    randomised ones differ most.
LANDING_PROGRAMS = ("knees-first",)
# The push's search scores the landing, not the turn: each candidate through the choice's holds
# by the capture offset at touchdown (landing_miss), every candidate of an iteration on the same
# robots (the nominal one and PUSH_ROBOTS randomised), every physics step. CEM's mean, scored on
# robots new each iteration, swings from one iteration to the next, and the best of noisy scores
# is the luckiest draw: so the nominal robot counts twice in each candidate's score and its turn
# short of PUSH_TURN PUSH_SHORT_WEIGHT times, and the mean flown is the best of every
# iteration's, checked on PUSH_CHECK_ROBOTS robots of their own.
PUSH_SAMPLES, PUSH_ITERATIONS, PUSH_ROBOTS, PUSH_SEED = 32, 15, 12, 3000
PUSH_SHORT_WEIGHT = 4.0  # per radian of the nominal robot's turn short of PUSH_TURN
PUSH_CHECK_ROBOTS, PUSH_CHECK_SEED = 32, 100  # see landing_push: which mean is flown
PUSH_SPAN = 32  # knots after the choice within which each robot must touch down
PUSH_SPREAD = 0.1  # rad: CEM's first standard deviation of each synergy target
TILT = 0.35  # rad added to the waist's and the hips' pitch targets: the pelvis tilts back
TUCK_HOLDS = 5
# The tilt's second choice: the hold chosen at the end of the tuck is predicted on the nominal
# model 25 knots ahead, where the robot's own masses move its touchdown; two knots before the tilt
# (about 0.1 s before touchdown, in ballistic flight) the nominal model predicts the feet's
# placement well, as well as each robot's own model would.
LANDING_TILTS = (TILT, -0.3, 0.0, 0.15, 0.25, 0.5)  # rad, the plan's own first
TILT_LEAD = 2  # knots between the tilt's choice and its first knot
# What says at touchdown whether the landing MPC can stand the robot: the capture offset, the
# centre of mass's x ahead of the feet's midpoint plus its x velocity times CAPTURE_TAU (about
# sqrt(z / g) at touchdown): the robots that stood touched down with it at about 0.1-0.2 m, and
# the pelvis's pitch alone did not tell them from those that fell (docs/backflip.md). A miss is
# scored |offset - CAPTURE_GOAL| / CAPTURE_SCALE (see landing_miss); the plan's own hold is kept
# while its miss is within CAPTURE_BAND / CAPTURE_SCALE.
CAPTURE_TAU, CAPTURE_GOAL, CAPTURE_SCALE, CAPTURE_BAND = 0.21, 0.16, 0.2, 0.05
# ...but a robot still spinning fast at touchdown with the offset in that window falls when its
# pelvis touches down less than about 0.43 rad forward: a miss adds the pitch's shortfall below
# PITCH_FLOOR over PITCH_SCALE.
PITCH_FLOOR, PITCH_SCALE = 0.43, 0.1
# The nominal robot's turn in flight that the push's search keeps: the target is
# 2 pi - 0.3 = 5.98 rad.
PUSH_TURN = 6.05
EARLY_KNOTS = 3  # another body on the floor this soon after touchdown: a fall, not a landing
# The landing MPC: CEM over 5 linear knots of the next 20 (0.4 s), 64 candidates, one iteration per
# knot (more samples or iterations gave the same landings at several times the cost); its cost has
# no time in it: bodies other than the feet on the floor, the pelvis's height against standing,
# its z axis's tilt, the centre of mass over the feet's midpoint, the root's and the joints'
# velocities, the controls against the standing targets (the plan's last).
LAND_HORIZON = 20
# The landing MPC takes over LAND_LEAD knots before the knot in which iLQR's plan lands: in flight,
# from each robot's own state, it places the feet under a body turning at its own rate, warm
# started from the hold and the tilt chosen (with the tilt chosen 3 knots before that knot, the
# MPC starts at the tilt's choice). Taken over after touchdown, it stands far fewer of the robots
# that come down off the plan's timing (docs/backflip.md).
LAND_LEAD = 3
LAND_SETTINGS = control.CEMSettings(num_samples=64, num_knots=5, interpolation="linear", noise=0.1,
                                    iterations=1, num_elites=8, std_min=0.02)
LAND_WEIGHTS = {"touch": 300.0, "height": 30.0, "tilt": 50.0, "balance": 300.0, "root_vel": 0.5,
                "joint_vel": 0.01, "ctrl": 0.05}
LAND_SEED = 100


def landing_settings() -> dict:
  """What the landing's closed loop replays with, beside the saved holds (saved in the meta)."""
  return {"capture": [CAPTURE_TAU, CAPTURE_GOAL, CAPTURE_SCALE, CAPTURE_BAND],
          "pitch_floor": [PITCH_FLOOR, PITCH_SCALE], "tilts": list(LANDING_TILTS),
          "tilt_lead": TILT_LEAD, "land_lead": LAND_LEAD, "span": PUSH_SPAN,
          "early_knots": EARLY_KNOTS, "horizon": LAND_HORIZON,
          "mpc": _settings_record(LAND_SETTINGS), "weights": LAND_WEIGHTS, "seed": LAND_SEED}


def _settings_record(s: control.CEMSettings) -> list:
  """The landing MPC's settings as saved plans record them (the fields of the former
  control.SamplingSettings, in its order: noise_decay and temperature do not apply to CEM)."""
  return ["cem", s.num_samples, s.num_knots, s.interpolation, s.noise, 1.0, s.iterations,
          s.num_elites, s.smoothing, s.std_min, 1.0]


def phase_masks(z: np.ndarray, t_push: float, frames: int) -> np.ndarray:
  """(phases, frames): the knots each of the program's phases holds (as program places them)."""
  z = np.asarray(z).reshape(-1, len(SYNERGIES) + 1)
  t = FRAME_DT * np.arange(frames)
  ends = t_push + np.cumsum(np.clip(z[:, -1], 0.04, 1.0))
  begins = np.r_[t_push, ends[:-1]]
  return (t >= begins[:, None]) & (t < ends[:, None])


def turn_in_flight(sim: mjbatch_jax.Simulator, states, floor) -> jax.Array:
  """The backward turn of the pelvis between knots that end with nothing on the floor, per row
  of knot states (N, T, nstate) and their floor contact counts (N, T, 3)."""
  pitch = pelvis_pitch(sim, states)
  turn = -jnp.angle(jnp.exp(1j * jnp.diff(pitch, axis=-1)))  # backward, per knot
  airborne = floor[..., 2] == 0
  return jnp.sum(jnp.where(airborne[:, 1:] & airborne[:, :-1], turn, 0.0), axis=-1)


def feet_of(sim: mjbatch_jax.Simulator) -> np.ndarray:
  """The body ids of the two feet."""
  return np.asarray(sim.names.bodies(list(FEET)))


def touchdowns(sim: mjbatch_jax.Simulator, states, floor, window: int, obs=None) -> tuple:
  """Per row of physics steps (N, S, nstate) from a state in flight, with their floor contact
  counts (N, S, 3): the pelvis's pitch at the first step with a foot on the floor and whether
  that landing is bad (another body on the floor within window steps of it, or no touchdown).
  With obs (rollout's observe=("subtree_com", "xpos")) also the capture offset there: the
  centre of mass's x ahead of the feet's midpoint plus CAPTURE_TAU times its x velocity (by one
  step's difference)."""
  pitch = pelvis_pitch(sim, states)
  down = floor[..., 2] > 0
  first = jnp.argmax(down, axis=-1)
  at = jnp.take_along_axis(pitch, first[:, None], axis=-1)[:, 0]
  steps = jnp.arange(states.shape[1])
  soon = (steps >= first[:, None]) & (steps < first[:, None] + window)
  early = jnp.any(soon & (floor[..., 2] > floor[..., 0] + floor[..., 1]), axis=-1)
  bad = early | ~down.any(axis=-1)
  if obs is None:
    return at, bad
  rows = jnp.arange(states.shape[0])
  com = obs["subtree_com"][:, :, 1, 0]
  feet = obs["xpos"][:, :, feet_of(sim), 0].mean(axis=-1)
  prev = jnp.maximum(first - 1, 0)
  vx = (com[rows, first] - com[rows, prev]) / sim.model.opt.timestep
  cp = com[rows, first] - feet[rows, first] + CAPTURE_TAU * vx
  return at, bad, cp


def landing_miss(pitch, offset) -> jax.Array:
  """How far a touchdown (the pelvis's pitch, the capture offset) is from what the landing MPC
  catches: the offset's distance from CAPTURE_GOAL over CAPTURE_SCALE, plus the pitch's
  shortfall below PITCH_FLOOR over PITCH_SCALE."""
  return (jnp.abs(offset - CAPTURE_GOAL) / CAPTURE_SCALE
          + jnp.maximum(PITCH_FLOOR - pitch, 0.0) / PITCH_SCALE)


def landing_push(sim: mjbatch_jax.Simulator, start, ctrl: np.ndarray, z: np.ndarray,
                 t_push: float, nstep: int, decide: int, tilt: tuple[int, int],
                 iterations: int = PUSH_ITERATIONS, seed: int = PUSH_SEED, log=print
                 ) -> np.ndarray:
  """ctrl with the push phases' synergy targets (the program's phases before the tuck, their
  durations kept) searched by CEM for the landing (see PUSH_SAMPLES). Each candidate is flown to
  knot decide on the nominal robot and PUSH_ROBOTS randomised ones, the same for every candidate
  of an iteration; from there each of tuck_holds(ctrl, decide, tilt) for PUSH_SPAN knots. A
  robot scores its best hold: its landing_miss (at most 1) and 1 for a bad landing (see
  touchdowns); the candidate, the mean over robots, the nominal robot's once more, and its turn
  in flight short of PUSH_TURN (see PUSH_SHORT_WEIGHT). The mean flown is, of the means CEM
  sampled about (the program's, then each update's), the one with the least mean miss on
  PUSH_CHECK_ROBOTS other robots plus PUSH_SHORT_WEIGHT times the nominal robot's turn short and
  its miss over the choice's band (the best of noisy scores is the luckiest draw)."""
  model = sim.model
  pushes = phase_masks(z, t_push, decide)[:-3]  # the last three: tuck, open, settle
  synergy = jnp.asarray(synergy_matrix(model))
  chosen = jnp.asarray(synergy_matrix(model).sum(axis=0) > 0)
  lo, hi = (jnp.asarray(b) for b in model.actuator_ctrlrange.T)
  base = jnp.asarray(ctrl[:decide])
  span = min(PUSH_SPAN, len(ctrl) - decide)
  tails = jnp.repeat(jnp.asarray(tuck_holds(model, ctrl, decide, tilt)[:, 0, decide:decide + span]),
                     nstep, axis=1)
  cols = floor_columns(sim)
  holds = len(tails)

  def plan(targets):
    u = base
    for on, target in zip(pushes, targets.reshape(len(pushes), -1), strict=True):
      u = jnp.where(jnp.asarray(on)[:, None] & chosen, target @ synergy, u)
    return jnp.clip(u, lo, hi)

  @jax.jit
  def misses(targets, params):
    """(candidates, robots): each robot's best hold's miss, every candidate on every robot of
    params (the nominal robot first); (candidates,): the nominal robot's turn short of PUSH_TURN."""
    count, robots = len(targets), len(params["body_mass"])
    rows = count * robots
    # Every physics step: a knot's last state is up to 0.02 s after touchdown, 0.1-0.2 rad.
    params = jax.tree.map(lambda leaf: jnp.tile(leaf, (count,) + (1,) * (leaf.ndim - 1)),
                          params)  # row: candidate * robots + robot
    ctrls = jnp.repeat(jnp.repeat(jax.vmap(plan)(targets), nstep, axis=1), robots, axis=0)
    states, sensors = mjbatch_jax.rollout(jnp.broadcast_to(start, (rows, sim.nstate)), ctrls,
                                          params)
    on_floor = sensors[..., cols[2]] > 0
    off = states.shape[1] - jnp.argmax(on_floor[:, ::-1], axis=-1)  # after the last on the floor
    off_pitch = pelvis_pitch(sim, states[jnp.arange(rows), jnp.minimum(off, states.shape[1] - 1)])
    held = jax.tree.map(lambda leaf: jnp.repeat(leaf, holds, axis=0), params)
    states, sensors, obs = mjbatch_jax.rollout(jnp.repeat(states[:, -1], holds, axis=0),
                                               jnp.tile(tails, (rows, 1, 1)), held,
                                               observe=("subtree_com", "xpos"))
    pitch, bad, cp = touchdowns(sim, states, sensors[..., cols], EARLY_KNOTS * nstep, obs)
    miss = (jnp.minimum(landing_miss(pitch, cp), 1.0) + bad).reshape(rows, holds)
    miss = jnp.where(jnp.isfinite(miss), miss, 2.0)
    best = jnp.argmin(miss, axis=-1)
    turn = 2 * jnp.pi + off_pitch - pitch.reshape(rows, holds)[jnp.arange(rows), best]
    short = jnp.maximum(PUSH_TURN - turn, 0.0).reshape(count, robots)[:, 0]
    short = jnp.where(jnp.isfinite(short), short, 2.0)
    return miss.min(axis=-1).reshape(count, robots), short

  program_z = np.asarray(z).reshape(-1, len(SYNERGIES) + 1)
  mean = jnp.asarray(program_z[:len(pushes), :-1].ravel())
  std = jnp.full(mean.shape, PUSH_SPREAD)
  key = jax.random.key(seed)
  means = []
  for i in range(iterations):
    key, sub = jax.random.split(key)
    targets = control.gaussian_samples(sub, mean, std, PUSH_SAMPLES)  # the mean is candidate 0
    miss, short = misses(targets, with_nominal(sim, robust_params(sim, PUSH_ROBOTS, seed + i)))
    costs = miss.mean(axis=1) + miss[:, 0] + PUSH_SHORT_WEIGHT * short
    means.append(mean)
    mean, std = control.cem_update(mean, std, targets, costs, PUSH_SAMPLES // 8, std_min=0.01)
    log(f"push CEM {i + 1:2d}: miss per robot {float(miss[0].mean()):.3f} at the mean "
        f"(nominal {float(miss[0, 0]):.3f}), best {float(costs.min()):.3f}")
  means.append(mean)
  # Which mean is flown: each one, on PUSH_CHECK_ROBOTS robots drawn apart from the search's
  # and the nominal one (check i is the mean "push CEM i + 1" sampled about). The nominal robot's
  # shortfalls are weighed, not required: a hard rule can leave no mean. One call per mean: all
  # of them at once would keep every physics step of 16 x 33 x 5 rows with their observations,
  # over 1 GB.
  check = with_nominal(sim, robust_params(sim, PUSH_CHECK_ROBOTS, seed + PUSH_CHECK_SEED))
  scores = []
  for i, candidate in enumerate(means):
    miss, short = (np.asarray(a)[0] for a in misses(candidate[None], check))
    over = max(miss[0] - CAPTURE_BAND / CAPTURE_SCALE, 0.0)
    scores.append(miss[1:].mean() + PUSH_SHORT_WEIGHT * (short + over))
    log(f"push check {i:2d}: miss per robot {miss[1:].mean():.3f}, nominal {miss[0]:.3f}, "
        f"short {short:.3f}")
  pick = int(np.argmin(scores))
  log(f"push: the mean of iteration {pick} is flown")
  out = np.array(ctrl)
  out[:decide] = np.asarray(plan(means[pick]))
  return out


def tuck_holds(model: mujoco.MjModel, ctrl: np.ndarray, decide: int, tilt: tuple[int, int]
               ) -> np.ndarray:
  """(TUCK_HOLDS, len(LANDING_TILTS), F, nu): ctrl with the tuck's last knot (decide - 1) held h
  more knots and the rest later by as much (h = 0, 1, ...), with each of LANDING_TILTS over the
  knots tilt; [0, 0] is the plan's own."""
  names = [model.actuator(i).name for i in range(model.nu)]
  tilted = [names.index("waist_pitch_joint")] + [names.index(f"{s}_hip_pitch_joint")
                                                 for s in SIDES]
  frames = len(ctrl)
  holds = []
  for h in range(TUCK_HOLDS):
    u = np.concatenate([ctrl[:decide], np.repeat(ctrl[decide - 1:decide], h, axis=0),
                        ctrl[decide:frames - h]])
    for amount in LANDING_TILTS:
      v = u.copy()
      v[tilt[0]:tilt[1], tilted] += amount
      holds.append(np.clip(v, *model.actuator_ctrlrange.T))
  return np.stack(holds).reshape(TUCK_HOLDS, len(LANDING_TILTS), frames, model.nu)


def choose_landing(sim: mjbatch_jax.Simulator, states, candidates: np.ndarray, knot: int,
                   nstep: int) -> np.ndarray:
  """Each robot's candidate (index) from its state measured at knot knot (N, nstate) and its
  candidate plans (N, K, F, nu): each run on the nominal model from there for PUSH_SPAN knots
  (one rollout call); the one with the least landing_miss on the feet alone (see the landing's
  notes), the first while its miss is within CAPTURE_BAND (in metres of offset)."""
  n, count, frames, _ = candidates.shape
  span = min(PUSH_SPAN, frames - knot)
  tails = jnp.repeat(jnp.asarray(candidates[:, :, knot:knot + span]).reshape(n * count, span, -1),
                     nstep, axis=1)
  xs, sensors, obs = mjbatch_jax.rollout(jnp.repeat(jnp.asarray(states), count, axis=0), tails,
                                         sim.params(n * count), observe=("subtree_com", "xpos"))
  pitch, bad, cp = touchdowns(sim, xs, sensors[..., floor_columns(sim)], EARLY_KNOTS * nstep, obs)
  miss = np.asarray(landing_miss(pitch, cp) + 10.0 * bad).reshape(n, count)
  chosen = np.argmin(miss, axis=1)
  own = miss[:, 0] <= CAPTURE_BAND / CAPTURE_SCALE
  return np.where(own, 0, chosen)


def landing_cost(sim: mjbatch_jax.Simulator, stand_ctrl, stand_height: float) -> control.Cost:
  """The landing MPC's cost (see LAND_WEIGHTS): no time in it."""
  lay = sim.layout
  qpos, qvel = np.arange(sim.nstate)[lay.qpos], np.arange(sim.nstate)[lay.qvel]
  cols = floor_columns(sim)
  feet = feet_of(sim)
  stand_ctrl = jnp.asarray(stand_ctrl)

  def residual(x, u, obs, t):
    del t
    q, v = x[qpos], x[qvel]
    w, qx, qy, qz = q[3], q[4], q[5], q[6]
    z_axis_xy = jnp.stack([2 * (qx * qz + w * qy), 2 * (qy * qz - w * qx)])
    s = obs["sensordata"]
    other = s[cols[2]] - s[cols[0]] - s[cols[1]]
    balance = obs["subtree_com"][1, :2] - obs["xpos"][feet, :2].mean(axis=0)
    return jnp.concatenate([other[None], (q[2] - stand_height)[None], z_axis_xy, balance, v[:6],
                            v[6:], u - stand_ctrl])

  weight = LAND_WEIGHTS
  terms = (control.Term(1, weight["touch"]), control.Term(1, weight["height"]),
           control.Term(2, weight["tilt"]), control.Term(2, weight["balance"]),
           control.Term(6, weight["root_vel"]), control.Term(sim.model.nv - 6,
                                                              weight["joint_vel"]),
           control.Term(sim.model.nu, weight["ctrl"]))
  return control.Cost(residual, terms, observe=("sensordata", "subtree_com", "xpos"))


def landing_mpc(sim: mjbatch_jax.Simulator, params, states, ctrls, first: int, nstep: int,
                stand_height: float, seed: int = LAND_SEED) -> tuple[jax.Array, jax.Array]:
  """The landing MPC on N robots from their states (N, nstate) at knot first to the end of their
  plans ctrls (N, F, nu) (the warm start's new last control each knot): every physics step's
  states and sensordata (N, (F - first) * nstep, ...). One jitted scan over the knots; each
  knot's candidates of all robots are the rows of one rollout call."""
  n, frames, nu = ctrls.shape
  planner = control.sampling(landing_cost(sim, ctrls[0, -1], stand_height), sim.params(1),
                             horizon=LAND_HORIZON, nstep=nstep, settings=LAND_SETTINGS)
  ctrls = jnp.asarray(ctrls)
  ahead = np.minimum(first + np.arange(LAND_HORIZON), frames - 1)
  robots = jnp.arange(n)
  keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(robots)

  def one(plan, x, key, p, warm_last):
    plan, _ = planner.update(plan, x, key)
    u = planner.controls(plan)
    xs, sensors = mjbatch_jax.rollout(x[None], jnp.broadcast_to(u[0], (1, nstep, nu)), p)
    warm = jnp.concatenate([u[1:], warm_last[None]])
    return control.SamplingPlan(planner.init(warm).knots, plan.std), xs[0], sensors[0]

  def knot(carry, k):
    plan, x = carry
    p = jax.tree.map(lambda leaf: leaf[:, None], params)
    warm_last = ctrls[robots, jnp.minimum(k + LAND_HORIZON, frames - 1)]
    step_keys = jax.vmap(jax.random.fold_in, (0, None))(keys, k)
    plan, xs, sensors = jax.vmap(one)(plan, x, step_keys, p, warm_last)
    return (plan, xs[:, -1]), (xs, sensors)

  @jax.jit
  def run(states):
    plan = jax.vmap(planner.init)(ctrls[:, ahead])
    _, (xs, sensors) = jax.lax.scan(knot, (plan, states), jnp.arange(first, frames))
    return (xs.swapaxes(0, 1).reshape(n, -1, sim.nstate),
            sensors.swapaxes(0, 1).reshape(n, -1, sensors.shape[-1]))

  return run(jnp.asarray(states))


def plan_landing(sim: mjbatch_jax.Simulator, start, ctrl: np.ndarray, z: np.ndarray,
                 t_push: float, nstep: int, push_iterations: int = PUSH_ITERATIONS, log=print
                 ) -> dict | None:
  """The plan with its landing (see the landing's notes) from the solve's controls and the
  program z they were sampled from: {"ctrl": the plan's own hold, "states": its knots' states on
  the nominal robot, "holds" (see tuck_holds), "landing_knots": (the knot the hold is chosen at,
  the knot the tilt is chosen at, the MPC's first)}; None when the clip ends before the flight
  does."""
  frames = len(ctrl)
  opening = phase_masks(z, t_push, frames)[-2]
  if not opening.any():
    log("landing: the clip ends before the tuck opens: the closed loop is the plan's gains")
    return None
  decide = int(np.flatnonzero(opening)[0])
  dt = sim.model.opt.timestep
  # The knot in which the feet land (iLQR's plan, open loop, nominal robot): the tilt spans it and
  # a knot either side, the MPC takes over LAND_LEAD knots before it. The push's search scores the
  # holds with it.
  xs, sensors = control.open_loop(robot_params(sim, 1), start, ctrl, nstep)
  m = flip_metrics(np.asarray(xs[0])[:, sim.layout.qpos],
                   np.asarray(sensors[0])[:, floor_columns(sim)], dt)
  touch = round(m["touchdown_s"] / dt) // nstep
  if m["flight_s"] < MIN_FLIGHT or touch + 2 >= frames or touch - 1 - TILT_LEAD <= decide:
    log("landing: the plan does not land inside the clip after the tuck opens: the closed loop "
        "is the plan's gains")
    return None
  tilt = (touch - 1, touch + 2)
  pushed = landing_push(sim, start, ctrl, z, t_push, nstep, decide, tilt, push_iterations,
                        log=log)
  holds = tuck_holds(sim.model, pushed, decide, tilt)
  xs, sensors = control.open_loop(robot_params(sim, 1), start, holds[0, 0], nstep)
  states = np.concatenate([np.asarray(start)[None], np.asarray(xs[0])[nstep - 1::nstep]])
  m = flip_metrics(np.asarray(xs[0])[:, sim.layout.qpos],
                   np.asarray(sensors[0])[:, floor_columns(sim)], dt)
  log(f"landing: with the searched push the nominal robot leaves at {m['takeoff_s']:.2f} s and "
      f"turns {m['rotation_rad']:.2f} rad in flight on the plan's own hold, open loop; the hold "
      f"is chosen at knot {decide}, the tilt over knots {touch - 1}-{touch + 1} (where iLQR's "
      f"plan lands) at knot {tilt[0] - TILT_LEAD}, the MPC from knot {touch - LAND_LEAD}")
  return {"ctrl": holds[0, 0], "states": states, "holds": holds,
          "landing_knots": np.array([decide, tilt[0] - TILT_LEAD, touch - LAND_LEAD])}


def landing_replay(sim: mjbatch_jax.Simulator, params, start, holds: np.ndarray,
                   knots: tuple[int, int, int], nstep: int, stand_height: float
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The closed loop with the landing (see the landing's notes) on the N robots of params from
  start, holds as tuck_holds' and knots as plan_landing's landing_knots: every physics step's
  states and sensordata (N, F * nstep, ...) and each robot's (hold, tilt) (N, 2)."""
  decide, tilt_at, land_from = knots
  n = len(params["body_mass"])
  plan = jnp.repeat(jnp.asarray(holds[0, 0, :decide]), nstep, axis=0)
  xs, sensors = mjbatch_jax.rollout(jnp.broadcast_to(start, (n, sim.nstate)),
                                    jnp.broadcast_to(plan, (n, *plan.shape)), params)
  hold = choose_landing(sim, xs[:, -1], np.broadcast_to(holds[:, 0], (n, *holds[:, 0].shape)),
                        decide, nstep)
  flown = jnp.repeat(jnp.asarray(holds[hold, 0, decide:tilt_at]), nstep, axis=1)
  xs2, sensors2 = mjbatch_jax.rollout(xs[:, -1], flown, params)
  tilt = choose_landing(sim, xs2[:, -1], holds[hold], tilt_at, nstep)
  parts = [(xs, sensors), (xs2, sensors2)]
  if land_from > tilt_at:  # the chosen plan flown open loop until the MPC takes over
    flown = jnp.repeat(jnp.asarray(holds[hold, tilt, tilt_at:land_from]), nstep, axis=1)
    parts.append(mjbatch_jax.rollout(xs2[:, -1], flown, params))
  parts.append(landing_mpc(sim, params, parts[-1][0][:, -1], holds[hold, tilt], land_from, nstep,
                           stand_height))
  return (np.concatenate([np.asarray(x) for x, _ in parts], axis=1),
          np.concatenate([np.asarray(s) for _, s in parts], axis=1),
          np.stack([hold, tilt], axis=1))


# --------------------------------------------------------------------------------- profile


def profile(model: mujoco.MjModel, clip: dict, saved: dict, nstep: int, rounds: int = 2,
            log=print) -> dict:
  """One iLQR iteration about the saved plan against the custom calls it makes, on 1 and 2
  threads: wall and CPU seconds, the best of `rounds` taken in turn (interleaved).

  The iteration is ilqr(iterations=1) less ilqr(iterations=0) (the initial rollout), without
  retries or final gains; the physics is its calls alone on the same inputs: one
  transition_fd over the knots, one forward over every state and its tangent perturbations
  (the cost's pose Jacobians), and the line search's step calls (every step size a row).
  """
  out = {}
  for threads in (1, 2):
    with mjbatch_jax.Simulator(model, num_threads=threads) as sim:
      entry = _profile_on(sim, clip, jnp.asarray(saved["ctrl"]), jnp.asarray(saved["states"]),
                          nstep, rounds)
    out[threads] = entry
    wall, cpu = entry["wall"], entry["cpu"]
    log(f"profile, {threads} thread(s), {len(saved['ctrl'])} knots: one iteration "
        f"{wall['iteration']:.2f} s wall / {cpu['iteration']:.2f} s CPU; its physics calls "
        f"{wall['physics']:.2f} s wall ({100 * wall['physics_share']:.0f}%) / "
        f"{cpu['physics']:.2f} s CPU ({100 * cpu['physics_share']:.0f}%)")
  speedup = out[1]["wall"]["iteration"] / out[2]["wall"]["iteration"]
  log(f"profile: 2 threads run an iteration {speedup:.2f}x as fast as 1 (wall); CPU seconds "
      f"{out[1]['cpu']['iteration']:.2f} (1) vs {out[2]['cpu']['iteration']:.2f} (2)")
  out["speedup_2_over_1"] = speedup
  return out


def _profile_on(sim: mjbatch_jax.Simulator, clip: dict, ctrl, states, nstep: int, rounds: int
                ) -> dict:
  model = sim.model
  start, knots = states[0], len(ctrl)
  settings = SETTINGS._replace(final_gains=False, max_retries=0, tolerance=0.0)
  cost = tracking_cost(sim, clip)
  one = sim.params(1)
  lines = len(settings.step_sizes)
  p_knots, p_lines = sim.params(knots), sim.params(lines)
  p_rows = sim.params((knots + 1) * (1 + 2 * model.nv))
  # Each state, nv copies moved along each position direction, nv more (the velocity
  # directions: the same poses, the same cost to compute).
  dq = jnp.concatenate([jnp.zeros((1, model.nv)), settings.eps * jnp.eye(model.nv)])
  qpos = tangent.integrate_pos(tangent.Joints.of(model), states[:, None, sim.layout.qpos], dq,
                               1.0)
  rows = jnp.broadcast_to(states[:, None], (*qpos.shape[:2], sim.nstate))
  rows = jnp.concatenate([rows.at[..., sim.layout.qpos].set(qpos),
                          jnp.broadcast_to(states[:, None], (knots + 1, model.nv, sim.nstate))],
                         axis=1).reshape(-1, sim.nstate)

  def iterate(u, n):
    return control.ilqr(cost, one, start, u, nstep=nstep, iterations=n, settings=settings).cost

  def line_steps(u):
    def knot(x, u_t):
      x, obs = mjbatch_jax.step(x, jnp.broadcast_to(u_t, (lines, model.nu)), p_lines,
                                nstep=nstep, observe=cost.observe)
      return x, obs["xpos"][:, 0]
    return jax.lax.scan(knot, jnp.broadcast_to(start, (lines, sim.nstate)), u)[1]

  calls = {
    "iteration_plus_rollout": (jax.jit(lambda u: iterate(u, 1)), ctrl),
    "rollout": (jax.jit(lambda u: iterate(u, 0)), ctrl),
    "transition_fd": (jax.jit(lambda x, u: mjbatch_jax.transition_fd(x, u, p_knots,
                                                                     nstep=nstep)),
                      states[:-1], ctrl),
    "forward": (jax.jit(lambda r: mjbatch_jax.forward(r, p_rows, cost.observe)), rows),
    "line_search_steps": (jax.jit(line_steps), ctrl),
  }
  for fn, *args in calls.values():
    jax.block_until_ready(fn(*args))  # compiled and warm
  wall, cpu = dict.fromkeys(calls, np.inf), dict.fromkeys(calls, np.inf)
  for _ in range(rounds):
    for name, (fn, *args) in calls.items():
      watch = common.Stopwatch()
      with watch():
        jax.block_until_ready(fn(*args))
      wall[name], cpu[name] = min(wall[name], watch.wall), min(cpu[name], watch.cpu)
  entry = {}
  for kind, t in (("wall", wall), ("cpu", cpu)):
    iteration = t["iteration_plus_rollout"] - t["rollout"]
    physics = t["transition_fd"] + t["forward"] + t["line_search_steps"]
    entry[kind] = {**t, "iteration": iteration, "physics": physics,
                   "physics_share": physics / iteration}
  return entry


# ------------------------------------------------------------------------------------ play


def play(args: argparse.Namespace) -> dict:
  model = load_model(args.model)
  flip = Flip()
  saved, meta = common.load_result(args.out, KIND, version=version(model, flip), keys=PLAN_KEYS)
  nstep = int(meta["nstep"])
  clip = {"qpos": saved["ref_qpos"], "xpos": saved["ref_xpos"], "xquat": saved["ref_xquat"]}
  plan = {k: saved[k] for k in ("ctrl", "states", "gains", "holds", "landing_knots")
          if k in saved}
  if "gains" not in plan and "holds" not in plan:
    raise SystemExit(f"{args.out} holds neither gains nor a landing: solve again")
  if "holds" in plan and meta.get("landing") != landing_settings():
    raise SystemExit(f"{args.out} was saved with other landing settings ({meta.get('landing')}, "
                     f"this script's are {landing_settings()}): solve again")
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    with common.Stopwatch()() as watch:
      result = evaluate(sim, clip, jnp.asarray(saved["start"]), plan, nstep, args.robust,
                        args.seed)
    print(f"replayed {args.out} ({len(plan['ctrl'])} knots; open loop, closed loop and "
          f"{args.robust} randomised robots) in {watch.wall:.1f} s with compilation")
  print_result(result)
  if args.profile:
    common.write_json(args.out.with_name(args.out.stem + "_profile.json"),
                      profile(model, clip, saved, nstep))
  plots(model, result, clip, nstep, args.out.with_suffix(".png"))
  fps = 1 / (2 * model.opt.timestep * nstep)
  rows = result["closed_loop_states"][nstep - 1::2 * nstep]
  print(common.render(model, rows, args.out.with_suffix(".gif"), fps, track_body="pelvis",
                      distance=3.2, azimuth=90.0, elevation=-5.0))
  summary = summary_of(result)
  common.print_summary(summary)
  return summary


def plots(model: mujoco.MjModel, result: dict, clip: dict, nstep: int, path: Path) -> None:
  plt = common.pyplot()
  if plt is None:
    return
  dt = model.opt.timestep
  e = result["errors"]
  t_knots = FRAME_DT * np.arange(1, len(e) + 1)
  fig, axes = plt.subplots(4, 1, figsize=(9, 12), sharex=True)
  parts = sorted({label.split()[-1] for label in LABELS})
  for i, label in enumerate(LABELS):
    style = {"color": f"C{parts.index(label.split()[-1])}", "label": label,
             "linestyle": "--" if label.startswith("right") else "-"}
    axes[0].plot(t_knots, 1e3 * np.linalg.norm(e[:, i, :3], axis=-1), **style)
  axes[0].set_ylabel("position error (mm)")
  axes[0].legend(ncol=4, fontsize=7)
  t_ref = FRAME_DT * np.arange(len(clip["qpos"]))
  for name, style in (("closed_loop", "-"), ("open_loop", ":")):
    states = result[f"{name}_states"]
    t = dt * np.arange(1, len(states) + 1)
    qpos = states[:, 1:1 + model.nq]
    axes[1].plot(t, qpos[:, 2], style, label=name.replace("_", " "))
    rot = np.zeros((len(qpos), 9))
    for k, q in enumerate(qpos):
      mujoco.mju_quat2Mat(rot[k], q[3:7])
    axes[2].plot(t, np.unwrap(np.arctan2(-rot[:, 6], rot[:, 0])), style,
                 label=name.replace("_", " "))
  ref_rot = np.zeros((len(t_ref), 9))
  for k, q in enumerate(clip["qpos"]):
    mujoco.mju_quat2Mat(ref_rot[k], q[3:7])
  axes[1].plot(t_ref, clip["qpos"][:, 2], "--", color="gray", label="reference")
  axes[1].axhline(PELVIS_UPRIGHT, color="r", lw=0.8, label="upright threshold")
  axes[1].set_ylabel("pelvis height (m)")
  axes[1].legend(fontsize=7)
  axes[2].plot(t_ref, np.unwrap(np.arctan2(-ref_rot[:, 6], ref_rot[:, 0])), "--", color="gray",
               label="reference")
  axes[2].set_ylabel("pelvis pitch (rad, + forward)")
  axes[2].legend(fontsize=7)
  floor = result["closed_loop_floor"]
  t = dt * np.arange(1, len(floor) + 1)
  other = floor[:, 2] - floor[:, 0] - floor[:, 1]
  contacts = (floor[:, 0] > 0, floor[:, 1] > 0, other > 0)
  for row, on in enumerate(contacts):
    axes[3].fill_between(t, row + 0.1, row + 0.9, where=on, step="mid",
                         color=("C0", "C1", "C3")[row])
  axes[3].set_yticks([0.5, 1.5, 2.5], ["left foot", "right foot", "other bodies"])
  axes[3].set_ylabel("on the floor (closed loop)")
  axes[3].set_xlabel("time (s)")
  fig.suptitle("G1 backflip: the iLQR plan replayed")
  common.save_figure(fig, path)


# ------------------------------------------------------------------------------------ main


def _mu_list(text: str) -> tuple[float, ...]:
  check = common.positive_float("regularisation")
  return tuple(check(part) for part in text.split(","))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description="A backflip on the Unitree G1: a physics-built "
                                   "reference tracked whole-body by iLQR.")
  parser.add_argument("--model", type=Path, default=None,
                      help="the G1's scene.xml (default: ../shared/models/unitree_g1)")
  parser.add_argument("--frames", type=common.int_in(2, CLIP_FRAMES, f"the clip has "
                                                     f"{CLIP_FRAMES} frames"),
                      default=CLIP_FRAMES, help=f"track the clip's first N frames of {FRAME_DT} "
                      f"s (default {CLIP_FRAMES}: all of it)")
  parser.add_argument("--iterations", type=common.int_in(0, 1000, "most iLQR iterations"),
                      default=12, help="most iLQR iterations (default 12)")
  parser.add_argument("--samples", type=common.int_in(0, 4096, "0: no sampling"), default=48,
                      help=f"CEM candidates per iteration for the initial guess, each run on "
                           f"{CEM_ROBOTS} randomised robots (default 48)")
  parser.add_argument("--cem-iterations", type=common.int_in(0, 1000, "CEM iterations"),
                      default=15, help="CEM iterations (default 15)")
  parser.add_argument("--program", choices=sorted(PROGRAMS), default="together",
                      help="the plan CEM starts from: hips and knees extend together in the push "
                           "(default), or knees first (see PROGRAMS)")
  parser.add_argument("--push-iterations", type=common.int_in(0, 1000, "push CEM iterations"),
                      default=PUSH_ITERATIONS, help=f"with {', '.join(LANDING_PROGRAMS)}: CEM "
                      f"iterations of the push's search for the landing (default "
                      f"{PUSH_ITERATIONS}; see landing_push)")
  parser.add_argument("--gains-mu", type=_mu_list, default=(1.0, 1e2, 1e3, 1e4),
                      help="candidate mu (Q_uu + mu I) of the backward pass that gives the closed "
                           "loop's gains, comma-separated (default 1,100,1000,10000; see "
                           "closed_loop_gains)")
  parser.add_argument("--robust", type=common.int_in(0, 4096, "0: none"), default=32,
                      help="randomised robots of the robustness replay (default 32)")
  parser.add_argument("--profile", action="store_true",
                      help="with --play: time an iLQR iteration about the saved plan against "
                           "its physics calls, on 1 and 2 threads")
  parser.add_argument("--reference", action="store_true",
                      help="build the reference and check its feasibility only")
  common.add_standard_args(parser, KIND)
  return common.parse(parser, argv)


def main(argv: list[str] | None = None) -> dict:
  args = parse_args(argv)
  if args.reference:
    return prepare(args)[-1]
  return play(args) if args.play else solve(args)


if __name__ == "__main__":
  main(sys.argv[1:])
