"""Wrappers that batch, time-limit, auto-reset and randomise envs, in Brax's and Playground's style.

`wrap_for_brax_training` stacks them as `brax.training.agents.ppo.train` expects of its
`wrap_env_fn`. Nothing here imports Brax: the wrapped env only has to look like Brax's.

    env = wrap_for_brax_training(CartPoleBalance(), episode_length=500)
    state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(0), 1024))
    state = jax.jit(env.step)(state, jnp.zeros((1024, env.action_size)))
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax.envs.env import Env, check_action, check_key
from mjbatch_jax.envs.state import State
from mjbatch_jax.params import Params

# randomization_fn(params, rng=key) -> params: one env's params, drawn from one key. Called with
# rng by keyword, which also overrides the rng that Brax's ppo.train binds with functools.partial.
RandomizationFn = Callable[..., Params]

FIRST_DATA = "first_data"
FIRST_OBS = "first_obs"
RANDOMIZATION_RNG = "randomization_rng"
RANDOMIZATION_STEPS = "randomization_steps"


class Wrapper:
  """An env that forwards to the env it wraps; attributes it lacks are the wrapped env's."""

  def __init__(self, env: Any):
    missing = [name for name in ("reset", "step") if not callable(getattr(env, name, None))]
    if missing or not hasattr(env, "action_size"):
      raise ValueError(f"env must be an env (reset, step, action_size: an mjbatch_jax.envs.Env "
                       f"or a wrapper of one), got {v.shown(env)}")
    self.env = env

  def reset(self, rng: jax.Array) -> State:
    return self.env.reset(rng)

  def step(self, state: State, action: jax.Array) -> State:
    return self.env.step(state, action)

  @property
  def observation_size(self) -> Any:
    return self.env.observation_size

  @property
  def action_size(self) -> int:
    return self.env.action_size

  @property
  def unwrapped(self) -> Env:
    return self.env.unwrapped

  def __getattr__(self, name: str) -> Any:
    # Copying and pickling look up dunders before __init__ ran; they must not recurse into env.
    if name == "env" or name.startswith("__"):
      raise AttributeError(name)
    return getattr(self.env, name)


class WarningWrapper(Wrapper):
  """Ends the episode of an env whose physics raised a bad-number warning (one env, unbatched).

  A NaN control or a diverged simulation is a MuJoCo warning, not an error: MuJoCo zeroes the
  controls or resets the simulation and carries on, so the episode is no longer the one the
  policy played, and done=1 lets the auto-reset start a clean one.
  """

  def step(self, state: State, action: jax.Array) -> State:
    state = self.env.step(state, action)
    bad = self.unwrapped.bad(state.data)
    return state.replace(done=jnp.where(bad, jnp.ones_like(state.done), state.done))


class VmapWrapper(Wrapper):
  """A batch of envs: reset takes (N, 2) keys (or one key with batch_size), step (N, ...) states.

  Each physics call of the batched step stays one custom call over the N rows.

  Args:
    env: the env to batch: an mjbatch_jax.envs.Env, or a wrapper of one, whose reset and step
      work on one env.
    batch_size: None (default): reset takes (N,) keys; an int >= 1: reset takes one key and
      splits it into batch_size.

  Raises:
    ValueError: env is not an env, or batch_size is not an int >= 1.

  Example:
    env = VmapWrapper(CartPoleBalance())
    state = jax.jit(env.reset)(jax.random.split(jax.random.key(0), 1024))
    state = jax.jit(env.step)(state, jnp.zeros((1024, env.action_size)))
  """

  def __init__(self, env: Any, batch_size: int | None = None):
    super().__init__(env)
    self.batch_size = None if batch_size is None else v.integer("batch_size", batch_size, low=1)

  def reset(self, rng: jax.Array) -> State:
    """A batch of first states: from (N,) keys, or from one key split into batch_size."""
    check_key(rng, batched=self.batch_size is None)
    if self.batch_size is not None:
      rng = jax.random.split(rng, self.batch_size)
    return jax.vmap(self.env.reset)(rng)

  def step(self, state: State, action: jax.Array) -> State:
    action = check_action(action, (*_batch_shape(state), self.env.action_size))
    return jax.vmap(self.env.step)(state, action)


