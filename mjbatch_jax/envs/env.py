"""`Env`: the base class of single-environment RL tasks, as MuJoCo Playground's `MjxEnv`.

A subclass writes `reset(rng)` and `step(state, action)` for ONE env on unbatched arrays; vmap
(`VmapWrapper`, or Brax's training wrappers) batches them, and each physics call of a vmapped
step stays one custom call over the whole batch.
"""

import abc
import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax import functions
from mjbatch_jax.envs.state import Data, State
from mjbatch_jax.layout import StateLayout
from mjbatch_jax.params import Params
from mjbatch_jax.simulator import Simulator

BAD_WARNINGS = tuple(
  int(w)
  for w in (
    mujoco.mjtWarning.mjWARN_BADQPOS,
    mujoco.mjtWarning.mjWARN_BADQVEL,
    mujoco.mjtWarning.mjWARN_BADQACC,
    mujoco.mjtWarning.mjWARN_BADCTRL,
  )
)
"""The mjtWarning indices (of Data.warnings) after which MuJoCo discarded something: a bad
qpos, qvel or qacc reset the simulation, a bad control was zeroed. An env that raised one is no
longer the episode it was (`Env.bad` tests for them)."""

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def check_action(action: Any, shape: tuple[int, ...], name: str = "action") -> jax.Array:
  """action as a float32 or float64 array of exactly shape; ValueError otherwise.

  Runs at trace time, so a bad action fails in Python before any custom call. Its values are
  not checked: under jit they are not known, and eager calls behave the same way. A NaN action
  reaches MuJoCo, which steps that env with zero controls and raises its bad-control warning
  (`Env.bad`), and `wrap_for_brax_training` ends its episode (WarningWrapper); an inf one an
  actuator's ctrlrange clamps. The state row's ctrl keeps the action given.

  Args:
    action: the action to check, an array (traced or not).
    shape: the shape it must have exactly, e.g. (env.action_size,).
    name: what to call it in the error message (default "action").

  Returns:
    action as a JAX array, its dtype kept.

  Raises:
    ValueError: action is not an array of numbers, not float32 or float64, or not of shape.

  Example:
    action = check_action(action, (env.action_size,))
  """
  if isinstance(action, (str, bytes)) or action is None:
    raise ValueError(f"{name} must be a float32 or float64 array of shape {tuple(shape)}, got "
                     f"{v.shown(action)}")
  array = v.array(name, action, dtype="any")
  if array.dtype not in _FLOATS:
    raise ValueError(f"{name} must be float32 or float64, got {array.dtype}")
  if array.shape != tuple(shape):
    raise ValueError(f"{name} must have shape {tuple(shape)}, got {array.shape}")
  return array


def check_key(rng: Any, batched: bool = False, name: str = "rng") -> None:
  """ValueError unless rng is one PRNG key, or with batched a batch (N,) of them.

  Keys are typed (jax.random.key) or raw uint32 (jax.random.PRNGKey); shapes only, so that it
  runs at trace time.

  Args:
    rng: the key (or keys) to check.
    batched: whether rng is a batch (N,) of keys, as jax.random.split(key, N) makes, rather
      than one key (default False). Static: a Python bool.
    name: what to call rng in the error message (default "rng").

  Raises:
    ValueError: rng is not one key (or with batched a batch of them).

  Example:
    check_key(keys, batched=True)   # jax.random.split(key, N)
  """
  v.key(name, rng, batched)


def check_state(state: Any, name: str = "state") -> State:
  """ValueError unless state is an env State (what reset and step return).

  Args:
    state: the object to check.
    name: what to call it in the error message (default "state").

  Returns:
    state, unchanged.

  Raises:
    ValueError: state is not an envs.State.

  Example:
    state = check_state(state)
  """
  if not isinstance(state, State):
    raise ValueError(f"{name} must be an envs.State (as reset and step return), got "
                     f"{type(state).__name__}")
  return state


