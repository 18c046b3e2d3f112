"""Forward-mode derivative rules of step, rollout and forward, by finite differences.

Each rule asks for the columns that have a tangent (qpos, qvel and act of the rows, the controls,
the params) and gets them from one custom call in which every perturbed copy of every simulation
is another row. For step and rollout the copies, the perturbations and the differences live in
float64 inside the engine (cpp/handler_finite_difference.cc), whatever the arrays' dtype, and
only the derivative is rounded: float32 callers get float64-quality Jacobians. forward's copies
are built here, in the arrays' dtype.

JAX derives reverse mode (grad, vjp, jacrev) from these rules by linearity. Higher-order
derivatives reach a custom call without a rule and raise ValueError (see _ffi._common).
"""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from mjbatch_jax import _ffi
from mjbatch_jax._checks import flatten
from mjbatch_jax.params import SimSpec

# Forward differences with eps = 1e-6 on float64 rows: truncation error about eps times the
# curvature, rounding error about 1e-16 / eps, both near 1e-6 relative for smooth dynamics. The
# step rules difference float64 rows for any dtype; forward's rows have the arrays' dtype, so it
# takes 1e-3 with float32 arrays.
DEFAULT_EPS = 1e-6
FLOAT32_ROWS_EPS = 1e-3

# Whether the engine differences only copies that stay in their nominal row's regime (see
# cpp/finite_difference.h). Read when a rule is traced; off only to measure plain differences
# beside the default (benchmarks/derivative_accuracy.py), in functions traced after setting it.
REGIME_CHECKED = True


def forward_eps(dtype: Any, eps: float | None) -> float:
  if eps is not None:
    return eps
  return DEFAULT_EPS if jnp.dtype(dtype) == jnp.float64 else FLOAT32_ROWS_EPS


def _state_columns(spec: SimSpec) -> np.ndarray:
  """Indices in a row of the entries that derivatives perturb: qpos, qvel, act."""
  layout = spec.model_info.layout
  return np.r_[
    np.arange(layout.qpos.start, layout.qpos.stop),
    np.arange(layout.qvel.start, layout.qvel.stop),
    np.arange(layout.act.start, layout.act.stop),
  ].astype(np.int64)


def _ctrl_columns(spec: SimSpec) -> np.ndarray:
  layout = spec.model_info.layout
  return np.arange(layout.ctrl.start, layout.ctrl.stop, dtype=np.int64)


def _is_zero(tangent: Any) -> bool:
  return isinstance(tangent, SymbolicZero)


def _first_order_only(*primals: Any) -> None:
  """Refuse a rule whose primals are themselves being differentiated (a second derivative).

  First-order differentiation hands a rule plain (or staged) primal values; a higher-order one
  hands it the outer differentiation's tracers, which would otherwise reach the custom calls
  inside, where JAX could only say that ffi_call has no rule.
  """
  for leaf in jax.tree_util.tree_leaves(primals):
    if type(leaf).__name__ in _ffi.DIFFERENTIATION_TRACERS:
      raise ValueError(_ffi.HIGHER_ORDER)


def _columns(spec: SimSpec, wrt: tuple[bool, bool, bool], width: int) -> np.ndarray:
  parts = [np.zeros(0, np.int64)]
  if wrt[0]:
    parts.append(_state_columns(spec))
  if wrt[1]:
    parts.append(_ctrl_columns(spec))
  if wrt[2]:
    parts.append(spec.nstate + np.asarray(spec.param_columns, dtype=np.int64).reshape(-1))
  return np.concatenate(parts)


def _tangent_in(
  spec: SimSpec, wrt: tuple[bool, bool, bool], t_state: Any, t_ctrl: Any, t_flat: Any
) -> jax.Array:
  parts = []
  if wrt[0]:
    parts.append(t_state[:, _state_columns(spec)])
  if wrt[1]:
    parts.append(t_ctrl)
  if wrt[2]:
    parts.append(t_flat[:, np.asarray(spec.param_columns, dtype=np.int64)])
  return jnp.concatenate(parts, axis=-1)


