"""The control suite's hopper, hopping: Brax's PPO on the dm_control hopper, on our physics.

No setting of the library's planners made the hopper hop 1 m in 5 s (docs/control.md, "The hopper:
no planner hopped, a policy does"): what a hop earns comes after any horizon planned at the physics
rate. A value function sees past it, and PPO learns one on the way to its policy. This file is the
task's env and its training; benchmarks/control_suite.py runs it in a subprocess (Brax trains in
float32, the suite plans in float64) and judges the policy on the suite's own starts and success
predicate, as it judges the planners.

The env: Playground's hopper.xml; an action every 4 physics steps (0.02 s, dm_control's control
period for the hopper); observations the state but the torso's x (`observation`); reward 0.5
for each step up, plus exp(-(v - 1)^2) for the torso's forward speed v (m/s), less 1e-3 |a|^2;
an episode ends when the torso is below 0.7 m or pitched past 0.6 rad (the suite fails one at
0.6 m and 0.8 rad). Starts: the suite's pose with twice its joint noise (0.2 rad), so that the
policy meets more starts in training than it is judged on.

The speed's reward is a bell around 1 m/s wide enough to slope at a standstill, so that a
policy that stands is pulled forward; a reward flat near 0 m/s left it standing or creeping. The
default training is long enough for every seed tried; shorter, some seeds crept (docs/control.md
has the runs).

  python benchmarks/hopper_policy.py --xml hopper.xml --out hopper.npz [--iterations 1200]
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))  # go1_joystick

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjbatch_jax.envs.env import Env, check_action, check_key, check_state
from mjbatch_jax.envs.state import State

CONTROL_STEPS = 4  # physics steps per action: 0.02 s
UP_REWARD, SPEED, SPEED_WIDTH, CONTROL_COST = 0.5, 1.0, 1.0, 1e-3
LOWEST, TILT, START_NOISE = 0.7, 0.6, 0.2
EPISODE_STEPS = 500  # 10 s
# The networks and PPO of examples/go1_joystick.py (which walks the Go1 in minutes on 2 cores),
# with a longer discount: 0.99 at 0.02 s looks about 2 s ahead, several hops.
DISCOUNT = 0.99
NUM_ENVS, UNROLL, MINIBATCHES = 512, 20, 4


def observation(qpos: jax.Array, qvel: jax.Array) -> jax.Array:
  """The policy's observation of a hopper state: qpos without rootx (where it stands does not
  matter to a hop), and qvel clipped to +-10 (a fall's spikes would swamp the normaliser)."""
  return jnp.concatenate([qpos[1:], jnp.clip(qvel, -10.0, 10.0)])


class HopperHop(Env):
  """Hop forward near 1 m/s without falling (the module's doc gives reward and ends).

    env = HopperHop(suite_xml("hopper"))
    state = env.reset(jax.random.PRNGKey(0))
    state = env.step(state, jnp.zeros(env.action_size))
  """

  def __init__(self, xml: str | Path, num_threads: int = 0):
    """The hopper of the XML at path xml, on a Simulator of num_threads threads (0: one per
    CPU)."""
    model = mujoco.MjModel.from_xml_path(str(xml))
    super().__init__(model, CONTROL_STEPS, num_threads)
    model = self.mj_model
    joints = {name: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
              for name in ("rootx", "rootz", "rooty")}
    if min(joints.values()) < 0:
      raise ValueError(f"{xml} is not dm_control's hopper: it lacks the joints {sorted(joints)}")
    self._x, self._z, self._pitch = (int(model.jnt_qposadr[j]) for j in joints.values())
    torso = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "torso")
    self._z0 = float(model.body_pos[torso, 2])  # the torso's height at rootz = 0
    limited = np.flatnonzero(model.jnt_limited)
    self._limited = jnp.asarray(model.jnt_qposadr[limited])
    self._lower, self._upper = (jnp.asarray(r) for r in model.jnt_range[limited].T)

  def reset(self, rng: jax.Array) -> State:
    check_key(rng)
    noise = START_NOISE * jax.random.normal(rng, self._limited.shape)
    qpos = jnp.zeros(self.mj_model.nq).at[self._limited].set(
      jnp.clip(noise, self._lower, self._upper))
    data = self.make_data(qpos=qpos)
    zero = jnp.zeros((), data.row.dtype)
    return State(data, observation(data.qpos, data.qvel), zero, zero, {"speed": zero}, {})

  def step(self, state: State, action: jax.Array) -> State:
    check_state(state)
    action = check_action(action, (self.action_size,))
    data = self.pipeline_step(state.data, action)
    qpos = data.qpos
    speed = data.qvel[self._x]
    fell = ((self._z0 + qpos[self._z] < LOWEST) | (jnp.abs(qpos[self._pitch]) > TILT)
            | ~jnp.all(jnp.isfinite(data.row)))
    reward = (UP_REWARD + jnp.exp(-(((speed - SPEED) / SPEED_WIDTH) ** 2))
              - CONTROL_COST * jnp.sum(action**2))
    return state.replace(data=data, obs=observation(qpos, data.qvel), reward=reward,
                         done=fell.astype(reward.dtype), metrics={"speed": speed})


def train(xml: str | Path, out: str | Path, iterations: int, threads: int, seed: int = 0
          ) -> Any:
  """Trains the hopper's policy for `iterations` PPO iterations (NUM_ENVS envs of UNROLL steps
  each) on `threads` physics threads, checkpointed at `out` (ppo.load_policy reads it);
  returns ppo.train's Trained."""
  import go1_joystick  # pyright: ignore[reportMissingImports]  (examples/, on the path)

  from mjbatch_jax.agents import ppo

  env = HopperHop(xml, threads)
  return ppo.train(env, iterations * NUM_ENVS * UNROLL, num_envs=NUM_ENVS, unroll_length=UNROLL,
                   batch_size=NUM_ENVS // MINIBATCHES, num_minibatches=MINIBATCHES,
                   episode_length=EPISODE_STEPS, network=go1_joystick.NETWORK,
                   iterations_per_eval=min(iterations, 100), checkpoint=out, seed=seed,
                   task={"env": "hopper_policy.HopperHop", "xml": Path(xml).name},
                   **{**go1_joystick.PPO, "discounting": DISCOUNT})


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
  parser.add_argument("--xml", type=Path, required=True, help="dm_control's hopper.xml")
  parser.add_argument("--out", type=Path, required=True, help="the checkpoint (.npz)")
  parser.add_argument("--iterations", type=int, default=1200, help="PPO iterations")
  parser.add_argument("--threads", type=int, default=2, help="the physics' threads")
  parser.add_argument("--seed", type=int, default=0, help="the training's seed")
  args = parser.parse_args(argv)
  if args.iterations < 1 or args.threads < 1:
    parser.error("--iterations and --threads must be >= 1")
  trained = train(args.xml, args.out, args.iterations, args.threads, args.seed)
  last = trained.curve[-1]
  print(f"trained {last.iteration} iterations, {last.env_steps} env steps: {last.wall_s:.1f} s "
        f"wall, {last.cpu_s:.1f} s CPU; checkpoint {args.out}", file=sys.stderr)


if __name__ == "__main__":
  main()
