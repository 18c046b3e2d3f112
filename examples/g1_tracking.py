"""Whole-body motion tracking on the Unitree G1 by iLQR, one batched transition_fd per iteration.

  python examples/g1_tracking.py [--frames 200] [--iterations 40] [--threads 0] [--profile]
  python examples/g1_tracking.py --play [--profile]  # replay the saved plan headless

No motion-capture clip ships offline, so the reference is built here: a squat into a reach and a
turn, from five keyframes of task targets (feet fixed, pelvis height and orientation, torso
orientation, hand positions, centre of mass over the feet) solved by inverse kinematics with
MuJoCo itself (damped least squares on mj_jacBody / mj_jacSubtreeCom, plain MjData) at every one
of 200 frames of 0.02 s (4 s), the targets eased between keyframes. --frames N tracks the clip's
first N frames.

The G1's 29 actuators are position servos (kp 500), so a control is a vector of joint targets.
The cost of a state tracks twelve bodies (pelvis, torso, knees, ankles, shoulders, elbows, hands):
position error in metres (the pelvis in the world; the others relative to the pelvis's horizontal
position, so the loose root is not paid for twelve times) and orientation error in radians, with
weights per square metre and per square radian, quadratic up to a threshold and linear above it
(Huber-like), the root loose in x and y and 1000 times tighter in z; plus control
regularisation towards the reference joint angles.

Each iLQR iteration (F knots of 10 physics steps):

- linearise: the F states of the current trajectory are the batch of one
  `mjbatch_jax.transition_fd` call; the body poses of the F + 1 states and of their nv tangent
  perturbations are one `mjbatch_jax.forward` call, differenced in JAX into the Jacobians of the
  tracking residuals (Gauss-Newton cost Hessian);
- backward pass: a lax.scan of the Riccati recursion, the control box by the projection trick;
- forward pass: a lax.scan of `mjbatch_jax.step` with 8 line-search step sizes as the rows of each
  call, observing the tracked bodies' poses in the same call.

It prints the per-body tracking error of holding the first pose, of the initial guess (the
reference joint angles as servo targets) and of the plan, the solve time, and whether the robot
stays upright (pelvis above PELVIS_MIN at every frame) when the plan's controls are replayed
open-loop from the same start (no feedback: the gains K are saved but not used). It saves the
plan (.npz) and the metrics (.json) to --results; --play replays a plan, prints its metrics and
writes a plot of the per-body error and the pelvis height over time, and a video (GIF) if
mujoco.Renderer works headless (MUJOCO_GL=egl). --profile times one iteration's parts against the
custom calls alone on the same inputs: the physics is nearly all of it.
"""

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

# --play renders headless; the GL backend is chosen when mujoco first renders.
os.environ.setdefault("MUJOCO_GL", "egl")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402

DEFAULT_MODEL = Path(__file__).resolve().parents[1].parent / "shared/models/unitree_g1/scene.xml"
DEFAULT_RESULTS = Path(__file__).resolve().parent / "results"

CLIP_FRAMES = 200
FRAME_DT = 0.02  # s per frame and per knot
# Tracked bodies: (label, body name). The pelvis (the root) must come first.
TRACKED = (
  ("pelvis", "pelvis"),
  ("torso", "torso_link"),
  ("left knee", "left_knee_link"),
  ("right knee", "right_knee_link"),
  ("left ankle", "left_ankle_roll_link"),
  ("right ankle", "right_ankle_roll_link"),
  ("left shoulder", "left_shoulder_roll_link"),
  ("right shoulder", "right_shoulder_roll_link"),
  ("left elbow", "left_elbow_link"),
  ("right elbow", "right_elbow_link"),
  ("left hand", "left_wrist_yaw_link"),
  ("right hand", "right_wrist_yaw_link"),
)
# Cost weights. Positions per m^2, orientations per rad^2, controls per rad^2 (servo targets).
POS_WEIGHT = 100.0
ROOT_WEIGHT = (1.0, 1.0, 1000.0)  # pelvis x, y, z: loose on the floor, tight in height
ROT_WEIGHT = 10.0
# Above these errors a body's cost grows linearly, so one badly tracked body (a fall, a reach
# out of range) does not dominate the quadratic model.
POS_THRESHOLD = 0.05  # m (for the root: of its weighted error, in z-metres)
ROT_THRESHOLD = 0.25  # rad
CTRL_WEIGHT = 0.01
PELVIS_MIN = 0.45  # m: "upright" means the pelvis stays above this at every frame
ALPHAS = 0.5 ** np.arange(8)  # line-search step sizes, one row each
FD_EPS = 1e-6  # tangent perturbation for the pose Jacobians (float64 rows)
# Levenberg-Marquardt regularisation of the backward pass (added to Q_uu). Small values give
# feedback gains that the contact-rich linearisation cannot back: the closed-loop forward pass
# then diverges at every step size.
MU_START, MU_MIN, MU_MAX = 10.0, 1e-3, 1e8

# Keyframes of task targets, eased between: time (s), pelvis height (m), pelvis pitch and yaw,
# torso pitch and yaw (rad, world frame), left and right hand positions (m, world frame, before
# turning by the torso's yaw; None: where the standing pose holds them).
_STAND = (0.755, 0.0, 0.0, 0.0, 0.0, None, None)
KEYFRAMES = (
  (0.0, *_STAND),
  (1.0, 0.60, 0.25, 0.0, 0.10, 0.0, (0.32, 0.20, 0.78), (0.32, -0.20, 0.78)),  # squat
  (1.8, 0.60, 0.30, 0.0, 0.35, -0.35, (0.05, 0.40, 0.90), (0.40, -0.02, 0.62)),  # reach
  (2.8, 0.72, 0.0, 0.35, 0.05, 0.80, (0.28, 0.20, 0.95), (0.28, -0.20, 0.95)),  # turn
  (3.6, *_STAND),
)


# ------------------------------------------------------------------------------- reference


@dataclasses.dataclass(frozen=True)
class Reference:
  """The clip: per frame, the IK solution and the tracked bodies' poses."""

  qpos: np.ndarray  # (F, nq)
  xpos: np.ndarray  # (F, 12, 3)
  xquat: np.ndarray  # (F, 12, 4)
  foot_drift: float  # m, the feet's largest displacement over the clip
  com_error: float  # m, the centre of mass's largest horizontal distance from its target
  hand_error: float  # m, the hands' largest distance from their targets


