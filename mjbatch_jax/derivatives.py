"""Derivatives of the physics by finite differences, every perturbation another row of one batch.

MuJoCo differentiates a step by stepping perturbed copies of a simulation (mjd_transitionFD), one
simulation at a time. Here the perturbed copies of every simulation are rows built in JAX and
stepped together: one custom call computes all columns of all simulations on the thread pool.

Cost model: a Jacobian with k columns costs one call on N * (1 + k) rows (N * (1 + 2k) centred),
that is (1 + k) batched steps. The columns of `step`'s derivative rules are the raw state entries
qpos, qvel and act, the controls and the params, only those whose tangents are not zero.

eps: forward differences with eps = 1e-6 in float64 have a truncation error of about eps times
the curvature and a rounding error of about 1e-16 / eps, both near 1e-6 relative for smooth
dynamics; with float32 arrays the rows are rounded to float32, so eps is 1e-3 there. Contacts
make the dynamics non-smooth; there a derivative is that of the finite difference, as in MuJoCo.
"""

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.custom_derivatives import SymbolicZero

from mjbatch_jax import _calls
from mjbatch_jax.params import Params, SimSpec
from mjbatch_jax.simulator import simulator_of
from mjbatch_jax.tangent import Joints, differentiate_pos, dof_perturbations


def default_eps(dtype: Any) -> float:
  return 1e-6 if jnp.dtype(dtype) == jnp.float64 else 1e-3


def _state_columns(spec: SimSpec) -> np.ndarray:
  """Indices in a row of the entries that derivatives perturb: qpos, qvel, act."""
  layout = simulator_of(spec.engine).layout
  return np.r_[
    np.arange(layout.qpos.start, layout.qpos.stop),
    np.arange(layout.qvel.start, layout.qvel.stop),
    np.arange(layout.act.start, layout.act.stop),
  ]


def _nudged(rows: jax.Array, columns: np.ndarray, eps: float) -> jax.Array:
  """(M, k, width): k copies of each (M, width) row, copy j with entry columns[j] moved by eps."""
  bump = np.zeros((len(columns), rows.shape[-1]))
  bump[np.arange(len(columns)), columns] = eps
  return rows[:, None] + jnp.asarray(bump, rows.dtype)


def _is_zero(tangent: Any) -> bool:
  return isinstance(tangent, SymbolicZero)


