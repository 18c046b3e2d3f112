"""MuJoCo Playground's own environments, their physics on mjbatch_jax.

Playground's envs (`mujoco_playground`, the `playground` extra) are written against MJX: they
make data with `mjx_env.make_data`, step it with `mjx_env.step` and recompute it with
`mjx.forward`. `load` and `wrap` give an env whose methods call this module's versions of those
three instead, on state rows and `mjbatch_jax.step(..., observe=..., observe_at="step")`, so the
env runs unchanged on native, multi-threaded MuJoCo, bit for bit what `mj_step` gives.

  from mjbatch_jax.envs import playground
  env = playground.load("CartpoleBalance")
  state = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 1024))
  state = jax.jit(jax.vmap(env.step))(state, jnp.zeros((1024, env.action_size)))

How it is done, per env (two envs of different models work side by side):
- The env's class is subclassed with copies of its methods (of every class it derives from)
  whose module globals see `mjx_env` and `mjx` through proxies with our make_data, step and
  forward; nothing of Playground or MJX is patched.
- The mjData fields the env reads are found once, by tracing reset and step abstractly with a
  recording Data (no physics runs); each physics call then computes exactly those, in MJX's
  shapes (`xmat` and the like as (n, 3, 3)). A field the engine cannot give (contacts, efc
  arrays, vision) is a ValueError naming it, raised by `wrap`.
- The model the env passes to each call (`self.mjx_model`, which Playground's domain
  randomisation wrapper swaps for a per-env one) becomes params: every float field whose value
  differs from the model's is a params leaf, so Playground's randomisers
  (`(model, rng) -> (model, in_axes)`) vary our physics as they vary MJX's.
- MJX's `impl` is forced to "jax" (the env's own `mjx_model` stays a valid MJX model).

Menagerie assets: Playground's locomotion envs read robots from a MuJoCo Menagerie checkout,
which Playground would clone from GitHub; `load` finds one as `envs.menagerie` says.
"""

import dataclasses
import difflib
import functools
import importlib
import os
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.core import Tracer

from mjbatch_jax import _validate as v
from mjbatch_jax import functions
from mjbatch_jax.envs import menagerie as menagerie_lib
from mjbatch_jax.envs.menagerie import MENAGERIE_ENV  # noqa: F401  (its old home)
from mjbatch_jax.envs.state import Data
from mjbatch_jax.layout import StateLayout
from mjbatch_jax.params import Params
from mjbatch_jax.simulator import MAX_THREADS, Simulator

INSTALL_HINT = "MuJoCo Playground is not installed: pip install -e '.[playground]'"
"""What the ImportError says when this module's functions need MuJoCo Playground (the
`playground` extra) and it is not installed."""

# MJX Data fields that only MJX's own solver has: contacts, constraint rows and factorisations.
_WHY_UNSUPPORTED = (
  "mjbatch_jax gives fixed-size mjData fields (qpos, sensordata, site_xpos, ...), not MJX's"
  " contacts, constraint (efc) arrays or vision; read contacts through touch or contact sensors"
  " (sensordata) instead"
)


def _playground() -> tuple[Any, Any, Any]:
  """(registry, mjx_env, mjx) of MuJoCo Playground; ImportError with the install hint."""
  try:  # by name: the extra is optional, for the type checker too
    mjx = importlib.import_module("mujoco.mjx")
    registry = importlib.import_module("mujoco_playground").registry
    mjx_env = importlib.import_module("mujoco_playground._src.mjx_env")
  except ImportError as e:
    raise ImportError(f"{INSTALL_HINT} ({e})") from e
  return registry, mjx_env, mjx