def _quat(axis: tuple[float, float, float], angle: float) -> np.ndarray:
  out = np.zeros(4)
  mujoco.mju_axisAngle2Quat(out, np.asarray(axis, float), angle)
  return out


def _yaw_pitch(yaw: float, pitch: float) -> np.ndarray:
  out = np.zeros(4)
  mujoco.mju_mulQuat(out, _quat((0, 0, 1), yaw), _quat((0, 1, 0), pitch))
  return out


def _rotation_error(target: np.ndarray, current: np.ndarray, xmat: np.ndarray) -> np.ndarray:
  """World-frame rotation vector taking current to target (mj_jacBody's jacr is world-frame)."""
  local = np.zeros(3)
  mujoco.mju_subQuat(local, target, current)
  return xmat.reshape(3, 3) @ local


class _IK:
  """Damped least squares on MuJoCo's Jacobians, one frame's task targets at a time."""

  def __init__(self, model: mujoco.MjModel):
    self.model, self.data = model, mujoco.MjData(model)
    self.id = {name: model.body(name).id for name in (
      "pelvis", "torso_link", "left_ankle_roll_link", "right_ankle_roll_link",
      "left_wrist_yaw_link", "right_wrist_yaw_link")}
    hinge = model.jnt_type != mujoco.mjtJoint.mjJNT_FREE
    self.hinge_qpos = model.jnt_qposadr[hinge]
    self.hinge_range = model.jnt_range[hinge]
    self.hinge_limited = model.jnt_limited[hinge].astype(bool)

  def kinematics(self, qpos: np.ndarray) -> mujoco.MjData:
    self.data.qpos[:] = qpos
    mujoco.mj_kinematics(self.model, self.data)
    mujoco.mj_comPos(self.model, self.data)  # cdof and subtree_com, which the Jacobians read
    return self.data

  def solve(self, qpos: np.ndarray, targets: dict, posture: np.ndarray, iterations: int
            ) -> np.ndarray:
    m, d, nv = self.model, self.data, self.model.nv
    jacp, jacr = np.zeros((3, nv)), np.zeros((3, nv))
    qpos = qpos.copy()
    for _ in range(iterations):
      self.kinematics(qpos)
      tasks = []  # (weight, Jacobian rows, error)
      for foot in ("left_ankle_roll_link", "right_ankle_roll_link"):
        b = self.id[foot]
        mujoco.mj_jacBody(m, d, jacp, jacr, b)
        tasks.append((10.0, jacp.copy(), targets[foot][0] - d.xpos[b]))
        tasks.append((10.0, jacr.copy(), _rotation_error(targets[foot][1], d.xquat[b], d.xmat[b])))
      b = self.id["pelvis"]
      mujoco.mj_jacBody(m, d, jacp, jacr, b)
      tasks.append((5.0, jacp[2:].copy(), targets["pelvis_z"] - d.xpos[b, 2:]))
      rot = _rotation_error(targets["pelvis_quat"], d.xquat[b], d.xmat[b])
      tasks.append((3.0, jacr.copy(), rot))
      b = self.id["torso_link"]
      mujoco.mj_jacBody(m, d, None, jacr, b)
      rot = _rotation_error(targets["torso_quat"], d.xquat[b], d.xmat[b])
      tasks.append((1.0, jacr.copy(), rot))
      b = self.id["pelvis"]  # its subtree is the whole robot
      mujoco.mj_jacSubtreeCom(m, d, jacp, b)
      tasks.append((5.0, jacp[:2].copy(), targets["com_xy"] - d.subtree_com[b, :2]))
      for hand in ("left_wrist_yaw_link", "right_wrist_yaw_link"):
        if targets.get(hand) is not None:
          b = self.id[hand]
          mujoco.mj_jacBody(m, d, jacp, None, b)
          tasks.append((1.0, jacp.copy(), targets[hand] - d.xpos[b]))
      # A weak pull towards a posture settles the redundant joints (wrists, arm yaw).
      tasks.append((0.05, np.eye(nv)[6:], posture[7:] - qpos[7:]))
      jac = np.concatenate([w * j for w, j, _ in tasks])
      error = np.concatenate([w * e for w, _, e in tasks])
      step = np.linalg.solve(jac.T @ jac + 1e-3 * np.eye(nv), jac.T @ error).astype(np.float64)
      step *= min(1.0, 0.2 / max(float(np.linalg.norm(step)), 1e-12))  # a trust region
      mujoco.mj_integratePos(m, qpos, step, 1.0)
      lo, hi = self.hinge_range[:, 0], self.hinge_range[:, 1]
      clipped = np.clip(qpos[self.hinge_qpos], lo, hi)
      qpos[self.hinge_qpos] = np.where(self.hinge_limited, clipped, qpos[self.hinge_qpos])
      if np.linalg.norm(step) < 1e-9:
        break
    return qpos


def _smoothstep(s: float) -> float:
  return s * s * (3 - 2 * s)


def _turned(yaw: float, point: tuple[float, float, float]) -> np.ndarray:
  c, s = np.cos(yaw), np.sin(yaw)
  return np.array([c * point[0] - s * point[1], s * point[0] + c * point[1], point[2]])


