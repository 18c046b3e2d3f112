"""Wrapper of cpp/handler_transition_fd.cc: MuJoCo's mjd_transitionFD per row, on the pool."""

import jax
import numpy as np

from mjbatch_jax._ffi._common import HIGHER_ORDER, register, varying_like, without_derivatives
from mjbatch_jax.params import SimSpec


def call(
  state: jax.Array, ctrl: jax.Array, flat: jax.Array, spec: SimSpec, eps: float,
  centered: bool, sensors: bool,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """A, B, C, D of each row, in state's dtype (float64 inside); C and D empty without sensors."""
  register()
  lead = state.shape[:-1]
  info = spec.model_info
  nx, nu, ns = 2 * info.nv + info.na, spec.nu, spec.nsensordata if sensors else 0
  ffi = jax.ffi.ffi_call(
    "mjbatch_jax_transition_fd",
    tuple(
      jax.ShapeDtypeStruct((*lead, *shape), state.dtype)
      for shape in ((nx, nx), (nx, nu), (ns, nx), (ns, nu))
    ),
    vmap_method="broadcast_all",
  )

  def run(s: jax.Array, c: jax.Array, f: jax.Array) -> tuple:
    return tuple(ffi(s, c, f, engine=np.int64(spec.engine), fields=spec.attribute,
                     set_const=spec.set_const,
                     eps=np.float64(eps), centered=bool(centered), sensors=bool(sensors)))

  out = without_derivatives(run, HIGHER_ORDER, state, ctrl.astype(state.dtype),
                            flat.astype(state.dtype))
  return varying_like(tuple(out), state, ctrl, flat)
