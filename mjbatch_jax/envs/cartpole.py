"""A cart-pole balance task: the small concrete env of the tests and examples."""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjbatch_jax.envs.env import Env, check_action, check_key, check_state
from mjbatch_jax.envs.state import Data, State

POLE_LENGTH = 0.6

CARTPOLE_XML = f"""
<mujoco model="cartpole">
  <option timestep="0.01" integrator="implicitfast"/>
  <worldbody>
    <geom name="floor" type="plane" pos="0 0 -1" size="3 3 .1"/>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0" range="-2 2" limited="true" damping="0.5"/>
      <geom name="cart" type="box" size=".2 .1 .05" mass="1"/>
      <body name="pole">
        <joint name="hinge" axis="0 1 0" damping="0.005"/>
        <geom name="pole" type="capsule" fromto="0 0 0 0 0 {POLE_LENGTH}" size=".03" mass=".2"/>
        <site name="tip" pos="0 0 {POLE_LENGTH}"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="slider" gear="10" ctrlrange="-1 1" ctrllimited="true"/>
  </actuator>
</mujoco>
"""
"""The MJCF of CartPoleBalance's model: a cart on a slider (range -2 to 2 m) pushed by one
motor (ctrl in [-1, 1], gear 10), a hinged pole of length POLE_LENGTH with a site "tip" at its
end, and a timestep of 0.01 s. The floor lies far below the cart, which nothing touches: its
friction is there to be randomised."""


class CartPoleBalance(Env):
  """Keep a pole upright on a cart: obs (qpos, qvel), reward the tip's height over the pole's
  length, done once the pole leans more than about 30 degrees or the cart nears its rails' end.

    env = CartPoleBalance()
    state = env.reset(jax.random.PRNGKey(0))
    state = env.step(state, jnp.zeros(env.action_size))
  """

  observe = ("site_xpos",)

  def __init__(
    self, n_substeps: int = 2, num_threads: int = 0, param_fields: Sequence[str] = ()
  ):
    """Builds the model of CARTPOLE_XML and its Simulator.

    Args:
      n_substeps: physics steps per env step, an int >= 1 (default 2: dt = 0.02 s).
      num_threads: the Simulator's threads (0, the default: one per CPU).
      param_fields: model fields each env carries in its params, for domain randomisation
        (e.g. ("geom_friction", "body_mass")); default none.

    Raises:
      ValueError: param_fields is a string rather than a sequence of names, or an argument is
        out of its range (as Env checks them).
    """
    if isinstance(param_fields, str):  # tuple() of it would be its letters
      raise ValueError(f"param_fields must be a sequence of field names, got {param_fields!r}: "
                       f"write ({param_fields!r},)")
    self.param_fields = tuple(param_fields)
    super().__init__(mujoco.MjModel.from_xml_string(CARTPOLE_XML), n_substeps, num_threads)
    self._tip = mujoco.mj_name2id(self.mj_model, mujoco.mjtObj.mjOBJ_SITE, "tip")
    self._min_upright = float(np.cos(np.pi / 6))

  def reset(self, rng: jax.Array) -> State:
    check_key(rng)
    qpos_key, qvel_key = jax.random.split(rng)
    qpos = jax.random.uniform(qpos_key, (2,), minval=-0.05, maxval=0.05)
    qvel = jax.random.uniform(qvel_key, (2,), minval=-0.05, maxval=0.05)
    data = self.make_data(qpos=qpos, qvel=qvel)
    zero = jnp.zeros((), data.row.dtype)
    return State(data, self._obs(data), zero, zero, {"upright": self._upright(data)}, {})

  def step(self, state: State, action: jax.Array) -> State:
    check_state(state)
    action = check_action(action, (self.action_size,))
    data = self.pipeline_step(state.data, action)
    upright = self._upright(data)
    fell = (upright < self._min_upright) | (jnp.abs(data.qpos[0]) > 1.8)
    return state.replace(
      data=data,
      obs=self._obs(data),
      reward=upright,
      done=fell.astype(data.row.dtype),
      metrics={**state.metrics, "upright": upright},
    )

  def _upright(self, data: Data) -> jax.Array:
    return data.site_xpos[self._tip, 2] / POLE_LENGTH

  def _obs(self, data: Data) -> jax.Array:
    return jnp.concatenate([data.qpos, data.qvel])
