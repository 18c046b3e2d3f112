"""The exception that MuJoCo errors in a simulation become, and the conversion of the engine's
errors (which JAX reports with its own exception types) into ours."""

import contextlib
import re
from collections.abc import Iterable, Iterator


class SimulationError(RuntimeError):
  """MuJoCo raised an error in a simulation of a call; the message names it ("sim 3: ...").

  Simulations that did not fail ran to completion; the failing ones kept the state they had
  before the call. `ids` holds the failed simulations' indices (into the call's flattened
  leading dimensions), so a caller can mask them; `step(..., return_errors=True)` and `rollout`
  return the others' results instead of raising.

  Example:
    try:
      state = mjbatch_jax.step(state, ctrl, params)
    except mjbatch_jax.SimulationError as e:
      print(e.ids)  # (3, 17)
  """

  def __init__(self, message: str = "", ids: Iterable[int] | None = None):
    super().__init__(message)
    self.ids: tuple[int, ...] = (
      tuple(int(i) for i in ids) if ids is not None else _ids_named(message)
    )

  def __reduce__(self) -> tuple:
    return (type(self), (str(self), self.ids))


def _ids_named(message: str) -> tuple[int, ...]:
  """The simulations an engine message names: "sim 3: ... (4 simulations failed: 3, 7-9)"."""
  listed = re.search(r"\(\d+ simulations failed: ([\d, -]+)\)", message)
  if listed:
    ids: list[int] = []
    for part in listed.group(1).split(","):
      low, _, high = part.strip().partition("-")
      ids.extend(range(int(low), int(high or low) + 1))
    return tuple(ids)
  first = re.match(r"sim (\d+):", message)
  return (int(first.group(1)),) if first else ()


# Prefixes of the engine's error messages (cpp/ffi_common.h) and the exception each becomes:
# a caller's mistake, a failed simulation, and threads or memory that could not be had.
_KINDS = (
  ("mjbatch_jax.ValueError: ", ValueError),
  ("mjbatch_jax.SimulationError: ", SimulationError),
  ("mjbatch_jax.ResourceError: ", RuntimeError),
)


def converted(e: BaseException) -> Exception | None:
  """Our exception for an engine error that JAX reported with its own type, or None."""
  message = str(e)
  for prefix, kind in _KINDS:
    at = message.find(prefix)
    if at >= 0:
      return kind(message[at + len(prefix) :].strip())
  return None


@contextlib.contextmanager
def simulation_errors() -> Iterator[None]:
  """Raise the engine's errors of jitted calls as ours (usable as a decorator too).

  Outside of jit, `step`, `rollout` and `forward` raise our exceptions themselves. Inside a
  jitted function, JAX reports a handler's error with its own exception type; this turns those
  of mjbatch_jax into SimulationError (MuJoCo failed a simulation), ValueError (a bad argument
  that only the engine could see) or RuntimeError (threads or memory), and lets every other
  exception through unchanged.

    with mjbatch_jax.simulation_errors():
      state = jax.block_until_ready(jitted_loop(state, params))
  """
  try:
    yield
  except SimulationError:
    raise
  except Exception as e:
    # JAX's own runtime error may itself be a ValueError: what tells ours apart is the prefix.
    ours = converted(e)
    if ours is None:
      raise
    raise ours from e
