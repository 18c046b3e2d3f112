"""Replaying a plan on many robots: open loop, closed loop with the plan's gains, and its cost.

A plan (ctrls (T, nu), each held for nstep physics steps; from iLQR also its trajectory states
(T + 1, nstate) and feedback gains (T, nu, nx)) is replayed on N robots at once, the robots the
rows of each physics call: params with N rows (a robot each, e.g. randomised masses), or one row
for all. Every physics step is recorded, (N, T * nstep, ...), so contacts and flight phases
shorter than a knot are seen.

- `open_loop`: u_t = ctrls[t].
- `closed_loop`: u_t = clip(ctrls[t] + K_t dx_t), dx_t the measured state minus the plan's
  state t in the state's tangent space (control.ilqr's convention: quaternion joints through
  tangent.differentiate_pos), what a tracking controller on the robot does each knot.
- `plan_cost`: the cost of the plan replayed open loop, summed as control.ilqr sums it.
"""

from typing import Any

import jax
import jax.numpy as jnp

from mjbatch_jax import _programs
from mjbatch_jax import _validate as v
from mjbatch_jax import functions as fn
from mjbatch_jax.control import _plumbing as pl
from mjbatch_jax.control import cost as cost_lib
from mjbatch_jax.params import Params, SimSpec
from mjbatch_jax.tangent import StateTangent


def params_rows(params: Any) -> tuple[SimSpec, int | None]:
  """params' spec and the robots its per-simulation leaves hold (None: no leading axis)."""
  spec = pl.spec_of(params)
  sizes = {}
  for i, (name, value) in enumerate(zip(spec.fields, params.values(), strict=True)):
    if spec.is_shared(i):
      continue
    entry = spec.leaf_shape(i)
    shape = tuple(jnp.shape(value))
    if shape == entry:
      continue
    if len(shape) != len(entry) + 1 or shape[1:] != entry:
      want = ", ".join(["N", *(str(d) for d in entry)])
      raise ValueError(f"params[{name!r}] must have shape ({want}) (a row per robot) or "
                       f"{entry}, got {shape}")
    sizes[name] = shape[0]
  if len(set(sizes.values())) > 1:
    raise ValueError(f"params' fields must have the same number of rows (one per robot), got "
                     f"{sizes}")
  return spec, next(iter(sizes.values()), None)


def robot_count(params_rows_given: int | None, named: list[tuple[str, Any, int]]) -> int:
  """N, the robots: the leading size of every batched argument (name, array, its ndim without
  the robots' axis), params of one row or none serving every robot."""
  counts = {name: x.shape[0] for name, x, ndim in named if x.ndim == ndim + 1}
  if params_rows_given is not None and params_rows_given != 1:
    counts["params"] = params_rows_given
  if len(set(counts.values())) > 1:
    given = ", ".join(f"{name} {n}" for name, n in counts.items())
    raise ValueError(f"the arguments disagree on the number of robots (their leading axis): "
                     f"{given}")
  return next(iter(counts.values()), 1)


def check_rows(name: str, x: Any, shape: tuple[int, ...], what: str, finite: bool = False
               ) -> jax.Array:
  """x of one robot's shape, or with a robots' axis before it."""
  x = v.array(name, x, finite=finite)
  if tuple(x.shape[-len(shape):]) != shape or x.ndim not in (len(shape), len(shape) + 1):
    raise ValueError(f"{name} must be {what} of shape {v.pattern(shape)} or "
                     f"{v.pattern(('N', *shape))} (a row per robot), got {tuple(x.shape)}")
  return x


def _plan(name: str, ctrls: Any, nu: int) -> jax.Array:
  ctrls = v.array(name, ctrls, finite=True)
  if ctrls.ndim not in (2, 3) or ctrls.shape[-1] != nu or ctrls.shape[-2] < 1:
    raise ValueError(f"{name} must be a plan of shape (T, nu={nu}) or (N, T, nu={nu}) (a row per "
                     f"robot) with T >= 1, got {tuple(ctrls.shape)}")
  return ctrls


