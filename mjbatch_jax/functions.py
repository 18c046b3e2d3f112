"""The pure functions: the engine as XLA CPU custom calls that compose with jit, scan and vmap.

Every function takes `params` (from `Simulator.params`), whose static part names the simulator,
and arrays with any leading dimensions: the handlers flatten them into one batch, and vmap adds
its axis in front (vmap_method="broadcast_all"), so a vmapped call is still one custom call.
"""

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import jax
from jax.core import Tracer

from mjbatch_jax import _checks, _ffi, _rules
from mjbatch_jax.errors import simulation_errors
from mjbatch_jax.params import Params

NWARNING = _ffi.NWARNING
"""The number of MuJoCo's warning kinds, mjNWARNING: the last dimension of the warning counts
that `step(..., return_warnings=True)` and `rollout` return, indexed by mujoco.mjtWarning."""

_NOT_DIFFERENTIABLE = (
  "{name}(..., {option}=True) is not differentiable: call it without {option} to take"
  " derivatives (and once more with it for the {what})"
)


def _undifferentiated(name: str, return_warnings: bool, return_errors: bool, new: bool) -> str:
  """Why a variant without a derivative rule cannot be differentiated."""
  if return_errors:
    option, what = "return_errors", "error codes"
  elif return_warnings or new:
    option, what = "return_warnings", "warning counts"
  else:
    return _IN_STEP
  return _NOT_DIFFERENTIABLE.format(name=name, option=option, what=what)


def _derivative_options(eps: Any, centered: Any) -> tuple[float | None, bool | None]:
  h = None if eps is None else _checks.check_eps(eps)
  return h, None if centered is None else _checks.check_bool("centered", centered)