class DomainRandomizationWrapper(Wrapper):
  """A batch of envs whose params are drawn per env at reset and, with a period, while stepping.

  randomization_fn(params, rng=key) returns one env's params drawn from key, given the env's
  default params (fields from the env's `param_fields`, leaves of the fields' own shapes). Every
  `period` steps of an env its params are drawn again before the step, so that step and the
  fields it observes use the new ones. Batched as VmapWrapper, which it replaces.

    def randomize(params, rng):
      friction = jax.random.uniform(rng, minval=0.4, maxval=1.0)
      return params.replace({"geom_friction": params["geom_friction"].at[0, 0].set(friction)})

    env = DomainRandomizationWrapper(env, randomize, period=500)
  """

  def __init__(self, env: Any, randomization_fn: RandomizationFn, period: int | None = None):
    super().__init__(env)
    if not callable(randomization_fn):
      raise ValueError(f"randomization_fn must be a function (params, rng=key) -> params, got "
                       f"{v.shown(randomization_fn)}")
    if not hasattr(self.unwrapped, "default_params"):
      raise ValueError(f"env must be an mjbatch_jax.envs.Env (its params are randomised), got "
                       f"{type(self.unwrapped).__name__}")
    self._randomization_fn = randomization_fn
    self._period = None if period is None else v.integer("period", period, low=1)

  def _draw(self, rng: jax.Array) -> Params:
    default = self.unwrapped.default_params
    params = self._randomization_fn(default, rng=rng)
    if not isinstance(params, Params) or params.spec != default.spec:
      raise ValueError(
        "randomization_fn(params, rng=key) must return Params with the env's fields"
        f" {tuple(default)}, got {type(params).__name__}"
      )
    return params

  def reset(self, rng: jax.Array) -> State:
    check_key(rng, batched=True)

    def one(key: jax.Array) -> State:
      draw_key, env_key, next_key = jax.random.split(key, 3)
      with self.unwrapped.using_params(self._draw(draw_key)):
        state = self.env.reset(env_key)
      state.info[RANDOMIZATION_RNG] = next_key
      state.info[RANDOMIZATION_STEPS] = jnp.zeros((), jnp.int32)
      return state

    return jax.vmap(one)(rng)

  def step(self, state: State, action: jax.Array) -> State:
    action = check_action(action, (*_batch_shape(state), self.env.action_size))

    def one(state: State, action: jax.Array) -> State:
      if self._period is not None:
        key, draw_key = jax.random.split(state.info[RANDOMIZATION_RNG])
        steps = state.info[RANDOMIZATION_STEPS] + 1
        due = steps >= self._period
        params = jax.tree.map(
          lambda new, old: jnp.where(due, new, old), self._draw(draw_key), state.data.params
        )
        state.info[RANDOMIZATION_RNG] = key
        state.info[RANDOMIZATION_STEPS] = jnp.where(due, 0, steps)
        state = state.replace(data=state.data.replace(params=params))
      return self.env.step(state, action)

    return jax.vmap(one)(state, action)


