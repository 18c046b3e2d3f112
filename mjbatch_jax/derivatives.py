"""Jacobians as arrays: transition matrices and parameter sensitivities of every simulation.

MuJoCo differentiates a step by stepping perturbed copies of a simulation (mjd_transitionFD), one
simulation at a time. Here the perturbed copies of every simulation run together on the batch's
thread pool in one custom call: every copy a row ("rows", any nstep and integrator, the default),
or MuJoCo's own mjd_transitionFD per simulation ("native").

Cost model: a Jacobian with k columns, c of them centred, costs one call on N * (1 + k + c)
rows, plus a few rows where a copy crosses a switch of the dynamics (cpp/finite_difference.h).

Precision: copies and differences are float64 inside the engine whatever the arrays' dtype, so
float32 callers get float64-quality derivatives rounded to float32. docs/derivatives.md has the
measured errors.
"""

from typing import Any

import jax
import mujoco
import numpy as np
from jax.core import Tracer

from mjbatch_jax import _checks, _ffi, _rules
from mjbatch_jax.errors import simulation_errors
from mjbatch_jax.params import Params


def transition_fd(
  state: Any,
  ctrl: Any,
  params: Params,
  eps: float | None = None,
  centered: bool | None = None,
  nstep: int = 1,
  sensors: bool = False,
  method: str = "rows",
) -> tuple[jax.Array, ...]:
  """Finite-difference transition matrices of every simulation, as mujoco.mjd_transitionFD.

  d(next x) = A dx + B du and d(sensordata) = C dx + D du, with x = (qpos, qvel, act) in
  MuJoCo's tangent space (nx = 2 nv + na): positions are perturbed with mj_integratePos and
  compared with mj_differentiatePos, and every perturbed copy starts from the row's warm start,
  as mjd_transitionFD does.

  Args:
    state: (..., nstate) rows.
    ctrl: (..., nu) controls.
    params: from Simulator.params.
    eps: the perturbation; None: 1e-6 (controls eps / 10, as in `step`'s rules).
    centered: True: centred differences for every column; False: forward differences; None
      (default): centred for the positions, forward for the rest (the rules of `step` do the
      same; docs/derivatives.md measures why).
    nstep: substeps of the transition.
    sensors: also return C and D.
    method: "rows" (default): every perturbed copy of every simulation is a row of one custom
      call, in float64 whatever the arrays' dtype, and a copy that crosses a switch of the
      dynamics (a contact that appears or vanishes, a limit, a friction cone's state, a clamped
      control) is replaced by one on the side that does not, so a column is never a jump
      divided by eps (a control at a limit of its range is differenced inward, as
      mjd_transitionFD does). "native": MuJoCo's own mjd_transitionFD per simulation on the
      batch's thread pool (forward or centred differences at eps, whatever they cross; one
      substep, not RK4), for bit-for-bit agreement with MuJoCo.

  Returns:
    A (..., nx, nx) and B (..., nx, nu), and with sensors C (..., ns, nx) and D (..., ns, nu).

  Example:
    A, B = mjbatch_jax.transition_fd(state, ctrl, params)
  """
  state, ctrl, flat, spec, lead = _checks.checked_inputs(state, ctrl, params, nstep)
  sensors = _checks.check_bool("sensors", sensors)
  h = _rules.DEFAULT_EPS if eps is None else _checks.check_eps(eps)
  info = spec.model_info
  nx, nu = 2 * info.nv + info.na, spec.nu
  if method == "auto":  # the name of the default before "rows" became kink-safe
    method = "rows"
  if method not in ("rows", "native"):
    raise ValueError(f"method must be 'rows' or 'native', got {method!r}")
  if method == "native":
    if centered is None:
      centered = False
    centered = _checks.check_bool("centered", centered)
    rk4 = info.integrator == int(mujoco.mjtIntegrator.mjINT_RK4)
    if nstep != 1 or rk4:
      raise ValueError(
        "method='native' runs mujoco.mjd_transitionFD, which takes one substep (nstep=1) and"
        " does not support the RK4 integrator: use method='rows'"
      )
    with simulation_errors():
      out = _ffi.transition_fd.call(state, ctrl, flat, spec, h, centered, sensors)
      if _concrete(state):
        jax.block_until_ready(out)
    return out if sensors else out[:2]
  if centered is not None:
    centered = _checks.check_bool("centered", centered)
  columns = np.arange(nx + nu)
  flags = [bool(centered) if centered is not None else bool(j < info.nv) for j in range(nx + nu)]
  s, c, f = _flatten(state, spec.nstate), _flatten(ctrl, nu), _flatten(flat, flat.shape[-1])
  with simulation_errors():
    _, _, jx, jy = _ffi.finite_difference.call(
      s, c, f, spec, nstep, columns.tolist(), h, flags, tangent=True,
      regime_checked=_rules.REGIME_CHECKED,
    )
    if _concrete(state):
      jax.block_until_ready(jx)

  def matrix(cols: jax.Array) -> jax.Array:  # (m, inputs, outputs) -> (..., outputs, inputs)
    return cols.swapaxes(1, 2).reshape(*lead, cols.shape[2], cols.shape[1])

  a, b = matrix(jx[:, :nx]), matrix(jx[:, nx:])
  if sensors:
    return a, b, matrix(jy[:, :nx]), matrix(jy[:, nx:])
  return a, b


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
