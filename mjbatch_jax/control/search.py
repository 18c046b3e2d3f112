"""The cross-entropy method over a decision vector: restarts side by side, the record of means.

`cem_search` minimises (or maximises) an objective of D numbers, any D numbers: a design, the
knots of a program, targets of a push. Each iteration draws `num_samples` candidates about each
restart's mean (control.gaussian_samples: candidate 0 is the mean, or with keep_best the best so
far), calls the objective once on every restart's candidates together (one batch of rollouts),
and moves each restart's mean and spread to its elites' (control.cem_update). Sampling, the
objective and the update are one jitted function; the loop over iterations runs in Python, so
that a log can print as the search goes.
"""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as _core  # trace_state_clean: is any trace in progress?
from jax.core import Tracer

from mjbatch_jax import _validate as v
from mjbatch_jax.control import _plumbing as pl
from mjbatch_jax.control.sampling import _cem_update, _gaussian_samples


class CEMIteration(NamedTuple):
  """What cem_search's log receives after each iteration: numpy values, on the host.

  Attributes:
    iteration: which iteration just ran, from 0.
    values: (restarts, num_samples) the objective's values of the iteration's candidates.
    mean_value: the mean of the finite values (NaN if none is).
    best_values: (restarts,) each restart's best value so far.
    best_value: the best of best_values.
  """

  iteration: int
  values: np.ndarray
  mean_value: float
  best_values: np.ndarray
  best_value: float


class CEMSearchResult(NamedTuple):
  """What cem_search returns. A value that was never finite is +inf (-inf when maximising).

  Attributes:
    best: (D,) the best candidate of every restart and iteration (the start mean, clipped to the
      bounds, if no value was finite).
    best_value: its value.
    best_per_restart: (restarts, D) each restart's best candidate.
    best_value_per_restart: (restarts,) their values.
    means: (iterations + 1, restarts, D) the mean each iteration sampled about, then the mean
      the last update left: a record to choose from by another check.
    std: (restarts, D) the sampling spread the last update left.
    best_value_per_iteration: (iterations,) best_value as it stood after each iteration.
    mean_value_per_iteration: (iterations,) each iteration's mean of finite values over every
      restart's candidates (NaN if none was finite).
  """

  best: jax.Array
  best_value: jax.Array
  best_per_restart: jax.Array
  best_value_per_restart: jax.Array
  means: jax.Array
  std: jax.Array
  best_value_per_iteration: jax.Array
  mean_value_per_iteration: jax.Array