class EpisodeWrapper(Wrapper):
  """Counts steps, repeats actions and ends episodes at episode_length (batched or not).

  Keeps Brax's info entries, which its PPO reads: `steps`, `truncation` (1 where the time limit,
  not the task, ended the episode), `episode_done` and `episode_metrics` (sums over the episode).

  Args:
    env: the env to wrap (an Env, or a wrapper of one; batched or not).
    episode_length: the time limit, in steps of env, an int >= 1: a step that brings the count
      to it or past ends the episode (done = 1, truncation = 1 unless the task ended it too).
    action_repeat: how many steps of env each step makes with the same action, an int >= 1
      (default 1); their rewards are summed and the count grows by that many.

  Raises:
    ValueError: env is not an env, or episode_length or action_repeat is not an int >= 1.

  Example:
    env = EpisodeWrapper(VmapWrapper(CartPoleBalance()), episode_length=500, action_repeat=2)
  """

  def __init__(self, env: Any, episode_length: int, action_repeat: int = 1):
    super().__init__(env)
    self.episode_length = v.integer("episode_length", episode_length, low=1)
    self.action_repeat = v.integer("action_repeat", action_repeat, low=1)

  def reset(self, rng: jax.Array) -> State:
    state = self.env.reset(rng)
    # The counters take the reward's and done's dtypes, so that loops carrying the state (Brax's
    # evaluator among them) see the same dtypes after every step.
    state.info["steps"] = jnp.zeros_like(state.reward)
    state.info["truncation"] = jnp.zeros_like(state.done)
    state.info["episode_done"] = jnp.zeros_like(state.done)
    episode = {"sum_reward": jnp.zeros_like(state.reward), "length": jnp.zeros_like(state.reward)}
    episode.update({name: jnp.zeros_like(value) for name, value in state.metrics.items()})
    state.info["episode_metrics"] = episode
    return state

  def step(self, state: State, action: jax.Array) -> State:
    def once(state: State, _: Any) -> tuple[State, jax.Array]:
      new = self.env.step(state, action)
      # An env that returns fresh metrics or info dicts would drop the entries wrappers put
      # there (Brax's evaluator adds metrics["reward"]), and a scan needs the same keys out.
      new = new.replace(metrics={**state.metrics, **new.metrics}, info={**state.info, **new.info})
      return new, new.reward

    state, rewards = jax.lax.scan(once, state, None, length=self.action_repeat)
    reward = jnp.sum(rewards, axis=0)
    info = state.info
    steps = info["steps"] + self.action_repeat
    at_end = steps >= self.episode_length
    done = jnp.where(at_end, jnp.ones_like(state.done), state.done)
    info["truncation"] = jnp.where(at_end, 1 - state.done, jnp.zeros_like(state.done))
    info["steps"] = steps
    # An episode that ended at the previous step starts its sums afresh.
    fresh = 1 - info["episode_done"]
    episode = info["episode_metrics"]
    episode["sum_reward"] = episode["sum_reward"] * fresh + reward
    episode["length"] = episode["length"] * fresh + self.action_repeat
    for name, value in state.metrics.items():
      if name != "reward":
        episode[name] = episode[name] * fresh + value
    info["episode_done"] = done
    return state.replace(reward=reward, done=done)


class AutoResetWrapper(Wrapper):
  """A done env continues from exactly its first state: row, params, fields and obs.

  Caches reset's data and obs in info (`first_data`, `first_obs`) and selects them, bit for bit,
  for the envs done after a step; the other envs' states are left as the step made them.
  """

  def reset(self, rng: jax.Array) -> State:
    state = self.env.reset(rng)
    state.info[FIRST_DATA] = state.data
    state.info[FIRST_OBS] = state.obs
    return state

  def step(self, state: State, action: jax.Array) -> State:
    if "steps" in state.info:
      state.info["steps"] = jnp.where(
        state.done.astype(bool), jnp.zeros_like(state.info["steps"]), state.info["steps"]
      )
    state = self.env.step(state.replace(done=jnp.zeros_like(state.done)), action)
    done = state.done.astype(bool)

    def pick(first: jax.Array, now: jax.Array) -> jax.Array:
      where = done.reshape(done.shape + (1,) * (jnp.ndim(now) - done.ndim))
      return jnp.where(where, first, now)

    data = jax.tree.map(pick, state.info[FIRST_DATA], state.data)
    obs = jax.tree.map(pick, state.info[FIRST_OBS], state.obs)
    return state.replace(data=data, obs=obs)


