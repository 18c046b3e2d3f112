"""Teach a Unitree Go1 to follow joystick velocity commands: the task, trained by Brax's PPO.

  python examples/go1_joystick.py --threads 2                  # 1024 envs x 24 steps x 600
  python examples/go1_joystick.py --threads 2 --resume         # on from the last checkpoint
  python examples/go1_joystick.py --play                       # 10 s at 0.5 m/s, plot, GIF
  python examples/go1_joystick.py --processes 2 --threads 1    # data-parallel, 2 processes
  python examples/go1_joystick.py --collisions feet            # Playground's feet-only physics

The task is an `mjbatch_jax.envs.Env` shaped like MuJoCo Playground's Go1 joystick (config
dict, `reset`/`step` for one env, reward terms as named methods, metrics) on Menagerie's Go1
(../shared/models/unitree_go1) as Playground sets it up: 4 ms x 5 substeps per 50 Hz step, kp 35
and kd 0.5, rotor inertia added to the legs' armature; with --collisions feet, also as
Playground's go1_mjx_feetonly.xml: the feet alone touch the floor, one solver iteration (a
checkpoint of one model is refused by the other's --play and --resume). Actions move the 12
joint targets around 'home'; the 50 observations are the base's velocities and gravity in its
frame, joint angles and velocities, the last action, the command (forward, sideways, yaw rate;
redrawn every 5 s) and the 2 Hz gait clock. The reward tracks the command and a trot (FR+RL and
FL+RR in turn) and penalises leaving home, tilting, bouncing, wobbling, joint limits and jerky
actions; a fall ends the episode. The feet come from the step call (`observe=`). Floor and feet
friction in [0.4, 1.0], redrawn every 5 s, episodes, auto-resets and NaN actions (done) are the
library's wrappers'.

Training is `mjbatch_jax.agents.ppo.train` (Brax's PPO, data-parallel over --processes). Every
--eval-every iterations process 0 checks the deterministic policy at 0.5 m/s (16 envs, 10 s
from a standstill: mean forward-velocity error from 1 s on, and falls) and writes a checkpoint
(--out; --resume goes on from it). Time to walk: training time (checks not counted) until that
error is below 0.1 m/s with no fall. The run writes a summary (.json beside --out) and its curve;
--play reruns the check on the saved policy, plots it and, with MUJOCO_GL=egl, writes a GIF.
"""

import argparse
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is imported: headless rendering

import common  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from mjbatch_jax import _validate as v  # noqa: E402
from mjbatch_jax import distributed, ensemble, envs, launch, rotations  # noqa: E402
from mjbatch_jax.agents import ppo  # noqa: E402

FEET = ("FR", "FL", "RR", "RL")  # sites and geoms of the four feet
LEGS = tuple(f"{foot}_{part}" for foot in FEET for part in ("hip", "thigh", "calf"))  # actuators
JOINTS = tuple(f"{leg}_joint" for leg in LEGS)
FOOT_PHASE = (0.0, np.pi, np.pi, 0.0)  # FR, FL, RR, RL: the diagonal pairs in antiphase
PLAY_COMMAND = 0.5  # m/s forward, for the evaluations
WALKING = 0.1  # m/s of mean forward-velocity error, with no fall: the policy walks
PASSES = 0.05  # m/s: what --play asks of the final policy
# "full": Menagerie's Go1 as it is (every collision geom, the default solver); "feet": MuJoCo
# Playground's feet-only contacts and one-iteration solver (feet_only).
COLLISIONS = ("full", "feet")


def default_config() -> dict[str, Any]:
  """The task's settings, as Playground's default_config (a plain dict)."""
  return {
    "collisions": "full", "ctrl_dt": 0.02, "sim_dt": 0.004, "kp": 35.0, "kd": 0.5,
    "rotor_inertia": 0.000111842,  # kg m^2, added to the armature of each leg joint
    "action_scale": 0.3,  # rad of joint target per unit of action
    "command_low": [0.0, -0.2, -0.3], "command_high": [1.0, 0.2, 0.3],  # m/s, m/s, rad/s
    "command_period": 5.0, "friction": [0.4, 1.0], "friction_period": 5.0,  # s
    "gait_hz": 2.0, "swing_height": 0.06, "reset_noise": 0.1,
    "fall_height": 0.15, "fall_upright": 0.5,  # m; cos 60 degrees
    "reward": {
      "scales": {"tracking_lin_vel": 1.5, "tracking_ang_vel": 0.75, "gait": 1.0, "pose": -0.5,
                 "orientation": -5.0, "bounce": -2.0, "wobble": -0.05, "joint_limits": -2.0,
                 "action_rate": -0.01},
      "tracking_sigma": 0.25, "gait_sigma": 0.005, "pose_weights": [1.0, 0.3, 0.3],
      "fall_penalty": 0.25,  # about 10 steps' reward: enough to matter, not enough to freeze
    },
  }


