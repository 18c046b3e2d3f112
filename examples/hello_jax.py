"""4096 pendulums from 4096 angles, stepped inside a jitted lax.scan.

  python examples/hello_jax.py

The whole loop is one XLA program: each scan iteration is one custom call that steps every
pendulum on MuJoCo's batch thread pool, with no Python in between.
"""

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import common  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402

import mjbatch_jax  # noqa: E402

PENDULUM = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <body>
      <joint name="hinge" axis="0 1 0" damping="0.01"/>
      <geom type="capsule" fromto="0 0 0 0 0 -1" size=".02" mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""


def main(num_sims: int = 4096, num_calls: int = 100, nstep: int = 10) -> None:
  model = mujoco.MjModel.from_xml_string(PENDULUM)
  with mjbatch_jax.Simulator(model) as sim:
    state = sim.init_state(num_sims)
    angles = jnp.linspace(-3.0, 3.0, num_sims)
    state = state.at[:, sim.layout.qpos].set(angles[:, None])
    params = sim.params(num_sims)
    ctrl = jnp.zeros((num_sims, sim.nu))

    @jax.jit
    def simulate(state):
      def call(state, _):
        state = mjbatch_jax.step(state, ctrl, params, nstep=nstep)
        return state, state[:, sim.layout.qpos][:, 0]

      return jax.lax.scan(call, state, None, length=num_calls)

    simulate(state)[0].block_until_ready()  # compile
    start = time.perf_counter()
    final, angle_history = simulate(state)
    final.block_until_ready()
    seconds = time.perf_counter() - start
  steps = num_sims * num_calls * nstep
  print(f"{num_sims} pendulums x {num_calls * nstep} steps on {sim.num_threads} threads: "
        f"{steps / seconds:,.0f} sim-steps/s")
  print(f"time {float(final[0, sim.layout.time][0]):.2f} s; angle of the first pendulum "
        f"{float(angle_history[0, 0]):+.3f} -> {float(angle_history[-1, 0]):+.3f} rad")


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--num-sims", type=common.int_in(1, 10**6, "pendulums"), default=4096,
                      help="pendulums (default 4096)")
  parser.add_argument("--num-calls", type=common.int_in(1, 10**6, "scan iterations"),
                      default=100, help="scan iterations (calls) (default 100)")
  parser.add_argument("--nstep", type=common.int_in(1, 10**6, "mj_step calls per call"),
                      default=10, help="mj_step calls per call (default 10)")
  args = parser.parse_args()
  main(args.num_sims, args.num_calls, args.nstep)
