"""mjbatch_jax: thousands of MuJoCo simulations on CPU threads, in JAX and numpy.

  import mujoco, mjbatch_jax
  sim = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_path("robot.xml"))
  state = sim.init_state(1024)
  params = sim.params(1024, fields=("body_mass",))
  state = jax.jit(mjbatch_jax.step)(state, ctrl, params)

The numpy front end keeps the API of the mjbatch library: `from mjbatch_jax import Batch`.
"""

import importlib
from typing import TYPE_CHECKING, Any

from mjbatch_jax import _extension  # noqa: F401  (checks the MuJoCo version first)
from mjbatch_jax.batch import Actuator, Batch, Body, Joint, Site
from mjbatch_jax.errors import SimulationError
from mjbatch_jax.layout import StateLayout
from mjbatch_jax.names import JointSlices, Names

if TYPE_CHECKING:
  from mjbatch_jax import control, distributed, ensemble, envs, launch, motion, rotations, sysid
  from mjbatch_jax.derivatives import param_fd, transition_fd
  from mjbatch_jax.functions import NWARNING, forward, rollout, simulation_errors, step
  from mjbatch_jax.gradcheck import check_grads
  from mjbatch_jax.params import Params
  from mjbatch_jax.randomize import randomize, tree_replace
  from mjbatch_jax.simulator import Simulator

# The JAX front end, imported on first use: importing jax takes over a second, which a numpy
# script that only wants Batch should not pay.
_LAZY = {
  "NWARNING": "mjbatch_jax.functions",
  "Params": "mjbatch_jax.params",
  "randomize": "mjbatch_jax.randomize",
  "tree_replace": "mjbatch_jax.randomize",
  "Simulator": "mjbatch_jax.simulator",
  "check_grads": "mjbatch_jax.gradcheck",
  "forward": "mjbatch_jax.functions",
  "param_fd": "mjbatch_jax.derivatives",
  "rollout": "mjbatch_jax.functions",
  "simulation_errors": "mjbatch_jax.functions",
  "step": "mjbatch_jax.functions",
  "transition_fd": "mjbatch_jax.derivatives",
}


# Submodules reached as attributes (mjbatch_jax.distributed) without importing them up front.
_SUBMODULES = ("control", "distributed", "ensemble", "envs", "launch", "motion", "rotations",
               "sysid")


def __getattr__(name: str) -> Any:
  if name in _SUBMODULES:
    return importlib.import_module(f"mjbatch_jax.{name}")
  module = _LAZY.get(name)
  if module is None:
    raise AttributeError(f"module 'mjbatch_jax' has no attribute {name!r}")
  imported = importlib.import_module(module)
  # Every public name of that module, at once: importing mjbatch_jax.randomize also binds the
  # submodule as the package's attribute `randomize`, which the function must replace.
  for public, home in _LAZY.items():
    if home == module:
      globals()[public] = getattr(imported, public)  # later lookups skip this function
  return globals()[name]


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(_LAZY))


__all__ = [
  "NWARNING",
  "Actuator",
  "Batch",
  "Body",
  "Joint",
  "JointSlices",
  "Names",
  "Params",
  "SimulationError",
  "Simulator",
  "Site",
  "StateLayout",
  "check_grads",
  "control",
  "distributed",
  "ensemble",
  "envs",
  "forward",
  "launch",
  "motion",
  "param_fd",
  "randomize",
  "rollout",
  "rotations",
  "simulation_errors",
  "step",
  "sysid",
  "transition_fd",
  "tree_replace",
]