def centred_columns(spec: SimSpec, columns: np.ndarray, centered: bool | None) -> list[bool]:
  """Which columns to difference centred: all (True), none (False), or by default (None) the
  positions, where contacts curve the dynamics most (measured in docs/derivatives.md)."""
  if centered is not None:
    return [bool(centered)] * len(columns)
  qpos = spec.model_info.layout.qpos
  return [bool(qpos.start <= c < qpos.stop) for c in columns.tolist()]


def fd_rows(
  state: jax.Array, ctrl: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int,
  wrt: tuple[bool, bool, bool], eps: float, centered: bool | None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """Nominal results and Jacobians of one step of (M, ...) inputs w.r.t. the columns of wrt.

  wrt = (qpos/qvel/act of the rows, ctrl, params). Returns next (M, nstate), sensordata
  (M, ns), and d next / d columns (M, k, nstate), d sensordata / d columns (M, k, ns).
  """
  columns = _columns(spec, wrt, flat.shape[-1])
  return _ffi.finite_difference.call(
    state, ctrl, flat, spec, nstep, columns.tolist(), eps, centred_columns(spec, columns, centered),
    regime_checked=REGIME_CHECKED,
  )


# ---------------------------------------------------------------------------------------------
# step


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5, 6))
def step(
  state: jax.Array, ctrl: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int, eps: float,
  centered: bool | None,
) -> Any:
  """The differentiable step on checked inputs (see mjbatch_jax.step)."""
  return _ffi.step.call(state, ctrl, flat, spec, nstep)[0]


def _step_jvp(
  spec: SimSpec, nstep: int, eps: float, centered: bool | None, primals: tuple, tangents: tuple
) -> tuple:
  state, ctrl, flat = primals
  _first_order_only(*primals)
  t_state, t_ctrl, t_flat = tangents
  with_flat = not _is_zero(t_flat) and len(spec.param_columns) > 0
  wrt = (not _is_zero(t_state), not _is_zero(t_ctrl), with_flat)
  if not any(wrt):
    out = step(state, ctrl, flat, spec, nstep, eps, centered)
    return out, jnp.zeros_like(out)
  lead, width = state.shape[:-1], flat.shape[-1]
  s, c, f = flatten(state, spec.nstate), flatten(ctrl, spec.nu), flatten(flat, width)
  nominal, _, jacobian, _ = fd_rows(s, c, f, spec, nstep, wrt, eps, centered)
  t_in = _tangent_in(spec, wrt, flatten(t_state, spec.nstate) if wrt[0] else None,
                     flatten(t_ctrl, spec.nu) if wrt[1] else None,
                     flatten(t_flat, width) if wrt[2] else None)
  t_out = jnp.einsum("mk,mks->ms", t_in.astype(jacobian.dtype), jacobian)
  return nominal.reshape(*lead, spec.nstate), t_out.reshape(*lead, spec.nstate)


step.defjvp(_step_jvp, symbolic_zeros=True)


# ---------------------------------------------------------------------------------------------
# rollout


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5, 6))
def rollout(
  state: jax.Array, ctrls: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int, eps: float,
  centered: bool | None,
) -> Any:
  """The differentiable rollout on checked inputs (see mjbatch_jax.rollout)."""
  states, sensordata, _ = _ffi.rollout.call(state, ctrls, flat, spec, nstep)
  return states, sensordata


