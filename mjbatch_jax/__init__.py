"""mjbatch_jax: thousands of MuJoCo simulations on CPU threads, in JAX and numpy.

  import mujoco, mjbatch_jax
  sim = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_path("robot.xml"))
  state = sim.init_state(1024)
  params = sim.params(1024, fields=("body_mass",))
  state = jax.jit(mjbatch_jax.step)(state, ctrl, params)

The numpy front end keeps the API of the mjbatch library: `from mjbatch_jax import Batch`.
"""

from mjbatch_jax import _extension  # noqa: F401  (checks the MuJoCo version first)
from mjbatch_jax.batch import Batch
from mjbatch_jax.derivatives import param_fd, transition_fd
from mjbatch_jax.errors import SimulationError
from mjbatch_jax.functions import NWARNING, forward, rollout, simulation_errors, step
from mjbatch_jax.layout import StateLayout
from mjbatch_jax.params import Params
from mjbatch_jax.simulator import Simulator

__all__ = [
  "NWARNING",
  "Batch",
  "Params",
  "SimulationError",
  "Simulator",
  "StateLayout",
  "forward",
  "param_fd",
  "rollout",
  "simulation_errors",
  "step",
  "transition_fd",
]
