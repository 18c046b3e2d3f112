"""`setup` and its result, `Distributed`: one process's view of a global batch, checked against
every other process's (model, versions, settings, compiled program)."""

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mjbatch_jax import archive
from mjbatch_jax._extension import ext
from mjbatch_jax.distributed.bootstrap import initialize
from mjbatch_jax.distributed.errors import DistributedError
from mjbatch_jax.distributed.watchdog import name_peers, report_exit, watched
from mjbatch_jax.params import Params, model_digest
from mjbatch_jax.simulator import Simulator

_RECORD_BYTES = 1024  # one process's setup record, padded, for a fixed-shape allgather


def setup(
  model: mujoco.MjModel,
  num_sims_global: int,
  num_threads: int = 0,
  fields: Sequence[str] = (),
  keyframe: int | str | None = None,
  *,
  shared: Sequence[str] = (),
  select: Mapping[str, Sequence[int | str]] | None = None,
  axis: str = "sims",
  mesh: Mesh | None = None,
  timeout: float | None = None,
) -> "Distributed":
  """This process's share of num_sims_global simulations over every process's CPU devices.

  Starts JAX's distributed runtime if needed (`initialize`), makes this process's Simulator,
  then checks, with one allgather, that every process has the same model (model_digest: its
  fields, wherever its files are), mjbatch_jax, MuJoCo, jax and jaxlib versions,
  jax_enable_x64, batch, fields and keyframe, and the same engine id, which compiled programs
  carry: the first Simulator of a model in a process gets the same id in every process that
  makes its Simulators in the same order. A difference raises DistributedError in every
  process, naming them. Without other processes it is the same on this process's devices alone.

  Args:
    model: the model; the same in every process.
    num_sims_global: simulations over all processes: a multiple of the mesh's devices, each of
      which gets num_sims_global / devices rows (contiguous, in the order of processes).
    num_threads: threads of this process's batches, as for Simulator.
    fields, shared, select: the params' fields, as for Simulator.params.
    keyframe: the initial state's keyframe (index or name), None for the model's default.
    axis: the mesh axis name over simulations.
    mesh: a 1-D mesh of CPU devices named axis that includes devices of every process, grouped
      by process (default: every process's CPU devices, by process).
    timeout: seconds before a silent peer counts as lost (see `initialize`).

  Returns:
    A Distributed with the simulator, the mesh, the initial state and params as global arrays.

  Example:
    dist = mjbatch_jax.distributed.setup(model, 4096, num_threads=1, fields=("body_mass",))
    step = dist.map(lambda s, c, p: mjbatch_jax.step(s, c, p, nstep=10))
    state = step(dist.state, dist.zeros(model.nu), dist.params)
  """
  if not isinstance(model, mujoco.MjModel):
    raise ValueError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
  if (not isinstance(num_sims_global, (int, np.integer)) or isinstance(num_sims_global, bool)
      or num_sims_global < 1):
    raise ValueError(f"num_sims_global must be an int >= 1, got {num_sims_global!r}")
  if not isinstance(axis, str) or not axis:
    raise ValueError(f"axis must be a non-empty string, got {axis!r}")
  num_sims_global = int(num_sims_global)
  initialize(timeout=timeout)
  mesh = _checked_mesh(mesh, axis)
  rows = _local_rows(mesh, axis, num_sims_global)

  # Whatever fails here is exchanged rather than raised at once, so that every process raises
  # (instead of the others waiting for this one in the allgather).
  sim, error = None, None
  try:
    sim = Simulator(model, num_threads)
  except Exception as caught:  # raised after the exchange, in every process
    error = caught
  record = _record(model, sim, num_sims_global, axis, mesh, fields, shared, select, keyframe,
                   error)
  records = _exchange(record)
  _check_records(records, error)
  assert sim is not None
  return Distributed(sim, mesh, axis, num_sims_global, rows, fields, shared, select, keyframe,
                     records)


