"""Variants of a plan to choose among in flight: a phase held longer, an offset on some servos.

What control.choose_tail picks from. A robot that takes off a little slow needs its tuck held a
knot or two longer; one that turns a little fast needs its hips opened earlier. Both are small
edits of the one plan, made on the host before the run (plan_variants), and chosen by each robot
from its own state as it flies (fly_variants):

  variants = control.plan_variants(plan, 60, holds=4, offsets=(0.0, 0.2, -0.2),
                                   actuators=[hip, waist], window=(70, 73))
  # variants[h, k]: knot 59 held h knots more, then offsets[k] on the hip and waist over 70-72
  flown = control.fly_variants(robots, sim.params(1), start, variants, (60, 70), 10, score)
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax.control.fleet import check_choice, choose_tail
from mjbatch_jax.control.replay import check_inputs, open_loop, params_rows
from mjbatch_jax.params import Params


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
    ctrlrange: (nu, 2) the controls' lower and upper limits (model.actuator_ctrlrange where
      every actuator is ctrllimited; infinite for one that is not), or None.

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
                     f"{(frames, nu)}")
  at = v.integer("at", at, 1, frames)
  holds = v.integer("holds", holds, 1)
  if not v.is_vector(offsets):
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
    if not v.is_vector(window) or len(window) != 2:
      raise ValueError(f"window must be (begin, end) knots, got {v.shown(window)}")
    begin = v.integer("window[0]", window[0], 0, frames)
    end = v.integer("window[1]", window[1], begin, frames)
  if ctrlrange is not None:
    ctrlrange = v.ctrlrange("ctrlrange", ctrlrange, nu)
  ctrl = np.asarray(given, np.float64)
  out = np.zeros((holds, len(offsets), frames, nu))
  for h in range(holds):
    held = np.concatenate([ctrl[:at], np.repeat(ctrl[at - 1:at], h, axis=0),
                           ctrl[at:frames - h]])[:frames]
    for k, amount in enumerate(offsets):
      out[h, k] = held
      out[h, k, begin:end, columns] += amount
  return out if ctrlrange is None else np.clip(out, *ctrlrange.T)


class FlownVariants(NamedTuple):
  """What fly_variants returns, the robots as rows.

  Attributes:
    states: (N, end * nstep, nstate) every physics step's state, from the start to knot end.
    sensordata: (N, end * nstep, nsensordata) every physics step's sensordata.
    chosen: (N, len(choices)) each robot's index along each of the grid's axes.
    ctrls: (N, F, nu) each robot's chosen variant: the plan it flies on from knot end.
  """

  states: np.ndarray
  sensordata: np.ndarray
  chosen: np.ndarray
  ctrls: np.ndarray


def fly_variants(params: Params, believed: Params, start: Any, variants: Any,
                 choices: Sequence[int], nstep: int,
                 score: Callable[[jax.Array, jax.Array, dict], Any], *, end: int | None = None,
                 span: int | None = None, observe: Sequence[str] = (),
                 keep_first: float | None = None) -> FlownVariants:
  """N robots fly a grid of plan variants, each choosing along one axis at each choice's knot.

  variants is a grid (A_0, ..., A_{C-1}, F, nu), as plan_variants makes for C = 2. Every robot
  flies variant [0, ..., 0] open loop to knot choices[0]; there it picks its index along axis 0
  (the later axes at 0) by control.choose_tail on `believed` from its own state, flies its pick
  to choices[1], picks along axis 1 among the variants that share its first index, and so on;
  after the last choice it flies its variant to knot `end`. Each choice rolls the candidates'
  knots from the choice's knot to `span` knots later (or the plan's end) on believed, one
  rollout call for all robots; score, observe and keep_first are choose_tail's.

  Args:
    params: Params of the N robots flown (leaves (N, ...)).
    believed: Params of the model the robots are believed to be (one row, or one per robot).
    start: (nstate,) or (N, nstate) the robots' first states.
    variants: (A_0, ..., A_{C-1}, F, nu) the grid of plans, finite.
    choices: C knots, 1 <= choices[0] < ... < choices[C - 1] <= min(end, F - 1).
    nstep: physics steps per knot.
    score: choose_tail's score(states, sensordata, obs) -> (rows,); the least wins.
    end: the knot the flight stops at (default F).
    span: knots each choice looks ahead (default: to the plan's end).
    observe, keep_first: as choose_tail's.

  Returns:
    A FlownVariants: every physics step to knot end, the choices, each robot's plan.

  Raises:
    ValueError: a shape or knot is out of range (named in the message), or an argument that
      open_loop or choose_tail would refuse (score's output shape included): before any
      physics runs.

  Example:
    variants = control.plan_variants(plan, decide, holds=5, offsets=tilts, actuators=hips,
                                     window=(tilt_at, tilt_at + 3))
    flown = control.fly_variants(robots, sim.params(1), start, variants, (decide, tilt_at), 10,
                                 score, observe=("subtree_com",), keep_first=0.25)
    flown.chosen[:, 0], flown.ctrls        # each robot's hold, and the plan it flies on
  """
  given = variants
  shape = v.array("variants", variants, finite=True).shape
  if not v.is_vector(choices):
    raise ValueError(f"choices must be a sequence of knots, got {v.shown(choices)}")
  axes = len(choices)
  if axes == 0 or len(shape) != axes + 2 or 0 in shape:
    raise ValueError(f"variants must be a grid (A_0, ..., A_{{C-1}}, F, nu) with one axis per "
                     f"choice ({axes}), none empty, got shape {tuple(shape)}")
  frames = shape[-2]
  end = frames if end is None else v.integer("end", end, 1, frames)
  knots = []
  for i, knot in enumerate(choices):
    knots.append(v.integer(f"choices[{i}]", knot, knots[-1] + 1 if knots else 1,
                           min(end, frames - 1)))
  span = frames if span is None else v.integer("span", span, 1)
  variants = np.asarray(given, np.float64)
  # Every argument checked before any physics runs: the first flight's, then each choice's.
  nu = params_rows(params)[0].nu
  if shape[-1] != nu:
    raise ValueError(f"variants must end in nu={nu} controls, got shape {tuple(shape)}")
  first = variants[(0,) * axes][:knots[0]]  # every robot flies variant [0, ..., 0] to the first
  spec, count, start, _, nstep = check_inputs(params, start, first, nstep)
  believed_spec, believed_rows = params_rows(believed)
  if (believed_spec.nstate, believed_spec.nu) != (spec.nstate, spec.nu):
    raise ValueError("believed must be Params of the robots' model (its state and controls' "
                     "sizes)")
  for axis, knot in enumerate(knots):
    nstep, observe, keep_first = check_choice(
      believed_spec, believed_rows, count, shape[axis], min(span, frames - knot), nstep, score,
      observe, keep_first, start.dtype)
  parts = [open_loop(params, start, first, nstep)]
  chosen = np.zeros((count, axes), int)
  for axis, knot in enumerate(knots):
    if axis:  # fly the picks so far from the last choice's knot to this one
      flying = variants[tuple(chosen[:, :axis].T)][(slice(None),) + (0,) * (axes - axis)]
      parts.append(open_loop(params, parts[-1][0][:, -1], flying[:, knots[axis - 1]:knot], nstep))
    rows = variants[tuple(chosen[:, :axis].T)] if axis else np.broadcast_to(
      variants, (count, *variants.shape))
    candidates = rows[(slice(None), slice(None)) + (0,) * (axes - axis - 1)]
    tails = candidates[:, :, knot:knot + min(span, frames - knot)]
    chosen[:, axis] = np.asarray(choose_tail(believed, parts[-1][0][:, -1], tails, nstep, score,
                                             observe=observe, keep_first=keep_first))
  ctrls = variants[tuple(chosen.T)]
  if end > knots[-1]:
    parts.append(open_loop(params, parts[-1][0][:, -1], ctrls[:, knots[-1]:end], nstep))
  return FlownVariants(np.concatenate([np.asarray(x) for x, _ in parts], axis=1),
                       np.concatenate([np.asarray(s) for _, s in parts], axis=1), chosen, ctrls)


__all__ = ["FlownVariants", "fly_variants", "plan_variants"]
