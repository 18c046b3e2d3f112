"""Quaternions and rotation vectors in JAX, with MuJoCo's conventions.

Quaternions are (..., 4) arrays, w first, as MuJoCo stores them (qpos of free and ball joints,
xquat, site frames). Rotation vectors are (..., 3): axis times angle. Every function works on any
leading dimensions, under jit, vmap and grad; the maps between the two forms keep exact, finite
derivatives at the zero rotation, so they can sit inside a cost or a residual.

  q = rotations.exp(jnp.array([0.0, 0.0, jnp.pi / 2]))   # a quarter turn about z
  v = rotations.rotate(q, jnp.array([1.0, 0.0, 0.0]))    # -> (0, 1, 0)
  err = rotations.difference(q_target, q)                 # rotation vector from q to q_target

Arguments are checked when a function is traced, on their shapes alone (a quaternion's last
dimension is 4, leading dimensions broadcast): inside a jitted cost the checks cost nothing when
it runs, and a wrong shape is a ValueError naming the argument, never JAX's clamped indexing
reading past the end.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer
from jax.typing import ArrayLike

from mjbatch_jax import _validate

# Below this squared norm of a rotation vector (or of a quaternion's vector part) the maps use
# their Taylor limits: the general formulas divide by the norm.
_TINY = 1e-24


def _checked(name: str, x: Any, shape: _validate.Shape) -> jax.Array:
  """x as a float array of the shape pattern given, checked on its shape only.

  An array of floats (traced or not, bfloat16 and float16 too, as JAX computes with them) is
  taken as it is: its shape is all there is to check, and looking at a JAX array's dtype through
  NumPy would copy it from the device. Anything else goes through _validate.array.
  """
  if isinstance(x, (jax.Array, np.ndarray)) and jnp.issubdtype(x.dtype, jnp.floating):
    if not _validate.matches(x.shape, shape):
      raise ValueError(f"{name} must have shape {_validate.pattern(shape)}, got {tuple(x.shape)}")
    return jnp.asarray(x)
  return _validate.array(name, x, shape)


def _numbers(name: str, x: Any) -> jax.Array:
  """x (a number or an array of them: a time step, an angle) as JAX computes with it.

  A Python or NumPy number must be finite (it costs nothing to look at); an array is checked on
  its kind only. The value keeps its own dtype, weak or not, so that it promotes as it did.
  """
  if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.number) \
      and not jnp.issubdtype(x.dtype, jnp.complexfloating):
    return x
  if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_)):
    if not math.isfinite(float(x)):
      raise ValueError(f"{name} must be a finite number, got {_validate.shown(x)}")
    return jnp.asarray(x)
  _validate.array(name, x)
  return jnp.asarray(x)


def _lead(*named: tuple[str, tuple[int, ...]]) -> tuple[int, ...]:
  """The broadcast of the leading shapes given by name; ValueError naming those that clash."""
  try:
    return tuple(np.broadcast_shapes(*(shape for _, shape in named)))
  except ValueError:
    pass
  for i, (first, a) in enumerate(named):
    for second, b in named[i + 1:]:
      try:
        np.broadcast_shapes(a, b)
      except ValueError:
        raise ValueError(f"the leading dimensions of {first} {a} and {second} {b} do not "
                         "broadcast against each other") from None
  raise ValueError("the leading dimensions of "
                   + ", ".join(f"{name} {shape}" for name, shape in named)
                   + " do not broadcast against each other")


def multiply(a: ArrayLike, b: ArrayLike) -> jax.Array:
  """The Hamilton product a b of (..., 4) quaternions, as mju_mulQuat."""
  a, b = _checked("a", a, (..., 4)), _checked("b", b, (..., 4))
  _lead(("a", a.shape[:-1]), ("b", b.shape[:-1]))
  aw, ax, ay, az = (a[..., i] for i in range(4))
  bw, bx, by, bz = (b[..., i] for i in range(4))
  return jnp.stack(
    [
      aw * bw - ax * bx - ay * by - az * bz,
      aw * bx + ax * bw + ay * bz - az * by,
      aw * by - ax * bz + ay * bw + az * bx,
      aw * bz + ax * by - ay * bx + az * bw,
    ],
    axis=-1,
  )


def conjugate(q: ArrayLike) -> jax.Array:
  """The conjugate of quaternions (the inverse of a unit quaternion), as mju_negQuat.

  Args:
    q: (..., 4) quaternions, w first.

  Returns:
    (..., 4) quaternions (w, -x, -y, -z), in q's dtype.

  Raises:
    ValueError: q's last dimension is not 4.

  Example:
    q_inv = rotations.conjugate(q)   # rotations.multiply(q, q_inv) is (1, 0, 0, 0)
  """
  q = _checked("q", q, (..., 4))
  return q * jnp.array([1.0, -1.0, -1.0, -1.0], q.dtype)


def rotate(q: ArrayLike, v: ArrayLike) -> jax.Array:
  """(..., 3) vectors v rotated by the unit quaternions q (frame to world), as mju_rotVecQuat."""
  q, v = _checked("q", q, (..., 4)), _checked("v", v, (..., 3))
  _lead(("q", q.shape[:-1]), ("v", v.shape[:-1]))
  w, u = q[..., :1], q[..., 1:]
  t = 2 * jnp.cross(u, v)
  return v + w * t + jnp.cross(u, t)


def rotate_inverse(q: ArrayLike, v: ArrayLike) -> jax.Array:
  """(..., 3) world vectors v in the frame of the unit quaternions q (the inverse rotation)."""
  q, v = _checked("q", q, (..., 4)), _checked("v", v, (..., 3))
  _lead(("q", q.shape[:-1]), ("v", v.shape[:-1]))
  return rotate(conjugate(q), v)


def exp(v: ArrayLike) -> jax.Array:
  """(..., 3) rotation vectors -> (..., 4) unit quaternions (the exponential map).

  Exact at and near the zero rotation (its Taylor limit there), so its derivative is finite.

  Args:
    v: (..., 3) rotation vectors: the axis times the angle, in radians.

  Returns:
    (..., 4) unit quaternions, w first.

  Raises:
    ValueError: v's last dimension is not 3.

  Example:
    q = rotations.exp(jnp.array([0.0, 0.0, jnp.pi / 2]))   # a quarter turn about z
  """
  v = _checked("v", v, (..., 3))
  n2 = jnp.sum(v * v, axis=-1, keepdims=True)
  small = n2 < _TINY
  n = jnp.sqrt(jnp.where(small, 1.0, n2))
  sin_over_n = jnp.where(small, 0.5, jnp.sin(0.5 * n) / n)
  return jnp.concatenate([jnp.where(small, 1.0, jnp.cos(0.5 * n)), sin_over_n * v], axis=-1)


def log(q: ArrayLike) -> jax.Array:
  """(..., 4) unit quaternions -> (..., 3) rotation vectors of angle in [0, pi] (the log map).

  q and -q are the same rotation and give the same vector.
  """
  q = _checked("q", q, (..., 4))
  q = jnp.where(q[..., :1] < 0, -q, q)
  w, u = q[..., 0], q[..., 1:]
  n2 = jnp.sum(u * u, axis=-1)
  small = n2 < _TINY
  n = jnp.sqrt(jnp.where(small, 1.0, n2))
  # 2 / w is the limit at zero rotation: its derivative there is exact, not NaN.
  scale = jnp.where(small, 2.0 / w, 2.0 * jnp.arctan2(n, w) / n)
  return scale[..., None] * u


def from_axis_angle(axis: ArrayLike, angle: ArrayLike) -> jax.Array:
  """Unit quaternions of rotations by angle (...,) about axis (..., 3) (normalised here)."""
  axis, angle = _checked("axis", axis, (..., 3)), _numbers("angle", angle)
  _lead(("axis", axis.shape[:-1]), ("angle", angle.shape))
  norm = jnp.linalg.norm(axis, axis=-1, keepdims=True)
  if not isinstance(norm, Tracer) and np.any(np.asarray(norm) == 0):
    # A zero axis names no rotation; where it is traced the quaternion is NaN.
    raise ValueError(f"axis must not be zero, got {_validate.shown(axis)}")
  axis = axis / norm
  return exp(axis * angle[..., None])


def integrate(q: ArrayLike, omega: ArrayLike, dt: ArrayLike = 1.0) -> jax.Array:
  """q turned by the body-frame angular velocity omega for dt, as mju_quatIntegrate.

  q exp(omega dt), normalised as MuJoCo normalises it.
  """
  q, omega, dt = _checked("q", q, (..., 4)), _checked("omega", omega, (..., 3)), _numbers("dt", dt)
  _lead(("q", q.shape[:-1]), ("omega", omega.shape[:-1]), ("dt", dt.shape))
  out = multiply(q, exp(omega * dt[..., None]))
  return out / jnp.linalg.norm(out, axis=-1, keepdims=True)


def difference(qa: ArrayLike, qb: ArrayLike) -> jax.Array:
  """The rotation vector in qb's frame that turns qb into qa: log(qb^-1 qa), as mju_subQuat."""
  qa, qb = _checked("qa", qa, (..., 4)), _checked("qb", qb, (..., 4))
  _lead(("qa", qa.shape[:-1]), ("qb", qb.shape[:-1]))
  return log(multiply(conjugate(qb), qa))