def _checked_mesh(mesh: Mesh | None, axis: str) -> Mesh:
  if mesh is None:
    devices = sorted(jax.devices("cpu"), key=lambda d: (d.process_index, d.id))
    return Mesh(np.array(devices), (axis,))
  if not isinstance(mesh, Mesh):
    raise ValueError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
  if mesh.axis_names != (axis,):
    raise ValueError(f"mesh must be 1-D with the axis {axis!r}, got axes {mesh.axis_names}")
  platforms = sorted({d.platform for d in mesh.devices.flat})
  if platforms != ["cpu"]:
    raise ValueError(f"mjbatch_jax runs on CPU devices, but the mesh has {platforms} devices: "
                     "make it of jax.devices('cpu')")
  missing = sorted(set(range(jax.process_count())) - {d.process_index for d in mesh.devices.flat})
  if missing:
    raise ValueError(f"the mesh has no device of process(es) {missing}: each process steps its "
                     "rows on its own devices, so the mesh needs devices of every process")
  return mesh


def _local_rows(mesh: Mesh, axis: str, num_sims: int) -> slice:
  """This process's rows of the global batch; they must be one contiguous block."""
  size = mesh.devices.size
  if num_sims % size:
    lower, upper = num_sims // size * size, (num_sims // size + 1) * size
    raise ValueError(
      f"num_sims_global={num_sims} must be a multiple of the mesh's {size} CPU devices "
      f"({jax.process_count()} process(es)), so that every device steps as many rows: "
      f"try {upper}" + (f" or {lower}" if lower else "")
    )
  index_map = NamedSharding(mesh, PartitionSpec(axis)).addressable_devices_indices_map(
    (num_sims,)
  )
  blocks = sorted(i[0].indices(num_sims)[:2] for i in index_map.values() if i)
  for (_, stop), (start, _) in zip(blocks, blocks[1:], strict=False):
    if stop != start:
      raise ValueError("this process's devices are not next to each other in the mesh: order "
                       "the mesh's devices by process so that each process has one block of rows")
  return slice(blocks[0][0], blocks[-1][1])


def versions() -> dict[str, str]:
  """What must agree across processes for their programs and physics to be the same."""
  def version(package: str) -> str:
    try:
      return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      return "?"

  built = int(ext.MUJOCO_HEADER_VERSION)
  return {
    "mjbatch_jax": version("mjbatch_jax"),
    "mujoco": mujoco.mj_versionString(),
    "mujoco (built against)": f"{built // 1000000}.{built // 1000 % 1000}.{built % 1000}",
    "jax": jax.__version__,
    "jaxlib": version("jaxlib"),
  }


def _record(model: mujoco.MjModel, sim: Simulator | None, num_sims: int, axis: str, mesh: Mesh,
            fields: Sequence[str], shared: Sequence[str],
            select: Mapping[str, Sequence[int | str]] | None, keyframe: int | str | None,
            error: BaseException | None) -> dict[str, Any]:
  # As text, numpy's repr of a long selection elides its middle: archive.plain shows it whole.
  settings = repr(archive.plain((fields, shared, dict(sorted((select or {}).items())), keyframe)))
  devices = [(d.process_index, d.id) for d in mesh.devices.flat]

  def short(text: str, size: int) -> str:
    # ASCII, so that the record's JSON stays within _RECORD_BYTES whatever the text.
    return text[:size].encode("ascii", "replace").decode()

  return {
    "host": short(socket.gethostname(), 64),
    "pid": os.getpid(),
    "versions": versions(),
    "x64": bool(jax.config.read("jax_enable_x64")),
    "num_sims": num_sims,
    "axis": axis,
    "mesh": hashlib.sha256(repr(devices).encode()).hexdigest()[:16],
    "settings": hashlib.sha256(settings.encode()).hexdigest()[:16],
    "model": model_digest(model),
    "engine": None if sim is None else int(sim.spec.engine),
    "error": None if error is None else short(f"{type(error).__name__}: {error}", 300),
  }


