"""A flip's flight: the root's turn and path that momentum allows for the joints' motion in it.

In the air nothing outside acts on the robot but gravity, so its centre of mass follows a
parabola and its angular momentum L about the centre of mass is constant. For a turn about the
world's lateral (y) axis, L = I(q) theta' + own(q, q'), with I the whole body's moment of inertia
about that axis and own the momentum the joints' motion alone carries; so theta' =
(L - own) / I, and the pitch at the end is fixed by L. ballistic_flight picks the L that turns the
root from one pitch to another over the flight, and places the root so that the centre of mass
is on the parabola:

  joints = ...  # (K, nq) the joints' angles in flight (a tuck), the root's 7 numbers ignored
  flight = motion.ballistic_flight(model, joints, dt, pitch0=0.3, pitch1=0.2 - 2 * np.pi,
                                   com0=com_at_takeoff, vel0=v_at_takeoff)
  flight.qpos, flight.momentum, flight.final_rate   # the take-off must hand over flight.momentum

The integrals are the trapezoid rule on the grid; the joints' rates are numpy.gradient's.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax.motion._arrays import free_root, mj_model, numbers
from mjbatch_jax.motion.trajectory import angular_momentum


@dataclasses.dataclass(frozen=True)
class Flight:
  """ballistic_flight's result.

  Attributes:
    qpos: (K, nq) the frames: the joints as given, the root turned and placed.
    pitch: (K,) the root's pitch about the world's y axis (rad, positive nose down).
    momentum: L, the y component of the angular momentum about the centre of mass (kg m^2/s),
      constant through the flight.
    final_rate: the root's pitch rate at the last frame (rad/s).
  """

  qpos: np.ndarray
  pitch: np.ndarray
  momentum: float
  final_rate: float


def pitch_quat(angle: float) -> np.ndarray:
  """(4,) a rotation by angle (rad, a finite number) about the world's y axis (positive: nose
  down)."""
  angle = v.number("angle", angle)
  return np.array([np.cos(angle / 2), 0.0, np.sin(angle / 2), 0.0])


def quat_pitch(quat: Any) -> jax.Array:
  """The pitch (rad, positive nose down, in (-pi, pi]) about the world's y axis of the frames
  whose orientations are quat (..., 4), read from where each frame's x axis points in the x-z
  plane: pitch_quat's inverse. Pure JAX, so it runs inside jit on a rollout's states.

  Example:
    pitch = motion.quat_pitch(states[..., 3:7])   # a free root's qpos[3:7]: the root's pitch
  """
  quat = v.array("quat", quat, (..., 4))  # shapes and dtypes only: it runs on tracers
  w, x, y, z = (quat[..., i] for i in range(4))
  return jnp.arctan2(-2 * (x * z - w * y), 1 - 2 * (y * y + z * z))


def ballistic_flight(model: mujoco.MjModel, joints: Any, dt: float, *, pitch0: float,
                     pitch1: float, com0: Any, vel0: Any) -> Flight:
  """The root's pitch and position through a flight in which the joints move as joints says.

  Args:
    model: the robot's MjModel; its first joint a free joint at body 1 (the root), gravity
      along -z.
    joints: (K, nq) configurations, K >= 2 frames dt apart; their root's 7 numbers are ignored
      (the joints' momentum and the centre of mass are measured with the root at the origin,
      unturned).
    dt: seconds between frames, > 0.
    pitch0, pitch1: the root's pitch (rad) at the first and the last frame; a backflip turns by
      about -2 pi (nose up, over the back).
    com0, vel0: (3,) the centre of mass's position (m) and velocity (m/s) at the first frame.

  Returns:
    Flight: the frames, the pitch, the momentum and the last frame's pitch rate.

  Raises:
    ValueError: model is not an MjModel with a free root and gravity along -z, or an argument's
      shape or value is wrong.

  Example:
    flight = motion.ballistic_flight(model, tuck, 0.005, pitch0=0.3, pitch1=0.2 - 2 * np.pi,
                                     com0=[0.0, 0, 0.7], vel0=[-0.3, 0, 3.5])
  """
  model = mj_model("model", model)
  # A body before the robot's root (a table, say) would be measured instead of the robot.
  if not free_root(model):
    raise ValueError("model's first joint must be a free joint at body 1, the first body under "
                     "the world (the root that turns in flight)")
  if np.any(model.opt.gravity[:2] != 0) or model.opt.gravity[2] >= 0:
    raise ValueError(f"model's gravity must point along -z, got {model.opt.gravity.tolist()}")
  joints = numbers("joints", joints, (None, model.nq))
  if len(joints) < 2:
    raise ValueError(f"joints must hold at least 2 frames, got {len(joints)}")
  dt = v.number("dt", dt, 0.0, low_open=True)
  pitch0, pitch1 = v.number("pitch0", pitch0), v.number("pitch1", pitch1)
  com0, vel0 = numbers("com0", com0, (3,)), numbers("vel0", vel0, (3,))
  q_rel = joints.copy()
  q_rel[:, :7] = (0, 0, 0, 1, 0, 0, 0)
  data = mujoco.MjData(model)
  pitch_rate = np.eye(model.nv)[4]  # the root's angular velocity about y
  inertia, com_rel = [], []
  for q in q_rel:  # angular_momentum leaves data's kinematics at q: the centre of mass too
    inertia.append(angular_momentum(model, data, q, pitch_rate)[1])
    com_rel.append(data.subtree_com[1].copy())
  inertia = np.array(inertia)
  rates = np.gradient(q_rel[:, 7:], dt, axis=0)
  own = np.array([angular_momentum(model, data, q, np.r_[np.zeros(6), rate])[1]
                  for q, rate in zip(q_rel, rates, strict=True)])

  def cumulative(f):
    return np.concatenate([[0.0], np.cumsum(0.5 * dt * (f[1:] + f[:-1]))])

  inv, own_term = cumulative(1.0 / inertia), cumulative(own / inertia)
  momentum = (pitch1 - pitch0 + own_term[-1]) / inv[-1]
  theta = pitch0 + momentum * inv - own_term
  s = dt * np.arange(len(q_rel))
  c = com0 + vel0 * s[:, None] + np.outer(0.5 * s**2, model.opt.gravity)
  out = q_rel.copy()
  mat = np.zeros(9)
  for k in range(len(s)):
    out[k, 3:7] = pitch_quat(theta[k])
    mujoco.mju_quat2Mat(mat, out[k, 3:7])
    out[k, :3] = c[k] - mat.reshape(3, 3) @ com_rel[k]
  return Flight(out, theta, float(momentum), float((momentum - own[-1]) / inertia[-1]))
