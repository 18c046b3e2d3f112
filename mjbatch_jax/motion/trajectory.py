"""Smooth motions and their rates: quintic segments, velocities of a pose sequence, momentum.

A reference built from physics is a chain of segments that meet in position, velocity and
acceleration (quintics, so that the accelerations the feasibility check reads are continuous
within each phase), sampled on a grid; its joint velocities are finite differences on the
configuration manifold (a free joint's quaternion included), and its whole-body angular
momentum is MuJoCo's subtree momentum.

  com = quintic(crouch, 0, 0, takeoff, v_off, 0, duration=0.3, t=times)
  qvel = velocities(model, qpos, dt)
  qvel, qacc = phase_derivatives(model, qpos, dt, contact)   # not across take-off, touchdown
  L = angular_momentum(model, data, qpos[k], qvel[k])  # about the robot's centre of mass
"""

from typing import Any

import mujoco
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax.motion._arrays import mj_model, numbers, scratch_data

_ENDS = ("p0", "v0", "a0", "p1", "v1", "a1")


def quintic(p0: Any, v0: Any, a0: Any, p1: Any, v1: Any, a1: Any, duration: float,
            t: Any) -> np.ndarray:
  """The quintic from (position, velocity, acceleration) at 0 to those at duration, at times t.

  Args:
    p0, v0, a0: the start's position, velocity and acceleration (finite numbers, or arrays that
      broadcast with the other five to one shape P).
    p1, v1, a1: the end's, likewise.
    duration: seconds, > 0.
    t: a time or an array of times (T,), finite; clipped to [0, duration] (held at the ends).

  Returns:
    t.shape + P positions.

  Raises:
    ValueError: an argument is not finite numbers, the six ends do not broadcast to one shape,
      or duration is not > 0.

  Example:
    height = quintic(0.65, 0, 0, 0.4, 0, 0, 0.6, np.linspace(0, 0.6, 31))  # a crouch
  """
  duration = v.number("duration", duration, low=0.0, low_open=True)
  ends = [numbers(name, x) for name, x in zip(_ENDS, (p0, v0, a0, p1, v1, a1), strict=True)]
  shape: tuple[int, ...] = ()
  for i, (name, x) in enumerate(zip(_ENDS, ends, strict=True)):
    try:
      shape = np.broadcast_shapes(shape, x.shape)
    except ValueError:
      given = ", ".join(f"{n} {e.shape}" for n, e in zip(_ENDS[:i], ends, strict=False))
      raise ValueError(f"{name} must broadcast with the other ends to one shape P, got shape "
                       f"{x.shape} against {given}") from None
  p0, v0, a0, p1, v1, a1 = ends
  T = duration
  s = np.clip(numbers("t", t) / T, 0.0, 1.0)
  s = s.reshape(s.shape + (1,) * len(shape))
  c0, c1, c2 = p0, v0 * T, 0.5 * a0 * T * T
  d, e, f = p1 - c0 - c1 - c2, v1 * T - c1 - 2 * c2, a1 * T * T - 2 * c2
  c3, c4, c5 = 10 * d - 4 * e + 0.5 * f, -15 * d + 7 * e - f, 6 * d - 3 * e + 0.5 * f
  return c0 + s * (c1 + s * (c2 + s * (c3 + s * (c4 + s * c5))))


def velocities(model: mujoco.MjModel, qpos: Any, dt: float) -> np.ndarray:
  """(S, nv) velocities of a pose sequence (S, nq) sampled every dt seconds.

  Central differences (mj_differentiatePos, so quaternions are differenced on their manifold),
  one-sided at the two ends. Where the motion's velocity jumps (a take-off, a touchdown), call
  it on each side separately.

  Example:
    qvel = velocities(model, qpos, 0.005)
    qacc = np.gradient(qvel, 0.005, axis=0)
  """
  model = mj_model("model", model)
  qpos = numbers("qpos", qpos, (None, model.nq))
  if len(qpos) < 2:
    raise ValueError(f"qpos must have at least 2 poses to difference, got {len(qpos)}")
  dt = v.number("dt", dt, low=0.0, low_open=True)
  diff = np.zeros((len(qpos) - 1, model.nv))
  for i in range(len(qpos) - 1):
    mujoco.mj_differentiatePos(model, diff[i], dt, qpos[i], qpos[i + 1])
  return np.concatenate([diff[:1], 0.5 * (diff[:-1] + diff[1:]), diff[-1:]])


