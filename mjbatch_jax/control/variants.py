"""Variants of a plan to choose among in flight: a phase held longer, an offset on some servos.

What control.choose_tail picks from. A robot that takes off a little slow needs its tuck held a
knot or two longer; one that turns a little fast needs its hips opened earlier. Both are small
edits of the one plan, made on the host before the run:

  variants = control.plan_variants(plan, 60, holds=4, offsets=(0.0, 0.2, -0.2),
                                   actuators=[hip, waist], window=(70, 73))
  # variants[h, k]: knot 59 held h knots more, then offsets[k] on the hip and waist over 70-72
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from mjbatch_jax import _validate as v


def plan_variants(ctrl: Any, at: int, *, holds: int = 1, offsets: Sequence[float] = (0.0,),
                  actuators: Sequence[int] = (), window: tuple[int, int] | None = None,
                  ctrlrange: Any = None) -> np.ndarray:
  """(holds, len(offsets), F, nu): ctrl with knot at - 1 held and offsets added.

  Variant [h, k] is ctrl with its control at knot at - 1 repeated h more times, the knots after
  it delayed by as many (the last h dropped, so every variant has F knots), then offsets[k]
  added to the controls of `actuators` over the knots window[0] .. window[1] - 1, clipped to
  ctrlrange. With offsets[0] = 0, variant [0, 0] is ctrl itself.

  Args:
    ctrl: (F, nu) the plan's controls.
    at: the first knot delayed, 1 <= at <= F (F: nothing after the held knot).
    holds: how many hold lengths, 0 .. holds - 1 knots; >= 1.
    offsets: the offsets tried (finite numbers, at least one).
    actuators: the controls the offsets are added to (indices in 0 .. nu - 1).
    window: (begin, end) knots of the offsets, 0 <= begin <= end <= F; None: every knot.
    ctrlrange: (nu, 2) the controls' lower and upper limits (model.actuator_ctrlrange), or None.

  Returns:
    A float64 numpy array (holds, len(offsets), F, nu).

  Raises:
    ValueError: an argument is not of its kind, shape or range (named in the message).

  Example:
    variants = control.plan_variants(ctrls, 40, holds=3, offsets=(0.0, 0.1),
                                     actuators=[model.actuator("waist_pitch").id],
                                     window=(45, 48), ctrlrange=model.actuator_ctrlrange)
    chosen = control.choose_tail(params, states, variants[:, 0, 40:60], nstep, score)
  """
  given = ctrl
  frames, nu = v.array("ctrl", ctrl, (None, None), finite=True).shape
  if frames == 0 or nu == 0:
    raise ValueError(f"ctrl must hold at least one knot of at least one control, got shape "
                     f"{ctrl.shape}")
  at = v.integer("at", at, 1, frames)
  holds = v.integer("holds", holds, 1)
  if isinstance(offsets, (str, bytes)) or not isinstance(offsets, Sequence | np.ndarray):
    raise ValueError(f"offsets must be a sequence of numbers, got {v.shown(offsets)}")
  offsets = [v.number(f"offsets[{k}]", o) for k, o in enumerate(offsets)]
  if not offsets:
    raise ValueError("offsets must hold at least one number (0.0: the plan's own)")
  if isinstance(actuators, (str, bytes)) or not isinstance(actuators, Sequence | np.ndarray):
    raise ValueError(f"actuators must be a sequence of control indices, got {v.shown(actuators)}")
  columns = [v.integer(f"actuators[{i}]", a, 0, nu - 1) for i, a in enumerate(actuators)]
  if window is None:
    begin, end = 0, frames
  else:
    if not isinstance(window, Sequence) or isinstance(window, str) or len(window) != 2:
      raise ValueError(f"window must be (begin, end) knots, got {v.shown(window)}")
    begin = v.integer("window[0]", window[0], 0, frames)
    end = v.integer("window[1]", window[1], begin, frames)
  if ctrlrange is not None:
    v.array("ctrlrange", ctrlrange, (nu, 2))
    ctrlrange = np.asarray(ctrlrange, np.float64)  # in float64 whatever JAX's precision is
    if np.any(np.isnan(ctrlrange)) or np.any(ctrlrange[:, 0] > ctrlrange[:, 1]):
      raise ValueError("ctrlrange must be (nu, 2) limits, each lower <= upper and not NaN")
  ctrl = np.asarray(given, np.float64)
  out = np.zeros((holds, len(offsets), frames, nu))
  for h in range(holds):
    held = np.concatenate([ctrl[:at], np.repeat(ctrl[at - 1:at], h, axis=0),
                           ctrl[at:frames - h]])[:frames]
    for k, amount in enumerate(offsets):
      out[h, k] = held
      out[h, k, begin:end, columns] += amount
  return out if ctrlrange is None else np.clip(out, *ctrlrange.T)


__all__ = ["plan_variants"]
