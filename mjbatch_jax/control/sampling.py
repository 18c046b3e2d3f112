"""Sampling planners over `rollout`: predictive sampling, MPPI and the cross-entropy method.

A plan is P knots of controls (see control.splines); each iteration draws K candidate plans
around it (candidate 0 is the plan itself), rolls all K out in one `rollout` call (their costs
from the same call's observations), and moves the plan:

- "predictive": to the cheapest candidate (MuJoCo MPC's predictive sampling): never worse,
  since the plan itself is a candidate.
- "mppi": to the candidates' average weighted by exp(-(cost - min cost) / temperature).
- "cem": to the mean of the num_elites cheapest (smoothed), and the sampling spread to their
  spread (floored at std_min): the cross-entropy method.

A candidate that fails (a MuJoCo error in its simulation, kept as its error code by the custom
call's partial results; or MuJoCo reset it: bad qpos, qvel, qacc or ctrl) or whose cost is NaN
costs infinity and the planning step goes on without it. The pure parts (`gaussian_samples`,
`cem_update`, `mppi_update`) work on any vectors, for searches that are not plans.
"""

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mjbatch_jax import _programs
from mjbatch_jax import _validate as v
from mjbatch_jax import functions as fn
from mjbatch_jax.control import _plumbing as pl
from mjbatch_jax.control import cost as cost_lib
from mjbatch_jax.control import splines
from mjbatch_jax.params import Params

METHODS = ("predictive", "mppi", "cem")
"""The sampling planners' methods, the keys of SETTINGS: predictive sampling, MPPI and the
cross-entropy method (the module's text says how each moves the plan)."""


# -- the updates, on any vectors ----------------------------------------------------------------


def gaussian_samples(key: Any, mean: Any, std: Any, num: int, lower: Any = -jnp.inf,
                     upper: Any = jnp.inf) -> jax.Array:
  """(num, *mean.shape) draws mean + std * N(0, 1) clipped to [lower, upper]; draw 0 is mean.

  Keeping the mean as a candidate makes a best-of update never worse than the mean.

  Args:
    key: a JAX PRNG key (jax.random.key or jax.random.PRNGKey) for the draws.
    mean: the centre of the draws, a finite array of any shape; the draws take its dtype.
    std: the spread, >= 0 and finite: a number or an array that broadcasts to mean's shape.
    num: how many draws, an int >= 1 (draw 0 is the mean itself, clipped).
    lower: the lower bound, broadcasting to mean's shape (default -inf: no bound).
    upper: the upper bound, broadcasting to mean's shape, >= lower (default inf: no bound).

  Returns:
    (num, *mean.shape) draws in mean's dtype.

  Raises:
    ValueError: key is not a PRNG key, mean or std is not finite, std < 0, num < 1, an array
      does not broadcast to mean's shape, or lower > upper somewhere.

  Example:
    candidates = control.gaussian_samples(key, mean, std=0.1, num=64, lower=-1.0, upper=1.0)
  """
  key = pl.check_key("key", key)
  mean = v.array("mean", mean, finite=True)
  std = _like_mean("std", std, mean.shape, finite=True, low=0.0)
  num = v.integer("num", num, low=1)
  lower = _like_mean("lower", lower, mean.shape, allow_inf=True)
  upper = _like_mean("upper", upper, mean.shape, allow_inf=True)
  if pl.is_concrete(lower, upper):
    pl.check_lower_upper(lower, upper)
  return _gaussian_samples(key, mean, std, num, lower, upper)


def _gaussian_samples(key, mean, std, num, lower, upper):
  noise = jax.random.normal(key, (num, *mean.shape), mean.dtype)
  draws = jnp.clip(mean + std * noise.at[0].set(0.0), lower, upper)
  return draws.at[0].set(jnp.clip(mean, lower, upper))


