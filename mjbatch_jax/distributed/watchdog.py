"""The watchdog: a process whose peer died or went silent stops within its timeout, naming that
peer, instead of waiting in a collective for a peer that never comes."""

import atexit
import contextlib
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import jax

from mjbatch_jax.launch import EXIT_PEER_LOST

_KEY = "mjbatch_jax/watchdog"  # our keys in the coordination service's key-value store
_EXITED = "exited"  # the status of a process that left cleanly (others: "failed: ...", ...)


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
    self.code = 1  # the status it exits with once the others have seen its failure
    self.stop_code: int | None = None  # the status of the stop under way
    self.stopping = threading.Lock()
    self.names: dict[int, str] = {}  # process -> "host pid N", once setup has exchanged them
    self.quit = threading.Event()  # set at a clean exit: the threads leave their loops
    self.threads: list[threading.Thread] = []
    # The latest Distributed call's output (weakly: the caller decides how long it lives) and
    # when it was made; and when this process saw each peer end its script cleanly. A call on
    # the job's mesh that a peer which has left must take part in is never ready.
    self.call: weakref.ref[Any] | None = None  # ArrayImpl: is_ready is not on jax.Array
    self.call_since = 0.0
    self.in_call = False  # the main thread is inside the call (CPU calls may run synchronously)
    self.left: dict[int, float] = {}

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

  def fail(self, error: BaseException) -> None:
    """Tells the others that this process leaves with error (the others would wait in a
    collective for it forever); a SystemExit of status 0 is no failure."""
    if isinstance(error, SystemExit):
      if error.code is None or error.code == 0:
        return
      self.code = error.code if isinstance(error.code, int) else 1
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    self.failed = text.splitlines()[0][:300]
    self._publish(f"failed: {self.failed}")

  def _at_exit(self) -> None:
    self.closing = True
    # Python keeps the exception that ends a script here, before the exit handlers run; not a
    # SystemExit, which a Distributed handle's `with` block reports (fail) instead.
    error = getattr(sys, "last_value", None)
    if error is not None and self.failed is None:
      self.fail(error)
    if self.failed is not None:
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

  def _stop(self, reason: str, publish: bool = True, reaction: bool = False,
            release: bool = False) -> None:
    """Say why and end the process now; reaction: the others stopped after this one failed;
    release: first meet the peers that left cleanly in JAX's shutdown, where they wait for this
    process (and, if it is the coordinator, would be aborted by its exit)."""
    if not self.stopping.acquire(blocking=False):
      return
    if publish:
      self._publish(f"stopped: {reason}")
    if self.failed is not None and self.closing:
      # This process failed and is leaving; JAX's shutdown would wait for peers that are gone.
      code = self.code if reaction else EXIT_PEER_LOST
      text = f"{self.name(self.me)} exits after its error ({self.failed}): {reason}"
    else:
      code = EXIT_PEER_LOST
      text = f"{self.name(self.me)} stops: {reason}"
    with contextlib.suppress(Exception):
      print(f"mjbatch_jax.distributed: {text}", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
      with contextlib.suppress(Exception):
        stream.flush()
    self.stop_code = code
    if release:
      shutdown = threading.Thread(target=_jax_state().shutdown, daemon=True)
      shutdown.start()
      shutdown.join(timeout=max(2.0, self.timeout / 2))
    if self.me == 0 and self.failed is None and " failed: " in reason:
      # The coordinator's exit aborts every other process from JAX's C++ (SIGABRT): give the one
      # that failed the beats it takes to see this stop and exit with its own status. Meanwhile
      # the main thread's collective may fail as it leaves: the excepthook ends this process
      # quietly then (stopping_code), this stop's line having said why.
      time.sleep(2 * self.interval + 0.5)
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
      # A process that failed but has not reached its exit (cleaning up after its `with` block)
      # is left to finish that: it stops at its exit handlers, once the others have seen it.
      if others and (self.failed is None or self.closing):
        # Name the root cause (a failure) rather than another process that stopped after it;
        # publish too, so that a failed process waiting in JAX's shutdown sees everyone left.
        process, status = min(others, key=lambda entry: not entry[1].startswith("failed"))
        self._stop(f"{self.name(process)} {status}", reaction=self.failed is not None)
      for process in exited - {self.me}:
        self.left.setdefault(process, now)
      self._check_call(now)
      if value != seen or self.watched in exited:
        seen, since = value, now
      elif now - since > self.timeout:
        self._stop(f"lost {self.name(self.watched)}: no heartbeat for {now - since:.0f} s (it "
                   "died, hangs or cannot reach the coordinator)")
      self.quit.wait(self.interval)

  def _check_call(self, now: float) -> None:
    """Stops this process if its latest call has waited `timeout` on a peer that has left."""
    if not self.left or self.closing:
      return
    output = None if self.call is None else self.call()
    with contextlib.suppress(Exception):  # an array deleted meanwhile: nothing to wait for
      if not self.in_call and (output is None or output.is_ready()):
        return
      process, when = min(self.left.items(), key=lambda item: item[1])
      if now - max(when, self.call_since) > self.timeout:
        self._stop(f"{self.name(process)} ended its script {now - when:.0f} s ago (status 0) "
                   "and this process's call waits on it: every process must make the same "
                   "calls, and one that leaves early leaves the others waiting in them",
                   release=True)

  def _judge(self) -> None:
    """Catches a coordinator that hangs: the store's calls then block instead of failing."""
    while not self.quit.wait(self.interval):
      silent = time.monotonic() - self.last_ok
      if silent > self.timeout and not self.closing:
        self._stop(f"lost the coordinator, process 0 at {self.coordinator}: no answer for "
                   f"{silent:.0f} s", publish=False)


_watchdog: _Watchdog | None = None  # this process's, once started


def _jax_state() -> Any:
  # JAX keeps its client private; its key-value store is the only channel every process shares.
  from jax._src import distributed as jax_distributed

  return jax_distributed.global_state


def start_watchdog(timeout: float) -> None:
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


def stopping_code() -> int | None:
  """The status this process's watchdog is ending it with, None if it is not ending it."""
  return None if _watchdog is None else _watchdog.stop_code


def report_exit(error: BaseException) -> None:
  """A Distributed handle's `with` block ends with error: if it is a failure (any exception but
  a SystemExit of status 0), the others learn it now and stop, naming this process. Python's
  exit handlers see an uncaught exception but never a SystemExit (sys.exit(1), argparse's
  refusal, a script's `raise SystemExit("...")`), after which the others would wait in a
  collective for this process until JAX's shutdown and heartbeat timeouts."""
  if _watchdog is not None:
    _watchdog.fail(error)


def watched(call: Callable[[], Any]) -> Any:
  """call() under the watchdog: a Distributed handle's program on the job's mesh. If the call,
  or the arrays it returns, is still not done `timeout` s after a peer ended its script, the
  watchdog stops this process naming that peer, where it would wait for it forever (the peer
  waits in JAX's shutdown meanwhile)."""
  dog = _watchdog
  if dog is None:
    return call()
  dog.call, dog.call_since, dog.in_call = None, time.monotonic(), True
  try:
    output = call()
  finally:
    dog.in_call = False
  leaves = [x for x in jax.tree.leaves(output) if isinstance(x, jax.Array)]
  dog.call = weakref.ref(leaves[0]) if leaves else None
  return output


def name_peers(names: dict[int, str]) -> None:
  """How the watchdog names each process in its messages (host and pid), once they are known."""
  if _watchdog is not None:
    _watchdog.names = names