def step(
  state: Any,
  ctrl: Any,
  params: Params,
  nstep: int = 1,
  return_warnings: bool = False,
  eps: float | None = None,
  centered: bool | None = None,
  observe: Sequence[str] = (),
  observe_at: str = "new",
  return_errors: bool = False,
) -> Any:
  """Advance each simulation by nstep calls to mj_step with its ctrl; return the new state.

  Pure: the same rows, ctrl and params give the same rows as mj_step on a fresh MjData, bit for
  bit with jax_enable_x64 on (float32 in and out without it, the physics in float64 inside).
  Differentiable (jax.grad, jax.jacfwd, ...) w.r.t. the rows' qpos, qvel and act, ctrl and the
  params leaves, by finite differences in float64 computed as extra rows of one call; other
  entries of a row get zero derivatives. Derivatives are of first order only. A perturbed copy
  that crosses a switch of the dynamics (a contact that appears or vanishes, a limit, a friction
  cone's state, a clamp, another number of solver iterations) is replaced by one on the side
  that does not, so a derivative through contact is right by default (docs/derivatives.md).

  Args:
    state: (..., nstate) mjSTATE_INTEGRATION rows, float32 or float64.
    ctrl: (..., nu) controls, written into the rows' ctrl before stepping.
    params: from Simulator.params; its leaves have the state's leading dimensions.
    nstep: substeps per call, an int in [1, 2**31 - 1], static under jit.
    return_warnings: also return (..., mjNWARNING) int32 counts of the warnings each simulation
      raised in this call (divergence, for one, is a warning and an automatic reset in MuJoCo),
      so that a jitted loop can mask bad rows. This variant is not differentiable.
    eps: the finite-difference step of derivatives (default 1e-6, controls eps / 10, on float64
      rows whatever the arrays' dtype; docs/derivatives.md).
    centered: how derivatives difference: None (default) centred for the positions, where
      contacts curve the dynamics most, forward for the rest (about 1.3x the rows of forward
      differences); True centred for every column (twice the rows); False forward only.
    observe: mjData fields to return with the new state, computed inside the same custom call
      (the names `forward` takes: "sensordata", "site_xpos", "xquat", "cvel", "qacc", ...).
    observe_at: "new": as mj_forward computes them on the new state, after the last substep
      (what `forward(new_state)` returns, at the cost of one more mj_forward per simulation; the
      new state is the same bit for bit). "step": as they stand in MjData right after mj_step,
      computed at the state before its last substep (what MJX and MuJoCo Playground read), at
      no extra cost; not differentiable. Fields that mj_step does not compute (qfrc_inverse,
      cacc, subtree_linvel, ...) are refused with "step".
    return_errors: partial results. A MuJoCo error in a simulation (mj_stackAlloc out of
      memory, ...) then raises nothing: the call also returns (...,) int32 error codes, 1 for
      each simulation that failed (its new row is its input row with the call's ctrl, its
      observations zeros) and 0 for the others, whose results stand. Without it the call
      raises SimulationError naming the failed simulations (its `ids`). Not differentiable.

  Returns:
    The new state; with observe, (state, dict of fields); then warnings with return_warnings,
    then error codes with return_errors.

  Example:
    state = jax.jit(mjbatch_jax.step)(state, ctrl, params)
    state, obs = mjbatch_jax.step(state, ctrl, params, nstep=5, observe=("sensordata",))
    state, errors = mjbatch_jax.step(state, ctrl, params, return_errors=True)
    alive = errors == 0
  """
  state, ctrl, flat, spec, lead = _checks.checked_inputs(state, ctrl, params, nstep)
  h, centered = _derivative_options(eps, centered)
  _check_observe_at(observe_at)
  return_warnings = _checks.check_bool("return_warnings", return_warnings)
  return_errors = _checks.check_bool("return_errors", return_errors)
  extras: tuple[Any, ...] = ()
  if observe:
    names, shapes, sizes, new = _observation(spec, observe, observe_at)
    with _converted(state):
      if return_warnings or return_errors or not new:
        why = _undifferentiated("step", return_warnings, return_errors, new)
        states, _, warnings, *observed = _ffi.rollout.call(
          state, ctrl[..., None, :], flat, spec, nstep, why, names, sizes, new, return_errors
        )
        if return_errors:
          *observed, errors = observed
          extras = (errors,)
        new_state, observed = states[..., 0, :], [o[..., 0, :] for o in observed]
        extras = ((warnings,) if return_warnings else ()) + extras
      else:
        new_state, observed = _rules.step_observed(
          state, ctrl, flat, spec, int(nstep), h, centered, names, sizes
        )
      _settle(state, new_state)
    obs = _shaped(names, observed, shapes, lead)
    return (new_state, obs, *extras)
  if return_warnings or return_errors:
    why = _undifferentiated("step", return_warnings, return_errors, True)
    with _converted(state):
      new_state, warnings, *errors = _ffi.step.call(state, ctrl, flat, spec, nstep, why,
                                                    return_errors)
      _settle(state, new_state)
    return (new_state, *((warnings,) if return_warnings else ()), *errors)
  with _converted(state):
    new_state = _rules.step(state, ctrl, flat, spec, int(nstep), h or _rules.DEFAULT_EPS, centered)
    _settle(state, new_state)
  return new_state


