"""Receding horizon: plan, apply the first control(s) to the real system, shift, repeat.

`receding_horizon(planner, params)` returns the whole control step as one jitted function; any
Planner serves (control.sampling's, or ilqr_planner's: iLQR warm-started from the shifted plan).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax import errors
from mjbatch_jax import functions as fn
from mjbatch_jax.control import _plumbing as pl
from mjbatch_jax.control import cost as cost_lib
from mjbatch_jax.control.ilqr import ILQRSettings, _check_settings, ilqr, shift
from mjbatch_jax.control.sampling import Planner
from mjbatch_jax.params import Params

# MuJoCo's warnings after which the real system's new state is not what the controls did: it
# reset the simulation (mj_checkPos/Vel/Acc), or it zeroed a bad control (mj_checkCtrl... in
# mj_step: a NaN or huge ctrl).
_RESET = np.array([int(mujoco.mjtWarning.mjWARN_BADQPOS), int(mujoco.mjtWarning.mjWARN_BADQVEL),
                   int(mujoco.mjtWarning.mjWARN_BADQACC)])
_BAD_CTRL = int(mujoco.mjtWarning.mjWARN_BADCTRL)


class ILQRPlan(NamedTuple):
  """ilqr_planner's state: the plan (T, nu) and the regularisation to start the next solve from.

  Made by the planner's init and returned by its update and shift.

  Attributes:
    ctrls: (T, nu) the plan's controls, one per knot of the horizon.
    mu: the iLQR regularisation (a scalar >= 0) that the last solve ended with
      (ILQRResult.mu), from which the next update's solve starts; init sets
      settings.mu_init.
  """

  ctrls: jax.Array
  mu: jax.Array


class StepInfo(NamedTuple):
  """What receding_horizon's control step saw: the planner's info and the real system's step.

  The planner's info's fields read through (info.cost, info.failed, ... as on the planner's
  own info), so code written for the planner's info keeps working.

  Attributes:
    planner: the planner's info (SamplingResult, ILQRResult, ...).
    real_warnings: (apply, mjNWARNING) int32: MuJoCo's warnings of the real system, per applied
      control (mjbatch_jax.step's return_warnings).
    real_reset: (apply,) bool: MuJoCo reset the real system during that control (its qpos, qvel
      or qacc went bad: a NaN or diverging state), so the new state is its reset state.
    real_bad_ctrl: (apply,) bool: MuJoCo found that control bad (NaN or too large) and applied
      zeros instead.
    real_failed: bool: any of those in this step: the new state is not what the plan's controls
      did to the state given.
  """

  planner: Any
  real_warnings: jax.Array
  real_reset: jax.Array
  real_bad_ctrl: jax.Array
  real_failed: jax.Array

  def __getattr__(self, name: str) -> Any:
    # Only called for names that are not StepInfo's own: those of the planner's info.
    if name.startswith("__"):
      raise AttributeError(name)
    try:
      return getattr(self.planner, name)
    except AttributeError:
      raise AttributeError(f"StepInfo has no field {name!r}, nor has the planner's info "
                           f"({type(self.planner).__name__})") from None


def ilqr_planner(cost: cost_lib.Cost, params: Params, *, horizon: int, nstep: int = 1,
                 iterations: int = 1, settings: ILQRSettings | None = None,
                 bounds: Any = None) -> Planner:
  """iLQR as a Planner: each update runs `iterations` from the (shifted) previous plan.

  settings default to ILQRSettings(final_gains=False): the gains of the last backward pass are
  returned without linearising once more. Info is the ILQRResult. The arguments are checked
  here, as ilqr checks them; init refuses non-finite controls. The plan state is an ILQRPlan,
  and update ignores its key (iLQR is deterministic).

  Args:
    cost: a control.Cost.
    params: Params of one simulation (sim.params(1, ...)): the model the plans are for (an
      update's own params, one simulation, replace them for that call).
    horizon: T controls per plan, an int >= 1.
    nstep: physics steps per control, an int >= 1.
    iterations: iLQR iterations per update, an int >= 0.
    settings: ILQRSettings (default: ILQRSettings(final_gains=False)).
    bounds: (lower, upper) of the controls, numbers or (nu,) arrays; default: the model's
      ctrlrange where it is limited.

  Returns:
    A Planner whose init, update, controls and shift work on ILQRPlan.

  Raises:
    ValueError: an argument is out of its range, or the cost's residual does not fit the model
      or its terms.

  Example:
    planner = control.ilqr_planner(cost, sim.params(1), horizon=50, nstep=2, iterations=2)
    step = control.receding_horizon(planner, sim.params(1))
    state, plan, info = step(state, planner.init(), key)
  """
  settings = _check_settings(ILQRSettings(final_gains=False) if settings is None else settings)
  cost = pl.check_cost(cost)
  spec = pl.check_params_rows(params, (1,))
  horizon = pl.check_count("horizon", horizon)
  nstep = pl.check_count("nstep", nstep)
  iterations = pl.check_count("iterations", iterations, low=0)
  lo, hi = pl.check_bounds(bounds, spec)
  pl.check_residual(cost, spec, jnp.result_type(float))
  cost_lib.weights(cost.terms, horizon)

  def init(ctrls: Any = None) -> ILQRPlan:
    if ctrls is None:
      ctrls = jnp.broadcast_to(jnp.clip(0.0, lo, hi), (horizon, spec.nu))
    ctrls = pl.check_plan("ctrls", ctrls, spec.nu, finite=True)
    if ctrls.shape[0] != horizon:
      raise ValueError(f"ctrls must have the horizon's {horizon} controls, got {ctrls.shape[0]}")
    return ILQRPlan(ctrls, jnp.asarray(settings.mu_init, ctrls.dtype))

  def checked(plan: Any) -> ILQRPlan:
    if not isinstance(plan, ILQRPlan):
      raise ValueError(f"plan must be a control.ILQRPlan (from planner.init), got "
                       f"{type(plan).__name__}")
    ctrls = v.array("plan.ctrls", plan.ctrls, (horizon, spec.nu), finite=True)
    return ILQRPlan(ctrls, pl.check_scalar("plan.mu", plan.mu, low=0.0))

  def update(plan: ILQRPlan, state: Any, key: Any = None, params_now: Params | None = None):
    del key  # deterministic
    plan = checked(plan)
    result = ilqr(cost, params if params_now is None else params_now, state, plan.ctrls,
                  nstep=nstep, iterations=iterations, bounds=bounds, mu=plan.mu,
                  settings=settings)
    return ILQRPlan(result.ctrls, result.mu), result

  def controls(plan: ILQRPlan) -> jax.Array:
    return checked(plan).ctrls

  def shifted(plan: ILQRPlan, n: int = 1) -> ILQRPlan:
    plan = checked(plan)
    return ILQRPlan(shift(plan.ctrls, v.integer("n", n, low=0)), plan.mu)

  return Planner(init, update, controls, shifted, horizon, nstep, spec.nstate, spec.nu)


def receding_horizon(planner: Planner, params: Params, *, apply: int = 1,
                     randomize: Callable[[jax.Array], Params] | None = None
                     ) -> Callable[[Any, Any, Any], tuple[jax.Array, Any, StepInfo]]:
  """The control step `(state, plan, key) -> (state, plan, info)` as one jitted function.

  It plans from state (planner.update), applies the plan's first `apply` controls to the real
  system (params: one simulation, which may differ from the planner's model) for planner.nstep
  physics steps each, and shifts the plan by as many controls.

  info is a StepInfo: the planner's info (its fields read through: info.cost, info.failed, ...)
  and the real system's step: MuJoCo's warnings per applied control (`real_warnings`), whether
  MuJoCo reset the real system (`real_reset`: a NaN or diverging state comes back as the model's
  reset state) or zeroed a bad control (`real_bad_ctrl`), and `real_failed`, either of them. A
  MuJoCo error in the real system's step (or in the planner's physics calls outside their
  partial results) raises mjbatch_jax.SimulationError: called with concrete arrays, the step
  waits for its result so that the error is ours; called inside a function of yours that jit
  traces, wrap that function's call in mjbatch_jax.simulation_errors().

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
      if info.real_failed: ...   # MuJoCo reset the real system or refused a control
  """
  if not isinstance(planner, Planner):
    raise ValueError(f"planner must be a control.Planner (control.sampling, "
                     f"control.ilqr_planner), got {type(planner).__name__}")
  horizon = pl.check_count("planner.horizon", planner.horizon)
  nstep = pl.check_count("planner.nstep", planner.nstep)
  spec = pl.check_params_rows(params, (1,))
  pl.check_planner_fits(planner, spec, "params")
  apply = pl.check_count("apply", apply)
  if apply > horizon:
    raise ValueError(f"apply ({apply}) must be at most the planner's horizon ({horizon})")
  if randomize is not None and not callable(randomize):
    raise ValueError(f"randomize must be a function key -> Params or None, got "
                     f"{v.shown(randomize)}")

  @jax.jit
  def control_step(state: jax.Array, plan: Any, key: jax.Array):
    plan_key, draw_key = jax.random.split(key)
    candidates = None if randomize is None else randomize(draw_key)
    plan, info = planner.update(plan, state, plan_key, candidates)
    ctrls = planner.controls(plan)[:apply]

    def real(x, u):
      x, warnings = fn.step(x, u[None], params, nstep=nstep, return_warnings=True)
      return x, warnings[0]

    new, warnings = jax.lax.scan(real, state[None], ctrls)
    reset = jnp.any(warnings[:, _RESET] > 0, axis=-1)
    bad_ctrl = warnings[:, _BAD_CTRL] > 0
    step_info = StepInfo(info, warnings, reset, bad_ctrl, jnp.any(reset | bad_ctrl))
    return new[0], planner.shift(plan, apply), step_info

  def checked_step(state: Any, plan: Any, key: Any) -> tuple[jax.Array, Any, StepInfo]:
    """One control step: (state (nstate,), plan, key) -> (state, plan, StepInfo)."""
    state = pl.check_start(state, spec, "state")
    key = pl.check_key("key", key)
    if not pl.is_concrete(state, plan, key):
      return control_step(state, plan, key)  # traced by the caller's jit: its errors are JAX's
    with errors.simulation_errors():
      return jax.block_until_ready(control_step(state, plan, key))

  return checked_step


__all__ = ["ILQRPlan", "StepInfo", "ilqr_planner", "receding_horizon"]