def _exchange(record: dict[str, Any]) -> list[dict[str, Any]]:
  """Every process's record, by process index (one allgather of fixed-size bytes)."""
  text = json.dumps(record).encode()
  if len(text) > _RECORD_BYTES:
    raise AssertionError(f"setup record of {len(text)} bytes: {text[:200]!r}")
  buffer = np.zeros(_RECORD_BYTES, dtype=np.uint8)
  buffer[: len(text)] = np.frombuffer(text, dtype=np.uint8)
  if jax.process_count() == 1:
    gathered = buffer[None]
  else:
    gathered = np.asarray(multihost_utils.process_allgather(buffer)).reshape(-1, _RECORD_BYTES)
  records = [json.loads(bytes(row).rstrip(b"\0")) for row in gathered]
  name_peers({i: f"{r['host']} pid {r['pid']}" for i, r in enumerate(records)})
  return records


def _check_records(records: list[dict[str, Any]], error: BaseException | None) -> None:
  def who(i: int) -> str:
    return f"process {i} ({records[i]['host']} pid {records[i]['pid']})"

  failed = [i for i, r in enumerate(records) if r["error"]]
  if failed:
    message = "setup failed in " + "; ".join(f"{who(i)}: {records[i]['error']}" for i in failed)
    raise DistributedError(message) from error
  what = {
    "versions": "versions", "x64": "jax_enable_x64", "num_sims": "num_sims_global",
    "axis": "axis", "mesh": "mesh (devices)", "settings": "fields, shared, select or keyframe",
    "model": "model (sha256 of its fields)",
  }
  problems = []
  for key, label in what.items():
    values = [json.dumps(r[key], sort_keys=True) for r in records]
    if len(set(values)) > 1:
      differ = [i for i, v in enumerate(values) if v != values[0]]
      shown = "; ".join(f"{who(i)}: {values[i]}" for i in [0, *differ[:3]])
      problems.append(f"{label} differs: {shown}")
  engines = [r["engine"] for r in records]
  if not problems and len(set(engines)) > 1:
    problems.append(
      "the engine id, which every compiled program carries, differs ("
      + ", ".join(f"process {i}: {e}" for i, e in enumerate(engines[:8]))
      + "): make the same Simulators in the same order in every process, or call setup first"
    )
  if problems:
    raise DistributedError("the processes disagree: " + "\n  ".join(["", *problems]))


