"""check_grads: are a function's derivatives right where it is smooth? Secants along random
directions against the derivative rules, as jax.test_util.check_grads does for JAX's own rules.

The derivatives of step, rollout and forward are finite differences (see docs/derivatives.md),
and a user's loss chains many of them through contacts, solvers and their own code: this checks
the end result, at the points the user cares about, in one call.

  report = mjbatch_jax.check_grads(loss, (params, ctrls))
  print(report)            # per direction: derivative, secant, relative error, smooth or not
  report.worst             # the largest relative error where the function is smooth
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from mjbatch_jax import _validate

# Secants at a point where the function has a kink or jump within a few steps measure that, not
# the derivative: a direction counts as smooth when its forward and backward secants agree to
# this share of their size.
SMOOTH_TOLERANCE = 1e-3


@dataclasses.dataclass(frozen=True)
class Direction:
  """One direction's comparison."""

  leaf: str  # the input moved ("all": every input at once)
  derivative: np.ndarray  # J v from the derivative rules (jax.jvp), the output's shape
  secant: np.ndarray  # (f(x + h v) - f(x - h v)) / 2h
  error: float  # |J v - secant| / |secant| (norms over the output's entries)
  smooth: bool  # forward and backward secants agree to SMOOTH_TOLERANCE
  where: tuple[int, ...]  # the output entry of the largest difference
  reverse_error: float  # |<w, J v> - <J^T w, v>| / |<w, J v>| for a random w (nan: not checked)


@dataclasses.dataclass(frozen=True)
class GradCheck:
  """The outcome of check_grads: every direction, and the worst where the function is smooth."""

  directions: tuple[Direction, ...]
  step: float
  rtol: float
  reverse_rtol: float  # how far reverse mode may stray from forward mode (rounding only)

  @property
  def smooth(self) -> tuple[Direction, ...]:
    return tuple(d for d in self.directions if d.smooth)

  @property
  def worst(self) -> float:
    """The largest relative error over the smooth directions (0 if none is smooth)."""
    return max((d.error for d in self.smooth), default=0.0)

  @property
  def worst_direction(self) -> Direction | None:
    smooth = self.smooth
    return max(smooth, key=lambda d: d.error) if smooth else None

  @property
  def passed(self) -> bool:
    reverse = [d.reverse_error for d in self.directions if np.isfinite(d.reverse_error)]
    return self.worst <= self.rtol and all(e <= self.reverse_rtol for e in reverse)

  def __str__(self) -> str:
    lines = [f"check_grads: {len(self.smooth)} of {len(self.directions)} directions smooth at "
             f"step {self.step:g}; worst relative error {self.worst:.2e} (rtol {self.rtol:g})"]
    for i, d in enumerate(self.directions):
      scale = float(np.linalg.norm(d.secant))
      lines.append(f"  {i:3d} {d.leaf:24s} |secant| {scale:10.4g}  error {d.error:9.2e}  "
                   f"{'smooth' if d.smooth else 'NOT smooth (skipped)':22s} at output {d.where}"
                   + (f"  reverse {d.reverse_error:.1e}" if np.isfinite(d.reverse_error) else ""))
    return "\n".join(lines)


def _float_leaves(args: tuple) -> tuple[list[Any], list[str], Any]:
  leaves, treedef = jax.tree_util.tree_flatten_with_path(args)
  names = [jax.tree_util.keystr(path) for path, _ in leaves]
  return [leaf for _, leaf in leaves], names, treedef


