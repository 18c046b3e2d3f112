"""The custom calls themselves: one jax.ffi.ffi_call per handler, on checked, flattened inputs.

Callers pass the params already side by side as one (..., P) array and a SimSpec that names the
engine; the public functions check everything before they get here.
"""

import threading
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjbatch_jax._extension import ext
from mjbatch_jax.params import SimSpec

NWARNING = int(mujoco.mjtWarning.mjNWARNING)

_registered = False
_register_lock = threading.Lock()


def register() -> None:
  """Register the handlers with XLA, once, when a function is first traced.

  Lazily, so that importing the package neither starts the JAX backend nor fails without one.
  """
  global _registered
  with _register_lock:
    if _registered:
      return
    if not hasattr(jax, "ffi") or not hasattr(jax.ffi, "register_ffi_target"):
      raise ImportError(f"mjbatch_jax needs jax >= 0.10.2 with jax.ffi; found {jax.__version__}")
    for name, capsule in ext.handlers().items():
      jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    _registered = True


def step(
  state: jax.Array, ctrl: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int
) -> tuple[jax.Array, jax.Array]:
  """(new state, warnings) of nstep substeps; all of state's dtype but the int32 warnings."""
  register()
  lead = state.shape[:-1]
  call = jax.ffi.ffi_call(
    "mjbatch_jax_step",
    (
      jax.ShapeDtypeStruct(state.shape, state.dtype),
      jax.ShapeDtypeStruct((*lead, NWARNING), jnp.int32),
    ),
    vmap_method="broadcast_all",
    # The new rows may take the old rows' buffer: zero-copy for callers that donate the state.
    input_output_aliases={0: 0},
  )
  out = call(
    state, ctrl.astype(state.dtype), flat.astype(state.dtype),
    engine=np.int64(spec.engine), nstep=np.int64(nstep), fields=spec.attribute,
  )
  return _varying_like(tuple(out), state, ctrl, flat)


def rollout(
  state: jax.Array, ctrls: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(states (..., T, nstate), sensordata (..., T, ns), warnings) of T knots of nstep substeps."""
  register()
  lead, nknot = state.shape[:-1], ctrls.shape[-2]
  call = jax.ffi.ffi_call(
    "mjbatch_jax_rollout",
    (
      jax.ShapeDtypeStruct((*lead, nknot, spec.nstate), state.dtype),
      jax.ShapeDtypeStruct((*lead, nknot, spec.nsensordata), state.dtype),
      jax.ShapeDtypeStruct((*lead, NWARNING), jnp.int32),
    ),
    vmap_method="broadcast_all",
  )
  out = call(
    state, ctrls.astype(state.dtype), flat.astype(state.dtype),
    engine=np.int64(spec.engine), nstep=np.int64(nstep), fields=spec.attribute,
  )
  return _varying_like(tuple(out), state, ctrls, flat)


def forward(
  state: jax.Array, flat: jax.Array, spec: SimSpec, names: tuple[str, ...], sizes: tuple[int, ...]
) -> tuple[jax.Array, ...]:
  """mj_forward's values of mjData fields names, each (..., size)."""
  register()
  lead = state.shape[:-1]
  call = jax.ffi.ffi_call(
    "mjbatch_jax_forward",
    tuple(jax.ShapeDtypeStruct((*lead, size), state.dtype) for size in sizes),
    vmap_method="broadcast_all",
  )
  out = call(
    state, flat.astype(state.dtype),
    engine=np.int64(spec.engine), fields=spec.attribute, outputs=",".join(names),
  )
  return _varying_like(tuple(out), state, flat)


def transition_fd(
  state: jax.Array, ctrl: jax.Array, flat: jax.Array, spec: SimSpec, nv: int, na: int,
  eps: float, centered: bool, sensors: bool,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """MuJoCo's mjd_transitionFD per simulation on the pool: A, B, C, D (float64)."""
  register()
  lead = state.shape[:-1]
  nx, nu, ns = 2 * nv + na, spec.nu, spec.nsensordata if sensors else 0
  call = jax.ffi.ffi_call(
    "mjbatch_jax_transition_fd",
    tuple(
      jax.ShapeDtypeStruct((*lead, *shape), jnp.float64)
      for shape in ((nx, nx), (nx, nu), (ns, nx), (ns, nu))
    ),
    vmap_method="broadcast_all",
  )
  out = call(
    state, ctrl, flat,
    engine=np.int64(spec.engine), fields=spec.attribute, eps=np.float64(eps),
    centered=bool(centered), sensors=bool(sensors),
  )
  return _varying_like(tuple(out), state, ctrl, flat)


def _varying_axes(x: Any) -> frozenset[str]:
  aval = jax.typeof(x)
  # Called vma in some JAX versions, manual_axis_type.varying in others.
  axes = getattr(aval, "vma", None)
  if axes is None:
    axes = getattr(getattr(aval, "manual_axis_type", None), "varying", None)
  return frozenset(axes or ())


def _varying_like(outputs: Any, *inputs: Any) -> Any:
  """Mark outputs as varying over the shard_map axes that any input varies over.

  A custom call's results carry no such type of their own; without it, a step inside shard_map
  would not match its carry in a scan or fori_loop.
  """
  axes: frozenset[str] = frozenset()
  for x in inputs:
    axes |= _varying_axes(x)
  if not axes:
    return outputs
  names = tuple(sorted(axes))

  def vary(x: Any) -> Any:
    missing = tuple(a for a in names if a not in _varying_axes(x))
    return jax.lax.pcast(x, missing, to="varying") if missing else x

  return jax.tree_util.tree_map(vary, outputs)