def build_reference(model: mujoco.MjModel, frames: int) -> Reference:
  """The clip's first `frames` frames, by IK at every frame, warm-started from the last."""
  ik = _IK(model)
  data = ik.data
  posture = model.key_qpos[0].copy()
  ik.kinematics(posture)
  mujoco.mj_forward(model, data)  # the keyframe's feet and contacts
  feet = {f: (data.body(f).xpos.copy(), data.body(f).xquat.copy())
          for f in ("left_ankle_roll_link", "right_ankle_roll_link")}
  # The centre of mass stays over the middle of the feet's contacts in the keyframe.
  com_xy = np.mean([data.contact[i].pos[:2] for i in range(data.ncon)], axis=0)

  def targets_at(key: tuple, hands: dict) -> dict:
    _, z, pitch, yaw, torso_pitch, torso_yaw, left, right = key
    return {
      **feet, "pelvis_z": np.array([z]), "pelvis_quat": _yaw_pitch(yaw, pitch),
      "torso_quat": _yaw_pitch(torso_yaw, torso_pitch), "com_xy": com_xy,
      "left_wrist_yaw_link": hands["left"] if left is None else _turned(torso_yaw, left),
      "right_wrist_yaw_link": hands["right"] if right is None else _turned(torso_yaw, right),
    }

  # The keyframe's legs are straight, where the knee's Jacobian is singular: the posture that
  # the IK starts from and is pulled towards bends them.
  for side in ("left", "right"):
    for joint, angle in (("hip_pitch", -0.3), ("knee", 0.6), ("ankle_pitch", -0.3)):
      posture[model.joint(f"{side}_{joint}_joint").qposadr[0]] = angle
  # The standing pose first, hands free, to learn where standing holds them.
  stand = targets_at(KEYFRAMES[0], {"left": None, "right": None})
  qpos = ik.solve(posture, stand, posture, 500)
  ik.kinematics(qpos)
  hands = {"left": data.body("left_wrist_yaw_link").xpos.copy(),
           "right": data.body("right_wrist_yaw_link").xpos.copy()}
  keys = [targets_at(k, hands) for k in KEYFRAMES]
  times = [k[0] for k in KEYFRAMES]
  tracked = [model.body(name).id for _, name in TRACKED]
  out_q, out_pos, out_quat = [], [], []
  foot_drift = com_error = hand_error = 0.0
  for i in range(frames):
    t = i * FRAME_DT
    k = min(int(np.searchsorted(times, t, side="right")) - 1, len(keys) - 2)
    s = _smoothstep(float(np.clip((t - times[k]) / (times[k + 1] - times[k]), 0.0, 1.0)))
    a, b = keys[k], keys[k + 1]
    target = {name: ((1 - s) * a[name] + s * b[name]) if not isinstance(a[name], tuple) else
              a[name] for name in a}
    for name in ("pelvis_quat", "torso_quat"):
      mujoco.mju_normalize4(target[name])
    qpos = ik.solve(qpos, target, posture, 200 if i == 0 else 50)
    ik.kinematics(qpos)
    out_q.append(qpos.copy())
    out_pos.append(data.xpos[tracked].copy())
    out_quat.append(data.xquat[tracked].copy())
    for foot, (pos, _) in feet.items():
      foot_drift = max(foot_drift, float(np.linalg.norm(data.body(foot).xpos - pos)))
    com_error = max(com_error, float(np.linalg.norm(data.subtree_com[1, :2] - com_xy)))
    for hand in ("left_wrist_yaw_link", "right_wrist_yaw_link"):
      hand_error = max(hand_error, float(np.linalg.norm(data.body(hand).xpos - target[hand])))
  return Reference(np.array(out_q), np.array(out_pos), np.array(out_quat), foot_drift,
                   com_error, hand_error)


# ----------------------------------------------------------------------- poses and costs


def quat_multiply(a: jax.Array, b: jax.Array) -> jax.Array:
  """Hamilton product of (..., 4) quaternions, w first."""
  aw, ax, ay, az = (a[..., i] for i in range(4))
  bw, bx, by, bz = (b[..., i] for i in range(4))
  return jnp.stack([
    aw * bw - ax * bx - ay * by - az * bz,
    aw * bx + ax * bw + ay * bz - az * by,
    aw * by - ax * bz + ay * bw + az * bx,
    aw * bz + ax * by - ay * bx + az * bw,
  ], axis=-1)


def conjugate(q: jax.Array) -> jax.Array:
  return q * jnp.array([1.0, -1.0, -1.0, -1.0])


def rotation_vector(q: jax.Array) -> jax.Array:
  """(..., 4) unit quaternions -> (..., 3) rotation vectors (angle in [0, pi] times axis)."""
  q = jnp.where(q[..., :1] < 0, -q, q)
  w, v = q[..., 0], q[..., 1:]
  n2 = jnp.sum(v * v, axis=-1)
  # The 2 / w limit at zero rotation keeps the derivative there exact (and not NaN).
  small = n2 < 1e-24
  n = jnp.sqrt(jnp.where(small, 1.0, n2))
  scale = jnp.where(small, 2.0 / w, 2.0 * jnp.arctan2(n, w) / n)
  return scale[..., None] * v


def quat_exp(v: jax.Array) -> jax.Array:
  """(..., 3) rotation vectors -> (..., 4) unit quaternions."""
  n2 = jnp.sum(v * v, axis=-1, keepdims=True)
  small = n2 < 1e-24
  n = jnp.sqrt(jnp.where(small, 1.0, n2))
  sin_over = jnp.where(small, 0.5, jnp.sin(0.5 * n) / n)
  return jnp.concatenate([jnp.where(small, 1.0, jnp.cos(0.5 * n)), sin_over * v], axis=-1)


def integrate(qpos: jax.Array, dq: jax.Array) -> jax.Array:
  """qpos moved by tangent dq, as mj_integratePos for a free root followed by hinges."""
  quat = quat_multiply(qpos[..., 3:7], quat_exp(dq[..., 3:6]))  # body-frame rotation
  return jnp.concatenate([qpos[..., :3] + dq[..., :3], quat, qpos[..., 7:] + dq[..., 6:]], -1)


def difference(qpos_from: jax.Array, qpos_to: jax.Array) -> jax.Array:
  """Tangent from qpos_from to qpos_to, as mj_differentiatePos (the inverse of integrate)."""
  rot = rotation_vector(quat_multiply(conjugate(qpos_from[..., 3:7]), qpos_to[..., 3:7]))
  return jnp.concatenate([qpos_to[..., :3] - qpos_from[..., :3], rot,
                          qpos_to[..., 7:] - qpos_from[..., 7:]], -1)


def residuals(xpos: jax.Array, xquat: jax.Array, ref_pos: jax.Array, ref_quat: jax.Array
              ) -> jax.Array:
  """(..., 12, 6) position (m) and orientation (rad) errors of the tracked bodies.

  The pelvis's position error is in the world; the other bodies' are measured after moving the
  reference horizontally with the pelvis, so the root's looseness in x and y is not undone by
  the eleven other bodies.
  """
  drift = (xpos[..., :1, :] - ref_pos[..., :1, :]) * jnp.array([1.0, 1.0, 0.0])
  pos = xpos - ref_pos - drift
  pos = jnp.concatenate([xpos[..., :1, :] - ref_pos[..., :1, :], pos[..., 1:, :]], axis=-2)
  rot = rotation_vector(quat_multiply(conjugate(ref_quat), xquat))
  return jnp.concatenate([pos, rot], axis=-1)


def _weights() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  pos = np.full((len(TRACKED), 3), POS_WEIGHT)
  pos[0] = ROOT_WEIGHT
  pos_knee = np.full(len(TRACKED), POS_WEIGHT * POS_THRESHOLD**2)
  pos_knee[0] = max(ROOT_WEIGHT) * POS_THRESHOLD**2
  rot = np.full(len(TRACKED), ROT_WEIGHT)
  return pos, pos_knee, rot, rot * ROT_THRESHOLD**2