def rollout(
  state: Any,
  ctrls: Any,
  params: Params,
  nstep: int = 1,
  return_warnings: bool = False,
  eps: float | None = None,
  centered: bool | None = None,
  observe: Sequence[str] = (),
  observe_at: str = "new",
  return_errors: bool = False,
) -> Any:
  """Run T knots of nstep substeps each from state, knot t with ctrls[..., t, :], in one call.

  Equals T calls of `step`. Sensordata is recorded after each knot's last mj_step, as
  mujoco.rollout records it (computed at the state before that substep). Differentiable as
  `step` is; a derivative costs one call per knot, each with all the columns of all simulations.

  Args:
    state: (..., nstate) rows.
    ctrls: (..., T, nu) controls.
    params: from Simulator.params.
    nstep: substeps per knot, an int in [1, 2**31 - 1].
    return_warnings: also return (..., mjNWARNING) warning counts of the whole rollout (not
      differentiable).
    eps: the finite-difference step of derivatives, as for `step` (default 1e-6, on float64 rows).
    centered: how derivatives difference, as for `step` (default: positions centred).
    observe: mjData fields to record after each knot, in the same call, as `step` observes.
    observe_at: "new" (mj_forward at the state after the knot) or "step" (as mj_step left
      them), as for `step`.
    return_errors: partial results, as for `step`: (...,) int32 error codes, 1 for each
      simulation in which MuJoCo raised an error (its states are its input row at every knot,
      its sensordata and observations zeros), and no exception. Not differentiable.

  Returns:
    states (..., T, nstate) after each knot and sensordata (..., T, nsensordata); with observe,
    also a dict of (..., T, *shape) fields; then warnings with return_warnings, then error codes
    with return_errors.

  Example:
    states, sensordata = mjbatch_jax.rollout(state, jnp.zeros((N, 100, nu)), params)
    # A sampling planner that goes on when a candidate fails: it gets an infinite cost.
    states, _, errors = mjbatch_jax.rollout(starts, candidates, params, return_errors=True)
    costs = jnp.where(errors == 0, cost(states), jnp.inf)
  """
  _checks.check_nstep(nstep)
  state, flat, spec, lead = _checks.state_and_params(state, params)
  h, centered = _derivative_options(eps, centered)
  _check_observe_at(observe_at)
  ctrls = _checks.floating("ctrls", ctrls).astype(state.dtype)
  if ctrls.ndim != len(lead) + 2 or ctrls.shape[: len(lead)] != lead or ctrls.shape[-1] != spec.nu:
    raise ValueError(f"ctrls must have shape {(*lead, 'T', spec.nu)}, got {ctrls.shape}")
  return_warnings = _checks.check_bool("return_warnings", return_warnings)
  return_errors = _checks.check_bool("return_errors", return_errors)
  if observe:
    names, shapes, sizes, new = _observation(spec, observe, observe_at)
    extras: tuple[Any, ...] = ()
    with _converted(state):
      if return_warnings or return_errors or not new:
        why = _undifferentiated("rollout", return_warnings, return_errors, new)
        states, sensordata, warnings, *observed = _ffi.rollout.call(
          state, ctrls, flat, spec, nstep, why, names, sizes, new, return_errors
        )
        if return_errors:
          *observed, errors = observed
          extras = (errors,)
        extras = ((warnings,) if return_warnings else ()) + extras
      else:
        states, sensordata, observed = _rules.rollout_observed(
          state, ctrls, flat, spec, int(nstep), h, centered, names, sizes
        )
      _settle(state, states)
    obs = _shaped(names, observed, shapes, (*lead, ctrls.shape[-2]))
    return (states, sensordata, obs, *extras)
  if return_warnings or return_errors:
    why = _undifferentiated("rollout", return_warnings, return_errors, True)
    with _converted(state):
      states, sensordata, warnings, *errors = _ffi.rollout.call(
        state, ctrls, flat, spec, nstep, why, return_errors=return_errors
      )
      _settle(state, states)
    return (states, sensordata, *((warnings,) if return_warnings else ()), *errors)
  with _converted(state):
    states, sensordata = _rules.rollout(
      state, ctrls, flat, spec, int(nstep), h or _rules.DEFAULT_EPS, centered
    )
    _settle(state, states)
  return states, sensordata


