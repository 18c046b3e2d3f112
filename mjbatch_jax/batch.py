"""The stateful numpy front end: mjbatch 0.1.x's `Batch`, over MuJoCo's own batch engine.

Scripts written for the mjbatch library run unchanged after `from mjbatch_jax import Batch`. The
physics, threads and per-simulation fields are `mujoco.batch.Batch`'s; this module adds what
mjbatch promised on top of it: float32 and MjData-dtype bindings that are change-tracked copies,
resets that keep pending writes, step histories with mj_step's auto-reset, caller-allocated ray
and Jacobian queries, a lock per batch, and errors that name the simulation.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import mujoco
import mujoco.batch as _mjb
import numpy as np
import numpy.typing as npt

from mjbatch_jax.errors import SimulationError

# mujoco's compiled modules ship no type stubs
_mj: Any = mujoco

_NUM = np.dtype(mujoco.MJTNUM_DTYPE)
_STAGE_NONE = int(_mj.mjtStage.mjSTAGE_NONE)
_STAGE_ACC = int(_mj.mjtStage.mjSTAGE_ACC)
_STATE_SPEC = int(_mj.mjtState.mjSTATE_INTEGRATION)
_CTRL_SPEC = int(_mj.mjtState.mjSTATE_CTRL)
# enable bits whose bookkeeping lies outside the state rows
_NONPURE_BITS = int(_mj.mjtEnableBit.mjENBL_SLEEP) | int(_mj.mjtEnableBit.mjENBL_IPC)
_QPOS_WIDTH = {0: 7, 1: 4, 2: 1, 3: 1}  # by mjtJoint: free, ball, slide, hinge
_DOF_WIDTH = {0: 6, 1: 3, 2: 1, 3: 1}


@dataclass(frozen=True)
class Joint:
  """A joint's live (N, width) slices of qpos and qvel."""

  qpos: np.ndarray
  qvel: np.ndarray


@dataclass(frozen=True)
class Actuator:
  """An actuator's live (N,) slices of ctrl and actuator_force."""

  ctrl: np.ndarray
  force: np.ndarray


@dataclass(frozen=True)
class Body:
  """A body's live (N, ...) slices of xpos, xquat and cvel."""

  xpos: np.ndarray
  xquat: np.ndarray
  cvel: np.ndarray


@dataclass(frozen=True)
class Site:
  """A site's live (N, ...) slices of site_xpos and site_xmat."""

  xpos: np.ndarray
  xmat: np.ndarray


