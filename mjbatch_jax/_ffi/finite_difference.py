"""Wrapper of cpp/handler_finite_difference.cc: a step and its finite differences w.r.t. chosen
entries of each row's inputs, every perturbed copy a row of one call, in float64 inside."""

from collections.abc import Sequence

import jax
import numpy as np

from mjbatch_jax._ffi._common import HIGHER_ORDER, register, varying_like, without_derivatives
from mjbatch_jax.params import SimSpec


def call(
  state: jax.Array, ctrl: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int,
  columns: Sequence[int], eps: float, centered: Sequence[bool], tangent: bool = False,
  regime_checked: bool = True, observe: Sequence[str] = (), observe_sizes: Sequence[int] = (),
) -> tuple[jax.Array, ...]:
  """next (..., nstate), sensordata (..., ns), jx (..., k, nstate or nx), jy (..., k, ns), then
  per observed field its values (..., size) and derivatives (..., k, size).

  nstep 0 runs no substep: mj_forward alone on each copy (its sensordata and observed fields).
  Observed fields are taken at the state after the substeps (mj_forward there).

  columns index each simulation's inputs: its row with ctrl written in (0 .. nstate-1), then its
  params side by side (nstate .. nstate+P-1); with tangent, its tangent-space state (positions
  along each dof, velocities, activations: nx = 2 nv + na), then its controls, then its params,
  and jx compares positions with mj_differentiatePos. Sensordata is taken after the last
  substep, as rollout records it. centered[j] differences column j centred (copies at +eps and
  -eps), else forward. Copies that cross a switch of the dynamics are differenced on the side
  that stays in the nominal regime unless regime_checked is False (cpp/finite_difference.h).
  """
  register()
  lead, k = state.shape[:-1], len(columns)
  info = spec.model_info
  width = 2 * info.nv + info.na if tangent else spec.nstate
  shapes = [(spec.nstate,), (spec.nsensordata,), (k, width), (k, spec.nsensordata)]
  for size in observe_sizes:
    shapes += [(size,), (k, size)]
  ffi = jax.ffi.ffi_call(
    "mjbatch_jax_finite_difference",
    tuple(jax.ShapeDtypeStruct((*lead, *shape), state.dtype) for shape in shapes),
    vmap_method="broadcast_all",
  )
  if len(centered) != len(columns):
    raise ValueError(f"{len(columns)} columns need as many centred flags, got {len(centered)}")
  text = ",".join(f"{int(c)}{'c' if flag else ''}" for c, flag in zip(columns, centered,
                                                                          strict=True))

  def run(s: jax.Array, c: jax.Array, f: jax.Array) -> tuple:
    return tuple(ffi(s, c, f, engine=np.int64(spec.engine), fields=spec.attribute,
                     set_const=spec.set_const,
                     nstep=np.int64(nstep), eps=np.float64(eps), tangent=bool(tangent),
                     regime_checked=bool(regime_checked), columns=text,
                     observe=",".join(observe)))

  out = without_derivatives(run, HIGHER_ORDER, state, ctrl.astype(state.dtype),
                            flat.astype(state.dtype))
  return varying_like(tuple(out), state, ctrl, flat)