def to_matrix(q: ArrayLike) -> jax.Array:
  """(..., 3, 3) rotation matrices of unit quaternions (..., 4), as mju_quat2Mat.

  Args:
    q: (..., 4) unit quaternions, w first (not normalised here).

  Returns:
    (..., 3, 3) matrices whose columns are the frame's axes in world coordinates (the layout
    of MuJoCo's xmat, reshaped to 3 x 3).

  Raises:
    ValueError: q's last dimension is not 4.

  Example:
    R = rotations.to_matrix(q)   # R @ v is rotations.rotate(q, v)
  """
  q = _checked("q", q, (..., 4))
  w, x, y, z = (q[..., i] for i in range(4))
  rows = [
    [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
    [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
    [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
  ]
  return jnp.stack([jnp.stack(row, axis=-1) for row in rows], axis=-2)


def from_matrix(mat: ArrayLike) -> jax.Array:
  """(..., 4) unit quaternions (w >= 0) of rotation matrices (..., 3, 3), as mju_mat2Quat.

  Each row takes the best-conditioned of the four standard formulas for its matrix.

  Args:
    mat: (..., 3, 3) rotation matrices (MuJoCo's xmat or site_xmat reshaped to 3 x 3).

  Returns:
    (..., 4) unit quaternions, w first and w >= 0 (normalised).

  Raises:
    ValueError: mat's last two dimensions are not (3, 3).

  Example:
    q = rotations.from_matrix(site_xmat.reshape(-1, 3, 3))
  """
  m = _checked("mat", mat, (..., 3, 3))
  m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
  trace = m00 + m11 + m22
  candidates = jnp.stack(
    [
      jnp.stack([1 + trace, m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0],
                 m[..., 1, 0] - m[..., 0, 1]], axis=-1),
      jnp.stack([m[..., 2, 1] - m[..., 1, 2], 1 + m00 - m11 - m22, m[..., 0, 1] + m[..., 1, 0],
                 m[..., 0, 2] + m[..., 2, 0]], axis=-1),
      jnp.stack([m[..., 0, 2] - m[..., 2, 0], m[..., 0, 1] + m[..., 1, 0], 1 - m00 + m11 - m22,
                 m[..., 1, 2] + m[..., 2, 1]], axis=-1),
      jnp.stack([m[..., 1, 0] - m[..., 0, 1], m[..., 0, 2] + m[..., 2, 0],
                 m[..., 1, 2] + m[..., 2, 1], 1 - m00 - m11 + m22], axis=-1),
    ],
    axis=-2,
  )
  # Candidate k has 4 q_k^2 in its own slot: the largest is the best conditioned.
  pivots = jnp.stack([1 + trace, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22],
                     axis=-1)
  best = jnp.argmax(pivots, axis=-1)
  q = jnp.take_along_axis(candidates, best[..., None, None], axis=-2)[..., 0, :]
  q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
  return jnp.where(q[..., :1] < 0, -q, q)


__all__ = [
  "conjugate",
  "difference",
  "exp",
  "from_axis_angle",
  "from_matrix",
  "integrate",
  "log",
  "multiply",
  "rotate",
  "rotate_inverse",
  "to_matrix",
]