def _bits(a: np.ndarray) -> np.ndarray:
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
    changed = _bits(self.arr) != _bits(self.last)
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
  gives model and option fields per-simulation values; set_const() makes the constants derived
  from them per simulation. reset() keeps the simulation's pending writes (row elements written
  since its last call) on top of the reset state. A MuJoCo error raises SimulationError naming
  the first failing simulation, which keeps its state and pending writes; the others ran.

  Calls on one Batch are serialized by a lock; the GIL is released during the physics, so
  several batches run at once.
  """

  def __init__(
    self,
    model: mujoco.MjModel,  # pyright: ignore[reportAttributeAccessIssue]
    num_sims: int,
    num_threads: int = 0,
    forward: bool = False,
    persistent: bool = False,
  ) -> None:
    if int(num_sims) < 1:
      raise ValueError(f"num_sims must be >= 1, got {num_sims}")
    num_sims = int(num_sims)
    threads = int(num_threads) if num_threads > 0 else (os.cpu_count() or 1)
    try:
      self._mb = _mjb.Batch(model, num_sims, min(threads, num_sims), persistent)
    except ValueError as e:
      if "sleep" in str(e):
        raise ValueError(
          f"the model enables sleep (or IPC), whose bookkeeping is not part of the state rows;"
          f" such models need Batch(..., persistent=True) ({e})"
        ) from e
      raise
    self.model = model
    self._raw = self._mb._b  # the binding; its calls release the GIL
    self._n = num_sims
    self._nstate = self._mb.nstate
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
    self._const_everywhere = False

  # ---------------------------------------------------------------------------- properties

  @property
  def num_sims(self) -> int:
    return self._n

  @property
  def num_threads(self) -> int:
    return self._live().nthread

  @property
  def nstate(self) -> int:
    """The length of a simulation's state row, mj_stateSize(model, mjSTATE_INTEGRATION)."""
    return self._nstate

  @property
  def persistent(self) -> bool:
    return self._persistent

  # ------------------------------------------------------------------------------ lifetime

  def close(self) -> None:
    """Free the engine; later calls raise ValueError. Arrays already bound stay readable."""
    with self._lock:
      self._closed = True
      self._state_copies, self._model_copies, self._output_copies = [], [], []
      del self._mb, self._raw

  def __enter__(self) -> Batch:
    return self

  def __exit__(self, *exc: object) -> None:
    if not self._closed:
      self.close()

  def _live(self) -> _mjb.Batch:
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
    """
    with self._lock:
      mb = self._live()
      want = None if dtype is None else np.dtype(dtype)
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
    if name in _mjb._STATE_FIELDS:
      src = mb.bind(name)  # a strided view of the rows
      self._ensure_shadow()
      # the rows hold eq_active as mjtNum; MjData, and so mjbatch, as bool
      native = mb._data.eq_active.dtype if name == "eq_active" else src.dtype
      dtype = native if want is None else want
      if dtype == src.dtype:
        return native, src
      if not (native == _NUM and dtype == np.float32) and dtype != native:
        raise ValueError(f"{name} cannot be {dtype}: bind it as {native}")
      copy = _Copy(src, dtype, is_input=True)
      self._state_copies.append(copy)
      return native, copy.arr
    template = _mjb._template(mb._data, name)
    raw = mb._b.output(name)
    if raw is None or template is None:
      raise _bind_error(name)
    # mujoco.batch marks outputs read-only; mjbatch's are writable (a write is overwritten
    # by the next call), so we view the raw storage ourselves
    out = raw.view(template.dtype).reshape(self._n, *template.shape)
    if want is None or want == out.dtype:
      return out.dtype, out
    if not (out.dtype == _NUM and want == np.float32):
      raise ValueError(f"{name} cannot be {want}: bind it as {out.dtype}")
    copy = _Copy(out, want, is_input=False)
    self._output_copies.append(copy)
    return out.dtype, copy.arr

  def expand(self, name: str, dtype: npt.DTypeLike | None = None) -> np.ndarray:
    """Give a model or option field per-simulation values; return them, (num_sims, ...).

    Args:
      name: an MjModel array ("body_mass", "geom_friction", ...) or an MjOption field, named
        as mjbatch does ("gravity", "timestep", "integrator") or as MuJoCo ("opt.gravity").
      dtype: None or the field's own dtype, or float32 for a float64 field (a copy).

    Returns:
      The live array, seeded from the model: option scalars (num_sims,), vectors
      (num_sims, size). Call set_const() after changing a field that mj_setConst reads.
    """
    with self._lock:
      mb = self._live()
      want = None if dtype is None else np.dtype(dtype)
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
        raise ValueError(f"unknown model field {name}" + _mjb._hint(name, _mjb.MODEL_FIELDS))
      src = mb.expand(field)
      if field == "opt.enableflags":
        self._enableflags = src
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
    """The (num_sims, dim) slice of sensordata for a sensor."""
    s = self.model.sensor(name)
    adr, dim = int(s.adr[0]), int(s.dim[0])
    return self.bind("sensordata", dtype)[:, adr : adr + dim]

  def joint(self, name: str, dtype: npt.DTypeLike | None = None) -> Joint:
    """A joint's qpos and qvel: free 7 and 6, ball 4 and 3, slide and hinge 1 and 1."""
    j = self.model.joint(name)
    kind, qadr, dadr = int(j.type[0]), int(j.qposadr[0]), int(j.dofadr[0])
    return Joint(
      self.bind("qpos", dtype)[:, qadr : qadr + _QPOS_WIDTH[kind]],
      self.bind("qvel", dtype)[:, dadr : dadr + _DOF_WIDTH[kind]],
    )

  def actuator(self, name: str, dtype: npt.DTypeLike | None = None) -> Actuator:
    """An actuator's ctrl and actuator_force."""
    i = self.model.actuator(name).id
    return Actuator(self.bind("ctrl", dtype)[:, i], self.bind("actuator_force", dtype)[:, i])

  def body(self, name: str, dtype: npt.DTypeLike | None = None) -> Body:
    """A body's xpos, xquat and cvel."""
    i = self.model.body(name).id
    return Body(
      self.bind("xpos", dtype)[:, i],
      self.bind("xquat", dtype)[:, i],
      self.bind("cvel", dtype)[:, i],
    )

  def site(self, name: str, dtype: npt.DTypeLike | None = None) -> Site:
    """A site's site_xpos and site_xmat."""
    i = self.model.site(name).id
    return Site(self.bind("site_xpos", dtype)[:, i], self.bind("site_xmat", dtype)[:, i])

  # -------------------------------------------------------------------------- physics calls

  def step(self, ids: npt.ArrayLike | None = None, nstep: int = 1, history: Any = None) -> None:
    """Advance the simulations by nstep calls to mj_step each.

    Args:
      ids: sorted unique int32/int64 ids, a bool mask of shape (num_sims,), or None for all.
      nstep: substeps, >= 1.
      history: None, or a caller-allocated C-contiguous float64 array (n, nstep, nstate), n the
        number of simulations of the call, filled with each one's state row after every
        substep. The rows of a simulation that raises are undefined.
    """
    with self._lock:
      self._live()
      sel = _mjb._ids(ids, self._n)
      if int(nstep) < 1:
        raise ValueError(f"nstep must be >= 1, got {nstep}")
      nstep = int(nstep)
      if history is not None:
        self._check_history(history, sel, nstep)
      self._check_sleep(sel)
      self._push()
      if history is not None:
        self._step_history(sel, nstep, history)
        return
      nfail = self._raw.step(sel, nstep, self._stage)
      self._after(sel, nfail)

  def forward(self, ids: npt.ArrayLike | None = None) -> None:
    """Run mj_forward on the simulations: derived fields become current with the state."""
    with self._lock:
      self._live()
      sel = _mjb._ids(ids, self._n)
      self._check_sleep(sel)
      self._push()
      self._after(sel, self._raw.forward(sel, _STAGE_ACC))

  def reset(self, ids: npt.ArrayLike | None = None, keyframe: int = -1) -> None:
    """mj_resetData, or mj_resetDataKeyframe when keyframe >= 0, then mj_forward.

    Elements of a simulation's row written since its last call (pending writes, including
    float32 and eq_active copies) are applied on top of the reset state before mj_forward.
    """
    with self._lock:
      self._live()
      sel = _mjb._ids(ids, self._n)
      if isinstance(keyframe, bool) or not isinstance(keyframe, int | np.integer):
        raise ValueError(f"keyframe must be an int, got {keyframe!r}")
      if not -1 <= int(keyframe) < self.model.nkey:
        raise ValueError(f"keyframe {keyframe} out of range [-1, {self.model.nkey})")
      self._check_sleep(sel)
      self._push()
      key = (
        None
        if keyframe == -1
        else np.full(self._n if sel is None else len(sel), keyframe, np.int32)
      )
      pending = None
      if self._shadow is not None:
        rows = self._state if sel is None else self._state[sel]
        shadow = self._shadow if sel is None else self._shadow[sel]
        written = _bits(rows) != _bits(shadow)
        if written.any():
          pending = (written, rows.copy())
      if pending is None:
        self._after(sel, self._raw.reset(sel, key, _STAGE_ACC))
        return
      nfail = self._raw.reset(sel, key, _STAGE_NONE)
      failed = self._failed(sel) if nfail else None
      written, values = pending
      rows = self._state if sel is None else self._state[sel]
      if failed is not None:  # they kept their rows, writes included
        keep = np.isin(np.arange(self._n) if sel is None else sel, failed)
        written[keep] = False
      rows[written] = values[written]
      if sel is not None:
        self._state[sel] = rows
      ok = (
        sel
        if failed is None
        else np.setdiff1d(np.arange(self._n) if sel is None else sel, failed).astype(np.int32)
      )
      nfail2 = self._raw.forward(ok, _STAGE_ACC)
      failed2 = self._failed(ok) if nfail2 else None
      both = [f for f in (failed, failed2) if f is not None]
      self._after(sel, 0, np.union1d(*both) if len(both) == 2 else (both[0] if both else None))

  def set_const(self, ids: npt.ArrayLike | None = None) -> None:
    """Run mj_setConst per simulation: derived constants follow its expanded fields.

    The first call runs on every simulation, so that each one's constants agree with its own
    inputs once they become per simulation.
    """
    with self._lock:
      self._live()
      sel = _mjb._ids(ids, self._n)
      self._check_sleep(sel)
      self._push()
      if not self._const_everywhere:
        sel = None
      nfail = self._raw.set_const(sel)
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

    Args:
      pnt: (num_sims, nray, 3) origins in the world frame, float32 or float64.
      vec: directions, as pnt.
      dist: caller-allocated (num_sims, nray), of pnt's dtype: -1 where a ray hits nothing.
      geomid: None or caller-allocated (num_sims, nray) int32: the geom hit, or -1.
      normal: None or caller-allocated (num_sims, nray, 3) of pnt's dtype, zero for a miss.
      geomgroup: None or mj_ray's six-entry uint8 mask.
      flg_static: whether static geoms count.
      bodyexclude: None or (nray,) int32 body ids whose geoms a ray ignores (-1: none).
      ids: which simulations' rows are computed; the others are left as they are.
    """
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
      if group.shape != (_mj.mjNGROUP,):
        raise ValueError(f"geomgroup must have shape ({_mj.mjNGROUP},), got {group.shape}")
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
    with self._lock:
      self._live()
      sel = _mjb._ids(ids, n)
      m = n if sel is None else len(sel)
      if m == 0 or nray == 0:
        return
      self._push()  # a query sees the pending writes, and leaves them pending
      take = (lambda a: a) if sel is None else (lambda a: a[sel])
      d = np.empty((m, nray), _NUM)
      g = np.empty((m, nray), np.int32)
      nrm = None if normal is None else np.empty((m, nray, 3), _NUM)
      nfail = self._raw.ray(
        sel,
        np.ascontiguousarray(take(pnt), _NUM),
        np.ascontiguousarray(take(vec), _NUM),
        group,
        bool(flg_static),
        np.ascontiguousarray(np.broadcast_to(exclude, (m, nray))),
        d,
        g,
        nrm,
      )
      rows = slice(None) if sel is None else sel
      dist[rows] = d
      if geomid is not None:
        geomid[rows] = g
      if normal is not None and nrm is not None:
        normal[rows] = nrm
      if nfail:
        self._raise(self._failed(sel))

  def jac(
    self,
    jacp: np.ndarray | None,
    jacr: np.ndarray | None,
    point: np.ndarray,
    body: npt.ArrayLike,
    ids: npt.ArrayLike | None = None,
  ) -> None:
    """mj_jac for one world point per simulation, moving with a body; a query.

    Args:
      jacp: None or caller-allocated (num_sims, 3, nv) float32/float64: translational Jacobian.
      jacr: None or the same for the rotational Jacobian, of jacp's dtype.
      point: (num_sims, 3) points in the world frame, float32 or float64.
      body: (num_sims,) body ids.
      ids: which simulations' rows are computed.
    """
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
      self._live()
      sel = _mjb._ids(ids, n)
      m = n if sel is None else len(sel)
      if m == 0 or (jacp is None and jacr is None):
        return
      self._push()
      take = (lambda a: a) if sel is None else (lambda a: a[sel])
      jp = None if jacp is None else np.empty((m, 3, nv), _NUM)
      jr = None if jacr is None else np.empty((m, 3, nv), _NUM)
      nfail = self._raw.jac(
        sel,
        np.ascontiguousarray(take(body), np.int32),
        np.ascontiguousarray(take(point), _NUM),
        jp,
        jr,
      )
      rows = slice(None) if sel is None else sel
      if jacp is not None and jp is not None:
        jacp[rows] = jp
      if jacr is not None and jr is not None:
        jacr[rows] = jr
      if nfail:
        self._raise(self._failed(sel))

  # --------------------------------------------------------------------------------- JAX

  def to_jax(self) -> Any:
    """A jax array copy of the (num_sims, nstate) state rows, pending writes included.

    float64 with jax_enable_x64 on, else float32 (rounded), as jnp makes of float64 data.
    """
    import jax.numpy as jnp  # lazily: importing Batch must not import jax

    with self._lock:
      self._live()
      self._push()
      return jnp.array(self._state)

  def from_jax(self, state: Any) -> None:
    """Write (num_sims, nstate) rows, e.g. from JAX; they are pending writes like any other."""
    values = np.asarray(state)
    if values.shape != (self._n, self._nstate):
      raise ValueError(f"state must have shape ({self._n}, {self._nstate}), got {values.shape}")
    with self._lock:
      self._live()
      self._ensure_shadow()
      self._state[...] = values

  # ----------------------------------------------------------------------------- internals

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

  def _after(self, sel: np.ndarray | None, nfail: int, failed: np.ndarray | None = None) -> None:
    """Bookkeeping after a call that consumed the rows of sel: shadow, copies, errors."""
    if nfail:
      failed = self._failed(sel)
    ok = sel
    if failed is not None and len(failed):
      ok = np.setdiff1d(np.arange(self._n) if sel is None else sel, failed).astype(np.int32)
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
    idx = np.arange(self._n) if sel is None else sel
    return idx[self._status[idx] != 0]

  def _raise(self, failed: np.ndarray) -> None:
    first = int(failed[0])
    more = f" (and {len(failed) - 1} more simulations)" if len(failed) > 1 else ""
    err = SimulationError(f"sim {first}: {self._mb.error(first)}{more}")
    err.ids = failed  # type: ignore[attr-defined]
    raise err

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

  def _check_history(self, history: Any, sel: np.ndarray | None, nstep: int) -> None:
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

  def _step_history(self, sel: np.ndarray | None, nstep: int, history: np.ndarray) -> None:
    n = history.shape[0]
    if n == 0:
      return
    idx = np.arange(self._n, dtype=np.int32) if sel is None else sel
    warning = self._mb.warning
    before_rows = self._state[idx]
    before_warn = warning[idx]
    # the raw binding wants plain strides; a size-1 axis may carry any stride in numpy
    buf = np.lib.stride_tricks.as_strided(
      history, strides=(nstep * self._nstate * 8, self._nstate * 8, 8)
    )
    nfail = self._raw.rollout(sel, nstep, None, _CTRL_SPEC, [(None, _STATE_SPEC, buf)])
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
        if self._raw.step(redo, 1, stage):
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
      if len(done) and self._raw.forward(done, self._stage):
        failed = np.union1d(failed, self._failed(done)).astype(np.int32)
    self._after(sel, 0, failed if len(failed) else None)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _check_out(name: str, a: Any, shape: tuple[int, ...], dtype: np.dtype) -> None:
  if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dtype or not a.flags.writeable:
    got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
    raise ValueError(f"{name} must be a writable {dtype} array of shape {shape}, got {got}")


def _bind_error(name: str) -> ValueError:
  if name in _mjb.MODEL_FIELDS:
    return ValueError(f'{name} is an MjModel field; use expand("{name}")')
  if "opt." + name in _mjb.MODEL_FIELDS:
    return ValueError(f'{name} is an MjOption field; use expand("{name}")')
  if isinstance(getattr(_mj.MjModel, name, None), property):
    return ValueError(f'{name} is an MjModel field; use expand("{name}")')
  return ValueError(f"unknown field {name}" + _mjb._hint(name, _mjb.DATA_FIELDS))