def _batch_shape(state: Any) -> tuple[int, ...]:
  """The batch shape of a batched env's state (that of its done); ValueError if it has none."""
  done = getattr(state, "done", None)
  if done is None or not hasattr(done, "shape"):
    raise ValueError(f"state must be the State of this env's reset or step, got "
                     f"{type(state).__name__}")
  if len(done.shape) != 1:
    raise ValueError(f"state must be a batch of N envs' states (done of shape (N,)), got done of "
                     f"shape {tuple(done.shape)}")
  return tuple(done.shape)


# The pmap axis of Brax's training agents: the arrays put here get the sharding that their pmap
# hands back, so that its training epoch compiles once rather than again on its second call.
_BRAX_AXIS = "i"


def _device_put_replicated(value: Any, devices: Any) -> Any:
  """jax.device_put_replicated as JAX 0.9 had it: value stacked once per device, one per shard."""
  devices = list(devices)
  if not devices:
    raise ValueError("device_put_replicated needs at least one device, got none")
  mesh = jax.sharding.Mesh(np.array(devices), (_BRAX_AXIS,))
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(_BRAX_AXIS))

  def put(x: Any) -> jax.Array:
    x = jnp.asarray(x)
    return jax.device_put(jnp.broadcast_to(x, (len(devices), *x.shape)), sharding)

  return jax.tree.map(put, value)


def install_brax_compat() -> None:
  """Supply what Brax 0.14.2's training agents call and JAX >= 0.10 removed.

  Brax 0.14.2 replicates its training state with `jax.device_put_replicated`, which JAX 0.10
  removed (Brax's main branch carries its own copy since google/brax@303d89d). Where JAX lacks
  it, this puts back a function with its old meaning; where JAX has it, nothing changes.
  `wrap_for_brax_training` calls it, so code that passes that as `wrap_env_fn` needs nothing
  else.
  """
  if not hasattr(jax, "device_put_replicated"):
    jax.device_put_replicated = _device_put_replicated  # pyright: ignore[reportAttributeAccessIssue]


def wrap_for_brax_training(
  env: Any,
  episode_length: int = 1000,
  action_repeat: int = 1,
  randomization_fn: RandomizationFn | None = None,
  randomization_period: int | None = None,
) -> Wrapper:
  """A batched, time-limited, auto-resetting env for Brax's training agents.

  Pass it as `wrap_env_fn` to `brax.training.agents.ppo.train` (and the other agents), which
  calls it with episode_length, action_repeat and randomization_fn (the one given to train, with
  its rng bound; ours passes rng again per env). Envs whose physics raised a bad-number warning
  (a NaN action among them) are done. ValueError for sizes below 1 or not ints, or a
  randomization_period without a randomization_fn. It also supplies `jax.device_put_replicated`
  to Brax 0.14.2 where JAX lacks it (`install_brax_compat`).

  Example:
    make_policy, params, metrics = ppo.train(
      CartPoleBalance(), num_timesteps=1_000_000, episode_length=500, num_envs=1024,
      wrap_env_fn=wrap_for_brax_training)
  """
  episode_length = v.integer("episode_length", episode_length, low=1)
  action_repeat = v.integer("action_repeat", action_repeat, low=1)
  if randomization_fn is not None and not callable(randomization_fn):
    raise ValueError(f"randomization_fn must be a function (params, rng=key) -> params or None, "
                     f"got {v.shown(randomization_fn)}")
  if randomization_period is not None:
    randomization_period = v.integer("randomization_period", randomization_period, low=1)
    if randomization_fn is None:
      raise ValueError("randomization_period needs randomization_fn: without it there is "
                       "nothing to redraw")
  install_brax_compat()
  wrapped: Any = WarningWrapper(env)
  if randomization_fn is None:
    wrapped = VmapWrapper(wrapped)
  else:
    wrapped = DomainRandomizationWrapper(wrapped, randomization_fn, randomization_period)
  wrapped = EpisodeWrapper(wrapped, episode_length, action_repeat)
  return AutoResetWrapper(wrapped)
