"""Run N processes of one script on this machine, as one JAX multi-controller job.

  python -m mjbatch_jax.launch -n 4 script.py ARGS...
  python -m mjbatch_jax.launch -n 2 -m package.module ARGS...

Each process gets the coordinator's address (127.0.0.1 and a free port), the process count and
its id in MJBATCH_JAX_COORDINATOR, MJBATCH_JAX_NUM_PROCESSES and MJBATCH_JAX_PROCESS_ID, which
`mjbatch_jax.distributed.setup` (or `initialize`) reads. Their output comes through line by
line with a "[rank] " prefix. When one exits with an error or is killed, the launcher says which
and stops the others (SIGTERM, then SIGKILL), after --grace seconds in which they may stop on
their own; it then exits with that rank's status (128 + signal for a signal), naming any rank
that had ended early with status 0 (the others wait for it in their collectives). It is a
convenience for one machine: on several hosts start one process per host with the same
variables (docs/distributed.md), or let JAX read SLURM's.
"""

import argparse
import contextlib
import ctypes
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

# What each process finds in its environment; mjbatch_jax.distributed reads them. (Here rather
# than there, so that the launcher itself never imports jax.)
ENV_COORDINATOR = "MJBATCH_JAX_COORDINATOR"
"""The environment variable of the coordinator's address, "host:port" of process 0's
coordination service, which the launcher sets for every process and
mjbatch_jax.distributed.initialize reads (with ENV_NUM_PROCESSES and ENV_PROCESS_ID)."""
ENV_NUM_PROCESSES = "MJBATCH_JAX_NUM_PROCESSES"
"""The environment variable of how many processes the job has, an int; set by the launcher,
read by mjbatch_jax.distributed.initialize."""
ENV_PROCESS_ID = "MJBATCH_JAX_PROCESS_ID"
"""The environment variable of this process's id (rank), an int in [0, num_processes); set by
the launcher, read by mjbatch_jax.distributed.initialize."""
ENV_TIMEOUT = "MJBATCH_JAX_PEER_TIMEOUT"
"""The environment variable of the seconds of silence after which a process counts a peer as
lost (a number > 0; default DEFAULT_TIMEOUT): initialize's timeout where none is passed, set by
the launcher's --peer-timeout."""
ENV_START_TIMEOUT = "MJBATCH_JAX_START_TIMEOUT"
"""The environment variable of the seconds within which every process must arrive at the
coordinator (a number > 0; default max(60, 4 x the peer timeout)); past it initialize raises
PeerLostError naming those that never arrived."""

# Seconds between SIGTERM and SIGKILL: short, as JAX's preemption notifier takes SIGTERM as a
# notice to checkpoint and carries on.
_TERM_WAIT = 2.0
_PEER_LOST_WAIT = 3.0  # seconds to wait for the cause after a rank exits with EXIT_PEER_LOST
EXIT_PEER_LOST = 75
"""The exit status of a process stopped because another one failed or went silent (sysexits'
EX_TEMPFAIL, "temporary failure, try again": for training, resume from the checkpoint). The
launcher reports the first rank that failed with another status as the cause."""


MAX_PROCESSES = 1024
"""The most ranks `launch` starts: they all run on this machine, so more is a typo, not a job."""

MAX_TIMEOUT = 86400.0
"""The longest peer or start timeout in seconds (a day), the launcher's and initialize's: JAX
takes its timeouts as C ints of seconds, and no start or silence is worth waiting longer."""


