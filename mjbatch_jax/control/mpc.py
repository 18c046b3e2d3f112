"""Receding horizon: plan, apply the first control(s) to the real system, shift, repeat.

`receding_horizon(planner, params)` returns the whole control step as one jitted function; any
Planner serves (control.sampling's, or ilqr_planner's: iLQR warm-started from the shifted plan).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from mjbatch_jax import functions as fn
from mjbatch_jax.control import _plumbing as pl
from mjbatch_jax.control import cost as cost_lib
from mjbatch_jax.control.ilqr import ILQRSettings, ilqr, shift
from mjbatch_jax.control.sampling import Planner
from mjbatch_jax.params import Params


class ILQRPlan(NamedTuple):
  """ilqr_planner's state: the plan (T, nu) and the regularisation to start the next solve from."""

  ctrls: jax.Array
  mu: jax.Array


def ilqr_planner(cost: cost_lib.Cost, params: Params, *, horizon: int, nstep: int = 1,
                 iterations: int = 1, settings: ILQRSettings | None = None,
                 bounds: Any = None) -> Planner:
  """iLQR as a Planner: each update runs `iterations` from the (shifted) previous plan.

  settings default to ILQRSettings(final_gains=False): the gains of the last backward pass are
  returned without linearising once more. Info is the ILQRResult.
  """
  settings = ILQRSettings(final_gains=False) if settings is None else settings
  spec = pl.check_params_rows(params, (1,))
  pl.check_count("horizon", horizon)

  def init(ctrls: Any = None) -> ILQRPlan:
    if ctrls is None:
      lo, hi = pl.check_bounds(bounds, spec)
      ctrls = jnp.broadcast_to(jnp.clip(0.0, lo, hi), (horizon, spec.nu))
    ctrls = pl.check_plan("ctrls", ctrls, spec.nu)
    if ctrls.shape[0] != horizon:
      raise ValueError(f"ctrls must have the horizon's {horizon} controls, got {ctrls.shape[0]}")
    return ILQRPlan(ctrls, jnp.asarray(settings.mu_init, ctrls.dtype))

  def update(plan: ILQRPlan, state: Any, key: Any = None, params_now: Params | None = None):
    del key  # deterministic
    result = ilqr(cost, params if params_now is None else params_now, state, plan.ctrls,
                  nstep=nstep, iterations=iterations, bounds=bounds, mu=plan.mu,
                  settings=settings)
    return ILQRPlan(result.ctrls, result.mu), result

  def shifted(plan: ILQRPlan, n: int = 1) -> ILQRPlan:
    return ILQRPlan(shift(plan.ctrls, n), plan.mu)

  return Planner(init, update, lambda plan: plan.ctrls, shifted, horizon, nstep)


def receding_horizon(planner: Planner, params: Params, *, apply: int = 1,
                     randomize: Callable[[jax.Array], Params] | None = None
                     ) -> Callable[[jax.Array, Any, jax.Array], tuple[jax.Array, Any, Any]]:
  """The control step `(state, plan, key) -> (state, plan, info)` as one jitted function.

  It plans from state (planner.update), applies the plan's first `apply` controls to the real
  system (params: one simulation, which may differ from the planner's model) for planner.nstep
  physics steps each, and shifts the plan by as many controls.

  Args:
    planner: a Planner (control.sampling, control.ilqr_planner).
    params: Params of the real system, one simulation.
    apply: controls applied per step (at most the horizon).
    randomize: optional key -> Params of num_samples rows drawn for this step's candidates
      (per-candidate domain randomisation, e.g. with mjbatch_jax.randomize).

  Example:
    step = control.receding_horizon(planner, sim.params(1))
    for k in range(steps):
      state, plan, info = step(state, plan, jax.random.fold_in(key, k))
  """
  pl.check_params_rows(params, (1,))
  apply = pl.check_count("apply", apply)
  if apply > planner.horizon:
    raise ValueError(f"apply ({apply}) must be at most the planner's horizon ({planner.horizon})")

  @jax.jit
  def control_step(state: jax.Array, plan: Any, key: jax.Array):
    plan_key, draw_key = jax.random.split(key)
    candidates = None if randomize is None else randomize(draw_key)
    plan, info = planner.update(plan, state, plan_key, candidates)
    ctrls = planner.controls(plan)[:apply]
    states, _ = fn.rollout(state[None], ctrls[None], params, nstep=planner.nstep)
    return states[0, -1], planner.shift(plan, apply), info

  return control_step


__all__ = ["ILQRPlan", "ilqr_planner", "receding_horizon"]
