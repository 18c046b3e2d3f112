"""A guard for control.ilqr: keep what the warm start achieves on an ensemble of robots.

A tracking cost knows one robot. A step that lowers it can still give a plan that works on the
nominal robot no longer, or on fewer randomised robots (see mjbatch_jax.ensemble) than the warm
start did. `ensemble_guard` makes control.ilqr's accept out of three things: a traceable replay
of a plan on the ensemble's robots (row 0 the nominal one), a host-side pass rule per robot,
and the warm start. ilqr asks it only about a step that lowers the cost; it accepts when the
nominal robot still passes and at least as many randomised robots pass as under the warm start,
and it keeps a record of what it refused.

Example:
  robots = ensemble.params("search", 8)                # the nominal robot and 8 randomised
  guard = control.ensemble_guard(lambda u: control.open_loop(robots, start, u, nstep),
                                 lambda row: lands(*row), warm, log=print)
  result = control.ilqr(cost, sim.params(1), start, warm, nstep=nstep, accept=guard.accept)
  guard.refusals, guard.asked                          # what it refused, how often it was asked
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from mjbatch_jax import _validate as v
from mjbatch_jax.ensemble import EnsembleResult, evaluate, per_robot


class EnsembleGuard:
  """ensemble_guard's accept and its record.

  Attributes:
    accept: control.ilqr's accept (states, ctrls) -> bool (traced), or None when the warm start
      fails on the nominal robot: there is nothing to keep, and the solve runs unguarded.
    warm: the warm start's EnsembleResult (metrics not kept).
    refusals: one EnsembleResult per refused plan (metrics not kept), in the order asked.
    asked: how many plans the guard judged (accepted and refused).
  """

  def __init__(self, accept: Callable[[jax.Array, jax.Array], jax.Array] | None,
               warm: EnsembleResult):
    self.accept = accept
    self.warm = warm
    self.refusals: list[EnsembleResult] = []
    self.asked = 0

  def __repr__(self) -> str:
    state = "unguarded" if self.accept is None else "guarding"
    return (f"EnsembleGuard({state}; warm start: {self.warm}; asked {self.asked}, refused "
            f"{len(self.refusals)})")


def ensemble_guard(
  replay: Callable[[jax.Array], Any],
  predicate: Callable[[Any], Any],
  warm_start: Any,
  *,
  nominal: bool = True,
  log: Callable[[str], Any] | None = None,
  cost: Callable[[jax.Array], Any] | None = None,
) -> EnsembleGuard:
  """An accept for control.ilqr that keeps the warm start's robustness on an ensemble of robots.

  The warm start is replayed (eagerly, now) and judged. ilqr's accept(states, ctrls) replays
  ctrls (traced: one call of replay inside the solve) and judges it on the host through
  jax.pure_callback; it accepts when the nominal robot passes and at least as many randomised
  robots pass as under the warm start. A refused step counts for ilqr as no improvement: mu
  grows and a shorter step about the same linearisation is tried.

  Args:
    replay: ctrls (T, nu) -> the ensemble's outputs, a pytree of (N, ...) arrays, one row per
      robot (row 0 the nominal robot with nominal), traceable; e.g. control.open_loop on the
      ensemble's params, whose outputs are (states, sensordata).
    predicate: one robot's outputs (the pytree at one row, as numpy arrays) -> True or False:
      whether the plan works on that robot. Host code.
    warm_start: (T, nu) the plan ilqr starts from (concrete).
    nominal: whether row 0 is the nominal robot. Without one the guard only asks that at least
      as many robots pass as under the warm start, and never runs unguarded.
    log: called with a line of text when the guard is made and at each refusal; None is quiet.
    cost: None, or ctrls -> the plan's cost, a traced scalar (e.g. control.plan_cost on the
      nominal robot): each refusal's line then says what the refused plan would have cost (one
      more evaluation per ask).

  Returns:
    EnsembleGuard: pass its accept to control.ilqr (None: unguarded); its refusals and asked
    fill in as the solve runs.

  Raises:
    ValueError: a replay or predicate that is not a function, a traced warm start, outputs
      without a common first dimension, or too few rows.
  """
  if not callable(replay):
    raise ValueError(f"replay must be a function ctrls -> per-robot outputs, got "
                     f"{v.shown(replay)}")
  if not callable(predicate):
    raise ValueError(f"predicate must be a function (one robot's outputs) -> bool, got "
                     f"{v.shown(predicate)}")
  if isinstance(warm_start, Tracer):
    raise ValueError("warm_start must be concrete: ensemble_guard replays and judges it on the "
                     f"host before the solve, got {v.shown(warm_start)}")
  warm_start = v.array("warm_start", warm_start, (None, None), finite=True)
  nominal = v.flag("nominal", nominal)
  if log is not None and not callable(log):
    raise ValueError(f"log must be a function of one line of text, or None, got {v.shown(log)}")
  if cost is not None and not callable(cost):
    raise ValueError(f"cost must be a function ctrls -> the plan's cost, or None, got "
                     f"{v.shown(cost)}")
  say = log if log is not None else (lambda line: None)
  if cost is not None:  # its shape now, traced as accept will trace it, not inside ilqr
    try:
      shape = jax.eval_shape(cost, jax.ShapeDtypeStruct(warm_start.shape, warm_start.dtype))
    except Exception as e:
      raise ValueError(f"cost(ctrls {tuple(warm_start.shape)}) failed: {type(e).__name__}: "
                       f"{e}") from e
    if getattr(shape, "shape", None) not in ((), (1,)):
      raise ValueError(f"cost must return the plan's cost, one number, got shape "
                       f"{getattr(shape, 'shape', type(shape).__name__)}")

  def judge(outputs: Any) -> EnsembleResult:
    result = evaluate(per_robot(outputs, "replay's outputs"), predicate, nominal=nominal)
    return EnsembleResult(result.passed, nominal)  # the outputs are too large to keep

  warm = judge(jax.device_get(replay(warm_start)))
  if nominal and not warm.passed[0]:
    say(f"ensemble_guard: under the warm start {warm}: nothing to keep, iLQR runs "
        "unguarded")
    return EnsembleGuard(None, warm)
  say(f"ensemble_guard: under the warm start {warm}: iLQR refuses steps under which the "
      "nominal robot fails or fewer randomised robots pass")

  def verdict(outputs: Any, value: Any) -> np.ndarray:
    result = judge(outputs)
    guard.asked += 1
    keeps = result.passing >= warm.passing and (not nominal or bool(result.passed[0]))
    if not keeps:
      guard.refusals.append(result)
      to = "" if cost is None else f" to {float(value):.6g}"
      say(f"ensemble_guard: refused a step that lowers the cost{to}: under its plan {result} "
          f"(under the warm start {warm.passing} pass)")
    return np.asarray(keeps)

  def accept(states: jax.Array, ctrls: jax.Array) -> jax.Array:
    del states  # the plan is judged by its controls on the ensemble's robots
    value = jnp.zeros(()) if cost is None else jnp.asarray(cost(ctrls)).reshape(())
    return jax.pure_callback(verdict, jax.ShapeDtypeStruct((), jnp.bool_), replay(ctrls),
                             value, vmap_method="sequential")

  guard = EnsembleGuard(accept, warm)
  return guard