POS_W, POS_KNEE, ROT_W, ROT_KNEE = _weights()


def huber(quadratic: jax.Array, knee: np.ndarray) -> jax.Array:
  """quadratic below knee; above it the square root of it, matched in value and slope."""
  above = quadratic > knee
  safe = jnp.where(above, quadratic, knee)  # no sqrt of 0 in the unused branch's derivative
  return jnp.where(above, 2.0 * jnp.sqrt(safe * knee) - knee, quadratic)


def pose_cost(r: jax.Array) -> jax.Array:
  """Tracking cost of (..., 12, 6) residuals, summed over bodies."""
  pos = huber(jnp.sum(jnp.asarray(POS_W) * r[..., :3] ** 2, axis=-1), POS_KNEE)
  rot = huber(jnp.asarray(ROT_W) * jnp.sum(r[..., 3:] ** 2, axis=-1), ROT_KNEE)
  return jnp.sum(pos + rot, axis=-1)


def ctrl_cost(us: jax.Array, u_ref: jax.Array) -> jax.Array:
  return CTRL_WEIGHT * jnp.sum((us - u_ref) ** 2, axis=-1)


# ------------------------------------------------------------------------------------ iLQR


def make_solver(sim: mjbatch_jax.Simulator, ref: Reference, nstep: int) -> dict:
  """The jitted parts of iLQR: simulate, linearize, riccati, line_search.

  Knot t (t = 0 .. F - 1) takes state t to state t + 1 with controls us[t]; state t + 1 is
  compared with frame t + 1 of the clip, the last state with the last frame held.
  """
  model, layout = sim.model, sim.layout
  frames, nv, nu = len(ref.qpos), model.nv, model.nu
  nx = 2 * nv
  tracked = sim.names.bodies([name for _, name in TRACKED])
  held = np.r_[np.arange(1, frames), frames - 1]  # frame compared with the state after knot t
  ref_pos = jnp.asarray(np.concatenate([ref.xpos[:1], ref.xpos[held]]))  # (F + 1, 12, 3)
  ref_quat = jnp.asarray(np.concatenate([ref.xquat[:1], ref.xquat[held]]))
  u_ref = jnp.asarray(ref.qpos[held, 7:])  # servo targets at the frame each knot aims for
  lo, hi = (jnp.asarray(b) for b in model.actuator_ctrlrange.T)
  one, knots = sim.params(1), sim.params(frames)
  states_params = sim.params((frames + 1) * (1 + nv))
  lines = sim.params(len(ALPHAS))
  alphas = jnp.asarray(ALPHAS)[:, None]

  def poses(xpos: jax.Array, xquat: jax.Array) -> tuple[jax.Array, jax.Array]:
    return xpos[..., tracked, :], xquat[..., tracked, :]

  def total_cost(r: jax.Array, us: jax.Array) -> jax.Array:
    """r (..., F, 12, 6) of the states after each knot, us (..., F, nu)."""
    return jnp.sum(pose_cost(r) + ctrl_cost(us, u_ref), axis=-1)

  @jax.jit
  def simulate(start: jax.Array, us: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """states (F + 1, nstate), residuals (F, 12, 6) and cost of controls us from start."""
    states, _, obs = mjbatch_jax.rollout(start[None], us[None], one, nstep=nstep,
                                         observe=("xpos", "xquat"))
    r = residuals(*poses(obs["xpos"][0], obs["xquat"][0]), ref_pos[1:], ref_quat[1:])
    return jnp.concatenate([start[None], states[0]]), r, total_cost(r, us)

  def perturbed_rows(states: jax.Array) -> jax.Array:
    """Each state, then nv copies moved by FD_EPS along each tangent direction."""
    dq = jnp.concatenate([jnp.zeros((1, nv)), FD_EPS * jnp.eye(nv)])
    qpos = integrate(states[:, None, layout.qpos], dq[None])  # (F + 1, 1 + nv, nq)
    rows = jnp.broadcast_to(states[:, None], (*qpos.shape[:2], sim.nstate))
    return rows.at[..., layout.qpos].set(qpos).reshape(-1, sim.nstate)

  def pose_derivatives(out: dict) -> tuple[jax.Array, jax.Array]:
    """Gauss-Newton gradient and Hessian of each state's pose cost w.r.t. its tangent dq."""
    xpos, xquat = poses(out["xpos"], out["xquat"])
    shape = (-1, 1 + nv, len(TRACKED))
    r = residuals(xpos.reshape(*shape, 3), xquat.reshape(*shape, 4), ref_pos[:, None],
                  ref_quat[:, None]).reshape(-1, 1 + nv, len(TRACKED) * 6)
    jac = (r[:, 1:] - r[:, :1]) / FD_EPS  # (F + 1, nv, 72)
    flat_cost = lambda v: pose_cost(v.reshape(len(TRACKED), 6))  # noqa: E731
    g_r = jax.vmap(jax.grad(flat_cost))(r[:, 0])
    h_r = jax.vmap(jax.hessian(flat_cost))(r[:, 0])
    return jnp.einsum("tir,tr->ti", jac, g_r), jnp.einsum("tir,trs,tjs->tij", jac, h_r, jac)

  @jax.jit
  def linearize(states: jax.Array, us: jax.Array) -> tuple[jax.Array, ...]:
    """Dynamics (one transition_fd call for all knots) and cost derivatives of a trajectory."""
    a, b = mjbatch_jax.transition_fd(states[:-1], us, knots, nstep=nstep)
    out = mjbatch_jax.forward(perturbed_rows(states), states_params, ("xpos", "xquat"))
    g, h = pose_derivatives(out)
    return a, b, g, h

  @jax.jit
  def riccati(a, b, g, h, us, mu):
    """Feedforward ks (F, nu) and gains (F, nu, nx) of the backward pass."""
    def cost_x(g_t, h_t):
      l_x = jnp.concatenate([g_t, jnp.zeros(nv)])
      l_xx = jnp.zeros((nx, nx)).at[:nv, :nv].set(h_t)
      return l_x, l_xx

    def backward(carry, knot):
      v_x, v_xx = carry
      a_t, b_t, g_t, h_t, u_t, ur_t = knot
      l_x, l_xx = cost_x(g_t, h_t)
      q_x = l_x + a_t.T @ v_x
      q_u = 2 * CTRL_WEIGHT * (u_t - ur_t) + b_t.T @ v_x
      q_xx = l_xx + a_t.T @ v_xx @ a_t
      q_ux = b_t.T @ v_xx @ a_t
      q_uu = b_t.T @ v_xx @ b_t + (2 * CTRL_WEIGHT + mu) * jnp.eye(nu)
      # An explicit inverse, not cho_factor/cho_solve: jaxlib runs those on scipy's OpenBLAS,
      # whose threaded potrf took 5-50 ms per knot on a busy 2-CPU machine (inv: 0.1 ms; the
      # same with OPENBLAS_NUM_THREADS=1), which made this scan 30% of an iteration.
      q_uu_inv = jnp.linalg.inv(q_uu)
      k = -q_uu_inv @ q_u
      gain = -q_uu_inv @ q_ux
      # The box: clip the feedforward; a clipped control gets no feedback (its gain row is 0).
      k_boxed = jnp.clip(u_t + k, lo, hi) - u_t
      gain = jnp.where((k_boxed != k)[:, None], 0.0, gain)
      k = k_boxed
      v_x = q_x + gain.T @ q_uu @ k + gain.T @ q_u + q_ux.T @ k
      v_xx = q_xx + gain.T @ q_uu @ gain + gain.T @ q_ux + q_ux.T @ gain
      return (v_x, 0.5 * (v_xx + v_xx.T)), (k, gain)

    # g and h hold the F + 1 states: knot t's running cost is state t's (state 0's is constant
    # and only shifts the value function), the last state's is the final cost.
    final = cost_x(g[-1], h[-1])
    _, (ks, gains) = jax.lax.scan(backward, final, (a, b, g[:-1], h[:-1], us, u_ref),
                                  reverse=True)
    return ks, gains

  @jax.jit
  def line_search(states, us, ks, gains):
    """The forward pass for every step size at once; returns the cheapest trajectory."""
    def forward(state, knot):
      k, gain, x_nom, u_nom = knot
      dx = jnp.concatenate([difference(x_nom[layout.qpos], state[:, layout.qpos]),
                            state[:, layout.qvel] - x_nom[layout.qvel]], axis=-1)
      u = jnp.clip(u_nom + alphas * k + dx @ gain.T, lo, hi)
      state, obs = mjbatch_jax.step(state, u, lines, nstep=nstep, observe=("xpos", "xquat"))
      return state, (state, u, *poses(obs["xpos"], obs["xquat"]))

    start = jnp.broadcast_to(states[0], (len(ALPHAS), sim.nstate))
    _, (new_states, new_us, xpos, xquat) = jax.lax.scan(forward, start,
                                                        (ks, gains, states[:-1], us))
    r = residuals(xpos, xquat, ref_pos[1:, None], ref_quat[1:, None]).swapaxes(0, 1)
    new_us = new_us.swapaxes(0, 1)
    costs = total_cost(r, new_us)
    best = jnp.argmin(costs)
    new_states = jnp.concatenate([start[None], new_states]).swapaxes(0, 1)
    return new_states[best], new_us[best], costs[best], best

  return {"simulate": simulate, "linearize": linearize, "riccati": riccati,
          "line_search": line_search, "perturbed_rows": jax.jit(perturbed_rows),
          "params": {"knots": knots, "states": states_params, "lines": lines}}


# -------------------------------------------------------------------------------- metrics


def metrics(r: np.ndarray, qpos: np.ndarray) -> dict:
  """Tracking errors of residuals r (F, 12, 6) and uprightness of the states' qpos (F + 1, nq)."""
  pos = np.linalg.norm(r[..., :3], axis=-1)  # m
  rot = np.linalg.norm(r[..., 3:], axis=-1)  # rad
  height = qpos[:, 2]
  return {
    "bodies": {label: {"pos_mm": 1e3 * float(pos[:, i].mean()),
                       "pos_max_mm": 1e3 * float(pos[:, i].max()),
                       "rot_deg": float(np.degrees(rot[:, i].mean())),
                       "rot_max_deg": float(np.degrees(rot[:, i].max()))}
               for i, (label, _) in enumerate(TRACKED)},
    "pos_mm": 1e3 * float(pos.mean()),
    "rot_deg": float(np.degrees(rot.mean())),
    "pelvis_min_height": float(height.min()),
    "upright": bool(np.all(height > PELVIS_MIN)),
    "pelvis_drift_mm": 1e3 * float(np.linalg.norm(r[-1, 0, :2])),
  }


def print_table(columns: dict[str, dict]) -> None:
  """Per-body mean errors (position mm / orientation deg), one column pair per result."""
  names = list(columns)
  print(f"{'mean error':16s}" + "".join(f"{n:>22s}" for n in names))
  print(f"{'':16s}" + "".join(f"{'pos mm':>12s}{'rot deg':>10s}" for _ in names))
  for label, _ in TRACKED:
    cells = [columns[n]["bodies"][label] for n in names]
    print(f"{label:16s}" + "".join(f"{c['pos_mm']:12.1f}{c['rot_deg']:10.2f}" for c in cells))
  print(f"{'all bodies':16s}"
        + "".join(f"{columns[n]['pos_mm']:12.1f}{columns[n]['rot_deg']:10.2f}" for n in names))
  print(f"{'pelvis min z m':16s}"
        + "".join(f"{columns[n]['pelvis_min_height']:22.3f}" for n in names))
  print(f"{'upright':16s}" + "".join(f"{str(columns[n]['upright']):>22s}" for n in names))


# ---------------------------------------------------------------------------------- solve


def load_model(path: Path) -> mujoco.MjModel:
  if not path.exists():
    raise SystemExit(f"no model at {path}: pass --model PATH to the Unitree G1's scene.xml "
                     "(MuJoCo Menagerie's unitree_g1)")
  model = mujoco.MjModel.from_xml_path(str(path))
  free = mujoco.mjtJoint.mjJNT_FREE
  if model.njnt == 0 or model.jnt_type[0] != free or np.any(model.jnt_type[1:] == free):
    raise SystemExit(f"{path}: expected one free root joint followed by hinges, as the G1 has")
  if model.nkey == 0:
    raise SystemExit(f"{path}: expected a keyframe (the G1's 'stand') to start the IK from")
  servo = (model.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT) & np.isclose(
    model.actuator_gainprm[:, 0], -model.actuator_biasprm[:, 1])
  if model.nu != model.nv - 6 or not np.all(servo):
    raise SystemExit(f"{path}: expected one position actuator per hinge (controls are joint "
                     "targets), as the G1 has")
  missing = [name for _, name in TRACKED if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY,
                                                              name) < 0]
  if missing:
    raise SystemExit(f"{path}: no bodies named {missing}; this example tracks the G1's bodies")
  return model