def _fd_rows(
  state: jax.Array, ctrl: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int, eps: float,
  wrt: tuple[bool, bool, bool],
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """Nominal results and forward-difference Jacobians of one step, (M, ...) inputs.

  Returns next (M, nstate), sensordata (M, ns), and the Jacobians of both w.r.t. the columns
  selected by wrt = (state entries, ctrl, params): (M, k, nstate) and (M, k, ns).
  """
  m = state.shape[0]
  dtype = state.dtype
  columns = _state_columns(spec)
  blocks_state, blocks_ctrl, blocks_flat = [state[:, None]], [ctrl[:, None]], [flat[:, None]]

  def repeat(x: jax.Array, k: int) -> jax.Array:
    return jnp.broadcast_to(x[:, None], (m, k, x.shape[-1]))

  if wrt[0]:
    k = len(columns)
    blocks_state.append(_nudged(state, columns, eps))
    blocks_ctrl.append(repeat(ctrl, k))
    blocks_flat.append(repeat(flat, k))
  if wrt[1]:
    k = spec.nu
    blocks_state.append(repeat(state, k))
    blocks_ctrl.append(ctrl[:, None] + eps * jnp.eye(k, dtype=dtype))
    blocks_flat.append(repeat(flat, k))
  if wrt[2]:
    k = flat.shape[-1]
    blocks_state.append(repeat(state, k))
    blocks_ctrl.append(repeat(ctrl, k))
    blocks_flat.append(flat[:, None] + eps * jnp.eye(k, dtype=dtype))
  rows = jnp.concatenate(blocks_state, axis=1)
  ncol = rows.shape[1] - 1
  states, sensordata, _ = _calls.rollout(
    rows.reshape(m * (ncol + 1), -1),
    jnp.concatenate(blocks_ctrl, axis=1).reshape(m * (ncol + 1), 1, -1),
    jnp.concatenate(blocks_flat, axis=1).reshape(m * (ncol + 1), -1),
    spec,
    nstep,
  )
  states = states.reshape(m, ncol + 1, -1)
  sensordata = sensordata.reshape(m, ncol + 1, -1)
  inv = 1 / eps
  return (
    states[:, 0],
    sensordata[:, 0],
    (states[:, 1:] - states[:, :1]) * inv,
    (sensordata[:, 1:] - sensordata[:, :1]) * inv,
  )


def _tangent_in(
  spec: SimSpec, wrt: tuple[bool, bool, bool], t_state: Any, t_ctrl: Any, t_flat: Any
) -> jax.Array:
  parts = []
  if wrt[0]:
    parts.append(t_state[:, _state_columns(spec)])
  if wrt[1]:
    parts.append(t_ctrl)
  if wrt[2]:
    parts.append(t_flat)
  return jnp.concatenate(parts, axis=-1)


def _flatten(x: jax.Array, width: int) -> jax.Array:
  """(..., width) as (M, width); explicit M, since width may be 0."""
  return x.reshape(math.prod(x.shape[:-1]), width)


# ---------------------------------------------------------------------------------------------
# step


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def step(state: jax.Array, ctrl: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int) -> Any:
  """The differentiable step on checked inputs (see mjbatch_jax.step)."""
  return _calls.step(state, ctrl, flat, spec, nstep)[0]


def _step_jvp(spec: SimSpec, nstep: int, primals: tuple, tangents: tuple) -> tuple:
  state, ctrl, flat = primals
  t_state, t_ctrl, t_flat = tangents
  wrt = (not _is_zero(t_state), not _is_zero(t_ctrl), not _is_zero(t_flat) and flat.shape[-1] > 0)
  if not any(wrt):
    out = step(state, ctrl, flat, spec, nstep)
    return out, jnp.zeros_like(out)
  lead = state.shape[:-1]
  eps = default_eps(state.dtype)
  s, c, f = _flatten(state, spec.nstate), _flatten(ctrl, spec.nu), _flatten(flat, flat.shape[-1])
  nominal, _, jacobian, _ = _fd_rows(s, c, f, spec, nstep, eps, wrt)
  t_in = _tangent_in(spec, wrt, _flatten(t_state, spec.nstate) if wrt[0] else None,
                     _flatten(t_ctrl, spec.nu) if wrt[1] else None,
                     _flatten(t_flat, f.shape[-1]) if wrt[2] else None)
  t_out = jnp.einsum("mk,mks->ms", t_in, jacobian)
  return nominal.reshape(*lead, -1), t_out.reshape(*lead, -1)


step.defjvp(_step_jvp, symbolic_zeros=True)


# ---------------------------------------------------------------------------------------------
# rollout


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def rollout(state: jax.Array, ctrls: jax.Array, flat: jax.Array, spec: SimSpec, nstep: int) -> Any:
  """The differentiable rollout on checked inputs (see mjbatch_jax.rollout)."""
  states, sensordata, _ = _calls.rollout(state, ctrls, flat, spec, nstep)
  return states, sensordata


def _rollout_jvp(spec: SimSpec, nstep: int, primals: tuple, tangents: tuple) -> tuple:
  state, ctrls, flat = primals
  t_state, t_ctrls, t_flat = tangents
  with_ctrl = not _is_zero(t_ctrls)
  with_flat = not _is_zero(t_flat) and flat.shape[-1] > 0
  if _is_zero(t_state) and not with_ctrl and not with_flat:
    out = rollout(state, ctrls, flat, spec, nstep)
    return out, jax.tree_util.tree_map(jnp.zeros_like, out)
  # After the first knot the state depends on whatever was perturbed: its columns always count.
  wrt = (True, with_ctrl, with_flat)
  lead, nknot = state.shape[:-1], ctrls.shape[-2]
  eps = default_eps(state.dtype)
  s = _flatten(state, spec.nstate)
  m, width = s.shape[0], flat.shape[-1]
  u = ctrls.reshape(m, nknot, spec.nu).swapaxes(0, 1)
  f = _flatten(flat, width)
  ts = jnp.zeros_like(s) if _is_zero(t_state) else _flatten(t_state, spec.nstate)
  tu = t_ctrls.reshape(m, nknot, spec.nu).swapaxes(0, 1) if with_ctrl else None
  tf = _flatten(t_flat, width) if with_flat else None

  def knot(carry: tuple, inputs: tuple) -> tuple:
    x, tx = carry
    u_t, tu_t = inputs
    nominal, sensors, jx, jy = _fd_rows(x, u_t, f, spec, nstep, eps, wrt)
    t_in = _tangent_in(spec, wrt, tx, tu_t, tf)
    tx_next = jnp.einsum("mk,mks->ms", t_in, jx)
    ty = jnp.einsum("mk,mks->ms", t_in, jy)
    return (nominal, tx_next), (nominal, sensors, tx_next, ty)

  xs = (u, tu if with_ctrl else jnp.zeros_like(u))
  _, (states, sensordata, t_states, t_sensordata) = jax.lax.scan(knot, (s, ts), xs)

  def unflatten(x: jax.Array) -> jax.Array:
    return x.swapaxes(0, 1).reshape(*lead, nknot, -1)

  return (unflatten(states), unflatten(sensordata)), (unflatten(t_states), unflatten(t_sensordata))


rollout.defjvp(_rollout_jvp, symbolic_zeros=True)


# ---------------------------------------------------------------------------------------------
# forward


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def forward(
  state: jax.Array, flat: jax.Array, spec: SimSpec, names: tuple[str, ...], sizes: tuple[int, ...]
) -> Any:
  """The differentiable forward on checked inputs (see mjbatch_jax.forward)."""
  return _calls.forward(state, flat, spec, names, sizes)


def _forward_jvp(
  spec: SimSpec, names: tuple[str, ...], sizes: tuple[int, ...], primals: tuple, tangents: tuple
) -> tuple:
  state, flat = primals
  t_state, t_flat = tangents
  with_state, with_flat = not _is_zero(t_state), not _is_zero(t_flat) and flat.shape[-1] > 0
  if not with_state and not with_flat:
    out = forward(state, flat, spec, names, sizes)
    return out, tuple(jnp.zeros_like(o) for o in out)
  lead, width = state.shape[:-1], flat.shape[-1]
  eps = default_eps(state.dtype)
  s, f = _flatten(state, spec.nstate), _flatten(flat, width)
  m = s.shape[0]
  # The controls are part of the row here: the state columns are qpos, qvel, act and ctrl.
  layout = simulator_of(spec.engine).layout
  columns = np.r_[_state_columns(spec), np.arange(layout.ctrl.start, layout.ctrl.stop)]
  blocks_state, blocks_flat, parts = [s[:, None]], [f[:, None]], []
  if with_state:
    blocks_state.append(_nudged(s, columns, eps))
    blocks_flat.append(jnp.broadcast_to(f[:, None], (m, len(columns), width)))
    parts.append(_flatten(t_state, spec.nstate)[:, columns])
  if with_flat:
    blocks_state.append(jnp.broadcast_to(s[:, None], (m, width, spec.nstate)))
    blocks_flat.append(f[:, None] + eps * jnp.eye(width, dtype=f.dtype))
    parts.append(_flatten(t_flat, width))
  rows = jnp.concatenate(blocks_state, axis=1)
  k = rows.shape[1]
  out = _calls.forward(
    rows.reshape(m * k, -1), jnp.concatenate(blocks_flat, axis=1).reshape(m * k, -1),
    spec, names, sizes,
  )
  t_in = jnp.concatenate(parts, axis=-1)
  primal, tangent = [], []
  for values in out:
    values = values.reshape(m, k, -1)
    primal.append(values[:, 0].reshape(*lead, -1))
    jacobian = (values[:, 1:] - values[:, :1]) * (1 / eps)
    tangent.append(jnp.einsum("mk,mks->ms", t_in, jacobian).reshape(*lead, -1))
  return tuple(primal), tuple(tangent)


forward.defjvp(_forward_jvp, symbolic_zeros=True)


# ---------------------------------------------------------------------------------------------
# Jacobians as arrays


def _controls_rows(
  ctrl: jax.Array, ctrlrange: np.ndarray, limited: np.ndarray, eps: float, centered: bool
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """Which way each control may be nudged within its range, as mjd_stepFD decides."""
  lo, hi = jnp.asarray(ctrlrange[:, 0]), jnp.asarray(ctrlrange[:, 1])
  lim = jnp.asarray(limited)

  def in_range(x1: jax.Array, x2: jax.Array) -> jax.Array:
    return (x1 >= lo) & (x1 <= hi) & (x2 >= lo) & (x2 <= hi)

  forward_ok = ~lim | in_range(ctrl, ctrl + eps)
  backward_ok = (centered | ~forward_ok) & (~lim | in_range(ctrl - eps, ctrl))
  return forward_ok, backward_ok, ctrl + eps, ctrl - eps


def transition_fd(
  state: Any,
  ctrl: Any,
  params: Params,
  eps: float = 1e-6,
  centered: bool = False,
  nstep: int = 1,
  sensors: bool = False,
  method: str = "auto",
) -> tuple[jax.Array, ...]:
  """Finite-difference transition matrices of every simulation, as mujoco.mjd_transitionFD.

  d(next x) = A dx + B du and d(sensordata) = C dx + D du, with x = (qpos, qvel, act) in
  MuJoCo's tangent space (nx = 2 nv + na): positions are perturbed with mj_integratePos and
  compared with mj_differentiatePos, controls at a limit of their range are nudged backward, and
  every perturbed copy starts from the row's warm start, all as mjd_transitionFD does.

  Args:
    state: (..., nstate) rows.
    ctrl: (..., nu) controls.
    params: from Simulator.params.
    eps: the perturbation.
    centered: centred instead of forward differences.
    nstep: substeps of the transition (the rows method only).
    sensors: also return C and D.
    method: "rows": the perturbed copies of all simulations are rows of one custom call.
      "native": MuJoCo's mjd_transitionFD run per simulation on the batch's thread pool, also
      one custom call; it skips the pipeline stages a column does not change, so it is faster
      (0.84x the time of "rows" for 256 Go1 states on 2 threads, benchmarks/derivatives.py),
      but needs float64 arrays, nstep = 1 and an integrator other than RK4. "auto" (default):
      "native" where it can run, else "rows".

  Returns:
    A (..., nx, nx) and B (..., nx, nu), and with sensors C (..., ns, nx) and D (..., ns, nu).

  Example:
    A, B = mjbatch_jax.transition_fd(state, ctrl, params)
  """
  from mjbatch_jax.functions import checked_inputs  # the public checks, shared

  state, ctrl, flat, spec, lead = checked_inputs(state, ctrl, params, nstep)
  sim = simulator_of(spec.engine)
  model = sim.model
  nv, na, nu = model.nv, model.na, model.nu
  if method == "auto":
    native_ok = (
      nstep == 1 and state.dtype == jnp.float64
      and model.opt.integrator != mujoco.mjtIntegrator.mjINT_RK4
    )
    method = "native" if native_ok else "rows"
  if method == "native":
    if nstep != 1 or state.dtype != jnp.float64:
      raise ValueError("method='native' needs nstep=1 and float64 arrays (jax_enable_x64)")
    out = _calls.transition_fd(state, ctrl, flat, spec, nv, na, eps, centered, sensors)
    return out if sensors else out[:2]
  if method != "rows":
    raise ValueError(f"method must be 'auto', 'rows' or 'native', got {method!r}")

  joints = Joints.of(model)
  layout = sim.layout
  s, c, f = _flatten(state, spec.nstate), _flatten(ctrl, nu), _flatten(flat, flat.shape[-1])
  m = s.shape[0]
  signs = (1.0, -1.0) if centered else (1.0,)
  blocks_state, blocks_ctrl = [s[:, None]], [c[:, None]]
  for sign in signs:
    # positions along each dof, then velocities, then activations
    moved = dof_perturbations(joints, s[:, layout.qpos], sign * eps)  # (m, nv, nq)
    rows_q = jnp.broadcast_to(s[:, None], (m, nv, spec.nstate)).at[:, :, layout.qpos].set(moved)
    index = np.r_[np.arange(layout.qvel.start, layout.qvel.stop),
                  np.arange(layout.act.start, layout.act.stop)]
    blocks_state += [rows_q, _nudged(s, index, sign * eps)]
    blocks_ctrl.append(jnp.broadcast_to(c[:, None], (m, 2 * nv + na, nu)))
  forward_ok, backward_ok, plus, minus = _controls_rows(
    c, model.actuator_ctrlrange, model.actuator_ctrllimited.astype(bool), eps, centered
  )
  if centered:
    ctrl_rows = [plus, minus]
  else:  # one row per control: forward where the range allows, else backward
    ctrl_rows = [jnp.where(forward_ok, plus, minus)]
  for values in ctrl_rows:
    blocks_state.append(jnp.broadcast_to(s[:, None], (m, nu, spec.nstate)))
    blocks_ctrl.append(jnp.where(jnp.eye(nu, dtype=bool), values[:, None, :], c[:, None, :]))
  rows = jnp.concatenate(blocks_state, axis=1)
  k = rows.shape[1]
  states, sensordata, _ = _calls.rollout(
    rows.reshape(m * k, -1),
    jnp.concatenate(blocks_ctrl, axis=1).reshape(m * k, 1, nu),
    jnp.broadcast_to(f[:, None], (m, k, f.shape[-1])).reshape(m * k, -1),
    spec,
    nstep,
  )
  states = states.reshape(m, k, -1)
  sensordata = sensordata.reshape(m, k, -1)

  def state_diff(x1: jax.Array, x2: jax.Array, h: float) -> jax.Array:
    dq = differentiate_pos(joints, x1[..., layout.qpos], x2[..., layout.qpos], h)
    rest = (x2[..., layout.qvel.start : layout.act.stop] - x1[..., layout.qvel.start :
            layout.act.stop]) * (1 / h)
    return jnp.concatenate([dq, rest], axis=-1)

  nx = 2 * nv + na
  nominal, nominal_sensors = states[:, :1], sensordata[:, :1]
  x_plus = states[:, 1 : 1 + nx]
  u_plus = states[:, k - len(ctrl_rows) * nu : k - len(ctrl_rows) * nu + nu]
  y_plus = sensordata[:, 1 : 1 + nx]
  yu_plus = sensordata[:, k - len(ctrl_rows) * nu : k - len(ctrl_rows) * nu + nu]
  if centered:
    x_minus = states[:, 1 + nx : 1 + 2 * nx]
    y_minus = sensordata[:, 1 + nx : 1 + 2 * nx]
    u_minus, yu_minus = states[:, k - nu :], sensordata[:, k - nu :]
    a_cols = state_diff(x_minus, x_plus, 2 * eps)
    c_cols = (y_plus - y_minus) * (1 / (2 * eps))
    both = (forward_ok & backward_ok)[..., None]
    only_fwd = (forward_ok & ~backward_ok)[..., None]
    only_back = (~forward_ok & backward_ok)[..., None]
    b_cols = jnp.where(both, state_diff(u_minus, u_plus, 2 * eps),
                       jnp.where(only_fwd, state_diff(nominal, u_plus, eps),
                                 jnp.where(only_back, state_diff(u_minus, nominal, eps), 0.0)))
    d_cols = jnp.where(both, (yu_plus - yu_minus) * (1 / (2 * eps)),
                       jnp.where(only_fwd, (yu_plus - nominal_sensors) * (1 / eps),
                                 jnp.where(only_back, (nominal_sensors - yu_minus) * (1 / eps),
                                           0.0)))
  else:
    a_cols = state_diff(nominal, x_plus, eps)
    c_cols = (y_plus - nominal_sensors) * (1 / eps)
    fwd, back = forward_ok[..., None], (backward_ok & ~forward_ok)[..., None]
    b_cols = jnp.where(fwd, state_diff(nominal, u_plus, eps),
                       jnp.where(back, state_diff(u_plus, nominal, eps), 0.0))
    d_cols = jnp.where(fwd, (yu_plus - nominal_sensors) * (1 / eps),
                       jnp.where(back, (nominal_sensors - yu_plus) * (1 / eps), 0.0))

  def matrix(cols: jax.Array) -> jax.Array:  # (m, inputs, outputs) -> (..., outputs, inputs)
    return cols.swapaxes(1, 2).reshape(*lead, cols.shape[2], cols.shape[1])

  if sensors:
    return matrix(a_cols), matrix(b_cols), matrix(c_cols), matrix(d_cols)
  return matrix(a_cols), matrix(b_cols)


def param_fd(
  state: Any, ctrl: Any, params: Params, eps: float | None = None, nstep: int = 1
) -> dict[str, jax.Array]:
  """d(next state)/d(each params leaf) by forward differences, all columns in one call.

  Args:
    state: (..., nstate) rows.
    ctrl: (..., nu) controls.
    params: from Simulator.params; its fields are the columns.
    eps: the perturbation; None: 1e-6 in float64, 1e-3 in float32.
    nstep: substeps.

  Returns:
    A dict from each field to (..., nstate, *field shape): the Jacobian of the next row.

  Example:
    dmass = mjbatch_jax.param_fd(state, ctrl, params)["body_mass"]  # (N, nstate, nbody)
  """
  from mjbatch_jax.functions import checked_inputs

  state, ctrl, flat, spec, lead = checked_inputs(state, ctrl, params, nstep)
  eps = default_eps(state.dtype) if eps is None else eps
  s, c, f = _flatten(state, spec.nstate), _flatten(ctrl, spec.nu), _flatten(flat, flat.shape[-1])
  _, _, jacobian, _ = _fd_rows(s, c, f, spec, nstep, eps, (False, False, True))
  jacobian = jacobian.swapaxes(1, 2)  # (m, nstate, P)
  out, start = {}, 0
  for name, shape in zip(spec.fields, spec.shapes, strict=True):
    size = int(np.prod(shape))
    out[name] = jacobian[:, :, start : start + size].reshape(*lead, spec.nstate, *shape)
    start += size
  return out