def cem_search(objective: Callable[[jax.Array, jax.Array], Any], mean: Any, std: Any, *,
               key: Any, iterations: int, num_samples: int, num_elites: int | None = None,
               restarts: int = 1, lower: Any = None, upper: Any = None, smoothing: float = 0.0,
               std_min: float = 1e-3, keep_best: bool = True, maximize: bool = False,
               log: Callable[[CEMIteration], Any] | None = None) -> CEMSearchResult:
  """Searches D numbers for the least (or greatest) value of objective by the cross-entropy method.

  `restarts` searches run side by side, each with its own key, mean, spread, elites and best so
  far, and every iteration calls the objective once on all of their candidates. A NaN or
  infinite value is the worst: never an elite while a finite value is among the elites' ranks,
  never the best; a restart none of whose candidates is finite keeps its mean and spread.

    target = jnp.array([0.5, -0.3])

    def objective(z, iteration):  # z (restarts * num_samples, 2) -> (restarts * num_samples,)
      return jnp.sum((z - target) ** 2, axis=-1)

    result = control.cem_search(objective, jnp.zeros(2), 1.0, key=jax.random.key(0),
                                iterations=30, num_samples=64, restarts=4, lower=-1, upper=1)
    result.best, result.best_value  # about [0.5, -0.3] and 0

  An objective that changes each iteration draws from the index, e.g. new randomised robots:
  mjbatch_jax.randomize(jax.random.fold_in(robot_key, iteration), params, ...). Call
  cem_search outside jit: it jits one iteration (sampling, objective, update; compiled once
  per call) and runs the iterations in Python; called inside a trace (jit, vmap, grad) it
  raises ValueError.

  Args:
    objective: a function (z, iteration) -> values: z (restarts * num_samples, D), restart r's
      candidates in rows r * num_samples to (r + 1) * num_samples; iteration a traced int32
      scalar counting from 0 (to draw per-iteration randomness, e.g. robots from
      jax.random.fold_in(key, iteration)); values (restarts * num_samples,). It is traced, not
      run, to check its shape, then traced inside the jitted iteration.
    mean: (D,) where every restart starts, or (restarts, D) one start each.
    std: the initial sampling spread, > 0: a number, (D,) or (restarts, D).
    key: one PRNG key, split into restarts keys (jax.random.split(key, restarts)), or restarts
      keys, shape (restarts,) (raw keys: (restarts, 2)): restart r is then the search with
      restarts=1 and key keys[r:r + 1].
    iterations: how many iterations, >= 0.
    num_samples: candidates per restart and iteration, >= 2.
    num_elites: the elites per restart, in [1, num_samples]; by default a tenth of num_samples,
      at least 2.
    restarts: searches side by side, >= 1.
    lower, upper: bounds of every candidate: a number or (D,); None or infinite: no bound.
    smoothing: weight of the old mean and spread in the update, in [0, 1).
    std_min: the floor of the spread, >= 0.
    keep_best: candidate 0 of each restart is its best so far instead of its mean (from the
      second iteration; at the first the best is the start mean), so its best is never lost
      and, where the objective is the same every iteration, never worsens.
    maximize: search for the greatest value instead of the least.
    log: None, or a function called after each iteration with a CEMIteration.

  Returns:
    A CEMSearchResult.
  """
  if not callable(objective):
    raise ValueError(f"objective must be a function (z, iteration) -> values, got "
                     f"{v.shown(objective)}")
  _on_the_host(mean=mean, std=std, lower=lower, upper=upper, key=key)
  restarts = v.integer("restarts", restarts, low=1)
  mean = v.array("mean", mean, finite=True)
  if mean.ndim == 1 and mean.shape[0] >= 1:
    mean = jnp.broadcast_to(mean, (restarts, mean.shape[0]))
  elif mean.ndim != 2 or mean.shape[0] != restarts or mean.shape[1] < 1:
    raise ValueError(f"mean must have shape (D,) or (restarts, D) = ({restarts}, D) with D >= 1, "
                     f"got {tuple(mean.shape)}")
  dim = mean.shape[1]
  std = _spread(std, mean)
  lower = _bound("lower", lower, dim, -jnp.inf, mean.dtype)
  upper = _bound("upper", upper, dim, jnp.inf, mean.dtype)
  pl.check_lower_upper(lower, upper)
  keys = _keys(key, restarts)
  iterations = v.integer("iterations", iterations, low=0)
  num_samples = v.integer("num_samples", num_samples, low=2)
  if num_elites is None:
    num_elites = max(2, num_samples // 10)
  num_elites = v.integer("num_elites", num_elites, low=1, high=num_samples)
  smoothing = v.number("smoothing", smoothing, low=0.0, high=1.0, high_open=True)
  std_min = v.number("std_min", std_min, low=0.0)
  keep_best = v.flag("keep_best", keep_best)
  maximize = v.flag("maximize", maximize)
  if log is not None and not callable(log):
    raise ValueError(f"log must be None or a function of a CEMIteration, got {v.shown(log)}")
  value_dtype = _check_objective(objective, restarts * num_samples, dim, mean.dtype)

  sign = -1.0 if maximize else 1.0  # the search minimises sign * value

  def draw(key, mean, std, best):
    key, sub = jax.random.split(key)
    z = _gaussian_samples(sub, mean, std, num_samples, lower, upper)
    return key, (z.at[0].set(best) if keep_best else z)

  @jax.jit
  def iteration(keys, mean, std, best, best_cost, index):
    keys, z = jax.vmap(draw)(keys, mean, std, best)
    values = jnp.asarray(objective(z.reshape(restarts * num_samples, dim), index))
    values = values.astype(value_dtype).reshape(restarts, num_samples)
    costs = -values if maximize else values
    costs = jnp.where(jnp.isfinite(costs), costs, jnp.inf)
    update = jax.vmap(functools.partial(_update, num_elites=num_elites, smoothing=smoothing,
                                        std_min=std_min))
    mean, std, best, best_cost = update(mean, std, best, best_cost, z, costs)
    finite = jnp.isfinite(values)
    finite_mean = (jnp.sum(jnp.where(finite, values, 0.0))
                   / jnp.maximum(jnp.sum(finite), 1)).astype(values.dtype)
    # The plain mean when every value is finite: the same number as values.mean() bit for bit.
    mean_value = jnp.where(finite.all(), values.mean(),
                           jnp.where(finite.any(), finite_mean, jnp.nan))
    return (keys, mean, std, best, best_cost, values, mean_value, sign * best_cost,
            sign * jnp.min(best_cost))

  best = jnp.clip(mean, lower, upper)
  best_cost = jnp.full((restarts,), jnp.inf, value_dtype)
  means, bests, averages = [mean], [], []
  for i in range(iterations):
    keys, mean, std, best, best_cost, values, mean_value, best_values, best_value = iteration(
      keys, mean, std, best, best_cost, jnp.asarray(i, jnp.int32))
    means.append(mean)
    bests.append(best_value)
    averages.append(mean_value)
    if log is not None:
      log(CEMIteration(i, np.asarray(values), float(mean_value), np.asarray(best_values),
                       float(best_value)))
  winner = jnp.argmin(best_cost)
  empty = jnp.zeros((0,), value_dtype)
  return CEMSearchResult(
    best=best[winner], best_value=sign * best_cost[winner], best_per_restart=best,
    best_value_per_restart=sign * best_cost, means=jnp.stack(means), std=std,
    best_value_per_iteration=jnp.stack(bests) if bests else empty,
    mean_value_per_iteration=jnp.stack(averages) if averages else empty)


def _update(mean, std, best, best_cost, z, costs, num_elites, smoothing, std_min):
  """One restart's CEM step on costs (infinite where the value was not finite) and its best."""
  new_mean, new_std = _cem_update(mean, std, z, costs, num_elites, smoothing, std_min)
  # cem_update takes infinite costs among the elites when too few are finite; here the elites
  # are the finite ones of its ranks (the same numbers whenever all of them are finite).
  _, top = jax.lax.top_k(-costs, num_elites)
  elites, finite = z[top], jnp.isfinite(costs[top])[:, None]
  count = jnp.maximum(jnp.sum(finite), 1)
  elite_mean = jnp.sum(jnp.where(finite, elites, 0.0), axis=0) / count
  elite_std = jnp.sqrt(jnp.sum(jnp.where(finite, (elites - elite_mean) ** 2, 0.0), axis=0) / count)
  masked_mean = smoothing * mean + (1 - smoothing) * elite_mean
  masked_std = jnp.maximum(smoothing * std + (1 - smoothing) * elite_std, std_min)
  some = finite.any() & ~finite.all()
  new_mean = jnp.where(some, masked_mean, new_mean)
  new_std = jnp.where(some, masked_std, new_std)
  top = jnp.argmin(costs)
  better = costs[top] < best_cost
  return new_mean, new_std, jnp.where(better, z[top], best), jnp.where(better, costs[top],
                                                                       best_cost)


def _check_objective(objective: Callable, rows: int, dim: int, dtype: Any) -> Any:
  """The dtype the search keeps objective's values in (integers become the candidates'): it
  must give (rows,) real numbers for z (rows, dim) and an iteration; traced, not run."""
  z = jax.ShapeDtypeStruct((rows, dim), dtype)
  index = jax.ShapeDtypeStruct((), jnp.int32)
  try:
    out = jax.eval_shape(objective, z, index)
  except Exception as e:
    raise ValueError(f"objective(z {z.shape}, iteration) failed: {type(e).__name__}: {e}") from e
  shape, kind = getattr(out, "shape", None), np.dtype(getattr(out, "dtype", object)).kind
  if shape != (rows,) or kind not in "iuf":
    got = (f"shape {tuple(shape)} of dtype {out.dtype}" if shape is not None
           else type(out).__name__)
    raise ValueError(f"objective must return (restarts * num_samples,) = ({rows},) real numbers "
                     f"for z of shape {z.shape}, got {got}")
  return out.dtype if kind == "f" else dtype


def _on_the_host(**arrays: Any) -> None:
  """ValueError if cem_search is being traced (inside jax.jit, vmap, grad), naming a traced
  argument: its loop over iterations is Python, on the host, so it must be called outside."""
  why = ("cem_search runs on the host (its loop over iterations is Python, each iteration jitted "
         "by itself) and must be called outside jax.jit, vmap and grad")
  for name, value in arrays.items():
    traced = [x for x in jax.tree_util.tree_leaves(value) if isinstance(x, Tracer)]
    if traced:
      raise ValueError(f"{name} must be concrete, got {v.shown(traced[0])}: {why}")
  if not _core.trace_state_clean():
    raise ValueError(f"cem_search was called inside a traced function: {why}")


def _spread(std: Any, mean: jax.Array) -> jax.Array:
  """std as (restarts, D) of mean's dtype: every entry finite and > 0."""
  std = v.array("std", std, finite=True)
  restarts, dim = mean.shape
  if std.shape not in ((), (dim,), (restarts, dim)):
    raise ValueError(f"std must be a number, (D,) = ({dim},) or (restarts, D) = ({restarts}, "
                     f"{dim}), got shape {tuple(std.shape)}")
  if pl.is_concrete(std) and np.any(np.asarray(std) <= 0):
    raise ValueError(f"std must be > 0, got {v.shown(std)}")
  return jnp.broadcast_to(std.astype(mean.dtype), mean.shape)


def _bound(name: str, bound: Any, dim: int, absent: float, dtype: Any) -> jax.Array:
  """A bound as (D,) of the candidates' dtype: None is no bound (infinite); NaN refused."""
  if bound is None:
    return jnp.full((dim,), absent, dtype)
  return v.vector(name, bound, dim, finite=True, allow_inf=True).astype(dtype)


def _keys(key: Any, restarts: int) -> jax.Array:
  """restarts PRNG keys: one key split, or restarts keys as given."""
  try:
    return jax.random.split(v.key("key", key), restarts)
  except ValueError:
    pass
  try:
    keys = v.key("key", key, batched=True)
  except ValueError:
    raise ValueError(f"key must be one PRNG key or restarts = {restarts} of them (shape "
                     f"({restarts},), raw keys ({restarts}, 2)), got {v.shown(key)}") from None
  if keys.shape[0] != restarts:
    raise ValueError(f"key must be one PRNG key or restarts = {restarts} of them, got "
                     f"{keys.shape[0]} keys")
  return keys
