"""Teach a Unitree Go1 to follow joystick velocity commands by PPO, in one JAX + optax file.

  python examples/go1_joystick.py --threads 2 --num-envs 256 --minutes 38   # train, save
  python examples/go1_joystick.py --play                                    # 10 s at 0.5 m/s
  python examples/go1_joystick.py --processes 2 --threads 1 --num-envs 256   # 2 processes
  python -m mjbatch_jax.launch -n 2 examples/go1_joystick.py --threads 1 --num-envs 256  # same

The robot is MuJoCo Menagerie's Go1 (../shared/models/unitree_go1/scene.xml beside the checkout,
or `--model`), changed with MjSpec as MuJoCo Playground's joystick task has it: a 4 ms timestep,
5 substeps per 50 Hz control step, position actuators with kp 35 and kd 0.5 and the motors'
rotor inertia added to the legs' armature. An action moves the 12 joint targets around the
'home' keyframe's pose.

One training iteration is one jitted function: a `lax.scan` over the unroll in which each
control step is the policy on every env and then ONE `mjbatch_jax.step` custom call for the
physics of all of them (5 substeps, the feet positions observed at the new state), rewards,
automatic resets (`jnp.where` on the state rows) and friction redraws; then GAE and epochs of
minibatch PPO updates, also a `lax.scan`. The PPO is written out here (Gaussian MLP policy, value
MLP, running observation normalisation, clipped surrogate, entropy bonus, Adam whose learning
rate follows the policy's KL divergence as in rsl_rl), no RL framework.

Over several processes (--processes N, or started by `python -m mjbatch_jax.launch -n N`; or
over several CPU devices of one process, XLA_FLAGS=--xla_force_host_platform_device_count=N)
training is data-parallel, with gradients averaged by JAX collectives
(`mjbatch_jax.distributed.setup`). --num-envs is over all the mesh's devices and must be a
multiple of their number; each device steps only its own rows of the global EnvState, which is
sharded over the mesh axis, while the TrainState (networks, Adam's state, learning rate,
observation normaliser) is replicated. The iteration is then one jitted shard_map: each device
folds the iteration's key with its index (so that its envs draw their own noise, resets and
frictions) and rolls out, computes GAE and shuffles minibatches on its envs alone; each
minibatch's gradient and KL are averaged over the devices with one `jax.lax.pmean` (a gloo
all-reduce between processes) before the Adam step and the learning-rate rule; the normaliser
merges the moments of every device's observations; the metrics are reduced over the devices. So
every process applies the same updates to the same replicated state, and the policy equals, bit
for bit, that of one process running the program over as many devices
(tests/test_go1_distributed.py). Advantages are normalised within each device's minibatch,
which needs no further collective. Process 0 alone prints and writes the policy and the curve;
--play runs in one process. With one device in all, the iteration is the plain jitted function.

Per env: 500-step episodes (10 s), a command per episode (forward 0..1 m/s, small sideways and
turning rates), ground friction redrawn in [0.4, 1.0] every 5 s, an episode ended early when
the trunk falls low or tilts past 60 degrees. The 50 observations are the base's linear and
angular velocity and gravity in its frame, joint positions (minus the home pose) and velocities,
the last action, the command and the 2 Hz gait clock (sin, cos). The reward tracks the commanded
velocity and yaw rate and a trot (diagonal feet FR+RL and FL+RR swinging in turn on the clock),
and penalises leaving the home pose, tilting, bouncing, wobbling, joint limits and jerky actions.

Training saves the policy with its normaliser and config (--out, an .npz) and a learning curve
beside it (_curve.json, _curve.png). --play loads the policy, runs 16 envs for 10 s with a fixed
0.5 m/s forward command (friction spread over [0.4, 1.0]), prints the mean forward-velocity
error and the falls, and plots commanded vs achieved velocity (_play.png); with a working
offscreen OpenGL (MUJOCO_GL=egl and pyopengl) it also writes a 4 s GIF of env 0 (_play.gif).

The first command above, on a 2-CPU machine shared with other jobs, ran 668 iterations (4.1 M env
steps) in 38 minutes; --play of that policy: mean forward-velocity error 0.017 m/s at 0.5 m/s, no
falls (examples/results/). The physics is most of the time: a rollout runs at the speed of its
step calls alone, an iteration (PPO updates included) at 0.8-0.9 of it.
"""

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple, cast

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is imported: headless rendering

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import distributed, launch  # noqa: E402
from mjbatch_jax.simulator import MAX_THREADS  # noqa: E402

MODEL = Path(__file__).resolve().parents[2] / "shared" / "models" / "unitree_go1" / "scene.xml"
RESULTS = Path(__file__).resolve().parent / "results"

# -- the robot -----------------------------------------------------------------------------------

TIMESTEP = 0.004
DECIMATION = 5  # physics steps per control step
CTRL_DT = TIMESTEP * DECIMATION  # 50 Hz
KP, KD = 35.0, 0.5
ROTOR_INERTIA = 0.000111842  # kg m^2, added to the armature of each leg joint

FEET = ("FR", "FL", "RR", "RL")  # sites and geoms of the four feet
LEGS = tuple(f"{foot}_{part}" for foot in FEET for part in ("hip", "thigh", "calf"))
JOINTS = tuple(f"{leg}_joint" for leg in LEGS)  # the actuators are named as their legs
ROOT = "root"  # the trunk's free joint, named here since the file leaves it unnamed

# -- the task ------------------------------------------------------------------------------------

OBS_SIZE = 50
ACTION_SCALE = 0.3  # rad of joint target per unit of action
COMMAND_LOW = (0.0, -0.2, -0.3)  # forward m/s, sideways m/s, yaw rad/s
COMMAND_HIGH = (1.0, 0.2, 0.3)
FRICTION = (0.4, 1.0)
FRICTION_PERIOD = round(5.0 / CTRL_DT)  # control steps between friction redraws
GAIT_HZ = 2.0
FOOT_PHASE = (0.0, math.pi, math.pi, 0.0)  # FR, FL, RR, RL: the diagonal pairs in antiphase
SWING_HEIGHT = 0.06  # m, the feet's apex in swing
FALL_HEIGHT = 0.15  # m of trunk height
FALL_UPRIGHT = 0.5  # cos 60 degrees
RESET_NOISE = 0.1  # rad of joint angle and m/s, rad/s of base velocity at reset
PLAY_COMMAND = 0.5  # m/s forward