def go1_model(path: Path, config: dict[str, Any]) -> mujoco.MjModel:
  """Menagerie's Go1 with the task's timestep, PD gains and rotor inertia; with
  config["collisions"] "feet", Playground's feet-only physics (feet_only)."""
  collisions = v.one_of('config["collisions"]', config["collisions"], COLLISIONS)
  spec = mujoco.MjSpec.from_file(str(path))
  spec.option.timestep = config["sim_dt"]
  for actuator in spec.actuators:
    actuator.gainprm[0] = config["kp"]
    actuator.biasprm[1], actuator.biasprm[2] = -config["kp"], -config["kd"]
  for joint in spec.joints:
    if joint.name in JOINTS:
      joint.armature += config["rotor_inertia"]
  if collisions == "feet":
    feet_only(spec)
  return spec.compile()


def feet_only(spec: mujoco.MjSpec) -> None:
  """MuJoCo Playground's Go1 physics (go1_mjx_feetonly.xml) on Menagerie's Go1, in place.

  Only the four feet touch the floor: every geom of the robot stops colliding except the feet,
  which keep their affinity alone (contype 0: no foot-foot contacts), so foot-floor is the one
  possible pair. And Playground's solver options: one Newton iteration of at most 5 line-search
  steps, Euler without its implicit joint damping, and MuJoCo's default pyramidal cone with
  impratio 1 where Menagerie asks for an elliptic cone with impratio 100 (whose stiff friction
  one iteration leaves far from converged: the robot sinks and falls more). The rest, the feet's
  contact parameters (condim 6, friction, solimp, priority) included, stays Menagerie's.
  """
  for geom in spec.geoms:
    if geom.parent.name != "world":  # the floor stays as it is
      geom.contype, geom.conaffinity = 0, int(geom.name in FEET)
  spec.option.iterations, spec.option.ls_iterations = 1, 5
  spec.option.disableflags |= mujoco.mjtDisableBit.mjDSBL_EULERDAMP
  spec.option.cone, spec.option.impratio = mujoco.mjtCone.mjCONE_PYRAMIDAL, 1.0


