"""Sampling planners over `rollout`: predictive sampling, MPPI and the cross-entropy method.

A plan is P knots of controls (see control.splines); each iteration draws K candidate plans
around it (candidate 0 is the plan itself), rolls all K out in one `rollout` call (their costs
from the same call's observations), and moves the plan:

- "predictive": to the cheapest candidate (MuJoCo MPC's predictive sampling): never worse,
  since the plan itself is a candidate.
- "mppi": to the candidates' average weighted by exp(-(cost - min cost) / temperature).
- "cem": to the mean of the num_elites cheapest (smoothed), and the sampling spread to their
  spread (floored at std_min): the cross-entropy method.

A candidate that diverges (MuJoCo reset it: bad qpos, qvel, qacc or ctrl) or whose cost is NaN
costs infinity and the planning step goes on without it. The pure parts (`gaussian_samples`,
`cem_update`, `mppi_update`) work on any vectors, for searches that are not plans.
"""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mjbatch_jax import functions as fn
from mjbatch_jax.control import _plumbing as pl
from mjbatch_jax.control import cost as cost_lib
from mjbatch_jax.control import splines
from mjbatch_jax.params import Params

METHODS = ("predictive", "mppi", "cem")


# -- the updates, on any vectors ----------------------------------------------------------------


def gaussian_samples(key: jax.Array, mean: jax.Array, std: jax.Array, num: int,
                     lower: Any = -jnp.inf, upper: Any = jnp.inf) -> jax.Array:
  """(num, *mean.shape) draws mean + std * N(0, 1) clipped to [lower, upper]; draw 0 is mean.

  Keeping the mean as a candidate makes a best-of update never worse than the mean.
  """
  noise = jax.random.normal(key, (num, *mean.shape), mean.dtype)
  draws = jnp.clip(mean + std * noise.at[0].set(0.0), lower, upper)
  return draws.at[0].set(jnp.clip(mean, lower, upper))


def cem_update(mean: jax.Array, std: jax.Array, samples: jax.Array, costs: jax.Array,
               num_elites: int, smoothing: float = 0.0, std_min: float = 0.0
               ) -> tuple[jax.Array, jax.Array]:
  """The cross-entropy step: mean and std moved to the num_elites cheapest samples'.

  new = smoothing * old + (1 - smoothing) * elites' statistic; std floored at std_min.
  samples (K, ...) with costs (K,); infinite costs never become elites while finite ones remain.
  """
  _, top = jax.lax.top_k(-costs, num_elites)
  elites = samples[top]
  new_mean = smoothing * mean + (1 - smoothing) * elites.mean(axis=0)
  new_std = smoothing * std + (1 - smoothing) * elites.std(axis=0)
  return new_mean, jnp.maximum(new_std, std_min)


def mppi_update(samples: jax.Array, costs: jax.Array, temperature: float) -> jax.Array:
  """The MPPI average of samples (K, ...) weighted by exp(-(cost - min) / temperature).

  Infinite costs weigh nothing; if no cost is finite, returns samples[0].
  """
  finite = jnp.isfinite(costs)
  best = jnp.min(jnp.where(finite, costs, jnp.inf))
  weights = jnp.where(finite, jnp.exp(-(costs - jnp.where(finite.any(), best, 0.0))
                                      / temperature), 0.0)
  total = jnp.sum(weights)
  average = jnp.tensordot(weights / jnp.where(total > 0, total, 1.0), samples, axes=1)
  return jnp.where(total > 0, average, samples[0])


# -- planners over plans ------------------------------------------------------------------------


class SamplingSettings(NamedTuple):
  """A sampling planner's options; static (hashable).

  Attributes:
    method: "predictive", "mppi" or "cem".
    num_samples: K candidates per iteration, the rows of one rollout call.
    num_knots: P knots of the plan (at most the horizon).
    interpolation: "zero", "linear" or "cubic" (control.splines).
    noise: the sampling spread of every knot as a fraction of half its control's range (MuJoCo
      MPC's convention; absolute for unlimited controls), or P such numbers: a schedule along
      the horizon.
    noise_decay: the spread of iteration i of one planning call is noise * noise_decay**i.
    iterations: iterations per planning call.
    num_elites: CEM's elite set.
    smoothing: CEM's weight of the old mean and spread.
    std_min: CEM's floor of the spread (same units as noise).
    temperature: MPPI's.
  """

  method: str = "predictive"
  num_samples: int = 256
  num_knots: int = 10
  interpolation: str = "linear"
  noise: float | tuple[float, ...] = 0.1
  noise_decay: float = 1.0
  iterations: int = 1
  num_elites: int = 16
  smoothing: float = 0.0
  std_min: float = 0.01
  temperature: float = 1.0