# Weights of the reward terms; their sum, times CTRL_DT, is the step's reward.
REWARD_WEIGHTS = {
  "velocity": 1.5,  # exp(-|command_xy - v_xy|^2 / 0.25)
  "yaw_rate": 0.75,  # exp(-(command_yaw - w_z)^2 / 0.25)
  "gait": 1.0,  # feet heights and contacts following the trot clock
  "pose": -0.5,  # weighted squared distance of the joints from the home pose
  "orientation": -5.0,  # squared tilt (gravity's horizontal part in the base frame)
  "bounce": -2.0,  # squared vertical velocity of the base
  "wobble": -0.05,  # squared roll and pitch rates
  "joint_limits": -2.0,  # rad beyond 95% of the joints' ranges
  "action_rate": -0.01,  # squared change of the action
}
TRACKING_SIGMA = 0.25
GAIT_SIGMA = 0.005
POSE_WEIGHTS = (1.0, 0.3, 0.3)  # hip (abduction), thigh, calf
FALL_PENALTY = 0.25  # about 10 steps' reward: enough to matter, not enough to freeze

# -- PPO -----------------------------------------------------------------------------------------

HIDDEN = (128, 128, 128)
INIT_STD = 0.8
GAMMA, LAMBDA = 0.97, 0.95
CLIP = 0.2
ENTROPY_COST = 0.005
VALUE_COST = 0.5
EPOCHS, MINIBATCHES = 5, 4
LEARNING_RATE = 1e-3  # the first; KL_TARGET moves it within LR_RANGE
KL_TARGET = 0.01
LR_RANGE = (1e-5, 1e-2)
MAX_GRAD_NORM = 1.0


@dataclasses.dataclass(frozen=True)
class Config:
  """What a run was made with; saved with the policy."""

  num_envs: int = 1024
  unroll: int = 24
  iterations: int = 300
  episode_length: int = 500
  seed: int = 0
  minutes: float | None = None  # stop training (and save) after this much wall time


# -- the model and the lookups -------------------------------------------------------------------


def go1_model(path: Path) -> mujoco.MjModel:
  """The Go1 with the joystick task's timestep, PD gains and rotor inertia."""
  spec = mujoco.MjSpec.from_file(str(path))
  spec.option.timestep = TIMESTEP
  for actuator in spec.actuators:
    actuator.gainprm[0] = KP
    actuator.biasprm[1] = -KP
    actuator.biasprm[2] = -KD
  for joint in spec.joints:
    if joint.type == mujoco.mjtJoint.mjJNT_FREE:
      joint.name = joint.name or ROOT
    elif joint.name in JOINTS:
      joint.armature += ROTOR_INERTIA
  return spec.compile()


@dataclasses.dataclass(frozen=True)
class Task:
  """Indices and constants of the task, looked up by name once (numpy: static under jit)."""

  sim: mjbatch_jax.Simulator
  home: np.ndarray  # (nstate,) the 'home' keyframe's state row
  base_qpos: slice  # row columns of the free joint: position, quaternion
  base_qvel: slice  # linear velocity (world frame), angular velocity (base frame)
  joint_qpos: np.ndarray  # (12,) row columns
  joint_qvel: np.ndarray
  actuators: np.ndarray  # (12,) ctrl indices of the joints' position actuators
  default_pose: np.ndarray  # (12,) joint angles of 'home'
  soft_low: np.ndarray  # (12,) 95% of the joint ranges
  soft_high: np.ndarray
  feet: np.ndarray  # (4,) site ids
  foot_radius: np.ndarray  # (4,)
  ground: np.ndarray  # (5,) geom ids: floor, then the feet


def make_task(model: mujoco.MjModel, threads: int,
              sim: mjbatch_jax.Simulator | None = None) -> Task:
  """Simulator (sim, or a new one) and lookups; ValueError naming what the model lacks."""
  if sim is None:
    sim = mjbatch_jax.Simulator(model, num_threads=threads)
  names = sim.names
  root = names.joint(ROOT)
  joints = names.joints(JOINTS)
  low, high = model.jnt_range[joints].T
  centre, half = (low + high) / 2, (high - low) / 2
  home = np.asarray(sim.init_state(1, keyframe="home")[0])
  feet_geoms = names.geoms(FEET)
  return Task(
    sim=sim,
    home=home,
    base_qpos=root.qpos,
    base_qvel=root.qvel,
    joint_qpos=names.qpos_columns(JOINTS),
    joint_qvel=names.qvel_columns(JOINTS),
    actuators=names.actuators(LEGS),
    default_pose=home[names.qpos_columns(JOINTS)],
    soft_low=centre - 0.95 * half,
    soft_high=centre + 0.95 * half,
    feet=names.sites(FEET),
    foot_radius=model.geom_size[feet_geoms, 0],
    ground=np.concatenate([[names.geom("floor")], feet_geoms]),
  )


# -- the environment: batched pure functions over (N, ...) arrays ------------------------------


class EnvState(NamedTuple):
  rows: jax.Array  # (N, nstate)
  params: mjbatch_jax.Params  # geom_friction of the floor and the feet
  command: jax.Array  # (N, 3)
  last_action: jax.Array  # (N, 12)
  steps: jax.Array  # (N,) control steps into the episode
  obs: jax.Array  # (N, OBS_SIZE)


def rotate_inverse(quat: jax.Array, v: jax.Array) -> jax.Array:
  """v (world frame) in the frame of the unit quaternions quat (w, x, y, z)."""
  w, u = quat[..., :1], -quat[..., 1:]  # the conjugate rotates back
  t = 2 * jnp.cross(u, v)
  return v + w * t + jnp.cross(u, t)


