"""Per-simulation model values as a JAX pytree that also names its simulator."""

import copy
import dataclasses
import hashlib
import os
import re
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import mujoco
import numpy as np

from mjbatch_jax import _programs
from mjbatch_jax._extension import ext
from mjbatch_jax.layout import StateLayout

# A compiled model keeps its assets' absolute file paths (and a buffer size that counts them):
# the same robot loaded from another folder, on another host or checkout, is the same model.
_WHERE_LOADED = re.compile(r"paths|npaths|nbuffer|.*_pathadr")


def model_digest(model: mujoco.MjModel) -> str:
  """sha256 of every field of the model (arrays, sizes, names, options) but where its asset files
  were loaded from: equal digests, equal simulations, wherever the files are.

  Raises:
    ValueError: model is not a mujoco.MjModel (the walk over fields would hash any object).
    TypeError: the model has a field of a type this MuJoCo's bindings did not have (a newer
      MuJoCo): refused rather than left out of the digest.

  Example:
    mjbatch_jax.distributed.model_digest(mujoco.MjModel.from_xml_path("scene.xml"))[:12]
  """
  if not isinstance(model, mujoco.MjModel):
    raise ValueError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
  digest = hashlib.sha256()
  _hash_fields(digest, model)
  return digest.hexdigest()


def _hash_fields(digest: Any, struct: Any, prefix: str = "") -> None:
  """Feeds digest every public field of a MuJoCo struct (nested ones too), sorted by name."""
  for name in sorted(dir(struct)):
    if name.startswith("_") or _WHERE_LOADED.fullmatch(name):
      continue
    value, key = getattr(struct, name), prefix + name
    if isinstance(value, np.ndarray):
      digest.update(f"{key} {value.dtype.str} {value.shape}\n".encode())
      digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, bytes):
      digest.update(f"{key} bytes {len(value)}\n".encode() + value)
    elif isinstance(value, bool | int | float | str):
      digest.update(f"{key} {value!r}\n".encode())
    elif type(value).__module__.startswith("mujoco") and not callable(value):
      _hash_fields(digest, value, key + ".")  # opt, vis, stat and vis's groups
    elif not callable(value):
      raise TypeError(f"model_digest cannot hash the model's {key} ({type(value).__name__})")


class EngineHandle:
  """One ownership of a C++ engine, given up on `close()` or when the last reference goes.

  A Simulator holds one, and so do the Params it makes: params keep their engine usable until an
  explicit close, whatever happened to the Simulator object. SimSpecs refer to it weakly, since
  JAX keeps the specs it traced with in its caches, which must not keep engines open.
  """

  def __init__(self, model: mujoco.MjModel, num_threads: int):
    self.id = ext.open_engine(model._address, num_threads)
    _programs.opened(self.id)
    self._lock = threading.Lock()
    self._open = True
    self.pid = os.getpid()
    self._model = model
    self._digest: str | None = None
    # The Simulator's SimSpec without fields, from which loaded Params rebuild theirs.
    self.base_spec: SimSpec | None = None
    _HANDLES.add(self)

  @property
  def digest(self) -> str:
    """model_digest of the engine's model, computed once."""
    if self._digest is None:
      self._digest = model_digest(self._model)
    return self._digest

  @property
  def closed(self) -> bool:
    return not self._open

  def check_process(self) -> None:
    """ValueError in a process forked after the engine was made: its threads are not here."""
    if self.pid != os.getpid():
      raise ValueError(
        f"this Simulator (engine {self.id}) was made in process {self.pid} before it forked this"
        f" one ({os.getpid()}), and its worker threads do not exist here: make a new Simulator"
        " in this process, or start workers with multiprocessing's 'spawn' or 'forkserver'"
        " method"
      )

  def close(self, release: bool = True) -> None:
    """Give up this ownership; the last one frees the engine, and then its JAX programs are
    released with those of other engines closed for good (see _programs) when release."""
    with self._lock:
      if not self._open:
        return
      self._open = False
      ext.close_engine(self.id)
      if self.pid == os.getpid() and not ext.engine_open(self.id):
        _programs.closed(self.id)
    if release:
      _programs.release_if_due()

  def __del__(self) -> None:
    # During interpreter shutdown ext may already be gone; the engine goes with the process.
    # Not here the clearing of JAX's caches: a collection can run anywhere, inside JAX too.
    try:
      self.close(release=False)
    except Exception:
      pass


