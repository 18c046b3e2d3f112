"""A cost that tracks a clip's bodies: each body's pose error, quadratic near it, linear far.

The whole-body trackers' cost in residual form (control.Cost): per knot t, each tracked body's
position and orientation against frame min(t, F - 1) of the clip, and the control against the
joint angles of frame t + 1 (position servos: a control is a vector of joint targets).

  cost = motion.tracking_cost(sim, clip_xpos, clip_xquat, clip_qpos, bodies,
                              pos_weight=np.array([[1, 1, 1000]] + [[100] * 3] * 11))
  result = control.ilqr(cost, sim.params(1), start, guess, nstep=10)

The first body is the root: with loose_root (the default) the others' positions are measured
relative to its horizontal position, so that a drift of the whole robot over the floor costs
only the root's own (usually small) horizontal weight.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax import control, rotations
from mjbatch_jax.motion._arrays import numbers
from mjbatch_jax.simulator import Simulator


def pose_errors(xpos: Any, xquat: Any, ref_pos: Any, ref_quat: Any,
                loose_root: bool = True) -> Any:
  """(..., B, 6): position (m) and orientation (rad, rotation vector) errors of B bodies' poses
  (..., B, 3) and (..., B, 4) against the reference's; body 0 is the root (see the module).

  Pure JAX (jit, vmap and grad go through it); the arguments' shapes are checked (when traced
  too), not their values.

  Args:
    xpos: (..., B, 3) the bodies' world positions (m), body 0 the root.
    xquat: (..., B, 4) the bodies' world orientations, unit quaternions (w, x, y, z).
    ref_pos: (..., B, 3) the reference's world positions, broadcasting against xpos.
    ref_quat: (..., B, 4) the reference's world orientations, broadcasting against xquat.
    loose_root: if True (default), the non-root bodies' position errors are measured relative
      to the root's horizontal (x, y) error, so that the whole robot's drift over the floor
      counts only in the root's; False: every body's own error.

  Returns:
    (..., B, 6): per body, xpos - ref_pos (with loose_root, less the root's horizontal error
    for bodies 1..B-1), then the rotation vector in the reference's frame that turns ref_quat
    into xquat (rotations.difference(xquat, ref_quat)).

  Raises:
    ValueError: an argument is not an array of numbers of its shape, their leading dimensions
      (..., B) do not broadcast to one shape, or loose_root is not True or False.

  Example:
    errors = motion.pose_errors(obs["xpos"][ids], obs["xquat"][ids], clip.xpos[t], clip.xquat[t])
  """
  xpos, ref_pos = _poses("xpos", xpos, 3), _poses("ref_pos", ref_pos, 3)
  xquat, ref_quat = _poses("xquat", xquat, 4), _poses("ref_quat", ref_quat, 4)
  named = (("xpos", xpos), ("xquat", xquat), ("ref_pos", ref_pos), ("ref_quat", ref_quat))
  try:
    lead = np.broadcast_shapes(*(jnp.shape(x)[:-1] for _, x in named))
  except ValueError:
    given = ", ".join(f"{name} {tuple(jnp.shape(x))}" for name, x in named)
    raise ValueError(f"xpos, xquat, ref_pos and ref_quat must be (..., B, 3) and (..., B, 4) "
                     f"poses whose leading dimensions (..., B) broadcast to one shape, got "
                     f"{given}") from None
  loose_root = v.flag("loose_root", loose_root)
  pos = xpos - ref_pos
  if loose_root:
    drift = pos[..., :1, :] * jnp.array([1.0, 1.0, 0.0])  # the root's horizontal looseness
    pos = jnp.concatenate([pos[..., :1, :], pos[..., 1:, :] - drift], axis=-2)
  rot = rotations.difference(xquat, ref_quat)
  if jnp.shape(pos)[:-1] != lead:  # the positions broadcast against the orientations
    pos = jnp.broadcast_to(pos, (*lead, 3))
  if jnp.shape(rot)[:-1] != lead:
    rot = jnp.broadcast_to(rot, (*lead, 3))
  return jnp.concatenate([pos, rot], axis=-1)


def _poses(name: str, x: Any, width: int) -> Any:
  """x, (..., B, width) numbers: a float array as it is (its values, traced or not, unread),
  anything else as _validate.array makes it."""
  shape = (..., None, width)
  if isinstance(x, (jax.Array, np.ndarray)) and jnp.issubdtype(x.dtype, jnp.floating):
    if not v.matches(x.shape, shape):
      raise ValueError(f"{name} must have shape {v.pattern(shape)}, got {tuple(x.shape)}")
    return x
  return v.array(name, x, shape)


def tracking_cost(sim: Any, xpos: Any, xquat: Any, qpos: Any, bodies: Sequence[str], *,
                  pos_weight: Any = 100.0, rot_weight: float = 10.0, ctrl_weight: float = 0.01,
                  pos_threshold: float = 0.05, rot_threshold: float = 0.25,
                  loose_root: bool = True) -> control.Cost:
  """The clip's bodies tracked by a Simulator's model (see the module doc).

  Args:
    sim: the mjbatch_jax.Simulator whose model is tracked (its actuators: one position servo per
      hinge, in qpos order after the free root).
    xpos, xquat: (F, B, 3) and (F, B, 4): the tracked bodies' world poses per frame
      (motion.body_poses or a Clip's).
    qpos: (F, nq): the frames' joint angles; controls are regularised towards qpos[t + 1, 7:].
    bodies: the B tracked bodies' names, the root first.
    pos_weight: per m^2: a number, or (B, 3) per body and axis.
    rot_weight, ctrl_weight: per rad^2.
    pos_threshold, rot_threshold: where each body's cost turns from quadratic to linear (m of
      the body's largest-weighted axis, rad).
    loose_root: the bodies' positions relative to the root's horizontal position.

  Returns:
    A control.Cost observing xpos and xquat; its last knot has no control term.

  Raises:
    ValueError: sim is not a Simulator, bodies is not a sequence of its bodies' names, the
      clip's arrays are not finite, of no frame or of other shapes, a weight or threshold is
      negative, or the model has not one actuator per hinge after a free root.
  """
  if not isinstance(sim, Simulator):
    raise ValueError(f"sim must be a mjbatch_jax.Simulator (of the tracked model), got "
                     f"{type(sim).__name__}")
  given = bodies
  try:  # a string is one name, not a sequence of them
    bodies = () if isinstance(bodies, (str, bytes, Mapping)) else tuple(bodies)
  except TypeError:
    bodies = ()
  if not bodies or not all(isinstance(b, str) for b in bodies):
    raise ValueError(f"bodies must be a non-empty sequence of body names, got {v.shown(given)}")
  ids = np.asarray(sim.names.bodies(list(bodies)))
  count = len(bodies)
  ref_pos = numbers("xpos", xpos, (None, count, 3))
  frames = len(ref_pos)
  if frames == 0:
    raise ValueError(f"xpos must hold at least one frame, got shape {ref_pos.shape}")
  ref_quat = numbers("xquat", xquat, (frames, count, 4))
  ref_qpos = numbers("qpos", qpos, (frames, sim.model.nq))
  weight = numbers("pos_weight", pos_weight)
  try:
    weight = np.broadcast_to(weight, (count, 3)).astype(np.float64)
  except ValueError:
    raise ValueError(f"pos_weight must be a number or have shape (B, 3) = ({count}, 3) (per "
                     f"tracked body and axis; broadcast), got shape {weight.shape}") from None
  for name, value in (("rot_weight", rot_weight), ("ctrl_weight", ctrl_weight),
                      ("pos_threshold", pos_threshold), ("rot_threshold", rot_threshold)):
    v.number(name, value, low=0.0)
  loose_root = v.flag("loose_root", loose_root)
  if np.any(weight < 0):
    raise ValueError(f"pos_weight must be >= 0, got {v.shown(pos_weight)}")
  if sim.nu != sim.model.nq - 7:
    raise ValueError(f"the model must have one actuator per hinge after a free root (nu "
                     f"{sim.nu}, nq {sim.model.nq})")
  ref_pos, ref_quat = jnp.asarray(ref_pos), jnp.asarray(ref_quat)
  ctrl_ref = jnp.asarray(ref_qpos[:, 7:])
  scale = np.concatenate([np.sqrt(weight), np.full((count, 3), np.sqrt(rot_weight))], axis=1)

  def residual(x, u, obs, t):
    del x
    i = jnp.minimum(t, frames - 1)
    e = pose_errors(obs["xpos"][ids], obs["xquat"][ids], ref_pos[i], ref_quat[i],
                    loose_root) * scale
    return jnp.concatenate([e[:, :3].ravel(), e[:, 3:].ravel(),
                            u - ctrl_ref[jnp.minimum(t + 1, frames - 1)]])

  # Each body's weighted squared error up to its threshold's, then linear: huber norms of the
  # scaled residual (x2: huber is |r|^2 / 2 near zero).
  knee = np.sqrt(weight.max(axis=1)) * pos_threshold
  terms = [control.Term(3, 2.0, "huber", float(k)) for k in knee]
  terms += [control.Term(3, 2.0, "huber", float(np.sqrt(rot_weight) * rot_threshold))] * count
  terms.append(control.Term(sim.nu, 2 * ctrl_weight * np.r_[np.ones(frames), 0.0]))
  return control.Cost(residual, tuple(terms), observe=("xpos", "xquat"))


__all__ = ["pose_errors", "tracking_cost"]