def start_state(sim: mjbatch_jax.Simulator, ref: Reference) -> jax.Array:
  """At rest in the clip's first pose, the servos holding it."""
  layout = sim.layout
  return sim.init_state(1)[0].at[layout.qpos].set(ref.qpos[0]).at[layout.ctrl].set(
    ref.qpos[0, 7:])


def solve(args: argparse.Namespace) -> dict:
  model = load_model(args.model)
  nstep = round(FRAME_DT / model.opt.timestep)
  if not np.isclose(nstep * model.opt.timestep, FRAME_DT):
    raise SystemExit(f"the model's timestep {model.opt.timestep} does not divide {FRAME_DT} s")
  begin = time.perf_counter()
  ref = build_reference(model, args.frames)
  print(f"reference: {args.frames} frames of {FRAME_DT} s by IK in "
        f"{time.perf_counter() - begin:.1f} s (feet moved {1e3 * ref.foot_drift:.2f} mm, centre "
        f"of mass within {1e3 * ref.com_error:.1f} mm of the feet's centre, hands within "
        f"{1e3 * ref.hand_error:.0f} mm of their targets)")
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    fn = make_solver(sim, ref, nstep)
    simulate, linearize, riccati, line_search = (
      fn[k] for k in ("simulate", "linearize", "riccati", "line_search"))
    start = start_state(sim, ref)
    lo, hi = model.actuator_ctrlrange.T
    hold = jnp.asarray(np.broadcast_to(np.clip(ref.qpos[0, 7:], lo, hi), (args.frames, sim.nu)))
    held = np.r_[np.arange(1, args.frames), args.frames - 1]
    us = jnp.asarray(np.clip(ref.qpos[held, 7:], lo, hi))
    layout = sim.layout
    results = {}
    for name, controls in (("hold first pose", hold), ("initial guess", us)):
      states, r, cost = simulate(start, controls)
      results[name] = metrics(np.asarray(r), np.asarray(states[:, layout.qpos]))
      results[name]["cost"] = float(cost)
    initial_cost = float(cost)
    print(f"cost: hold first pose {results['hold first pose']['cost']:.3f}, initial guess "
          f"(reference joint angles as servo targets) {initial_cost:.3f}")

    mu, ks, gains, fresh = MU_START, None, None, False
    begin = time.perf_counter()
    first = None
    i = 0
    for i in range(1, args.iterations + 1):
      lin = linearize(states, us)
      while True:  # raise mu until a step improves; each try reuses the linearisation
        ks, gains = riccati(*lin, us, jnp.asarray(mu))
        new_states, new_us, new_cost, best = line_search(states, us, ks, gains)
        if float(new_cost) < float(cost) or mu > MU_MAX:
          break
        mu *= 10
      if first is None:
        first = time.perf_counter() - begin
      if float(new_cost) >= float(cost):
        print(f"iteration {i:3d}: no step size improves the cost even at mu = {mu:.0e}: stop")
        fresh = True  # the gains are of the current trajectory
        break
      improvement = float(cost) - float(new_cost)
      states, us, cost = new_states, new_us, new_cost
      fresh = False
      # Contacts make the linearisation good only near the trajectory: a short best step says
      # the model overreached, so trust it less; a full step, more.
      step = ALPHAS[int(best)]
      mu = max(mu / 4, MU_MIN) if step >= 0.5 else mu * 4 if step < 0.125 else mu
      print(f"iteration {i:3d}: cost {float(cost):10.4f}  step {step:.3f}  "
            f"mu {mu:.1e}  ({time.perf_counter() - begin:6.1f} s)", flush=True)
      if improvement < 1e-4 * float(cost):
        print(f"iteration {i:3d}: converged")
        break
    seconds = time.perf_counter() - begin
    if args.iterations and not fresh:  # gains about the final trajectory, for the saved plan
      ks, gains = riccati(*linearize(states, us), us, jnp.asarray(mu))

    # The plan replayed open-loop from the same start: the controls alone, no feedback.
    replay, r, replay_cost = simulate(start, us)
    results["iLQR plan"] = metrics(np.asarray(r), np.asarray(replay[:, layout.qpos]))
    results["iLQR plan"]["cost"] = float(replay_cost)
    replay_gap = float(jnp.max(jnp.abs(replay - states)))
    profile = run_profile(fn, sim, states, us, ks, gains) if args.profile else None

  print_table(results)
  then = f"; then {(seconds - first) / (i - 1):.2f} s per iteration" if first and i > 1 else ""
  print(f"solve: {i} iterations in {seconds:.1f} s on {sim.num_threads} threads (the first, with "
        f"compilation, {first or 0:.1f} s{then}; {args.frames} knots of {nstep} steps, one "
        f"transition_fd call each)")
  print(f"cost: {initial_cost:.3f} -> {float(replay_cost):.3f}")
  print(f"tracking error: {results['initial guess']['pos_mm']:.1f} mm -> "
        f"{results['iLQR plan']['pos_mm']:.1f} mm, {results['initial guess']['rot_deg']:.2f} "
        f"deg -> {results['iLQR plan']['rot_deg']:.2f} deg (mean over bodies and frames)")
  plan = results["iLQR plan"]
  print(f"open-loop replay: pelvis min height {plan['pelvis_min_height']:.3f} m "
        f"(threshold {PELVIS_MIN} m): {'upright' if plan['upright'] else 'FELL'} at every frame; "
        f"replay differs from the plan by {replay_gap:.1e}")

  args.out.parent.mkdir(parents=True, exist_ok=True)
  ref_pos = np.concatenate([ref.xpos, ref.xpos[-1:]])
  ref_quat = np.concatenate([ref.xquat, ref.xquat[-1:]])
  np.savez_compressed(
    args.out, ctrl=np.asarray(us), start=np.asarray(start),
    qpos=np.asarray(states[:, layout.qpos]), qvel=np.asarray(states[:, layout.qvel]),
    feedforward=np.asarray(ks if ks is not None else np.zeros_like(us)),
    gains=np.asarray(gains if gains is not None else np.zeros((args.frames, sim.nu, 2 * model.nv)),
                     dtype=np.float32),
    ref_qpos=ref.qpos, ref_xpos=ref_pos, ref_xquat=ref_quat, nq=model.nq, nu=model.nu,
    nstep=nstep, frame_dt=FRAME_DT, bodies=np.array([name for _, name in TRACKED]),
  )
  summary = {"frames": args.frames, "iterations": i, "threads": sim.num_threads,
             "solve_seconds": seconds, "first_iteration_seconds": first, "results": results,
             "replay_gap": replay_gap, "profile": profile}
  args.results.mkdir(parents=True, exist_ok=True)
  path = args.results / "g1_tracking.json"
  path.write_text(json.dumps(summary, indent=1))
  print(f"plan saved to {args.out}; metrics to {path}")
  return summary