def base_motion(task: Task, rows: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Linear velocity, angular velocity and gravity's direction, all in the base frame."""
  qpos, qvel = rows[:, task.base_qpos], rows[:, task.base_qvel]
  quat = qpos[:, 3:7]
  velocity = rotate_inverse(quat, qvel[:, :3])
  gravity = rotate_inverse(quat, jnp.broadcast_to(jnp.array([0.0, 0.0, -1.0]), velocity.shape))
  return velocity, qvel[:, 3:6], gravity  # a free joint's angular velocity is in its own frame


def clock(steps: jax.Array) -> jax.Array:
  """(N,) phase of the gait clock, rad."""
  return 2 * jnp.pi * GAIT_HZ * CTRL_DT * steps


def observe(
  task: Task, rows: jax.Array, last_action: jax.Array, command: jax.Array, steps: jax.Array,
  motion: tuple[jax.Array, jax.Array, jax.Array] | None = None,
) -> jax.Array:
  """The (N, OBS_SIZE) observations; motion: base_motion(task, rows) if already at hand."""
  velocity, angular, gravity = base_motion(task, rows) if motion is None else motion
  phase = clock(steps)
  return jnp.concatenate(
    [
      velocity,
      angular,
      gravity,
      rows[:, task.joint_qpos] - task.default_pose,
      rows[:, task.joint_qvel],
      last_action,
      command,
      jnp.sin(phase)[:, None],
      jnp.cos(phase)[:, None],
    ],
    axis=-1,
  )


def reward_terms(
  task: Task,
  rows: jax.Array,
  motion: tuple[jax.Array, jax.Array, jax.Array],
  feet_z: jax.Array,
  steps: jax.Array,
  command: jax.Array,
  action: jax.Array,
  last_action: jax.Array,
) -> dict[str, jax.Array]:
  """Each reward term (N,) at the state after a control step, unweighted."""
  velocity, angular, gravity = motion
  foot_phase = clock(steps)[:, None] + jnp.asarray(FOOT_PHASE)
  swing = jnp.sin(foot_phase) > 0
  target = SWING_HEIGHT * jnp.maximum(jnp.sin(foot_phase), 0.0)
  # The feet sink about 1.7 cm into the floor (their solimp is soft): above ground is >= 0.
  height = jnp.maximum(feet_z - task.foot_radius, 0.0)
  contact = height < 0.005
  joints = rows[:, task.joint_qpos]
  pose_weights = jnp.tile(jnp.asarray(POSE_WEIGHTS), len(FEET))
  beyond = jnp.maximum(joints - task.soft_high, 0) + jnp.maximum(task.soft_low - joints, 0)
  return {
    "velocity": jnp.exp(-jnp.sum((command[:, :2] - velocity[:, :2]) ** 2, -1) / TRACKING_SIGMA),
    "yaw_rate": jnp.exp(-((command[:, 2] - angular[:, 2]) ** 2) / TRACKING_SIGMA),
    "gait": 0.5 * jnp.exp(-jnp.sum((height - target) ** 2, -1) / GAIT_SIGMA)
    + 0.5 * jnp.mean(contact != swing, -1),
    "pose": jnp.sum(pose_weights * (joints - task.default_pose) ** 2, -1),
    "orientation": jnp.sum(gravity[:, :2] ** 2, -1),
    "bounce": velocity[:, 2] ** 2,
    "wobble": jnp.sum(angular[:, :2] ** 2, -1),
    "joint_limits": jnp.sum(beyond, -1),
    "action_rate": jnp.sum((action - last_action) ** 2, -1),
  }


def fallen(task: Task, rows: jax.Array, gravity: jax.Array) -> jax.Array:
  return (rows[:, task.base_qpos][:, 2] < FALL_HEIGHT) | (-gravity[:, 2] < FALL_UPRIGHT)


RESET_DRAWS = len(JOINTS) + 6 + 3  # uniform numbers per reset: joints, base velocity, command


def fresh_rows(task: Task, u: jax.Array) -> jax.Array:
  """'home' rows with a little noise on the joint angles and the base velocity.

  u: (N, RESET_DRAWS) uniform in [0, 1): one draw for all of a step's resets keeps the jitted
  graph (and its compile time) small.
  """
  noise = RESET_NOISE * (2 * u[:, : len(JOINTS) + 6] - 1)
  rows = jnp.broadcast_to(jnp.asarray(task.home, u.dtype), (u.shape[0], task.home.size))
  rows = rows.at[:, task.joint_qpos].add(noise[:, : len(JOINTS)])
  return rows.at[:, task.base_qvel].add(noise[:, len(JOINTS) :])


def sample_commands(u: jax.Array) -> jax.Array:
  """Commands uniform in [COMMAND_LOW, COMMAND_HIGH) from u (N, RESET_DRAWS) as fresh_rows."""
  low, high = jnp.asarray(COMMAND_LOW, u.dtype), jnp.asarray(COMMAND_HIGH, u.dtype)
  return low + (high - low) * u[:, -3:]


def redraw_friction(
  key: jax.Array, params: mjbatch_jax.Params, redraw: jax.Array
) -> mjbatch_jax.Params:
  """Ground friction drawn anew, uniform in FRICTION, for the envs where redraw (N,) is true."""
  drawn = mjbatch_jax.randomize(key, params, uniform={"geom_friction": FRICTION})
  old = params["geom_friction"]  # (N, 5, 3): floor, then the feet
  # The feet have priority 1, so their friction, not the floor's, is that of their contacts with
  # it: the floor's draw goes to them as well. Torsional and rolling friction stay the model's.
  new = old.at[..., 0].set(drawn["geom_friction"][:, :1, 0])
  return params.replace({"geom_friction": jnp.where(redraw[:, None, None], new, old)})


def friction_params(task: Task, n: int) -> mjbatch_jax.Params:
  return task.sim.params(n, ("geom_friction",), select={"geom_friction": list(task.ground)})


def init_env(task: Task, key: jax.Array, n: int, episode_length: int) -> EnvState:
  k_reset, k_friction, k_steps = jax.random.split(key, 3)
  u = jax.random.uniform(k_reset, (n, RESET_DRAWS), jnp.result_type(float))
  rows, command = fresh_rows(task, u), sample_commands(u)
  params = redraw_friction(k_friction, friction_params(task, n), jnp.ones(n, bool))
  # Episodes that start at once would end at once: spread them over the episode.
  steps = jax.random.randint(k_steps, (n,), 0, episode_length)
  last_action = jnp.zeros((n, len(JOINTS)), rows.dtype)
  return EnvState(rows, params, command, last_action, steps,
                  observe(task, rows, last_action, command, steps))


class Outcome(NamedTuple):
  reward: jax.Array  # (N,)
  terminated: jax.Array  # (N,) fell: no value after it
  done: jax.Array  # (N,) fell or the episode's end: the env was reset
  next_obs: jax.Array  # (N, OBS_SIZE) the observation before the reset, to bootstrap from
  velocity: jax.Array  # (N, 3) base frame, after the step
  terms: dict[str, jax.Array]


def env_step(
  task: Task,
  env: EnvState,
  action: jax.Array,
  key: jax.Array,
  episode_length: int,
  redraws: bool = True,
  command: jax.Array | None = None,
) -> tuple[EnvState, Outcome]:
  """One control step of every env: one physics call, rewards, then resets where done."""
  n = action.shape[0]
  targets = task.default_pose + ACTION_SCALE * action
  ctrl = jnp.zeros((n, task.sim.nu), action.dtype).at[:, task.actuators].set(targets)
  rows, observed = mjbatch_jax.step(
    env.rows, ctrl, env.params, nstep=DECIMATION, observe=("site_xpos",)
  )
  steps = env.steps + 1
  feet_z = observed["site_xpos"][:, task.feet, 2]
  motion = base_motion(task, rows)
  terms = reward_terms(task, rows, motion, feet_z, steps, env.command, action, env.last_action)
  total = sum(REWARD_WEIGHTS[name] * value for name, value in terms.items())
  fell = fallen(task, rows, motion[2])
  # Clipped at 0 so that ending an episode early never pays; a fall costs on top.
  reward = CTRL_DT * jnp.maximum(total, 0.0) - FALL_PENALTY * fell
  next_obs = observe(task, rows, action, env.command, steps, motion)
  done = fell | (steps >= episode_length)

  k_reset, k_friction = jax.random.split(key)
  u = jax.random.uniform(k_reset, (n, RESET_DRAWS), rows.dtype)
  rows = jnp.where(done[:, None], fresh_rows(task, u), rows)
  new_command = sample_commands(u) if command is None else command
  command_now = jnp.where(done[:, None], new_command, env.command)
  steps = jnp.where(done, 0, steps)
  last_action = jnp.where(done[:, None], 0.0, action)
  params = env.params
  if redraws:
    params = redraw_friction(k_friction, params, steps % FRICTION_PERIOD == 0)
  obs = observe(task, rows, last_action, command_now, steps)
  env = EnvState(rows, params, command_now, last_action, steps, obs)
  return env, Outcome(reward, fell, done, next_obs, motion[0], terms)


# -- the networks --------------------------------------------------------------------------------


def init_mlp(key: jax.Array, sizes: tuple[int, ...], last_scale: float) -> list[dict]:
  layers = []
  keys = jax.random.split(key, len(sizes) - 1)
  for i, (k, fan_in, fan_out) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True)):
    scale = last_scale if i == len(sizes) - 2 else 1.0
    w = scale * jax.random.normal(k, (fan_in, fan_out)) / np.sqrt(fan_in)
    layers.append({"w": w, "b": jnp.zeros(fan_out)})
  return layers