def forward(
  state: Any, params: Params, fields: Sequence[str] = ("sensordata",), eps: float | None = None
) -> dict[str, jax.Array]:
  """mj_forward on each simulation; return the named mjData fields, each (..., *field shape).

  Fields that mj_forward leaves alone are computed with the MuJoCo call that does compute them:
  subtree_linvel and subtree_angmom (mj_subtreeVel), cacc, cfrc_int and cfrc_ext
  (mj_rnePostConstraint), qfrc_inverse (mj_inverse, at mj_forward's qacc); the scratch arrays
  of mj_step's integrators (qH, qHDiagInv, qDeriv, qLU) are refused, and "energy" needs the
  model's energy flag. Every field equals what a fresh MjData gives after mj_forward (and that
  call). Differentiable w.r.t. the rows' qpos, qvel, act and ctrl and the params leaves, as
  `step` is: float64 copies in the engine, regime-checked.

  Args:
    state: (..., nstate) rows.
    params: from Simulator.params.
    fields: floating-point mjData arrays of fixed size ("xpos", "site_xpos", "sensordata",
      "qacc", "actuator_force", ...).
    eps: the finite-difference step of derivatives (default 1e-6, on float64 rows whatever the
      arrays' dtype; positions centred, as for `step`).

  Returns:
    A dict from field name to its values.

  Example:
    tips = mjbatch_jax.forward(state, params, ("site_xpos",))["site_xpos"]
  """
  state, flat, spec, lead = _checks.state_and_params(state, params)
  h = None if eps is None else _checks.check_eps(eps)
  if isinstance(fields, str):
    raise ValueError(f"fields must be a sequence of names, got the string {fields!r}")
  names = tuple(fields)
  if not names or len(set(names)) != len(names):
    raise ValueError(f"fields must be a non-empty sequence of unique names, got {names}")
  shapes = [_checks.forward_shape(spec, name) for name in names]
  sizes = tuple(math.prod(shape) for shape in shapes)
  with _converted(state):
    outputs = _rules.forward(state, flat, spec, names, sizes, h)
    _settle(state, outputs[0])
  return _shaped(names, outputs, shapes, lead)


_IN_STEP = (
  "observations with observe_at='step' (MuJoCo's in-step values) are not differentiable: use"
  " observe_at='new' for derivatives of observations"
)


def _observation(
  spec: Any, observe: Sequence[str], observe_at: str
) -> tuple[tuple[str, ...], list[tuple[int, ...]], tuple[int, ...], bool]:
  """Names, shapes and sizes of the observed fields, and whether they are at the new state."""
  if isinstance(observe, str):
    raise ValueError(f"observe must be a sequence of names, got the string {observe!r}")
  names = tuple(observe)
  if len(set(names)) != len(names):
    raise ValueError(f"observe must name each field once, got {names}")
  in_step = observe_at == "step"
  shapes = [_checks.forward_shape(spec, name, in_step) for name in names]
  return names, shapes, tuple(math.prod(s) for s in shapes), not in_step


def _check_observe_at(observe_at: Any) -> None:
  # Checked with or without observe, so that a typo never goes unnoticed.
  if not isinstance(observe_at, str) or observe_at not in ("new", "step"):
    raise ValueError(f"observe_at must be 'new' or 'step', got {observe_at!r}")


def _shaped(
  names: tuple[str, ...], values: Any, shapes: list[tuple[int, ...]], lead: tuple[int, ...]
) -> dict[str, jax.Array]:
  parts = zip(names, values, shapes, strict=True)
  return {name: value.reshape(*lead, *shape) for name, value, shape in parts}


def _is_concrete(x: Any) -> bool:
  return not isinstance(x, Tracer)


@contextlib.contextmanager
def _converted(state: Any) -> Iterator[None]:
  """Outside of jit, turn an engine error of the call into our exception right away."""
  if not _is_concrete(state):
    yield
    return
  with simulation_errors():
    yield


def _settle(state: Any, result: Any) -> None:
  # Eager calls wait for their result, so that an error is raised here, as ours. A concrete
  # state can still give a traced result (a traced ctrl or params): nothing to wait for.
  if _is_concrete(state) and all(map(_is_concrete, jax.tree_util.tree_leaves(result))):
    jax.block_until_ready(result)


__all__ = ["NWARNING", "forward", "rollout", "simulation_errors", "step"]
