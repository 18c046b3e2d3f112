"""Many processes, one batch: mjbatch_jax on JAX's own multi-controller runtime.

Every process runs the same program (multi-controller JAX): it calls `setup`, which starts
`jax.distributed.initialize` (unless the caller did), makes this process's `Simulator`, checks
that every process has the same model, versions and settings, and returns a `Distributed`: the
simulator, a global 1-D mesh over every process's CPU devices, and helpers that make globally
sharded arrays of which each process builds only its own rows. A function of rows under
`jax.jit(jax.shard_map(...))` over that mesh then runs each process's custom calls on its rows
only, and collectives (`jax.lax.pmean`, `psum`) cross processes through gloo.

  # python -m mjbatch_jax.launch -n 2 train.py     (or one such process per host, see
  # docs/distributed.md)
  dist = mjbatch_jax.distributed.setup(model, num_sims_global=4096, fields=("body_mass",))
  step = dist.map(mjbatch_jax.step)              # jit(shard_map(...)) over dist.mesh
  state = step(dist.state, dist.zeros(dist.sim.nu), dist.params)
  rows = dist.gather(state)                      # (4096, nstate) numpy, in every process

No runtime of our own: processes find each other through JAX's coordination service, from
arguments, from the MJBATCH_JAX_* variables that `python -m mjbatch_jax.launch` sets, or by
JAX's own detection (SLURM, Open MPI). What we add is checking, and a watchdog: a process whose
peer died or hangs stops within `timeout` seconds with a message naming that peer (exit status
EXIT_PEER_LOST), instead of waiting in a collective for a peer that never comes.
"""

import atexit
import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mjbatch_jax._extension import ext
from mjbatch_jax.launch import (
  ENV_COORDINATOR,
  ENV_NUM_PROCESSES,
  ENV_PROCESS_ID,
  ENV_START_TIMEOUT,
  ENV_TIMEOUT,
  EXIT_PEER_LOST,
)
from mjbatch_jax.params import Params, model_digest
from mjbatch_jax.simulator import Simulator

DEFAULT_TIMEOUT = 30.0
# EXIT_PEER_LOST (75): the status of a process stopped because another one failed or went
# silent, sysexits' "temporary failure, try again": for training, resume from the checkpoint.

_KEY = "mjbatch_jax/watchdog"  # our keys in the coordination service's key-value store
_EXITED = "exited"  # the status of a process that left cleanly (others: "failed: ...", ...)
_RECORD_BYTES = 1024  # one process's setup record, padded, for a fixed-shape allgather


class DistributedError(RuntimeError):
  """The processes disagree (model, versions, settings, compiled program) or one failed."""


class PeerLostError(DistributedError):
  """A process never arrived (or left) while the processes were starting.

  Left uncaught, it ends the process with EXIT_PEER_LOST (75), as a peer lost later does.
  """


# -- starting JAX's runtime ---------------------------------------------------------------------


