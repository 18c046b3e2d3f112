"""Jacobians as arrays: transition matrices and parameter sensitivities of every simulation.

MuJoCo differentiates a step by stepping perturbed copies of a simulation (mjd_transitionFD), one
simulation at a time. Here the perturbed copies of every simulation run together on the batch's
thread pool in one custom call: MuJoCo's own mjd_transitionFD per simulation ("native"), or every
copy a row ("rows", any nstep and integrator).

Cost model: a Jacobian with k columns costs one call on N * (1 + k) rows (N * (1 + 2k) centred),
that is (1 + k) batched steps.

Precision: the native method and param_fd (like the derivative rules of step and rollout, see
mjbatch_jax._rules) perturb and difference float64 rows inside the engine whatever the arrays'
dtype, so float32 callers get float64-quality derivatives rounded to float32, with eps = 1e-6.
The rows method of transition_fd builds its copies in JAX, in the arrays' dtype: with float32
arrays its default eps is 1e-3. docs/derivatives.md has the measured errors.
"""

from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.core import Tracer

from mjbatch_jax import _checks, _ffi, _rules
from mjbatch_jax.errors import simulation_errors
from mjbatch_jax.params import Params
from mjbatch_jax.tangent import Joints, differentiate_pos, dof_perturbations


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
  eps: float | None = None,
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
    eps: the perturbation; None: 1e-6, or 1e-3 for the rows method on float32 arrays.
    centered: centred instead of forward differences.
    nstep: substeps of the transition (the rows method only).
    sensors: also return C and D.
    method: "rows": the perturbed copies of all simulations are rows of one custom call, built
      in the arrays' dtype. "native": MuJoCo's mjd_transitionFD run per simulation on the
      batch's thread pool, also one custom call, in float64 whatever the arrays' dtype; it skips
      the pipeline stages a column does not change, so it is faster (0.84x the time of "rows"
      for 256 Go1 states on 2 threads, benchmarks/derivatives.py), but needs nstep = 1 and an
      integrator other than RK4. "auto" (default): "native" where it can run, else "rows".

  Returns:
    A (..., nx, nx) and B (..., nx, nu), and with sensors C (..., ns, nx) and D (..., ns, nu).

  Example:
    A, B = mjbatch_jax.transition_fd(state, ctrl, params)
  """
  state, ctrl, flat, spec, lead = _checks.checked_inputs(state, ctrl, params, nstep)
  centered = _checks.check_bool("centered", centered)
  sensors = _checks.check_bool("sensors", sensors)
  info = spec.model_info
  model = info.model
  nv, na, nu = info.nv, info.na, spec.nu
  rk4 = info.integrator == int(mujoco.mjtIntegrator.mjINT_RK4)
  if method not in ("auto", "rows", "native"):
    raise ValueError(f"method must be 'auto', 'rows' or 'native', got {method!r}")
  if method == "auto":
    method = "native" if nstep == 1 and not rk4 else "rows"
  if method == "native":
    if nstep != 1 or rk4:
      raise ValueError(
        "method='native' runs mujoco.mjd_transitionFD, which takes one substep (nstep=1) and"
        " does not support the RK4 integrator: use method='rows'"
      )
    h = _rules.DEFAULT_EPS if eps is None else _checks.check_eps(eps)
    with simulation_errors():
      out = _ffi.transition_fd.call(state, ctrl, flat, spec, h, centered, sensors)
      if _concrete(state):
        jax.block_until_ready(out)
    return out if sensors else out[:2]
  eps = _rules.forward_eps(state.dtype, None if eps is None else _checks.check_eps(eps))

  joints = Joints.of(model)
  layout = info.layout
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
    blocks_state += [rows_q, _rules.nudged(s, index, sign * eps)]
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
  states, sensordata, _ = _ffi.rollout.call(
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
  state: Any, ctrl: Any, params: Params, eps: float | None = None, nstep: int = 1,
  centered: bool = False,
) -> dict[str, jax.Array]:
  """d(next state)/d(each params leaf) by finite differences, all columns in one call.

  The perturbed copies and their differences are float64 inside the engine whatever the arrays'
  dtype.

  Args:
    state: (..., nstate) rows.
    ctrl: (..., nu) controls.
    params: from Simulator.params; its fields are the columns.
    eps: the perturbation; None: 1e-6.
    nstep: substeps.
    centered: centred instead of forward differences.

  Returns:
    A dict from each field to (..., nstate, *leaf shape): the Jacobian of the next row w.r.t.
    the entries its leaf holds (the selected rows of a field given with `select`).

  Example:
    dmass = mjbatch_jax.param_fd(state, ctrl, params)["body_mass"]  # (N, nstate, nbody)
  """
  state, ctrl, flat, spec, lead = _checks.checked_inputs(state, ctrl, params, nstep)
  h = _rules.DEFAULT_EPS if eps is None else _checks.check_eps(eps)
  centered = _checks.check_bool("centered", centered)
  width = flat.shape[-1]
  s, c, f = _flatten(state, spec.nstate), _flatten(ctrl, spec.nu), _flatten(flat, width)
  with simulation_errors():
    _, _, jacobian, _ = _rules.fd_rows(s, c, f, spec, nstep, (False, False, True), h, centered)
    if _concrete(state):
      jax.block_until_ready(jacobian)
  jacobian = jacobian.swapaxes(1, 2)  # (m, nstate, entries the leaves hold)
  out, start = {}, 0
  for i, name in enumerate(spec.fields):
    shape = spec.leaf_shape(i)
    size = int(np.prod(shape))
    out[name] = jacobian[:, :, start : start + size].reshape(*lead, spec.nstate, *shape)
    start += size
  return out


_flatten = _checks.flatten


def _concrete(x: Any) -> bool:
  return not isinstance(x, Tracer)
