"""What the wrappers share: registration with XLA, the engine attributes, and the typing that a
custom call's results need inside shard_map and under differentiation."""

import threading
from collections.abc import Callable
from typing import Any

import jax
import mujoco

from mjbatch_jax._extension import ext

NWARNING = int(mujoco.mjtWarning.mjNWARNING)

HIGHER_ORDER = (
  "mjbatch_jax computes first derivatives only (finite differences as extra rows of one custom"
  " call); jax.hessian, jacfwd(jacrev(...)) and other higher-order derivatives are not supported"
)

# JAX's tracers of forward and linearized differentiation (private names, so matched by name:
# if a JAX release renames them, JAX's own "cannot be differentiated" error shows instead).
DIFFERENTIATION_TRACERS = frozenset({"JVPTracer", "LinearizeTracer"})

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


def without_derivatives(call: Callable[..., Any], message: str, *arrays: Any) -> Any:
  """call(*arrays), which raises ValueError(message) if JAX differentiates it.

  The differentiable functions have their own rules around these calls; a derivative that
  reaches a call itself is a higher-order one (or of a variant without a rule), and without this
  JAX would say only that ffi_call has no differentiation rule.
  """
  # Under a transformation that evaluates the primal function directly (linearize inlines a
  # custom_jvp whose inputs it knows), the rule below never runs and JAX would meet the ffi_call
  # itself; tracers of differentiation among the inputs show that case.
  for leaf in jax.tree_util.tree_leaves(arrays):
    if type(leaf).__name__ in DIFFERENTIATION_TRACERS:
      raise ValueError(message)
  wrapped = jax.custom_jvp(call)

  def refuse(primals: tuple, tangents: tuple) -> Any:
    raise ValueError(message)

  wrapped.defjvp(refuse)
  return wrapped(*arrays)


def _varying_axes(x: Any) -> frozenset[str]:
  aval = jax.typeof(x)
  # Called vma in some JAX versions, manual_axis_type.varying in others.
  axes = getattr(aval, "vma", None)
  if axes is None:
    axes = getattr(getattr(aval, "manual_axis_type", None), "varying", None)
  return frozenset(axes or ())


def varying_like(outputs: Any, *inputs: Any) -> Any:
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