def mlp(layers: list[dict], x: jax.Array) -> jax.Array:
  for layer in layers[:-1]:
    x = jax.nn.elu(x @ layer["w"] + layer["b"])
  return x @ layers[-1]["w"] + layers[-1]["b"]


def init_params(key: jax.Array, nu: int) -> dict:
  k_policy, k_value = jax.random.split(key)
  return {
    "policy": init_mlp(k_policy, (OBS_SIZE, *HIDDEN, nu), 0.01),  # near-zero first actions
    "log_std": jnp.full(nu, np.log(INIT_STD)),
    "value": init_mlp(k_value, (OBS_SIZE, *HIDDEN, 1), 1.0),
  }


class Normalizer(NamedTuple):
  mean: jax.Array
  var: jax.Array
  count: jax.Array


def normalize(norm: Normalizer, obs: jax.Array) -> jax.Array:
  return jnp.clip((obs - norm.mean) / jnp.sqrt(norm.var + 1e-6), -10.0, 10.0)


def update_normalizer(norm: Normalizer, obs: jax.Array, axis: str | None = None) -> Normalizer:
  """Merge a batch's moments into the running ones (Chan et al.'s parallel algorithm).

  With axis (inside shard_map), the batch is every device's obs together, so that the
  replicated normaliser stays the same everywhere.
  """
  obs = obs.reshape(-1, obs.shape[-1])
  n = obs.shape[0]
  mean, var = jnp.mean(obs, 0), jnp.var(obs, 0)
  if axis is not None:
    # Every device has as many observations: the whole batch's mean is the mean of the
    # devices' means, and its variance the mean of theirs plus the spread of their means.
    local_mean, mean = mean, jax.lax.pmean(mean, axis)
    var = jax.lax.pmean(var + (local_mean - mean) ** 2, axis)
    n *= jax.lax.axis_size(axis)
  total = norm.count + n
  delta = mean - norm.mean
  new_mean = norm.mean + delta * n / total
  m2 = norm.var * norm.count + var * n + delta**2 * norm.count * n / total
  return Normalizer(new_mean, m2 / total, total)


def log_prob(action: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
  z = (action - mean) * jnp.exp(-log_std)
  return jnp.sum(-0.5 * z**2 - log_std - 0.5 * np.log(2 * np.pi), -1)


# -- PPO -----------------------------------------------------------------------------------------


class TrainState(NamedTuple):
  params: dict
  opt_state: Any
  lr: jax.Array
  norm: Normalizer


OPTIMIZER = optax.chain(optax.clip_by_global_norm(MAX_GRAD_NORM), optax.scale_by_adam())


def init_train(key: jax.Array, nu: int) -> TrainState:
  params = init_params(key, nu)
  norm = Normalizer(jnp.zeros(OBS_SIZE), jnp.ones(OBS_SIZE), jnp.asarray(1e-4))
  opt_state = OPTIMIZER.init(ravel_pytree(params)[0])
  return TrainState(params, opt_state, jnp.asarray(LEARNING_RATE), norm)


class Batch(NamedTuple):
  obs: jax.Array
  action: jax.Array
  log_prob: jax.Array
  mean: jax.Array
  advantage: jax.Array
  ret: jax.Array


def gae(reward, value, next_value, terminated, done) -> tuple[jax.Array, jax.Array]:
  """Advantages and returns of (T, N) arrays; a truncated episode bootstraps from next_value."""
  delta = reward + GAMMA * (1.0 - terminated) * next_value - value

  def back(acc, x):
    delta_t, done_t = x
    acc = delta_t + GAMMA * LAMBDA * (1.0 - done_t) * acc
    return acc, acc

  _, advantage = jax.lax.scan(back, jnp.zeros_like(delta[0]), (delta, done), reverse=True)
  return advantage, advantage + value


def ppo_loss(params: dict, batch: Batch, norm: Normalizer, old_log_std: jax.Array):
  obs = normalize(norm, batch.obs)
  mean = mlp(params["policy"], obs)
  log_std = params["log_std"]
  ratio = jnp.exp(log_prob(batch.action, mean, log_std) - batch.log_prob)
  adv = (batch.advantage - batch.advantage.mean()) / (batch.advantage.std() + 1e-8)
  surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - CLIP, 1 + CLIP) * adv)
  value = mlp(params["value"], obs)[:, 0]
  value_loss = jnp.mean((value - batch.ret) ** 2)
  entropy = jnp.sum(log_std + 0.5 * np.log(2 * np.pi * np.e))
  loss = -jnp.mean(surrogate) + VALUE_COST * value_loss - ENTROPY_COST * entropy
  # KL(old || new) of the diagonal Gaussians, which steers the learning rate.
  var, old_var = jnp.exp(2 * log_std), jnp.exp(2 * old_log_std)
  kl = jnp.mean(jnp.sum(
    log_std - old_log_std + (old_var + (batch.mean - mean) ** 2) / (2 * var) - 0.5, -1
  ))
  return loss, {"value_loss": value_loss, "kl": kl, "clip_fraction":
                jnp.mean(jnp.abs(ratio - 1) > CLIP)}


def pmean(tree: Any, axis: str | None) -> Any:
  """The mean over the mesh axis in the data-parallel iteration; the tree itself without one."""
  return tree if axis is None else jax.lax.pmean(tree, axis)