def advance(
  row: jax.Array,
  ctrl: jax.Array,
  params: Params,
  nstep: int,
  observe: tuple[str, ...],
  track_warnings: bool,
  observe_at: str = "new",
) -> tuple[jax.Array, dict[str, jax.Array], jax.Array | None]:
  """nstep substeps of row with ctrl, then the observed fields.

  The one place that decides how fields are obtained: from the step call itself (one custom
  call), at the new row or as mj_step left them.

  Args:
    row: (..., nstate) rows.
    ctrl: (..., nu) controls.
    params: params with the rows' leading dimensions.
    nstep: substeps.
    observe: mjData field names.
    track_warnings: also return the call's warning counts (the variant without derivatives).
    observe_at: "new" (mj_forward at the new row) or "step" (as mj_step leaves them, at the
      state before the last substep, as MJX reads them).

  Returns:
    (new row, {field: values}, warnings or None when not tracked).
  """
  kwargs: dict[str, Any] = dict(observe=observe, observe_at=observe_at) if observe else {}
  out = functions.step(row, ctrl, params, nstep=nstep, return_warnings=track_warnings, **kwargs)
  if observe:
    return out if track_warnings else (*out, None)
  return (out[0], {}, out[1]) if track_warnings else (out, {}, None)


class Env(abc.ABC):
  """A single-environment task on a Simulator, with MuJoCo Playground's env API.

  Subclasses set `observe` (mjData fields computed after each physics call, read as
  `data.site_xpos` and so on) and `param_fields` (model fields each env carries, for domain
  randomisation), and write `reset` and `step` for one env with `make_data` and
  `pipeline_step`.

    class Balance(Env):
      observe = ("site_xpos",)

      def reset(self, rng):
        data = self.make_data(qpos=jax.random.uniform(rng, (2,), minval=-.1, maxval=.1))
        return State(data, self._obs(data), jnp.zeros(()), jnp.zeros(()))

      def step(self, state, action):
        data = self.pipeline_step(state.data, action)
        ...
  """

  observe: tuple[str, ...] = ()
  # "new": observed fields as mj_forward gives them at the new state (as at reset); "step": as
  # mj_step leaves them, at the state before its last substep (MJX's and Playground's values).
  observe_at: str = "new"
  param_fields: tuple[str, ...] = ()
  # Warning counts need the call variant without derivatives; an env that is differentiated
  # through (analytic policy gradients) turns this off.
  track_warnings: bool = True

  def __init__(self, mj_model: mujoco.MjModel, n_substeps: int = 1, num_threads: int = 0):
    """Makes the env's Simulator and checks the subclass's `observe` and `param_fields`.

    Args:
      mj_model: the task's mujoco.MjModel (the Simulator copies it; `env.mj_model` is the copy).
      n_substeps: physics steps per env step (pipeline_step), an int >= 1: the control
        timestep `dt` is n_substeps times the model's timestep.
      num_threads: the Simulator's threads, an int (0, the default: one per CPU, at most 4 per
        CPU).

    Raises:
      ValueError: n_substeps < 1, num_threads out of range, mj_model not an MjModel, or
        observe, observe_at or param_fields not what the Simulator can give.
    """
    n_substeps = v.integer("n_substeps", n_substeps, low=1)
    self._sim = Simulator(mj_model, num_threads)
    self._mj_model = self._sim.model
    self._n_substeps = int(n_substeps)
    self._layout = StateLayout.of(self._mj_model)
    self.observe = _names("observe", self.observe)
    self.param_fields = _names("param_fields", self.param_fields)
    if self.observe_at not in ("new", "step"):
      raise ValueError(f'observe_at must be "new" or "step", got {self.observe_at!r}')
    for name in self.observe:
      self._sim.forward_shape(name)  # a field forward cannot give fails here, by name
    # One env's params: leaves of the fields' own shapes, which step takes with a 1-D row.
    self._params = jax.tree.map(lambda x: x[0], self._sim.params(1, self.param_fields))
    self._init_row = self._sim.init_state(1)[0]
    self._params_override: Params | None = None

  @abc.abstractmethod
  def reset(self, rng: jax.Array) -> State:
    """One env's first state from a key."""

  @abc.abstractmethod
  def step(self, state: State, action: jax.Array) -> State:
    """One env's next state."""

  @property
  def mj_model(self) -> mujoco.MjModel:
    return self._mj_model

  @property
  def sim(self) -> Simulator:
    return self._sim

  @property
  def layout(self) -> StateLayout:
    return self._layout

  @property
  def n_substeps(self) -> int:
    return self._n_substeps

  @property
  def sim_dt(self) -> float:
    return float(self._mj_model.opt.timestep)

  @property
  def dt(self) -> float:
    """Control timestep: n_substeps physics steps."""
    return self._n_substeps * self.sim_dt

  @property
  def default_params(self) -> Params:
    """The model's values of `param_fields`, as one env's params."""
    return self._params

  @property
  def params(self) -> Params:
    """The params new data gets: the model's, or those a randomisation wrapper set."""
    return self._params if self._params_override is None else self._params_override

  @contextlib.contextmanager
  def using_params(self, params: Params) -> Iterator["Env"]:
    """Within the block, `make_data` gives data with these params (per env under vmap).

    As Playground's randomisation wrappers swap an env's model while tracing its reset.
    """
    if params.spec != self._params.spec:
      raise ValueError(
        f"params must have this env's fields {self.param_fields} from its simulator, got"
        f" {tuple(params)}"
      )
    previous = self._params_override
    self._params_override = params
    try:
      yield self
    finally:
      self._params_override = previous

  @property
  def action_size(self) -> int:
    return self._mj_model.nu

  @property
  def observation_size(self) -> Any:
    """The last axis of obs (or a dict of obs shapes), from tracing reset without running it."""
    obs = jax.eval_shape(self.reset, jax.random.PRNGKey(0)).obs
    if isinstance(obs, dict):
      return {name: value.shape for name, value in obs.items()}
    return obs.shape[-1]

  @property
  def unwrapped(self) -> "Env":
    return self

  def close(self) -> None:
    self._sim.close()

  def make_data(
    self,
    qpos: Any = None,
    qvel: Any = None,
    act: Any = None,
    ctrl: Any = None,
    mocap_pos: Any = None,
    mocap_quat: Any = None,
    row: Any = None,
  ) -> Data:
    """Data at the model's initial state (or row) with the given parts, fields computed.

    Example:
      data = self.make_data(qpos=self.mj_model.qpos0 + noise)
    """
    if row is None:
      row = self._init_row
    else:
      row = v.array("row", row, (..., self._layout.size))
    parts = dict(qpos=qpos, qvel=qvel, act=act, ctrl=ctrl, mocap_pos=mocap_pos,
                 mocap_quat=mocap_quat)
    warnings = jnp.zeros((*row.shape[:-1], functions.NWARNING), jnp.int32)
    data = Data(row, self.params, warnings, {}, self._layout)
    data = data.replace(**{name: value for name, value in parts.items() if value is not None})
    return self.forward(data)

  def forward(self, data: Data) -> Data:
    """data with its observed fields recomputed at its row (after a replace of qpos, say)."""
    if not self.observe:
      return data
    fields = functions.forward(data.row, data.params, self.observe)
    return Data(data.row, data.params, data.warnings, fields, self._layout)

  def pipeline_step(self, data: Data, ctrl: Any) -> Data:
    """n_substeps physics steps of data with ctrl, then its observed fields.

    Example:
      data = self.pipeline_step(state.data, action)
    """
    ctrl = check_action(ctrl, (*data.row.shape[:-1], self._mj_model.nu), "ctrl")
    row, fields, warnings = advance(
      data.row, ctrl, data.params, self._n_substeps, self.observe, self.track_warnings,
      self.observe_at,
    )
    if warnings is None:
      warnings = jnp.zeros_like(data.warnings)
    return Data(row, data.params, warnings, fields, self._layout)

  def bad(self, data: Data) -> jax.Array:
    """Whether the last physics call of data raised a warning after which MuJoCo discarded
    something (a bad control zeroed, a diverged simulation reset)."""
    return jnp.any(data.warnings[..., jnp.asarray(BAD_WARNINGS)] > 0, axis=-1)


def _names(what: str, names: Sequence[str]) -> tuple[str, ...]:
  if isinstance(names, str) or not all(isinstance(n, str) for n in names):
    raise ValueError(f"{what} must be a sequence of field names, got {names!r}")
  names = tuple(names)
  if len(set(names)) != len(names):
    raise ValueError(f"{what} must be unique, got {names}")
  return names
