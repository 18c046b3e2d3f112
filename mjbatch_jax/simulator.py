"""The owner of an engine: a copy of the model and the state and params it starts from."""

import copy
import os
import weakref
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjbatch_jax import _checks, _programs
from mjbatch_jax._extension import ext
from mjbatch_jax.layout import StateLayout
from mjbatch_jax.names import Names
from mjbatch_jax.params import EngineHandle, ModelInfo, Params, SimSpec

# Threads per batch beyond which a request is a mistake: each batch starts that many threads.
MAX_THREADS = min(int(ext.MAX_THREADS), 4 * (os.cpu_count() or 1))


def _float_dtype() -> np.dtype:
  """float64 when jax_enable_x64 is on, else float32: what jnp makes of a Python float."""
  return np.dtype(jnp.result_type(float))


def _may_have_constraints(model: mujoco.MjModel) -> bool:
  """Whether a step of the model can have constraint rows: constraints not disabled, and an
  equality, a limit, friction loss or a possible contact (parent-child filtering not applied)."""
  disabled = int(model.opt.disableflags)
  bits = mujoco.mjtDisableBit
  if disabled & bits.mjDSBL_CONSTRAINT:
    return False
  if model.neq or model.nflex or model.npair:
    return True
  if not disabled & bits.mjDSBL_LIMIT and (model.jnt_limited.any() or model.tendon_limited.any()):
    return True
  if not disabled & bits.mjDSBL_FRICTIONLOSS and (model.dof_frictionloss.any()
                                                   or model.tendon_frictionloss.any()):
    return True
  if disabled & bits.mjDSBL_CONTACT:
    return False
  # Geoms i and j of different bodies can collide when contype_i & conaffinity_j shares a bit:
  # per bit, when some geom with it in contype and some with it in conaffinity are not all of
  # one body. Per bit rather than per pair, so a model of many geoms needs no ngeom^2 array.
  bodies = model.geom_bodyid
  contype = model.geom_contype.astype(np.uint32)
  conaffinity = model.geom_conaffinity.astype(np.uint32)
  for bit in range(32):
    mask = np.uint32(1) << np.uint32(bit)
    senders, receivers = bodies[(contype & mask) != 0], bodies[(conaffinity & mask) != 0]
    if len(senders) and len(receivers) and len(np.union1d(senders, receivers)) > 1:
      return True
  return False


