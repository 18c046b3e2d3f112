"""What the planners share: argument checks, params as rows, simulations and plan costs.

Every check here runs in Python on shapes and static values, before any custom call exists.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.core import Tracer

from mjbatch_jax import _checks
from mjbatch_jax import _validate as v
from mjbatch_jax import functions as fn
from mjbatch_jax.control import cost as cost_lib
from mjbatch_jax.params import Params, SimSpec

# Warnings after which MuJoCo has reset a simulation (mj_checkPos/Vel/Acc) or zeroed its
# controls: the row's later states are not what its controls did, so its cost is not a cost.
_DIVERGED = np.array([
  int(mujoco.mjtWarning.mjWARN_BADQPOS), int(mujoco.mjtWarning.mjWARN_BADQVEL),
  int(mujoco.mjtWarning.mjWARN_BADQACC), int(mujoco.mjtWarning.mjWARN_BADCTRL),
])


def spec_of(params: Any) -> SimSpec:
  return _checks.check_params(params)


def check_count(name: str, value: Any, low: int = 1) -> int:
  return v.integer(name, value, low=low)


def check_scalar(name: str, value: Any, low: float | None = None, *, low_open: bool = False,
                 allow_inf: bool = False) -> Any:
  """A number (a Python float), or a traced scalar, checked by its shape only: a gain or a
  regularisation that a jitted loop carries (ILQRPlan.mu) may be traced."""
  if isinstance(value, Tracer):
    return v.array(name, value, shape=())
  return v.number(name, value, low, low_open=low_open, allow_inf=allow_inf)


def check_key(name: str, key: Any) -> Any:
  """A PRNG key: a typed key (jax.random.key) or a raw uint32 one (jax.random.PRNGKey)."""
  return v.key(name, key)


def check_cost(cost: Any) -> cost_lib.Cost:
  if not isinstance(cost, cost_lib.Cost):
    raise ValueError(f"cost must be a control.Cost, got {type(cost).__name__}")
  if not callable(cost.residual):
    raise ValueError(f"Cost.residual must be a function, got {cost.residual!r}")
  observe = cost.observe
  if isinstance(observe, str) or not all(isinstance(f, str) for f in observe):
    raise ValueError(f"Cost.observe must be a sequence of mjData field names, got {observe!r}")
  return cost._replace(terms=cost_lib.check_terms(cost.terms), observe=tuple(observe))


def check_plan(name: str, ctrls: Any, nu: int, finite: bool = False) -> jax.Array:
  """ctrls (T, nu) with T >= 1; with finite, NaN and inf refused where the values are known."""
  given = ctrls
  ctrls = v.array(name, ctrls)
  if ctrls.ndim != 2 or ctrls.shape[1] != nu:
    raise ValueError(f"{name} must be (T, nu={nu}) controls, got shape {ctrls.shape}")
  if ctrls.shape[0] < 1:
    raise ValueError(f"{name} has a horizon of 0 knots: a plan needs T >= 1 controls")
  if finite:
    v.array(name, given, finite=True)
  return ctrls


def check_start(start: Any, spec: SimSpec, name: str = "start", finite: bool = False
                ) -> jax.Array:
  """One state row; with finite, NaN and inf refused where the values are known."""
  start = v.array(name, start, finite=finite)
  if start.shape != (spec.nstate,):
    raise ValueError(f"{name} must be one state row of shape ({spec.nstate},), got "
                     f"{start.shape}")
  return start


def check_bounds(bounds: Any, spec: SimSpec, what: str = "bounds") -> tuple[jax.Array, jax.Array]:
  """(lower, upper) of the controls: given, or the model's ctrlrange (unlimited: infinite)."""
  nu = spec.nu
  if bounds is None:
    info = spec.model_info
    rng = np.asarray(info.ctrlrange, dtype=np.float64).reshape(nu, 2)
    limited = np.asarray(info.ctrllimited, dtype=bool)
    lo = np.where(limited, rng[:, 0], -np.inf)
    hi = np.where(limited, rng[:, 1], np.inf)
    return jnp.asarray(lo), jnp.asarray(hi)
  try:
    if isinstance(bounds, str):
      raise TypeError
    lo, hi = bounds
  except (TypeError, ValueError):
    raise ValueError(f"{what} must be a pair (lower, upper) of (nu={nu},) arrays or numbers, got "
                     f"{v.shown(bounds)}") from None
  concrete, given = is_concrete(lo, hi), (lo, hi)
  lo = v.vector(f"{what}[0]", lo, nu, finite=True, allow_inf=True)
  hi = v.vector(f"{what}[1]", hi, nu, finite=True, allow_inf=True)
  if concrete:
    # Their numbers as given: under a trace of the caller's, jnp.asarray makes even constants
    # tracers, whose values _validate cannot see.
    lo_values = np.broadcast_to(np.asarray(given[0], np.float64), (nu,))
    hi_values = np.broadcast_to(np.asarray(given[1], np.float64), (nu,))
    if np.any(np.isnan(lo_values)) or np.any(np.isnan(hi_values)):
      raise ValueError(f"{what} must not hold NaN, got {v.shown(bounds)}")
    bad = np.flatnonzero(lo_values > hi_values)
    if bad.size:
      raise ValueError(f"{what}: lower > upper for controls {bad.tolist()} (lower "
                       f"{lo_values[bad].tolist()}, upper {hi_values[bad].tolist()})")
    check_open_sides(f"{what}[0]", lo_values, f"{what}[1]", hi_values)
  return lo, hi


