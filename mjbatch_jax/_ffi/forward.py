"""Wrapper of cpp/handler_forward.cc: mj_forward's values of mjData fields."""

import jax
import numpy as np

from mjbatch_jax._ffi._common import HIGHER_ORDER, register, varying_like, without_derivatives
from mjbatch_jax.params import SimSpec


def call(
  state: jax.Array, flat: jax.Array, spec: SimSpec, names: tuple[str, ...],
  sizes: tuple[int, ...],
) -> tuple[jax.Array, ...]:
  """The fields names of each row after mj_forward, each (..., size)."""
  register()
  lead = state.shape[:-1]
  ffi = jax.ffi.ffi_call(
    "mjbatch_jax_forward",
    tuple(jax.ShapeDtypeStruct((*lead, size), state.dtype) for size in sizes),
    vmap_method="broadcast_all",
  )

  def run(s: jax.Array, f: jax.Array) -> tuple:
    return tuple(ffi(s, f, engine=np.int64(spec.engine), fields=spec.attribute,
                     set_const=spec.set_const,
                     outputs=",".join(names)))

  out = without_derivatives(run, HIGHER_ORDER, state, flat.astype(state.dtype))
  return varying_like(tuple(out), state, flat)