def run_profile(fn: dict, sim: mjbatch_jax.Simulator, states, us, ks, gains, rounds: int = 3
                ) -> dict:
  """Times one iteration's parts and the custom calls alone on the same inputs.

  The machine this was written on is shared, so every timing is the best of `rounds` runs
  taken in turn (interleaved), which cancels most of the others' load.
  """
  frames, nu, nx = us.shape[0], sim.nu, 2 * sim.model.nv
  nstep = round(FRAME_DT / sim.model.opt.timestep)
  p = fn["params"]
  lin = fn["linearize"](states, us)
  mu = jnp.asarray(MU_START)
  # The physics as the iteration calls it: transition_fd (and the rows it steps, as one plain
  # rollout), the pose Jacobians' forward, and the line search's F step calls; also those steps
  # as one rollout call, for the cost of calling once per knot.
  tfd = jax.jit(lambda s, u: mjbatch_jax.transition_fd(s, u, p["knots"], nstep=nstep))
  copies = 1 + nx + nu
  rows = jax.jit(lambda s, u: mjbatch_jax.rollout(s, u, sim.params(frames * copies),
                                                  nstep=nstep)[0])
  fwd = jax.jit(lambda s: mjbatch_jax.forward(s, p["states"], ("xpos", "xquat")))
  line_start = jnp.broadcast_to(states[0], (len(ALPHAS), sim.nstate))
  line_ctrls = jnp.broadcast_to(us[:, None], (frames, len(ALPHAS), nu))

  @jax.jit
  def steps(start, ctrls):
    def knot(state, u):
      state, obs = mjbatch_jax.step(state, u, p["lines"], nstep=nstep, observe=("xpos", "xquat"))
      return state, obs
    return jax.lax.scan(knot, start, ctrls)[1]

  roll = jax.jit(lambda s, u: mjbatch_jax.rollout(s, u, p["lines"], nstep=nstep,
                                                  observe=("xpos", "xquat"))[2])
  cases = {
    "linearize": (fn["linearize"], (states, us)),
    "riccati": (fn["riccati"], (*lin, us, mu)),
    "line_search": (fn["line_search"], (states, us, ks, gains)),
    "transition_fd": (tfd, (states[:-1], us)),
    "its rows as one rollout": (rows, (jnp.repeat(states[:-1], copies, axis=0),
                                       jnp.repeat(us, copies, axis=0)[:, None])),
    "forward (pose Jacobians)": (fwd, (fn["perturbed_rows"](states),)),
    f"step x {frames} (line search's calls)": (steps, (line_start, line_ctrls)),
    "the same steps as one rollout": (roll, (line_start, line_ctrls.swapaxes(0, 1))),
  }
  for f, args in cases.values():
    jax.block_until_ready(f(*args))  # compiled and warm
  best = dict.fromkeys(cases, float("inf"))
  for _ in range(rounds):
    for name, (f, args) in cases.items():
      begin = time.perf_counter()
      jax.block_until_ready(f(*args))
      best[name] = min(best[name], time.perf_counter() - begin)
  names = list(cases)
  iteration = sum(best[n] for n in names[:3])
  physics = best[names[4]] + best[names[5]] + best[names[6]]
  print(f"profile ({frames} knots, {sim.num_threads} threads, best of {rounds}): one iteration "
        f"{iteration:.3f} s")
  for name in names:
    print(f"  {name:38s} {best[name]:8.3f} s")
  print(f"  physics (the custom calls alone)       {physics:8.3f} s = "
        f"{100 * physics / iteration:.0f}% of the iteration; JAX around them "
        f"{iteration - physics:.3f} s ({100 * (1 - physics / iteration):.0f}%)")
  return {"seconds": best, "iteration": iteration, "physics": physics}