class Joystick(envs.Env):
  """Follow a (forward, sideways, yaw-rate) command with a trot; one env, Playground's API.

    env = Joystick(common.GO1_SCENE)
    state = env.step(env.reset(jax.random.PRNGKey(0)), jnp.zeros(12))
  """

  observe = ("site_xpos",)  # the feet
  observe_at = "step"  # as mj_step leaves them (MJX's values): computed by the step anyway
  param_fields = ("geom_friction",)

  def __init__(self, model_path: Path, config_overrides: dict[str, Any] | None = None,
               num_threads: int = 0):
    self.config = {**default_config(), **(config_overrides or {})}
    config = self.config
    substeps = round(config["ctrl_dt"] / config["sim_dt"])
    super().__init__(go1_model(model_path, config), substeps, num_threads)
    names = self.sim.names
    self._home = np.asarray(self.sim.init_state(1, keyframe="home")[0])
    self._actuators = names.actuators(LEGS)
    self._default_pose = self._home[names.qpos_columns(JOINTS)]
    low, high = self.mj_model.jnt_range[names.joints(JOINTS)].T
    centre, half = (low + high) / 2, (high - low) / 2
    self._soft_low, self._soft_high = centre - 0.95 * half, centre + 0.95 * half
    self._feet = names.sites(FEET)
    self._foot_radius = self.mj_model.geom_size[names.geoms(FEET), 0]
    self._ground = np.concatenate([[names.geom("floor")], names.geoms(FEET)])
    self._command_low, self._command_high = (np.asarray(config[k], np.float32)
                                             for k in ("command_low", "command_high"))
    self._command_period = round(config["command_period"] / self.dt)
    self.friction_period = round(config["friction_period"] / self.dt)

  def reset(self, rng: jax.Array) -> envs.State:
    rng, noise_key, command_key = jax.random.split(rng, 3)
    noise = self.config["reset_noise"] * jax.random.uniform(noise_key, (18,), minval=-1, maxval=1)
    qpos = jnp.asarray(self._home[self.sim.layout.qpos]).at[7:].add(noise[:12])
    data = self.make_data(row=self._home, qpos=qpos,
                          qvel=jnp.zeros(self.mj_model.nv).at[:6].set(noise[12:]))
    info = {"rng": rng, "command": self.sample_command(command_key),
            "last_action": jnp.zeros(self.action_size), "step": jnp.zeros((), jnp.int32)}
    zero = jnp.zeros(())
    metrics = {f"reward/{name}": zero for name in self.config["reward"]["scales"]}
    metrics.update(forward_velocity=zero, velocity_error=zero)
    return envs.State(data, self._obs(data, info), zero, zero, metrics, info)

  def step(self, state: envs.State, action: jax.Array) -> envs.State:
    targets = self._default_pose + self.config["action_scale"] * action
    data = self.pipeline_step(state.data, state.data.ctrl.at[self._actuators].set(targets))
    # A NaN action is MuJoCo's bad-control warning (the wrappers end the episode); the reward
    # and the next observations must stay finite, so they see it as zeros.
    action = jnp.where(jnp.isfinite(action), action, 0.0)
    info = dict(state.info)
    step = info["step"] + 1
    velocity, angular, gravity = self.base_motion(data)
    command, qpos = info["command"], data.qpos[7:]
    terms = {
      "tracking_lin_vel": self._reward_tracking_lin_vel(command, velocity),
      "tracking_ang_vel": self._reward_tracking_ang_vel(command, angular),
      "gait": self._reward_gait(step, data.site_xpos[self._feet, 2]),
      "pose": self._cost_pose(qpos),
      "orientation": self._cost_orientation(gravity),
      "bounce": self._cost_bounce(velocity),
      "wobble": self._cost_wobble(angular),
      "joint_limits": self._cost_joint_limits(qpos),
      "action_rate": self._cost_action_rate(action, info["last_action"]),
    }
    scales = self.config["reward"]["scales"]
    scaled = {name: scales[name] * value for name, value in terms.items()}
    fell = (data.qpos[2] < self.config["fall_height"]) | (-gravity[2] < self.config["fall_upright"])
    # Clipped at 0 so that ending an episode early never pays; a fall costs on top.
    reward = self.dt * jnp.maximum(sum(scaled.values()), 0.0)
    reward = reward - self.config["reward"]["fall_penalty"] * fell
    info["rng"], key = jax.random.split(info["rng"])
    info["command"] = jnp.where(step % self._command_period == 0, self.sample_command(key),
                                command)
    info["last_action"], info["step"] = action, step
    metrics = {f"reward/{name}": value for name, value in scaled.items()}
    metrics["forward_velocity"] = velocity[0]
    metrics["velocity_error"] = jnp.linalg.norm(command[:2] - velocity[:2])
    return state.replace(data=data, obs=self._obs(data, info), reward=reward,
                         done=fell.astype(reward.dtype), metrics=metrics, info=info)

  def sample_command(self, rng: jax.Array) -> jax.Array:
    return jax.random.uniform(rng, (3,), minval=self._command_low, maxval=self._command_high)

  def base_motion(self, data: envs.Data) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Linear velocity, angular velocity and gravity's direction, in the base frame."""
    quat = data.qpos[3:7]
    velocity = rotations.rotate_inverse(quat, data.qvel[:3])
    gravity = rotations.rotate_inverse(quat, jnp.array([0.0, 0.0, -1.0]))
    return velocity, data.qvel[3:6], gravity  # a free joint's angular velocity is local

  def clock(self, step: jax.Array) -> jax.Array:
    return 2 * jnp.pi * self.config["gait_hz"] * self.dt * step

  def _obs(self, data: envs.Data, info: dict[str, Any]) -> jax.Array:
    velocity, angular, gravity = self.base_motion(data)
    phase = self.clock(info["step"])
    return jnp.concatenate([
      velocity, angular, gravity, data.qpos[7:] - self._default_pose, data.qvel[6:],
      info["last_action"], info["command"], jnp.stack([jnp.sin(phase), jnp.cos(phase)]),
    ])

  # -- the reward terms, unscaled ----------------------------------------------------------------

  def _reward_tracking_lin_vel(self, command: jax.Array, velocity: jax.Array) -> jax.Array:
    error = jnp.sum((command[:2] - velocity[:2]) ** 2)
    return jnp.exp(-error / self.config["reward"]["tracking_sigma"])

  def _reward_tracking_ang_vel(self, command: jax.Array, angular: jax.Array) -> jax.Array:
    return jnp.exp(-((command[2] - angular[2]) ** 2) / self.config["reward"]["tracking_sigma"])

  def _reward_gait(self, step: jax.Array, feet_z: jax.Array) -> jax.Array:
    """Feet heights and contacts following the trot clock: each foot swings half a period."""
    phase = self.clock(step) + jnp.asarray(FOOT_PHASE)
    swing = jnp.sin(phase) > 0
    target = self.config["swing_height"] * jnp.maximum(jnp.sin(phase), 0.0)
    # The feet sink about 1.7 cm into the floor (their solimp is soft): above ground is >= 0.
    height = jnp.maximum(feet_z - self._foot_radius, 0.0)
    matched = jnp.mean((height < 0.005) != swing)
    return 0.5 * jnp.exp(-jnp.sum((height - target) ** 2) / self.config["reward"]["gait_sigma"]) \
      + 0.5 * matched

  def _cost_pose(self, qpos: jax.Array) -> jax.Array:
    weights = jnp.tile(jnp.asarray(self.config["reward"]["pose_weights"]), len(FEET))
    return jnp.sum(weights * (qpos - self._default_pose) ** 2)

  def _cost_orientation(self, gravity: jax.Array) -> jax.Array:
    return jnp.sum(gravity[:2] ** 2)

  def _cost_bounce(self, velocity: jax.Array) -> jax.Array:
    return velocity[2] ** 2

  def _cost_wobble(self, angular: jax.Array) -> jax.Array:
    return jnp.sum(angular[:2] ** 2)

  def _cost_joint_limits(self, qpos: jax.Array) -> jax.Array:
    return jnp.sum(jnp.maximum(qpos - self._soft_high, 0) + jnp.maximum(self._soft_low - qpos, 0))

  def _cost_action_rate(self, action: jax.Array, last_action: jax.Array) -> jax.Array:
    return jnp.sum((action - last_action) ** 2)

  def randomize(self, params: Any, rng: jax.Array) -> Any:
    """Friction of the floor and the feet, one draw in config["friction"] (the feet have
    priority 1: their friction is that of their contacts); torsional and rolling stay."""
    friction = params["geom_friction"]
    value = jax.random.uniform(rng, (), friction.dtype, *self.config["friction"])
    return params.replace({"geom_friction": friction.at[self._ground, 0].set(value)})


