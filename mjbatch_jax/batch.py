"""The stateful numpy front end: mjbatch 0.1.x's `Batch`, over MuJoCo's own batch engine.

Scripts written for the mjbatch library run unchanged after `from mjbatch_jax import Batch`. The
physics, threads and per-simulation fields are `mujoco.batch.Batch`'s; this module adds what
mjbatch promised on top of it: float32 and MjData-dtype bindings that are change-tracked copies,
resets that keep pending writes, step histories with mj_step's auto-reset, caller-allocated ray
and Jacobian queries, a lock per batch, errors that name the simulation, and checks that keep a
bad argument or a bad per-simulation value from reaching MuJoCo. It uses only mujoco.batch's
public API, checked at import.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np
import numpy.typing as npt

from mjbatch_jax.errors import SimulationError
from mjbatch_jax.names import DOF_WIDTH, QPOS_WIDTH, did_you_mean

try:
  import mujoco.batch as _mjb
except ImportError as e:
  raise ImportError(
    f"mjbatch_jax.Batch runs on mujoco.batch, which MuJoCo {mujoco.__version__} does not have;"
    " install mujoco-core==4.0.0"
  ) from e

# mujoco's compiled modules ship no type stubs
_mj: Any = mujoco

_NUM = np.dtype(mujoco.MJTNUM_DTYPE)
_STAGE_NONE = int(_mj.mjtStage.mjSTAGE_NONE)
_STAGE_ACC = int(_mj.mjtStage.mjSTAGE_ACC)
_STATE_SPEC = int(_mj.mjtState.mjSTATE_INTEGRATION)
_CTRL_SPEC = int(_mj.mjtState.mjSTATE_CTRL)
# the row components before the history buffers, whose ring-buffer cursors are checked
_BEFORE_HISTORY = int(
  _mj.mjtState.mjSTATE_TIME
  | _mj.mjtState.mjSTATE_QPOS
  | _mj.mjtState.mjSTATE_QVEL
  | _mj.mjtState.mjSTATE_ACT
)
# enable bits whose bookkeeping lies outside the state rows
_NONPURE_BITS = int(_mj.mjtEnableBit.mjENBL_SLEEP) | int(_mj.mjtEnableBit.mjENBL_IPC)
_INT32_MAX = 2**31 - 1
# Each thread of a batch is an OS thread with its own MjData, so a typo such as
# num_threads=100000 would allocate gigabytes before anything ran; more than a few threads per
# CPU never runs faster.
_MAX_THREADS = min(1024, 4 * (os.cpu_count() or 1))


def _check_mujoco_batch() -> None:
  """Fail at import, naming the MuJoCo version, if mujoco.batch lacks the public API we call."""
  methods = ("bind", "expand", "step", "forward", "reset", "set_const", "rollout", "ray", "jac")
  missing = [f"Batch.{m}" for m in (*methods, "error") if not callable(getattr(_mjb.Batch, m, 0))]
  missing += [f"Batch.{p}" for p in ("nstate", "nthread") if not hasattr(_mjb.Batch, p)]
  missing += [n for n in ("DATA_FIELDS", "MODEL_FIELDS", "SimulationError") if not hasattr(_mjb, n)]
  if missing:
    raise ImportError(
      f"mjbatch_jax.Batch needs mujoco.batch's {', '.join(missing)}, which MuJoCo "
      f"{mujoco.__version__} does not have; install mujoco-core==4.0.0"
    )


_check_mujoco_batch()

# MjData's dtype of eq_active, which the rows hold as mjtNum; the same for every model
_EQ_ACTIVE_DTYPE = _mj.MjData(_mj.MjModel.from_xml_string("<mujoco/>")).eq_active.dtype


# ------------------------------------------------------------------ expandable integer fields


@dataclass(frozen=True)
class _Allowed:
  """The values an integer parameter may take: one of `values`, or a range [lo, hi]."""

  values: tuple[int, ...] = ()
  lo: int = -(2**31)
  hi: int = _INT32_MAX
  what: str = ""

  def bad(self, a: np.ndarray) -> np.ndarray:
    if self.values:
      return ~np.isin(a, self.values)
    return (a < self.lo) | (a > self.hi)

  def describe(self) -> str:
    if self.values:
      return f"one of {list(self.values)}" + (f" ({self.what})" if self.what else "")
    return f"in [{self.lo}, {self.hi}]" + (f" ({self.what})" if self.what else "")


def _enum(enum: Any) -> _Allowed:
  members = {k: int(v) for k, v in enum.__members__.items() if not k.startswith("mjN")}
  return _Allowed(tuple(sorted(set(members.values()))), what=enum.__name__)


def _flag_bits(enum: Any) -> _Allowed:
  mask = 0
  for k, v in enum.__members__.items():
    if not k.startswith("mjN"):
      mask |= int(v)
  return _Allowed(lo=0, hi=mask, what=f"{enum.__name__} bits")


_ANY = _Allowed()
_CONDIM = _Allowed((1, 3, 4, 6), what="contact dimensionality")
_COUNT = _Allowed(lo=0)

# The integer (and bool) MjModel and MjOption fields that expand() accepts, and the values each
# may take, checked before every call that runs MuJoCo on the simulations of the call.
#
# The rule: a float field is a parameter, and expandable; a bad float gives wrong physics or a
# MuJoCo warning, never a read out of bounds. An integer field is structural unless listed
# here: ids and indices into other arrays (*id, *_obj*, *_matid, *_dataid, pair_geom1/2),
# addresses and counts (*adr, *num, *_rownnz, *_colind, B_*, D_*, M_*, map*), types and modes
# (*type, *_mode, actuator_dyntype/gaintype/biastype, cam_projection, flex_selfcollide, ...),
# and sizes that MjData was allocated with (actuator_history, sensor_history, sensor_intprm,
# cam_resolution, ...). MuJoCo reads such a field as an index, or switches on it to choose
# which arrays to read, so one simulation's wrong value reads or writes out of bounds; and no
# model compiled from one spec differs in them anyway. The listed integers only select among
# MuJoCo's own branches, count iterations, or filter collisions:
_INT_PARAMS: dict[str, _Allowed] = {
  # enums, each in its range (MuJoCo raises for some bad values, ignores others)
  "opt.integrator": _enum(_mj.mjtIntegrator),
  "opt.cone": _enum(_mj.mjtCone),
  "opt.solver": _enum(_mj.mjtSolver),
  "opt.jacobian": _enum(_mj.mjtJacobian),
  "opt.enableflags": _flag_bits(_mj.mjtEnableBit),
  "opt.disableflags": _flag_bits(_mj.mjtDisableBit),
  "opt.disableactuator": _ANY,  # bits by actuator group; groups outside [0, 30] never match
  # iteration counts; huge ones only take long...
  "opt.iterations": _COUNT,
  "opt.ls_iterations": _COUNT,
  "opt.noslip_iterations": _COUNT,
  "opt.sdf_iterations": _COUNT,
  "opt.sdf_initpoints": _COUNT,
  # ...but for the convex collider's, whose buffer size MuJoCo 4.0 computes in an int: beyond
  # about 4.5 million it wraps around to a small buffer that the collider then overruns
  "opt.ccd_iterations": _Allowed(lo=0, hi=1_000_000),
  "geom_condim": _CONDIM,
  "pair_dim": _CONDIM,
  "flex_condim": _CONDIM,
  # collision filter bit masks and priorities: any value only changes which pairs collide
  "geom_contype": _ANY,
  "geom_conaffinity": _ANY,
  "body_contype": _ANY,
  "body_conaffinity": _ANY,
  "flex_contype": _ANY,
  "flex_conaffinity": _ANY,
  "geom_priority": _ANY,
  "flex_priority": _ANY,
  # groups: MuJoCo clamps a group into [0, mjNGROUP) or range-checks it before indexing
  "actuator_group": _ANY,
  "geom_group": _ANY,
  "jnt_group": _ANY,
  "site_group": _ANY,
  "tendon_group": _ANY,
  "flex_group": _ANY,
  # flags (numpy bools, so 0 or 1)
  "actuator_ctrllimited": _ANY,
  "actuator_forcelimited": _ANY,
  "actuator_actlimited": _ANY,
  "actuator_actearly": _ANY,
  "jnt_limited": _ANY,
  "jnt_actfrclimited": _ANY,
  "jnt_actgravcomp": _ANY,
  "tendon_limited": _ANY,
  "tendon_actfrclimited": _ANY,
  "eq_active0": _ANY,
  "geom_castshadow": _ANY,
  "light_active": _ANY,
  "light_castshadow": _ANY,
  "mat_texuniform": _ANY,
}



@dataclass(frozen=True)
class _TypeAtUse:
  """A type field that MuJoCo checks where it reads it, per entry against the model's type.

  A value outside the enum makes MuJoCo raise an error in the simulation that has it (which
  then names that simulation, as mjbatch does); so does the model's own value no harm. Another
  valid type would make MuJoCo read the entry's object ids as ids of another kind of object
  (a joint id as a body id), out of bounds: refused, but for types that read the same kinds of
  objects (`swaps`).
  """

  model: np.ndarray  # the model's values, one per entry
  valid: tuple[int, ...]
  swaps: tuple[frozenset[int], ...] = ()
  what: str = ""

  def bad(self, a: np.ndarray) -> np.ndarray:
    model = np.broadcast_to(self.model, a.shape)
    ok = (a == model) | ~np.isin(a, self.valid)
    for group in self.swaps:
      members = tuple(group)
      ok |= np.isin(a, members) & np.isin(model, members)
    return ~ok

  def describe(self) -> str:
    return (f"the model's {self.what} for that entry, one it may swap with, or a value outside"
            f" {self.what} (which MuJoCo refuses in that simulation when it meets it)")


def _eq_type(model: Any) -> _TypeAtUse:
  # MuJoCo (engine_core_constraint.c and the sleep and island code) switches on eq_type and
  # fails an unknown type with an error before reading anything by it; connect and weld both
  # read two bodies or two sites (eq_objtype) and eq_data, so either may stand for the other.
  eq = _mj.mjtEq
  return _TypeAtUse(
    model=np.array(model.eq_type, dtype=np.int64),
    valid=_enum(eq).values,
    swaps=(frozenset({int(eq.mjEQ_CONNECT), int(eq.mjEQ_WELD)}),),
    what="mjtEq",
  )


# Integer fields that are types, but which MuJoCo validates where it reads them (see
# _TypeAtUse): expandable, checked against the model's values before every call. The other type
# and mode fields (geom_type, jnt_type, sensor_type, actuator_trntype, ...) index tables or
# decide what an id refers to before any check, so they stay structural.
_TYPES_AT_USE: dict[str, Callable[[Any], _TypeAtUse]] = {"eq_type": _eq_type}


# ------------------------------------------------------------------------------ named views


@dataclass(frozen=True)
class Joint:
  """A joint's live (N, width) slices of qpos and qvel.

  Example:
    hinge = batch.joint("hinge")
    hinge.qpos[:, 0] = 0.1  # a write to every simulation's row
  """

  qpos: np.ndarray
  qvel: np.ndarray


@dataclass(frozen=True)
class Actuator:
  """An actuator's live (N,) slices of ctrl and actuator_force.

  Attributes:
    ctrl: (N,) the actuator's control in each simulation, an input: a write is applied at the
      simulation's next call.
    force: (N,) the actuator's actuator_force in each simulation, an output copied out after
      each call (so as of the last call).

  Example:
    batch.actuator("servo").ctrl[:] = 0.5
  """

  ctrl: np.ndarray
  force: np.ndarray


@dataclass(frozen=True)
class Body:
  """A body's live (N, ...) slices of xpos, xquat and cvel.

  Example:
    height = batch.body("torso").xpos[:, 2]
  """

  xpos: np.ndarray
  xquat: np.ndarray
  cvel: np.ndarray


@dataclass(frozen=True)
class Site:
  """A site's live (N, ...) slices of site_xpos and site_xmat.

  Attributes:
    xpos: (N, 3) the site's position in the world frame, per simulation.
    xmat: (N, 9) the site's orientation per simulation, a row-major 3 x 3 rotation matrix
      (its columns are the site's axes in the world frame), as MuJoCo's site_xmat.

  Example:
    tip = batch.site("tip").xpos  # (N, 3)
  """

  xpos: np.ndarray
  xmat: np.ndarray


def _bitwise(a: np.ndarray) -> np.ndarray:
  """a's elements as unsigned integers, so that comparisons are bitwise (NaN == NaN)."""
  return a.view(np.dtype(f"u{a.dtype.itemsize}"))


class _Copy:
  """A user-facing array in another dtype than the engine storage `src` it mirrors.

  Inputs push the elements the user changed since we last wrote them, so that untouched
  elements never round-trip through the narrower dtype and a state-row write made meanwhile is
  not overwritten by a stale copy. Outputs are only refreshed.
  """

  def __init__(self, src: np.ndarray, dtype: np.dtype, is_input: bool):
    self.src = src
    self.arr = src.astype(dtype)
    self.last = self.arr.copy() if is_input else None

  def push(self) -> None:
    if self.last is None:
      return
    changed = _bitwise(self.arr) != _bitwise(self.last)
    if changed.any():
      self.src[changed] = self.arr[changed]
      self.last[changed] = self.arr[changed]

  def refresh(self, sel: np.ndarray | None) -> None:
    if sel is None:
      np.copyto(self.arr, self.src, casting="unsafe")
      if self.last is not None:
        np.copyto(self.last, self.arr)
    elif len(sel):
      self.arr[sel] = self.src[sel]
      if self.last is not None:
        self.last[sel] = self.arr[sel]


def _ran(call: Callable[..., Any], *args: Any) -> bool:
  """Run a mujoco.batch call; whether a simulation raised (its status says which)."""
  try:
    call(*args)
  except _mjb.SimulationError:
    return True
  return False


class Batch:
  """num_sims simulations of one model, stepped on a thread pool: mjbatch 0.1.x's API.

  The engine is MuJoCo's `mujoco.batch.Batch`: each simulation is its mjSTATE_INTEGRATION row,
  loaded into a per-thread MjData for each call, so memory follows threads, not simulations,
  and results are bit-identical to a loop of mj_step over one MjData per simulation.

  Example:
    batch = Batch(mujoco.MjModel.from_xml_path("robot.xml"), num_sims=1024)
    qpos, ctrl = batch.bind("qpos"), batch.bind("ctrl")
    for _ in range(100):
      ctrl[:] = policy(qpos)
      batch.step(nstep=5)

  bind("state") is the (N, nstate) rows themselves. Native-dtype state fields (qpos, qvel,
  ctrl, mocap_pos, ...) are strided views of the rows: a write is the simulation's state at its
  next call. float32 bindings and eq_active (MjData's bool) are copies, written into the rows
  element by element where they changed since we last wrote them, before every call. Derived
  fields (xpos, sensordata, ...) are copied out after each call for the simulations of the call,
  one substep behind the state after step() as with mj_step, unless forward=True. expand()
  gives model and option parameters per-simulation values (structural integer fields, such as
  ids, addresses and types, cannot vary); set_const() makes the constants derived from them per
  simulation. reset() keeps the simulation's pending writes (row elements written since its last
  call) on top of the reset state. A MuJoCo error raises SimulationError naming the first
  failing simulation, which keeps its state and pending writes; the others ran.

  Every bad argument raises ValueError before anything runs, and so does a per-simulation value
  that MuJoCo would read out of bounds (an integer parameter outside its range, a history
  buffer's cursor in a written row). After close() every method raises ValueError.

  Calls on one Batch are serialized by a lock; the GIL is released during the physics, so
  several batches run at once. Writes to bound arrays from another thread while a call runs race
  with it, as writes to an MjData during mj_step would.
  """

  def __init__(
    self,
    model: mujoco.MjModel,  # pyright: ignore[reportAttributeAccessIssue]
    num_sims: int,
    num_threads: int = 0,
    forward: bool = False,
    persistent: bool = False,
  ) -> None:
    """Makes the engine: num_sims copies of the model's state, on a pool of threads.

    Args:
      model: the mujoco.MjModel to simulate; the batch keeps a reference (`batch.model`).
      num_sims: the number of simulations, an int in [1, 2**31 - 1].
      num_threads: the threads that run them, an int; 0 (default) one per CPU, at most 4 per
        CPU (and never more than num_sims).
      forward: if True, step() also runs mj_forward on each new state, so that derived fields
        (xpos, sensordata, ...) describe the state after the step rather than the one before
        its last substep.
      persistent: if True, keep one MjData per simulation instead of one per thread (memory
        then follows simulations), so that what the state rows do not hold survives between
        calls; models that enable sleep (or IPC) need it.

    Raises:
      ValueError: model is not an MjModel, num_sims or num_threads is out of range, or the
        model enables sleep (or IPC) without persistent=True.
    """
    if not isinstance(model, _mj.MjModel):
      raise ValueError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
    num_sims = _int_arg("num_sims", num_sims, 1, _INT32_MAX)
    num_threads = _int_arg(
      "num_threads", num_threads, 0, _MAX_THREADS, " (0: one per CPU; at most 4 per CPU)"
    )
    threads = num_threads or (os.cpu_count() or 1)
    try:
      self._mb = _mjb.Batch(model, num_sims, min(threads, num_sims), bool(persistent))
    except ValueError as e:
      if "sleep" in str(e):
        raise ValueError(
          f"the model enables sleep (or IPC), whose bookkeeping is not part of the state rows;"
          f" such models need Batch(..., persistent=True) ({e})"
        ) from e
      raise
    self.model = model
    self._n = num_sims
    self._nstate = self._mb.nstate
    self._nthread = self._mb.nthread
    self._persistent = bool(persistent)
    self._stage = _STAGE_ACC if forward else _STAGE_NONE
    self._lock = threading.Lock()
    self._closed = False
    self._status = self._mb.status
    self._state = self._mb.state
    self._bound: dict[str, tuple[np.dtype, np.ndarray]] = {}
    self._expanded: dict[str, tuple[np.dtype, np.ndarray]] = {}
    # copies of state rows and of expanded fields (inputs), and of derived fields (outputs)
    self._state_copies: list[_Copy] = []
    self._model_copies: list[_Copy] = []
    self._output_copies: list[_Copy] = []
    # the rows as of each simulation's last call, to tell which elements were written since;
    # made only once the rows can be written, by a state binding
    self._shadow: np.ndarray | None = None
    self._enableflags: np.ndarray | None = None
    # expanded integer parameters with a range, as (field, per-simulation values, range)
    self._ranged: list[tuple[str, np.ndarray, _Allowed | _TypeAtUse]] = []
    self._cursors = _history_cursors(model)
    self._const_everywhere = False
    self._pid = os.getpid()
    _LIVE.add(self)

  # ---------------------------------------------------------------------------- properties

  @property
  def num_sims(self) -> int:
    return self._n

  @property
  def num_threads(self) -> int:
    self._live()
    return self._nthread

  @property
  def nstate(self) -> int:
    """The length of a simulation's state row, mj_stateSize(model, mjSTATE_INTEGRATION)."""
    return self._nstate

  @property
  def persistent(self) -> bool:
    return self._persistent

  # ------------------------------------------------------------------------------ lifetime

  def close(self) -> None:
    """Free the engine; later calls raise ValueError, a second close() does nothing.

    Arrays already bound stay readable (they keep their memory alive).

    Example:
      with Batch(model, 64) as batch:
        batch.step()
    """
    with self._lock:
      if self._closed:
        return
      self._closed = True
      self._state_copies, self._model_copies, self._output_copies = [], [], []
      self._ranged = []
      del self._mb

  def __enter__(self) -> Batch:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()

  def _live(self) -> _mjb.Batch:
    if self._pid != os.getpid():
      raise ValueError(
        f"this Batch was made in process {self._pid} before it forked this one ({os.getpid()}),"
        " and its worker threads do not exist here: make a new Batch in this process, or start"
        " workers with multiprocessing's 'spawn' or 'forkserver' method"
      )
    if self._closed:
      raise ValueError("this Batch is closed")
    return self._mb

  # ----------------------------------------------------------------------- bind and expand

  def bind(self, name: str, dtype: npt.DTypeLike | None = None) -> np.ndarray:
    """Return a live (num_sims, ...) array over an MjData field, in MjData's shape and dtype.

    Args:
      name: an MjData field ("qpos", "xpos", "sensordata", ...), "state" for the rows, or
        "warning" for the (num_sims, mjNWARNING, 2) int32 counters.
      dtype: None or the field's own dtype, or float32 for a float64 field (a copy).

    Returns:
      The array; binding a field again returns the same array.

    Example:
      qpos = batch.bind("qpos")             # (num_sims, nq) float64, a view of the rows
      xpos = batch.bind("xpos", np.float32)  # (num_sims, nbody, 3), refreshed after each call
    """
    _check_name(name)
    want = _dtype_arg(dtype)
    with self._lock:
      mb = self._live()
      if name in self._bound:
        native, arr = self._bound[name]
        if (native if want is None else want) != arr.dtype:
          raise ValueError(f"{name} is already bound with another dtype ({arr.dtype})")
        return arr
      native, arr = self._bind_new(mb, name, want)
      self._bound[name] = (native, arr)
      return arr

  def _bind_new(
    self, mb: _mjb.Batch, name: str, want: np.dtype | None
  ) -> tuple[np.dtype, np.ndarray]:
    """The field's native dtype and the array to return for it."""
    if name == "state":
      if want is not None and want != _NUM:
        raise ValueError(f"state cannot be {want}: the rows are {_NUM}")
      self._ensure_shadow()
      return _NUM, self._state
    if name == "warning":
      if want is not None and want != np.int32:
        raise ValueError("warning binds as int32 only")
      return np.dtype(np.int32), mb.warning
    if name not in _mjb.DATA_FIELDS:
      raise _bind_error(name)
    src = mb.bind(name)
    # mujoco.batch gives state fields as views of the rows, and outputs as read-only copies
    if np.may_share_memory(src, self._state):
      self._ensure_shadow()
      # the rows hold eq_active as mjtNum; MjData, and so mjbatch, as bool
      native = _EQ_ACTIVE_DTYPE if name == "eq_active" else src.dtype
      dtype = native if want is None else want
      if dtype == src.dtype:
        return native, src
      if not (native == _NUM and dtype == np.float32) and dtype != native:
        raise ValueError(f"{name} cannot be {dtype}: bind it as {native}")
      copy = _Copy(src, dtype, is_input=True)
      self._state_copies.append(copy)
      return native, copy.arr
    # mjbatch's outputs are writable (a write is overwritten by the next call): a writable
    # view of the storage that mujoco.batch marks read-only
    out = src.view()
    out.flags.writeable = True
    if want is None or want == out.dtype:
      return out.dtype, out
    if not (out.dtype == _NUM and want == np.float32):
      raise ValueError(f"{name} cannot be {want}: bind it as {out.dtype}")
    copy = _Copy(out, want, is_input=False)
    self._output_copies.append(copy)
    return out.dtype, copy.arr

  def expand(self, name: str, dtype: npt.DTypeLike | None = None) -> np.ndarray:
    """Give a model or option parameter per-simulation values; return them, (num_sims, ...).

    Float fields and the integer parameters that only select among MuJoCo's branches (the
    integrator, solver, cone, iteration counts, enable and disable flags, condim, contype,
    conaffinity, priorities, groups, limited flags) are expandable; structural integer fields
    (ids, addresses, counts, types) are not, but for eq_type, which MuJoCo checks where it reads
    it: a value outside mjtEq makes MuJoCo fail that simulation (SimulationError naming it, the
    others run), while another valid type (which would read ids out of bounds) is refused.
    Integer parameters are checked against their range before every call.

    Args:
      name: an MjModel array ("body_mass", "geom_friction", ...) or an MjOption field, named
        as mjbatch does ("gravity", "timestep", "integrator") or as MuJoCo ("opt.gravity").
      dtype: None or the field's own dtype, or float32 for a float64 field (a copy).

    Returns:
      The live array, seeded from the model: option scalars (num_sims,), vectors
      (num_sims, size). Call set_const() after changing a field that mj_setConst reads.

    Example:
      batch.expand("body_mass")[:, torso] *= rng.uniform(0.8, 1.2, batch.num_sims)
      batch.set_const()
      batch.expand("gravity")[:, 2] = -1.6
    """
    _check_name(name)
    want = _dtype_arg(dtype)
    with self._lock:
      mb = self._live()
      if name in self._expanded:
        native, arr = self._expanded[name]
        if (native if want is None else want) != arr.dtype:
          raise ValueError(f"{name} is already expanded with another dtype ({arr.dtype})")
        return arr
      field = name
      if name not in _mjb.MODEL_FIELDS and "opt." + name in _mjb.MODEL_FIELDS:
        field = "opt." + name
      if name in _mjb.DATA_FIELDS or name in ("state", "warning"):
        raise ValueError(f'{name} is an MjData field; use bind("{name}")')
      if field not in _mjb.MODEL_FIELDS:
        if isinstance(getattr(self.model, name, None), np.ndarray):
          raise ValueError(f"{name} is asset data, shared by all simulations: not expandable")
        raise ValueError(f"unknown model field {name}" + did_you_mean(name, _mjb.MODEL_FIELDS))
      if _is_integer(self.model, field) and field not in _INT_PARAMS | _TYPES_AT_USE.keys():
        raise ValueError(
          f"{name} is a structural field (an index, address, count, type or size), it cannot "
          "vary per simulation: a wrong value would make MuJoCo read out of bounds"
        )
      src = mb.expand(field)
      if field == "opt.enableflags":
        self._enableflags = src
      allowed: _Allowed | _TypeAtUse = _INT_PARAMS.get(field, _ANY)
      if field in _TYPES_AT_USE:
        allowed = _TYPES_AT_USE[field](self.model)
      if allowed is not _ANY:
        self._ranged.append((field, src, allowed))
      arr = src
      if want is not None and want != src.dtype:
        if not (src.dtype == _NUM and want == np.float32):
          raise ValueError(f"{name} cannot be {want}: expand it as {src.dtype}")
        copy = _Copy(src, want, is_input=True)
        self._model_copies.append(copy)
        arr = copy.arr
      self._expanded[name] = (src.dtype, arr)
      return arr

  # --------------------------------------------------------------------------- named views

  def sensor(self, name: str, dtype: npt.DTypeLike | None = None) -> np.ndarray:
    """The (num_sims, dim) slice of sensordata for a sensor: `batch.sensor("gyro")`."""
    self._live()
    s = self.model.sensor(name)
    adr, dim = int(s.adr[0]), int(s.dim[0])
    return self.bind("sensordata", dtype)[:, adr : adr + dim]

  def joint(self, name: str, dtype: npt.DTypeLike | None = None) -> Joint:
    """A joint's qpos and qvel: free 7 and 6, ball 4 and 3, slide and hinge 1 and 1."""
    self._live()
    j = self.model.joint(name)
    kind, qadr, dadr = int(j.type[0]), int(j.qposadr[0]), int(j.dofadr[0])
    return Joint(
      self.bind("qpos", dtype)[:, qadr : qadr + QPOS_WIDTH[kind]],
      self.bind("qvel", dtype)[:, dadr : dadr + DOF_WIDTH[kind]],
    )

  def actuator(self, name: str, dtype: npt.DTypeLike | None = None) -> Actuator:
    """An actuator's ctrl and actuator_force."""
    self._live()
    i = self.model.actuator(name).id
    return Actuator(self.bind("ctrl", dtype)[:, i], self.bind("actuator_force", dtype)[:, i])

  def body(self, name: str, dtype: npt.DTypeLike | None = None) -> Body:
    """A body's xpos, xquat and cvel."""
    self._live()
    i = self.model.body(name).id
    return Body(
      self.bind("xpos", dtype)[:, i],
      self.bind("xquat", dtype)[:, i],
      self.bind("cvel", dtype)[:, i],
    )

  def site(self, name: str, dtype: npt.DTypeLike | None = None) -> Site:
    """A site's site_xpos and site_xmat."""
    self._live()
    i = self.model.site(name).id
    return Site(self.bind("site_xpos", dtype)[:, i], self.bind("site_xmat", dtype)[:, i])

  # -------------------------------------------------------------------------- physics calls

  def step(self, ids: npt.ArrayLike | None = None, nstep: int = 1, history: Any = None) -> None:
    """Advance the simulations by nstep calls to mj_step each.

    Args:
      ids: sorted unique integer ids, a bool mask of shape (num_sims,), or None for all.
      nstep: substeps, an int in [1, 2**31).
      history: None, or a caller-allocated C-contiguous float64 array (n, nstep, nstate), n the
        number of simulations of the call, filled with each one's state row after every
        substep. The rows of a simulation that raises are undefined.

    Example:
      batch.step(nstep=5)
      batch.step(np.flatnonzero(alive), history=np.empty((alive.sum(), 5, batch.nstate)))
    """
    nstep = _int_arg("nstep", nstep, 1, _INT32_MAX)
    with self._lock:
      mb = self._live()
      sel = _ids(ids, self._n)
      if history is not None:
        self._check_history_arg(history, sel, nstep)
      self._push()
      self._check_inputs(sel)
      if history is not None:
        self._step_history(sel, nstep, history)
        return
      self._after(sel, _ran(mb.step, sel, nstep, self._stage))

  def forward(self, ids: npt.ArrayLike | None = None) -> None:
    """Run mj_forward on the simulations: derived fields become current with the state.

    Example:
      batch.bind("qpos")[:, 2] = 1.0
      batch.forward()  # xpos, sensordata, ... now describe the new qpos
    """
    with self._lock:
      mb = self._live()
      sel = _ids(ids, self._n)
      self._push()
      self._check_inputs(sel)
      self._after(sel, _ran(mb.forward, sel, _STAGE_ACC))

  def reset(self, ids: npt.ArrayLike | None = None, keyframe: int = -1) -> None:
    """mj_resetData, or mj_resetDataKeyframe when keyframe >= 0, then mj_forward.

    Elements of a simulation's row written since its last call (pending writes, including
    float32 and eq_active copies) are applied on top of the reset state before mj_forward.

    Example:
      batch.reset(np.flatnonzero(fallen), keyframe=0)
    """
    with self._lock:
      mb = self._live()
      sel = _ids(ids, self._n)
      keyframe = _int_arg("keyframe", keyframe, -1, self.model.nkey - 1)
      self._push()
      self._check_inputs(sel)
      pending = None
      if self._shadow is not None:
        rows = self._state if sel is None else self._state[sel]
        shadow = self._shadow if sel is None else self._shadow[sel]
        written = _bitwise(rows) != _bitwise(shadow)
        if written.any():
          pending = (written, rows.copy())
      if pending is None:
        self._after(sel, _ran(mb.reset, sel, keyframe, _STAGE_ACC))
        return
      failed = self._failed(sel) if _ran(mb.reset, sel, keyframe, _STAGE_NONE) else None
      written, values = pending
      rows = self._state if sel is None else self._state[sel]
      if failed is not None:  # they kept their rows, writes included
        keep = np.isin(self._all(sel), failed)
        written[keep] = False
      rows[written] = values[written]
      if sel is not None:
        self._state[sel] = rows
      ok = sel if failed is None else np.setdiff1d(self._all(sel), failed).astype(np.int32)
      failed2 = self._failed(ok) if _ran(mb.forward, ok, _STAGE_ACC) else None
      both = [f for f in (failed, failed2) if f is not None]
      self._after(sel, False, np.union1d(*both) if len(both) == 2 else (both[0] if both else None))

  def set_const(self, ids: npt.ArrayLike | None = None) -> None:
    """Run mj_setConst per simulation: derived constants follow its expanded fields.

    The first call runs on every simulation, so that each one's constants agree with its own
    inputs once they become per simulation.

    Example:
      batch.expand("body_mass")[:, 1] = masses
      batch.set_const()  # body_subtreemass, dof_invweight0, ... follow
    """
    with self._lock:
      mb = self._live()
      sel = _ids(ids, self._n)
      if not self._const_everywhere:
        sel = None
      self._push()
      self._check_inputs(sel)
      nfail = _ran(mb.set_const, sel)
      self._const_everywhere = True
      failed = self._failed(sel) if nfail else None
      for c in self._model_copies:
        c.refresh(sel)
      if failed is not None:
        self._raise(failed)

  # ------------------------------------------------------------------------------ queries

  def rays(
    self,
    pnt: np.ndarray,
    vec: np.ndarray,
    dist: np.ndarray,
    geomid: np.ndarray | None = None,
    normal: np.ndarray | None = None,
    geomgroup: npt.ArrayLike | None = None,
    flg_static: bool = True,
    bodyexclude: npt.ArrayLike | None = None,
    ids: npt.ArrayLike | None = None,
  ) -> None:
    """mj_ray for every ray of every simulation, against its own geometry; a query.

    Only the rows of simulations that succeed are written: if one raises (SimulationError),
    its rows keep the caller's values.

    Args:
      pnt: (num_sims, nray, 3) origins in the world frame, float32 or float64.
      vec: directions, as pnt.
      dist: caller-allocated (num_sims, nray), of pnt's dtype: -1 where a ray hits nothing.
      geomid: None or caller-allocated (num_sims, nray) int32: the geom hit, or -1.
      normal: None or caller-allocated (num_sims, nray, 3) of pnt's dtype, zero for a miss.
      geomgroup: None or mj_ray's (mjNGROUP,) = (6,) mask of integers in [0, 255]; a geom
        counts if the entry of its group is nonzero.
      flg_static: whether static geoms count.
      bodyexclude: None or (nray,) int32 body ids whose geoms a ray ignores (-1: none).
      ids: which simulations' rows are computed; the others are left as they are.

    Example:
      dist = np.empty((batch.num_sims, nray))
      batch.rays(pnt, vec, dist, geomgroup=[1, 1, 0, 0, 0, 0])
    """
    self._live()
    n = self._n
    pnt, vec = np.asarray(pnt), np.asarray(vec)
    if pnt.ndim != 3 or pnt.shape[0] != n or pnt.shape[2] != 3 or pnt.dtype not in _FLOATS:
      raise ValueError(
        f"pnt must be float32 or float64 of shape ({n}, nray, 3), got {pnt.dtype} {pnt.shape}"
      )
    nray = pnt.shape[1]
    if vec.shape != pnt.shape or vec.dtype != pnt.dtype:
      raise ValueError(f"vec must be {pnt.dtype} of shape {pnt.shape}, got {vec.dtype} {vec.shape}")
    _check_out("dist", dist, (n, nray), pnt.dtype)
    if geomid is not None:
      _check_out("geomid", geomid, (n, nray), np.dtype(np.int32))
    if normal is not None:
      _check_out("normal", normal, (n, nray, 3), pnt.dtype)
    group = None
    if geomgroup is not None:
      group = np.asarray(geomgroup)
      ngroup = int(_mj.mjNGROUP)
      if group.shape != (ngroup,) or group.dtype.kind not in "biu":
        raise ValueError(f"geomgroup must be ({ngroup},) integers, got {group.dtype} {group.shape}")
      # mj_ray reads each entry as a byte, so 256 would wrap around to 0 (excluded)
      if group.min() < 0 or group.max() > 255:
        raise ValueError(f"geomgroup entries must be in [0, 255] (0: excluded), got {group}")
      group = np.ascontiguousarray(group, np.uint8)
    exclude = np.full(nray, -1, np.int32)
    if bodyexclude is not None:
      be = np.asarray(bodyexclude)
      if be.shape != (nray,) or be.dtype.kind not in "iu":
        raise ValueError(
          f"bodyexclude must be ({nray},) int32 body ids, one per ray, got {be.dtype} {be.shape}"
        )
      if be.size and (be.min() < -1 or be.max() >= self.model.nbody):
        raise ValueError(f"bodyexclude must be in [-1, nbody={self.model.nbody})")
      exclude = be.astype(np.int32)
    static = bool(flg_static)
    with self._lock:
      mb = self._live()
      sel = _ids(ids, n)
      if (n if sel is None else len(sel)) == 0 or nray == 0:
        return
      self._push()  # a query sees the pending writes, and leaves them pending
      self._check_inputs(sel)

      def run(idx: np.ndarray | None) -> tuple[np.ndarray, ...]:
        take = (lambda a: a) if idx is None else (lambda a: a[idx])
        return mb.ray(take(pnt), take(vec), group, static, exclude, idx, normal is not None)

      out, done, failed = self._query(run, sel)
      if out is not None:
        rows = slice(None) if done is None else done
        dist[rows] = out[0]
        if geomid is not None:
          geomid[rows] = out[1]
        if normal is not None:
          normal[rows] = out[2]
      if failed is not None:
        self._raise(failed)

  def jac(
    self,
    jacp: np.ndarray | None,
    jacr: np.ndarray | None,
    point: np.ndarray,
    body: npt.ArrayLike,
    ids: npt.ArrayLike | None = None,
  ) -> None:
    """mj_jac for one world point per simulation, moving with a body; a query.

    Only the rows of simulations that succeed are written, as with rays().

    Args:
      jacp: None or caller-allocated (num_sims, 3, nv) float32/float64: translational Jacobian.
      jacr: None or the same for the rotational Jacobian, of jacp's dtype.
      point: (num_sims, 3) points in the world frame, float32 or float64.
      body: (num_sims,) body ids.
      ids: which simulations' rows are computed.

    Example:
      jacp = np.empty((batch.num_sims, 3, model.nv))
      batch.jac(jacp, None, batch.bind("site_xpos")[:, tip], np.full(batch.num_sims, hand))
    """
    self._live()
    n, nv = self._n, self.model.nv
    first = jacp if jacp is not None else jacr
    dtype = first.dtype if isinstance(first, np.ndarray) and first.dtype in _FLOATS else _NUM
    if jacp is not None:
      _check_out("jacp", jacp, (n, 3, nv), dtype)
    if jacr is not None:
      _check_out("jacr", jacr, (n, 3, nv), dtype)
    point = np.asarray(point)
    if point.shape != (n, 3) or point.dtype not in _FLOATS:
      raise ValueError(
        f"point must be float32 or float64 of shape ({n}, 3), got {point.dtype} {point.shape}"
      )
    body = np.asarray(body)
    if body.shape != (n,) or body.dtype.kind not in "iu":
      raise ValueError(f"body must be num_sims={n} integer body ids, got {body.dtype} {body.shape}")
    if body.size and (body.min() < 0 or body.max() >= self.model.nbody):
      raise ValueError(f"body ids must be in [0, nbody={self.model.nbody})")
    with self._lock:
      mb = self._live()
      sel = _ids(ids, n)
      if (n if sel is None else len(sel)) == 0 or (jacp is None and jacr is None):
        return
      self._push()
      self._check_inputs(sel)

      def run(idx: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        take = (lambda a: a) if idx is None else (lambda a: a[idx])
        return mb.jac(take(body), take(point), idx)

      out, done, failed = self._query(run, sel)
      if out is not None:
        rows = slice(None) if done is None else done
        if jacp is not None:
          jacp[rows] = out[0]
        if jacr is not None:
          jacr[rows] = out[1]
      if failed is not None:
        self._raise(failed)

  # --------------------------------------------------------------------------------- JAX

  def to_jax(self) -> Any:
    """A jax array copy of the (num_sims, nstate) state rows, pending writes included.

    float64 with jax_enable_x64 on, else float32 (rounded), as jnp makes of float64 data.

    Example:
      state = batch.to_jax()
      state = jax.jit(mjbatch_jax.step)(state, ctrl, params)
      batch.from_jax(state)
    """
    self._live()
    import jax.numpy as jnp  # lazily: importing Batch must not import jax

    with self._lock:
      self._live()
      self._push()
      return jnp.array(self._state)

  def from_jax(self, state: Any) -> None:
    """Write (num_sims, nstate) rows, e.g. from JAX; they are pending writes like any other.

    Example:
      batch.from_jax(state)  # the rows of a jax (or numpy) array
      batch.forward()
    """
    self._live()
    values = np.asarray(state)
    if values.shape != (self._n, self._nstate) or values.dtype.kind not in "fiu":
      raise ValueError(
        f"state must be real numbers of shape ({self._n}, {self._nstate}), got {values.dtype}"
        f" {values.shape}"
      )
    with self._lock:
      self._live()
      self._ensure_shadow()
      self._state[...] = values

  # ----------------------------------------------------------------------------- internals

  def _all(self, sel: np.ndarray | None) -> np.ndarray:
    return np.arange(self._n, dtype=np.int32) if sel is None else sel

  def _ensure_shadow(self) -> None:
    # before the first state binding no row can have been written, so the rows are their
    # simulations' state as of their last call
    if self._shadow is None:
      self._shadow = self._state.copy()

  def _push(self) -> None:
    for c in self._state_copies:
      c.push()
    for c in self._model_copies:
      c.push()

  def _check_inputs(self, sel: np.ndarray | None) -> None:
    """Refuse a call whose simulations hold values MuJoCo would misread; after _push()."""
    self._check_sleep(sel)
    for field, values, allowed in self._ranged:
      rows = values if sel is None else values[sel]
      bad = allowed.bad(rows)
      if bad.any():
        at = tuple(int(k) for k in np.argwhere(bad)[0])
        sim = at[0] if sel is None else int(sel[at[0]])
        where = f"[{', '.join(map(str, at[1:]))}]" if len(at) > 1 else ""
        raise ValueError(
          f"sim {sim}: {field}{where} is {rows[at]}, but must be {allowed.describe()}"
        )
    if self._cursors is not None:
      # a history buffer's cursor is an index that MuJoCo reads from the row as a float
      cols, sizes = self._cursors
      rows = self._state[:, cols] if sel is None else self._state[np.ix_(sel, cols)]
      with np.errstate(invalid="ignore"):
        ok = (rows >= 0) & (rows < sizes) & (rows == np.floor(rows))
      if not ok.all():
        r, c = (int(k) for k in np.argwhere(~ok)[0])
        sim = r if sel is None else int(sel[r])
        raise ValueError(
          f"sim {sim}: state row element {cols[c]} is {rows[r, c]}, but it is a history "
          f"buffer's cursor, an integer in [0, {sizes[c]}); write history rows MuJoCo made"
        )

  def _query(
    self, run: Callable[[np.ndarray | None], Any], sel: np.ndarray | None
  ) -> tuple[Any, np.ndarray | None, np.ndarray | None]:
    """Run a query on sel: (its results or None, the ids they are for, the failed ids or None).

    mujoco.batch raises without the results of the simulations that succeeded; a query is a
    function of the rows alone, so it is run again on those.
    """
    try:
      return run(sel), sel, None
    except _mjb.SimulationError:
      failed = self._failed(sel)
    ok = np.setdiff1d(self._all(sel), failed).astype(np.int32)
    if not len(ok):
      return None, ok, failed
    try:
      return run(ok), ok, failed
    except _mjb.SimulationError:
      return None, ok[:0], np.union1d(failed, self._failed(ok)).astype(np.int32)

  def _after(self, sel: np.ndarray | None, nfail: bool, failed: np.ndarray | None = None) -> None:
    """Bookkeeping after a call that consumed the rows of sel: shadow, copies, errors."""
    if nfail:
      failed = self._failed(sel)
    ok = sel
    if failed is not None and len(failed):
      ok = np.setdiff1d(self._all(sel), failed).astype(np.int32)
    if self._shadow is not None:
      if ok is None:
        np.copyto(self._shadow, self._state)
      elif len(ok):
        self._shadow[ok] = self._state[ok]
    for c in self._state_copies:
      c.refresh(sel)
    for c in self._output_copies:
      c.refresh(sel)
    if failed is not None and len(failed):
      self._raise(failed)

  def _failed(self, sel: np.ndarray | None) -> np.ndarray:
    idx = self._all(sel)
    return idx[self._status[idx] != 0]

  def _raise(self, failed: np.ndarray) -> None:
    first = int(failed[0])
    more = f" (and {len(failed) - 1} more simulations)" if len(failed) > 1 else ""
    raise SimulationError(f"sim {first}: {self._mb.error(first)}{more}", ids=failed)

  def _check_sleep(self, sel: np.ndarray | None) -> None:
    # MuJoCo would fail these simulations one by one after running the others; mjbatch
    # refuses the whole call first
    if self._enableflags is None or self._persistent:
      return
    flags = self._enableflags if sel is None else self._enableflags[sel]
    bad = np.flatnonzero(flags & _NONPURE_BITS)
    if bad.size:
      i = int(bad[0]) if sel is None else int(sel[bad[0]])
      raise ValueError(
        f"sim {i}: sleep (or IPC) is enabled by its expanded enableflags; their bookkeeping is "
        "not part of the state rows, so they need Batch(..., persistent=True)"
      )

  def _check_history_arg(self, history: Any, sel: np.ndarray | None, nstep: int) -> None:
    n = self._n if sel is None else len(sel)
    shape = (n, nstep, self._nstate)
    if (
      not isinstance(history, np.ndarray)
      or history.shape != shape
      or history.dtype != _NUM
      or not history.flags.c_contiguous
      or not history.flags.writeable
    ):
      got = (
        f"{history.dtype} {history.shape}"
        if isinstance(history, np.ndarray)
        else type(history).__name__
      )
      raise ValueError(
        f"history must be a writable C-contiguous float64 array of shape {shape}, got {got}"
      )
    if np.may_share_memory(history, self._state):
      raise ValueError("history must not share memory with the state rows")

  def _step_history(self, sel: np.ndarray | None, nstep: int, history: np.ndarray) -> None:
    n = history.shape[0]
    if n == 0:
      return
    mb = self._mb
    idx = self._all(sel)
    warning = mb.warning
    before_rows = self._state[idx]
    before_warn = warning[idx]
    # MuJoCo wants plain strides; a size-1 axis may carry any stride in numpy
    buf = np.lib.stride_tricks.as_strided(
      history, strides=(nstep * self._nstate * 8, self._nstate * 8, 8)
    )
    record = (_STATE_SPEC,)
    nfail = _ran(mb.rollout, nstep, None, _CTRL_SPEC, record, sel, {_STATE_SPEC: buf})
    failed = self._failed(sel) if nfail else np.zeros(0, np.int32)
    # a rollout stops a simulation whose warnings rise; mj_step resets it and goes on, so
    # those simulations are redone from their pre-call rows, one substep at a time
    rose = (warning[idx, :, 1] != before_warn[:, :, 1]).any(axis=1)
    rose &= ~np.isin(idx, failed)
    if rose.any():
      pos = np.flatnonzero(rose)
      redo = idx[pos].astype(np.int32)
      self._state[redo] = before_rows[pos]
      warning[redo] = before_warn[pos]
      for k in range(nstep):
        stage = self._stage if k == nstep - 1 else _STAGE_NONE
        if _ran(mb.step, redo, 1, stage):
          bad = self._failed(redo)
          keep = ~np.isin(redo, bad)
          self._state[bad] = before_rows[pos[~keep]]
          failed = np.union1d(failed, bad).astype(np.int32)
          redo, pos = redo[keep], pos[keep]
          if not len(redo):
            break
        history[pos, k] = self._state[redo]
    if self._stage != _STAGE_NONE:
      done = np.setdiff1d(idx, failed).astype(np.int32)
      # the redone ones ran their forward with their last substep
      if rose.any():
        done = np.setdiff1d(done, idx[np.flatnonzero(rose)]).astype(np.int32)
      if len(done) and _ran(mb.forward, done, self._stage):
        failed = np.union1d(failed, self._failed(done)).astype(np.int32)
    self._after(sel, False, failed if len(failed) else None)


# ------------------------------------------------------------------------------------ fork

# Every Batch not yet closed. A process forked from this one has none of their worker threads,
# and freeing a mujoco.batch.Batch joins its threads, which would wait forever: the child keeps
# each such batch alive for good (one reference more), so neither close() nor the interpreter's
# exit frees it, and every call raises (see Batch._live).
_LIVE: weakref.WeakSet[Batch] = weakref.WeakSet()


def _abandon_inherited_batches() -> None:
  for batch in list(_LIVE):
    engine = getattr(batch, "_mb", None)
    if engine is not None:
      ctypes.pythonapi.Py_IncRef(ctypes.py_object(engine))
    batch._lock = threading.Lock()  # a thread of the parent may have held it


if hasattr(os, "register_at_fork"):
  os.register_at_fork(after_in_child=_abandon_inherited_batches)


# --------------------------------------------------------------------------- argument checks

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _int_arg(name: str, value: Any, lo: int, hi: int, note: str = "") -> int:
  """value as an int in [lo, hi]: a Python or numpy integer, not a bool, float or string."""
  if isinstance(value, bool) or not isinstance(value, int | np.integer):
    raise ValueError(f"{name} must be an int in [{lo}, {hi}]{note}, got {value!r}")
  if not lo <= value <= hi:
    raise ValueError(f"{name} must be an int in [{lo}, {hi}]{note}, got {value}")
  return int(value)


def _ids(ids: npt.ArrayLike | None, n: int) -> np.ndarray | None:
  """Validated int32 ids from integer ids or a bool mask; None for all.

  Shape, dtype, range, order and uniqueness are checked before narrowing to int32, so that no
  id is truncated or wrapped into a valid one.
  """
  if ids is None:
    return None
  a = np.asarray(ids)
  if a.dtype == bool:
    if a.shape != (n,):
      raise ValueError(f"a bool mask of ids must have shape ({n},), got {a.shape}")
    return None if a.all() else np.flatnonzero(a).astype(np.int32)
  if a.ndim != 1:
    raise ValueError(f"ids must be one-dimensional, got shape {a.shape}")
  if a.size == 0:
    return np.zeros(0, np.int32)
  if a.dtype.kind not in "iu":
    raise ValueError(f"ids must be integers, got {a.dtype}")
  # compared, not subtracted, so that unsigned ids cannot wrap around
  if a.size > 1 and not (a[1:] > a[:-1]).all():
    k = int(np.flatnonzero(a[1:] <= a[:-1])[0])
    raise ValueError(f"ids must be sorted and unique, got {a[k]} before {a[k + 1]}")
  # sorted, so only the first and last can be out of range
  if a[0] < 0 or a[-1] >= n:
    raise ValueError(f"ids must be in [0, {n}), got {a[0] if a[0] < 0 else a[-1]}")
  return np.ascontiguousarray(a, np.int32)


def _check_name(name: Any) -> None:
  if not isinstance(name, str):
    raise ValueError(f"a field name must be a str, got {type(name).__name__}")


def _dtype_arg(dtype: npt.DTypeLike | None) -> np.dtype | None:
  if dtype is None:
    return None
  try:
    return np.dtype(dtype)
  except TypeError as e:
    raise ValueError(f"dtype must be a numpy dtype such as np.float32, got {dtype!r}") from e


def _check_out(name: str, a: Any, shape: tuple[int, ...], dtype: np.dtype) -> None:
  if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dtype or not a.flags.writeable:
    got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
    raise ValueError(f"{name} must be a writable {dtype} array of shape {shape}, got {got}")


def _is_integer(model: Any, field: str) -> bool:
  """Whether an MjModel or MjOption field holds integers (or bools)."""
  value = getattr(model.opt, field[4:]) if field.startswith("opt.") else getattr(model, field)
  return np.asarray(value).dtype.kind in "biu"


def _history_cursors(model: Any) -> tuple[np.ndarray, np.ndarray] | None:
  """The row columns of the history buffers' cursors and the buffers' sample counts, or None.

  A buffer is [user slot, cursor, times (nsample), values (nsample * dim)], in the row's
  history component; MuJoCo reads the cursor as an int and indexes the buffer with it.
  """
  if not model.nhistory:
    return None
  start = _mj.mj_stateSize(model, _BEFORE_HISTORY)
  cols, sizes = [], []
  for history, adr in (
    (model.actuator_history, model.actuator_historyadr),
    (model.sensor_history, model.sensor_historyadr),
  ):
    for (nsample, _), a in zip(history.reshape(-1, 2), adr, strict=True):
      if nsample > 0:
        cols.append(start + int(a) + 1)
        sizes.append(int(nsample))
  if not cols:
    return None
  return np.array(cols), np.array(sizes)


def _bind_error(name: str) -> ValueError:
  if name in _mjb.MODEL_FIELDS:
    return ValueError(f'{name} is an MjModel field; use expand("{name}")')
  if "opt." + name in _mjb.MODEL_FIELDS:
    return ValueError(f'{name} is an MjOption field; use expand("{name}")')
  if isinstance(getattr(_mj.MjModel, name, None), property):
    return ValueError(f'{name} is an MjModel field; use expand("{name}")')
  return ValueError(f"unknown field {name}" + did_you_mean(name, _mjb.DATA_FIELDS))
