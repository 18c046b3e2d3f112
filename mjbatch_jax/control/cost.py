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

from mjbatch_jax import _validate as v

NORMS = ("quadratic", "huber", "l2", "smooth_abs")
"""The norms a Term may take for its block of the residual (Term says what each computes and
which parameter it needs)."""


class Term(NamedTuple):
  """A block of `size` consecutive residual entries, its weight and its norm.

  Norms of a block r with parameter p (MuJoCo MPC's names where it has them):
    "quadratic": |r|^2 / 2 (p unused, >= 0).
    "huber": |r|^2 / 2 while |r| <= p, then p (|r| - p / 2): quadratic near zero and linear
      beyond p, matched in value and slope, so one badly tracked block (a fall, a reach out of
      range) does not dominate the quadratic model. p > 0 (at p = 0 it would be 0 for every r).
    "l2": sqrt(|r|^2 + p^2) - p (MJPC's kL2), smooth near zero for p > 0; |r| at p = 0.
    "smooth_abs": sum_i sqrt(r_i^2 + p^2) - p (MJPC's kSmoothAbsLoss), per entry. p > 0.
  A parameter out of its norm's range, a NaN or an infinite one is refused (ValueError) where
  the terms are checked (control.ilqr, control.sampling, control.norm).

  Attributes:
    size: how many residual entries the term covers.
    weight: a number >= 0, or (T + 1,) such values, one per knot (the last is the final
      state's): a terminal weight, or a control term switched off at the final knot.
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


def check_param(name: str, value: Any, norm_name: str) -> Any:
  """The parameter of norm norm_name as a Python float (a traced one by its shape only)."""
  if isinstance(value, Tracer):
    return v.array(name, value, shape=())
  positive = norm_name in ("huber", "smooth_abs")
  try:
    return v.number(name, value, low=0.0, low_open=positive)
  except ValueError:
    need = "> 0" if positive else ">= 0"
    raise ValueError(f"{name} must be finite and {need} for the {norm_name!r} norm, got "
                     f"{v.shown(value)}") from None


def check_terms(terms: Any) -> tuple[Term, ...]:
  """The terms as a tuple, each checked: size, norm and parameter (weights: see weights)."""
  if isinstance(terms, Term):
    terms = (terms,)
  if not isinstance(terms, Sequence) or isinstance(terms, str) or not terms:
    raise ValueError("Cost.terms must be a non-empty sequence of control.Term, got "
                     f"{v.shown(terms)}")
  out = []
  for i, term in enumerate(terms):
    if not isinstance(term, Term):
      raise ValueError(f"Cost.terms[{i}] must be a control.Term, got {v.shown(term)}")
    size = v.integer(f"Cost.terms[{i}].size", term.size, low=1)
    name = v.one_of(f"Cost.terms[{i}].norm", term.norm, NORMS)
    v.static(f"Cost.terms[{i}].param", term.param)  # the cost is a static argument of jit
    param = check_param(f"Cost.terms[{i}].param", term.param, name)
    out.append(term._replace(size=size, param=param))
  return tuple(out)


def weights(terms: tuple[Term, ...], horizon: int) -> jax.Array:
  """(T + 1, nterms) weight of each term at each knot: numbers >= 0 (a traced weight is checked
  by its shape only)."""
  columns = []
  for i, term in enumerate(terms):
    name = f"Cost.terms[{i}].weight"
    w = v.array(name, term.weight)
    if not isinstance(term.weight, Tracer):
      # float64 as given (not JAX's weak type of a Python number), so the costs keep their dtype.
      w = np.asarray(term.weight, dtype=np.float64)
    if w.shape not in ((), (horizon + 1,)):
      raise ValueError(f"{name} must be a number or one value per knot (shape ({horizon + 1},) "
                       f"for a horizon of {horizon}), got shape {w.shape}")
    if isinstance(w, np.ndarray) and not np.all(np.isfinite(w) & (w >= 0)):
      raise ValueError(f"{name} must be finite and >= 0, got {v.shown(term.weight)}")
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
  """The norm `name` (see Term) of blocks r (..., size): for costs written by hand.

  param is the norm's p: > 0 for "huber" and "smooth_abs" (so it has no default there), >= 0
  for the others; a traced param is checked by its shape only.
  """
  name = v.one_of("name", name, NORMS)
  r = v.array("r", r, shape=(..., None))
  return _norm(name, r, check_param("param", param, name))


__all__ = ["NORMS", "Cost", "Term", "norm"]
