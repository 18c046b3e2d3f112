"""Starting JAX's multi-controller runtime: arguments, rendezvous, and a clear error when a peer
never arrives."""

import contextlib
import os
import socket
import sys
import threading
import time
from typing import Any

import jax
import numpy as np

from mjbatch_jax.distributed.errors import DEFAULT_TIMEOUT, DistributedError, PeerLostError
from mjbatch_jax.distributed.watchdog import start_watchdog, stopping_code
from mjbatch_jax.launch import (
  ENV_COORDINATOR,
  ENV_NUM_PROCESSES,
  ENV_PROCESS_ID,
  ENV_START_TIMEOUT,
  ENV_TIMEOUT,
  EXIT_PEER_LOST,
  MAX_TIMEOUT,
)


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
    coordinator: "host:port" of process 0, reachable from every process (a host that does not
      resolve raises ValueError at once, naming it).
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
    if kwargs:
      _check_resolves(kwargs["coordinator_address"])
    _exit_75_when_uncaught()
    if kwargs:
      _rendezvous(kwargs["coordinator_address"], kwargs["num_processes"], kwargs["process_id"],
                  start)
    _start_jax(kwargs, timeout, start)
  if jax.process_count() > 1:
    _no_cached_collectives()
    start_watchdog(timeout)
  return jax.process_count() > 1


# JAX 0.12.1 hangs a multi-process CPU program that it loaded from its persistent compilation
# cache in its first gloo collective (a shard_map psum; jax 0.10.2 does not; 0.11 unmeasured):
# the second run of any job with JAX_COMPILATION_CACHE_DIR set waited forever (the watchdog saw
# both processes alive). Measured without mjbatch_jax too, so it is JAX's.
_CACHE_HANGS_FROM = (0, 11)


def _no_cached_collectives() -> None:
  """Turn JAX's persistent compilation cache off where it would hang this job (see above)."""
  version = tuple(int(part) for part in jax.__version__.split(".")[:2] if part.isdigit())
  # By name: older JAX's typing does not declare these options.
  if (version < _CACHE_HANGS_FROM or jax.default_backend() != "cpu"
      or not getattr(jax.config, "jax_enable_compilation_cache", False)):
    return
  if getattr(jax.config, "jax_compilation_cache_dir", None):
    print(f"mjbatch_jax.distributed: JAX's persistent compilation cache is off in this job: JAX "
          f"{jax.__version__} hangs a multi-process CPU program it loads from there (the "
          f"programs compile anew in every run)", file=sys.stderr, flush=True)
  jax.config.update("jax_enable_compilation_cache", False)


def _timeout(timeout: float | None) -> float:
  name = "timeout"
  if timeout is None:
    text = os.environ.get(ENV_TIMEOUT)
    name = ENV_TIMEOUT if text is not None else name
    try:
      timeout = DEFAULT_TIMEOUT if text is None else float(text)
    except ValueError:
      raise ValueError(f"{ENV_TIMEOUT} must be a number of seconds, got {text!r}") from None
  if (isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.integer, np.floating))
      or not 0 < timeout <= MAX_TIMEOUT):
    raise ValueError(f"{name} must be a number of seconds in (0, {MAX_TIMEOUT:.0f}] (a day), got "
                     f"{timeout!r}")
  return float(timeout)


def _start_timeout(timeout: float) -> float:
  text = os.environ.get(ENV_START_TIMEOUT)
  if text is None:
    return max(60.0, 4 * timeout)
  try:
    value = float(text)
  except ValueError:
    value = -1.0
  if not 0 < value <= MAX_TIMEOUT:
    raise ValueError(f"{ENV_START_TIMEOUT} must be a number of seconds in (0, {MAX_TIMEOUT:.0f}] "
                     f"(a day), got {text!r}")
  return value


def _exit_75_when_uncaught() -> None:
  """Make an uncaught PeerLostError end the process with EXIT_PEER_LOST, after its traceback;
  and an uncaught error while the watchdog is ending the process (a collective that failed as
  the peer it named left) end it with the watchdog's status, quietly: its line said why.

  (os._exit: JAX's exit handlers would wait for the missing peer.)
  """
  previous = sys.excepthook
  if getattr(previous, "_mjbatch_jax", False):
    return

  def hook(kind: type[BaseException], error: BaseException, traceback: Any) -> None:
    code = stopping_code()
    if code is None:
      previous(kind, error, traceback)
    if code is not None or isinstance(error, PeerLostError):
      for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
          stream.flush()
      os._exit(EXIT_PEER_LOST if code is None else code)

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
  host, port = _host_port(coordinator)
  deadline = time.monotonic() + limit
  if me == 0:
    _gather(port, count, limit, deadline, coordinator)
  else:
    _report(host, port, me, count, limit, deadline, coordinator)


def _host_port(coordinator: str) -> tuple[str, int]:
  """A checked coordinator (_initialize_arguments) as (host, port); an IPv6 host unbracketed."""
  host, _, port = coordinator.rpartition(":")
  return host.strip("[]"), int(port)


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
      if any("_" in (found[k] or "") for k in ("num_processes", "process_id")):
        raise ValueError  # int() reads "1_0" as 10
      num_processes, process_id = int(found["num_processes"] or ""), int(found["process_id"] or "")
    except ValueError:
      raise ValueError(f"{ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} must be ints, got "
                       f"{found['num_processes']!r} and {found['process_id']!r}") from None
  host, _, port = coordinator.rpartition(":") if isinstance(coordinator, str) else ("", "", "")
  if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
    raise ValueError(f"the coordinator ({ENV_COORDINATOR} or initialize's coordinator) must be "
                     f"'host:port' with a port in [1, 65535], got {coordinator!r}")
  for name, value in (("num_processes", num_processes), ("process_id", process_id)):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
      raise ValueError(f"{name} must be an int, got {value!r}")
  assert num_processes is not None and process_id is not None
  if not 0 <= process_id < num_processes:
    raise ValueError(f"process_id must be in [0, num_processes={num_processes}), got {process_id}")
  return {"coordinator_address": coordinator, "num_processes": int(num_processes),
          "process_id": int(process_id)}


def _check_resolves(coordinator: str) -> None:
  """ValueError naming the coordinator's host unless it resolves to an address.

  Every process, process 0 too, connects to it; JAX's client retries a name that does not
  resolve until the start timeout, and the failure then reads as a missing process.
  """
  host, port = _host_port(coordinator)
  try:
    socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
  except (OSError, UnicodeError) as error:  # UnicodeError: a label longer than 63 characters
    raise ValueError(f"the coordinator's host {host!r} (of {ENV_COORDINATOR} or initialize's "
                     f"coordinator {coordinator!r}) does not resolve to an address: {error}; "
                     "expected a host name or IP address every process can reach") from None


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
