"""Forward-mode derivative rules of step, rollout and forward, by finite differences.

Each rule asks for the columns that have a tangent (qpos, qvel and act of the rows, the controls,
the params) and gets them from one custom call in which every perturbed copy of every simulation
is another row (cpp/finite_difference.h): the copies, the perturbations and the differences live
in float64 inside the engine whatever the arrays' dtype, and only the derivative is rounded, so
float32 callers get float64-quality Jacobians; a copy that crosses a switch of the dynamics (a
contact, a limit, a cone state, a clamp, a solver iteration) is replaced by one that does not.
Observed fields (forward's, and observe= of step and rollout) are differenced in the same call,
from the same copies.

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

# eps = 1e-6 on float64 rows: truncation error about eps times the curvature (centred: its
# square), rounding error about 1e-16 / eps; docs/derivatives.md measures both through contact.
DEFAULT_EPS = 1e-6

# Whether the engine differences only copies that stay in their nominal row's regime (see
# cpp/finite_difference.h). Read when a rule is traced; off only to measure plain differences
# beside the default (benchmarks/derivative_accuracy.py), in functions traced after setting it.
REGIME_CHECKED = True
# Whether the solver's warm start is among the state's columns (see _state_columns). Read when a
# rule is traced; off only to measure the rules without it (benchmarks/derivative_accuracy.py).
WARMSTART_COLUMNS = True


def _state_columns(spec: SimSpec) -> np.ndarray:
  """Indices in a row of the entries that derivatives perturb: qpos, qvel, act, and the
  constraint solver's warm start.

  MuJoCo's solvers stop on a tolerance, so the next step depends (slightly) on the warm start
  this one leaves; a chain of steps that ignores it differs from its own secant by about that
  much per step, and over 50 knots of the Go1 trotting by up to 25% (docs/derivatives.md). The
  engine differences these columns plainly, forward at eps/10 (cpp/finite_difference.h).
  """
  layout = spec.model_info.layout
  parts = [
    np.arange(layout.qpos.start, layout.qpos.stop),
    np.arange(layout.qvel.start, layout.qvel.stop),
    np.arange(layout.act.start, layout.act.stop),
  ]
  if WARMSTART_COLUMNS and _solver_runs(spec):
    parts.append(np.arange(layout.qacc_warmstart.start, layout.qacc_warmstart.stop))
  return np.concatenate(parts).astype(np.int64)


def _solver_runs(spec: SimSpec) -> bool:
  """Whether a step can run the constraint solver from the row's warm start. Without
  constraints the result does not depend on the warm start, and its columns would be zeros;
  a params leaf of friction loss can add constraints to a model that has none."""
  info = spec.model_info
  return info.warmstart and (info.constraints or any("frictionloss" in f for f in spec.fields))


def _ctrl_columns(spec: SimSpec) -> np.ndarray:
  layout = spec.model_info.layout
  return np.arange(layout.ctrl.start, layout.ctrl.stop, dtype=np.int64)


def _is_zero(tangent: Any) -> bool:
  return isinstance(tangent, SymbolicZero)


def _with_params(spec: SimSpec, t_flat: Any) -> bool:
  """Whether the params' columns are needed: a tangent for them, and params to perturb."""
  return not _is_zero(t_flat) and len(spec.param_columns) > 0


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
  observe: tuple[str, ...] = (), sizes: tuple[int, ...] = (),
) -> tuple[jax.Array, ...]:
  """Nominal results and Jacobians of one step of (M, ...) inputs w.r.t. the columns of wrt.

  wrt = (qpos/qvel/act of the rows, ctrl, params). Returns next (M, nstate), sensordata
  (M, ns), d next / d columns (M, k, nstate), d sensordata / d columns (M, k, ns), then per
  observed field its values at the new state (M, size) and derivatives (M, k, size). nstep 0:
  mj_forward alone (ctrl columns are then entries of the row).
  """
  columns = _columns(spec, wrt, flat.shape[-1])
  return _ffi.finite_difference.call(
    state, ctrl, flat, spec, nstep, columns.tolist(), eps, centred_columns(spec, columns, centered),
    regime_checked=REGIME_CHECKED, observe=observe, observe_sizes=sizes,
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
  with_flat = _with_params(spec, t_flat)
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


def _rollout_tangents(
  spec: SimSpec, nstep: int, eps: float, centered: bool | None, names: tuple[str, ...],
  sizes: tuple[int, ...], primals: tuple, tangents: tuple,
) -> tuple[tuple, tuple]:
  """(states, sensordata, observed) and their tangents: one finite-difference call per knot,
  each with every column of every simulation and the observed fields of every copy."""
  state, ctrls, flat = primals
  t_state, t_ctrls, t_flat = tangents
  with_ctrl = not _is_zero(t_ctrls)
  with_flat = _with_params(spec, t_flat)
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
  dtype = s.dtype
  if jax.config.read("jax_enable_x64") and dtype != jnp.float64:
    # The rollout keeps each simulation's state in float64 from knot to knot and rounds only
    # what it returns; the chain must follow that path, not one rounded at every knot: near a
    # switch a float32 rounding moves a knot to its other side, and the derivative with it (on
    # the G1, 7% over 50 knots; docs/derivatives.md). Without x64 there is no float64 to carry.
    s, u, f, ts = (a.astype(jnp.float64) for a in (s, u, f, ts))
    tu = None if tu is None else tu.astype(jnp.float64)
    tf = None if tf is None else tf.astype(jnp.float64)

  def knot(carry: tuple, inputs: tuple) -> tuple:
    x, tx = carry
    u_t, tu_t = inputs
    nominal, sensors, jx, jy, *observed = fd_rows(x, u_t, f, spec, nstep, wrt, eps, centered,
                                                  names, sizes)
    t_in = _tangent_in(spec, wrt, tx, tu_t, tf).astype(jx.dtype)
    tx_next = jnp.einsum("mk,mks->ms", t_in, jx)
    ty = jnp.einsum("mk,mks->ms", t_in, jy)
    values = tuple(observed[0::2])
    t_values = tuple(jnp.einsum("mk,mks->ms", t_in, j) for j in observed[1::2])
    return (nominal, tx_next), (nominal, sensors, values, tx_next, ty, t_values)

  xs = (u, tu if with_ctrl else jnp.zeros_like(u))
  _, (states, sensordata, observed, t_states, t_sensordata, t_observed) = jax.lax.scan(
    knot, (s, ts), xs)

  def unflatten(x: jax.Array) -> jax.Array:
    return x.swapaxes(0, 1).reshape(*lead, nknot, x.shape[-1]).astype(dtype)

  primal = (unflatten(states), unflatten(sensordata), tuple(map(unflatten, observed)))
  tangent = (unflatten(t_states), unflatten(t_sensordata), tuple(map(unflatten, t_observed)))
  return primal, tangent


def _rollout_jvp(
  spec: SimSpec, nstep: int, eps: float, centered: bool | None, primals: tuple, tangents: tuple
) -> tuple:
  _first_order_only(*primals)
  if all(_is_zero(t) for t in tangents) or (
    _is_zero(tangents[0]) and _is_zero(tangents[1]) and not spec.param_columns
  ):
    out = rollout(*primals, spec, nstep, eps, centered)
    return out, jax.tree_util.tree_map(jnp.zeros_like, out)
  primal, tangent = _rollout_tangents(spec, nstep, eps, centered, (), (), primals, tangents)
  return primal[:2], tangent[:2]


rollout.defjvp(_rollout_jvp, symbolic_zeros=True)


# ---------------------------------------------------------------------------------------------
# forward


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
  with_flat = _with_params(spec, t_flat)
  if not with_state and not with_flat:
    out = forward(state, flat, spec, names, sizes, eps)
    return out, tuple(jnp.zeros_like(o) for o in out)
  lead, width = state.shape[:-1], flat.shape[-1]
  s, f = flatten(state, spec.nstate), flatten(flat, width)
  # The controls are part of the row here: the state's columns are qpos, qvel, act and ctrl,
  # and the rows keep their own ctrl (written back as it is).
  layout = spec.model_info.layout
  wrt = (with_state, with_state, with_flat)
  _, _, _, _, *observed = fd_rows(s, s[:, layout.ctrl], f, spec, 0, wrt, eps or DEFAULT_EPS,
                                  None, names, sizes)
  t_s = flatten(t_state, spec.nstate) if with_state else None
  t_in = _tangent_in(spec, wrt, t_s, t_s[:, layout.ctrl] if t_s is not None else None,
                     flatten(t_flat, width) if with_flat else None)
  primal, tangent = [], []
  for values, jacobian, size in zip(observed[0::2], observed[1::2], sizes, strict=True):
    primal.append(values.reshape(*lead, size))
    tangent.append(jnp.einsum("mk,mks->ms", t_in.astype(jacobian.dtype), jacobian)
                   .reshape(*lead, size))
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
  state, ctrl, flat = primals
  _first_order_only(*primals)
  t_state, t_ctrl, t_flat = tangents
  with_flat = _with_params(spec, t_flat)
  wrt = (not _is_zero(t_state), not _is_zero(t_ctrl), with_flat)
  if not any(wrt):
    new, observed = step_observed(state, ctrl, flat, spec, nstep, eps, centered, names, sizes)
    return (new, observed), (jnp.zeros_like(new), tuple(jnp.zeros_like(o) for o in observed))
  lead, width = state.shape[:-1], flat.shape[-1]
  s, c, f = flatten(state, spec.nstate), flatten(ctrl, spec.nu), flatten(flat, width)
  nominal, _, jacobian, _, *observed = fd_rows(s, c, f, spec, nstep, wrt, eps or DEFAULT_EPS,
                                               centered, names, sizes)
  t_in = _tangent_in(spec, wrt, flatten(t_state, spec.nstate) if wrt[0] else None,
                     flatten(t_ctrl, spec.nu) if wrt[1] else None,
                     flatten(t_flat, width) if wrt[2] else None).astype(jacobian.dtype)
  t_new = jnp.einsum("mk,mks->ms", t_in, jacobian).reshape(*lead, spec.nstate)
  values = tuple(v.reshape(*lead, size) for v, size in zip(observed[0::2], sizes, strict=True))
  t_values = tuple(jnp.einsum("mk,mks->ms", t_in, j).reshape(*lead, size)
                   for j, size in zip(observed[1::2], sizes, strict=True))
  return (nominal.reshape(*lead, spec.nstate), values), (t_new, t_values)


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
  _first_order_only(*primals)
  if all(_is_zero(t) for t in tangents) or (
    _is_zero(tangents[0]) and _is_zero(tangents[1]) and not spec.param_columns
  ):
    out = rollout_observed(*primals, spec, nstep, eps, centered, names, sizes)
    return out, jax.tree_util.tree_map(jnp.zeros_like, out)
  return _rollout_tangents(spec, nstep, eps or DEFAULT_EPS, centered, names, sizes, primals,
                           tangents)


rollout_observed.defjvp(_rollout_observed_jvp, symbolic_zeros=True)