class SamplingPlan(NamedTuple):
  """A sampling planner's state: the knots (P, nu) and CEM's spread (P, nu)."""

  knots: jax.Array
  std: jax.Array


class SamplingInfo(NamedTuple):
  """What a planning call saw.

  Attributes:
    cost: the cheapest candidate's cost in the last iteration.
    nominal_cost: the incoming plan's cost (candidate 0 of the first iteration).
    mean_cost: the mean finite cost of the last iteration's candidates.
    failed: how many of the last iteration's candidates diverged or cost NaN.
  """

  cost: jax.Array
  nominal_cost: jax.Array
  mean_cost: jax.Array
  failed: jax.Array


class Planner(NamedTuple):
  """A planner as pure functions (optax-like); see sampling() and ilqr_planner().

  Attributes:
    init: (ctrls (T, nu) or None) -> plan state.
    update: (plan, state (nstate,), key, params=None) -> (plan, info): one planning call;
      params (optional) replaces the planner's for this call (K rows: per-candidate domain
      randomisation).
    controls: plan -> (T, nu) controls.
    shift: (plan, n) -> the plan n controls later (receding horizon).
    horizon, nstep: T and the physics steps per control.
  """

  init: Callable[..., Any]
  update: Callable[..., tuple[Any, Any]]
  controls: Callable[[Any], jax.Array]
  shift: Callable[[Any, int], Any]
  horizon: int
  nstep: int


def sampling(cost: cost_lib.Cost, params: Params, *, horizon: int, nstep: int = 1,
             settings: SamplingSettings | None = None, bounds: Any = None) -> Planner:
  """A sampling planner (predictive sampling, MPPI or CEM) of horizon T controls.

  Args:
    cost: a control.Cost.
    params: Params of one simulation (sim.params(1, ...)), or of num_samples (one per candidate:
      domain randomisation).
    horizon: T controls per plan.
    nstep: physics steps per control.
    settings: SamplingSettings (default: SamplingSettings()).
    bounds: (lower, upper) of the controls; default: the model's ctrlrange where limited.

  Returns:
    A Planner; its update is jitted, one rollout call of num_samples rows per iteration.

  Example:
    planner = control.sampling(cost, sim.params(1), horizon=25, nstep=4,
                               settings=control.SamplingSettings("cem", num_samples=1024))
    plan = planner.init()
    plan, info = planner.update(plan, state, key)
    first = planner.controls(plan)[0]
  """
  settings = _check_settings(SamplingSettings() if settings is None else settings, horizon)
  cost = pl.check_cost(cost)
  spec = pl.check_params_rows(params, (1, settings.num_samples))
  nstep = pl.check_count("nstep", nstep)
  lo, hi = pl.check_bounds(bounds, spec)
  pl.check_residual(cost, spec, jnp.result_type(float))
  w = cost_lib.weights(cost.terms, horizon)
  cost = cost_lib.static(cost)
  interp = jnp.asarray(splines.matrix(settings.num_knots, horizon, settings.interpolation))
  # The spread in control units: a fraction of half the range where it is finite.
  half = np.where(np.isfinite(np.asarray(hi - lo)), np.asarray(hi - lo) / 2, 1.0)
  noise = np.broadcast_to(np.asarray(settings.noise, np.float64)[..., None], (settings.num_knots,
                                                                              spec.nu))
  spread = jnp.asarray(noise * half)
  floor = jnp.asarray(settings.std_min * np.broadcast_to(half, spread.shape))

  def init(ctrls: Any = None) -> SamplingPlan:
    if ctrls is None:
      knots = jnp.broadcast_to(jnp.clip(0.0, lo, hi), (settings.num_knots, spec.nu))
    else:
      ctrls = pl.check_plan("ctrls", ctrls, spec.nu)
      if ctrls.shape[0] != horizon:
        raise ValueError(f"ctrls must have the horizon's {horizon} controls, got "
                         f"{ctrls.shape[0]}")
      # The knots whose interpolation is closest to the controls (least squares).
      knots = jnp.linalg.lstsq(interp, ctrls)[0]
    return SamplingPlan(jnp.asarray(knots, lo.dtype), spread.astype(lo.dtype))

  def update(plan: SamplingPlan, state: Any, key: Any, params_now: Params | None = None
             ) -> tuple[SamplingPlan, SamplingInfo]:
    state = pl.check_start(state, spec)
    p = params if params_now is None else params_now
    if params_now is not None:
      pl.check_params_rows(params_now, (1, settings.num_samples))
    return _update(cost, w, p, state, plan, key, lo, hi, interp, spread, floor, nstep, settings)

  def controls(plan: SamplingPlan) -> jax.Array:
    return jnp.clip(interp @ plan.knots, lo, hi)

  def shift(plan: SamplingPlan, n: int = 1) -> SamplingPlan:
    move = jnp.asarray(splines.shift_matrix(settings.num_knots, horizon, settings.interpolation,
                                            n))
    return SamplingPlan(move @ plan.knots, plan.std)

  return Planner(init, update, controls, shift, horizon, nstep)


