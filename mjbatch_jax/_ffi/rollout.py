"""Wrapper of cpp/handler_rollout.cc: T knots of nstep substeps from every row, in one call."""

from collections.abc import Sequence

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
  derivative_error: str = HIGHER_ORDER, observe: Sequence[str] = (),
  observe_sizes: Sequence[int] = (), observe_new: bool = True, return_errors: bool = False,
) -> tuple[jax.Array, ...]:
  """(states (..., T, nstate), sensordata (..., T, ns), warnings, *observed (..., T, size)).

  observe names mjData fields copied after each knot, observe_sizes their sizes: at the new
  state (observe_new) or as mj_step left them. return_errors: a MuJoCo error in a simulation
  does not fail the call; (...,) int32 error codes (1: failed) come last.
  """
  register()
  lead, nknot = state.shape[:-1], ctrls.shape[-2]
  ffi = jax.ffi.ffi_call(
    "mjbatch_jax_rollout",
    (
      jax.ShapeDtypeStruct((*lead, nknot, spec.nstate), state.dtype),
      jax.ShapeDtypeStruct((*lead, nknot, spec.nsensordata), state.dtype),
      jax.ShapeDtypeStruct((*lead, NWARNING), jnp.int32),
      jax.ShapeDtypeStruct(lead, jnp.int32),
      *(jax.ShapeDtypeStruct((*lead, nknot, size), state.dtype) for size in observe_sizes),
    ),
    vmap_method="broadcast_all",
  )

  def run(s: jax.Array, c: jax.Array, f: jax.Array) -> tuple:
    return tuple(ffi(s, c, f, engine=np.int64(spec.engine), nstep=np.int64(nstep),
                     fields=spec.attribute, set_const=spec.set_const,
                     raise_errors=not return_errors, observe=",".join(observe),
                     observe_new=bool(observe_new)))

  out = without_derivatives(run, derivative_error, state, ctrls.astype(state.dtype),
                            flat.astype(state.dtype))
  states, sensordata, warnings, errors, *observed = varying_like(tuple(out), state, ctrls, flat)
  extra = (errors,) if return_errors else ()
  return (states, sensordata, warnings, *observed, *extra)
