"""Arguments checked on the host: the motion package's poses are numpy float64, its models
MjModels."""

from collections.abc import Mapping
from typing import Any

import mujoco
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


def mj_model(name: str, value: Any) -> mujoco.MjModel:
  """value, a mujoco.MjModel; ValueError naming the argument otherwise (an MjSpec: compile it)."""
  if not isinstance(value, mujoco.MjModel):
    hint = " (spec.compile() makes one of an MjSpec)" if isinstance(value, mujoco.MjSpec) else ""
    raise ValueError(f"{name} must be a mujoco.MjModel, got {type(value).__name__}{hint}")
  return value


def scratch_data(model: mujoco.MjModel, data: Any) -> mujoco.MjData:
  """data, an MjData of model's sizes to compute in; None: a new mujoco.MjData(model).

  An MjData made for another model of other sizes would be written past its arrays' ends, so
  it is refused: data.model must be model, or a model of the same sizes (a copy of it, or the
  same robot with other masses).
  """
  if data is None:
    return mujoco.MjData(model)
  if not isinstance(data, mujoco.MjData):
    raise ValueError(f"data must be a mujoco.MjData of model (mujoco.MjData(model)) or None, got "
                     f"{type(data).__name__}")
  other = data.model
  if other is not model:
    for size in _sizes(model):
      if getattr(other, size) != getattr(model, size):
        raise ValueError(f"data must be a mujoco.MjData of model (mujoco.MjData(model)) or None, "
                         f"got an MjData of another model ({size} {getattr(other, size)}, "
                         f"model's {getattr(model, size)})")
  return data


def _sizes(model: mujoco.MjModel) -> list[str]:
  """The names of model's sizes (nq, nv, nbody, ...): what an MjData's arrays are sized by."""
  global _SIZES
  if _SIZES is None:
    _SIZES = [name for name in dir(model) if name.startswith("n")
              and isinstance(getattr(model, name), int)]
    # The most telling first: a message names the first size that differs.
    first = [n for n in ("nq", "nv", "nbody", "njnt", "ngeom", "nsite", "nu", "na") if n in _SIZES]
    _SIZES = first + [n for n in _SIZES if n not in first]
  return _SIZES


_SIZES: list[str] | None = None


def free_root(model: mujoco.MjModel) -> bool:
  """Whether model's first joint is a free joint at body 1, the first body under the world: then
  body 1's subtree (its centre of mass, its momentum) is the whole floating robot."""
  return bool(model.njnt and model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE
              and model.jnt_bodyid[0] == 1)