def cem_update(mean: Any, std: Any, samples: Any, costs: Any, num_elites: int,
               smoothing: float = 0.0, std_min: float = 0.0) -> tuple[jax.Array, jax.Array]:
  """The cross-entropy step: mean and std moved to the num_elites cheapest samples'.

  new = smoothing * old + (1 - smoothing) * elites' statistic; std floored at std_min.
  samples (K, *mean.shape) with costs (K,); std broadcasts to mean's shape; num_elites in
  [1, K]; smoothing in [0, 1); std_min >= 0. A NaN cost counts as infinite; infinite costs
  never become elites while finite ones remain, and if no cost is finite, mean and std come back
  unchanged (no candidate says where to go), as mppi_update and predictive sampling keep theirs.
  """
  mean = v.array("mean", mean, finite=True)
  std = _like_mean("std", std, mean.shape, finite=True, low=0.0)
  samples = v.array("samples", samples, shape=(None, *mean.shape), finite=True)
  costs = v.array("costs", costs, shape=(samples.shape[0],))
  num_elites = v.integer("num_elites", num_elites, low=1, high=samples.shape[0])
  smoothing = pl.check_scalar("smoothing", smoothing, low=0.0)
  if not isinstance(smoothing, jax.Array) and smoothing >= 1:
    raise ValueError(f"smoothing must be a finite number in [0, 1), got {smoothing}")
  std_min = pl.check_scalar("std_min", std_min, low=0.0)
  return _cem_update(mean, std, samples, costs, num_elites, smoothing, std_min)


def _cem_update(mean, std, samples, costs, num_elites, smoothing=0.0, std_min=0.0):
  costs = jnp.where(jnp.isnan(costs), jnp.inf, costs)
  _, top = jax.lax.top_k(-costs, num_elites)
  elites = samples[top]
  # Fewer finite costs than elites: the statistics of the finite ones alone (a failed candidate
  # says nothing of where to go). With every elite finite, the plain mean and std, so that the
  # numbers are those of the unweighted formula to the last bit.
  ok = jnp.isfinite(costs[top]).reshape((-1,) + (1,) * (elites.ndim - 1))
  share = ok / jnp.maximum(ok.sum(), 1)
  finite_mean = jnp.sum(share * elites, axis=0)
  finite_std = jnp.sqrt(jnp.sum(share * (elites - finite_mean) ** 2, axis=0))
  every = jnp.all(ok)
  elite_mean = jnp.where(every, elites.mean(axis=0), finite_mean)
  elite_std = jnp.where(every, elites.std(axis=0), finite_std)
  new_mean = smoothing * mean + (1 - smoothing) * elite_mean
  new_std = jnp.maximum(smoothing * std + (1 - smoothing) * elite_std, std_min)
  none = ~jnp.any(jnp.isfinite(costs))
  return jnp.where(none, mean, new_mean), jnp.where(none, std, new_std)


def mppi_update(samples: Any, costs: Any, temperature: float) -> jax.Array:
  """The MPPI average of samples (K, ...) weighted by exp(-(cost - min) / temperature).

  costs (K,); temperature > 0. Non-finite costs weigh nothing; if no cost is finite, returns
  samples[0].
  """
  samples = v.array("samples", samples, finite=True)
  if samples.ndim < 1 or samples.shape[0] < 1:
    raise ValueError(f"samples must be (K, ...) with K >= 1, got shape {tuple(samples.shape)}")
  costs = v.array("costs", costs, shape=(samples.shape[0],))
  temperature = pl.check_scalar("temperature", temperature, low=0.0, low_open=True)
  return _mppi_update(samples, costs, temperature)


def _mppi_update(samples, costs, temperature):
  finite = jnp.isfinite(costs)
  best = jnp.min(jnp.where(finite, costs, jnp.inf))
  weights = jnp.where(finite, jnp.exp(-(costs - jnp.where(finite.any(), best, 0.0))
                                      / temperature), 0.0)
  total = jnp.sum(weights)
  average = jnp.tensordot(weights / jnp.where(total > 0, total, 1.0), samples, axes=1)
  return jnp.where(total > 0, average, samples[0])


def _like_mean(name: str, x: Any, shape: tuple[int, ...], *, finite: bool = False,
               allow_inf: bool = False, low: float | None = None) -> jax.Array:
  """x as an array that broadcasts to shape (a number, or one value per entry)."""
  x = v.array(name, x, finite=finite or allow_inf, allow_inf=allow_inf)
  try:
    fits = jnp.broadcast_shapes(x.shape, shape) == tuple(shape)
  except ValueError:
    fits = False
  if not fits:
    raise ValueError(f"{name} must be a number or broadcast to mean's shape {tuple(shape)}, got "
                     f"shape {tuple(x.shape)}")
  if low is not None and pl.is_concrete(x) and np.any(np.asarray(x) < low):
    raise ValueError(f"{name} must be >= {low}, got {v.shown(x)}")
  return x