def check_inputs(params: Any, start: Any, ctrls: Any, nstep: Any
                 ) -> tuple[SimSpec, int, jax.Array, jax.Array, int]:
  """A replay's arguments checked, as open_loop and plan_cost take them (fly_variants checks
  its first flight with it before any physics runs): the spec, N, start (N, nstate), ctrls
  (N, T, nu) and nstep."""
  spec, rows = params_rows(params)
  nstep = pl.check_count("nstep", nstep)
  start = check_rows("start", start, (spec.nstate,), "a state row", finite=True)
  ctrls = _plan("ctrls", ctrls, spec.nu).astype(start.dtype)
  n = robot_count(rows, [("start", start, 1), ("ctrls", ctrls, 2)])
  start = jnp.broadcast_to(start, (n, spec.nstate))
  ctrls = jnp.broadcast_to(ctrls, (n, *ctrls.shape[-2:]))
  return spec, n, start, ctrls, nstep


def open_loop(params: Params, start: Any, ctrls: Any, nstep: int = 1
              ) -> tuple[jax.Array, jax.Array]:
  """The plan replayed open loop on N robots: every physics step's states and sensordata.

  Args:
    params: Params of the N robots (leaves (N, ...)), or of one (leaves (1, ...)) for all.
    start: (nstate,) the state row every robot starts from, or (N, nstate) one each.
    ctrls: (T, nu) the plan, or (N, T, nu) one each; control t is held for nstep steps.
    nstep: physics steps per control.

  Returns:
    states (N, T * nstep, nstate) after each physics step and sensordata (N, T * nstep,
    nsensordata), one rollout call; states[:, nstep - 1::nstep] are the states after each
    knot, as control.ilqr's result.states[1:]. Traceable and differentiable as rollout is.

  Example:
    states, sensors = control.open_loop(robots, start, result.ctrls, nstep=4)
  """
  _, n, start, ctrls, nstep = check_inputs(params, start, ctrls, nstep)
  # Each control repeated nstep times, a knot of one physics step each: every step recorded.
  held = jnp.repeat(ctrls, nstep, axis=1)
  return fn.rollout(start, held, pl.rows(params, n))


def closed_loop(params: Params, start: Any, ctrls: Any, gains: Any, states: Any,
                nstep: int = 1, bounds: Any = None) -> tuple[jax.Array, jax.Array]:
  """The plan tracked with its feedback gains on N robots: every physics step's states and
  sensordata.

  At knot t every robot measures its state x_t and applies
  u_t = clip(ctrls[t] + gains[t] dx_t, bounds) for nstep physics steps, dx_t = x_t - states[t]
  in the state's tangent space (tangent.StateTangent.difference: quaternion joints rotate).
  With zero gains and controls inside bounds it is open_loop, to the bit.

  Args:
    params: Params of the N robots (leaves (N, ...)), or of one (leaves (1, ...)) for all.
    start: (nstate,) or (N, nstate) the robots' first states.
    ctrls: (T, nu) or (N, T, nu) the plan's controls (ILQRResult.ctrls).
    gains: (T, nu, nx) or (N, T, nu, nx) its feedback gains (ILQRResult.gains,
      control.ilqr_gains), nx = 2 nv + na.
    states: (T + 1, nstate) or (N, T + 1, nstate) its trajectory (ILQRResult.states).
    nstep: physics steps per control.
    bounds: (lower, upper) of the controls; default the model's ctrlrange where limited.

  Returns:
    states (N, T * nstep, nstate) and sensordata (N, T * nstep, nsensordata), a rollout call
    of N rows per knot in one lax.scan.

  Example:
    result = control.ilqr(cost, sim.params(1), start, ctrls, nstep=4)
    states, sensors = control.closed_loop(robots, start, result.ctrls, result.gains,
                                          result.states, nstep=4)
  """
  spec, rows = params_rows(params)
  nstep = pl.check_count("nstep", nstep)
  start = check_rows("start", start, (spec.nstate,), "a state row", finite=True)
  ctrls = _plan("ctrls", ctrls, spec.nu).astype(start.dtype)
  horizon = ctrls.shape[-2]
  tangent = StateTangent.of(spec.model_info.model)
  gains = check_rows("gains", gains, (horizon, spec.nu, tangent.nx),
                     "the plan's feedback gains (T, nu, nx)", finite=True).astype(start.dtype)
  states = check_rows("states", states, (horizon + 1, spec.nstate),
                      "the plan's trajectory (T + 1 states)", finite=True).astype(start.dtype)
  lo, hi = pl.check_bounds(bounds, spec)
  n = robot_count(rows, [("start", start, 1), ("ctrls", ctrls, 2), ("gains", gains, 3),
                         ("states", states, 2)])
  return _closed_loop(tangent, nstep, pl.rows(params, n),
                      jnp.broadcast_to(start, (n, spec.nstate)),
                      jnp.broadcast_to(ctrls, (n, *ctrls.shape[-2:])),
                      jnp.broadcast_to(gains, (n, *gains.shape[-3:])),
                      jnp.broadcast_to(states, (n, *states.shape[-2:])),
                      lo.astype(start.dtype), hi.astype(start.dtype))


