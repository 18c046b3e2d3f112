"""Hello, mjbatch_jax: 4096 pendulums from 4096 initial angles, 1000 steps each, in one call.

  python examples/hello.py

Needs no downloads: the model is inline. The numpy Batch front end keeps mjbatch's API, so this
is also what an mjbatch script looks like after `from mjbatch_jax import Batch`.
"""

import argparse
import time

import common
import mujoco
import numpy as np

from mjbatch_jax import Batch

PENDULUM = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <body name="pole">
      <joint name="hinge" axis="0 1 0" damping=".01"/>
      <geom type="capsule" fromto="0 0 0 0 0 -.5" size=".02" mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""
NUM_SIMS, NSTEP = 4096, 1000


def main(num_sims: int = NUM_SIMS, nstep: int = NSTEP) -> None:
  model = mujoco.MjModel.from_xml_string(PENDULUM)
  with Batch(model, num_sims) as batch:
    angle = batch.joint("hinge").qpos  # a live (num_sims, 1) view of the state rows
    angle[:, 0] = np.linspace(-np.pi, np.pi, num_sims)
    start = time.perf_counter()
    batch.step(nstep=nstep)
    seconds = time.perf_counter() - start
    rate = num_sims * nstep / seconds
    print(f"{num_sims} pendulums x {nstep} steps in {seconds:.2f} s: {rate:,.0f} sim-steps/s")
    print(f"threads: {batch.num_threads}; simulated time: {batch.bind('time')[0]:.2f} s")
    print(f"final angles: min {angle.min():+.3f}, max {angle.max():+.3f} rad")


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--num-sims", type=common.int_in(1, 10**6, "pendulums"), default=NUM_SIMS,
                      help=f"pendulums (default {NUM_SIMS})")
  parser.add_argument("--nstep", type=common.int_in(1, 10**6, "steps of each pendulum"),
                      default=NSTEP, help=f"steps of each (default {NSTEP})")
  args = parser.parse_args()
  main(args.num_sims, args.nstep)