@jax.tree_util.register_pytree_node_class
class PlaygroundData(Data):
  """`Data` as MJX's `mjx.Data` reads for a Playground env: the row's parts, the env's fields.

  Its params slot is unused (None): the model each physics call is given sets the params. While
  the adapter traces an env to find the fields it reads, a recorder notes each field read and
  answers zeros of MJX's shape.
  """

  __slots__ = ("_recorder",)

  def __init__(self, row, warnings, fields, layout, recorder=None):
    """Wraps a row and its fields; the adapter makes these, not users.

    Args:
      row (jax.Array): (..., nstate) mjSTATE_INTEGRATION rows.
      warnings (jax.Array): (..., mjNWARNING) int32 counts of the MuJoCo warnings of the last
        physics call.
      fields (Mapping[str, jax.Array]): the mjData fields the env reads, by name, as the last
        physics call computed them.
      layout (StateLayout): the StateLayout of the rows.
      recorder (Any): None, or while the adapter traces the env, what notes the MJX fields read
        (a read of one then answers zeros of MJX's shape).
    """
    super().__init__(row, cast(Any, None), warnings, fields, layout)
    self._recorder = recorder

  def __getattr__(self, name: str) -> Any:
    if name.startswith("__"):
      raise AttributeError(name)
    fields = self._fields
    if name in fields:
      return fields[name]
    if name in self._layout.names():
      return super().__getattr__(name)
    recorder = self._recorder
    if recorder is not None and recorder.physics.is_mjx_field(name):
      recorder.physics.check_supported(name)
      recorder.names.add(name)
      lead = self.row.shape[:-1]
      return jnp.zeros((*lead, *recorder.physics.shape(name)), self.row.dtype)
    if name == "_impl" or (recorder is None and _is_mjx_field(name)):
      raise ValueError(
        f"data.{name} is not among the fields this env was found to read"
        f" ({tuple(fields)}): {_WHY_UNSUPPORTED}"
      )
    raise AttributeError(f"mjx.Data has no field {name!r}")

  def replace(self, **changes: Any) -> "PlaygroundData":
    """A copy with parts of the row or stored fields replaced, as `mjx.Data.replace`."""
    fields = dict(self._fields)
    row_changes = {}
    for name, value in changes.items():
      if name in fields or name not in self._layout.names() and name not in ("row", "warnings"):
        if name not in fields and not _is_mjx_field(name):
          raise ValueError(f"mjx.Data has no field {name!r} to replace")
        fields[name] = value
      else:
        row_changes[name] = value
    bare = Data(self.row, cast(Any, None), self.warnings, {}, self._layout)
    new = bare.replace(**row_changes)
    return PlaygroundData(new.row, new.warnings, fields, self._layout, self._recorder)

  def tree_flatten(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    names = tuple(self._fields)
    children = (self.row, self.warnings, *(self._fields[n] for n in names))
    return children, (self._layout, names, self._recorder)

  @classmethod
  def tree_unflatten(cls, aux: tuple[Any, ...], children: Any) -> "PlaygroundData":
    layout, names, recorder = aux
    row, warnings, *values = children
    return cls(row, warnings, dict(zip(names, values, strict=True)), layout, recorder)


def _is_mjx_field(name: str) -> bool:
  return name in _mjx_field_names()


@functools.cache
def _mjx_field_names() -> frozenset[str]:
  """Every field name of mjx.Data and of its implementation part (contacts, efc arrays, ...)."""
  mjx_types = importlib.import_module("mujoco.mjx._src.types")
  names = {f.name for f in dataclasses.fields(mjx_types.Data)}
  for cls in vars(mjx_types).values():
    if isinstance(cls, type) and cls.__name__.startswith("DataJAX"):
      names |= {f.name for f in dataclasses.fields(cls)}
  return frozenset(names - {"_impl"})


class _Recorder:
  """The fields an env reads while traced; identity-hashed, so it can sit in a pytree's aux."""

  def __init__(self, physics: "_Physics"):
    self.physics = physics
    self.names: set[str] = set()


class _Physics:
  """One wrapped env's physics: its simulator, the fields it reads, and the three replaced calls.
  """

  def __init__(self, mj_model: mujoco.MjModel, mjx_model: Any, num_threads: int):
    _, _, mjx = _playground()
    self.sim = Simulator(mj_model, num_threads)
    self.layout = StateLayout.of(self.sim.model)
    self.default_model = mjx_model
    self.observed: tuple[str, ...] | None = None  # None while fields are being discovered
    self.recorder: _Recorder | None = None
    self._init_row = self.sim.init_state(1)[0]
    template = mjx.make_data(self.sim.model, impl="jax")
    self._mjx_shapes = {
      f.name: tuple(np.shape(getattr(template, f.name)))
      for f in dataclasses.fields(template) if f.name != "_impl"
    }
    self._param_fields = _param_candidates(self.sim.model, mjx_model)
    self._params: dict[tuple[str, ...], Params] = {}

  def is_mjx_field(self, name: str) -> bool:
    return _is_mjx_field(name) and name not in self.layout.names()

  def check_supported(self, name: str) -> None:
    try:
      self.sim.forward_shape(name)
    except ValueError as e:
      raise ValueError(f"this env reads data.{name}: {_WHY_UNSUPPORTED} ({e})") from None

  def shape(self, name: str) -> tuple[int, ...]:
    """MJX's shape of a field where it has the engine's size (xmat as (n, 3, 3)), else ours."""
    ours = self.sim.forward_shape(name)
    theirs = self._mjx_shapes.get(name)
    if theirs is not None and int(np.prod(theirs)) == int(np.prod(ours)):
      return theirs
    return ours

  # The replaced calls.

  def make_data(self, model: Any = None, qpos=None, qvel=None, ctrl=None, act=None,
                mocap_pos=None, mocap_quat=None, **_: Any) -> PlaygroundData:
    """As `mjx_env.make_data`: the model's initial state with these parts; fields zero, as MJX's.

    MJX's allocation options (impl, naconmax, njmax, device) have no meaning here.
    """
    del model  # the simulator's model, as the env's mj_model was when wrapped
    row = self._init_row
    nwarning = functions.NWARNING
    data = PlaygroundData(row, jnp.zeros((nwarning,), jnp.int32), {}, self.layout, self.recorder)
    parts = dict(qpos=qpos, qvel=qvel, ctrl=ctrl, act=act, mocap_pos=mocap_pos,
                 mocap_quat=mocap_quat)
    data = data.replace(**{k: v for k, v in parts.items() if v is not None})
    if self.observed is None:
      return data
    zeros = {name: jnp.zeros(self.shape(name), row.dtype) for name in self.observed}
    return PlaygroundData(data.row, data.warnings, zeros, self.layout)

  def forward(self, model: Any, data: PlaygroundData) -> PlaygroundData:
    """As `mjx.forward`: the env's fields recomputed at the data's row, with the model's params."""
    data = _check_data(data, "mjx.forward")
    if self.observed is None or not self.observed:
      return data
    params = self.params_of(model)
    fields = functions.forward(data.row, params, self.observed)
    return self._with_fields(data.row, data.warnings, fields)

  def step(self, model: Any, data: PlaygroundData, action: Any,
           n_substeps: int = 1) -> PlaygroundData:
    """As `mjx_env.step`: n_substeps of mj_step with ctrl = action, the env's fields as MJX
    reads them after a step (computed at the state before the last substep)."""
    data = _check_data(data, "mjx_env.step")
    if self.observed is None:
      return data
    params = self.params_of(model)
    ctrl = jnp.broadcast_to(jnp.asarray(action), (*data.row.shape[:-1], self.sim.nu))
    if self.observed:
      row, fields, warnings = functions.step(
        data.row, ctrl, params, nstep=int(n_substeps), return_warnings=True,
        observe=self.observed, observe_at="step",
      )
    else:
      row, warnings = functions.step(data.row, ctrl, params, nstep=int(n_substeps),
                                     return_warnings=True)
      fields = {}
    return self._with_fields(row, warnings, fields)

  def mjx_step(self, model: Any, data: PlaygroundData) -> PlaygroundData:
    """As `mjx.step`: one mj_step with the data's own ctrl."""
    data = _check_data(data, "mjx.step")
    return self.step(model, data, data.ctrl, 1)

  def _with_fields(self, row, warnings, fields: Mapping[str, Any]) -> PlaygroundData:
    lead = row.shape[:-1]
    shaped = {name: value.reshape(*lead, *self.shape(name)) for name, value in fields.items()}
    return PlaygroundData(row, warnings, shaped, self.layout)

  def params_of(self, model: Any) -> Params:
    """Params of the fields in which model differs from the env's (traced ones included)."""
    varied = []
    for name, get in self._param_fields:
      leaf = get(model)
      default = get(self.default_model)
      if leaf is default:
        continue
      if isinstance(leaf, Tracer) or not np.array_equal(np.asarray(leaf),
                                                                 np.asarray(default)):
        varied.append((name, leaf))
    names = tuple(name for name, _ in varied)
    template = self._params.get(names)
    if template is None:
      try:
        batch = self.sim.params(1, names)
      except ValueError as e:
        raise ValueError(
          f"the env's model varies fields {names} (by domain randomisation, say); mjbatch_jax"
          f" cannot vary one of them: {e}"
        ) from None
      template = jax.tree.map(lambda x: x[0], batch)
      self._params[names] = template
    values = {}
    for name, leaf in varied:
      value = jnp.asarray(leaf, template[name].dtype)
      values[name] = value.reshape(value.shape[:-1] + template[name].shape[-1:]) \
        if value.ndim == template[name].ndim else value.reshape(template[name].shape)
    return template.replace(values)


def _param_candidates(mj_model: mujoco.MjModel, mjx_model: Any) -> tuple[tuple[str, Any], ...]:
  """(params name, getter of the mjx.Model's value) for every float field both models have."""
  out = []
  for field in dataclasses.fields(mjx_model):
    value = getattr(mj_model, field.name, None)
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
      out.append((field.name, _getter(field.name)))
  for field in dataclasses.fields(mjx_model.opt):
    value = getattr(mj_model.opt, field.name, None)
    if isinstance(value, (float, np.ndarray)) and np.asarray(value).dtype.kind == "f":
      out.append((f"opt.{field.name}", _getter("opt", field.name)))
  return tuple(out)


def _getter(*path: str) -> Callable[[Any], Any]:
  def get(model: Any) -> Any:
    for name in path:
      model = getattr(model, name)
    return model

  return get


def _check_data(data: Any, call: str) -> PlaygroundData:
  if not isinstance(data, PlaygroundData):
    raise ValueError(
      f"{call} on mjbatch_jax takes the data this env made (PlaygroundData), got"
      f" {type(data).__name__}"
    )
  return data


class _Proxy(types.ModuleType):
  """A module whose named functions are replaced; its other attributes are the real module's.

  With guard (for MJX itself), a function of the real module given our data raises a ValueError
  naming it, since only the replaced ones run on mjbatch_jax; Playground's own helpers
  (get_sensor_data, ...) read data fields and pass through.
  """

  def __init__(self, real: types.ModuleType, replaced: Mapping[str, Callable[..., Any]],
               guard: bool):
    super().__init__(real.__name__)
    self._real = real
    self._replaced = dict(replaced)
    self._guard = guard

  def __getattr__(self, name: str) -> Any:
    if name.startswith("_"):
      raise AttributeError(name)
    if name in self._replaced:
      return self._replaced[name]
    value = getattr(self._real, name)
    if not self._guard or not isinstance(value, types.FunctionType):
      return value
    module = self._real.__name__

    @functools.wraps(value)
    def guarded(*args: Any, **kwargs: Any) -> Any:
      if any(isinstance(a, PlaygroundData) for a in (*args, *kwargs.values())):
        raise ValueError(
          f"{module}.{name} does not run on mjbatch_jax's data; only make_data, step and"
          f" forward do: {_WHY_UNSUPPORTED}"
        )
      return value(*args, **kwargs)

    return guarded


def wrap(env: Any, num_threads: int = 0) -> Any:
  """The Playground env `env` with its physics on mjbatch_jax; `env` itself is left as it was.

  The simulator copies `env.mj_model` as it is now (its options, its solver settings); the
  fields the env reads are found by tracing its reset and step once (no physics runs).

  Args:
    env: an env made by Playground (`mujoco_playground.registry.load(...)`, or any `MjxEnv`
      whose methods call `mjx_env.make_data`, `mjx_env.step` and `mjx.forward`), unwrapped.
    num_threads: the simulator's threads (0: one per CPU).

  Returns:
    An env of a subclass of env's class, with the same attributes, whose physics calls run on
    mjbatch_jax; `mjbatch_jax_sim` and `observed_fields` tell which simulator and fields.

  Raises:
    ValueError: env is not a Playground env, or it reads a field mjbatch_jax cannot give
      (contacts, efc arrays, vision), named.

  Example:
    env = playground.wrap(registry.load("CartpoleBalance", config_overrides={"impl": "jax"}))
  """
  num_threads = _check_threads(num_threads)
  _, mjx_env, mjx = _playground()
  if not isinstance(env, mjx_env.MjxEnv):
    raise ValueError(f"env must be a MuJoCo Playground MjxEnv, got {type(env).__name__}")
  if env.unwrapped is not env:
    raise ValueError(
      f"wrap the unwrapped env (env.unwrapped), not the wrapper {type(env).__name__}"
    )
  if isinstance(env, _Wrapped):
    raise ValueError("env already runs on mjbatch_jax")
  impl = getattr(getattr(env.mjx_model, "impl", None), "value", "jax")
  mj_model = env.mj_model
  mjx_model = env.mjx_model
  if impl != "jax":
    # Playground's locomotion envs default to MJX's warp implementation; our physics replaces it
    # either way, and the env's own mjx_model must be one MJX's jax implementation can use.
    mjx_model = mjx.put_model(mj_model, impl="jax")
  physics = _Physics(mj_model, mjx_model, num_threads)
  new = object.__new__(_subclass(type(env), physics))
  new.__dict__.update(env.__dict__)
  new.__dict__.update(_mjx_model=mjx_model, _mj_model=physics.sim.model,
                      _mjbatch_physics=physics)
  _discover_fields(new, physics)
  return new


def _discover_fields(env: Any, physics: _Physics) -> None:
  """Trace reset and step abstractly with a recording Data; keep the fields they read."""
  physics.recorder = _Recorder(physics)
  try:
    key = jax.random.PRNGKey(0)
    state = jax.eval_shape(env.reset, key)
    action = jax.ShapeDtypeStruct((env.action_size,), physics._init_row.dtype)
    jax.eval_shape(env.step, state, action)
    physics.observed = tuple(sorted(physics.recorder.names))
  finally:
    physics.recorder = None


class _Wrapped:
  """Marks the adapter's subclasses."""

  @property
  def mjbatch_jax_sim(self) -> Simulator:
    """The simulator the env's physics runs on."""
    return self.__dict__["_mjbatch_physics"].sim

  @property
  def observed_fields(self) -> tuple[str, ...]:
    """The mjData fields each physics call computes: those the env reads."""
    return self.__dict__["_mjbatch_physics"].observed

  def close(self) -> None:
    self.__dict__["_mjbatch_physics"].sim.close()


def _subclass(cls: type, physics: _Physics) -> type:
  """cls with its methods rebound to module globals that see this env's physics.

  Each module's globals are copied once per env, with the modules `mjx_env` and `mjx` (under
  whatever names the module gave them) replaced by proxies whose make_data, step and forward are
  the physics'; the module's own functions in that copy are rebound too, so helpers the methods
  call see the same proxies.
  """
  _, mjx_env, mjx = _playground()
  proxies = {
    id(mjx_env): _Proxy(mjx_env, {"make_data": physics.make_data, "step": physics.step},
                      guard=False),
    id(mjx): _Proxy(mjx, {"forward": physics.forward, "step": physics.mjx_step},
                  guard=True),
  }
  copies: dict[int, dict[str, Any]] = {}

  def globals_for(real: dict[str, Any]) -> dict[str, Any]:
    if id(real) not in copies:
      new = dict(real)
      copies[id(real)] = new
      for name, value in real.items():
        if id(value) in proxies:
          new[name] = proxies[id(value)]
        elif isinstance(value, types.FunctionType) and value.__globals__ is real:
          new[name] = rebind(value)
    return copies[id(real)]

  def rebind(fn: types.FunctionType) -> types.FunctionType:
    new = types.FunctionType(fn.__code__, globals_for(fn.__globals__), fn.__name__,
                             fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    new.__qualname__ = fn.__qualname__
    return new

  def rebind_attribute(value: Any) -> Any:
    if isinstance(value, types.FunctionType):
      return rebind(value)
    if isinstance(value, property):
      parts: list[Any] = [rebind(f) if isinstance(f, types.FunctionType) else f
                          for f in (value.fget, value.fset, value.fdel)]
      return property(parts[0], parts[1], parts[2], doc=value.__doc__)
    if isinstance(value, (staticmethod, classmethod)) and isinstance(value.__func__,
                                                                      types.FunctionType):
      return type(value)(rebind(value.__func__))
    return None

  namespace: dict[str, Any] = {}
  seen: set[str] = set()
  for base in cls.__mro__:  # each name as the class resolves it: from the first class with it
    if base.__module__ in ("builtins", "abc"):
      continue
    for name, value in vars(base).items():
      if name in seen:
        continue
      seen.add(name)
      rebound = rebind_attribute(value)
      if rebound is not None:
        namespace[name] = rebound
  namespace["__module__"] = cls.__module__
  return type(f"{cls.__name__}OnMjbatch", (_Wrapped, cls), namespace)


def load(
  name: str,
  config: Any = None,
  config_overrides: Mapping[str, Any] | None = None,
  num_threads: int = 0,
  menagerie: str | os.PathLike[str] | None = None,
) -> Any:
  """Playground's env `name` (as `registry.load` makes it) with its physics on mjbatch_jax.

  Args:
    name: a Playground env name ("CartpoleBalance", "Go1JoystickFlatTerrain", ...).
    config: the env's config (default: Playground's default config for name).
    config_overrides: flattened overrides ({"reward_config.scales.orientation": -1.0}), checked
      here: "impl" must be "jax" (MJX's warp implementation is what this replaces) and
      "vision" must be off.
    num_threads: the simulator's threads (0: one per CPU).
    menagerie: a MuJoCo Menagerie checkout (one folder per robot) for the locomotion and
      manipulation envs; default $MJBATCH_JAX_MENAGERIE, else Playground's own checkout.

  Returns:
    The env, as `wrap` returns it.

  Raises:
    ValueError: no env of that name, an override the adapter cannot honour or Playground does
      not know, no Menagerie robot where one is needed, or a field the env reads that
      mjbatch_jax cannot give; before any physics runs.

  Example:
    env = playground.load("Go1JoystickFlatTerrain")
    state = jax.jit(env.reset)(jax.random.PRNGKey(0))
  """
  num_threads = _check_threads(num_threads)
  return wrap(load_mjx(name, config, config_overrides, menagerie), num_threads)


def _check_threads(num_threads: Any) -> int:
  return v.integer("num_threads", num_threads, low=0, high=MAX_THREADS)


def load_mjx(
  name: str,
  config: Any = None,
  config_overrides: Mapping[str, Any] | None = None,
  menagerie: str | os.PathLike[str] | None = None,
) -> Any:
  """Playground's env `name` on MJX (impl "jax"), its config checked and Menagerie found as
  `load` does: the reference that `load`'s env is compared with.

  Args:
    name: a Playground env name ("CartpoleBalance", "Go1JoystickFlatTerrain", ...).
    config: the env's config (default: Playground's default config for name).
    config_overrides: flattened overrides ({"reward_config.scales.orientation": -1.0}), checked
      as `load` checks them: each key must be in the config, "impl" must be "jax" and "vision"
      must be off.
    menagerie: a MuJoCo Menagerie checkout (one folder per robot) for the locomotion and
      manipulation envs; default $MJBATCH_JAX_MENAGERIE, else Playground's own checkout.

  Returns:
    The env as Playground's `registry.load` makes it, on MJX's "jax" implementation.

  Raises:
    ImportError: MuJoCo Playground is not installed (INSTALL_HINT).
    ValueError: no env of that name, config_overrides not a dict or naming a key the config
      does not have, impl other than "jax", vision on, or menagerie (or
      $MJBATCH_JAX_MENAGERIE, where an env needs a robot) not a folder.

  Example:
    reference = playground.load_mjx("CartpoleBalance")
  """
  if config_overrides is not None and not isinstance(config_overrides, Mapping):
    raise ValueError(f"config_overrides must be a dict of flattened keys or None, got "
                     f"{v.shown(config_overrides)}")
  if menagerie is not None and (not isinstance(menagerie, (str, os.PathLike))
                                or isinstance(menagerie, bytes)):
    raise ValueError(f"menagerie must be a folder's path or None, got {v.shown(menagerie)}")
  registry, mjx_env, _ = _playground()
  all_envs = tuple(registry.ALL_ENVS)
  if not isinstance(name, str) or name not in all_envs:
    close = difflib.get_close_matches(str(name), all_envs, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; Playground has {all_envs}"
    raise ValueError(f"MuJoCo Playground has no env named {name!r}{hint}")
  base = config if config is not None else registry.get_default_config(name)
  overrides = _checked_overrides(name, base, dict(config_overrides or {}))
  if name in registry.dm_control_suite.ALL_ENVS:
    env = registry.load(name, config=config, config_overrides=overrides)
  else:
    with menagerie_lib.menagerie_for(mjx_env, menagerie):
      env = registry.load(name, config=config, config_overrides=overrides)
    stand_ins = sorted(k for k, v in getattr(env, "_model_assets", {}).items()
                       if v == menagerie_lib.PLACEHOLDER_STL)
    if stand_ins:
      warnings.warn(
        f"{name}: the Menagerie robot found lacks the meshes {stand_ins}; placeholders stand in"
        " for them (visual geoms: no collision, no mass, so the physics is unchanged)",
        stacklevel=2,
      )
  return env


def _checked_overrides(name: str, config: Any, overrides: dict[str, Any]) -> dict[str, Any]:
  for key in overrides:
    node = config
    for part in str(key).split("."):
      if not hasattr(node, "keys") or part not in node.keys():
        raise ValueError(
          f"config_overrides names {key!r}, which {name}'s config does not have (its keys:"
          f" {sorted(config.keys())})"
        )
      node = node[part]
  if overrides.get("impl", "jax") != "jax":
    raise ValueError(
      f"config_overrides impl={overrides['impl']!r} cannot be honoured: mjbatch_jax replaces"
      " MJX's physics, and the env's mjx_model must use MJX's 'jax' implementation"
    )
  vision = overrides.get("vision", config.get("vision", False) if hasattr(config, "get") else 0)
  if vision:
    raise ValueError(f"{name} with vision=True renders with Madrona: {_WHY_UNSUPPORTED}")
  if "impl" in config.keys():
    overrides["impl"] = "jax"
  return overrides
