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

import ctypes
import ctypes.util
import threading

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
