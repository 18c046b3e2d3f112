"""Checks of the public functions' arguments, before anything is traced or run.

Every public function (step, rollout, forward, transition_fd, param_fd) checks its inputs here,
so a bad shape, dtype, range or a closed simulator is a ValueError that says what was expected,
raised in Python before any custom call exists.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.core import Tracer

from mjbatch_jax import _programs
from mjbatch_jax._extension import ext
from mjbatch_jax.params import Params, SimSpec

# The dtypes the engine reads and writes; its physics is float64 inside either way.
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_INT32_MAX = 2**31 - 1


def check_params(params: Any) -> SimSpec:
  check_callbacks()
  if not isinstance(params, Params):
    raise ValueError(
      f"params must come from Simulator.params(num_sims, fields), got {type(params).__name__}"
    )
  spec = params.spec
  handle = spec.handle() if spec.handle is not None else None
  if handle is not None:
    handle.check_process()
  if spec.closed:
    raise ValueError(f"the Simulator of these params (engine {spec.engine}) is closed")
  _programs.used(spec.engine)
  return spec


def check_callbacks() -> None:
  """ValueError if a MuJoCo callback (mjcb_control, ...) is a Python function.

  The engine's threads cannot call into Python; the handlers refuse such a callback too, for
  functions compiled before it was installed.
  """
  if mujoco.get_mjcb_time() is None:
    # MuJoCo's bindings then hold their own C timer there, which threads may call.
    ext.remember_default_timer()
  message = ext.python_callback()
  if message:
    raise ValueError(message)


def floating(name: str, x: Any) -> jax.Array:
  """x as an array of float32 or float64; ValueError for anything else."""
  try:
    x = jnp.asarray(x)
  except TypeError as e:
    raise ValueError(f"{name} must be a float32 or float64 array, got {type(x).__name__}") from e
  if x.dtype not in _DTYPES:
    raise ValueError(f"{name} must be float32 or float64, got {x.dtype}")
  return x


def check_nstep(nstep: Any) -> int:
  if isinstance(nstep, Tracer):
    raise ValueError(
      "nstep must be a Python int known at trace time, got a traced value: mark it static, e.g."
      " jax.jit(f, static_argnames='nstep')"
    )
  if (
    not isinstance(nstep, (int, np.integer))
    or isinstance(nstep, bool)
    or not 1 <= nstep <= _INT32_MAX
  ):
    raise ValueError(f"nstep must be an int in [1, 2**31 - 1], got {nstep!r}")
  return int(nstep)


def check_eps(eps: Any) -> float:
  if isinstance(eps, Tracer):
    raise ValueError("eps must be a Python float known at trace time, got a traced value")
  try:
    value = float(eps)
  except (TypeError, ValueError):
    raise ValueError(f"eps must be a finite float > 0, got {eps!r}") from None
  if not (math.isfinite(value) and value > 0):
    raise ValueError(f"eps must be a finite float > 0, got {eps!r}")
  return value


def check_bool(name: str, value: Any) -> bool:
  if not isinstance(value, (bool, np.bool_)):
    raise ValueError(f"{name} must be a bool, got {value!r}")
  return bool(value)


def state_and_params(
  state: Any, params: Params
) -> tuple[jax.Array, jax.Array, SimSpec, tuple[int, ...]]:
  """The state and the params side by side as one (..., P) array, checked against each other."""
  spec = check_params(params)
  state = floating("state", state)
  if state.ndim < 1 or state.shape[-1] != spec.nstate:
    raise ValueError(f"state must be (..., nstate={spec.nstate}), got shape {state.shape}")
  lead = state.shape[:-1]
  dtype = state.dtype
  columns = []
  for i, (name, value) in enumerate(zip(spec.fields, params.values(), strict=True)):
    value = floating(f"params[{name!r}]", value)
    entry, shape, shared = spec.leaf_shape(i), spec.shapes[i], spec.is_shared(i)
    want = entry if shared else (*lead, *entry)
    if value.shape != want:
      whose = "shared by all simulations" if shared else f"to match state {state.shape}"
      raise ValueError(f"params[{name!r}] must have shape {want} ({whose}), got {value.shape}")
    value = value.astype(dtype)
    if shared:  # broadcast here, so that a gradient sums over the simulations, as JAX's would
      value = jnp.broadcast_to(value, (*lead, *entry))
    rows = spec.selection(i)
    if rows is not None:  # the selected rows over the model's values of the others
      base = jnp.asarray(model_value(spec.model_info.model, name), dtype)
      base = jnp.broadcast_to(base, (*lead, *shape))
      index = (Ellipsis, np.asarray(rows), *(slice(None),) * (len(shape) - 1))
      value = base.at[index].set(value)
    columns.append(value.reshape(*lead, int(np.prod(shape))))
  flat = jnp.concatenate(columns, axis=-1) if columns else jnp.zeros((*lead, 0), dtype)
  return state, flat, spec, lead


def model_value(model: mujoco.MjModel, name: str) -> np.ndarray:
  """The model's float64 values of a params field ("body_mass", "opt.gravity")."""
  if name.startswith("opt."):
    return np.asarray(getattr(model.opt, name[4:]), dtype=np.float64)
  return np.asarray(getattr(model, name), dtype=np.float64)


def checked_inputs(
  state: Any, ctrl: Any, params: Params, nstep: Any
) -> tuple[jax.Array, jax.Array, jax.Array, SimSpec, tuple[int, ...]]:
  """state, ctrl and the params side by side, checked against each other, in state's dtype."""
  check_nstep(nstep)
  state, flat, spec, lead = state_and_params(state, params)
  ctrl = floating("ctrl", ctrl)
  if ctrl.shape != (*lead, spec.nu):
    raise ValueError(f"ctrl must have shape {(*lead, spec.nu)}, got {ctrl.shape}")
  return state, ctrl.astype(state.dtype), flat, spec, lead


def forward_shape(spec: SimSpec, name: Any, in_step: bool = False) -> tuple[int, ...]:
  """Shape of one simulation's values of mjData field name, checked by the engine.

  in_step: the field is observed as mj_step leaves it (observe_at="step").
  """
  if not isinstance(name, str):
    raise ValueError(f"field names must be strings, got {name!r}")
  info = spec.model_info
  cache = _forward_shapes.setdefault(spec.engine, {})
  if name not in cache:
    size = ext.data_field_size(spec.engine, name)  # ValueError naming the field
    shape = tuple(np.shape(getattr(mujoco.MjData(info.model), name)))
    cache[name] = shape if math.prod(shape) == size else (size,)
  if in_step:
    ext.data_field_size(spec.engine, name, True)  # ValueError for fields mj_step leaves alone
  return cache[name]


# Shapes of forward's fields by engine id: an id always stands for the same model.
_forward_shapes: dict[int, dict[str, tuple[int, ...]]] = {}


def flatten(x: jax.Array, width: int) -> jax.Array:
  """(..., width) as (M, width); explicit M, since width (or M) may be 0."""
  return x.reshape(math.prod(x.shape[:-1]), width)