# -- planners over plans ------------------------------------------------------------------------


class PredictiveSettings(NamedTuple):
  """Predictive sampling's options (the plan moves to the cheapest candidate); static (hashable).

  Attributes:
    num_samples: K candidates per iteration, the rows of one rollout call.
    num_knots: P knots of the plan (at most the horizon).
    interpolation: "zero", "linear" or "cubic" (control.splines).
    noise: the sampling spread of every knot as a fraction of half its control's range (MuJoCo
      MPC's convention; absolute for unlimited controls), or P such numbers: a schedule along
      the horizon. The default, 0.5, moved every sampled task of benchmarks/control_suite.py
      (gaits and swimming need it; 0.1, the old default, barely moved them); precise reaching
      settles closer with 0.1.
    iterations: iterations per planning call.
    noise_decay: the spread of iteration i of one planning call is noise * noise_decay**i.
  """

  num_samples: int = 256
  num_knots: int = 10
  interpolation: str = "linear"
  noise: float | tuple[float, ...] = 0.5
  iterations: int = 1
  noise_decay: float = 1.0

  @property
  def method(self) -> str:
    return "predictive"


class MPPISettings(NamedTuple):
  """MPPI's options: PredictiveSettings' fields and the temperature; static (hashable).

  Attributes:
    num_samples, num_knots, interpolation, noise, iterations, noise_decay: as
      PredictiveSettings'.
    temperature: the plan moves to the candidates' average weighted by
      exp(-(cost - min cost) / temperature), a number > 0.
  """

  num_samples: int = 256
  num_knots: int = 10
  interpolation: str = "linear"
  noise: float | tuple[float, ...] = 0.5
  iterations: int = 1
  noise_decay: float = 1.0
  temperature: float = 1.0

  @property
  def method(self) -> str:
    return "mppi"


class CEMSettings(NamedTuple):
  """The cross-entropy method's options: PredictiveSettings' fields and the elites'.

  The plan moves to the mean of the num_elites cheapest candidates and the sampling spread to
  their spread, each smoothed: `noise` is the spread of a new plan (planner.init), and later
  spreads are the elites' (no noise_decay). Static (hashable).

  Attributes:
    num_samples, num_knots, interpolation, noise, iterations: as PredictiveSettings'.
    num_elites: the elite set, in [1, num_samples].
    smoothing: the weight of the old mean and spread, in [0, 1).
    std_min: the floor of the spread (same units as noise), >= 0.
  """

  num_samples: int = 256
  num_knots: int = 10
  interpolation: str = "linear"
  noise: float | tuple[float, ...] = 0.5
  iterations: int = 1
  num_elites: int = 16
  smoothing: float = 0.0
  std_min: float = 0.01

  @property
  def method(self) -> str:
    return "cem"


Settings = PredictiveSettings | MPPISettings | CEMSettings
SETTINGS: dict[str, type[Settings]] = {"predictive": PredictiveSettings, "mppi": MPPISettings,
                                       "cem": CEMSettings}
"""Each method of METHODS -> its settings class, to pick the options by the method's name:
`control.SETTINGS["cem"](num_samples=512)`."""


class _SamplingSettingsFields(NamedTuple):
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


class SamplingSettings(_SamplingSettingsFields):
  """Deprecated: the options of every method in one bag; use PredictiveSettings, MPPISettings or
  CEMSettings (control.SETTINGS[method]), whose fields all apply.

  sampling() still accepts it for one release: it checks every field as before and plans with
  the per-method settings of its method.
  """

  __slots__ = ()

  def __new__(cls, *args: Any, **kwargs: Any) -> "SamplingSettings":
    warnings.warn("control.SamplingSettings is deprecated and will be removed in the next "
                  "release: use control.PredictiveSettings, control.MPPISettings or "
                  "control.CEMSettings (control.SETTINGS[method])", DeprecationWarning,
                  stacklevel=2)
    return super().__new__(cls, *args, **kwargs)


