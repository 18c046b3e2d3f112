"""Wrapper of cpp/handler_step.cc: nstep substeps of every row."""

import jax
import jax.numpy as jnp
import numpy as np

from mjbatch_jax._ffi._common import (
  HIGHER_ORDER,
  NWARNING,
  register,
  varying_like,
  without_derivatives,
)
from mjbatch_jax.params import SimSpec


def call(
  state: jax.Array, ctrl: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int,
  derivative_error: str = HIGHER_ORDER, return_errors: bool = False,
) -> tuple[jax.Array, ...]:
  """(new state, warnings) of nstep substeps; all of state's dtype but the int32 warnings.

  return_errors: a MuJoCo error in a simulation does not fail the call; (..., ) int32 error
  codes (1: failed, its row is its input row) come last.
  """
  register()
  lead = state.shape[:-1]
  ffi = jax.ffi.ffi_call(
    "mjbatch_jax_step",
    (
      jax.ShapeDtypeStruct(state.shape, state.dtype),
      jax.ShapeDtypeStruct((*lead, NWARNING), jnp.int32),
      jax.ShapeDtypeStruct(lead, jnp.int32),
    ),
    vmap_method="broadcast_all",
    # The new rows may take the old rows' buffer: zero-copy for callers that donate the state.
    input_output_aliases={0: 0},
  )

  def run(s: jax.Array, c: jax.Array, f: jax.Array) -> tuple:
    return tuple(ffi(s, c, f, engine=np.int64(spec.engine), nstep=np.int64(nstep),
                     fields=spec.attribute, set_const=spec.set_const,
                     raise_errors=not return_errors))

  out = without_derivatives(run, derivative_error, state, ctrl.astype(state.dtype),
                            flat.astype(state.dtype))
  out = varying_like(tuple(out), state, ctrl, flat)
  return out if return_errors else out[:2]