# ----------------------------------------------------------------------------------- play


PLAN_KEYS = ("ctrl", "start", "qpos", "ref_qpos", "ref_xpos", "ref_xquat", "nq", "nu", "nstep",
             "bodies")


def play(args: argparse.Namespace) -> dict:
  if not args.out.is_file():
    raise SystemExit(f"no plan at {args.out}: solve one first (run without --play, with the "
                     "same --out), or pass --out PATH to a saved plan")
  not_a_plan = f"{args.out} is not a plan saved by g1_tracking.py (not an .npz archive)"
  try:
    saved = np.load(args.out, allow_pickle=False)
  except (OSError, ValueError, EOFError):
    raise SystemExit(not_a_plan) from None
  if not isinstance(saved, np.lib.npyio.NpzFile):  # an .npy array under an .npz name
    raise SystemExit(not_a_plan)
  with saved:
    plan = {k: saved[k] for k in saved.files}
  missing = [k for k in PLAN_KEYS if k not in plan]
  if missing:
    raise SystemExit(f"{args.out} is not a plan saved by g1_tracking.py (no {missing})")
  model = load_model(args.model)
  if (int(plan["nq"]), int(plan["nu"])) != (model.nq, model.nu):
    raise SystemExit(
      f"{args.out} was solved for a model with nq={int(plan['nq'])}, nu={int(plan['nu'])}, but "
      f"{args.model} has nq={model.nq}, nu={model.nu}: pass the --model it was solved for")
  if tuple(plan["bodies"]) != tuple(name for _, name in TRACKED):
    raise SystemExit(f"{args.out} tracks other bodies ({list(plan['bodies'])})")
  ctrl = plan["ctrl"]
  frames = len(ctrl)
  ref = Reference(plan["ref_qpos"], plan["ref_xpos"][:-1], plan["ref_xquat"][:-1], 0.0, 0.0,
                  0.0)
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    if plan["start"].shape != (sim.nstate,):
      raise SystemExit(f"{args.out} holds states of {plan['start'].shape[-1]} values, the "
                       f"model's have {sim.nstate}: pass the --model it was solved for")
    fn = make_solver(sim, ref, int(plan["nstep"]))
    begin = time.perf_counter()
    states, r, cost = fn["simulate"](jnp.asarray(plan["start"]), jnp.asarray(ctrl))
    seconds = time.perf_counter() - begin
    qpos = np.asarray(states[:, sim.layout.qpos])
    if args.profile:  # an iteration about the saved plan, without solving again
      us = jnp.asarray(ctrl)
      ks, gains = fn["riccati"](*fn["linearize"](states, us), us, jnp.asarray(MU_START))
      run_profile(fn, sim, states, us, ks, gains)
  result = metrics(np.asarray(r), qpos)
  result["cost"] = float(cost)
  print(f"replayed {args.out} open-loop ({frames} frames, the saved controls, no feedback) in "
        f"{seconds:.2f} s with compilation")
  print_table({"open-loop replay": result})
  print(f"replay differs from the saved plan by {float(np.max(np.abs(qpos - plan['qpos']))):.1e}")
  print(f"pelvis min height {result['pelvis_min_height']:.3f} m (threshold {PELVIS_MIN} m): "
        f"{'upright' if result['upright'] else 'FELL'} at every frame")
  args.results.mkdir(parents=True, exist_ok=True)
  plot(np.asarray(r), qpos, plan["ref_qpos"], args.results / "g1_tracking.png")
  video(model, qpos, args.results / "g1_tracking.gif")
  return result