def _closed_loop_impl(tangent, nstep, params, start, ctrls, gains, states, lo, hi):
  n, nu = start.shape[0], ctrls.shape[-1]

  def knot(x, inputs):
    u, gain, nominal = inputs
    dx = tangent.difference(nominal, x)
    u = jnp.clip(u + jnp.einsum("nux,nx->nu", gain, dx), lo, hi)
    xs, sensors = fn.rollout(x, jnp.broadcast_to(u[:, None], (n, nstep, nu)), params)
    return xs[:, -1], (xs, sensors)

  inputs = (ctrls.swapaxes(0, 1), gains.swapaxes(0, 1), states[:, :-1].swapaxes(0, 1))
  _, (xs, sensors) = jax.lax.scan(knot, start, inputs)
  # (T, N, nstep, ...) -> (N, T * nstep, ...): sizes spelled out, since a model without
  # sensors has sensordata of width 0, and -1 is then no size at all.
  steps = ctrls.shape[1] * nstep
  return (xs.swapaxes(0, 1).reshape(n, steps, xs.shape[-1]),
          sensors.swapaxes(0, 1).reshape(n, steps, sensors.shape[-1]))


def plan_cost(cost: cost_lib.Cost, params: Params, start: Any, ctrls: Any, nstep: int = 1
              ) -> jax.Array:
  """(N,) the cost of the plan replayed open loop on each robot, as control.ilqr counts it.

  The residual of each of the T + 1 states from the start (the last with the last control),
  the terms' norms and weights summed, as ILQRResult.cost of that plan; a robot whose
  simulation fails (a MuJoCo error, or MuJoCo reset it) or whose cost is NaN costs infinity.

  Args:
    cost: a control.Cost.
    params: Params of the N robots (leaves (N, ...)), or of one (leaves (1, ...)) for all.
    start: (nstate,) or (N, nstate) the robots' first states.
    ctrls: (T, nu) or (N, T, nu) the plan.
    nstep: physics steps per control.

  Returns:
    (N,) costs; (1,) for one robot.

  Example:
    result = control.ilqr(cost, sim.params(1), start, ctrls, nstep=4)
    control.plan_cost(cost, sim.params(1), start, result.ctrls, nstep=4)[0]  # ~ result.cost
  """
  cost = pl.check_cost(cost)
  spec, n, start, ctrls, nstep = check_inputs(params, start, ctrls, nstep)
  pl.check_residual(cost, spec, start.dtype)
  w = cost_lib.weights(cost.terms, ctrls.shape[1]).astype(start.dtype)
  p = pl.rows(params, n)
  return _plan_cost(cost_lib.static(cost), nstep, w, _one_row_each(p), start, ctrls)


def _one_row_each(params: Params) -> Params:
  """params of N rows with leaves (N, 1, ...): vmapped, each robot is one simulation."""
  spec = params.spec
  return params.replace({name: value[:, None] for i, (name, value)
                         in enumerate(zip(spec.fields, params.values(), strict=True))
                         if not spec.is_shared(i)})


def _plan_cost_impl(cost, nstep, w, params, start, ctrls):
  spec = params.spec
  mapped = [None if spec.is_shared(i) else 0 for i in range(len(spec.fields))]
  axes = params.replace(dict(zip(spec.fields, mapped, strict=True))) if spec.fields else None

  def one(p, x, us):
    states, obs, failed = pl.simulate(cost, p, x, us, nstep)
    return jnp.where(failed, jnp.inf, pl.plan_costs(cost, w, states, us, obs))

  return jax.vmap(one, in_axes=(axes, 0, 0))(params, start, ctrls)


# Programs per tangent space or cost (a user's function) and nstep: bounded, as the planners'.
_closed_loop = _programs.BoundedJit(_closed_loop_impl, static_argnums=(0, 1))
_plan_cost = _programs.BoundedJit(_plan_cost_impl, static_argnums=(0, 1))


__all__ = ["closed_loop", "open_loop", "plan_cost"]
