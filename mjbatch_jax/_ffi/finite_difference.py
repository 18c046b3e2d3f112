"""Wrapper of cpp/handler_finite_difference.cc: a step and its finite differences w.r.t. chosen
entries of each row's inputs, every perturbed copy a row of one call, in float64 inside."""

from collections.abc import Sequence

import jax
import numpy as np

from mjbatch_jax._ffi._common import HIGHER_ORDER, register, varying_like, without_derivatives
from mjbatch_jax.params import SimSpec


def call(
  state: jax.Array, ctrl: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int,
  columns: Sequence[int], eps: float, centered: bool,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """next (..., nstate), sensordata (..., ns), jx (..., k, nstate), jy (..., k, ns).

  columns index each simulation's inputs: its row with ctrl written in (0 .. nstate-1), then its
  params side by side (nstate .. nstate+P-1). Sensordata is taken after the last substep, as
  rollout records it.
  """
  register()
  lead, k = state.shape[:-1], len(columns)
  shapes = ((spec.nstate,), (spec.nsensordata,), (k, spec.nstate), (k, spec.nsensordata))
  ffi = jax.ffi.ffi_call(
    "mjbatch_jax_finite_difference",
    tuple(jax.ShapeDtypeStruct((*lead, *shape), state.dtype) for shape in shapes),
    vmap_method="broadcast_all",
  )
  text = ",".join(str(int(c)) for c in columns)

  def run(s: jax.Array, c: jax.Array, f: jax.Array) -> tuple:
    return tuple(ffi(s, c, f, engine=np.int64(spec.engine), fields=spec.attribute,
                     set_const=spec.set_const,
                     nstep=np.int64(nstep), eps=np.float64(eps), centered=bool(centered),
                     columns=text))

  out = without_derivatives(run, HIGHER_ORDER, state, ctrl.astype(state.dtype),
                            flat.astype(state.dtype))
  return varying_like(tuple(out), state, ctrl, flat)
