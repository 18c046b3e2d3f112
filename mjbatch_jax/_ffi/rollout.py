"""Wrapper of cpp/handler_rollout.cc: T knots of nstep substeps from every row, in one call."""

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
  state: jax.Array, ctrls: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int,
  derivative_error: str = HIGHER_ORDER,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(states (..., T, nstate), sensordata (..., T, ns), warnings) of T knots."""
  register()
  lead, nknot = state.shape[:-1], ctrls.shape[-2]
  ffi = jax.ffi.ffi_call(
    "mjbatch_jax_rollout",
    (
      jax.ShapeDtypeStruct((*lead, nknot, spec.nstate), state.dtype),
      jax.ShapeDtypeStruct((*lead, nknot, spec.nsensordata), state.dtype),
      jax.ShapeDtypeStruct((*lead, NWARNING), jnp.int32),
    ),
    vmap_method="broadcast_all",
  )

  def run(s: jax.Array, c: jax.Array, f: jax.Array) -> tuple:
    return tuple(ffi(s, c, f, engine=np.int64(spec.engine), nstep=np.int64(nstep),
                     fields=spec.attribute))

  out = without_derivatives(run, derivative_error, state, ctrls.astype(state.dtype),
                            flat.astype(state.dtype))
  return varying_like(tuple(out), state, ctrls, flat)