def phase_derivatives(model: mujoco.MjModel, qpos: Any, dt: float,
                      contact: Any) -> tuple[np.ndarray, np.ndarray]:
  """(qvel, qacc), each (S, nv): a motion's velocities and accelerations, never differenced
  across a take-off or a touchdown, where the velocity jumps.

  contact splits the poses into phases: each run of True (on the floor) is differenced over its
  own poses; each run of False (in flight) over its own and the poses on either side of it (the
  take-off's last on the floor, the touchdown's first), keeping its own rows. Within a phase,
  velocities as `velocities` gives them and accelerations their np.gradient.

  Args:
    model: the robot's mujoco.MjModel.
    qpos: (S, nq) poses every dt seconds, finite.
    dt: seconds between poses, > 0.
    contact: (S,) booleans: the pose is on the floor.

  Raises:
    ValueError: a shape or value is wrong, or a phase (with a flight's neighbours) has fewer
      than 2 poses to difference.

  Example:
    contact = np.ones(len(qpos), bool)
    contact[takeoff + 1:touchdown] = False
    qvel, qacc = phase_derivatives(model, qpos, 0.005, contact)
  """
  model = mj_model("model", model)
  qpos = numbers("qpos", qpos, (None, model.nq))
  given = contact
  contact = np.asarray(contact)
  if contact.dtype != np.bool_ or contact.shape != (len(qpos),):
    raise ValueError(f"contact must be ({len(qpos)},) booleans, one per pose, got "
                     f"{v.shown(given)}")
  dt = v.number("dt", dt, low=0.0, low_open=True)
  if len(qpos) < 2:
    raise ValueError(f"qpos must have at least 2 poses to difference, got {len(qpos)}")
  edges = [0, *(np.flatnonzero(np.diff(contact)) + 1).tolist(), len(qpos)]
  spans = []  # every phase checked from contact alone, before any differencing
  for begin, end in zip(edges[:-1], edges[1:], strict=True):
    lo, hi = (begin, end) if contact[begin] else (max(begin - 1, 0), min(end + 1, len(qpos)))
    if hi - lo < 2:
      where = "on the floor" if contact[begin] else "in flight"
      raise ValueError(f"contact: the phase of poses {begin}..{end - 1} ({where}) has fewer than "
                       f"2 poses to difference")
    spans.append((begin, end, lo, hi))
  qvel, qacc = np.zeros((len(qpos), model.nv)), np.zeros((len(qpos), model.nv))
  for begin, end, lo, hi in spans:
    rate = velocities(model, qpos[lo:hi], dt)
    keep = slice(begin - lo, end - lo)
    qvel[begin:end], qacc[begin:end] = rate[keep], np.gradient(rate, dt, axis=0)[keep]
  return qvel, qacc


def angular_momentum(model: mujoco.MjModel, data: mujoco.MjData | None, qpos: Any, qvel: Any,
                     body: int = 1) -> np.ndarray:
  """(3,) the angular momentum of body's subtree about its centre of mass, in the world frame.

  Runs the kinematic stages that MuJoCo's subtree momentum needs (nothing else) in data, a
  scratch MjData of model whose qpos and qvel are overwritten. body 1 (the first body under the
  world) is the whole robot when it has a free root.

  Args:
    model: the robot's mujoco.MjModel.
    data: a scratch mujoco.MjData of model (made by mujoco.MjData(model), or of a model of the
      same sizes); None: one is made for this call (simpler, slower when called per frame).
    qpos, qvel: (nq,) and (nv,) the state, finite.
    body: the subtree's root body id, in [0, nbody).

  Raises:
    ValueError: model is not an MjModel, data is not an MjData of model's sizes, a shape or
      value is wrong, or body is out of range; before data is written.

  Example:
    scratch = mujoco.MjData(model)
    inertia = angular_momentum(model, scratch, qpos, np.eye(model.nv)[4])[1]  # pitch inertia
  """
  model = mj_model("model", model)
  data = scratch_data(model, data)
  qpos = numbers("qpos", qpos, (model.nq,))
  qvel = numbers("qvel", qvel, (model.nv,))
  body = v.integer("body", body, 0, model.nbody - 1)
  data.qpos[:] = qpos
  data.qvel[:] = qvel
  for stage in (mujoco.mj_kinematics, mujoco.mj_comPos, mujoco.mj_comVel, mujoco.mj_subtreeVel):
    stage(model, data)
  return data.subtree_angmom[body].copy()
