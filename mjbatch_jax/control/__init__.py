"""Planners as pure JAX functions over the batched physics: iLQR, sampling MPC, receding horizon.

  from mjbatch_jax import control
  cost = control.Cost(residual, terms=(control.Term(3, 100.0, "huber", 0.05), ...))
  result = control.ilqr(cost, sim.params(1), start, ctrls, nstep=4)
  planner = control.sampling(cost, sim.params(1), horizon=25, nstep=4,
                             settings=control.CEMSettings(num_samples=1024))
  step = control.receding_horizon(planner, sim.params(1))   # one jitted control step
  state, plan, info = step(state, plan, key)   # info: the planner's and the real step's

See docs/control.md.
"""

import warnings
from typing import Any

from mjbatch_jax.control import splines
from mjbatch_jax.control.cost import NORMS, Cost, Term, norm
from mjbatch_jax.control.fleet import FleetRun, choose_tail, receding_horizon_fleet, with_tail
from mjbatch_jax.control.guard import EnsembleGuard, ensemble_guard
from mjbatch_jax.control.ilqr import ILQR_STOPS, ILQRResult, ILQRSettings, ilqr, ilqr_gains, shift
from mjbatch_jax.control.mpc import ILQRPlan, StepInfo, ilqr_planner, receding_horizon
from mjbatch_jax.control.qp import box_qp
from mjbatch_jax.control.replay import closed_loop, open_loop, plan_cost
from mjbatch_jax.control.sampling import (
  METHODS,
  SETTINGS,
  CEMSettings,
  MPPISettings,
  Planner,
  PredictiveSettings,
  SamplingPlan,
  SamplingResult,
  SamplingSettings,
  cem_update,
  gaussian_samples,
  mppi_update,
  sampling,
)
from mjbatch_jax.control.search import CEMIteration, CEMSearchResult, cem_search
from mjbatch_jax.control.variants import FlownVariants, fly_variants, plan_variants


def __getattr__(name: str) -> Any:
  if name == "SamplingInfo":  # renamed as ILQRResult's sibling
    warnings.warn("control.SamplingInfo is control.SamplingResult now; SamplingInfo will be "
                  "removed in the next release", DeprecationWarning, stacklevel=2)
    return SamplingResult
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
  "METHODS",
  "NORMS",
  "SETTINGS",
  "CEMIteration",
  "CEMSearchResult",
  "CEMSettings",
  "Cost",
  "EnsembleGuard",
  "FleetRun",
  "FlownVariants",
  "ILQR_STOPS",
  "ILQRPlan",
  "ILQRResult",
  "ILQRSettings",
  "MPPISettings",
  "Planner",
  "PredictiveSettings",
  "SamplingPlan",
  "SamplingResult",
  "SamplingSettings",
  "StepInfo",
  "Term",
  "box_qp",
  "cem_search",
  "cem_update",
  "fly_variants",
  "choose_tail",
  "closed_loop",
  "ensemble_guard",
  "gaussian_samples",
  "ilqr",
  "ilqr_gains",
  "ilqr_planner",
  "mppi_update",
  "norm",
  "open_loop",
  "plan_cost",
  "plan_variants",
  "receding_horizon",
  "receding_horizon_fleet",
  "sampling",
  "shift",
  "splines",
  "with_tail",
]