def ppo_epochs(
  train: TrainState, batch: Batch, key: jax.Array, axis: str | None = None
) -> tuple[TrainState, dict]:
  """EPOCHS passes over the batch in MINIBATCHES shuffled minibatches, one lax.scan.

  With axis (inside shard_map), batch is this device's; each minibatch's gradient and KL are
  averaged over the devices, so that every device takes the same step.
  """
  total = batch.obs.shape[0]
  parts = min(MINIBATCHES, total)
  size = total // parts
  order = jax.vmap(lambda k: jax.random.permutation(k, total)[: parts * size])(
    jax.random.split(key, EPOCHS)
  ).reshape(EPOCHS * parts, size)
  old_log_std = train.params["log_std"]
  # Adam on one flat vector instead of 17 leaves: a few fusions instead of dozens to compile.
  flat, unravel = ravel_pytree(train.params)

  def loss(flat, part):
    return ppo_loss(unravel(flat), part, train.norm, old_log_std)

  def minibatch(carry, idx):
    flat, opt_state, lr = carry
    part = jax.tree.map(lambda x: x[idx], batch)
    # Varying over the mesh, so that grad gives this device's gradient for pmean to average
    # (the gradient w.r.t. a replicated value inside shard_map would be psum-ed by itself).
    local = flat if axis is None else jax.lax.pcast(flat, axis, to="varying")
    grads, aux = jax.grad(loss, has_aux=True)(local, part)
    if axis is not None:
      # One all-reduce for the gradient and the KL (with the other metrics), not one each:
      # between processes each costs a round trip, and there are EPOCHS * MINIBATCHES of them.
      names = sorted(aux)
      both = jax.lax.pmean(jnp.concatenate([grads, jnp.stack([aux[k] for k in names])]), axis)
      grads, aux = both[: grads.size], {k: both[grads.size + i] for i, k in enumerate(names)}
    kl = aux["kl"]
    lr = jnp.where(kl > 2 * KL_TARGET, lr / 1.5, jnp.where(kl < KL_TARGET / 2, lr * 1.5, lr))
    lr = jnp.clip(lr, *LR_RANGE)
    updates, opt_state = OPTIMIZER.update(grads, opt_state)
    return (flat - lr * cast(jax.Array, updates), opt_state, lr), aux

  (flat, opt_state, lr), aux = jax.lax.scan(minibatch, (flat, train.opt_state, train.lr), order)
  train = train._replace(params=unravel(flat), opt_state=opt_state, lr=lr)
  return train, jax.tree.map(jnp.mean, aux)


class Rollout(NamedTuple):
  obs: jax.Array  # (T, N, OBS_SIZE) what the policy saw
  action: jax.Array  # (T, N, 12)
  log_prob: jax.Array  # (T, N)
  mean: jax.Array  # (T, N, 12) the policy's mean action
  command: jax.Array  # (T, N, 3)
  out: Outcome


def rollout(
  task: Task, config: Config, train: TrainState, env: EnvState, key: jax.Array
) -> tuple[EnvState, Rollout]:
  """config.unroll control steps of the stochastic policy on every env, one lax.scan."""
  params = train.params
  std = jnp.exp(params["log_std"])

  def control_step(env, key):
    k_action, k_env = jax.random.split(key)
    mean = mlp(params["policy"], normalize(train.norm, env.obs))
    action = mean + std * jax.random.normal(k_action, mean.shape, mean.dtype)
    logp = log_prob(action, mean, params["log_std"])
    new_env, out = env_step(task, env, action, k_env, config.episode_length)
    return new_env, Rollout(env.obs, action, logp, mean, env.command, out)

  return jax.lax.scan(control_step, env, jax.random.split(key, config.unroll))


def make_iteration(task: Task, config: Config, dist: distributed.Distributed | None = None):
  """The jitted training iteration: rollout, GAE, PPO epochs, normaliser update.

  With dist over several devices, one jitted shard_map over its mesh: env (its rows) sharded
  over the axis, train, key and the metrics replicated.
  """
  axis = None if dist is None or dist.mesh.devices.size == 1 else dist.axis

  def iteration(train: TrainState, env: EnvState, key: jax.Array):
    if axis is not None:
      # Each device's own random stream: its envs' actions, resets, frictions and shuffles.
      key = jax.random.fold_in(key, jax.lax.axis_index(axis))
    k_rollout, k_epochs = jax.random.split(key)
    env, r = rollout(task, config, train, env, k_rollout)
    value_net = train.params["value"]
    value = mlp(value_net, normalize(train.norm, r.obs))[..., 0]
    next_value = mlp(value_net, normalize(train.norm, r.out.next_obs))[..., 0]
    terminated, done = (x.astype(value.dtype) for x in (r.out.terminated, r.out.done))
    advantage, ret = gae(r.out.reward, value, next_value, terminated, done)
    obs, action, logp, mean = (
      x.reshape(-1, *x.shape[2:]) for x in (r.obs, r.action, r.log_prob, r.mean)
    )
    batch = Batch(obs, action, logp, mean, advantage.reshape(-1), ret.reshape(-1))
    train, aux = ppo_epochs(train, batch, k_epochs, axis)
    train = train._replace(norm=update_normalizer(train.norm, r.obs, axis))
    velocity = r.out.velocity
    # Means over this device's envs, then over the devices (each has as many envs).
    means = pmean({
      "reward": jnp.mean(r.out.reward),
      "velocity_error": jnp.mean(jnp.linalg.norm(r.command[..., :2] - velocity[..., :2], axis=-1)),
      "forward_error": jnp.mean(jnp.abs(r.command[..., 0] - velocity[..., 0])),
      **{f"term_{name}": jnp.mean(v) for name, v in r.out.terms.items()},
    }, axis)
    falls = jnp.sum(r.out.terminated)
    metrics = {
      **means,
      "falls": falls if axis is None else jax.lax.psum(falls, axis),
      "std": jnp.mean(jnp.exp(train.params["log_std"])),
      "lr": train.lr,
      **aux,  # already averaged over the devices in ppo_epochs
    }
    return train, env, metrics

  if axis is None:
    return jax.jit(iteration, donate_argnums=(0, 1))
  assert dist is not None
  return dist.map(iteration, out_specs=(P(), P(axis), P()))


def init_envs(task: Task, config: Config, key: jax.Array,
              dist: distributed.Distributed | None = None) -> EnvState:
  """config.num_envs envs; with dist over several devices, each device makes its own rows."""
  if dist is None or dist.mesh.devices.size == 1:
    return init_env(task, key, config.num_envs, config.episode_length)
  axis, per_device = dist.axis, config.num_envs // dist.mesh.devices.size

  def local(key: jax.Array) -> EnvState:
    # Folded with the device's index: every device's envs start from their own draws.
    key = jax.random.fold_in(key, jax.lax.axis_index(axis))
    return init_env(task, key, per_device, config.episode_length)

  return dist.map(local, out_specs=P(axis))(dist.replicate(np.asarray(key)))


