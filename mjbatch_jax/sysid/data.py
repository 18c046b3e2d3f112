"""Shooting windows: a recording cut into simulations of its own, each from its recorded start."""

from typing import Any, NamedTuple

import jax
import numpy as np

from mjbatch_jax import _validate as v


class Windows(NamedTuple):
  """Shooting windows: W simulations of T controls each (a pytree, leading dimension W).

  Attributes:
    starts: (W, nstate) each window's recorded start, its prior when starts are fitted.
    ctrls: (W, T, nu) its controls.
    measured: a pytree of (W, T, ...) arrays, its measurements, as the residual reads them.
  """

  starts: Any
  ctrls: Any
  measured: Any


def windows(states: Any, ctrls: Any, measured: Any, length: int | np.integer) -> Windows:
  """A recording cut into shooting windows of `length` controls (the last T mod length left out).

  Args:
    states: (T, nstate) the recorded state before each control (row 0 the recording's start):
      window w starts from row w * length. Only those rows are read.
    ctrls: (T, nu) the controls.
    measured: a pytree of (T, ...) measurements after each control.
    length: controls per window.

  Example:
    data = sysid.windows(states, ctrls, {"q": q_measured}, length=50)
  """
  states, ctrls = _finite("states", states), _finite("ctrls", ctrls)
  if states.ndim != 2 or ctrls.ndim != 2 or len(ctrls) != len(states):
    raise ValueError(f"states must be (T, nstate) and ctrls (T, nu) with the same T, got shapes "
                     f"{states.shape} and {ctrls.shape}")
  samples = len(ctrls)
  length = v.integer("length", length, low=1)
  if length > samples:
    raise ValueError(f"windows of {length} controls are longer than the recording ({samples} "
                     "controls): take a shorter length")
  count = samples // length
  leaves, tree = jax.tree.flatten(measured)
  cut = []
  for i, leaf in enumerate(leaves):
    leaf = _finite(f"measured leaf {i}", leaf)
    if leaf.ndim < 1 or len(leaf) != samples:
      raise ValueError(f"measured leaf {i} must be (T={samples}, ...), got shape {leaf.shape}")
    cut.append(leaf[: count * length].reshape(count, length, *leaf.shape[1:]))
  return Windows(states[: count * length : length],
                 ctrls[: count * length].reshape(count, length, ctrls.shape[-1]),
                 jax.tree.unflatten(tree, cut))


def _finite(what: str, x: Any) -> np.ndarray:
  """x as a float64 array of ints or floats with no NaN or inf; ValueError otherwise."""
  if isinstance(x, str) or x is None:
    raise ValueError(f"{what} must be an array of numbers, got {v.shown(x)}")
  try:
    raw = np.asarray(x)
  except (TypeError, ValueError):
    raise ValueError(f"{what} must be an array of numbers, got {type(x).__name__}") from None
  if raw.dtype.kind not in "iuf":
    raise ValueError(f"{what} must be an array of numbers (ints or floats), got dtype "
                     f"{raw.dtype} ({v.shown(x)})")
  array = raw.astype(np.float64)
  if not np.all(np.isfinite(array)):
    bad = np.argwhere(~np.isfinite(array))[0]
    raise ValueError(f"{what} has NaN or inf (first at index {tuple(int(i) for i in bad)})")
  return array