def free_port() -> int:
  """A TCP port free on 127.0.0.1 right now (the coordinator binds it a moment later)."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def _die_with_parent() -> None:
  # Linux: a rank gets SIGKILL when the launcher dies, however it dies, so none is orphaned.
  # (Not SIGTERM: JAX's preemption notifier takes that as a notice and carries on.)
  with contextlib.suppress(Exception):
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _forward(rank: int, source: IO[bytes], sink: IO[str], lock: threading.Lock) -> None:
  prefix = f"[{rank}] "
  for raw in iter(source.readline, b""):
    line = raw.decode(errors="replace").rstrip("\n")
    with lock:
      sink.write(prefix + line + "\n")
      sink.flush()
  source.close()


def describe(code: int) -> str:
  """'exited with code 3' or 'was killed by SIGKILL' for a Popen returncode."""
  if code < 0:
    try:
      name = signal.Signals(-code).name
    except ValueError:
      name = f"signal {-code}"
    return f"was killed by {name}"
  return f"exited with code {code}"


def launch(
  num_processes: int,
  command: Sequence[str],
  port: int | None = None,
  grace: float = 0.0,
  timeout: float | None = None,
  peer_timeout: float | None = None,
) -> int:
  """Run command (after the Python interpreter) in num_processes ranks; return the exit status.

  Args:
    num_processes: how many ranks.
    command: arguments after `python`: a script and its arguments, or "-m", a module, ...
    port: the coordinator's port (default: a free one).
    grace: seconds the others may take to stop on their own after one fails, before the
      launcher terminates them.
    timeout: seconds after which the launcher stops every rank and fails (default: none).
    peer_timeout: MJBATCH_JAX_PEER_TIMEOUT for the ranks: seconds of silence after which a rank
      counts another as lost.

  Example:
    status = launch(2, ["examples/pg_distributed.py", "--iterations", "10"])
  """
  _check_arguments(num_processes, command, port, grace, timeout, peer_timeout)
  port = port or free_port()
  lock = threading.Lock()
  procs: list[subprocess.Popen[bytes]] = []
  readers: list[threading.Thread] = []
  for rank in range(num_processes):
    env = dict(os.environ)
    env.update({
      ENV_COORDINATOR: f"127.0.0.1:{port}",
      ENV_NUM_PROCESSES: str(num_processes),
      ENV_PROCESS_ID: str(rank),
      "PYTHONUNBUFFERED": "1",  # lines arrive when printed, in order with the others
    })
    if peer_timeout is not None:
      env[ENV_TIMEOUT] = str(peer_timeout)
    proc = subprocess.Popen([sys.executable, *command], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
    procs.append(proc)
    for source, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
      assert source is not None
      reader = threading.Thread(target=_forward, args=(rank, source, sink, lock), daemon=True)
      reader.start()
      readers.append(reader)

  def say(text: str) -> None:
    with lock:
      print(f"[launch] {text}", file=sys.stderr, flush=True)

  def stop(ranks: list[int], why: str) -> None:
    if not ranks:
      return
    say(f"{why}; stopping rank(s) {', '.join(map(str, ranks))}")
    for r in ranks:
      with contextlib.suppress(ProcessLookupError):
        procs[r].send_signal(signal.SIGTERM)
    deadline = time.monotonic() + _TERM_WAIT
    while time.monotonic() < deadline and any(procs[r].poll() is None for r in ranks):
      time.sleep(0.05)
    for r in ranks:
      if procs[r].poll() is None:
        with contextlib.suppress(ProcessLookupError):
          procs[r].kill()
        procs[r].wait()

  interrupted: list[int] = []

  def on_signal(signum: int, _frame: object) -> None:
    interrupted.append(signum)

  previous = {}
  if threading.current_thread() is threading.main_thread():  # else Python refuses handlers
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
  start = time.monotonic()
  failures: list[tuple[int, int, float]] = []  # (rank, returncode, when), in order seen
  # Ranks that exited with status 0 while others ran, and when: legitimate (process 0 may
  # evaluate alone), but the likeliest cause when the others then hang or lose a peer.
  early: dict[int, float] = {}
  status = 0
  try:
    while True:
      now = time.monotonic()
      codes = [p.poll() for p in procs]
      for rank, code in enumerate(codes):
        if code not in (None, 0) and rank not in [f[0] for f in failures]:
          failures.append((rank, code, now))
          note = " (it lost a peer)" if code == EXIT_PEER_LOST else ""
          say(f"rank {rank} (pid {procs[rank].pid}) {describe(code)}{note}")
      running = [r for r, c in enumerate(codes) if c is None]
      if not running:
        break
      early.update({rank: now - start for rank, code in enumerate(codes)
                    if code == 0 and rank not in early})
      if interrupted:
        status = 128 + interrupted[0]
        stop(running, f"launcher got {signal.Signals(interrupted[0]).name}")
        break
      if failures:
        # A rank that stopped because it lost a peer is rarely the cause: give the cause a
        # moment to show.
        primary = any(code != EXIT_PEER_LOST for _, code, _ in failures)
        wait = grace if primary else max(grace, _PEER_LOST_WAIT)
        if now - failures[0][2] >= wait:
          stop(running, f"rank {_culprit(failures)[0]} failed")
          break
      if timeout is not None and now - start > timeout:
        status = 124
        stop(running, f"time limit of {timeout:g} s reached with rank(s) "
                      f"{', '.join(map(str, running))} running")
        break
      time.sleep(0.05)
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)
  for reader in readers:
    reader.join(timeout=5.0)
  for proc in procs:
    proc.wait()
  # No rank failed for a cause of its own (they hung, or stopped at losing a peer): one that
  # ended early is the likeliest cause.
  blame_early = bool(early) and (status != 0 or (bool(failures)
                                                and _culprit(failures)[1] == EXIT_PEER_LOST))
  if failures and not status:
    rank, code, _ = _culprit(failures)
    status = code if code > 0 else 128 - code
    say(f"failed: rank {rank} {describe(code)}; exit status {status}")
  elif status:
    say(f"exit status {status}")
  if blame_early:
    said = ", ".join(f"rank {rank} at {when:.1f} s" for rank, when in sorted(early.items()))
    say(f"before that, {said} exited with status 0 while the others ran: a rank that ends its "
        "script early leaves the others waiting for it in any collective that needs it")
  return status


def _check_arguments(num_processes, command, port, grace, timeout, peer_timeout) -> None:
  """Every argument in its range before any process starts: after, a bad one would leave the
  ranks running (a NaN grace or timeout was never reached)."""

  def number(value: object) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None  # type: ignore[arg-type]

  if (not isinstance(num_processes, int) or isinstance(num_processes, bool)
      or not 1 <= num_processes <= MAX_PROCESSES):
    raise ValueError(f"-n must be an int in [1, {MAX_PROCESSES}], got {num_processes!r}")
  if (isinstance(command, (str, bytes)) or not isinstance(command, Sequence) or not command
      or not all(isinstance(word, str) for word in command)):
    raise ValueError(f"the command must be a non-empty list of strings (a script and its "
                     f"arguments, or '-m', a module, ...), got {command!r}")
  if port is not None and (not isinstance(port, int) or isinstance(port, bool)
                           or not 1 <= port <= 65535):
    raise ValueError(f"--port must be an int in [1, 65535], got {port!r}")
  grace_s = number(grace)
  if grace_s is None or grace_s < 0:
    raise ValueError(f"--grace must be a finite number of seconds >= 0, got {grace!r}")
  for name, value in (("--timeout", timeout), ("--peer-timeout", peer_timeout)):
    seconds = None if value is None else number(value)
    if value is not None and (seconds is None or not 0 < seconds <= MAX_TIMEOUT):
      raise ValueError(f"{name} must be a number of seconds in (0, {MAX_TIMEOUT:.0f}], got "
                       f"{value!r}")


def _culprit(failures: list[tuple[int, int, float]]) -> tuple[int, int, float]:
  """The first failure that is not a reaction to another's, else the first one."""
  return next((f for f in failures if f[1] != EXIT_PEER_LOST), failures[0])