class Evaluation:
  """num_envs envs from a standstill for `seconds` at a fixed forward command, the deterministic
  policy, friction drawn across the range: mean |forward velocity - command| from 1 s on (per
  env and step), and the envs that fell. evaluation(make_policy, params) -> metrics."""

  def __init__(self, model_path: Path, threads: int, command: float = PLAY_COMMAND,
               seconds: float = 10.0, num_envs: int = 16, seed: int = 1,
               collisions: str = "full"):
    fixed = [command, 0.0, 0.0]
    self.task = Joystick(model_path, {"command_low": fixed, "command_high": fixed,
                                      "collisions": collisions}, threads)
    self.env = envs.DomainRandomizationWrapper(envs.WarningWrapper(self.task),
                                               self.task.randomize)
    self.command, self.num_envs, self.seed = command, num_envs, seed
    self.steps = max(2, round(seconds / self.task.dt))
    self.settle = min(self.steps - 1, round(1.0 / self.task.dt))
    self._runs: dict[int, Any] = {}
    self.last: dict[str, np.ndarray] = {}

  def _run(self, make_policy: Any, params: Any, key: jax.Array) -> tuple[jax.Array, ...]:
    policy = make_policy(params, deterministic=True)
    state = self.env.reset(jax.random.split(key, self.num_envs))

    def one(state: envs.State, key: jax.Array) -> tuple[envs.State, tuple[jax.Array, ...]]:
      state = self.env.step(state, policy(state.obs, key)[0])
      return state, (state.metrics["forward_velocity"], state.done, state.data.row[0])

    return jax.lax.scan(one, state, jax.random.split(key, self.steps))[1]

  def __call__(self, make_policy: Any, params: Any) -> dict[str, float]:
    run = self._runs.setdefault(id(make_policy), jax.jit(functools.partial(self._run,
                                                                            make_policy)))
    forward, fell, rows = jax.device_get(run(params, jax.random.PRNGKey(self.seed)))
    self.last = {"forward": forward, "fell": fell, "rows": rows}
    return {"forward_error": float(np.mean(np.abs(forward[self.settle:] - self.command))),
            "forward_velocity": float(np.mean(forward[self.settle:])),
            "falls": float(np.any(fell, axis=0).sum())}