def benchmark(
  task: Task, config: Config, train: TrainState, env: EnvState, iteration,
  dist: distributed.Distributed | None = None,
) -> tuple[dict, dict]:
  """Wall and CPU seconds of a training iteration, of its rollout alone and of its physics alone.

  The physics alone replays the rollout's own controls from the same rows (a walking robot's
  contacts cost more than a standing one's), as config.unroll batched step calls. The three are
  timed in turn, three times, so that a busy machine slows them alike; each runs on copies.
  With dist over several devices, each is a shard_map over its mesh, as the iteration is.
  """

  def physics(rows, ctrls, params):
    def body(rows, ctrl):
      rows, observed = mjbatch_jax.step(
        rows, ctrl, params, nstep=DECIMATION, observe=("site_xpos",)
      )
      return rows, observed["site_xpos"][:, 0, 2]

    return jax.lax.scan(body, rows, ctrls)

  def controls(action):
    targets = task.default_pose + ACTION_SCALE * action
    ctrls = jnp.zeros((*targets.shape[:2], task.sim.nu), targets.dtype)
    return ctrls.at[..., task.actuators].set(targets)

  key = jax.random.PRNGKey(config.seed + 1)
  if dist is None or dist.mesh.devices.size == 1:
    physics, controls = jax.jit(physics), jax.jit(controls)
    roll = jax.jit(lambda train, env, key: rollout(task, config, train, env, key))
    copy = lambda tree: jax.tree.map(jnp.copy, tree)  # noqa: E731  (the iteration donates)
  else:
    axis = dist.axis
    steps = P(None, axis)  # (unroll, envs, ...) arrays: envs over the devices

    def local_rollout(train, env, key):
      return rollout(task, config, train, env, jax.random.fold_in(key, jax.lax.axis_index(axis)))

    physics = dist.map(physics, out_specs=(P(axis), steps))
    controls = dist.map(controls, out_specs=steps)
    roll = dist.map(local_rollout, out_specs=(P(axis), steps))
    copy = lambda tree: tree  # noqa: E731  (a shard_map iteration donates nothing)
    key = dist.replicate(np.asarray(key))
  _, r = roll(train, env, key)
  ctrls = controls(r.action)
  calls = {
    "iteration": lambda: iteration(copy(train), copy(env), key),
    "rollout": lambda: roll(train, env, key),
    "physics": lambda: physics(env.rows, ctrls, env.params),
  }
  jax.block_until_ready(calls["physics"]())
  wall: dict[str, list[float]] = {name: [] for name in calls}
  cpu: dict[str, list[float]] = {name: [] for name in calls}
  for _ in range(3):
    for name, call in calls.items():
      t0, cpu0 = time.perf_counter(), time.process_time()
      jax.block_until_ready(call())
      wall[name].append(time.perf_counter() - t0)
      cpu[name].append(time.process_time() - cpu0)
  median = lambda times: {name: float(np.median(t)) for name, t in times.items()}  # noqa: E731
  return median(wall), median(cpu)


# -- saving and loading --------------------------------------------------------------------------


def save_policy(path: Path, train: TrainState, config: Config, nu: int) -> None:
  arrays = {"log_std": train.params["log_std"], "obs_mean": train.norm.mean,
            "obs_var": train.norm.var, "obs_count": train.norm.count}
  for net in ("policy", "value"):
    for i, layer in enumerate(train.params[net]):
      arrays[f"{net}_w{i}"], arrays[f"{net}_b{i}"] = layer["w"], layer["b"]
  meta = {"config": dataclasses.asdict(config), "nu": nu, "obs_size": OBS_SIZE,
          "hidden": list(HIDDEN), "action_scale": ACTION_SCALE, "format": "go1_joystick/1"}
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + ".tmp.npz")  # never leave a half-written policy behind
  saved: dict[str, Any] = {k: np.asarray(v) for k, v in arrays.items()}
  np.savez(tmp, meta=np.array(json.dumps(meta)), **saved)
  tmp.replace(path)


def load_policy(path: Path, nu: int) -> tuple[list[dict], Normalizer, dict]:
  """The policy's layers, normaliser and metadata; ValueError saying why it does not fit."""
  try:
    data = np.load(path, allow_pickle=False)
    meta = json.loads(str(data["meta"]))
  except (OSError, ValueError, KeyError) as e:
    raise ValueError(f"{path} is not a policy saved by go1_joystick.py ({e})") from e
  if meta.get("format") != "go1_joystick/1":
    raise ValueError(f"{path} is not a policy saved by go1_joystick.py")
  if meta["nu"] != nu or meta["obs_size"] != OBS_SIZE:
    raise ValueError(
      f"{path} was trained for another model: {meta['nu']} actions and {meta['obs_size']}"
      f" observations, this model has {nu} actions and this task {OBS_SIZE} observations"
    )
  layers = [{"w": jnp.asarray(data[f"policy_w{i}"]), "b": jnp.asarray(data[f"policy_b{i}"])}
            for i in range(len(meta["hidden"]) + 1)]
  norm = Normalizer(*(jnp.asarray(data[k]) for k in ("obs_mean", "obs_var", "obs_count")))
  return layers, norm, meta


def sibling(out: Path, suffix: str) -> Path:
  """out's stem with a suffix: go1_joystick.npz -> go1_joystick_curve.json."""
  return out.with_name(out.stem + suffix)


# -- training ------------------------------------------------------------------------------------