def check_grads(
  fun: Callable[..., Any],
  args: Sequence[Any],
  directions: int = 8,
  step: float | None = None,
  rtol: float = 1e-2,
  seed: int = 0,
  reverse: bool = True,
  raise_on_failure: bool = True,
  jit: bool = True,
) -> GradCheck:
  """Compare fun's directional derivatives (jax.jvp) with its secants along random directions.

  Directions move one input leaf at a time (in turn), then all of them, each leaf by a normal
  draw scaled to the leaf's RMS size, so inputs of different units weigh alike. A direction
  where the forward and backward secants disagree (a kink or jump within a step: a contact that
  switches on the secant's own scale) is reported but not judged. With reverse, J^T w (jax.vjp)
  must also agree with J v for a random w.

  Args:
    fun: a function of args returning an array (or a scalar); float inputs are differentiated,
      other leaves are held.
    args: its positional arguments, pytrees of arrays.
    directions: how many random directions.
    step: the secants' step, relative to each leaf's size; default 1e-7 in float64, 1e-3 in
      float32. With jax_enable_x64 on, float32 inputs are evaluated in float64 for the secants.
    rtol: the largest relative error accepted over the smooth directions.
    seed: the directions' random seed.
    reverse: also check reverse mode against forward mode.
    raise_on_failure: raise AssertionError with the report if a check fails.
    jit: compile fun, its derivative and its secants once for all directions; False for a
      function that jax.jit cannot trace.

  Every argument is checked before fun is called (ValueError naming it): counts are ints (numpy
  ints too), step and rtol finite and > 0, the flags bools, and the float inputs free of NaN and
  inf.

  Returns:
    The GradCheck report.

  Example:
    report = mjbatch_jax.check_grads(lambda p: loss(p, ctrls), (params,))
    assert report.worst < 1e-2
  """
  if not callable(fun):
    raise ValueError(f"fun must be a function, got {_validate.shown(fun)}")
  if not isinstance(args, (tuple, list)):
    raise ValueError("args must be a tuple or list of fun's positional arguments, got "
                     f"{_validate.shown(args)}: wrap a single argument as (x,)")
  directions = _validate.integer("directions", directions, low=1)
  rtol = _validate.number("rtol", rtol, low=0.0, low_open=True)
  seed = _validate.integer("seed", seed, low=0)
  reverse = _validate.flag("reverse", reverse)
  raise_on_failure = _validate.flag("raise_on_failure", raise_on_failure)
  jit = _validate.flag("jit", jit)
  if step is not None:
    step = _validate.number("step", step, low=0.0, low_open=True)
  args = tuple(args)
  leaves, names, treedef = _float_leaves(args)
  is_float = []
  for leaf, name in zip(leaves, names, strict=True):
    if isinstance(leaf, Tracer):
      raise ValueError(f"args{name} is traced: check_grads compares values, so call it outside "
                       "jax.jit, vmap and grad")
    try:
      is_float.append(bool(jnp.issubdtype(jnp.result_type(leaf), jnp.floating)))
    except TypeError:
      raise ValueError(f"args{name} must be an array or a number, got "
                       f"{_validate.shown(leaf)}") from None
  if not any(is_float):
    raise ValueError("check_grads: args hold no floating-point arrays to differentiate")
  for leaf, name, floating in zip(leaves, names, is_float, strict=True):
    if floating:  # a NaN input makes every secant NaN: say which input, not "fun is not finite"
      _validate.array(f"args{name}", leaf, finite=True, dtype="any")
  x64 = bool(jax.config.read("jax_enable_x64"))
  dtypes = {jnp.result_type(leaf) for leaf, f in zip(leaves, is_float, strict=True) if f}
  wide = x64 or dtypes == {jnp.dtype(jnp.float64)}
  if step is None:
    step = 1e-7 if wide else 1e-3

  def evaluate(values: list[Any]) -> jax.Array:
    return jnp.asarray(fun(*jax.tree_util.tree_unflatten(treedef, values)))

  call = jax.jit(evaluate) if jit else evaluate

  def secant_inputs(values: list[Any]) -> list[Any]:
    # Secants in float64 where JAX allows it: a float32 secant at 1e-7 measures rounding.
    if not x64:
      return values
    return [jnp.asarray(v, jnp.float64) if f else v for v, f in zip(values, is_float, strict=True)]

  base = [jnp.asarray(leaf) for leaf in leaves]
  try:  # fun's output, from its shapes alone: nothing runs yet
    out = jax.eval_shape(evaluate, base)
  except Exception as e:
    raise ValueError(f"fun(*args) must return floating-point values; it failed: "
                     f"{type(e).__name__}: {e}") from e
  if not jnp.issubdtype(out.dtype, jnp.floating):
    raise ValueError(f"fun(*args) must return floating-point values, got {out.dtype}")
  float_ids = [i for i, f in enumerate(is_float) if f]

  def of_floats(*xs: Any) -> jax.Array:  # fun of the float leaves alone, the rest held
    values = list(base)
    for i, x in zip(float_ids, xs, strict=True):
      values[i] = x
    return call(values)

  x0 = [base[i] for i in float_ids]

  def directional(xs: tuple, ts: tuple) -> jax.Array:
    return jax.jvp(of_floats, xs, ts)[1]

  jvp = jax.jit(directional) if jit else directional
  f0 = np.asarray(call(secant_inputs(base)), np.float64)
  if not np.all(np.isfinite(f0)):
    raise ValueError("check_grads: fun is not finite at args")
  primal_out, pullback = jax.vjp(of_floats, *x0) if reverse else (None, None)
  rng = np.random.default_rng(seed)
  # One leaf at a time, in turn, and the last directions (about one in len + 1) all at once.
  together = directions // (len(float_ids) + 1) if len(float_ids) > 1 else 0
  results = []
  for k in range(directions):
    moved = range(len(float_ids)) if k >= directions - together else [k % len(float_ids)]
    tangent = []
    for j, x in enumerate(x0):
      if j in moved:
        size = float(np.sqrt(np.mean(np.square(np.asarray(x, np.float64))))) or 1.0
        tangent.append(jnp.asarray(rng.normal(size=np.shape(x)) * size, x.dtype))
      else:
        tangent.append(jnp.zeros_like(x))

    def shifted(sign: float, tangent: list[Any] = tangent) -> list[Any]:
      values = list(base)
      for i, x, t in zip(float_ids, x0, tangent, strict=True):
        if x64:
          x, t = jnp.asarray(x, jnp.float64), jnp.asarray(t, jnp.float64)
        values[i] = x + sign * step * t
      return values

    derivative = jvp(tuple(x0), tuple(tangent))
    derivative = np.asarray(derivative, np.float64)
    fp = np.asarray(call(shifted(1.0)), np.float64)
    fm = np.asarray(call(shifted(-1.0)), np.float64)
    secant = (fp - fm) / (2 * step)
    forward, backward = (fp - f0) / step, (f0 - fm) / step
    scale = max(float(np.linalg.norm(secant)), 1e-300)
    smooth = bool(np.linalg.norm(forward - backward) <= SMOOTH_TOLERANCE * scale)
    gap = np.abs(derivative - secant)
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(gap)), gap.shape)) if gap.size \
      else ()
    reverse_error = float("nan")
    if pullback is not None and primal_out is not None:
      w = rng.normal(size=np.shape(primal_out))
      cotangents = pullback(jnp.asarray(w, jnp.result_type(primal_out)))
      forward_dot = float(np.sum(w * derivative))
      reverse_dot = sum(float(np.sum(np.asarray(c, np.float64) * np.asarray(t, np.float64)))
                        for c, t in zip(cotangents, tangent, strict=True))
      reverse_error = abs(forward_dot - reverse_dot) / max(abs(forward_dot), 1e-300)
    label = "all" if len(moved) > 1 else names[float_ids[moved[0]]]
    results.append(Direction(label, derivative, secant, float(np.linalg.norm(derivative - secant))
                             / scale, smooth, where, reverse_error))
  # Forward and reverse mode differ by rounding only: float32 inputs round to about 1e-7.
  reverse_rtol = 1e-9 if all(jnp.result_type(x) == jnp.float64 for x in x0) else 1e-4
  report = GradCheck(tuple(results), float(step), float(rtol), reverse_rtol)
  if raise_on_failure and not report.passed:
    raise AssertionError(str(report))
  return report


__all__ = ["Direction", "GradCheck", "check_grads"]