def trained_collisions(path: Path) -> str | None:
  """The collision model a checkpoint's policy was trained on ("full" for checkpoints older than
  the option); None if there is no valid checkpoint at path (its loader says why)."""
  try:
    _, meta = ppo.read_checkpoint(path)
  except ValueError:
    return None
  return meta["task"].get("collisions", "full")  # saved by ppo.train's task (training())


def walks(metrics: dict[str, float]) -> bool:
  return metrics["eval/forward_error"] < WALKING and metrics["eval/falls"] == 0

# Two layers of 64: the SGD is most of an iteration's CPU time besides the physics, and with
# 128 units it took 0.12-0.15 of it (benchmarks/rl.py --time-to-walk measures it).
NETWORK = {"policy_hidden_layer_sizes": (64, 64), "value_hidden_layer_sizes": (64, 64),
           "activation": "elu", "distribution_type": "normal", "noise_std_type": "log",
           "init_noise_std": 0.8,
           # The first actions near zero (the home pose): a last layer 100 times smaller.
           "mean_kernel_init_fn": "variance_scaling",
           "mean_kernel_init_kwargs": {"scale": 1e-4, "mode": "fan_in", "distribution": "uniform"}}
PPO = {"learning_rate": 1e-3, "learning_rate_schedule": "ADAPTIVE_KL", "desired_kl": 0.01,
       "entropy_cost": 0.005, "discounting": 0.97, "gae_lambda": 0.95, "clipping_epsilon": 0.2,
       "num_updates_per_batch": 5, "max_grad_norm": 1.0, "normalize_observations": True}
# The command line's training flags and their values without a preset.
FLAGS = {"collisions": "full", "num_envs": 1024, "unroll": 24, "minibatches": 4,
         "epochs": PPO["num_updates_per_batch"], "learning_rate": PPO["learning_rate"],
         "eval_every": 10, "iterations": 600}
# Presets set the training's FLAGS (a flag given beside one must agree with it), PPO's other
# settings and the network's, and defaults for the checks' period and the iterations (which may
# be given): a run stops at the first passing check unless --iterations is given. "minute": the
# wall-clock time to walk on 2 cores, measured (docs/rl.md).
PRESETS: dict[str, dict[str, Any]] = {
  # Small batches, many SGD passes: 256 envs x 16 steps (4,096 env steps) per iteration, 8
  # minibatches x 16 epochs, the adaptive learning rate's KL target doubled: on 2 cores more
  # learning per sample costs less wall clock than the samples it saves (docs/rl.md, measured).
  "minute": {"flags": {"collisions": "feet", "num_envs": 256, "unroll": 16, "minibatches": 8,
                       "epochs": 16, "learning_rate": 1e-3},
             "ppo": {"desired_kl": 0.02}, "network": {}, "eval_every": 5, "iterations": 2000},
}


def training(env: Joystick, num_envs: int = 1024, unroll: int = 24, iterations: int = 600,
             episode_length: int = 500, minibatches: int = 4, network: dict | None = None,
             **ppo_overrides: Any) -> dict:
  """ppo.train's arguments for this task at this size (PPO's overridden by ppo_overrides,
  NETWORK's by network)."""
  return {"num_timesteps": iterations * num_envs * unroll, "num_envs": num_envs,
          "unroll_length": unroll, "batch_size": num_envs // minibatches,
          "num_minibatches": minibatches, "episode_length": episode_length,
          "network": {**NETWORK, **(network or {})},
          "randomization_fn": env.randomize, "randomization_period": env.friction_period,
          "task": {"collisions": env.config["collisions"]}, **PPO, **ppo_overrides}


