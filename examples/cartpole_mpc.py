"""Swing a cart-pole up by predictive sampling, one jitted function per control step.

  python examples/cartpole_mpc.py

Each control step samples 1024 noisy variations of the current plan (25 knots), rolls all of
them out in one custom call (`mjbatch_jax.rollout`), keeps the cheapest, applies its first knot
to the real system and shifts the plan. The whole step, sampling included, is one XLA program.
"""

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402

import mjbatch_jax  # noqa: E402

CARTPOLE = """
<mujoco>
  <option timestep="0.01" integrator="implicitfast"/>
  <worldbody>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0" range="-2 2" limited="true" damping="0.5"/>
      <geom type="box" size=".2 .1 .05" mass="1" contype="0" conaffinity="0"/>
      <body name="pole">
        <joint name="hinge" axis="0 1 0" damping="0.005"/>
        <geom type="capsule" fromto="0 0 0 0 0 .6" size=".03" mass=".2"
              contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slider" gear="10" ctrlrange="-1 1" ctrllimited="true"/></actuator>
</mujoco>
"""

NUM_SAMPLES = 1024
NUM_KNOTS = 25
SUBSTEPS = 4  # mj_step calls per knot: a 1 s horizon
NUM_CONTROL_STEPS = 150
NOISE = 0.5


def tilt(qpos: jax.Array) -> jax.Array:
  """Angle of the pole from upright, in [0, pi]."""
  return jnp.abs(jnp.mod(qpos[..., 1] + jnp.pi, 2 * jnp.pi) - jnp.pi)


def cost(states: jax.Array, ctrls: jax.Array, layout: mjbatch_jax.StateLayout) -> jax.Array:
  qpos, qvel = states[..., layout.qpos], states[..., layout.qvel]
  upright = 1 - jnp.cos(qpos[..., 1])
  centred = 0.2 * qpos[..., 0] ** 2
  calm = 0.01 * jnp.sum(qvel**2, axis=-1)
  effort = 0.01 * jnp.sum(ctrls**2, axis=-1)
  return jnp.sum(upright + centred + calm + effort, axis=-1)


def main(num_control_steps: int = NUM_CONTROL_STEPS) -> float:
  model = mujoco.MjModel.from_xml_string(CARTPOLE)
  with mjbatch_jax.Simulator(model) as sim:
    layout = sim.layout
    state = sim.init_state(1).at[:, layout.qpos].set(jnp.array([[0.0, jnp.pi]]))  # hanging
    samples_params = sim.params(NUM_SAMPLES)
    one_params = sim.params(1)

    @jax.jit
    def control_step(state, plan, key):
      noise = NOISE * jax.random.normal(key, (NUM_SAMPLES, NUM_KNOTS, sim.nu))
      candidates = jnp.clip(plan + noise.at[0].set(0.0), -1.0, 1.0)  # sample 0: the plan
      starts = jnp.broadcast_to(state, (NUM_SAMPLES, sim.nstate))
      states, _ = mjbatch_jax.rollout(starts, candidates, samples_params, nstep=SUBSTEPS)
      best = candidates[jnp.argmin(cost(states, candidates, layout))]
      state = mjbatch_jax.step(state, best[None, 0], one_params, nstep=SUBSTEPS)
      plan = jnp.concatenate([best[1:], best[-1:]])  # shift, hold the last knot
      return state, plan

    plan = jnp.zeros((NUM_KNOTS, sim.nu))
    key = jax.random.PRNGKey(0)
    start = time.perf_counter()
    for k in range(num_control_steps):
      key, sub = jax.random.split(key)
      state, plan = control_step(state, plan, sub)
      if k % 25 == 0 or k == num_control_steps - 1:
        print(f"step {k:3d}: tilt {float(tilt(state[0, layout.qpos])):.3f} rad")
    seconds = time.perf_counter() - start
  final = float(tilt(state[0, layout.qpos]))
  rollouts = num_control_steps * NUM_SAMPLES * NUM_KNOTS * SUBSTEPS
  print(f"{num_control_steps} control steps in {seconds:.1f} s "
        f"({rollouts / seconds:,.0f} sim-steps/s on {sim.num_threads} threads)")
  print(f"final tilt: {final:.3f} rad")
  return final


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--steps", type=int, default=NUM_CONTROL_STEPS, help="control steps")
  main(parser.parse_args().steps)
