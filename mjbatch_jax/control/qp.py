"""The box QP of the library: min 1/2 d'H d + g'd over lower <= d <= upper, by projected Newton.

iLQR's backward pass solves one at every knot (the control box), and a bound-constrained
Gauss-Newton step (system identification's parameter bounds) is one too. `box_qp` checks its
arguments; `_box_qp` is the same solve on checked ones, for callers inside a trace that checked
them once.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax.control import _plumbing as pl


def box_qp(h: Any, g: Any, h_xu: Any, lower: Any, upper: Any, iterations: int
           ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """min 1/2 d'H d + g'd over lower <= d <= upper by projected Newton; and the feedback gain.

  As MuJoCo MPC's boxQP (Tassa et al. 2014): from the projection of the unconstrained solution,
  Newton steps on the free entries (those not at a bound that the gradient pushes against),
  each with a projected backtracking line search. The gain is -H_ff^-1 h_xu on the free rows, 0
  on the clamped.

  Args:
    h: (m, m), symmetric.
    g: (m,).
    h_xu: (m, n).
    lower, upper: (m,) or numbers, lower <= upper (infinite: no bound).
    iterations: most Newton iterations, an int >= 0 (static).

  Returns:
    d (m,), gain (m, n) and whether h is positive definite.
  """
  g = v.array("g", g, shape=(None,))
  m = g.shape[0]
  h = v.array("h", h)
  if h.shape != (m, m):
    raise ValueError(f"h must have shape ({m}, {m}) to match g of shape ({m},), got {h.shape}")
  h_xu = v.array("h_xu", h_xu, shape=(m, None))
  lower = v.vector("lower", lower, m, finite=True, allow_inf=True)
  upper = v.vector("upper", upper, m, finite=True, allow_inf=True)
  if pl.is_concrete(lower, upper) and np.any(np.asarray(lower) > np.asarray(upper)):
    raise ValueError(f"lower must be <= upper, got {v.shown(lower)} and {v.shown(upper)}")
  iterations = v.integer("iterations", iterations, low=0)
  return _box_qp(h, g, h_xu, lower, upper, iterations)


def _box_qp(h: jax.Array, g: jax.Array, h_xu: jax.Array, lower: jax.Array, upper: jax.Array,
            iterations: int) -> tuple[jax.Array, jax.Array, jax.Array]:
  """box_qp on checked arguments (the backward pass's, at every knot)."""
  m = g.shape[0]
  eye = jnp.eye(m, dtype=h.dtype)
  pd = _positive_definite(h)
  h_inv = jnp.linalg.inv(h)
  backtrack = 0.5 ** jnp.arange(8, dtype=h.dtype)

  def value(d: jax.Array) -> jax.Array:
    return 0.5 * jnp.einsum("...i,ij,...j->...", d, h, d) + d @ g

  def free_set(d: jax.Array, grad: jax.Array) -> jax.Array:
    return ~(((d <= lower) & (grad > 0)) | ((d >= upper) & (grad < 0)))

  def masked_inverse(free: jax.Array) -> jax.Array:
    both = free[:, None] & free[None, :]
    return jnp.linalg.inv(jnp.where(both, h, eye))

  def newton(carry):
    d, i, _ = carry
    grad = g + h @ d
    free = free_set(d, grad)
    step = -(masked_inverse(free) @ jnp.where(free, grad, 0.0)) * free
    trial = jnp.clip(d + backtrack[:, None] * step, lower, upper)
    gain = value(d) - value(trial)
    # Armijo on the projected step: a tenth of the decrease its slope promises.
    good = gain >= 0.1 * -((trial - d) @ grad)
    good = good & (gain > 0)
    pick = jnp.argmax(good)
    d = jnp.where(good[pick], trial[pick], d)
    return d, i + 1, ~good[pick]

  def more(carry) -> jax.Array:
    _, i, stalled = carry
    return (i < iterations) & ~stalled

  d0 = jnp.clip(-h_inv @ g, lower, upper)
  d, _, _ = jax.lax.while_loop(more, newton, (d0, jnp.asarray(0), jnp.asarray(False)))
  free = free_set(d, g + h @ d)
  gain = -(masked_inverse(free) @ h_xu) * free[:, None]
  return d, gain, pd


def _positive_definite(h: jax.Array) -> jax.Array:
  """Whether symmetric h is positive definite: a Cholesky factorisation in plain JAX ops.

  A fori_loop of JAX ops rather than jnp.linalg.cholesky, whose LAPACK call (potrf) and its
  threads cost far more than the factorisation of a matrix this small (docs/control.md).
  """
  m = h.shape[0]
  index = jnp.arange(m)

  def column(j, carry):
    low, ok = carry
    row = jnp.where(index < j, low[j], 0.0)
    pivot = h[j, j] - row @ row
    ok = ok & (pivot > 0)
    root = jnp.sqrt(jnp.where(pivot > 0, pivot, 1.0))
    col = (h[:, j] - low @ row) / root
    col = jnp.where(index > j, col, 0.0).at[j].set(root)
    return low.at[:, j].set(col), ok

  _, ok = jax.lax.fori_loop(0, m, column, (jnp.zeros_like(h), jnp.asarray(True)))
  return ok


__all__ = ["box_qp"]