# -- the result ---------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class Distributed:
  """One process's view of a global batch: its Simulator, the mesh, and array helpers.

  Global arrays of rows are sharded over `axis`: this process holds rows `rows` of them. A
  function over rows runs on every process's rows with `map` (jit of shard_map), and inside it
  `jax.lax.pmean(x, axis)` averages over all processes.

  Attributes:
    sim: this process's Simulator (the same model and engine id in every process).
    mesh: 1-D over every process's CPU devices, axis `axis`.
    axis: the mesh axis name.
    num_sims: simulations over all processes.
    rows: this process's rows of the global batch.
    state: the initial (num_sims, nstate) state (at setup's keyframe), a global array.
    params: setup's fields as a Params of global arrays (shared leaves replicated).
    fields: the model fields of params, as Simulator.params takes them.
    shared: those of fields whose leaves are one value for every simulation (replicated).
    select: for some fields, the rows the leaves hold, as Simulator.params takes it (None: all).
    keyframe: the keyframe (index or name) of the initial state; None: the model's default.
    records: what each process reported at setup, by process index: its host and pid, its
      versions, jax_enable_x64, num_sims and axis, digests of its mesh, settings and model,
      its engine id and any error (a list of dicts, the same in every process).
  """

  sim: Simulator
  mesh: Mesh
  axis: str
  num_sims: int
  rows: slice
  fields: Sequence[str] = ()
  shared: Sequence[str] = ()
  select: Mapping[str, Sequence[int | str]] | None = None
  keyframe: int | str | None = None
  records: list[dict[str, Any]] = dataclasses.field(default_factory=list, repr=False)

  def __post_init__(self) -> None:
    self.state = self.init_state(self.keyframe)
    self.params = self.make_params(self.fields, self.shared, self.select)

  @property
  def num_local(self) -> int:
    """This process's simulations."""
    return self.rows.stop - self.rows.start

  @property
  def process_index(self) -> int:
    return jax.process_index()

  @property
  def process_count(self) -> int:
    return jax.process_count()

  @property
  def sharding(self) -> NamedSharding:
    """Rows split over the processes' devices."""
    return NamedSharding(self.mesh, PartitionSpec(self.axis))

  @property
  def replicated(self) -> NamedSharding:
    """The same value in every process."""
    return NamedSharding(self.mesh, PartitionSpec())

  def close(self) -> None:
    self.sim.close()

  def __enter__(self) -> "Distributed":
    return self

  def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
    if error is not None:  # sys.exit(1) inside the block stops the others too (report_exit)
      report_exit(error)
    self.close()

  # Arrays. Each process passes only its rows; JAX assembles the global array without copying
  # rows between processes.

  def shard(self, local: Any) -> Any:
    """A pytree of this process's rows (leading dimension num_local) as global arrays.

    Example:
      ctrl = dist.shard(np.zeros((dist.num_local, dist.sim.nu)))
    """
    def one(x: Any) -> jax.Array:
      x = np.asarray(x)
      if x.ndim == 0 or x.shape[0] != self.num_local:
        raise ValueError(f"this process's rows must have leading dimension {self.num_local}, "
                         f"got shape {x.shape}")
      return jax.make_array_from_process_local_data(self.sharding, x)

    return jax.tree.map(one, local)

  def replicate(self, tree: Any) -> Any:
    """A pytree of values that are the same in every process, as replicated global arrays.

    Example:
      weights = dist.replicate(np.zeros((4, 1)))
    """
    return jax.tree.map(
      lambda x: jax.make_array_from_process_local_data(self.replicated, np.asarray(x)), tree
    )

  def from_rows(self, fn: Callable[[np.ndarray], Any]) -> Any:
    """Global arrays whose rows are fn(indices of global rows): each process calls it on its own.

    Example:
      masses = dist.from_rows(lambda rows: 1.0 + 0.01 * rows[:, None])  # (num_sims, 1)
    """
    return self.shard(fn(np.arange(self.rows.start, self.rows.stop)))

  def zeros(self, *shape: int, dtype: Any = None) -> jax.Array:
    """(num_sims, *shape) zeros, e.g. controls.

    Example:
      ctrl = dist.zeros(dist.sim.nu)
    """
    return self.shard(np.zeros((self.num_local, *shape), dtype=dtype or jnp.result_type(float)))

  def init_state(self, keyframe: int | str | None = None) -> jax.Array:
    """The (num_sims, nstate) initial state, as Simulator.init_state, a global array."""
    return self.shard(np.asarray(self.sim.init_state(self.num_local, keyframe)))

  def make_params(self, fields: Sequence[str] = (), shared: Sequence[str] = (),
                  select: Mapping[str, Sequence[int | str]] | None = None) -> Params:
    """Simulator.params as global arrays: per-simulation leaves sharded, shared ones replicated.

    Example:
      params = dist.make_params(("body_mass", "opt.gravity"), shared=("opt.gravity",))
    """
    local = self.sim.params(self.num_local, fields, shared, select)
    spec = local.spec
    values = tuple(
      self.replicate(v) if spec.is_shared(i) else self.shard(v)
      for i, v in enumerate(local.values())
    )
    return Params(spec, values)

  def local(self, x: jax.Array) -> np.ndarray:
    """This process's rows of a global array, as numpy; a replicated one (of any rank, a scalar
    too) whole, as every process holds it.

    Example:
      cost = float(dist.local(cost))  # a replicated result of dist.map(..., out_specs=P())
    """
    if not isinstance(x, jax.Array):
      raise ValueError(f"x must be a global jax.Array, got {type(x).__name__}")
    if x.sharding.is_fully_replicated:
      return np.asarray(x.addressable_data(0))

    def whole(index: slice, size: int) -> bool:
      return (index.start or 0) == 0 and (size if index.stop is None else index.stop) == size

    rows: dict[int, Any] = {}  # by first row: devices that hold the same rows give them once
    for shard in x.addressable_shards:
      if x.ndim == 0 or not all(map(whole, shard.index[1:], x.shape[1:])):
        raise ValueError(f"x must be split along its first axis only (the simulations'), got "
                         f"one split as {x.sharding}: dist.gather gives it whole")
      rows.setdefault(shard.index[0].start or 0, shard)
    return np.concatenate([np.asarray(rows[start].data) for start in sorted(rows)])

  def gather(self, tree: Any) -> Any:
    """The whole of every global array of a pytree, as numpy, in every process.

    Example:
      all_rows = dist.gather(state)  # (num_sims, nstate)
    """
    if jax.process_count() == 1:
      return jax.tree.map(np.asarray, tree)
    return multihost_utils.process_allgather(tree, tiled=True)

  def specs(self, tree: Any) -> Any:
    """The PartitionSpecs of a pytree's global arrays (P() for anything else): in_specs."""
    def spec(x: Any) -> PartitionSpec:
      sharding = getattr(x, "sharding", None)
      return sharding.spec if isinstance(sharding, NamedSharding) else PartitionSpec()

    return jax.tree.map(spec, tree)

  # Programs.

  def map(self, fn: Callable[..., Any], out_specs: Any = None, in_specs: Any = None,
          check: bool = True) -> Callable[..., Any]:
    """jax.jit(jax.shard_map(fn)) over the mesh: fn sees this process's rows of each argument.

    Args:
      fn: a function of rows (and replicated values).
      out_specs: PartitionSpecs of the outputs (default: split over axis, a pytree prefix).
      in_specs: of the arguments (default: each argument's own sharding, `specs`).
      check: on the first call for each shape, check that every process compiles the same
        program (`check_program`): one allgather of a digest.

    Example:
      rollout = dist.map(mjbatch_jax.rollout)
      states, sensordata = rollout(dist.state, dist.zeros(100, dist.sim.nu), dist.params)
    """
    outs = PartitionSpec(self.axis) if out_specs is None else out_specs
    compiled: dict[Any, Callable[..., Any]] = {}

    def call(*args: Any) -> Any:
      specs = tuple(self.specs(a) for a in args) if in_specs is None else in_specs
      leaves, tree = jax.tree.flatten(args)
      key = (tree, tuple(jax.tree.leaves(specs)),
             tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves))
      jitted = compiled.get(key)
      if jitted is None:
        jitted = jax.jit(jax.shard_map(fn, mesh=self.mesh, in_specs=specs, out_specs=outs))
        if check:
          self.check_program(jitted, *args)
        compiled[key] = jitted
      return watched(lambda: jitted(*args))

    return call

  def check_program(self, jitted: Any, *args: Any, **kwargs: Any) -> str:
    """Check that jitted(*args) lowers to the same program in every process; return its digest.

    Multi-controller JAX needs the same program everywhere; ours carry engine ids and model
    sizes, so a process that made its Simulators in another order would compile another one.

    Example:
      dist.check_program(jax.jit(f), dist.state)
    """
    text = jitted.lower(*args, **kwargs).as_text()
    digest = hashlib.sha256(text.encode()).hexdigest()
    if jax.process_count() > 1:
      raw = np.frombuffer(bytes.fromhex(digest), dtype=np.uint8)
      every = np.asarray(multihost_utils.process_allgather(raw)).reshape(-1, raw.size)
      differ = [i for i, row in enumerate(every) if not np.array_equal(row, every[0])]
      if differ:
        raise DistributedError(
          f"process(es) {differ} compiled another program than process 0 (sha256 of the lowered "
          "text differs): every process must trace the same function with the same shapes, "
          "and make its Simulators in the same order (engine ids are in the program)"
        )
    return digest
