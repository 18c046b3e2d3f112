"""Costs in residual form, as MuJoCo MPC writes them: weighted norms of blocks of a residual.

A task writes one function, `residual(state, ctrl, obs, t) -> (nr,)`, for one knot t of a plan:
the state row x_t (t = 0 .. T), the control u_t applied from it (the last control again at
t = T), the mjData fields named in `observe` as mj_forward computes them at x_t, and t itself (an
int32 scalar, for time-varying references). The residual is cut into terms, consecutive blocks
of `size` entries, and the cost of a plan is

  sum over t = 0 .. T and terms i of  weight_i[t] * norm_i(residual(x_t, u_t, obs_t, t)[block i])

The planners take derivatives of the residual (Jacobians w.r.t. the state's tangent and the
control) and of the norms (gradient and Hessian w.r.t. the residual), which is the Gauss-Newton
model iLQR needs; the sampling planners only evaluate it.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

NORMS = ("quadratic", "huber", "l2", "smooth_abs")


class Term(NamedTuple):
  """A block of `size` consecutive residual entries, its weight and its norm.

  Norms of a block r with parameter p (MuJoCo MPC's names where it has them):
    "quadratic": |r|^2 / 2.
    "huber": |r|^2 / 2 while |r| <= p, then p (|r| - p / 2): quadratic near zero and linear
      beyond p, matched in value and slope, so one badly tracked block (a fall, a reach out of
      range) does not dominate the quadratic model. p > 0.
    "l2": sqrt(|r|^2 + p^2) - p (MJPC's kL2), smooth near zero for p > 0.
    "smooth_abs": sum_i sqrt(r_i^2 + p^2) - p (MJPC's kSmoothAbsLoss), per entry. p > 0.

  Attributes:
    size: how many residual entries the term covers.
    weight: a number, or (T + 1,) values, one per knot (the last is the final state's): a
      terminal weight, or a control term switched off at the final knot.
    norm: one of NORMS.
    param: the norm's parameter p.
  """

  size: int
  weight: Any = 1.0
  norm: str = "quadratic"
  param: float = 0.0


class Cost(NamedTuple):
  """A cost in residual form: see the module docstring.

  Attributes:
    residual: (state (nstate,), ctrl (nu,), obs {field: value}, t int32 scalar) -> (nr,), for one
      knot; pure JAX (it is vmapped over knots and candidates and differentiated w.r.t. state
      and ctrl).
    terms: Terms whose sizes add up to nr.
    observe: mjData fields the residual reads from obs ("xpos", "site_xpos", "sensordata", ...),
      computed by the physics calls the planners make anyway (`step`/`rollout` observe=).

  Example:
    cost = control.Cost(
      residual=lambda x, u, obs, t: jnp.concatenate([obs["site_xpos"][0] - target, u]),
      terms=(control.Term(3, weight=100.0, norm="huber", param=0.05), control.Term(nu, 0.01)),
      observe=("site_xpos",))
  """

  residual: Callable[[jax.Array, jax.Array, Mapping[str, jax.Array], jax.Array], jax.Array]
  terms: tuple[Term, ...]
  observe: tuple[str, ...] = ()


def _norm(name: str, r: jax.Array, p: float) -> jax.Array:
  """The norm of blocks r (..., size)."""
  if name == "quadratic":
    return 0.5 * jnp.sum(r * r, axis=-1)
  if name == "huber":
    squared = jnp.sum(r * r, axis=-1)
    above = squared > p * p
    # The unused branch's derivative must not be that of sqrt at 0 (NaN times 0 is NaN).
    length = jnp.sqrt(jnp.where(above, squared, p * p))
    return jnp.where(above, p * (length - 0.5 * p), 0.5 * squared)
  if name == "l2":
    return jnp.sqrt(jnp.sum(r * r, axis=-1) + p * p) - p
  if name == "smooth_abs":
    return jnp.sum(jnp.sqrt(r * r + p * p) - p, axis=-1)
  raise ValueError(f"norm must be one of {NORMS}, got {name!r}")


def check_terms(terms: Any) -> tuple[Term, ...]:
  """The terms as a tuple, each checked: size, norm and parameter."""
  if isinstance(terms, Term):
    terms = (terms,)
  if not isinstance(terms, Sequence) or not terms:
    raise ValueError(f"Cost.terms must be a non-empty sequence of control.Term, got {terms!r}")
  out = []
  for i, term in enumerate(terms):
    if not isinstance(term, Term):
      raise ValueError(f"Cost.terms[{i}] must be a control.Term, got {term!r}")
    size = term.size
    if not isinstance(size, int | np.integer) or isinstance(size, bool) or size < 1:
      raise ValueError(f"Cost.terms[{i}].size must be an int >= 1, got {size!r}")
    if term.norm not in NORMS:
      raise ValueError(f"Cost.terms[{i}].norm must be one of {NORMS}, got {term.norm!r}")
    p = term.param
    if not np.isfinite(p) or p < 0 or (term.norm in ("huber", "smooth_abs") and p <= 0):
      need = "> 0" if term.norm in ("huber", "smooth_abs") else ">= 0"
      raise ValueError(f"Cost.terms[{i}].param must be finite and {need} for the {term.norm!r} "
                       f"norm, got {p!r}")
    out.append(term)
  return tuple(out)


def weights(terms: tuple[Term, ...], horizon: int) -> jax.Array:
  """(T + 1, nterms) weight of each term at each knot."""
  columns = []
  for i, term in enumerate(terms):
    w = term.weight
    if isinstance(w, Tracer):
      w = jnp.asarray(w)
    else:
      w = np.asarray(w, dtype=np.float64)
      if w.shape not in ((), (horizon + 1,)):
        raise ValueError(f"Cost.terms[{i}].weight must be a number or one value per knot "
                         f"(shape ({horizon + 1},) for a horizon of {horizon}), got shape "
                         f"{w.shape}")
      if not np.all(np.isfinite(w)):
        raise ValueError(f"Cost.terms[{i}].weight must be finite, got {term.weight!r}")
    columns.append(jnp.broadcast_to(w, (horizon + 1,)))
  return jnp.stack(columns, axis=-1)


def knot_cost(terms: tuple[Term, ...], r: jax.Array, w: jax.Array) -> jax.Array:
  """Cost of residuals r (..., nr) with the terms' weights w (..., nterms) at their knots."""
  total, start = jnp.zeros(r.shape[:-1], r.dtype), 0
  for i, term in enumerate(terms):
    block = r[..., start : start + term.size]
    total = total + w[..., i] * _norm(term.norm, block, term.param)
    start += term.size
  return total


def static(cost: Cost) -> Cost:
  """The cost without its weights (they travel as an array): hashable, a jit static argument."""
  return cost._replace(terms=tuple(t._replace(weight=None) for t in cost.terms))


def residual_size(terms: tuple[Term, ...]) -> int:
  return sum(int(term.size) for term in terms)


def norm(name: str, r: Any, param: float = 0.0) -> jax.Array:
  """The norm `name` (see Term) of blocks r (..., size): for costs written by hand."""
  return _norm(name, jnp.asarray(r), param)


__all__ = ["NORMS", "Cost", "Term", "norm"]