def check_lower_upper(lower: Any, upper: Any) -> None:
  """Concrete bounds named lower and upper: lower <= upper, and each infinite on its own side
  only."""
  if np.any(np.asarray(lower) > np.asarray(upper)):
    raise ValueError(f"lower must be <= upper, got {v.shown(lower)} and {v.shown(upper)}")
  check_open_sides("lower", lower, "upper", upper)


def check_open_sides(lower_name: str, lower: Any, upper_name: str, upper: Any) -> None:
  """Refuse a lower bound of +inf or an upper bound of -inf (concrete numbers): infinite means
  no bound on its own side, and these would leave no value at all (clipped to +-inf)."""
  for name, values, side in ((lower_name, lower, np.inf), (upper_name, upper, -np.inf)):
    bad = np.flatnonzero(np.asarray(values, np.float64).ravel() == side)
    if bad.size:
      raise ValueError(f"{name} must not be {side} (an infinite bound is no bound, on its own "
                       f"side only), got it at {bad.tolist()}")


def rows(params: Params, n: int) -> Params:
  """params of one simulation (leaves with a leading 1, or already n rows) as n rows."""
  spec = params.spec
  new = {}
  for i, (name, value) in enumerate(zip(spec.fields, params.values(), strict=True)):
    if spec.is_shared(i):
      continue
    entry = spec.leaf_shape(i)
    shape = tuple(jnp.shape(value))
    if shape == (n, *entry):
      continue
    if shape not in ((1, *entry), entry):
      raise ValueError(f"params[{name!r}] must be of one simulation (shape {(1, *entry)}) or of "
                       f"{n} (shape {(n, *entry)}), got {shape}")
    new[name] = jnp.broadcast_to(jnp.asarray(value), (n, *entry))
  return params.replace(new) if new else params


def check_params_rows(params: Any, allowed: tuple[int, ...]) -> SimSpec:
  """params whose per-simulation leaves have one of the leading sizes allowed (or none)."""
  spec = spec_of(params)
  for i, (name, value) in enumerate(zip(spec.fields, params.values(), strict=True)):
    if spec.is_shared(i):
      continue
    entry = spec.leaf_shape(i)
    shape = tuple(jnp.shape(value))
    if shape != entry and not (shape[1:] == entry and len(shape) == len(entry) + 1
                               and shape[0] in allowed):
      want = " or ".join(str((n, *entry)) for n in allowed)
      raise ValueError(f"params[{name!r}] must have shape {want}, got {shape}")
  return spec


def check_planner_fits(planner: Any, spec: SimSpec, what: str) -> None:
  """A planner made on a model of other sizes than what's params would fail inside the trace,
  naming arrays the caller never passed: refused here, naming both."""
  sizes = (getattr(planner, "nstate", None), getattr(planner, "nu", None))
  if None not in sizes and sizes != (spec.nstate, spec.nu):
    raise ValueError(f"the planner plans with a model of nstate={sizes[0]}, nu={sizes[1]}, but "
                     f"{what} is of a model of nstate={spec.nstate}, nu={spec.nu}: make the "
                     f"planner with Params of the robots' model")


def failed(warnings: jax.Array, errors: jax.Array) -> jax.Array:
  """(...,) whether a simulation had a MuJoCo error (partial results: `return_errors`), or
  MuJoCo reset it (bad qpos/qvel/qacc) or zeroed its controls."""
  return jnp.any(warnings[..., _DIVERGED] > 0, axis=-1) | (errors != 0)


