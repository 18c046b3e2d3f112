"""The pure functions: the engine as XLA CPU custom calls that compose with jit, scan and vmap.

Every function takes `params` (from `Simulator.params`), whose static part names the simulator,
and arrays with any leading dimensions: the handlers flatten them into one batch, and vmap adds
its axis in front (vmap_method="broadcast_all"), so a vmapped call is still one custom call.
"""

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from mjbatch_jax import _calls, derivatives
from mjbatch_jax.errors import SimulationError
from mjbatch_jax.params import Params, SimSpec
from mjbatch_jax.simulator import simulator_of

NWARNING = _calls.NWARNING


def _check_params(params: Any) -> SimSpec:
  if not isinstance(params, Params):
    raise ValueError(
      f"params must come from Simulator.params(num_sims, fields), got {type(params).__name__}"
    )
  return params.spec


def _floating(name: str, x: Any) -> jax.Array:
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise ValueError(f"{name} must be floating-point, got {x.dtype}")
  return x


def _inputs(state: Any, params: Params) -> tuple[jax.Array, jax.Array, SimSpec, tuple[int, ...]]:
  """The state and the params side by side as one (..., P) array, checked against each other."""
  spec = _check_params(params)
  simulator_of(spec.engine)  # ValueError if it is closed
  state = _floating("state", state)
  if state.ndim < 1 or state.shape[-1] != spec.nstate:
    raise ValueError(f"state must be (..., nstate={spec.nstate}), got shape {state.shape}")
  lead = state.shape[:-1]
  dtype = state.dtype
  columns = []
  for name, shape, value in zip(spec.fields, spec.shapes, params.values(), strict=True):
    value = _floating(f"params[{name!r}]", value)
    if value.shape != (*lead, *shape):
      raise ValueError(
        f"params[{name!r}] must have shape {(*lead, *shape)} to match state {state.shape},"
        f" got {value.shape}"
      )
    columns.append(value.astype(dtype).reshape(*lead, -1))
  flat = (
    jnp.concatenate(columns, axis=-1) if columns else jnp.zeros((*lead, 0), dtype)
  )
  return state, flat, spec, lead


def checked_inputs(
  state: Any, ctrl: Any, params: Params, nstep: int
) -> tuple[jax.Array, jax.Array, jax.Array, SimSpec, tuple[int, ...]]:
  """state, ctrl and the params side by side, checked against each other, in state's dtype."""
  nstep = _check_nstep(nstep)
  state, flat, spec, lead = _inputs(state, params)
  ctrl = _floating("ctrl", ctrl)
  if ctrl.shape != (*lead, spec.nu):
    raise ValueError(f"ctrl must have shape {(*lead, spec.nu)}, got {ctrl.shape}")
  return state, ctrl.astype(state.dtype), flat, spec, lead


def step(
  state: Any, ctrl: Any, params: Params, nstep: int = 1, return_warnings: bool = False
) -> Any:
  """Advance each simulation by nstep calls to mj_step with its ctrl; return the new state.

  Pure: the same rows, ctrl and params give the same rows as mj_step on a fresh MjData, bit for
  bit with jax_enable_x64 on (float32 in and out without it, the physics in float64 inside).
  Differentiable (jax.grad, jax.jacfwd, ...) w.r.t. the rows' qpos, qvel and act, ctrl and the
  params leaves, by finite differences computed as extra rows of one call (mjbatch_jax.derivatives
  has the cost model and eps); other entries of a row get zero derivatives.

  Args:
    state: (..., nstate) mjSTATE_INTEGRATION rows.
    ctrl: (..., nu) controls, written into the rows' ctrl before stepping.
    params: from Simulator.params; its leaves have the state's leading dimensions.
    nstep: substeps per call, >= 1.
    return_warnings: also return (..., mjNWARNING) int32 counts of the warnings each simulation
      raised in this call (divergence, for one, is a warning and an automatic reset in MuJoCo),
      so that a jitted loop can mask bad rows. This variant is not differentiable.

  Returns:
    The new state, or (state, warnings).

  Example:
    state = jax.jit(mjbatch_jax.step)(state, ctrl, params)
  """
  state, ctrl, flat, spec, _ = checked_inputs(state, ctrl, params, nstep)
  with _converted(state):
    if return_warnings:
      new_state, warnings = _calls.step(state, ctrl, flat, spec, nstep)
    else:
      new_state, warnings = derivatives.step(state, ctrl, flat, spec, nstep), None
    _settle(state, new_state)
  return (new_state, warnings) if return_warnings else new_state