def train(args: argparse.Namespace, leader: bool) -> dict[str, Any]:
  env = Joystick(args.model, {"collisions": args.collisions}, num_threads=args.threads)
  evaluation = Evaluation(args.model, args.threads, collisions=args.collisions) if leader else None
  say = print if leader else (lambda *a, **k: None)
  say(f"Go1 joystick ({args.collisions} collisions), Brax's PPO: {args.num_envs} envs x "
      f"{args.unroll} steps x {args.iterations} iterations, {env.sim.num_threads} physics "
      f"threads per process, {jax.process_count()} "
      f"process(es), {jax.device_count()} device(s)", flush=True)

  load = []
  # ppo.train's log comes at every check (--eval-every iterations): the bar moves by as many.
  bar = common.progress(args.iterations, "PPO", args, unit="iter", quiet=not leader)

  def log(p: ppo.Progress) -> None:
    m = p.metrics
    load.append(os.getloadavg()[0])
    bar.write(f"iter {p.iteration:4d}: {p.env_steps:>11,} env steps, train {p.wall_s:7.0f} s "
              f"(CPU {p.cpu_s:7.0f} s); 0.5 m/s check: error {m['eval/forward_error']:.3f} m/s, "
              f"falls {m['eval/falls']:2.0f}; kl {m.get('training/kl_mean', np.nan):.4f}, lr "
              f"{m.get('training/learning_rate', np.nan):.1e}")
    bar.to(p.iteration, postfix=f"error {m['eval/forward_error']:.3f} m/s")

  preset = PRESETS.get(args.preset, {})
  kwargs = training(env, args.num_envs, args.unroll, args.iterations, args.episode_length,
                    args.minibatches, preset.get("network"), **preset.get("ppo", {}),
                    learning_rate=args.learning_rate, num_updates_per_batch=args.epochs)
  walked: dict[str, float] = {}

  def until_walking(p: ppo.Progress) -> bool:
    """The preset's stop: the first passing check, its time from the process's start less the
    checks' (and the checkpoints') time."""
    if walks(p.metrics) and not walked:
      walked.update(time_to_walk_s=common.process_seconds() - p.eval_wall_s,
                    training_s=p.wall_s)
    return bool(walked) and args.stop_when_walking

  with bar:
    trained = ppo.train(env, **kwargs, iterations_per_eval=args.eval_every, evaluate=evaluation,
                        checkpoint=args.out if leader else None, resume=args.resume, log=log,
                        seed=args.seed, stop=until_walking if args.preset and leader else None)
  if not leader:
    return {}
  assert evaluation is not None
  curve = trained.curve
  first = next((p for p in curve if walks(p.metrics)), None)
  final = evaluation(trained.make_policy, trained.params)
  summary = {
    "num_envs": args.num_envs, "unroll": args.unroll, "iterations": curve[-1].iteration,
    "env_steps": curve[-1].env_steps, "wall_s": curve[-1].wall_s, "cpu_s": curve[-1].cpu_s,
    "eval_wall_s": curve[-1].eval_wall_s, "threads": env.sim.num_threads,
    "processes": jax.process_count(), "collisions": args.collisions,
    "final_velocity_error": final["forward_error"], "falls": int(final["falls"]),
    **{f"time_to_walk_{key}": None if first is None else getattr(first, field) for key, field
       in (("s", "wall_s"), ("cpu_s", "cpu_s"), ("env_steps", "env_steps"),
           ("iterations", "iteration"))},
    "load_average": {"min": min(load, default=None), "median": float(np.median(load or [np.nan])),
                     "max": max(load, default=None)},
    "ppo": {k: v for k, v in kwargs.items() if k != "randomization_fn"},
  }
  common.write_json(sibling(args.out, ".json"), summary)
  plot_curve(args.out, curve)
  say(f"final check at {PLAY_COMMAND} m/s: error {final['forward_error']:.3f} m/s, falls "
      f"{int(final['falls'])}; time to walk: " + ("not reached" if first is None else
      f"{first.wall_s:.0f} s, {first.cpu_s:.0f} CPU s, {first.env_steps:,} env steps"))
  if args.preset:
    summary.update(preset=args.preset, seed=args.seed,
                   model=f"Menagerie's Go1, {args.collisions} collisions",
                   time_to_walk_training_s=walked.get("training_s"),
                   time_to_walk_s=walked.get("time_to_walk_s"))
    # The last line: one JSON object (benchmarks/rl.py --time-to-walk reads it); env steps and
    # iterations to the first passing check, or of the whole run if none passed.
    print(json.dumps({key: summary[key] for key in (
      "time_to_walk_s", "time_to_walk_training_s", "seed", "model", "preset", "threads",
      "final_velocity_error", "falls", "load_average")} | {
        key: summary[f"time_to_walk_{key}" if walked else key] for key in ("env_steps",
                                                                         "iterations")}))
  return summary