class SamplingPlan(NamedTuple):
  """A sampling planner's state: the knots (P, nu) and CEM's spread (P, nu).

  Made by the planner's init and returned by its update and shift.

  Attributes:
    knots: (P, nu) the plan's knots, in control units; planner.controls interpolates them to
      the horizon's (T, nu) controls.
    std: (P, nu) the sampling spread per knot, in control units (the settings' noise times
      half the control's range). CEM moves it to the elites' spread after each iteration
      (floored at std_min); predictive sampling and MPPI carry it unchanged.
  """

  knots: jax.Array
  std: jax.Array


class SamplingResult(NamedTuple):
  """What a sampling planner's update saw (its info; ILQRResult is iLQR's).

  Attributes:
    cost: the cheapest candidate's cost in the last iteration.
    nominal_cost: the incoming plan's cost (candidate 0 of the first iteration).
    mean_cost: the mean finite cost of the last iteration's candidates.
    failed: how many of the last iteration's candidates failed (an error or a reset) or cost NaN.
  """

  cost: jax.Array
  nominal_cost: jax.Array
  mean_cost: jax.Array
  failed: jax.Array


class Planner(NamedTuple):
  """A planner as pure functions (optax-like); see sampling() and ilqr_planner().

  Attributes:
    init: (ctrls (T, nu) or None) -> plan state; non-finite controls are refused.
    update: (plan, state (nstate,), key, params=None) -> (plan, info): one planning call;
      params (optional) replaces the planner's for this call (K rows: per-candidate domain
      randomisation). update, controls and shift check the plan's type and shapes (and, where
      they are known, that its values are finite).
    controls: plan -> (T, nu) controls.
    shift: (plan, n) -> the plan n controls later (receding horizon).
    horizon, nstep: T and the physics steps per control.
    nstate, nu: the sizes of the model it plans with (None in a Planner of your own: then what
      runs it cannot check that its states and controls fit the robots').
  """

  init: Callable[..., Any]
  update: Callable[..., tuple[Any, Any]]
  controls: Callable[[Any], jax.Array]
  shift: Callable[[Any, int], Any]
  horizon: int
  nstep: int
  nstate: int | None = None
  nu: int | None = None


def sampling(cost: cost_lib.Cost, params: Params, *, horizon: int, nstep: int = 1,
             settings: Settings | SamplingSettings | None = None, bounds: Any = None
             ) -> Planner:
  """A sampling planner (predictive sampling, MPPI or CEM) of horizon T controls.

  Args:
    cost: a control.Cost.
    params: Params of one simulation (sim.params(1, ...)), or of num_samples (one per candidate:
      domain randomisation).
    horizon: T controls per plan.
    nstep: physics steps per control.
    settings: PredictiveSettings, MPPISettings or CEMSettings, the method's options (default:
      PredictiveSettings()); a deprecated SamplingSettings is converted to its method's.
    bounds: (lower, upper) of the controls; default: the model's ctrlrange where limited.

  Returns:
    A Planner; its update is jitted, one rollout call of num_samples rows per iteration.

  Example:
    planner = control.sampling(cost, sim.params(1), horizon=25, nstep=4,
                               settings=control.CEMSettings(num_samples=1024))
    plan = planner.init()
    plan, info = planner.update(plan, state, key)
    first = planner.controls(plan)[0]
  """
  settings = _check_settings(PredictiveSettings() if settings is None else settings, horizon)
  horizon = int(horizon)
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
  std_min = settings.std_min if isinstance(settings, CEMSettings) else 0.0  # CEM's alone
  floor = jnp.asarray(std_min * np.broadcast_to(half, spread.shape))

  def init(ctrls: Any = None) -> SamplingPlan:
    if ctrls is None:
      knots = jnp.broadcast_to(jnp.clip(0.0, lo, hi), (settings.num_knots, spec.nu))
    else:
      ctrls = pl.check_plan("ctrls", ctrls, spec.nu, finite=True)
      if ctrls.shape[0] != horizon:
        raise ValueError(f"ctrls must have the horizon's {horizon} controls, got "
                         f"{ctrls.shape[0]}")
      # The knots whose interpolation is closest to the controls (least squares).
      knots = jnp.linalg.lstsq(interp, ctrls)[0]
    return SamplingPlan(jnp.asarray(knots, lo.dtype), spread.astype(lo.dtype))

  def checked(plan: Any) -> SamplingPlan:
    if not isinstance(plan, SamplingPlan):
      raise ValueError(f"plan must be a control.SamplingPlan (from planner.init), got "
                       f"{type(plan).__name__}")
    shape = (settings.num_knots, spec.nu)
    return SamplingPlan(v.array("plan.knots", plan.knots, shape, finite=True),
                        v.array("plan.std", plan.std, shape, finite=True))

  def update(plan: SamplingPlan, state: Any, key: Any, params_now: Params | None = None
             ) -> tuple[SamplingPlan, SamplingResult]:
    plan = checked(plan)
    state = pl.check_start(state, spec, "state", finite=True)  # before any candidate runs
    key = pl.check_key("key", key)
    p = params if params_now is None else params_now
    if params_now is not None:
      pl.check_params_rows(params_now, (1, settings.num_samples))
    # The method is a static argument of its own: settings of two methods may be equal tuples.
    return _update(cost, w, p, state, plan, key, lo, hi, interp, spread, floor, nstep,
                   settings.method, settings)

  def controls(plan: SamplingPlan) -> jax.Array:
    return jnp.clip(interp @ checked(plan).knots, lo, hi)

  def shift(plan: SamplingPlan, n: int = 1) -> SamplingPlan:
    plan = checked(plan)
    n = v.integer("n", n, low=0)
    move = jnp.asarray(splines.shift_matrix(settings.num_knots, horizon, settings.interpolation,
                                            n))
    return SamplingPlan(move @ plan.knots, plan.std)

  return Planner(init, update, controls, shift, horizon, nstep, spec.nstate, spec.nu)


