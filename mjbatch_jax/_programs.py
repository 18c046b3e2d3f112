"""JAX's compiled programs of engines that were closed for good.

A program carries its engine's id (and some of its model's values: the rows of a field that
`select` leaves out, control ranges), and JAX keeps every program it compiled, keyed by the
params' static part: ~1.5 MB each for an eager call and a jitted one. A search that makes and
closes a Simulator per model (co-design) would keep them all. JAX can drop its caches only all
at once (`jax.clear_caches`), so this module counts the engines that had programs and were
closed without being opened again (a model opened again gets its old id back, and its programs
serve it), and once there are RETIRED_LIMIT of them, clears JAX's caches at the next safe point:
the next Simulator made or closed outside of any trace. Programs of open engines, and the
caller's own, are compiled again at their next call.
"""

import collections
import ctypes
import ctypes.util
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax._src import core as _core  # trace_state_clean: is any trace in progress?

# Engines closed for good, with programs, before JAX's caches are cleared: ~3 MB each for a
# step called eagerly and jitted, so at most a few tens of MB stay held.
RETIRED_LIMIT = 8

_lock = threading.Lock()
_with_programs: set[int] = set()  # engines that a public function was called or traced with
_retired: set[int] = set()  # of those, the ones closed for good since the last clearing
_clearings = 0


def used(engine: int) -> None:
  """Note that programs were (or will be) compiled for engine."""
  if engine not in _with_programs:
    with _lock:
      _with_programs.add(engine)


def opened(engine: int) -> None:
  """An engine opened again has its programs back: they are no longer held in vain."""
  with _lock:
    _retired.discard(engine)


def closed(engine: int) -> None:
  """The last owner of engine closed it."""
  with _lock:
    if engine in _with_programs:
      _retired.add(engine)


def release_if_due() -> bool:
  """Clear JAX's caches if RETIRED_LIMIT engines' programs are held in vain; whether it did.

  Only outside of any trace: clearing while a function is being traced would pull its caches
  from under it.
  """
  global _clearings
  with _lock:
    if len(_retired) < RETIRED_LIMIT or not _core.trace_state_clean():
      return False
    _with_programs.difference_update(_retired)
    _retired.clear()
    _clearings += 1
  jax.clear_caches()
  _trim()
  return True


def clearings() -> int:
  """How many times JAX's caches were cleared here (what the tests and the soak count)."""
  return _clearings


def _trim() -> None:
  # glibc keeps freed memory for reuse; give back what the dropped programs held.
  name = ctypes.util.find_library("c")
  if name:
    try:
      ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):
      pass


class BoundedJit:
  """jax.jit of fn whose static arguments (a user's cost, settings) are bound per key, keeping
  the `limit` most recently used: a bounded jax.jit(fn, static_argnums=...).

  A module-level jax.jit keeps the program of every distinct static argument for the life of the
  process (JAX keys its caches on the jitted function, which never dies), so a loop that makes
  a cost or a residual anew each time grows by a program per pass. Here each key gets a function
  of its own, jitted, and the least recently used are dropped with their programs. Calls take
  their arguments by position; a key that cannot be hashed compiles for that call alone.

    _solve = BoundedJit(_solve_impl, static_argnums=(0, 8))
    _solve(cost, w, ..., nstep)        # as jax.jit(_solve_impl, static_argnums=(0, 8)) would
  """

  def __init__(self, fn: Callable[..., Any], static_argnums: Sequence[int], limit: int = 8):
    self._fn = fn
    self._static = tuple(sorted(static_argnums))
    self.limit = limit
    self._held: collections.OrderedDict[Any, Callable[..., Any]] = collections.OrderedDict()
    self._lock = threading.Lock()

  def __len__(self) -> int:
    return len(self._held)

  def __call__(self, *args: Any) -> Any:
    static = set(self._static)
    key = tuple(args[i] if i < len(args) else None for i in self._static) + (len(args),)
    try:
      hash(key)
    except TypeError:
      key = None
    jitted = None
    if key is not None:
      with self._lock:
        jitted = self._held.get(key)
        if jitted is not None:
          self._held.move_to_end(key)
    if jitted is None:
      jitted = jax.jit(self._bind(args, static))
      if key is not None:
        with self._lock:
          self._held[key] = jitted
          while len(self._held) > max(self.limit, 1):
            self._held.popitem(last=False)
    return jitted(*(a for i, a in enumerate(args) if i not in static))

  def _bind(self, args: tuple, static: set[int]) -> Callable[..., Any]:
    """A new function of the dynamic arguments, with this call's static ones bound."""
    fn, count = self._fn, len(args)
    fixed = {i: args[i] for i in static if i < count}

    def bound(*dynamic: Any) -> Any:
      values = iter(dynamic)
      return fn(*(fixed[i] if i in fixed else next(values) for i in range(count)))

    return bound