def initialize(
  coordinator: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
  timeout: float | None = None,
) -> bool:
  """Start JAX's distributed runtime unless it runs; return whether there are other processes.

  Where from, in order: the arguments; MJBATCH_JAX_COORDINATOR, _NUM_PROCESSES and _PROCESS_ID
  (set by `python -m mjbatch_jax.launch`); JAX's own detection when JAX_COORDINATOR_ADDRESS, a
  SLURM job step of several tasks or Open MPI is found (`jax.distributed.initialize()` without
  arguments); else this process is alone and nothing starts. A runtime the caller started with
  `jax.distributed.initialize` is used as it is. CPU collectives are gloo. Once several
  processes run, a watchdog stops this one (exit status EXIT_PEER_LOST, a message naming the
  peer) when another fails or sends no heartbeat for `timeout` seconds.

  Must run before any JAX computation (JAX's rule); `setup` calls it.

  Args:
    coordinator: "host:port" of process 0, reachable from every process.
    num_processes: how many processes.
    process_id: this one's, in [0, num_processes).
    timeout: seconds of silence after which a peer counts as lost (default:
      MJBATCH_JAX_PEER_TIMEOUT, else 30). JAX's own heartbeat timeout is set to twice it, as
      the backstop. Every process must arrive at the coordinator within
      MJBATCH_JAX_START_TIMEOUT seconds (default max(60, 4 timeout)) of starting there: else
      initialize raises PeerLostError naming the processes that never arrived (uncaught, it
      ends the process with status 75, as a lost peer does).

  Example:
    if mjbatch_jax.distributed.initialize():
      print("process", jax.process_index(), "of", jax.process_count())
  """
  timeout = _timeout(timeout)
  if not jax.distributed.is_initialized():
    kwargs = _initialize_arguments(coordinator, num_processes, process_id)
    if kwargs is None:
      return False
    start = _start_timeout(timeout)
    _exit_75_when_uncaught()
    if kwargs:
      _rendezvous(kwargs["coordinator_address"], kwargs["num_processes"], kwargs["process_id"],
                  start)
    _start_jax(kwargs, timeout, start)
  if jax.process_count() > 1:
    _start_watchdog(timeout)
  return jax.process_count() > 1


def _timeout(timeout: float | None) -> float:
  if timeout is None:
    text = os.environ.get(ENV_TIMEOUT)
    try:
      timeout = DEFAULT_TIMEOUT if text is None else float(text)
    except ValueError:
      raise ValueError(f"{ENV_TIMEOUT} must be a number of seconds, got {text!r}") from None
  if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
    raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
  return float(timeout)


def _start_timeout(timeout: float) -> float:
  text = os.environ.get(ENV_START_TIMEOUT)
  if text is None:
    return max(60.0, 4 * timeout)
  try:
    value = float(text)
  except ValueError:
    value = -1.0
  if not value > 0:
    raise ValueError(f"{ENV_START_TIMEOUT} must be a number of seconds > 0, got {text!r}")
  return value


def _exit_75_when_uncaught() -> None:
  """Make an uncaught PeerLostError end the process with EXIT_PEER_LOST, after its traceback.

  (os._exit: JAX's exit handlers would wait for the missing peer.)
  """
  previous = sys.excepthook
  if getattr(previous, "_mjbatch_jax", False):
    return

  def hook(kind: type[BaseException], error: BaseException, traceback: Any) -> None:
    previous(kind, error, traceback)
    if isinstance(error, PeerLostError):
      for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
          stream.flush()
      os._exit(EXIT_PEER_LOST)

  hook._mjbatch_jax = True  # type: ignore[attr-defined]
  sys.excepthook = hook


# The start-up handshake: every process says who it is to process 0, at the coordinator's own
# address, before JAX's runtime starts there. JAX would wait for a missing process until its
# initialization timeout and then abort the process from C++ (an absl "Check failure"); here
# process 0 knows who arrived, and every process raises PeerLostError naming the missing ones.
_HELLO, _GO, _MISSING = "mjbatch_jax hello", "mjbatch_jax go", "mjbatch_jax missing"


def _whoami() -> str:
  return f"{socket.gethostname()} pid {os.getpid()}"


def _rendezvous(coordinator: str, count: int, me: int, limit: float) -> None:
  """Return once all count processes arrived at coordinator; PeerLostError after limit s."""
  if count < 2:
    return
  host, _, port_text = coordinator.rpartition(":")
  port = int(port_text)
  deadline = time.monotonic() + limit
  if me == 0:
    _gather(port, count, limit, deadline, coordinator)
  else:
    _report(host.strip("[]"), port, me, count, limit, deadline, coordinator)