def sibling(out: Path, suffix: str) -> Path:
  return out.with_name(out.stem + suffix)


def plot_curve(out: Path, curve: list[ppo.Progress]) -> None:
  errors = [p.metrics["eval/forward_error"] for p in curve]
  common.plot_series(sibling(out, "_curve.png"), np.array([p.wall_s / 60 for p in curve]), {
    f"error at {PLAY_COMMAND} m/s": {"forward-velocity error": np.array(errors),
                                     "walks (and no fall)": np.full(len(curve), WALKING)},
    "falls of 16": {"falls in the 10 s check": np.array([p.metrics["eval/falls"] for p in curve])},
  }, title="Go1 joystick, Brax's PPO", xlabel="training time (min)")


def play(args: argparse.Namespace) -> dict[str, Any]:
  evaluation = Evaluation(args.model, args.threads, args.command, args.play_seconds,
                          collisions=args.collisions)
  policy, meta = ppo.load_policy(args.out, evaluation.task)
  metrics = evaluation(lambda params, deterministic: policy, None)
  forward, fell, rows = (evaluation.last[k] for k in ("forward", "fell", "rows"))
  print(f"play: {evaluation.num_envs} envs, {evaluation.steps * evaluation.task.dt:.1f} s at "
        f"{args.command} m/s forward, friction {evaluation.task.config['friction']}, policy of "
        f"iteration {meta['iteration']}")
  print(f"mean forward-velocity error: {metrics['forward_error']:.3f} m/s (|v - command| per env "
        f"and step from 1 s on); mean velocity {metrics['forward_velocity']:.3f} m/s")
  print(f"falls: {int(metrics['falls'])}")
  passed = metrics["forward_error"] <= PASSES and not metrics["falls"]
  print(f"check: {'passed' if passed else 'failed'} (error <= {PASSES} m/s, no fall)")
  # Each env on its own (its friction drawn apart): the share that would pass the check alone.
  settle = evaluation.settle
  per_env = ensemble.evaluate(
    {"error": np.abs(forward[settle:] - args.command).mean(axis=0), "fell": fell.any(axis=0)},
    lambda env: env["error"] <= PASSES and not env["fell"], nominal=False)
  print(f"per env (friction in {evaluation.task.config['friction']}): {per_env}")
  metrics["env_share"] = per_env.share
  t = evaluation.task.dt * np.arange(1, forward.shape[0] + 1)
  common.plot_series(sibling(args.out, "_play.png"), t, {"forward velocity (m/s)": {
    f"achieved (mean of {forward.shape[1]} envs)": forward.mean(1),
    "commanded": np.full(len(t), args.command)}}, title=f"Go1 joystick policy, "
    f"{int(metrics['falls'])} falls")
  every = max(1, round(0.04 / evaluation.task.dt))  # 25 frames per second
  print(common.render(evaluation.task.mj_model, rows[: round(4 / evaluation.task.dt): every],
                      sibling(args.out, "_play.gif"), fps=25, camera="tracking",
                      geomgroups=(0, 1, 2, 3)))
  return metrics