def train(task: Task, config: Config, out: Path, dist: distributed.Distributed) -> dict:
  """PPO; with dist over several devices or processes, data-parallel over its mesh.

  Every process runs this; process 0 alone prints and writes the policy and the curve.
  """
  parallel = dist.mesh.devices.size > 1
  processes = dist.process_count
  leader = dist.process_index == 0

  def host(tree: Any) -> Any:
    """Replicated arrays as numpy: every process holds them whole."""
    return jax.tree.map(dist.local, tree)

  say = print if leader else (lambda *a, **k: None)
  nu = task.sim.nu
  key = jax.random.PRNGKey(config.seed)
  k_train, k_env, key = jax.random.split(key, 3)
  state = init_train(k_train, nu)
  env = init_envs(task, config, k_env, dist)
  if parallel:
    # The same in every process (the same seed): replicated, never sent.
    state = dist.replicate(jax.tree.map(np.asarray, state))
  iteration = make_iteration(task, config, dist)
  env_steps = config.num_envs * config.unroll
  say(f"Go1 joystick PPO: {config.num_envs} envs x {config.unroll} steps per iteration, "
      f"{config.iterations} iterations, {task.sim.num_threads} physics threads"
      + (f" per process; data-parallel over {dist.mesh.devices.size} devices of {processes} "
         f"process(es), {dist.num_local} envs here" if parallel else ""))
  series = ("iteration", "reward", "velocity_error", "forward_error", "falls", "seconds",
            "cpu_seconds", "env_steps_per_s")
  curve: dict[str, Any] = {"config": dataclasses.asdict(config), **{k: [] for k in series}}
  started = time.perf_counter()
  for i in range(config.iterations):
    stop = config.minutes is not None and time.perf_counter() - started > 60 * config.minutes
    if processes > 1 and config.minutes is not None:
      # Process 0's clock decides: a process that stopped alone would leave the others waiting
      # in the iteration's collectives.
      stop = bool(multihost_utils.broadcast_one_to_all(np.asarray(stop)))
    if stop:
      say(f"stopping after {i} iterations: --minutes {config.minutes} of training are up")
      break
    key, sub = jax.random.split(key)
    t0, cpu0 = time.perf_counter(), time.process_time()
    if parallel:
      state, env, metrics = iteration(state, env, dist.replicate(np.asarray(sub)))
      metrics = host(metrics)  # waits for the iteration
    else:
      state, env, metrics = iteration(state, env, sub)
      metrics = jax.device_get(metrics)  # waits for the iteration
    seconds = time.perf_counter() - t0
    curve["cpu_seconds"].append(time.process_time() - cpu0)  # all threads: XLA's and MuJoCo's
    if not all(np.isfinite(v) for v in metrics.values()):
      raise FloatingPointError(f"iteration {i}: non-finite metrics {metrics}")
    for name, value in (("iteration", i), ("reward", metrics["reward"]),
                        ("velocity_error", metrics["velocity_error"]),
                        ("forward_error", metrics["forward_error"]),
                        ("falls", metrics["falls"]), ("seconds", seconds),
                        ("env_steps_per_s", env_steps / seconds)):
      curve[name].append(float(value))
    say(f"iter {i:4d}: reward {metrics['reward']:.4f}/step, velocity error "
        f"{metrics['velocity_error']:.3f} m/s, falls {int(metrics['falls']):4d}, std "
        f"{metrics['std']:.3f}, kl {metrics['kl']:.4f}, lr {metrics['lr']:.1e}, "
        f"{seconds:.2f} s ({env_steps / seconds:,.0f} env steps/s)", flush=True)
    if (i + 1) % 25 == 0 and leader:  # a run cut short still leaves a policy
      save_policy(out, host(state), config, nu)
      write_curve(out, curve)
  wall = time.perf_counter() - started
  steady = curve["seconds"][1:] or curve["seconds"]
  per_iteration = float(np.median(steady))
  compile_s = curve["seconds"][0] - per_iteration
  # On a shared machine the wall time stretches with the load; CPU time much less so.
  compile_cpu = curve["cpu_seconds"][0] - float(np.median(curve["cpu_seconds"][1:] or [0.0]))
  curve["compile_s"], curve["compile_cpu_s"] = compile_s, compile_cpu
  curve["seconds_per_iteration"] = per_iteration
  say("terms of the last iteration: " + ", ".join(
    f"{k[5:]} {v:.3f}" for k, v in metrics.items() if k.startswith("term_")))
  say(f"compile time of one training iteration: {compile_s:.1f} s "
      f"(first call {curve['seconds'][0]:.1f} s minus the median of the others; in CPU time "
      f"{compile_cpu:.1f} s)")
  done = len(curve["seconds"])
  say(f"time per iteration: {per_iteration:.2f} s, {env_steps / per_iteration:,.0f} env steps/s "
      f"({env_steps * DECIMATION / per_iteration:,.0f} physics steps/s); {done} iterations "
      f"({done * env_steps:,} env steps) in {wall:.0f} s")

  seconds, cpu = benchmark(task, config, state, env, iteration, dist)
  rates = {name: env_steps / t for name, t in seconds.items()}
  curve["benchmark_seconds"], curve["benchmark_cpu_seconds"] = seconds, cpu
  curve["benchmark_env_steps_per_s"] = rates
  say(f"in turn, medians of 3 (env steps/s): iteration {rates['iteration']:,.0f}, its rollout "
      f"{rates['rollout']:,.0f}, the rollout's physics alone ({config.unroll} batched step "
      f"calls) {rates['physics']:,.0f}")
  say(f"speed relative to the physics alone: rollout "
      f"{seconds['physics'] / seconds['rollout']:.2f} (in CPU time "
      f"{cpu['physics'] / cpu['rollout']:.2f}), iteration "
      f"{seconds['physics'] / seconds['iteration']:.2f} (in CPU time "
      f"{cpu['physics'] / cpu['iteration']:.2f})")
  if leader:
    save_policy(out, host(state), config, nu)
    write_curve(out, curve)
  say(f"final: reward {curve['reward'][-1]:.4f}/step, velocity error "
      f"{curve['velocity_error'][-1]:.3f} m/s; saved {out}")
  return curve


def write_curve(out: Path, curve: dict) -> None:
  sibling(out, "_curve.json").write_text(json.dumps(curve, indent=1))
  import matplotlib  # imported here: only the plots need it

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
  axes[0].plot(curve["iteration"], curve["reward"])
  axes[0].set(xlabel="iteration", ylabel="reward per step", title="reward")
  axes[1].plot(curve["iteration"], curve["velocity_error"], label="|command - v| (xy)")
  axes[1].plot(curve["iteration"], curve["forward_error"], label="forward only")
  axes[1].set(xlabel="iteration", ylabel="m/s", title="velocity tracking error")
  axes[1].legend()
  axes[2].plot(curve["iteration"], curve["env_steps_per_s"])
  axes[2].set(xlabel="iteration", ylabel="env steps / s", title="throughput")
  fig.tight_layout()
  fig.savefig(sibling(out, "_curve.png"), dpi=100)
  plt.close(fig)


# -- evaluation ----------------------------------------------------------------------------------


def play(task: Task, out: Path, seconds: float, num_envs: int = 16) -> dict:
  layers, norm, meta = load_policy(out, task.sim.nu)
  steps = max(1, round(seconds / CTRL_DT))
  dtype = jnp.result_type(float)
  command = jnp.broadcast_to(jnp.array([PLAY_COMMAND, 0.0, 0.0], dtype), (num_envs, 3))
  env = init_env(task, jax.random.PRNGKey(1), num_envs, 1)
  # Every env from a standstill at the clock's start, on its own friction across the range.
  friction = jnp.linspace(*FRICTION, num_envs, dtype=dtype)
  old = env.params["geom_friction"]
  params = env.params.replace({"geom_friction": old.at[..., 0].set(friction[:, None])})
  zeros = jnp.zeros((num_envs,), jnp.int32)
  last = jnp.zeros_like(env.last_action)
  env = EnvState(env.rows, params, command, last, zeros,
                 observe(task, env.rows, last, command, zeros))

  @jax.jit
  def run(env, key):
    def control_step(env, key):
      action = mlp(layers, normalize(norm, env.obs))  # the mean: no exploration noise
      env, out = env_step(task, env, action, key, steps + 1, redraws=False, command=command)
      return env, (out.velocity, out.terminated, out.terms["gait"], env.rows[0])

    return jax.lax.scan(control_step, env, jax.random.split(key, steps))[1]

  velocity, fell, gait, rows = jax.device_get(run(env, jax.random.PRNGKey(2)))
  forward = velocity[..., 0]  # (steps, envs), base frame
  settle = min(steps - 1, round(1.0 / CTRL_DT))  # from a standstill: judge from 1 s on
  error = float(np.mean(np.abs(forward[settle:] - PLAY_COMMAND)))
  mean_error = float(np.mean(np.abs(forward[settle:].mean(0) - PLAY_COMMAND)))
  falls = int(fell.sum())
  print(f"play: {num_envs} envs, {steps * CTRL_DT:.1f} s at {PLAY_COMMAND} m/s forward, friction "
        f"{FRICTION[0]}..{FRICTION[1]}")
  print(f"mean forward-velocity error: {error:.3f} m/s (|v - command| per step from "
        f"{settle * CTRL_DT:.1f} s on); error of the mean velocity: {mean_error:.3f} m/s; "
        f"mean velocity {forward[settle:].mean():.3f} m/s")
  print(f"falls: {falls}")
  print(f"gait term: {gait[settle:].mean():.2f} of 1 (feet heights and contacts on the trot clock)")
  plot_play(out, forward, fell)
  render(task, rows, sibling(out, "_play.gif"))
  return {"error": error, "falls": falls}