def _gather(port: int, count: int, limit: float, deadline: float, coordinator: str) -> None:
  family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
  try:
    server = socket.create_server(("", port), family=family,
                                  dualstack_ipv6=family == socket.AF_INET6)
  except OSError as error:
    raise DistributedError(f"process 0 cannot listen at the coordinator {coordinator}: {error}"
                           " (is the port taken?)") from None
  arrived: dict[int, tuple[socket.socket, str]] = {}
  with server:
    server.settimeout(0.2)
    while len(arrived) < count - 1 and time.monotonic() < deadline:
      try:
        conn, _ = server.accept()
      except TimeoutError:
        continue
      conn.settimeout(5.0)
      try:
        words = conn.makefile().readline().split(" ", 3)
        process, where = int(words[2]), words[3].strip()
        if words[:2] != _HELLO.split() or not 0 < process < count:
          raise ValueError(words)
      except (OSError, ValueError, IndexError):
        conn.close()  # not one of ours: a port scan, a stale peer
        continue
      if process in arrived:
        arrived[process][0].close()
      arrived[process] = (conn, where)
    missing = [k for k in range(1, count) if k not in arrived]
    reply = f"{_MISSING} {','.join(map(str, missing))}\n" if missing else f"{_GO}\n"
    for conn, _ in arrived.values():
      with contextlib.suppress(OSError):
        conn.sendall(reply.encode())
    # The peers close first, so that no connection of process 0 lingers on the port JAX binds.
    for conn, _ in arrived.values():
      with contextlib.suppress(OSError):
        conn.settimeout(5.0)
        conn.recv(1)
      conn.close()
  if missing:
    names = ", ".join(f"process {k}" for k in missing)
    raise PeerLostError(
      f"process 0 of {count} ({_whoami()}): {names} of {count} never arrived at the "
      f"coordinator {coordinator} within {limit:.0f} s (they did not start, exited before "
      f"setup, or cannot reach it); the others arrived. {ENV_START_TIMEOUT} sets the time"
    )


def _report(host: str, port: int, me: int, count: int, limit: float, deadline: float,
            coordinator: str) -> None:
  who = f"process {me} of {count} ({_whoami()})"
  while True:
    try:
      conn = socket.create_connection((host, port), timeout=2.0)
      break
    except OSError:
      if time.monotonic() > deadline:
        raise PeerLostError(
          f"{who}: process 0 never answered at the coordinator {coordinator} within "
          f"{limit:.0f} s (it did not start, exited before setup, or cannot be reached). "
          f"{ENV_START_TIMEOUT} sets the time"
        ) from None
      time.sleep(0.2)
  with conn:
    conn.sendall(f"{_HELLO} {me} {_whoami()}\n".encode())
    # Process 0 answers when all arrived or at its own deadline, which may be later than ours.
    conn.settimeout(limit + 30.0)
    try:
      reply = conn.makefile().readline().strip()
    except OSError:
      reply = ""
  if reply == _GO:
    return
  if reply.startswith(_MISSING):
    missing = reply[len(_MISSING):].strip().split(",")
    names = ", ".join(f"process {k}" for k in missing)
    raise PeerLostError(f"{who}: {names} of {count} never arrived at the coordinator "
                        f"{coordinator} within the start timeout (process 0 says)")
  raise PeerLostError(f"{who}: process 0 at the coordinator {coordinator} left while the "
                      "processes were arriving")


