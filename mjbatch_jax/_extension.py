"""The compiled extension, loaded once MuJoCo's running version is known to match it."""

import importlib.util
from pathlib import Path

import mujoco

if importlib.util.find_spec("mjbatch_jax._mjbatch_jax") is None:
  # Without this, Python reports the missing module as a "circular import".
  raise ImportError(
    f"mjbatch_jax's compiled extension (_mjbatch_jax) is missing from {Path(__file__).parent}:"
    " this is a source checkout that was not built, or a build for another Python. Build and"
    " install it with `pip install -e .` in the checkout (or `pip install .`), then import it"
    " from that environment."
  )

from mjbatch_jax import _mjbatch_jax as ext  # noqa: E402

_BUILT = ext.MUJOCO_HEADER_VERSION
_RUNNING = ext.mujoco_version()


def _version_string(number: int) -> str:
  return f"{number // 1000000}.{number // 1000 % 1000}.{number % 1000}"


# The extension links the libmujoco of the mujoco-core wheel it was built against; another
# version would lay out mjModel and mjData differently.
if _BUILT != _RUNNING or mujoco.mj_version() != _BUILT:
  raise ImportError(
    f"mjbatch_jax was built against MuJoCo {_version_string(_BUILT)} but MuJoCo "
    f"{_version_string(mujoco.mj_version())} is installed; run "
    f"`pip install mujoco-core=={_version_string(_BUILT)}` or rebuild mjbatch_jax."
  )

if mujoco.get_mjcb_time() is None:
  ext.remember_default_timer()  # the bindings' own C timer, not a Python callback

__all__ = ["ext"]