def _check_settings(settings: Any, horizon: int) -> Settings:
  """The per-method settings, every field checked (a SamplingSettings converted)."""
  if isinstance(settings, SamplingSettings):
    settings = _converted(settings)
  if not isinstance(settings, PredictiveSettings | MPPISettings | CEMSettings):
    raise ValueError("settings must be control.PredictiveSettings, control.MPPISettings or "
                     f"control.CEMSettings, got {type(settings).__name__}")
  for name in type(settings)._fields:
    v.static(f"settings.{name}", getattr(settings, name))  # static: hashed by jit
  splines.check(settings.num_knots, horizon, settings.interpolation)
  k = v.integer("settings.num_samples", settings.num_samples, low=2)
  knots = int(settings.num_knots)
  noise = settings.noise
  if v.is_vector(noise):  # one number per knot; a 0-d array is a number
    if len(noise) != knots:
      raise ValueError(f"settings.noise must be a number >= 0 or num_knots={knots} of them, got "
                       f"{len(noise)} of them")
    noise = tuple(v.number(f"settings.noise[{i}]", x, low=0.0) for i, x in enumerate(noise))
  else:
    noise = v.number("settings.noise", noise, low=0.0)
  iterations = v.integer("settings.iterations", settings.iterations, low=1)
  common = {"num_samples": k, "num_knots": knots, "noise": noise, "iterations": iterations}
  if isinstance(settings, CEMSettings):
    num_elites = v.integer("settings.num_elites", settings.num_elites, low=1)
    if num_elites > k:
      raise ValueError(f"settings.num_elites must be in [1, num_samples={k}], got {num_elites}")
    return settings._replace(**common, num_elites=num_elites,
                             smoothing=_smoothing(settings.smoothing),
                             std_min=v.number("settings.std_min", settings.std_min, low=0.0))
  decay = v.number("settings.noise_decay", settings.noise_decay, low=0.0, low_open=True)
  if isinstance(settings, MPPISettings):
    return settings._replace(**common, noise_decay=decay, temperature=v.number(
      "settings.temperature", settings.temperature, low=0.0, low_open=True))
  return settings._replace(**common, noise_decay=decay)


def _smoothing(value: Any) -> float:
  smoothing = v.number("settings.smoothing", value, low=0.0)
  if smoothing >= 1:
    raise ValueError(f"settings.smoothing must be a finite number in [0, 1), got {smoothing}")
  return smoothing