def _check_settings(settings: Any, horizon: int) -> SamplingSettings:
  if not isinstance(settings, SamplingSettings):
    raise ValueError(f"settings must be control.SamplingSettings, got {type(settings).__name__}")
  if settings.method not in METHODS:
    raise ValueError(f"settings.method must be one of {METHODS}, got {settings.method!r}")
  splines.check(settings.num_knots, horizon, settings.interpolation)
  k = pl.check_count("settings.num_samples", settings.num_samples, low=2)
  pl.check_count("settings.iterations", settings.iterations)
  if settings.method == "cem" and not 1 <= settings.num_elites <= k:
    raise ValueError(f"settings.num_elites must be in [1, num_samples={k}], got "
                     f"{settings.num_elites}")
  noise = np.asarray(settings.noise, dtype=np.float64)
  if noise.shape not in ((), (settings.num_knots,)) or not np.all(np.isfinite(noise)) or np.any(
      noise < 0):
    raise ValueError(f"settings.noise must be a number >= 0 or num_knots={settings.num_knots} "
                     f"of them, got {settings.noise!r}")
  if not (settings.temperature > 0 and 0 <= settings.smoothing < 1 and settings.std_min >= 0
          and settings.noise_decay > 0):
    raise ValueError("settings need temperature > 0, 0 <= smoothing < 1, std_min >= 0 and "
                     f"noise_decay > 0, got {settings}")
  noise = settings.noise if noise.shape == () else tuple(float(v) for v in noise)
  return settings._replace(noise=noise)


@functools.partial(jax.jit, static_argnums=(0, 11, 12))
def _update(cost, w, params, start, plan, key, lo, hi, interp, spread, floor, nstep, settings):
  k = settings.num_samples
  p = pl.rows(params, k)
  starts = jnp.broadcast_to(start, (k, start.shape[-1]))
  # The start's fields, per candidate: its own params may change them (a randomised body_pos).
  obs0 = fn.forward(starts, p, cost.observe) if cost.observe else {}

  def evaluate(candidates):
    ctrls = jnp.clip(jnp.einsum("tp,kpu->ktu", interp, candidates), lo, hi)
    if cost.observe:
      states, _, obs, warnings = fn.rollout(starts, ctrls, p, nstep=nstep, observe=cost.observe,
                                            return_warnings=True)
      obs = {f: jnp.concatenate([obs0[f][:, None], v], axis=1) for f, v in obs.items()}
    else:
      states, _, warnings = fn.rollout(starts, ctrls, p, nstep=nstep, return_warnings=True)
      obs = {}
    states = jnp.concatenate([starts[:, None], states], axis=1)
    costs = pl.plan_costs(cost, w, states, ctrls, obs)
    return jnp.where(pl.diverged(warnings), jnp.inf, costs)

  def iteration(carry, inputs):
    knots, std = carry
    i, subkey = inputs
    scale = std if settings.method == "cem" else spread * settings.noise_decay**i
    candidates = gaussian_samples(subkey, knots, scale, k, lo, hi)
    costs = evaluate(candidates)
    if settings.method == "predictive":
      knots = candidates[jnp.argmin(costs)]
    elif settings.method == "mppi":
      knots = mppi_update(candidates, costs, settings.temperature)
    else:
      knots, std = cem_update(knots, std, candidates, costs, settings.num_elites,
                              settings.smoothing)
      std = jnp.maximum(std, floor)
    finite = jnp.isfinite(costs)
    info = SamplingInfo(jnp.min(costs), costs[0],
                        jnp.sum(jnp.where(finite, costs, 0.0)) / jnp.maximum(finite.sum(), 1),
                        jnp.sum(~finite))
    return (knots, std), info

  keys = jax.random.split(key, settings.iterations)
  (knots, std), infos = jax.lax.scan(iteration, (plan.knots, plan.std),
                                     (jnp.arange(settings.iterations), keys))
  info = SamplingInfo(infos.cost[-1], infos.nominal_cost[0], infos.mean_cost[-1],
                      infos.failed[-1])
  return SamplingPlan(knots, std), info


__all__ = ["METHODS", "Planner", "SamplingInfo", "SamplingPlan", "SamplingSettings",
           "cem_update", "gaussian_samples", "mppi_update", "sampling"]