def _initialize_arguments(
  coordinator: str | None, num_processes: int | None, process_id: int | None
) -> dict[str, Any] | None:
  """jax.distributed.initialize's arguments, {} to let JAX detect them, None for one process."""
  given = {"coordinator": coordinator, "num_processes": num_processes, "process_id": process_id}
  if any(v is not None for v in given.values()):
    missing = [k for k, v in given.items() if v is None]
    if missing:
      raise ValueError(f"initialize needs coordinator, num_processes and process_id; {missing}"
                       " missing")
  else:
    env = {ENV_COORDINATOR: "coordinator", ENV_NUM_PROCESSES: "num_processes",
           ENV_PROCESS_ID: "process_id"}
    found = {name: os.environ.get(var) for var, name in env.items()}
    if all(v is None for v in found.values()):
      return {} if _cluster_detectable() else None
    missing = [var for var, name in env.items() if found[name] is None]
    if missing:
      raise ValueError(f"{', '.join(missing)} not set, but {ENV_COORDINATOR}, "
                       f"{ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} go together")
    coordinator = found["coordinator"]
    try:
      num_processes, process_id = int(found["num_processes"] or ""), int(found["process_id"] or "")
    except ValueError:
      raise ValueError(f"{ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} must be ints, got "
                       f"{found['num_processes']!r} and {found['process_id']!r}") from None
  if not isinstance(coordinator, str) or ":" not in coordinator:
    raise ValueError(f"the coordinator must be 'host:port', got {coordinator!r}")
  for name, value in (("num_processes", num_processes), ("process_id", process_id)):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
      raise ValueError(f"{name} must be an int, got {value!r}")
  assert num_processes is not None and process_id is not None
  if not 0 <= process_id < num_processes:
    raise ValueError(f"process_id must be in [0, num_processes={num_processes}), got {process_id}")
  return {"coordinator_address": coordinator, "num_processes": int(num_processes),
          "process_id": int(process_id)}


def _cluster_detectable() -> bool:
  """Whether jax.distributed.initialize() would find a cluster of several processes itself."""
  if os.environ.get("JAX_COORDINATOR_ADDRESS"):
    return True
  slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
  with contextlib.suppress(ValueError):
    # What JAX's SLURM detection needs: a job step (srun) of several tasks.
    if all(v in os.environ for v in slurm) and int(os.environ["SLURM_NTASKS"]) > 1:
      return True
    # And what its Open MPI detection needs (mpirun of Open MPI 4).
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    if "OMPI_MCA_orte_hnp_uri" in os.environ and size > 1:
      return True
  return False


def _start_jax(kwargs: dict[str, Any], timeout: float, start: float) -> None:
  # Gloo is jax 0.10's default for CPU collectives already; set it in case that changes.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  # Everyone arrived (the handshake), so JAX's own wait is short; should a process vanish in
  # between, JAX would abort this one at its initialization timeout: end it first, with 75.
  guard = threading.Timer(start, _never_started, args=(kwargs, start))
  guard.daemon = True
  guard.start()
  try:
    jax.distributed.initialize(
      **kwargs,
      initialization_timeout=int(start) + 30,
      heartbeat_timeout_seconds=int(max(2.0, 2 * timeout)),
    )
  except RuntimeError as error:
    if "must be called before" in str(error):
      raise RuntimeError(
        "JAX's distributed runtime must start before any JAX computation, and this process "
        "already ran one: call mjbatch_jax.distributed.initialize() (or setup) at the top of "
        "the script, before making arrays or Simulators' states"
      ) from error
    raise
  finally:
    guard.cancel()


def _never_started(kwargs: dict[str, Any], start: float) -> None:
  who = f"process {kwargs.get('process_id', '?')} of {kwargs.get('num_processes', '?')}"
  print(f"mjbatch_jax.distributed: {who} ({_whoami()}) stops: JAX's distributed runtime did not "
        f"start within {start:.0f} s at the coordinator {kwargs.get('coordinator_address', '?')}"
        " (a process is missing or left)", file=sys.stderr, flush=True)
  os._exit(EXIT_PEER_LOST)


# -- the watchdog -------------------------------------------------------------------------------


