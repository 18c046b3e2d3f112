"""Arrays of numbers checked on the host: the motion package's poses are numpy float64."""

from collections.abc import Mapping
from typing import Any

import numpy as np

from mjbatch_jax import _validate as v


def numbers(name: str, value: Any, shape: tuple[int | None, ...] | None = None) -> np.ndarray:
  """value as a float64 numpy array of shape (a pattern as in _validate), finite.

  In numpy, not JAX: poses are computed on the host, in float64 whatever JAX's precision is.
  """
  if isinstance(value, (str, bytes, Mapping)) or value is None:
    raise ValueError(f"{name} must be an array of numbers, got {v.shown(value)}")
  try:
    out = np.array(value, dtype=np.float64)
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be an array of numbers, got {v.shown(value)}") from None
  if np.asarray(value).dtype.kind not in "iuf":
    raise ValueError(f"{name} must be an array of numbers, got {v.shown(value)}")
  if shape is not None and not v.matches(out.shape, shape):
    raise ValueError(f"{name} must have shape {v.pattern(shape)}, got {out.shape}")
  if not np.all(np.isfinite(out)):
    first = tuple(int(i) for i in np.argwhere(~np.isfinite(out))[0])
    raise ValueError(f"{name} must be finite: {out[first]} at index {first}")
  return out
