"""RL environments on mjbatch_jax, with MuJoCo Playground's env API and Brax's training wrappers.

A task subclasses `Env` and writes `reset(rng)` and `step(state, action)` for one env; the
wrappers batch it (one custom call per physics call for the whole batch), limit and reset its
episodes and randomise its params. Brax is not needed: `wrap_for_brax_training` gives what
`brax.training.agents.ppo.train` takes as `wrap_env_fn`.

  from mjbatch_jax import envs
  env = envs.wrap_for_brax_training(envs.CartPoleBalance(), episode_length=500)
  state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(0), 256))
  state = jax.jit(env.step)(state, jnp.zeros((256, env.action_size)))
"""

from typing import Any

from mjbatch_jax.envs import state
from mjbatch_jax.envs.cartpole import CARTPOLE_XML, CartPoleBalance
from mjbatch_jax.envs.env import BAD_WARNINGS, Env, check_action, check_key, check_state
from mjbatch_jax.envs.state import Data, State
from mjbatch_jax.envs.wrappers import (
  AutoResetWrapper,
  DomainRandomizationWrapper,
  EpisodeWrapper,
  VmapWrapper,
  WarningWrapper,
  Wrapper,
  install_brax_compat,
  wrap_for_brax_training,
)

__all__ = [
  "BAD_WARNINGS",
  "CARTPOLE_XML",
  "AutoResetWrapper",
  "CartPoleBalance",
  "Data",
  "DomainRandomizationWrapper",
  "Env",
  "EpisodeWrapper",
  "State",
  "VmapWrapper",
  "WarningWrapper",
  "Wrapper",
  "check_action",
  "check_key",
  "check_state",
  "install_brax_compat",
  "wrap_for_brax_training",
]


def __getattr__(name: str) -> Any:
  if name == "RowLayout":  # deprecated: one release, then gone
    return state.__getattr__(name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
