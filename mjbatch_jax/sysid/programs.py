"""The compiled programs a Parameters keeps for its fits: bounded, and released with the
Simulator."""

import collections
from collections.abc import Callable
from typing import Any

from mjbatch_jax.simulator import Simulator

# Compiled fit programs a Parameters keeps. A fit whose residual is a new function object (a
# lambda made in a loop of fits) compiles its own, a few MB each: the least recently used beyond
# this many are dropped, and JAX frees a program with its last reference.
PROGRAMS_LIMIT = 8


class _Programs:
  """A Parameters' compiled programs by key: the PROGRAMS_LIMIT most recently used, all of them
  released once the Simulator is closed (they call its engine, which is gone)."""

  def __init__(self, sim: Simulator):
    self._sim = sim
    self._held: collections.OrderedDict[Any, Callable] = collections.OrderedDict()

  def __len__(self) -> int:
    self._release_if_closed()
    return len(self._held)

  def get(self, key: Any) -> Callable | None:
    """The program of key, now the most recently used; None if not held (TypeError if key
    cannot be hashed)."""
    self._release_if_closed()
    program = self._held.get(key)
    if program is not None:
      self._held.move_to_end(key)
    return program

  def put(self, key: Any, program: Callable) -> None:
    self._held[key] = program
    self._held.move_to_end(key)
    while len(self._held) > max(PROGRAMS_LIMIT, 1):
      self._held.popitem(last=False)
    self._release_if_closed()

  def _release_if_closed(self) -> None:
    if self._sim.closed:
      self._held.clear()