def _rollout_jvp(
  spec: SimSpec, nstep: int, eps: float, centered: bool | None, primals: tuple, tangents: tuple
) -> tuple:
  state, ctrls, flat = primals
  _first_order_only(*primals)
  t_state, t_ctrls, t_flat = tangents
  with_ctrl = not _is_zero(t_ctrls)
  with_flat = not _is_zero(t_flat) and len(spec.param_columns) > 0
  if _is_zero(t_state) and not with_ctrl and not with_flat:
    out = rollout(state, ctrls, flat, spec, nstep, eps, centered)
    return out, jax.tree_util.tree_map(jnp.zeros_like, out)
  # After the first knot the state depends on whatever was perturbed: its columns always count.
  wrt = (True, with_ctrl, with_flat)
  lead, nknot = state.shape[:-1], ctrls.shape[-2]
  s = flatten(state, spec.nstate)
  m, width = s.shape[0], flat.shape[-1]
  u = ctrls.reshape(m, nknot, spec.nu).swapaxes(0, 1)
  f = flatten(flat, width)
  ts = jnp.zeros_like(s) if _is_zero(t_state) else flatten(t_state, spec.nstate)
  tu = t_ctrls.reshape(m, nknot, spec.nu).swapaxes(0, 1) if with_ctrl else None
  tf = flatten(t_flat, width) if with_flat else None

  def knot(carry: tuple, inputs: tuple) -> tuple:
    x, tx = carry
    u_t, tu_t = inputs
    nominal, sensors, jx, jy = fd_rows(x, u_t, f, spec, nstep, wrt, eps, centered)
    t_in = _tangent_in(spec, wrt, tx, tu_t, tf).astype(jx.dtype)
    tx_next = jnp.einsum("mk,mks->ms", t_in, jx)
    ty = jnp.einsum("mk,mks->ms", t_in, jy)
    return (nominal, tx_next), (nominal, sensors, tx_next, ty)

  xs = (u, tu if with_ctrl else jnp.zeros_like(u))
  _, (states, sensordata, t_states, t_sensordata) = jax.lax.scan(knot, (s, ts), xs)

  def unflatten(x: jax.Array) -> jax.Array:
    return x.swapaxes(0, 1).reshape(*lead, nknot, x.shape[-1])

  return (unflatten(states), unflatten(sensordata)), (unflatten(t_states), unflatten(t_sensordata))


rollout.defjvp(_rollout_jvp, symbolic_zeros=True)


# ---------------------------------------------------------------------------------------------
# forward


def nudged(rows: jax.Array, columns: np.ndarray, eps: float) -> jax.Array:
  """(M, k, width): k copies of each (M, width) row, copy j with entry columns[j] moved by eps."""
  bump = np.zeros((len(columns), rows.shape[-1]))
  bump[np.arange(len(columns)), columns] = eps
  return rows[:, None] + jnp.asarray(bump, rows.dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4, 5))
def forward(
  state: jax.Array, flat: jax.Array, spec: SimSpec, names: tuple[str, ...],
  sizes: tuple[int, ...], eps: float | None,
) -> Any:
  """The differentiable forward on checked inputs (see mjbatch_jax.forward)."""
  return _ffi.forward.call(state, flat, spec, names, sizes)


def _forward_jvp(
  spec: SimSpec, names: tuple[str, ...], sizes: tuple[int, ...], eps: float | None,
  primals: tuple, tangents: tuple,
) -> tuple:
  state, flat = primals
  _first_order_only(*primals)
  t_state, t_flat = tangents
  with_state = not _is_zero(t_state)
  with_flat = not _is_zero(t_flat) and len(spec.param_columns) > 0
  if not with_state and not with_flat:
    out = forward(state, flat, spec, names, sizes, eps)
    return out, tuple(jnp.zeros_like(o) for o in out)
  lead, width = state.shape[:-1], flat.shape[-1]
  h = forward_eps(state.dtype, eps)
  s, f = flatten(state, spec.nstate), flatten(flat, width)
  m = s.shape[0]
  # The controls are part of the row here: the state columns are qpos, qvel, act and ctrl.
  columns = np.r_[_state_columns(spec), _ctrl_columns(spec)]
  blocks_state, blocks_flat, parts = [s[:, None]], [f[:, None]], []
  if with_state:
    blocks_state.append(nudged(s, columns, h))
    blocks_flat.append(jnp.broadcast_to(f[:, None], (m, len(columns), width)))
    parts.append(flatten(t_state, spec.nstate)[:, columns])
  if with_flat:
    # Only the entries the leaves hold: the rest are the model's constants.
    held = np.asarray(spec.param_columns, dtype=np.int64)
    blocks_state.append(jnp.broadcast_to(s[:, None], (m, len(held), spec.nstate)))
    blocks_flat.append(nudged(f, held, h))
    parts.append(flatten(t_flat, width)[:, held])
  rows = jnp.concatenate(blocks_state, axis=1)
  k = rows.shape[1]
  out = _ffi.forward.call(
    rows.reshape(m * k, spec.nstate), jnp.concatenate(blocks_flat, axis=1).reshape(m * k, width),
    spec, names, sizes,
  )
  t_in = jnp.concatenate(parts, axis=-1)
  primal, tangent = [], []
  for values, size in zip(out, sizes, strict=True):
    values = values.reshape(m, k, size)
    primal.append(values[:, 0].reshape(*lead, size))
    jacobian = (values[:, 1:] - values[:, :1]) * (1 / h)
    tangent.append(jnp.einsum("mk,mks->ms", t_in, jacobian).reshape(*lead, size))
  return tuple(primal), tuple(tangent)