# Every EngineHandle alive in this process, for Params loaded from a pickle to find theirs.
_HANDLES: "weakref.WeakSet[EngineHandle]" = weakref.WeakSet()


@dataclasses.dataclass(frozen=True)
class ModelInfo:
  """What the pure functions need to know of a model beyond its sizes, fixed at trace time.

  Compared by identity only through its SimSpec's engine id, which stands for the model's bytes.
  """

  model: mujoco.MjModel  # the simulator's copy; never written
  layout: StateLayout
  nv: int
  na: int
  integrator: int
  ctrlrange: tuple[tuple[float, float], ...]
  ctrllimited: tuple[bool, ...]
  # The constraint solver starts from the row's warm start (not disabled), and the model can
  # have constraint rows (simulator._may_have_constraints): derivatives perturb the warm start
  # when both hold (mjbatch_jax._rules).
  warmstart: bool = True
  constraints: bool = True


@dataclasses.dataclass(frozen=True)
class SimSpec:
  """What the pure functions need to know of a simulator, fixed at trace time.

  Hashable, so it is the static part of a Params pytree and jit retraces only when it changes.
  Simulators of identical models (and thread counts) share an engine id and so compare equal:
  a function jitted for one serves them all without compiling again.
  """

  engine: int  # the C++ engine's registry id
  nstate: int
  nu: int
  nsensordata: int
  fields: tuple[str, ...] = ()
  shapes: tuple[tuple[int, ...], ...] = ()  # of one simulation's values of each field
  # Per field: whether its leaf is shared by all simulations (no leading dimensions), and the
  # rows of the field (first axis: bodies, geoms, ...) its leaf holds, None for all of them;
  # rows not selected keep the model's values.
  shared: tuple[bool, ...] = ()
  select: tuple[tuple[int, ...] | None, ...] = ()
  # Recompute each simulation's derived constants (mj_setConst) from its params in every call.
  set_const: bool = False
  info: ModelInfo | None = dataclasses.field(default=None, compare=False, repr=False)
  # A weakref.ref to the EngineHandle of the Simulator that made the spec.
  handle: Any = dataclasses.field(default=None, compare=False, repr=False)

  def with_fields(
    self, fields: tuple[str, ...], shapes: tuple[tuple[int, ...], ...],
    shared: tuple[bool, ...] | None = None,
    select: tuple[tuple[int, ...] | None, ...] | None = None,
    set_const: bool = False,
  ) -> "SimSpec":
    return dataclasses.replace(
      self, fields=fields, shapes=shapes,
      shared=shared if shared is not None else (False,) * len(fields),
      select=select if select is not None else (None,) * len(fields),
      set_const=set_const,
    )

  def is_shared(self, i: int) -> bool:
    return bool(self.shared[i]) if i < len(self.shared) else False

  def selection(self, i: int) -> tuple[int, ...] | None:
    return self.select[i] if i < len(self.select) else None

  def leaf_shape(self, i: int) -> tuple[int, ...]:
    """Shape of one simulation's leaf of field i: its selected rows only."""
    shape, rows = self.shapes[i], self.selection(i)
    return shape if rows is None else (len(rows), *shape[1:])

  @property
  def param_columns(self) -> tuple[int, ...]:
    """Positions, among the params side by side, of the entries that the leaves hold: the
    columns a derivative w.r.t. the params pays for."""
    columns: list[int] = []
    offset = 0
    for i, shape in enumerate(self.shapes):
      size = int(np.prod(shape))
      rows = self.selection(i)
      if rows is None:
        columns.extend(range(offset, offset + size))
      else:
        inner = int(np.prod(shape[1:]))
        for row in rows:
          columns.extend(range(offset + row * inner, offset + (row + 1) * inner))
      offset += size
    return tuple(columns)

  @property
  def width(self) -> int:
    """Params values per simulation: the fields side by side."""
    return sum(int(np.prod(s)) for s in self.shapes)

  @property
  def attribute(self) -> str:
    """The fields as the FFI handlers take them: "name:size,name:size"."""
    return ",".join(f"{n}:{int(np.prod(s))}" for n, s in zip(self.fields, self.shapes, strict=True))

  @property
  def model_info(self) -> ModelInfo:
    assert self.info is not None, "a SimSpec made by a Simulator carries its ModelInfo"
    return self.info

  @property
  def closed(self) -> bool:
    """Whether the engine was given up: closed explicitly, or nothing holds it any more."""
    if self.handle is None:
      return False
    handle = self.handle()
    return handle is None or handle.closed