class Simulator:
  """Simulations of one model for the pure JAX functions (`step`, `rollout`, `forward`).

  Copies the model and owns a C++ engine of MuJoCo batches on num_threads threads (0: one per
  logical CPU, at most 4 per CPU). Calls reach the engine by id, so a jitted function that
  outlives `close()` raises a clear error instead of touching freed memory. Simulators of
  identical models and thread counts share one engine (it keeps no state between calls), so a
  function jitted for one runs for all of them without compiling again. Params and states made
  here keep the engine usable until `close()`.

  Concurrent calls (Python threads, shard_map devices) each lease a batch with its own threads;
  an engine holds at most max(2, cpu_count // num_threads) batches, so together they use at most
  about twice the machine's threads, and a call beyond that waits for a free batch.

    with mjbatch_jax.Simulator(model) as sim:
      state = sim.init_state(1024)
      params = sim.params(1024, fields=("body_mass",))
      state = jax.jit(mjbatch_jax.step)(state, ctrl, params)
  """

  def __init__(self, model: mujoco.MjModel, num_threads: int = 0):
    if not isinstance(model, mujoco.MjModel):
      raise ValueError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
    if (
      not isinstance(num_threads, (int, np.integer))
      or isinstance(num_threads, bool)
      or not 0 <= num_threads <= MAX_THREADS
    ):
      raise ValueError(
        f"num_threads must be an int in [0, {MAX_THREADS}] (0: one per CPU; at most 4 per CPU),"
        f" got {num_threads!r}"
      )
    _programs.release_if_due()  # programs of engines closed for good, before new ones come
    self._model = copy.copy(model)
    self._requested_threads = int(num_threads)
    self._handle = EngineHandle(self._model, self._requested_threads)
    self._id = self._handle.id
    self._layout = StateLayout.of(self._model)
    info = ModelInfo(
      model=self._model,
      layout=self._layout,
      nv=model.nv,
      na=model.na,
      integrator=int(model.opt.integrator),
      ctrlrange=tuple((float(lo), float(hi)) for lo, hi in model.actuator_ctrlrange),
      ctrllimited=tuple(bool(x) for x in model.actuator_ctrllimited),
      warmstart=not model.opt.disableflags & (mujoco.mjtDisableBit.mjDSBL_WARMSTART
                                              | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT),
      constraints=_may_have_constraints(model),
    )
    self._spec = SimSpec(
      engine=self._id,
      nstate=self._layout.size,
      nu=self._model.nu,
      nsensordata=self._model.nsensordata,
      info=info,
      handle=weakref.ref(self._handle),
    )
    self._handle.base_spec = self._spec
    self._data: mujoco.MjData | None = None
    self._names: Names | None = None

  @property
  def model(self) -> mujoco.MjModel:
    """The simulator's copy of the model; edits to it do not reach the simulations."""
    return self._model

  @property
  def nstate(self) -> int:
    return self._layout.size

  @property
  def nu(self) -> int:
    return self._model.nu

  @property
  def nsensordata(self) -> int:
    return self._model.nsensordata

  @property
  def num_threads(self) -> int:
    """Threads of each batch, the caller's included; a call uses at most one per simulation."""
    return self._requested_threads or (os.cpu_count() or 1)

  @property
  def layout(self) -> StateLayout:
    return self._layout

  @property
  def spec(self) -> SimSpec:
    return self._spec

  @property
  def closed(self) -> bool:
    return self._handle.closed

  def close(self) -> None:
    """Give up the engine (freed once no other open Simulator shares it); idempotent.

    Later calls with its params raise ValueError; a function jitted with it raises when called,
    unless another open Simulator of the same model keeps the shared engine alive.
    """
    self._handle.close()

  def __reduce__(self) -> tuple:
    raise TypeError(
      "a Simulator cannot be pickled or copied (it owns threads and engines of this process):"
      " pickle its params and states, and make a Simulator of the same model where you load"
      " them (Params and env States find it by the model's digest)"
    )

  def __enter__(self) -> "Simulator":
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def _check_open(self) -> None:
    self._handle.check_process()
    if self.closed:
      raise ValueError("this Simulator is closed")

  def _template(self) -> mujoco.MjData:
    if self._data is None:
      self._data = mujoco.MjData(self._model)
    return self._data

  def init_state(self, num_sims: int, keyframe: int | str | None = None) -> jax.Array:
    """(num_sims, nstate) rows of the model's initial state, or of a keyframe (index or name).

    As mj_resetData / mj_resetDataKeyframe followed by mj_getState(mjSTATE_INTEGRATION).
    """
    self._check_open()
    _check_count(num_sims)
    data = self._template()
    if keyframe is None:
      mujoco.mj_resetData(self._model, data)
    else:
      if isinstance(keyframe, str):
        key = mujoco.mj_name2id(self._model, mujoco.mjtObj.mjOBJ_KEY, keyframe)
        if key < 0:
          raise ValueError(f"no keyframe named {keyframe!r}")
      elif (isinstance(keyframe, (int, np.integer)) and not isinstance(keyframe, bool)
            and 0 <= keyframe < self._model.nkey):
        key = int(keyframe)
      else:
        raise ValueError(
          f"keyframe must be None, a keyframe's name or an int in [0, {self._model.nkey}), got"
          f" {keyframe!r}"
        )
      mujoco.mj_resetDataKeyframe(self._model, data, key)
    row = np.empty(self.nstate)
    mujoco.mj_getState(self._model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
    return jnp.asarray(np.broadcast_to(row, (num_sims, self.nstate)), dtype=_float_dtype())

  def params(
    self,
    num_sims: int,
    fields: Sequence[str] = (),
    shared: Sequence[str] = (),
    select: Mapping[str, Sequence[int | str]] | None = None,
    set_const: bool = False,
  ) -> Params:
    """Model fields as a Params pytree of leaves seeded from the model.

    Fields are floating-point mjModel arrays ("body_mass", "geom_friction", "dof_damping") or
    mjOption fields ("opt.gravity", "opt.timestep"). Derived constants (mj_setConst) are not
    recomputed: a field is used as given, as a copy of the model with that field changed would.

    Args:
      num_sims: simulations of the per-simulation leaves: (num_sims, *shape).
      fields: the fields.
      shared: those of fields whose one value serves every simulation: a leaf without leading
        dimensions, broadcast inside the call; its gradient sums over the simulations.
      select: for some fields, the rows (first axis: body, geom, dof, actuator ... ids, or
        names; joint names for dof_* fields and qpos0 / qpos_spring, a joint standing for its
        dofs or qpos entries) that the leaf holds; the other rows keep the model's values, and
        derivatives pay columns only for the selected entries.
      set_const: recompute each simulation's derived constants (mj_setConst: joint-space
        inertias, actuator lengths and moments at qpos0, ...) from its params in every call, so
        a simulation equals a model compiled with those values. Needed when a field feeds them
        (body_mass, body_inertia, body_pos, geom sizes, actuator_gear, ...); it costs one
        mj_setConst per simulation and call (benchmarks/set_const.py measures it).

    Example:
      params = sim.params(1024, ("geom_friction", "body_mass", "opt.gravity"),
                          shared=("opt.gravity",), select={"body_mass": ["trunk"]})
      params["body_mass"].shape  # (1024, 1)
    """
    self._check_open()
    _check_count(num_sims)
    names = _names("fields", fields)
    shared_names = set(_names("shared", shared))
    select = dict(select or {})
    for kind, given in (("shared", shared_names), ("select", set(select))):
      unknown = sorted(given - set(names))
      if unknown:
        raise ValueError(f"{kind} names fields that are not among fields {names}: {unknown}")
    values, shapes, is_shared, rows_of = [], [], [], []
    for name in names:
      size = ext.param_size(self._id, name)  # ValueError naming the field if it cannot vary
      value = _checks.model_value(self._model, name)
      if value.size != size:
        raise ValueError(f"{name!r} holds {size} values per simulation, the model {value.size}")
      rows = self._rows(name, value, select[name]) if name in select else None
      leaf = value if rows is None else value[np.asarray(rows, dtype=np.int64)]
      if name not in shared_names:
        leaf = np.broadcast_to(leaf, (num_sims, *leaf.shape))
      shapes.append(value.shape)
      is_shared.append(name in shared_names)
      rows_of.append(rows)
      values.append(jnp.asarray(leaf, dtype=_float_dtype()))
    if not isinstance(set_const, (bool, np.bool_)):
      raise ValueError(f"set_const must be a bool, got {set_const!r}")
    spec = self._spec.with_fields(names, tuple(shapes), tuple(is_shared), tuple(rows_of),
                                  bool(set_const))
    return Params(spec, tuple(values), self._handle)

  def _rows(self, field: str, value: np.ndarray, chosen: Sequence[int | str]) -> tuple[int, ...]:
    """The rows of field that chosen names (ids, names of the field's objects, or joint names
    for per-dof and per-qpos fields), checked."""
    if field.startswith("opt.") or value.ndim == 0:
      raise ValueError(f"select applies to per-object fields, not {field!r}")
    if isinstance(chosen, (str, int, np.integer)):
      chosen = [chosen]
    rows = []
    for item in chosen:
      if isinstance(item, str):
        rows.extend(self._named_rows(field, value, item))
        continue
      if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        row = int(item)
      else:
        raise ValueError(f"select entries are ids or names, got {item!r}")
      if not 0 <= row < value.shape[0]:
        raise ValueError(f"{field!r} has rows 0..{value.shape[0] - 1}, got {row}")
      rows.append(row)
    if not rows:
      raise ValueError(
        f"select of {field!r} is empty: name at least one row, or leave {field!r} out of select"
        " (all its rows) or out of fields (the model's values)"
      )
    if len(set(rows)) != len(rows):
      raise ValueError(f"select of {field!r} names a row twice: {rows}")
    return tuple(rows)

  def _named_rows(self, field: str, value: np.ndarray, name: str) -> list[int]:
    """The rows of field that an object's name stands for: one, or a joint's dofs or qpos."""
    model = self._model
    kind = next((k for p, k in _OBJECT_OF_PREFIX if field.startswith(p)), None)
    if kind is not None:
      return [self.names.id(kind, name)]  # ValueError with a did-you-mean hint
    per_dof = field.startswith("dof_") and value.shape[0] == model.nv
    per_qpos = field in _QPOS_FIELDS and value.shape[0] == model.nq
    if per_dof or per_qpos:
      joint = self.names.joint(name)  # ValueError with a did-you-mean hint
      span = joint.dof_index if per_dof else joint.qpos_index
      return list(range(span.start, span.stop))
    raise ValueError(f"rows of {field!r} are chosen by id; it has no named objects")

  @property
  def names(self) -> Names:
    """Names of the model's objects as indices and slices, usable under jit (see Names)."""
    if self._names is None:
      self._names = Names.of(self._model)
    return self._names

  def forward_shape(self, name: str) -> tuple[int, ...]:
    """Shape of one simulation's values of an mjData field that `forward` can return."""
    self._check_open()
    return _checks.forward_shape(self._spec, name)


# Fields of each object kind, by prefix, for select's names.
_OBJECT_OF_PREFIX = (
  ("body_", "body"), ("jnt_", "joint"), ("geom_", "geom"), ("site_", "site"),
  ("cam_", "camera"), ("light_", "light"), ("actuator_", "actuator"), ("tendon_", "tendon"),
  ("sensor_", "sensor"), ("eq_", "equality"), ("pair_", "pair"), ("mat_", "material"),
)


# Model fields with one row per qpos entry, whose rows select takes by joint name.
_QPOS_FIELDS = ("qpos0", "qpos_spring")


def _names(what: str, names: Sequence[str]) -> tuple[str, ...]:
  if isinstance(names, str):
    raise ValueError(f"{what} must be a sequence of names, got the string {names!r}")
  out = tuple(names)
  for name in out:
    if not isinstance(name, str):
      raise ValueError(f"{what} names must be strings, got {name!r}")
  if len(set(out)) != len(out):
    raise ValueError(f"{what} must be unique, got {out}")
  return out


def _check_count(num_sims: int) -> None:
  if not isinstance(num_sims, (int, np.integer)) or isinstance(num_sims, bool) or num_sims < 1:
    raise ValueError(f"num_sims must be an int >= 1, got {num_sims!r}")