class _Watchdog:
  """Heartbeats through JAX's key-value store; stops this process when a peer is gone.

  Each process writes its beat counter every `interval` and reads the counter of the next
  process in a ring (constant traffic per process at any scale) and the directory of failures.
  A process that raised an uncaught exception publishes it on the way out; one that finds its
  ring neighbour silent for `timeout` publishes that; every other process reads the directory
  and stops, naming the process at fault, within a few intervals. A coordinator (process 0)
  that is gone or hangs shows as failing or hanging calls of the store.

  JAX's own heartbeats also end a process when a peer dies, but only after its heartbeat
  timeout, from C++, with a message that says which task only in the coordinator's log.
  """

  def __init__(self, client: Any, timeout: float):
    self.client = client
    self.timeout = timeout
    self.interval = min(1.0, timeout / 10)
    self.me, self.count = jax.process_index(), jax.process_count()
    self.watched = (self.me + 1) % self.count
    self.coordinator = getattr(_jax_state(), "coordinator_address", None) or "?"
    self.last_ok = time.monotonic()
    self.closing = False  # the interpreter is exiting
    self.failed: str | None = None  # the exception that ended this process's script
    self.stopping = threading.Lock()
    self.names: dict[int, str] = {}  # process -> "host pid N", once setup has exchanged them
    self.quit = threading.Event()  # set at a clean exit: the threads leave their loops
    self.threads: list[threading.Thread] = []

  def start(self) -> None:
    for target in (self._beat, self._judge):
      thread = threading.Thread(target=target, name=f"mjbatch_jax{target.__name__}", daemon=True)
      thread.start()
      self.threads.append(thread)
    # Registered after JAX's own exit handler, so it runs first (atexit is last in, first out).
    atexit.register(self._at_exit)

  def name(self, process: int) -> str:
    where = self.names.get(process)
    return f"process {process} of {self.count}" + (f" ({where})" if where else "")

  def _at_exit(self) -> None:
    self.closing = True
    # Python keeps the exception that ends a script here, before the exit handlers run.
    error = getattr(sys, "last_value", None)
    if error is not None:
      text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
      self.failed = text.splitlines()[0][:300]
      # The others would wait in a collective for this process forever: tell them now.
      self._publish(f"failed: {self.failed}")
      # The watchdog keeps running: it ends this process when the others have seen the failure,
      # which JAX's shutdown barrier would otherwise wait for until its own timeout.
      return
    # A clean exit. The others must not take this process's silence from now on (it may wait
    # in JAX's shutdown barrier for a while) for a loss, so say it is leaving. Then the threads
    # must leave JAX's C++ calls before the interpreter finalizes: a daemon thread that comes
    # back from one then is ended by pthread_exit, whose unwinding through the binding's
    # catch-all frames aborts the process ("exception not rethrown").
    self._publish(_EXITED)
    self.quit.set()
    for thread in self.threads:
      thread.join(timeout=max(5.0, 2 * self.timeout))

  def _publish(self, status: str) -> None:
    """Best effort: the store may be gone or hang, and this must not."""
    done = threading.Event()

    def put() -> None:
      with contextlib.suppress(Exception):
        self.client.key_value_set(f"{_KEY}/exit/{self.me}", status, allow_overwrite=True)
      done.set()

    try:
      threading.Thread(target=put, daemon=True).start()
    except RuntimeError:  # at interpreter shutdown (Python >= 3.12 refuses new threads then)
      put()
    done.wait(2.0)

  def _stop(self, reason: str, publish: bool = True, reaction: bool = False) -> None:
    """Say why and end the process now; reaction: the others stopped after this one failed."""
    if not self.stopping.acquire(blocking=False):
      return
    if publish:
      self._publish(f"stopped: {reason}")
    if self.failed is not None and self.closing:
      # This process failed and is leaving; JAX's shutdown would wait for peers that are gone.
      code = 1 if reaction else EXIT_PEER_LOST
      text = f"{self.name(self.me)} exits after its error ({self.failed}): {reason}"
    else:
      code = EXIT_PEER_LOST
      text = f"{self.name(self.me)} stops: {reason}"
    with contextlib.suppress(Exception):
      print(f"mjbatch_jax.distributed: {text}", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
      with contextlib.suppress(Exception):
        stream.flush()
    os._exit(code)

  def _beat(self) -> None:
    beat, seen, since = 0, None, time.monotonic()
    while not self.quit.is_set():
      beat += 1
      try:
        self.client.key_value_set(f"{_KEY}/beat/{self.me}", str(beat), allow_overwrite=True)
        failures = self.client.key_value_dir_get(f"{_KEY}/exit/")
        try:
          value = self.client.key_value_try_get(f"{_KEY}/beat/{self.watched}")
        except Exception:  # not written yet
          value = None
      except Exception as error:
        if self.closing:
          return  # JAX shut its client down after a clean exit
        first = str(error).strip().splitlines()[0][:200] if str(error).strip() else repr(error)
        self._stop(f"lost the coordinator, process 0 at {self.coordinator}: {first}",
                   publish=False)
        return
      now = time.monotonic()
      self.last_ok = now
      others = [(int(key.rsplit("/", 1)[-1]), status) for key, status in failures]
      exited = {process for process, status in others if status == _EXITED}
      others = [(process, status) for process, status in others
                if process != self.me and status != _EXITED]
      if others:
        # Name the root cause (a failure) rather than another process that stopped after it;
        # publish too, so that a failed process waiting in JAX's shutdown sees everyone left.
        process, status = min(others, key=lambda entry: not entry[1].startswith("failed"))
        self._stop(f"{self.name(process)} {status}", reaction=self.failed is not None)
      if value != seen or self.watched in exited:
        seen, since = value, now
      elif now - since > self.timeout:
        self._stop(f"lost {self.name(self.watched)}: no heartbeat for {now - since:.0f} s (it "
                   "died, hangs or cannot reach the coordinator)")
      self.quit.wait(self.interval)

  def _judge(self) -> None:
    """Catches a coordinator that hangs: the store's calls then block instead of failing."""
    while not self.quit.wait(self.interval):
      silent = time.monotonic() - self.last_ok
      if silent > self.timeout and not self.closing:
        self._stop(f"lost the coordinator, process 0 at {self.coordinator}: no answer for "
                   f"{silent:.0f} s", publish=False)


_watchdog: _Watchdog | None = None


def _jax_state() -> Any:
  # JAX keeps its client private; its key-value store is the only channel every process shares.
  from jax._src import distributed as jax_distributed

  return jax_distributed.global_state


def _start_watchdog(timeout: float) -> None:
  global _watchdog
  if _watchdog is not None:
    return
  client = getattr(_jax_state(), "client", None)
  if client is None or not hasattr(client, "key_value_dir_get"):
    print("mjbatch_jax.distributed: no watchdog (this JAX hides its key-value store); a lost "
          "peer ends this process after JAX's heartbeat timeout", file=sys.stderr)
    return
  _watchdog = _Watchdog(client, timeout)
  _watchdog.start()


# -- setup --------------------------------------------------------------------------------------


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
  then checks, with one allgather, that every process has the same model (sha256 of its
  mj_saveModel bytes), mjbatch_jax, MuJoCo, jax and jaxlib versions, jax_enable_x64, batch,
  fields and keyframe, and the same engine id, which compiled programs carry: the first
  Simulator of a model in a process gets the same id in every process that makes its Simulators
  in the same order. A difference raises DistributedError in every process, naming them.
  Without other processes it is the same on this process's devices alone.

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
  settings = repr((tuple(fields), tuple(shared), sorted((select or {}).items()), keyframe))
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
  if _watchdog is not None:
    _watchdog.names = {i: f"{r['host']} pid {r['pid']}" for i, r in enumerate(records)}
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
    "model": "model (sha256 of its mj_saveModel bytes)",
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

  def __exit__(self, *exc: Any) -> None:
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
    if x.sharding.is_fully_replicated:
      return np.asarray(x.addressable_data(0))
    shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.concatenate([np.asarray(s.data) for s in shards])

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
      return jitted(*args)

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


__all__ = [
  "DEFAULT_TIMEOUT",
  "ENV_COORDINATOR",
  "ENV_NUM_PROCESSES",
  "ENV_PROCESS_ID",
  "ENV_TIMEOUT",
  "EXIT_PEER_LOST",
  "Distributed",
  "DistributedError",
  "PeerLostError",
  "initialize",
  "model_digest",
  "setup",
  "versions",
]