def _converted(settings: SamplingSettings) -> Settings:
  """A deprecated SamplingSettings as its method's settings, every field checked as before (the
  fields of the other methods too)."""
  for name in SamplingSettings._fields:
    v.static(f"settings.{name}", getattr(settings, name))
  method = v.one_of("settings.method", settings.method, METHODS)
  v.integer("settings.num_elites", settings.num_elites, low=1)
  _smoothing(settings.smoothing)
  v.number("settings.std_min", settings.std_min, low=0.0)
  v.number("settings.temperature", settings.temperature, low=0.0, low_open=True)
  v.number("settings.noise_decay", settings.noise_decay, low=0.0, low_open=True)
  kind = SETTINGS[method]
  return kind(**{name: getattr(settings, name) for name in kind._fields})


def _update_impl(cost, w, params, start, plan, key, lo, hi, interp, spread, floor, nstep, method,
                 settings):
  k = settings.num_samples
  p = pl.rows(params, k)
  starts = jnp.broadcast_to(start, (k, start.shape[-1]))
  # The start's fields, per candidate: its own params may change them (a randomised body_pos).
  obs0 = fn.forward(starts, p, cost.observe) if cost.observe else {}

  def evaluate(candidates):
    ctrls = jnp.clip(jnp.einsum("tp,kpu->ktu", interp, candidates), lo, hi)
    if cost.observe:
      states, _, obs, warnings, errors = fn.rollout(
        starts, ctrls, p, nstep=nstep, observe=cost.observe, return_warnings=True,
        return_errors=True)
      obs = {f: jnp.concatenate([obs0[f][:, None], x], axis=1) for f, x in obs.items()}
    else:
      states, _, warnings, errors = fn.rollout(starts, ctrls, p, nstep=nstep,
                                               return_warnings=True, return_errors=True)
      obs = {}
    states = jnp.concatenate([starts[:, None], states], axis=1)
    costs = pl.plan_costs(cost, w, states, ctrls, obs)
    return jnp.where(pl.failed(warnings, errors), jnp.inf, costs)

  def iteration(carry, inputs):
    knots, std = carry
    i, subkey = inputs
    scale = std if method == "cem" else spread * settings.noise_decay**i
    # Candidate 0 is the plan itself, its knots unclipped: controls() clips after the
    # interpolation, and a knot out of bounds (a least-squares init, a cubic shift) clipped
    # before it would be another plan, at times a worse one.
    candidates = _gaussian_samples(subkey, knots, scale, k, lo, hi).at[0].set(knots)
    costs = evaluate(candidates)
    if method == "predictive":
      knots = candidates[jnp.argmin(costs)]
    elif method == "mppi":
      knots = _mppi_update(candidates, costs, settings.temperature)
    else:
      knots, std = _cem_update(knots, std, candidates, costs, settings.num_elites,
                              settings.smoothing)
      std = jnp.maximum(std, floor)
    finite = jnp.isfinite(costs)
    info = SamplingResult(jnp.min(costs), costs[0],
                        jnp.sum(jnp.where(finite, costs, 0.0)) / jnp.maximum(finite.sum(), 1),
                        jnp.sum(~finite))
    return (knots, std), info

  keys = jax.random.split(key, settings.iterations)
  (knots, std), infos = jax.lax.scan(iteration, (plan.knots, plan.std),
                                     (jnp.arange(settings.iterations), keys))
  info = SamplingResult(infos.cost[-1], infos.nominal_cost[0], infos.mean_cost[-1],
                      infos.failed[-1])
  return SamplingPlan(knots, std), info




def __getattr__(name: str) -> Any:
  if name == "SamplingInfo":  # renamed as ILQRResult's sibling
    warnings.warn("control.SamplingInfo is control.SamplingResult now; SamplingInfo will be "
                  "removed in the next release", DeprecationWarning, stacklevel=2)
    return SamplingResult
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The planning call's program per cost (a user's function) and static settings: bounded, so
# that a loop of planners with fresh costs does not grow.
_update = _programs.BoundedJit(_update_impl, static_argnums=(0, 11, 12, 13))


__all__ = ["METHODS", "SETTINGS", "CEMSettings", "MPPISettings", "Planner", "PredictiveSettings",
           "SamplingPlan", "SamplingResult", "SamplingSettings", "Settings", "cem_update",
           "gaussian_samples", "mppi_update", "sampling"]