def plot_play(out: Path, forward: np.ndarray, fell: np.ndarray) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  t = CTRL_DT * np.arange(1, forward.shape[0] + 1)
  fig, ax = plt.subplots(figsize=(8, 4))
  ax.plot(t, forward, color="tab:blue", alpha=0.25, lw=0.8)
  mean_label = f"achieved (mean of {forward.shape[1]} envs)"
  ax.plot(t, forward.mean(1), color="tab:blue", lw=2, label=mean_label)
  ax.axhline(PLAY_COMMAND, color="k", ls="--", label="commanded")
  for step, env in zip(*np.nonzero(fell), strict=True):
    ax.plot(t[step], forward[step, env], "rx")
  ax.set(xlabel="time (s)", ylabel="forward velocity (m/s)",
         title=f"Go1 joystick policy, {int(fell.sum())} falls")
  ax.legend()
  fig.tight_layout()
  path = sibling(out, "_play.png")
  fig.savefig(path, dpi=100)
  plt.close(fig)
  print(f"wrote {path}")


def render(task: Task, rows: np.ndarray, path: Path, seconds: float = 4.0, fps: int = 25) -> None:
  """A GIF of env 0's first seconds if offscreen OpenGL works here; says why not otherwise."""
  model = task.sim.model
  try:
    renderer = mujoco.Renderer(model, 240, 320)
  except Exception as e:  # a missing or broken GL stack fails in many ways
    print(f"no video: offscreen rendering (MUJOCO_GL={os.environ.get('MUJOCO_GL')}) failed: "
          f"{type(e).__name__}: {e}")
    return
  from PIL import Image

  # The file's Go1 has collision geoms only, all in group 3, which MuJoCo hides by default.
  shown = mujoco.MjvOption()
  shown.geomgroup[:4] = 1
  data = mujoco.MjData(model)
  every = max(1, round(1 / (fps * CTRL_DT)))
  frames = []
  with renderer:
    for row in rows[: round(seconds / CTRL_DT) : every]:
      mujoco.mj_setState(model, data, np.asarray(row, np.float64),
                         mujoco.mjtState.mjSTATE_INTEGRATION)
      mujoco.mj_forward(model, data)
      renderer.update_scene(data, camera="tracking", scene_option=shown)
      frames.append(Image.fromarray(renderer.render()))
  frames[0].save(path, save_all=True, append_images=frames[1:], duration=1000 // fps, loop=0)
  print(f"wrote {path} ({len(frames)} frames of env 0)")


# -- the command line ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict | int:
  """Train (or --play); the curve or --play's results, or the launcher's exit status."""
  parser = argparse.ArgumentParser(description="PPO for the Go1 joystick task, in one JAX file.")
  parser.add_argument("--model", type=Path, default=MODEL, help="the Go1 scene.xml")
  parser.add_argument("--num-envs", type=int, default=1024)
  parser.add_argument("--unroll", type=int, default=24, help="control steps per env and iteration")
  parser.add_argument("--iterations", type=int, default=300)
  parser.add_argument("--episode-length", type=int, default=500, help="control steps (50 Hz)")
  parser.add_argument("--threads", type=int, default=0,
                      help="physics threads per process (0: one per CPU)")
  parser.add_argument("--processes", type=int, default=1,
                      help="train data-parallel in this many local processes (python -m "
                      "mjbatch_jax.launch); --num-envs is over all of them")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--minutes", type=float,
                      help="stop training after this many minutes (and save)")
  parser.add_argument("--out", type=Path, default=RESULTS / "go1_joystick.npz",
                      help="the policy file; the curve and plots are written beside it")
  parser.add_argument("--play", action="store_true", help="evaluate the policy in --out")
  parser.add_argument("--play-seconds", type=float, default=10.0, help="length of --play")
  args = parser.parse_args(argv)

  for flag in ("num_envs", "unroll", "iterations", "episode_length", "processes"):
    if getattr(args, flag) < 1:
      parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
  if not 0 <= args.threads <= MAX_THREADS:
    parser.error(f"--threads must be in [0, {MAX_THREADS}], "
                 f"got {args.threads}")
  if args.minutes is not None and not args.minutes > 0:
    parser.error(f"--minutes must be > 0, got {args.minutes}")
  if not args.play_seconds > 0:
    parser.error(f"--play-seconds must be > 0, got {args.play_seconds}")
  launched = launch.ENV_NUM_PROCESSES in os.environ
  if args.play and (args.processes > 1 or os.environ.get(launch.ENV_NUM_PROCESSES, "1") != "1"):
    parser.error("--play runs in one process: leave out --processes and the launcher")
  if not args.model.is_file():
    parser.error(f"--model {args.model}: no such file (MuJoCo Menagerie's unitree_go1/scene.xml)")
  if args.play and not args.out.is_file():
    parser.error(f"--play: no policy at {args.out}; train one first (without --play)")
  if not args.play and args.out.suffix != ".npz":
    parser.error(f"--out must end in .npz, got {args.out}")
  if args.processes > 1 and not launched:
    # Each process runs this script again, with the same arguments; under the launcher,
    # --processes is ignored.
    return launch.launch(args.processes, [__file__, *(sys.argv[1:] if argv is None else argv)])

  model = go1_model(args.model)
  dist = None
  if not args.play:
    # Before any JAX computation (JAX's rule): starts the multi-process runtime when launched,
    # and is the plain Simulator on this process's devices otherwise.
    try:
      dist = distributed.setup(model, args.num_envs, num_threads=args.threads)
    except ValueError as e:  # --num-envs not a multiple of the devices, say
      parser.error(f"--num-envs {args.num_envs}: {e}")
  try:
    task = make_task(model, args.threads, None if dist is None else dist.sim)
  except ValueError as e:
    parser.error(f"--model {args.model} is not a Go1 this task can use: {e}")

  with task.sim:
    if args.play:
      try:
        return play(task, args.out, args.play_seconds)
      except ValueError as e:
        parser.error(f"--play: {e}")
    config = Config(
      args.num_envs, args.unroll, args.iterations, args.episode_length, args.seed, args.minutes
    )
    assert dist is not None  # made above whenever not --play
    return train(task, config, args.out, dist)


if __name__ == "__main__":
  result = main()
  sys.exit(result if isinstance(result, int) else 0)