@jax.tree_util.register_pytree_node_class
class Params(Mapping):
  """Per-simulation values of model fields, a pytree whose leaves are (N, ...) arrays.

  Made by `Simulator.params`. Its leaves are what jax.grad and friends differentiate; its static
  part names the simulator, so `step(state, ctrl, params)` needs nothing else. Params keep their
  simulator's engine usable until `Simulator.close()`.

    params = sim.params(256, fields=("body_mass", "opt.gravity"))
    heavier = params.replace({"body_mass": params["body_mass"] * 1.1})

  Params pickle and copy: a pickle names the model by its digest, and loads in any process with
  an open Simulator of the same model (`pickle.loads(blob)` after `Simulator(model)`).
  """

  def __init__(self, spec: SimSpec, values: tuple[Any, ...], owner: EngineHandle | None = None):
    """Wraps leaves and their static part; users get Params from `Simulator.params` instead.

    Args:
      spec: the static part: the simulator's SimSpec with the fields, their shapes and which
        are shared.
      values: the leaves, one array per field of spec.fields, in that order.
      owner: the EngineHandle to keep the engine open with; None (default): spec's own handle,
        if it still lives.
    """
    self._spec = spec
    self._values = tuple(values)
    # The engine stays open while these params (or copies made by replace) live.
    self._owner = owner if owner is not None else (spec.handle() if spec.handle else None)

  @property
  def spec(self) -> SimSpec:
    """The static part: which simulator, fields and shapes these leaves are for."""
    return self._spec

  def __getitem__(self, name: str) -> Any:
    try:
      return self._values[self._spec.fields.index(name)]
    except ValueError:
      raise KeyError(f"{name!r} is not among these params' fields {self._spec.fields}") from None

  def __iter__(self) -> Iterator[str]:
    return iter(self._spec.fields)

  def __len__(self) -> int:
    return len(self._values)

  def replace(self, values: Mapping[str, Any]) -> "Params":
    """A copy with the given fields' values replaced; names must be among the fields."""
    new = list(self._values)
    for name, value in values.items():
      if name not in self._spec.fields:
        raise KeyError(f"{name!r} is not among these params' fields {self._spec.fields}")
      new[self._spec.fields.index(name)] = value
    return Params(self._spec, tuple(new), self._owner)

  def __repr__(self) -> str:
    shapes = dict(zip(self._spec.fields, (getattr(v, "shape", None) for v in self._values),
                      strict=True))
    return f"Params(engine={self._spec.engine}, {shapes})"

  # Checkpoints: pickle (and copy) keep the leaves and what the spec says of them, and name the
  # model by its digest, not by the engine id of this process. Loading them needs an open
  # Simulator of the same model in the loading process, whose engine the loaded params use.
  def __reduce__(self) -> tuple:
    spec = self._spec
    handle = self._owner if self._owner is not None else (spec.handle() if spec.handle else None)
    if handle is None:
      raise ValueError(f"these params' Simulator (engine {spec.engine}) is gone: nothing to pickle"
                       " them against")
    layout = (spec.fields, spec.shapes, spec.shared, spec.select, spec.set_const)
    return (_load_params, (handle.digest, spec.nstate, layout, self._values))

  def __copy__(self) -> "Params":
    return Params(self._spec, self._values, self._owner)

  def __deepcopy__(self, memo: dict) -> "Params":
    return Params(self._spec, copy.deepcopy(self._values, memo), self._owner)

  def tree_flatten(self) -> tuple[tuple[Any, ...], SimSpec]:
    return self._values, self._spec

  @classmethod
  def tree_unflatten(cls, spec: SimSpec, values: Any) -> "Params":
    return cls(spec, tuple(values))


def _load_params(digest: str, nstate: int, layout: tuple, values: tuple) -> Params:
  """Params unpickled: bound to an open Simulator of the same model in this process."""
  for handle in list(_HANDLES):
    if handle.closed or handle.pid != os.getpid() or handle.base_spec is None:
      continue
    if handle.digest == digest and handle.base_spec.nstate == nstate:
      fields, shapes, shared, select, set_const = layout
      spec = handle.base_spec.with_fields(fields, shapes, shared, select, set_const)
      return Params(spec, values, handle)
  raise ValueError(
    f"these params are of a model (sha256 {digest[:12]}...) that no open Simulator of this"
    " process has: make mjbatch_jax.Simulator(model) of that model first, then load them"
  )