def main(argv: list[str] | None = None) -> dict | int:
  parser = argparse.ArgumentParser(description="Brax's PPO on the Go1 joystick task.")
  common.add_standard_args(parser, "go1_joystick")
  positive = common.int_in(1, 10**9, "a count >= 1")
  parser.add_argument("--model", type=Path, default=common.GO1_SCENE, help="the Go1 scene.xml")
  parser.add_argument("--preset", choices=tuple(PRESETS),
                      help="minute: the settings measured fastest to a walking policy on 2 "
                      "cores (feet-only collisions); stops at the first passing check unless "
                      "--iterations is given, and prints a JSON line last")
  parser.add_argument("--collisions", choices=COLLISIONS, default=None,
                      help="full (default): Menagerie's Go1 as it is; feet: only the feet touch "
                      "the floor, with MuJoCo Playground's one-iteration solver")
  parser.add_argument("--num-envs", type=positive, default=None, help="default 1024")
  parser.add_argument("--unroll", type=positive, default=None,
                      help="steps per env and iteration (default 24)")
  parser.add_argument("--iterations", type=positive, default=None,
                      help="default 600 (a preset's: its cap; given, no stop at walking)")
  parser.add_argument("--episode-length", type=positive, default=500, help="steps (50 Hz)")
  parser.add_argument("--eval-every", type=positive, default=None,
                      help="iterations between the 0.5 m/s checks and checkpoints (default 10)")
  parser.add_argument("--learning-rate", type=common.positive_float("Adam's first step size"),
                      default=None, help=f"default {PPO['learning_rate']}")
  parser.add_argument("--epochs", type=positive, default=None,
                      help=f"SGD passes per batch (default {PPO['num_updates_per_batch']})")
  parser.add_argument("--minibatches", type=positive, default=None, help="default 4")
  parser.add_argument("--processes", type=positive, default=1,
                      help="train data-parallel in this many local processes")
  parser.add_argument("--resume", action="store_true", help="continue from the checkpoint --out")
  parser.add_argument("--command", type=float, default=PLAY_COMMAND, help="--play's m/s forward")
  parser.add_argument("--play-seconds", type=common.positive_float("seconds"), default=10.0)
  args = common.parse(parser, argv, replaceable=lambda path: trained_collisions(path) is not None)
  preset = PRESETS.get(args.preset, {"flags": {}})
  clash = [f"--{flag.replace('_', '-')} {getattr(args, flag)}" for flag, value in
           preset["flags"].items() if getattr(args, flag) not in (None, value)]
  if clash:
    parser.error(f"--preset {args.preset} sets " + ", ".join(
      f"--{flag.replace('_', '-')} {value}" for flag, value in preset["flags"].items())
                 + f": {', '.join(clash)} contradicts it (leave it out, or leave out the preset)")
  args.stop_when_walking = args.preset is not None and args.iterations is None
  defaults = {key: preset[key] for key in ("eval_every", "iterations") if key in preset}
  for flag, value in {**FLAGS, **preset["flags"], **defaults}.items():
    if getattr(args, flag) is None:
      setattr(args, flag, value)

  low, high = default_config()["command_low"][0], default_config()["command_high"][0]
  for wrong, message in (
      (not low <= args.command <= high, f"--command {args.command} m/s is outside the trained "
       f"range [{low}, {high}]"),
      (args.num_envs % args.minibatches, f"--num-envs {args.num_envs} must be a multiple of "
       f"--minibatches {args.minibatches}"),
      (args.iterations % args.eval_every, f"--iterations {args.iterations} must be a multiple of "
       f"--eval-every {args.eval_every}"),
      (not args.model.is_file(), f"--model {args.model}: no such file (Menagerie's "
       "unitree_go1/scene.xml)"),
      (args.play and args.resume, "--play replays the policy at --out; --resume trains it on: "
       "give one of them"),
      (args.preset and args.processes > 1, f"--preset {args.preset} trains in one process "
       "(its stop at the first passing check is process 0's): leave out --processes")):
    if wrong:
      parser.error(message)
  trained = trained_collisions(args.out) if args.play or args.resume else None
  if trained is not None and trained != args.collisions:
    parser.error(f"--out {args.out} holds a policy trained with --collisions {trained}, not "
                 f"--collisions {args.collisions}: {'play' if args.play else 'resume'} it with "
                 f"--collisions {trained}")
  launched = os.environ.get(launch.ENV_NUM_PROCESSES, "1") != "1"
  if args.play:
    if args.processes > 1 or launched:
      parser.error("--play runs in one process: leave out --processes and the launcher")
    try:
      return play(args)
    except (ValueError, ImportError) as e:
      parser.error(f"--play: {e}")
  if args.processes > 1 and not launched:  # each process runs this script again
    return launch.launch(args.processes, [__file__, *(sys.argv[1:] if argv is None else argv)])
  try:
    model = go1_model(args.model, {**default_config(), "collisions": args.collisions})
  except ValueError as e:
    parser.error(f"--model {args.model}: {e}")
  try:
    # Starts the multi-process runtime when launched (before any JAX computation) and checks
    # that every process has the same model, versions and envs per device.
    dist = distributed.setup(model, args.num_envs, args.threads)
  except ValueError as e:
    parser.error(f"--num-envs {args.num_envs}: {e}")
  with dist.sim:
    try:
      return train(args, dist.process_index == 0)
    except (ValueError, ImportError) as e:
      parser.error(str(e))


if __name__ == "__main__":
  result = main()
  sys.exit(result if isinstance(result, int) else 0)