def plot(r: np.ndarray, qpos: np.ndarray, ref_qpos: np.ndarray, path: Path) -> None:
  try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    print("plot: skipped (matplotlib is not installed)")
    return
  t = FRAME_DT * np.arange(len(qpos))
  fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
  parts = sorted({label.split()[-1] for label, _ in TRACKED})
  for i, (label, _) in enumerate(TRACKED):
    # One colour per part, dashed on the right side.
    style = {"color": f"C{parts.index(label.split()[-1])}", "label": label,
             "linestyle": "--" if label.startswith("right") else "-"}
    axes[0].plot(t[1:], 1e3 * np.linalg.norm(r[:, i, :3], axis=-1), **style)
    axes[1].plot(t[1:], np.degrees(np.linalg.norm(r[:, i, 3:], axis=-1)), **style)
  axes[0].set_ylabel("position error (mm)")
  axes[1].set_ylabel("orientation error (deg)")
  axes[0].legend(ncol=3, fontsize=7)
  held = np.concatenate([ref_qpos[:, 2], ref_qpos[-1:, 2]])
  axes[2].plot(t, qpos[:, 2], label="replay")
  axes[2].plot(t, held, "--", label="reference")
  axes[2].axhline(PELVIS_MIN, color="r", lw=0.8, label="upright threshold")
  axes[2].set_ylabel("pelvis height (m)")
  axes[2].set_xlabel("time (s)")
  axes[2].legend(fontsize=7)
  fig.suptitle("G1 tracking: open-loop replay of the iLQR plan")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  print(f"plot: {path}")


def video(model: mujoco.MjModel, qpos: np.ndarray, path: Path) -> None:
  """A GIF of the replay, if MuJoCo can render headless here."""
  try:
    from PIL import Image

    renderer = mujoco.Renderer(model, 240, 320)
  except Exception as error:  # noqa: BLE001  (any backend failure means: no video)
    print(f"video: skipped (mujoco.Renderer with MUJOCO_GL={os.environ.get('MUJOCO_GL')} "
          f"failed: {type(error).__name__}: {str(error).splitlines()[0]})")
    return
  with renderer:
    data = mujoco.MjData(model)
    camera = mujoco.MjvCamera()
    camera.distance, camera.azimuth, camera.elevation = 2.6, 140.0, -15.0
    images = []
    every = 4  # 12.5 frames per second keeps the GIF under 2 MB
    for q in qpos[::every]:
      data.qpos[:] = q
      mujoco.mj_forward(model, data)
      camera.lookat[:] = (q[0], q[1], 0.55)  # follow the pelvis, the whole body in view
      renderer.update_scene(data, camera)
      images.append(Image.fromarray(renderer.render()))
  duration = round(1000 * FRAME_DT * every)
  images[0].save(path, save_all=True, append_images=images[1:], duration=duration, loop=0)
  print(f"video: {path}")


# ----------------------------------------------------------------------------------- main


def _int_in(lo: int, hi: int, what: str):
  def parse(text: str) -> int:
    try:
      value = int(text)
    except ValueError:
      value = None
    if value is None or not lo <= value <= hi:
      raise argparse.ArgumentTypeError(f"must be an integer in [{lo}, {hi}] ({what}), got "
                                       f"{text!r}")
    return value

  return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description="Whole-body motion tracking on the Unitree G1 "
                                   "by iLQR over batched transition_fd.")
  parser.add_argument("--model", type=Path, default=DEFAULT_MODEL,
                      help="the G1's scene.xml (default: ../shared/models/unitree_g1)")
  parser.add_argument("--frames", type=_int_in(2, CLIP_FRAMES, "the clip's first frames"),
                      default=CLIP_FRAMES, help=f"track the clip's first N frames of "
                      f"{FRAME_DT} s (default {CLIP_FRAMES}: all of it)")
  parser.add_argument("--iterations", type=_int_in(0, 1000, "most iLQR iterations"),
                      default=40, help="most iLQR iterations (default 40)")
  cpus = os.cpu_count() or 1
  parser.add_argument("--threads", type=_int_in(0, 4 * cpus, "0: one per CPU"), default=0,
                      help="physics threads (default 0: one per CPU)")
  parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                      help="folder for the metrics, plot and video (default examples/results)")
  parser.add_argument("--out", type=Path, default=None,
                      help="the plan (.npz) to save, or with --play to replay "
                           "(default RESULTS/g1_tracking.npz)")
  parser.add_argument("--play", action="store_true",
                      help="replay the saved plan headless: metrics, plot and video")
  parser.add_argument("--profile", action="store_true",
                      help="time an iteration's parts and the custom calls alone, after solving "
                           "(with --play: about the saved plan)")
  args = parser.parse_args(argv)
  if args.out is None:
    args.out = args.results / "g1_tracking.npz"
  return args


def main(argv: list[str] | None = None) -> dict:
  args = parse_args(argv)
  return play(args) if args.play else solve(args)


if __name__ == "__main__":
  main(sys.argv[1:])