forward.defjvp(_forward_jvp, symbolic_zeros=True)


# ---------------------------------------------------------------------------------------------
# step and rollout with observations at the new state
#
# The primal is one fused call (the observations come from mj_forward inside the same custom
# call as the step); a derivative is the step's (or rollout's) rule followed by forward's rule at
# the new states, which is what the fused call computes.


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5, 6, 7, 8))
def step_observed(
  state: jax.Array, ctrl: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int,
  eps: float | None, centered: bool | None, names: tuple[str, ...], sizes: tuple[int, ...],
) -> Any:
  """(new state, observations at it) on checked inputs (see mjbatch_jax.step)."""
  states, _, _, *observed = _ffi.rollout.call(
    state, ctrl[..., None, :], flat, spec, nstep, observe=names, observe_sizes=sizes
  )
  return states[..., 0, :], tuple(o[..., 0, :] for o in observed)


def _step_observed_jvp(
  spec: SimSpec, nstep: int, eps: float | None, centered: bool | None, names: tuple[str, ...],
  sizes: tuple[int, ...], primals: tuple, tangents: tuple,
) -> tuple:
  new, t_new = _step_jvp(spec, nstep, eps or DEFAULT_EPS, centered, primals, tangents)
  flat, t_flat = primals[2], tangents[2]
  observed, t_observed = _forward_jvp(spec, names, sizes, eps, (new, flat), (t_new, t_flat))
  return (new, tuple(observed)), (t_new, tuple(t_observed))


step_observed.defjvp(_step_observed_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5, 6, 7, 8))
def rollout_observed(
  state: jax.Array, ctrls: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int,
  eps: float | None, centered: bool | None, names: tuple[str, ...], sizes: tuple[int, ...],
) -> Any:
  """(states, sensordata, observations after each knot) on checked inputs."""
  states, sensordata, _, *observed = _ffi.rollout.call(
    state, ctrls, flat, spec, nstep, observe=names, observe_sizes=sizes
  )
  return states, sensordata, tuple(observed)


def _rollout_observed_jvp(
  spec: SimSpec, nstep: int, eps: float | None, centered: bool | None, names: tuple[str, ...],
  sizes: tuple[int, ...], primals: tuple, tangents: tuple,
) -> tuple:
  (states, sensordata), (t_states, t_sensordata) = _rollout_jvp(
    spec, nstep, eps or DEFAULT_EPS, centered, primals, tangents
  )
  flat, t_flat = primals[2], tangents[2]
  nknot = states.shape[-2]

  def per_knot(x: Any) -> Any:  # (..., P) -> (..., T, P), as each knot's params
    if _is_zero(x):
      return x
    return jnp.broadcast_to(x[..., None, :], (*x.shape[:-1], nknot, x.shape[-1]))

  # A symbolic zero t_flat stays one: forward's rule never reads its shape.
  observed, t_observed = _forward_jvp(
    spec, names, sizes, eps, (states, per_knot(flat)), (t_states, per_knot(t_flat))
  )
  return (states, sensordata, tuple(observed)), (t_states, t_sensordata, tuple(t_observed))


rollout_observed.defjvp(_rollout_observed_jvp, symbolic_zeros=True)