_VALUED = ("-n", "--num-processes", "--port", "--grace", "--timeout", "--peer-timeout")


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
  """The launcher's options, and the command: from "-m" or the first other word on."""
  i = 0
  while i < len(argv):
    word = argv[i]
    if word == "-m" or not word.startswith("-"):
      break
    i += 2 if word in _VALUED else 1
  return list(argv[:i]), list(argv[i:])


def main(argv: Sequence[str] | None = None) -> int:
  """The command line `python -m mjbatch_jax.launch -n N [options] (script.py | -m module) ...`.

  Parses the launcher's options (-n/--num-processes, --port, --grace, --timeout,
  --peer-timeout, as `launch` takes them) up to the script or "-m", and runs the rest of the
  words as the command of every process.

  Args:
    argv: the words after the program's name (default: sys.argv[1:]).

  Returns:
    The exit status, as `launch` returns it.

  Raises:
    SystemExit: for bad options or no command (argparse's usage error, status 2).

  Example:
    status = main(["-n", "2", "examples/pg_distributed.py", "--iterations", "10"])
  """
  parser = argparse.ArgumentParser(
    prog="python -m mjbatch_jax.launch",
    usage="python -m mjbatch_jax.launch -n N [options] (script.py | -m module) [args ...]",
    description="Run N processes of a script on this machine as one JAX multi-controller job.",
  )
  parser.add_argument("-n", "--num-processes", type=int, required=True, help="processes")
  parser.add_argument("--port", type=int, default=None, help="coordinator port (default: free)")
  parser.add_argument("--grace", type=float, default=0.0,
                      help="seconds the others may take to stop on their own after one fails")
  parser.add_argument("--timeout", type=float, default=None,
                      help="stop every process and fail after this many seconds")
  parser.add_argument("--peer-timeout", type=float, default=None,
                      help="seconds of silence after which a process counts a peer as lost")
  own, command = _split(sys.argv[1:] if argv is None else argv)
  options = parser.parse_args(own)
  if not command or command == ["-m"]:
    parser.error("give a script (or -m module) to run")
  try:
    return launch(options.num_processes, command, options.port, options.grace, options.timeout,
                  options.peer_timeout)
  except ValueError as error:
    parser.error(str(error))


if __name__ == "__main__":
  sys.exit(main())
