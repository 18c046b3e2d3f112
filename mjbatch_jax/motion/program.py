"""A program of synergy targets: a whole-body plan in a few numbers, for a search to tune.

A jump or a flip starts as a handful of poses: crouch, push, tuck, land. Each pose sets a few
synergies (both hips' pitch, both knees, the waist, ...: rows of a (S, nu) matrix of 0 and 1)
and lasts a while. A program turns P phases of (S targets, a duration) into controls (F, nu) on
a grid of knots, pure JAX, so that control.cem_search can search the P (S + 1) numbers as one
flat vector, every candidate's controls made inside the jitted objective:

  program = motion.SynergyProgram(synergy, stand_ctrl, dt=0.02, frames=150, ramp_s=0.5,
                                  interpolation="linear")
  ctrls = jax.vmap(program)(candidates)          # (K, P (S + 1)) -> (K, 150, nu)
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax.motion._arrays import numbers

INTERPOLATIONS = ("hold", "linear")


class SynergyProgram:
  """Phases of synergy targets -> controls (F, nu); see the module doc.

  A program z is P phases of S + 1 numbers, flat or (P, S + 1): the synergies' targets and the
  phase's duration (s), clipped to `durations` when given. Phase k begins at start plus the
  durations before it. Before start every control is the base's. With interpolation "hold"
  each phase's targets are held over it, the other actuators following the base; with "linear"
  they are reached at its end, linearly from the previous phase's (the first phase's from the
  base's control at start), the other actuators held at that control. After the last phase
  every control goes linearly, over ramp_s, to the base's last control.

  Args:
    synergy: (S, nu) each synergy's weight per actuator: 1 where it sets the actuator, else 0
      (rows that do not overlap).
    base: (F, nu) or (nu,) the controls outside the program: before start, of actuators in no
      synergy, and the one the ramp ends at (its last).
    dt: seconds per knot.
    frames: F, the knots; base's first dimension when it has one.
    start: when the first phase begins (s).
    ramp_s: the ramp after the last phase (s, > 0).
    interpolation: "hold" or "linear".
    durations: (lo, hi) bounds of a phase's duration (s), or None.
    ctrlrange: (nu, 2) limits the controls are clipped to (infinite: no limit), or None.

  Raises:
    ValueError: an argument is not of its kind, shape or range.

  Example:
    program = motion.SynergyProgram(synergy, servo_plan, dt=0.02, start=0.8, ramp_s=0.6,
                                    durations=(0.04, 1.0), ctrlrange=model.actuator_ctrlrange)
    ctrls = program(z)                           # (F, nu)
    program.masks(z)                             # (P, F): the knots each phase holds
  """

  def __init__(self, synergy: Any, base: Any, dt: float, *, frames: int | None = None,
               start: float = 0.0, ramp_s: float, interpolation: str = "hold",
               durations: tuple[float, float] | None = None, ctrlrange: Any = None):
    self.synergy = numbers("synergy", synergy, (None, None))
    count, nu = self.synergy.shape
    if count == 0 or nu == 0:
      raise ValueError(f"synergy must be (S, nu) with S, nu >= 1, got shape {self.synergy.shape}")
    if not np.all((self.synergy == 0) | (self.synergy == 1)) or np.any(self.synergy.sum(0) > 1):
      raise ValueError("synergy must hold 0 and 1, each actuator in at most one synergy")
    self.chosen = self.synergy.sum(axis=0) > 0  # (nu,): the actuators some synergy sets
    base = numbers("base", base, (None, nu) if np.ndim(base) == 2 else (nu,))
    if base.ndim == 2 and frames is not None and v.integer("frames", frames, 1) != len(base):
      raise ValueError(f"frames ({frames}) must be base's first dimension ({len(base)})")
    self.frames = len(base) if base.ndim == 2 else v.integer("frames", frames, 1)
    if self.frames < 1:
      raise ValueError(f"base must hold at least one knot's controls, got shape {base.shape}")
    self.base = base
    self.dt = v.number("dt", dt, 0.0, low_open=True)
    self.start = v.number("start", start, 0.0)
    self.ramp_s = v.number("ramp_s", ramp_s, 0.0, low_open=True)
    self.interpolation = v.one_of("interpolation", interpolation, INTERPOLATIONS)
    if durations is not None:
      if not v.is_vector(durations) or len(durations) != 2:
        raise ValueError(f"durations must be (lo, hi), a phase's shortest and longest duration "
                         f"(s), or None, got {v.shown(durations)}")
      lo, hi = (v.number(f"durations[{i}]", d, 0.0) for i, d in enumerate(durations))
      if lo > hi:
        raise ValueError(f"durations must be (lo, hi) with lo <= hi, got {durations}")
      durations = (lo, hi)
    self.durations = durations
    self.ctrlrange = None if ctrlrange is None else v.ctrlrange("ctrlrange", ctrlrange, nu)

  def phases(self, z: Any) -> Any:
    """z (flat, or (P, S + 1)) as (P, S + 1); NaN and inf refused where z is concrete."""
    z = v.array("z", z, finite=True)
    width = len(self.synergy) + 1
    # Only these two layouts: a (S + 1, P) or (1, P, S + 1) z reshaped would silently mix
    # one phase's numbers into another's.
    if z.size == 0 or z.ndim not in (1, 2) or z.shape[-1] % width or (
        z.ndim == 2 and z.shape[1] != width):
      raise ValueError(f"a program must be P phases of {width} numbers (S targets and a "
                       f"duration), flat or (P, {width}), got shape {tuple(z.shape)}")
    return z.reshape(-1, width)

  def masks(self, z: Any, frames: int | None = None) -> np.ndarray:
    """(P, frames) bool on the host: the knots each phase of a concrete z holds."""
    z = np.asarray(self.phases(z))
    frames = self.frames if frames is None else v.integer("frames", frames, 0)
    return self._phase_knots(np, z[:, -1], self.dt * np.arange(frames))[0]

  def __call__(self, z: Any) -> jax.Array:
    """(F, nu) the controls of program z (flat or (P, S + 1)); pure JAX."""
    z = self.phases(z)
    base = jnp.broadcast_to(jnp.asarray(self.base), (self.frames, len(self.chosen)))
    t = self.dt * jnp.arange(self.frames)
    fill = self._held if self.interpolation == "hold" else self._linear
    u = fill(z[:, :-1] @ jnp.asarray(self.synergy), z[:, -1], base, t)
    return self._clipped(u)

  def retarget(self, ctrl: Any, masks: Any, targets: Any) -> jax.Array:
    """ctrl with new synergy targets on the knots of some phases; pure JAX in targets.

    Once a plan exists (a program tracked and improved by iLQR, say), a later search can tune a
    few of its phases again without redoing the rest: on mask k's knots the synergies' actuators
    take targets[k] @ synergy, everything else keeps ctrl's controls; clipped to ctrlrange.

    Args:
      ctrl: (F', nu) the plan's controls, over any number of knots.
      masks: (K, F') bool, concrete: the knots of each phase retargeted (masks() of the program,
        cut to the phases and knots wanted).
      targets: (K, S) or flat: each phase's new synergy targets.

    Example:
      pushes = program.masks(z, 60)[:2]          # the first two phases, on the first 60 knots
      ctrls = jax.vmap(lambda t: program.retarget(plan[:60], pushes, t))(candidates)
    """
    ctrl = v.array("ctrl", ctrl, finite=True)
    masks = np.asarray(masks)
    if ctrl.ndim != 2 or ctrl.shape[1] != len(self.chosen):
      raise ValueError(f"ctrl must be (F, {len(self.chosen)}), got shape {tuple(ctrl.shape)}")
    if masks.dtype != bool or masks.ndim != 2 or masks.shape[1] != len(ctrl):
      raise ValueError(f"masks must be (K, {len(ctrl)}) bool, got {masks.dtype} of shape "
                       f"{masks.shape}")
    targets = v.array("targets", targets, finite=True)
    flat, table = (len(masks) * len(self.synergy),), (len(masks), len(self.synergy))
    if tuple(targets.shape) not in (flat, table):  # a (S, K) table would mix the phases
      raise ValueError(f"targets must be {len(masks)} phases of {len(self.synergy)} synergy "
                       f"targets, {table} or flat {flat}, got shape {tuple(targets.shape)}")
    set_to = targets.reshape(len(masks), -1) @ jnp.asarray(self.synergy)
    u = self._overwrite(jnp.asarray(ctrl), masks, set_to)
    return self._clipped(u)

  def _clipped(self, u: Any) -> Any:
    """u within ctrlrange, where the program has one."""
    return u if self.ctrlrange is None else jnp.clip(u, *jnp.asarray(self.ctrlrange).T)

  def _overwrite(self, u: Any, on: Any, set_to: Any) -> Any:
    """u with the chosen actuators at set_to[k] on phase k's knots (on[k])."""
    chosen = jnp.asarray(self.chosen)
    for k in range(len(set_to)):
      u = jnp.where(jnp.asarray(on[k])[:, None] & chosen, set_to[k], u)
    return u

  def _phase_knots(self, xp: Any, span: Any, t: Any) -> tuple[Any, Any]:
    """(P, len(t)) the knots each phase holds and (P,) the phases' ends, in numpy (xp=np, on
    the host) or JAX (xp=jnp, traced): the durations clipped, the phases one after another."""
    if self.durations is not None:
      span = xp.clip(span, *self.durations)
    ends = self.start + xp.cumsum(span)
    begins = xp.concatenate([xp.array([self.start]), ends[:-1]])
    return (t >= begins[:, None]) & (t < ends[:, None]), ends

  def _held(self, targets, span, base, t):
    on, ends = self._phase_knots(jnp, span, t)
    u = self._overwrite(base, on, targets)
    ramp = jnp.clip((t - ends[-1]) / self.ramp_s, 0.0, 1.0)[:, None]
    settle = jnp.where(self.chosen, targets[-1], base)
    return jnp.where((t >= ends[-1])[:, None], (1 - ramp) * settle + ramp * base[-1], u)

  def _linear(self, targets, span, base, t):
    if self.durations is not None:
      span = jnp.clip(span, *self.durations)
    first = base[min(int(round(self.start / self.dt)), self.frames - 1)]
    keys = jnp.concatenate([first[None], jnp.where(self.chosen, targets, first), base[-1:]])
    times = self.start + jnp.cumsum(jnp.r_[0.0, span, self.ramp_s])
    u = jax.vmap(lambda column: jnp.interp(t, times, column), out_axes=1)(keys.T)
    return jnp.where((t < self.start)[:, None], base, u)


__all__ = ["INTERPOLATIONS", "SynergyProgram"]