def rollout(
  state: Any, ctrls: Any, params: Params, nstep: int = 1, return_warnings: bool = False
) -> Any:
  """Run T knots of nstep substeps each from state, knot t with ctrls[..., t, :], in one call.

  Equals T calls of `step`. Sensordata is recorded after each knot's last mj_step, as
  mujoco.rollout records it (computed at the state before that substep). Differentiable as
  `step` is; a derivative costs one call per knot, each with all the columns of all simulations.

  Args:
    state: (..., nstate) rows.
    ctrls: (..., T, nu) controls.
    params: from Simulator.params.
    nstep: substeps per knot, >= 1.
    return_warnings: also return (..., mjNWARNING) warning counts of the whole rollout.

  Returns:
    states (..., T, nstate) after each knot and sensordata (..., T, nsensordata) [, warnings].

  Example:
    states, sensordata = mjbatch_jax.rollout(state, jnp.zeros((N, 100, nu)), params)
  """
  nstep = _check_nstep(nstep)
  state, flat, spec, lead = _inputs(state, params)
  ctrls = _floating("ctrls", ctrls).astype(state.dtype)
  if ctrls.ndim != len(lead) + 2 or ctrls.shape[: len(lead)] != lead or ctrls.shape[-1] != spec.nu:
    raise ValueError(f"ctrls must have shape {(*lead, 'T', spec.nu)}, got {ctrls.shape}")
  with _converted(state):
    if return_warnings:
      states, sensordata, warnings = _calls.rollout(state, ctrls, flat, spec, nstep)
    else:
      (states, sensordata), warnings = derivatives.rollout(state, ctrls, flat, spec, nstep), None
    _settle(state, states)
  if return_warnings:
    return states, sensordata, warnings
  return states, sensordata


def forward(
  state: Any, params: Params, fields: Sequence[str] = ("sensordata",)
) -> dict[str, jax.Array]:
  """mj_forward on each simulation; return the named mjData fields, each (..., *field shape).

  Differentiable w.r.t. the rows' qpos, qvel, act and ctrl and the params leaves, as `step` is.

  Args:
    state: (..., nstate) rows.
    params: from Simulator.params.
    fields: floating-point mjData arrays of fixed size ("xpos", "site_xpos", "sensordata",
      "qacc", "actuator_force", ...).

  Returns:
    A dict from field name to its values.

  Example:
    tips = mjbatch_jax.forward(state, params, ("site_xpos",))["site_xpos"]
  """
  state, flat, spec, lead = _inputs(state, params)
  if isinstance(fields, str):
    raise ValueError(f"fields must be a sequence of names, got the string {fields!r}")
  names = tuple(fields)
  if not names or len(set(names)) != len(names):
    raise ValueError(f"fields must be a non-empty sequence of unique names, got {names}")
  shapes = [_forward_shape(spec.engine, name) for name in names]
  sizes = tuple(int(np.prod(shape)) for shape in shapes)
  with _converted(state):
    outputs = derivatives.forward(state, flat, spec, names, sizes)
    _settle(state, outputs[0])
  parts = zip(names, outputs, shapes, strict=True)
  return {name: out.reshape(*lead, *shape) for name, out, shape in parts}


def _forward_shape(engine: int, name: str) -> tuple[int, ...]:
  """Shape of one simulation's values of mjData field name, checked by the engine."""
  if not isinstance(name, str):
    raise ValueError(f"field names must be strings, got {name!r}")
  return simulator_of(engine).forward_shape(name)


def _check_nstep(nstep: Any) -> int:
  if not isinstance(nstep, (int, np.integer)) or isinstance(nstep, bool) or nstep < 1:
    raise ValueError(f"nstep must be an int >= 1, got {nstep!r}")
  return int(nstep)


def _is_concrete(x: Any) -> bool:
  return not isinstance(x, Tracer)


@contextlib.contextmanager
def _converted(state: Any) -> Iterator[None]:
  """Outside of jit, turn a MuJoCo error of the call into SimulationError right away."""
  if not _is_concrete(state):
    yield
    return
  with simulation_errors():
    yield


def _settle(state: Any, result: Any) -> None:
  # Eager calls wait for their result, so that an error is raised here, as SimulationError. A
  # concrete state can still give a traced result (a traced ctrl or params): nothing to wait for.
  if _is_concrete(state) and all(map(_is_concrete, jax.tree_util.tree_leaves(result))):
    jax.block_until_ready(result)


@contextlib.contextmanager
def simulation_errors() -> Iterator[None]:
  """Raise MuJoCo errors of jitted calls as SimulationError (usable as a decorator too).

  Outside of jit, `step`, `rollout` and `forward` raise SimulationError themselves. Inside a
  jitted function, JAX reports a handler's error with its own exception type; this converts
  those of mjbatch_jax and lets every other exception through unchanged.

    with mjbatch_jax.simulation_errors():
      state = jax.block_until_ready(jitted_loop(state, params))
  """
  try:
    yield
  except SimulationError:
    raise
  except Exception as e:
    converted = _as_simulation_error(e)
    if converted is None:
      raise
    raise converted from e


_MARKER = "mjbatch_jax.SimulationError: "


def _as_simulation_error(e: Exception) -> SimulationError | None:
  message = str(e)
  at = message.find(_MARKER)
  if at < 0:
    return None
  return SimulationError(message[at + len(_MARKER) :].strip())