def observe_shapes(spec: SimSpec, observe: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
  shapes = {}
  for name in observe:
    try:
      shapes[name] = _checks.forward_shape(spec, name)
    except ValueError as e:
      raise ValueError(f"Cost.observe names {name!r}: {e}") from None
  return shapes


def residuals(cost: cost_lib.Cost, states: jax.Array, ctrls: jax.Array, obs: dict,
              t: jax.Array) -> jax.Array:
  """residual of every state row (..., nstate) with its ctrl (..., nu), obs and knot t (...)."""
  lead = states.shape[:-1]
  m = math.prod(lead)
  flat_obs = {k: v.reshape(m, *v.shape[len(lead):]) for k, v in obs.items()}
  out = jax.vmap(cost.residual)(states.reshape(m, -1), ctrls.reshape(m, -1), flat_obs,
                                jnp.broadcast_to(t, lead).reshape(m).astype(jnp.int32))
  return out.reshape(*lead, out.shape[-1])


def plan_residuals(cost: cost_lib.Cost, states: jax.Array, ctrls: jax.Array, obs: dict
                   ) -> jax.Array:
  """(..., T + 1, nr) residuals of trajectories: states (..., T + 1, nstate) from the start,
  ctrls (..., T, nu), obs of each state (..., T + 1, ...)."""
  horizon = ctrls.shape[-2]
  held = jnp.concatenate([ctrls, ctrls[..., -1:, :]], axis=-2)  # the last control at t = T
  return residuals(cost, states, held, obs, jnp.arange(horizon + 1))


def plan_costs(cost: cost_lib.Cost, w: jax.Array, states: jax.Array, ctrls: jax.Array,
               obs: dict) -> jax.Array:
  """(...) total cost of trajectories (see plan_residuals), NaN made infinite."""
  r = plan_residuals(cost, states, ctrls, obs)
  total = jnp.sum(cost_lib.knot_cost(cost.terms, r, w), axis=-1)
  return jnp.where(jnp.isnan(total), jnp.inf, total)


def check_residual(cost: cost_lib.Cost, spec: SimSpec, dtype: Any) -> int:
  """The residual's size, from its shape on one knot (jax.eval_shape: nothing runs)."""
  shapes = observe_shapes(spec, cost.observe)
  args = (jax.ShapeDtypeStruct((spec.nstate,), dtype), jax.ShapeDtypeStruct((spec.nu,), dtype),
          {k: jax.ShapeDtypeStruct(s, dtype) for k, s in shapes.items()},
          jax.ShapeDtypeStruct((), jnp.int32))
  try:
    out = jax.eval_shape(cost.residual, *args)
  except Exception as e:
    raise ValueError(f"Cost.residual(state ({spec.nstate},), ctrl ({spec.nu},), obs "
                     f"{ {k: s for k, s in shapes.items()} }, t ()) failed: "
                     f"{type(e).__name__}: {e}") from e
  want = cost_lib.residual_size(cost.terms)
  if not hasattr(out, "shape") or out.shape != (want,):
    got = getattr(out, "shape", type(out).__name__)
    raise ValueError(f"Cost.residual must return one vector of shape ({want},) (the terms' sizes "
                     f"{[t.size for t in cost.terms]} add up to {want}), got {got}")
  if not jnp.issubdtype(out.dtype, jnp.floating):
    raise ValueError(f"Cost.residual must return floating-point values, got {out.dtype}")
  return want


def first_bad_knot(cost: cost_lib.Cost, w: jax.Array, r: Any) -> str | None:
  """Where residuals r (T + 1, nr) of a plan make its cost not finite, in words, or None."""
  r = np.asarray(r)
  start = 0
  for i, term in enumerate(cost.terms):
    block = r[:, start : start + term.size]
    bad = np.flatnonzero(~np.all(np.isfinite(block), axis=-1))
    if bad.size:
      return (f"Cost.residual returned {block[bad[0]].tolist()} for term {i} at knot "
              f"{int(bad[0])}")
    start += term.size
  values = np.asarray(cost_lib.knot_cost(cost.terms, jnp.asarray(r), w))
  bad = np.flatnonzero(~np.isfinite(values))
  if bad.size:
    return f"the cost at knot {int(bad[0])} is {values[bad[0]]}"
  return None


def is_concrete(*trees: Any) -> bool:
  return not any(isinstance(x, Tracer) for x in jax.tree_util.tree_leaves(trees))


def simulate(cost: cost_lib.Cost, params_one: Params, start: jax.Array, ctrls: jax.Array,
             nstep: int) -> tuple[jax.Array, dict, jax.Array]:
  """The trajectory of ctrls (T, nu) from start: states (T + 1, nstate) and obs, whether it
  failed (a MuJoCo error, or MuJoCo reset it)."""
  fields = cost.observe
  if fields:
    states, _, obs, warnings, errors = fn.rollout(
      start[None], ctrls[None], params_one, nstep=nstep, observe=fields, return_warnings=True,
      return_errors=True)
    first = fn.forward(start[None], params_one, fields)
    obs = {k: jnp.concatenate([first[k], obs[k][0]]) for k in fields}
  else:
    states, _, warnings, errors = fn.rollout(start[None], ctrls[None], params_one, nstep=nstep,
                                             return_warnings=True, return_errors=True)
    obs = {}
  return jnp.concatenate([start[None], states[0]]), obs, failed(warnings[0], errors[0])
