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
    ctrlrange: (nu, 2) limits the controls are clipped to, or None.

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
      lo, hi = (v.number(f"durations[{i}]", d, 0.0) for i, d in enumerate(durations))
      if lo > hi:
        raise ValueError(f"durations must be (lo, hi) with lo <= hi, got {durations}")
      durations = (lo, hi)
    self.durations = durations
    if ctrlrange is not None:
      ctrlrange = numbers("ctrlrange", ctrlrange, (nu, 2))
      if np.any(ctrlrange[:, 0] > ctrlrange[:, 1]):
        raise ValueError("ctrlrange must be (nu, 2) limits, each lower <= upper")
    self.ctrlrange = ctrlrange

  def phases(self, z: Any) -> Any:
    """z as (P, S + 1)."""
    z = v.array("z", z)
    width = len(self.synergy) + 1
    if z.size == 0 or z.size % width:
      raise ValueError(f"a program must be P phases of {width} numbers (S targets and a "
                       f"duration), got shape {tuple(z.shape)}")
    return z.reshape(-1, width)

  def masks(self, z: Any, frames: int | None = None) -> np.ndarray:
    """(P, frames) bool on the host: the knots each phase of a concrete z holds."""
    z = np.asarray(self.phases(z))
    frames = self.frames if frames is None else v.integer("frames", frames, 0)
    t = self.dt * np.arange(frames)
    span = z[:, -1] if self.durations is None else np.clip(z[:, -1], *self.durations)
    ends = self.start + np.cumsum(span)
    begins = np.r_[self.start, ends[:-1]]
    return (t >= begins[:, None]) & (t < ends[:, None])

  def __call__(self, z: Any) -> jax.Array:
    """(F, nu) the controls of program z (flat or (P, S + 1)); pure JAX."""
    z = self.phases(z)
    synergy = jnp.asarray(self.synergy)
    chosen = synergy.sum(axis=0) > 0
    base = jnp.asarray(self.base)
    t = self.dt * jnp.arange(self.frames)
    span = z[:, -1] if self.durations is None else jnp.clip(z[:, -1], *self.durations)
    if self.interpolation == "hold":
      u = self._held(z[:, :-1] @ synergy, span, chosen, base, t)
    else:
      u = self._linear(z[:, :-1] @ synergy, span, chosen, base, t)
    return u if self.ctrlrange is None else jnp.clip(u, *jnp.asarray(self.ctrlrange).T)

  def _held(self, targets, span, chosen, base, t):
    base = jnp.broadcast_to(base, (self.frames, base.shape[-1]))
    targets = jnp.where(chosen, targets, base[None, 0])
    ends = self.start + jnp.cumsum(span)
    begins = jnp.concatenate([jnp.array([self.start]), ends[:-1]])
    u = base
    for k in range(len(targets)):
      on = (t >= begins[k]) & (t < ends[k])
      u = jnp.where(on[:, None], jnp.where(chosen, targets[k], base), u)
    ramp = jnp.clip((t - ends[-1]) / self.ramp_s, 0.0, 1.0)[:, None]
    settle = jnp.where(chosen, targets[-1], base)
    return jnp.where((t >= ends[-1])[:, None], (1 - ramp) * settle + ramp * base[-1], u)

  def _linear(self, targets, span, chosen, base, t):
    rows = jnp.broadcast_to(base, (self.frames, base.shape[-1]))
    first = rows[min(int(round(self.start / self.dt)), self.frames - 1)]
    keys = jnp.concatenate([first[None], jnp.where(chosen, targets, first), rows[-1:]])
    times = self.start + jnp.cumsum(jnp.r_[0.0, span, self.ramp_s])
    u = jax.vmap(lambda column: jnp.interp(t, times, column), out_axes=1)(keys.T)
    return jnp.where((t < self.start)[:, None], rows, u)


__all__ = ["INTERPOLATIONS", "SynergyProgram"]
