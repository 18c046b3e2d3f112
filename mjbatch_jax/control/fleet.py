"""Planning in flight on many robots: a receding horizon per robot, and a choice among plan tails.

- `receding_horizon_fleet`: control.receding_horizon on N robots at once, each with its own
  params (a randomised robot, say) and its own plan to follow: its planner is warm-started from
  the plan, and each knot the warm start's new last control is the plan's own control that far
  ahead (`with_tail`), so the planner corrects the plan rather than forgetting it. One jitted
  lax.scan over the knots, the robots vmapped: each knot's candidates of every robot are the
  rows of one rollout call. Every physics step is recorded.
- `choose_tail`: which of K candidate plan tails each robot should fly, from its measured state:
  all N x K tails run on the planner's model in one rollout call, and a score of their physics
  steps picks the least; candidate 0 (the plan's own) is kept while its score is within a band.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mjbatch_jax import _checks, _programs, errors
from mjbatch_jax import _validate as v
from mjbatch_jax import functions as fn
from mjbatch_jax.control import _plumbing as pl
from mjbatch_jax.control.mpc import _BAD_CTRL, _RESET, ILQRPlan
from mjbatch_jax.control.replay import check_rows, params_rows, robot_count
from mjbatch_jax.control.sampling import Planner, SamplingPlan
from mjbatch_jax.params import Params


class FleetRun(NamedTuple):
  """What receding_horizon_fleet returns: the robots as rows, the knots run in order.

  Attributes:
    states: (N, knots * nstep, nstate) every physics step's state.
    sensordata: (N, knots * nstep, nsensordata) every physics step's sensordata.
    ctrls: (N, knots, nu) the control each robot applied at each knot.
    info: the planner's info of each knot (SamplingResult, ILQRResult, ...), leaves
      (N, knots, ...).
    real_failed: (N, knots) bool: MuJoCo reset the robot's simulation (its state went bad) or
      zeroed a bad control during that knot, as control.StepInfo.real_failed.
  """

  states: jax.Array
  sensordata: jax.Array
  ctrls: jax.Array
  info: Any
  real_failed: jax.Array


def with_tail(planner: Planner, plan: Any, ctrl: Any) -> Any:
  """plan (already shifted) with its last control replaced by ctrl: a warm start that follows
  a longer plan.

  planner.shift holds the last control; a robot following a longer plan knows better: the
  plan's control that far ahead. The controls become planner.controls(plan) with the last one
  ctrl, and the plan is planner.init of them, keeping what the planner carries between calls
  (a SamplingPlan's spread, an ILQRPlan's mu). For a sampling plan of fewer knots than controls
  this is the least-squares fit of its knots to those controls (as planner.init fits).

  Args:
    planner: the Planner of plan.
    plan: its plan state, as planner.shift returned it.
    ctrl: (nu,) the new last control.

  Example:
    state, plan, info = step(state, plan, key)          # control.receding_horizon's step
    plan = control.with_tail(planner, plan, reference[k + planner.horizon])
  """
  if not isinstance(planner, Planner):
    raise ValueError(f"planner must be a control.Planner (control.sampling, "
                     f"control.ilqr_planner), got {type(planner).__name__}")
  controls = planner.controls(plan)
  ctrl = v.array("ctrl", ctrl, (controls.shape[-1],), finite=True).astype(controls.dtype)
  fresh = planner.init(controls.at[-1].set(ctrl))
  if isinstance(plan, SamplingPlan):
    return fresh._replace(std=plan.std)
  if isinstance(plan, ILQRPlan):
    return fresh._replace(mu=plan.mu)
  return fresh


def _check_keys(keys: Any) -> tuple[Any, int, int]:
  """keys (N, knots) PRNG keys, typed or raw; N and knots."""
  want = ("keys must be (N, knots) PRNG keys, one per robot and knot, as "
          "jax.random.split(key, (N, knots)) makes")
  dtype = getattr(keys, "dtype", None)
  if not isinstance(keys, (jax.Array, np.ndarray)) or dtype is None:
    raise ValueError(f"{want}, got {v.shown(keys)}")
  shape = tuple(keys.shape)
  typed = jnp.issubdtype(dtype, jax.dtypes.prng_key)
  lead = shape if typed else shape[:-1]
  if len(lead) != 2 or 0 in lead:
    got = f"keys of shape {shape}" if typed else f"a {dtype} array of shape {shape}"
    raise ValueError(f"{want}, got {got}")
  if not typed:
    v.key("keys[0, 0]", keys[0, 0])  # the shape of one raw key of this PRNG
  return keys, lead[0], lead[1]


def receding_horizon_fleet(planner: Planner, params: Params, starts: Any, ctrls: Any,
                           keys: Any, *, first: int = 0, vmap_planners: bool = True
                           ) -> FleetRun:
  """control.receding_horizon on N robots, each following its own plan, in one jitted scan.

  Robot i starts from starts[i] at knot `first` of its plan ctrls[i] (F knots). Its planner is
  warm-started from the plan's controls first .. first + horizon - 1; at each knot it plans
  (planner.update with robot i's state), applies the first control to robot i (params row i)
  for planner.nstep physics steps, shifts the plan one control, and sets the warm start's last
  control to the plan's control `horizon` knots ahead (with_tail; past the plan's end, its last).
  The knots run are keys.shape[1].

  With N = 1 it is control.receding_horizon's step in a Python loop: knot j of robot i is

    state, plan, _ = step(state, plan, keys[i, j])    # step = receding_horizon(planner, p_i)
    plan = control.with_tail(planner, plan, ctrls[i, min(first + j + horizon, F - 1)])

  bit for bit (keys[i, j] is that step's key: the planner gets its first split). Robot i's run
  does not depend on the other robots': with vmap_planners=False to the bit; vmapped, XLA's
  batched matrix products (a spline's interpolation, the knots' fit) may round in the last bits
  otherwise than one robot's do.

  Args:
    planner: a Planner (control.sampling, control.ilqr_planner): the model every robot plans
      with (e.g. the nominal robot).
    params: Params of the N robots as they really are (leaves (N, ...)), or one row for all.
    starts: (nstate,) or (N, nstate) the robots' states at knot first.
    ctrls: (F, nu) or (N, F, nu) the plans the robots follow.
    keys: (N, knots) PRNG keys (jax.random.split(key, (N, knots))): robot i's at its j-th knot.
    first: the plan's knot the robots are at, in [0, F - 1].
    vmap_planners: plan the robots vmapped (each knot's candidates of all robots the rows of one
      rollout call), else robot by robot (lax.map: a planner call per robot, each robot's run
      the same bits whatever runs beside it). The robots' own physics is one call either way.

  Returns:
    FleetRun: every physics step's states and sensordata (N, knots * nstep, ...), the applied
    controls, the planner's infos and MuJoCo's resets of the robots. A MuJoCo error raises
    mjbatch_jax.SimulationError (called with concrete arrays; inside a function of yours that
    jit traces, wrap its call in mjbatch_jax.simulation_errors()).

  Example:
    planner = control.sampling(cost, sim.params(1), horizon=20, nstep=4)
    keys = jax.random.split(jax.random.key(0), (n, frames - first))   # n robots
    run = control.receding_horizon_fleet(planner, robots, states, plans, keys, first=first)
    run.states  # (n, (frames - first) * 4, nstate)
  """
  if not isinstance(planner, Planner):
    raise ValueError(f"planner must be a control.Planner (control.sampling, "
                     f"control.ilqr_planner), got {type(planner).__name__}")
  horizon = pl.check_count("planner.horizon", planner.horizon)
  nstep = pl.check_count("planner.nstep", planner.nstep)
  spec, rows = params_rows(params)
  pl.check_planner_fits(planner, spec, "params")
  starts = check_rows("starts", starts, (spec.nstate,), "a state row", finite=True)
  ctrls = v.array("ctrls", ctrls, finite=True)
  if ctrls.ndim not in (2, 3) or ctrls.shape[-1] != spec.nu or ctrls.shape[-2] < 1:
    raise ValueError(f"ctrls must be plans of shape (F, nu={spec.nu}) or (N, F, nu={spec.nu}) "
                     f"with F >= 1, got {tuple(ctrls.shape)}")
  keys, n_keys, knots = _check_keys(keys)
  frames = ctrls.shape[-2]
  first = v.integer("first", first, low=0, high=frames - 1)
  # The robots are the rows of whichever argument has them; keys always do.
  n = robot_count(rows, [("starts", starts, 1), ("ctrls", ctrls, 2),
                         ("keys", np.zeros(n_keys), 0)])
  dtype = starts.dtype
  vmap_planners = v.flag("vmap_planners", vmap_planners)
  args = (planner, horizon, nstep, vmap_planners, pl.rows(params, n),
          jnp.broadcast_to(starts, (n, spec.nstate)),
          jnp.broadcast_to(ctrls.astype(dtype), (n, frames, spec.nu)), keys, jnp.asarray(first))
  if not pl.is_concrete(args[4:]):
    return _fleet(*args)  # traced by the caller's jit: its errors are JAX's
  with errors.simulation_errors():
    return jax.block_until_ready(_fleet(*args))


def _fleet_impl(planner, horizon, nstep, vmap_planners, params, starts, ctrls, keys, first):
  n, frames, nu = ctrls.shape
  knots = keys.shape[1]
  ahead = jnp.minimum(first + jnp.arange(horizon), frames - 1)
  tails = jnp.minimum(first + jnp.arange(knots) + horizon, frames - 1)

  def plan_one(plan, x, key, tail):
    """One robot's planning at a knot: its control now and its next warm start."""
    plan_key, _ = jax.random.split(key)  # as receding_horizon splits its step's key
    plan, info = planner.update(plan, x, plan_key)
    u = planner.controls(plan)[0]
    return u, with_tail(planner, planner.shift(plan, 1), tail), info

  def each_robot(f, *args):
    if vmap_planners:
      return jax.vmap(f)(*args)
    return jax.lax.map(lambda a: f(*a), args)

  def knot(carry, inputs):
    x, plan = carry
    key, tail = inputs
    u, plan, info = each_robot(plan_one, plan, x, key, tail)
    # The robots' physics: one rollout call, a row per robot, every physics step recorded.
    xs, sensors, warnings = fn.rollout(x, jnp.broadcast_to(u[:, None], (n, nstep, nu)), params,
                                       return_warnings=True)
    failed = jnp.any(warnings[:, _RESET] > 0, axis=-1) | (warnings[:, _BAD_CTRL] > 0)
    return (xs[:, -1], plan), (xs, sensors, u, info, failed)

  plan = each_robot(planner.init, ctrls[:, ahead])
  _, (xs, sensors, us, info, failed) = jax.lax.scan(
    knot, (starts, plan), (keys.swapaxes(0, 1), ctrls[:, tails].swapaxes(0, 1)))
  # (knots, N, ...) -> (N, knots, ...)
  info = jax.tree.map(lambda leaf: leaf.swapaxes(0, 1), info)
  return FleetRun(xs.swapaxes(0, 1).reshape(n, knots * nstep, xs.shape[-1]),
                  sensors.swapaxes(0, 1).reshape(n, knots * nstep, sensors.shape[-1]),
                  us.swapaxes(0, 1), info, failed.swapaxes(0, 1))


def check_choice(spec: Any, rows: int | None, n: int, k: int, horizon: int, nstep: Any,
                 score: Any, observe: Any, keep_first: Any, dtype: Any = jnp.float64
                 ) -> tuple[int, tuple[str, ...], float | None]:
  """choose_tail's checks of its params' rows, nstep, score (its output's shape, traced on
  ShapeDtypeStructs), observe and keep_first for N robots choosing among K tails of T knots,
  before any physics runs; (nstep, observe, keep_first) as choose_tail uses them."""
  if rows not in (None, 1, n):
    raise ValueError(f"params must be of one simulation or of the N={n} robots, got {rows} rows")
  nstep = pl.check_count("nstep", nstep)
  if not callable(score):
    raise ValueError(f"score must be a function (states, sensordata, obs) -> (N K,) numbers, "
                     f"got {v.shown(score)}")
  # Read once, into a tuple: a generator checked by iterating it would come back empty.
  names = None if isinstance(observe, str) or not isinstance(observe, Iterable) else tuple(observe)
  if names is None or not all(isinstance(f, str) for f in names):
    raise ValueError(f"observe must be a sequence of mjData field names, got {v.shown(observe)}")
  observe = names
  shapes = {name: _checks.forward_shape(spec, name) for name in observe}
  if keep_first is not None:
    keep_first = v.number("keep_first", keep_first, allow_inf=True)
  rollouts, steps = n * k, horizon * nstep
  struct = jax.ShapeDtypeStruct
  try:
    out = jax.eval_shape(score, struct((rollouts, steps, spec.nstate), dtype),
                         struct((rollouts, steps, spec.nsensordata), dtype),
                         {name: struct((rollouts, steps, *s), dtype)
                          for name, s in shapes.items()})
  except Exception as e:
    raise ValueError(f"score(states ({rollouts}, {steps}, {spec.nstate}), sensordata "
                     f"({rollouts}, {steps}, {spec.nsensordata}), obs) failed: "
                     f"{type(e).__name__}: {e}") from e
  if (not hasattr(out, "shape") or out.shape != (rollouts,)
      or not jnp.issubdtype(out.dtype, jnp.floating)):
    raise ValueError(f"score must return ({rollouts},) floating-point numbers, one per rollout "
                     f"(N K = {n} x {k}), got {getattr(out, 'shape', type(out).__name__)} of "
                     f"{getattr(out, 'dtype', '')}")
  return nstep, observe, keep_first


def choose_tail(params: Params, states: Any, candidates: Any, nstep: int,
                score: Callable[[jax.Array, jax.Array, dict], Any], *,
                observe: Sequence[str] = (), keep_first: float | None = None,
                return_scores: bool = False) -> Any:
  """Each robot's pick among K candidate plan tails, by rolling them out from its state.

  Every robot's K candidates run from its measured state on params (the model the robot is
  believed to be) in one rollout call of N x K rows, each control held for nstep physics steps.
  score rates each rollout; the least wins. With keep_first, candidate 0 (the plan's own tail,
  say) is kept while its score is finite and at most keep_first: a band that keeps the plan
  unless another tail is clearly needed. A rollout that fails (a MuJoCo error, or MuJoCo reset
  it) or scores NaN scores infinity.

  Args:
    params: Params of one simulation (leaves (1, ...)) for every robot, or of N (one each).
    states: (N, nstate) the robots' measured states.
    candidates: (N, K, T, nu) each robot's K candidate tails of T controls, from now on.
    nstep: physics steps per control.
    score: (states (N K, T nstep, nstate), sensordata (N K, T nstep, nsensordata), obs {field:
      (N K, T nstep, ...)}) -> (N K,) numbers: every physics step of each rollout, robot i's
      candidate c in row i K + c. Pure JAX.
    observe: mjData fields recorded after each physics step for score (obs).
    keep_first: None, or a number: the band within which candidate 0 is kept.
    return_scores: also return the (N, K) scores.

  Returns:
    (N,) int32 the chosen candidate of each robot; with return_scores, also the scores.

  Example:
    def score(xs, sensors, obs):          # the lowest pelvis height over the tail
      return -jnp.min(xs[:, :, qpos_z], axis=1)
    pick = control.choose_tail(sim.params(1), states, tails, 4, score, keep_first=-0.6)
  """
  spec, rows = params_rows(params)
  states = v.array("states", states, finite=True)
  if states.ndim != 2 or states.shape[1] != spec.nstate:
    raise ValueError(f"states must be the robots' state rows (N, nstate={spec.nstate}), got "
                     f"{tuple(states.shape)}")
  candidates = v.array("candidates", candidates, finite=True).astype(states.dtype)
  n = states.shape[0]
  if candidates.ndim != 4 or candidates.shape[0] != n or candidates.shape[-1] != spec.nu:
    raise ValueError(f"candidates must be (N={n}, K, T, nu={spec.nu}) tails, got "
                     f"{tuple(candidates.shape)}")
  _, k, horizon, nu = candidates.shape
  if k < 1 or horizon < 1:
    raise ValueError(f"candidates must hold K >= 1 tails of T >= 1 controls, got "
                     f"{tuple(candidates.shape)}")
  nstep, observe, keep_first = check_choice(spec, rows, n, k, horizon, nstep, score, observe,
                                            keep_first, states.dtype)
  return_scores = v.flag("return_scores", return_scores)
  rollouts = n * k

  starts = jnp.repeat(states, k, axis=0)
  held = jnp.repeat(candidates.reshape(rollouts, horizon, nu), nstep, axis=1)
  if rows == n and n > 1:
    names = [name for i, name in enumerate(spec.fields) if not spec.is_shared(i)]
    p = params.replace({name: jnp.repeat(params[name], k, axis=0) for name in names})
  else:
    p = pl.rows(params, rollouts)
  if observe:
    xs, sensors, obs, warnings, codes = fn.rollout(starts, held, p, observe=observe,
                                                   return_warnings=True, return_errors=True)
  else:
    xs, sensors, warnings, codes = fn.rollout(starts, held, p, return_warnings=True,
                                              return_errors=True)
    obs = {}
  values = jnp.asarray(score(xs, sensors, obs))
  values = jnp.where(pl.failed(warnings, codes) | jnp.isnan(values), jnp.inf, values)
  values = values.reshape(n, k)
  chosen = jnp.argmin(values, axis=1).astype(jnp.int32)
  if keep_first is not None:  # a failed candidate 0 (infinite) is never kept, even by inf
    chosen = jnp.where((values[:, 0] <= keep_first) & jnp.isfinite(values[:, 0]), 0, chosen)
  return (chosen, values) if return_scores else chosen


# The fleet's program per planner (its functions hold the cost): bounded.
_fleet = _programs.BoundedJit(_fleet_impl, static_argnums=(0, 1, 2, 3))


__all__ = ["FleetRun", "choose_tail", "receding_horizon_fleet", "with_tail"]
