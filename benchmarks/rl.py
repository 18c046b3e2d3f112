"""Throughput of an RL training rollout on mjbatch_jax.envs against the bare physics.

Rows, each a jitted lax.scan of `--unroll` control steps of `--substeps` substeps on N envs:
  physics:  mjbatch_jax.step on the same (N, nstate) rows, replaying the controls the policy
            chose (the same custom calls as the env, nothing around them)
  env:      a Go1 walking env (mjbatch_jax.envs: observation, reward, episode bookkeeping,
            auto-reset of rows and params) driven by an MLP policy (2 x 128 tanh), the whole
            unroll jitted as a training loop does
Reported: env steps/s of each (CPU time and wall, medians of interleaved repeats), the env row as
a ratio to the physics row, the compile time of each (its first call minus its second), and with
--memory the RSS of the env rollout at N=4096 minus N=16 (fresh processes).

  python benchmarks/rl.py unitree_go1 --num-envs 1024 --threads 2

With --time-to-walk, the rows are Brax's PPO (`mjbatch_jax.agents.ppo`) training two tasks
until their policy passes its check, each at the size it trains at:
  go1_joystick:  examples/go1_joystick.py's task and settings (1024 envs x 24 steps per
                 iteration); walks: mean forward-velocity error below 0.1 m/s at a 0.5 m/s
                 command, with no fall, in its 10 s check of 16 envs
  cheetah_run:   dm_control's cheetah run, held out from the library (tests.models.CHEETAH_XML,
                 dm_control's body plan and numbers; reward min(forward speed / 10, 1) per 10 ms
                 step; 512 envs x 20 steps x 4 per iteration); runs: a 1000-step episode of the
                 deterministic policy earns >= 200 (2 m/s), the mean of 16
Reported per row: the training time (wall and CPU, evaluations not counted, the first
iteration's compilation counted), iterations and env steps from the first iteration until the
check passed (with --run, those of a finished run, from its checkpoint's curve); then,
continued from that policy one iteration per call: the compile time of one iteration (the first
call's time minus the median of the others'), an iteration's CPU time, the physics alone of the
same calls (the env's own step calls, replaying the controls the current policy chose on as
many envs, timed between iterations) and its share of the iteration, env steps per CPU second
(per core), and the time to walk scaled to the seed's 16 threads at that per-core rate. Load
averages are recorded: on a shared machine the CPU times are the numbers to compare.

  python benchmarks/rl.py --time-to-walk --threads 2
  python benchmarks/rl.py --time-to-walk --tasks cheetah_run --max-iterations 50
  python benchmarks/rl.py --time-to-walk --run go1_joystick=examples/results/go1_joystick.npz
"""

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests.models
sys.path.insert(2, str(Path(__file__).resolve().parents[1] / "examples"))  # go1_joystick

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from _common import (  # noqa: E402
  RESULTS,
  SHARED_MODELS,
  cpu_times,
  interleaved,
  least,
  machine_info,
  median,
  model_label,
  pyplot,
  resolve_model,
  run_timed,
  save_figure,
  timed,
  wall_times,
  write_result,
)

import mjbatch_jax  # noqa: E402
from mjbatch_jax import envs  # noqa: E402
from mjbatch_jax.agents import ppo  # noqa: E402
from mjbatch_jax.envs.env import advance  # noqa: E402


class Walk(envs.Env):
  """Walk forward: a PD-targets policy on a legged robot with a free base (Go1-like).

  Observation: base height, orientation, joint positions, base and joint velocities, last
  action; reward: forward velocity minus a small action cost; done when the base drops below
  half its start height.
  """

  def __init__(self, model: mujoco.MjModel, substeps: int, threads: int, observe: str):
    self.param_fields = ("geom_friction",)
    # Fields from the step call: none (the observation is the row's), the bodies' poses as mj_step
    # left them (free), or at the new state (one more mj_forward per control step).
    self.observe = () if observe == "none" else ("xpos", "xquat")
    self.observe_at = "step" if observe == "step" else "new"
    super().__init__(model, substeps, threads)
    self._key = 0 if model.nkey else None
    data = mujoco.MjData(model)
    if self._key is not None:
      mujoco.mj_resetDataKeyframe(model, data, self._key)
    self._qpos0 = jnp.asarray(data.qpos)
    self._ctrl0 = jnp.asarray(data.ctrl)
    self._height0 = float(data.qpos[2])

  def reset(self, rng: jax.Array) -> envs.State:
    noise = 0.01 * jax.random.normal(rng, self._qpos0.shape)
    data = self.make_data(qpos=self._qpos0 + noise.at[:7].set(0), ctrl=self._ctrl0)
    zero = jnp.zeros((), data.row.dtype)
    return envs.State(data, self._obs(data, jnp.zeros(self.action_size)), zero, zero, {},
                      {"last_action": jnp.zeros(self.action_size)})

  def step(self, state: envs.State, action: jax.Array) -> envs.State:
    data = self.pipeline_step(state.data, self._ctrl0 + 0.3 * action)
    forward = data.qvel[0]
    reward = forward - 0.01 * jnp.sum(action**2)
    done = (data.qpos[2] < 0.5 * self._height0) | self.bad(data)
    return state.replace(
      data=data, obs=self._obs(data, action), reward=reward,
      done=done.astype(data.row.dtype), info={**state.info, "last_action": action},
    )

  def _obs(self, data: envs.Data, action: jax.Array) -> jax.Array:
    return jnp.concatenate([data.qpos[2:], data.qvel, action])


def mlp_init(key: jax.Array, sizes: list[int]) -> list[tuple[jax.Array, jax.Array]]:
  layers = []
  for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
    key, sub = jax.random.split(key)
    layers.append((jax.random.normal(sub, (n_in, n_out)) / np.sqrt(n_in), jnp.zeros(n_out)))
  return layers


def mlp(layers: list[tuple[jax.Array, jax.Array]], x: jax.Array) -> jax.Array:
  for w, b in layers[:-1]:
    x = jnp.tanh(x @ w + b)
  w, b = layers[-1]
  return jnp.tanh(x @ w + b)


def build(model: mujoco.MjModel, n: int, unroll: int, substeps: int, threads: int,
          observe: str, settle: int = 0) -> dict:
  """The two jitted rollouts and their inputs."""
  walk = Walk(model, substeps, threads, observe)
  env = envs.wrap_for_brax_training(walk, episode_length=1000)
  keys = jax.random.split(jax.random.key(0), n)
  state = jax.jit(env.reset)(keys)
  policy = mlp_init(jax.random.key(1), [int(walk.observation_size), 128, 128, walk.action_size])

  @jax.jit
  def env_rollout(state: Any, policy: Any, key: jax.Array) -> Any:
    def one(carry: Any, k: jax.Array) -> Any:
      s = carry
      action = mlp(policy, s.obs) + 0.1 * jax.random.normal(k, (n, walk.action_size))
      s = env.step(s, action)
      return s, (s.reward, walk._ctrl0 + 0.3 * action)
    return jax.lax.scan(one, state, jax.random.split(key, unroll))

  # Steady state: every timed rollout starts from envs that have already run `settle` unrolls
  # (episodes under way, some reset), not from the first substeps after a reset.
  # The first two calls also give its compile time (the first call minus the second).
  calls = []
  for i in range(max(settle, 2)):
    key = jax.random.fold_in(jax.random.key(3), i)
    timing, out = run_timed(env_rollout, state, policy, key)
    calls.append(timing.wall_s)
    if i < settle:
      state = out[0]
  sim = walk.sim
  rows = state.data.row
  params = sim.params(n)
  # The physics alone replays the controls the policy chose, from the same rows: a robot driven
  # by a policy costs more per substep (more contacts, more solver iterations) than one holding a
  # pose, so fixed controls would flatter the env's overhead.
  _, (_, ctrls) = env_rollout(state, policy, jax.random.key(2))

  @jax.jit
  def physics_rollout(rows: jax.Array, ctrls: jax.Array) -> Any:
    def one(s: jax.Array, ctrl: jax.Array) -> Any:
      return mjbatch_jax.step(s, ctrl, params, nstep=substeps), None
    return jax.lax.scan(one, rows, ctrls)[0]

  return {"env": (env_rollout, (state, policy, jax.random.key(2))),
          "physics": (physics_rollout, (rows, ctrls)), "walk": walk,
          "env_compile_s": calls[0] - calls[1]}


def rss_mb() -> float:
  with open("/proc/self/status") as f:
    return int(next(line for line in f if line.startswith("VmRSS:")).split()[1]) / 1024


def memory_child(model_name: str, n: int, unroll: int, substeps: int, threads: int,
                 observe: str, settle: int) -> None:
  _, model = resolve_model(model_name)
  rows = build(model, n, unroll, substeps, threads, observe, settle)
  fn, args = rows["env"]
  jax.block_until_ready(fn(*args))
  jax.block_until_ready(fn(*args))
  print(json.dumps({"rss_mb": rss_mb()}))


# -- time to walk ---------------------------------------------------------------------------------


class CheetahRun(envs.Env):
  """dm_control's cheetah run on tests.models.CHEETAH_XML, written as a new user would.

  Observation: qpos without the forward position, qvel; reward: min(forward speed / 10, 1);
  episodes end by time only. Starts from a little noise on the joints.
  """

  def __init__(self, threads: int):
    from tests.models import CHEETAH_XML

    super().__init__(mujoco.MjModel.from_xml_string(CHEETAH_XML), 1, threads)

  def reset(self, rng: jax.Array) -> envs.State:
    nq = self.mj_model.nq
    qpos = jax.random.uniform(rng, (nq,), minval=-0.1, maxval=0.1).at[:2].set(0.0)
    data = self.make_data(qpos=qpos)
    zero = jnp.zeros(())
    return envs.State(data, self._obs(data), zero, zero, {"speed": zero})

  def step(self, state: envs.State, action: jax.Array) -> envs.State:
    data = self.pipeline_step(state.data, action)
    speed = data.qvel[0]
    return state.replace(data=data, obs=self._obs(data), reward=jnp.clip(speed / 10, 0.0, 1.0),
                         metrics={**state.metrics, "speed": speed})

  def _obs(self, data: envs.Data) -> jax.Array:
    return jnp.concatenate([data.qpos[1:], data.qvel])


class EpisodeReturn:
  """The deterministic policy's return over one episode of num_envs envs (their mean)."""

  def __init__(self, env: envs.Env, steps: int, num_envs: int = 16):
    self.env = envs.VmapWrapper(envs.WarningWrapper(env))
    self.steps, self.num_envs = steps, num_envs
    self._runs: dict[int, Any] = {}

  def _run(self, make_policy: Any, params: Any, key: jax.Array) -> jax.Array:
    policy = make_policy(params, deterministic=True)
    state = self.env.reset(jax.random.split(key, self.num_envs))

    def one(state: envs.State, key: jax.Array) -> tuple[envs.State, jax.Array]:
      state = self.env.step(state, policy(state.obs, key)[0])
      return state, state.reward

    return jnp.sum(jax.lax.scan(one, state, jax.random.split(key, self.steps))[1], 0).mean()

  def __call__(self, make_policy: Any, params: Any) -> dict[str, float]:
    run = self._runs.setdefault(id(make_policy), jax.jit(functools.partial(self._run,
                                                                            make_policy)))
    return {"episode_reward": float(run(params, jax.random.PRNGKey(1)))}


class PhysicsProbe:
  """Timed between training iterations: the physics alone of one iteration's step calls.

  Keeps a batch of envs of its own (as many as training steps), wrapped as training wraps them;
  each call rolls it on for one unroll under the current (stochastic) policy, recording the
  controls, then times replaying them from the unroll's first rows with the env's own step call
  (same substeps, observed fields and warnings), the compiled replay's least CPU time of two,
  times the unrolls of an iteration (Brax's iteration rolls its num_envs envs
  batch_size x num_minibatches / num_envs times).
  """

  def __init__(self, env: envs.Env, kwargs: dict[str, Any]):
    self.task, self.num_envs, self.unroll = env, kwargs["num_envs"], kwargs["unroll_length"]
    self.unrolls = kwargs["batch_size"] * kwargs["num_minibatches"] // kwargs["num_envs"]
    self.env = envs.wrap_for_brax_training(
      env, kwargs["episode_length"], randomization_fn=kwargs.get("randomization_fn"),
      randomization_period=kwargs.get("randomization_period"))
    self.state: Any = None
    self._rolls: dict[int, Any] = {}
    self._replay = jax.jit(self.replay)

  def roll(self, make_policy: Any, params: Any, state: Any, key: jax.Array) -> Any:
    policy = make_policy(params)

    def one(state: envs.State, key: jax.Array) -> tuple[envs.State, jax.Array]:
      state = self.env.step(state, policy(state.obs, key)[0])
      return state, state.data.ctrl

    return jax.lax.scan(one, state, jax.random.split(key, self.unroll))

  def replay(self, rows: jax.Array, ctrls: jax.Array, params: Any) -> jax.Array:
    task = self.task

    def one(rows: jax.Array, ctrl: jax.Array) -> tuple[jax.Array, None]:
      rows, _, _ = advance(rows, ctrl, params, task.n_substeps, task.observe,
                           task.track_warnings, task.observe_at)
      return rows, None

    return jax.lax.scan(one, rows, ctrls)[0]

  def __call__(self, make_policy: Any, params: Any) -> dict[str, float]:
    roll = self._rolls.setdefault(id(make_policy), jax.jit(functools.partial(self.roll,
                                                                              make_policy)))
    key = jax.random.PRNGKey(len(self._rolls) + (0 if self.state is None else 7))
    if self.state is None:  # two unrolls first: episodes under way, as in training
      self.state = jax.jit(self.env.reset)(jax.random.split(key, self.num_envs))
      for i in range(2):
        self.state, _ = roll(params, self.state, jax.random.fold_in(key, i))
    start = self.state
    self.state, ctrls = roll(params, start, jax.random.fold_in(key, 2))
    args = (start.data.row, ctrls, start.data.params)
    jax.block_until_ready(self._replay(*args))  # compiled (once) and warm
    best = least([timed(self._replay, *args) for _ in range(2)])
    # The whole unroll as training runs it (the policy, the env's code around the physics, the
    # wrappers): what the iteration spends beyond it is the SGD and the host's overhead.
    unroll = least([timed(roll, params, start, jax.random.fold_in(key, 3 + i)) for i in range(2)])
    return {"physics_cpu_s": self.unrolls * best.cpu_s,
            "physics_wall_s": self.unrolls * best.wall_s,
            "unroll_cpu_s": self.unrolls * unroll.cpu_s,
            "unroll_wall_s": self.unrolls * unroll.wall_s}


def go1_task(threads: int) -> tuple[envs.Env, dict[str, Any], Any, Callable[[dict], bool]]:
  import go1_joystick as go1  # pyright: ignore[reportMissingImports]  (examples/, on the path)

  scene = SHARED_MODELS / "unitree_go1" / "scene.xml"
  env = go1.Joystick(scene, num_threads=threads)
  return env, go1.training(env), go1.Evaluation(scene, threads), go1.walks


def go1_minute_task(threads: int) -> tuple[envs.Env, dict[str, Any], Any, Callable[[dict], bool]]:
  """The Go1 joystick at examples/go1_joystick.py's --preset minute (feet-only collisions)."""
  import go1_joystick as go1  # pyright: ignore[reportMissingImports]  (examples/, on the path)

  scene = SHARED_MODELS / "unitree_go1" / "scene.xml"
  preset = go1.PRESETS["minute"]
  flags = preset["flags"]
  env = go1.Joystick(scene, {"collisions": flags["collisions"]}, num_threads=threads)
  kwargs = go1.training(env, flags["num_envs"], flags["unroll"], preset["iterations"], 500,
                        flags["minibatches"], preset["network"], **preset["ppo"],
                        learning_rate=flags["learning_rate"],
                        num_updates_per_batch=flags["epochs"])
  return (env, kwargs, go1.Evaluation(scene, threads, collisions=flags["collisions"]),
          go1.walks)


def minute_runs(threads: int, seeds: list[int], folder: Path, quiet: bool = False
                ) -> list[dict[str, Any]]:
  """`examples/go1_joystick.py --preset minute --seed S`, each a process of its own (its time to
  walk counts from the process's start): each run's last line, its curve and checkpoint path.
  Progress over the runs on stderr (examples/common.progress) unless quiet."""
  import common  # pyright: ignore[reportMissingImports]  (examples/, on the path)

  example = Path(__file__).resolve().parents[1] / "examples" / "go1_joystick.py"
  runs = []
  with common.Progress(len(seeds), "go1_minute runs", quiet=quiet, unit="run") as bar:
    for seed in seeds:
      out = folder / f"go1_minute_{seed}.npz"
      command = [sys.executable, str(example), "--preset", "minute", "--seed", str(seed),
                 "--threads", str(threads), "--out", str(out)]
      bar.write(f"  go1_minute seed {seed}: {' '.join(command[1:])}", keep=True)
      done = subprocess.run(command, capture_output=True, text=True, check=False)
      if done.returncode:
        raise SystemExit(f"go1_minute seed {seed} failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")
      record = json.loads(done.stdout.strip().splitlines()[-1])
      record["curve"] = ppo.read_checkpoint(out)[1]["curve"]
      record["checkpoint"] = str(out)
      bar.write(f"  go1_minute seed {seed}: time to walk {record['time_to_walk_s']} s from the "
                f"process's start ({record['time_to_walk_training_s']} s training), "
                f"{record['env_steps']:,} env steps, {record['iterations']} iterations, load "
                f"{record['load_average']['median']:.1f}", keep=True)
      bar.update(postfix=f"seed {seed}")
      runs.append(record)
  return runs


CHEETAH_RUNS = 200.0  # reward of a 1000-step episode: 2 m/s on average
# As MuJoCo Playground's CheetahRun trains (discount 0.99 here), at a CPU's size.
CHEETAH_NETWORK = {"policy_hidden_layer_sizes": (32,) * 4, "value_hidden_layer_sizes": (256,) * 3}
CHEETAH_PPO = {"num_envs": 512, "unroll_length": 20, "batch_size": 256, "num_minibatches": 8,
               "episode_length": 1000, "num_updates_per_batch": 4, "learning_rate": 1e-3,
               "entropy_cost": 1e-2, "discounting": 0.99, "reward_scaling": 10.0,
               "normalize_observations": True}


def cheetah_task(threads: int) -> tuple[envs.Env, dict[str, Any], Any, Callable[[dict], bool]]:
  env = CheetahRun(threads)
  kwargs = {**CHEETAH_PPO, "network": CHEETAH_NETWORK}
  return (env, kwargs, EpisodeReturn(CheetahRun(threads), CHEETAH_PPO["episode_length"]),
          lambda m: m["eval/episode_reward"] >= CHEETAH_RUNS)


TASKS = {"go1_joystick": go1_task, "go1_minute": go1_minute_task, "cheetah_run": cheetah_task}


def time_to_walk_row(name: str, threads: int, max_iterations: int, eval_every: int, pairs: int,
                     folder: Path, source: Path | None = None, quiet: bool = False
                     ) -> dict[str, Any]:
  """The task's row; from source (a finished run's checkpoint) instead of training if given.
  Progress of its iterations on stderr (examples/common.progress) unless quiet."""
  import common  # pyright: ignore[reportMissingImports]  (examples/, on the path)

  # At most max_iterations to the check, then the timed ones: the total shrinks once it passes.
  bar = common.Progress(max_iterations + pairs + 2, name, quiet=quiet, unit="iter")
  env, kwargs, evaluate, passes = TASKS[name](threads)
  per_iteration = kwargs["batch_size"] * kwargs["num_minibatches"] * kwargs["unroll_length"]
  kwargs = {**kwargs, "num_timesteps": max_iterations * per_iteration}
  checkpoint = folder / f"{name}.npz"
  load = [os.getloadavg()[0]]

  def log(p: Any) -> None:
    load.append(os.getloadavg()[0])
    shown = {k: round(v, 3) for k, v in p.metrics.items() if k.startswith("eval/")}
    bar.write(f"  {name} iter {p.iteration:4d}: {p.env_steps:>10,} env steps, train "
              f"{p.wall_s:6.0f} s (CPU {p.cpu_s:6.0f} s), {shown}")
    bar.to(p.iteration)

  with bar:
    if source is None:
      curve = ppo.train(env, **kwargs, iterations_per_eval=eval_every, evaluate=evaluate,
                        stop=lambda p: passes(p.metrics), checkpoint=checkpoint, log=log).curve
    else:  # the run's own curve; the timing below continues from its last policy, on a copy
      shutil.copyfile(source, checkpoint)
      curve = [ppo.Progress(**row) for row in ppo.read_checkpoint(checkpoint)[1]["curve"]]
    first = next((p for p in curve if passes(p.metrics)), None)
    done = curve[-1].iteration
    bar.total = done + pairs + 2
    bar.to(done, postfix="timing iterations")
    # On from there, one iteration per call, the physics alone timed between them.
    probe = PhysicsProbe(env, kwargs)
    share = ppo.train(env, **{**kwargs, "num_timesteps": (done + pairs + 2) * per_iteration},
                      iterations_per_eval=1, evaluate=probe, checkpoint=checkpoint, resume=True,
                      log=log).curve[len(curve):]
  wall = np.diff([curve[-1].wall_s] + [p.wall_s for p in share])
  cpu = np.diff([curve[-1].cpu_s] + [p.cpu_s for p in share])
  physics = np.array([p.metrics["eval/physics_cpu_s"] for p in share])
  unroll = np.array([p.metrics["eval/unroll_cpu_s"] for p in share])
  steady = slice(2, None)  # the first compiles the iteration, the second the probe's roll
  iteration_cpu = float(np.median(cpu[steady]))
  per_core = per_iteration / iteration_cpu
  row = {
    "source": "trained here" if source is None else str(source),
    "passed": first is not None, "iterations_run": done,
    "time_to_walk_s": None if first is None else first.wall_s,
    "time_to_walk_cpu_s": None if first is None else first.cpu_s,
    "time_to_walk_env_steps": None if first is None else first.env_steps,
    "time_to_walk_iterations": None if first is None else first.iteration,
    "env_steps_per_iteration": per_iteration, "num_envs": kwargs["num_envs"],
    "unrolls_per_iteration": probe.unrolls,
    "compile_s": float(wall[0] - np.median(wall[steady])),
    "compile_cpu_s": float(cpu[0] - np.median(cpu[steady])),
    "iteration_wall_s": float(np.median(wall[steady])), "iteration_cpu_s": iteration_cpu,
    "physics_cpu_s": float(np.median(physics[steady])),
    "physics_share_cpu": float(np.median(physics[steady] / cpu[steady])),
    "physics_share_cpu_range": [float(np.min(physics[steady] / cpu[steady])),
                                float(np.max(physics[steady] / cpu[steady]))],
    # Where an iteration's CPU goes: the physics, the env code and policy around it (the unroll
    # less its physics), the SGD and the host's overhead (the iteration less the unroll).
    "profile_cpu_share": {
      "physics": float(np.median(physics[steady] / cpu[steady])),
      "env_and_policy": float(np.median((unroll[steady] - physics[steady]) / cpu[steady])),
      "sgd_and_host": float(np.median((cpu[steady] - unroll[steady]) / cpu[steady]))},
    "env_steps_per_cpu_s": per_core,
    "substeps_per_cpu_s": per_core * env.n_substeps,
    "time_to_walk_16_threads_s": None if first is None else first.env_steps / (16 * per_core),
    "load_average": [min(load), float(np.median(load)), max(load)],
    "curve": [p.row() for p in curve],
  }
  env.close()
  return row


def _minute_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
  """The preset's row: each seed's run, and the medians over seeds (None counts as never)."""
  def middle(key: str) -> float | None:
    values = sorted(np.inf if r[key] is None else r[key] for r in runs)
    value = values[len(values) // 2]
    return None if not np.isfinite(value) else float(value)

  return {"seeds": runs, "passed": all(r["time_to_walk_s"] is not None for r in runs),
          "time_to_walk_from_start_s": middle("time_to_walk_s"),
          "time_to_walk_s": middle("time_to_walk_training_s"),
          "time_to_walk_env_steps": middle("env_steps") if runs else None,
          "time_to_walk_iterations": middle("iterations") if runs else None}


def time_to_walk(args: argparse.Namespace) -> None:
  result: dict[str, Any] = {"machine": machine_info(sys.argv), "threads": args.threads,
                            "rows": {}}
  sources = {name: Path(path) for name, path in (item.split("=", 1) for item in args.run)}
  folder = Path(tempfile.mkdtemp(prefix="rl-time-to-walk-"))
  try:
    for name in args.tasks.split(","):
      runs = None
      if name == "go1_minute" and name not in sources:
        print(f"{name}: the example's --preset minute, seeds {args.seeds}", flush=True)
        runs = minute_runs(args.threads, [int(s) for s in args.seeds.split(",")], folder,
                           args.quiet)
        walked = [r for r in runs if r["time_to_walk_s"] is not None]
        # The timing continues from a seed's policy (a walking one's where there is one).
        sources[name] = Path((walked or runs)[0]["checkpoint"])
      else:
        print(f"{name}: training until the check passes (at most {args.max_iterations} "
              "iterations)", flush=True)
      row = time_to_walk_row(name, args.threads, args.max_iterations, args.eval_every,
                             args.pairs, folder, sources.get(name), args.quiet)
      if runs is not None:
        row.update(_minute_summary(runs))
      result["rows"][name] = row
      if "seeds" in row:
        each = ", ".join("never" if r["time_to_walk_s"] is None else
                         f"{r['time_to_walk_s']:.1f} s" for r in row["seeds"])
        ttw = (f"median {row['time_to_walk_from_start_s']} s from the process's start "
               f"(seeds: {each}), {row['time_to_walk_s']} s of training")
      else:
        ttw = ("not reached" if not row["passed"] else
               f"{row['time_to_walk_s']:.0f} s ({row['time_to_walk_cpu_s']:.0f} CPU s, "
               f"{row['time_to_walk_env_steps']:,} env steps, {row['time_to_walk_iterations']} "
               f"iterations; {row['time_to_walk_16_threads_s']:.0f} s at 16 threads' rate)")
      profile = ", ".join(f"{k} {v:.2f}" for k, v in row["profile_cpu_share"].items())
      print(f"{name}: time to walk {ttw}; compile {row['compile_s']:.1f} s "
            f"(CPU {row['compile_cpu_s']:.1f} s); iteration {row['iteration_cpu_s']:.2f} CPU s, "
            f"physics alone {row['physics_cpu_s']:.2f} CPU s: share "
            f"{row['physics_share_cpu']:.3f} ({row['physics_share_cpu_range'][0]:.3f}-"
            f"{row['physics_share_cpu_range'][1]:.3f}); {row['env_steps_per_cpu_s']:,.0f} env "
            f"steps per CPU s ({row['substeps_per_cpu_s']:,.0f} substeps); an iteration's CPU: "
            f"{profile}; load average {row['load_average'][1]:.1f}", flush=True)
  finally:
    shutil.rmtree(folder, ignore_errors=True)
  out = write_result(args.out, "rl-time-to-walk", result)
  plt = pyplot()
  if plt is not None:
    fig, axes = plt.subplots(1, len(result["rows"]), figsize=(5.5 * len(result["rows"]), 3.6),
                             squeeze=False)
    for ax, (name, row) in zip(axes[0], result["rows"].items(), strict=True):
      key = [k for k in row["curve"][0]["metrics"] if k.startswith("eval/")][0]
      curves = {f"seed {r['seed']}": r["curve"] for r in row["seeds"]} if "seeds" in row else {
        "": row["curve"]}
      for label, curve in curves.items():
        ax.plot([p["wall_s"] for p in curve], [p["metrics"][key] for p in curve], "o-", ms=3,
                label=label or None)
      if "seeds" in row:
        ax.legend()
      ax.set(xlabel="training time (s)", ylabel=key, title=name)
    save_figure(fig, out.with_suffix(".png"), dpi=120)


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("model", nargs="?",
                      help="an XML path or a folder under ../shared/models (not --time-to-walk)")
  parser.add_argument("--num-envs", type=int, default=1024)
  parser.add_argument("--unroll", type=int, default=24)
  parser.add_argument("--substeps", type=int, default=5)
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--settle", type=int, default=10,
                      help="unrolls run before timing, so that the timed ones are in steady state")
  parser.add_argument("--observe", choices=("none", "step", "new"), default="none",
                      help="bodies' poses from the step call: none, in-step, or at the new state")
  parser.add_argument("--memory", action="store_true",
                      help="also RSS of the env rollout at N=4096 minus N=16")
  parser.add_argument("--memory-child", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON")
  parser.add_argument("--time-to-walk", action="store_true",
                      help="train the --tasks with Brax's PPO until their checks pass instead")
  parser.add_argument("--tasks", default=",".join(TASKS),
                      help=f"for --time-to-walk, comma-separated of {', '.join(TASKS)}")
  parser.add_argument("--seeds", default="0,1,2",
                      help="for --time-to-walk: go1_minute's seeds, one process each")
  parser.add_argument("--max-iterations", type=int, default=400,
                      help="for --time-to-walk: give up after this many iterations")
  parser.add_argument("--eval-every", type=int, default=5,
                      help="for --time-to-walk: iterations between checks")
  parser.add_argument("--pairs", type=int, default=6,
                      help="for --time-to-walk: timed iterations (each with a physics replay)")
  parser.add_argument("--run", action="append", default=[], metavar="TASK=CHECKPOINT",
                      help="for --time-to-walk: take TASK's time to walk from a finished run's "
                      "checkpoint (its curve; the timing continues from its policy) instead of "
                      "training, e.g. go1_joystick=examples/results/go1_joystick.npz")
  parser.add_argument("--quiet", action="store_true",
                      help="no progress bar or progress lines, no per-check lines")
  args = parser.parse_args(argv)
  if args.time_to_walk:
    unknown = sorted(set(args.tasks.split(",")) - set(TASKS))
    if unknown:
      parser.error(f"--tasks: unknown {unknown}; the tasks are {', '.join(TASKS)}")
    if min(args.max_iterations, args.eval_every, args.pairs) < 1 or args.threads < 0:
      parser.error("--max-iterations, --eval-every and --pairs must be >= 1")
    for item in args.run:
      name, _, path = item.partition("=")
      if name not in TASKS or not Path(path).is_file():
        parser.error(f"--run {item}: expected TASK=CHECKPOINT with TASK in {', '.join(TASKS)} "
                     "and an existing checkpoint file")
    try:
      seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
      seeds = []
    if not seeds:
      parser.error(f"--seeds {args.seeds!r}: expected comma-separated integers, e.g. 0,1,2")
    if args.max_iterations % args.eval_every:
      parser.error(f"--max-iterations {args.max_iterations} must be a multiple of --eval-every "
                   f"{args.eval_every}")
    time_to_walk(args)
    return
  if args.model is None:
    parser.error("the model is required (unless --time-to-walk)")
  if min(args.num_envs, args.unroll, args.substeps, args.repeats) < 1 or args.threads < 0:
    parser.error("sizes must be >= 1 and --threads >= 0")
  if args.memory_child:
    memory_child(args.model, args.memory_child, args.unroll, args.substeps, args.threads,
                 args.observe, args.settle)
    return
  path, model = resolve_model(args.model)
  label = model_label(args.model, path)
  if args.settle < 0:
    parser.error("--settle must be >= 0")
  rows = build(model, args.num_envs, args.unroll, args.substeps, args.threads, args.observe,
               args.settle)
  result: dict[str, Any] = {"machine": machine_info(sys.argv), "model": label,
                            "observe": args.observe, "settle": args.settle,
                            "num_envs": args.num_envs, "unroll": args.unroll,
                            "substeps": args.substeps, "threads": args.threads}
  # The env's rollout was compiled while settling; the physics' now, the same way.
  compile_s = {"env": rows["env_compile_s"]}
  physics, physics_args = rows["physics"]
  first = timed(physics, *physics_args).wall_s
  steady = timed(physics, *physics_args).wall_s
  compile_s["physics"] = first - steady
  cases = {name: functools.partial(rows[name][0], *rows[name][1]) for name in ("physics", "env")}
  import common  # pyright: ignore[reportMissingImports]  (examples/; not in --memory-child)

  with common.Progress(args.repeats, "repeats", quiet=args.quiet, unit="round") as bar:
    times = interleaved(cases, args.repeats, warmup=False, progress=bar)
  env_steps = args.num_envs * args.unroll
  summary = {}
  for name, samples in times.items():
    typical = median(samples)
    summary[name] = {
      "env_steps_per_s_wall": env_steps / typical.wall_s,
      "env_steps_per_s_cpu": env_steps / typical.cpu_s,
      "wall_s": wall_times(samples), "cpu_s": cpu_times(samples), "compile_s": compile_s[name],
    }
  ratio_wall = summary["env"]["env_steps_per_s_wall"] / summary["physics"]["env_steps_per_s_wall"]
  ratio_cpu = summary["env"]["env_steps_per_s_cpu"] / summary["physics"]["env_steps_per_s_cpu"]
  per_repeat = [p.wall_s / e.wall_s for p, e in zip(times["physics"], times["env"], strict=True)]
  result.update(rows=summary, env_over_physics_wall=ratio_wall, env_over_physics_cpu=ratio_cpu,
                env_over_physics_spread=[min(per_repeat), max(per_repeat)])
  print(f"{label}, N={args.num_envs}, unroll {args.unroll}, {args.substeps} substeps, "
        f"{args.threads} threads, observe {args.observe}")
  for name, row in summary.items():
    print(f"  {name:8s} {row['env_steps_per_s_wall']:10.0f} env steps/s wall, "
          f"{row['env_steps_per_s_cpu']:10.0f} per CPU-s; compile {row['compile_s']:.2f} s")
  print(f"  env / physics: {ratio_wall:.3f} (wall), {ratio_cpu:.3f} (CPU); per repeat "
        f"{min(per_repeat):.2f}..{max(per_repeat):.2f}")
  if args.memory:
    rss = {}
    for n in (16, 4096):
      out = subprocess.run(
        [sys.executable, __file__, args.model, "--memory-child", str(n), "--unroll",
         str(args.unroll), "--substeps", str(args.substeps), "--threads", str(args.threads),
         "--observe", args.observe, "--settle", str(args.settle)],
        capture_output=True, text=True, env=dict(os.environ), check=True)
      rss[n] = json.loads(out.stdout.strip().splitlines()[-1])["rss_mb"]
    result["rss_mb"] = rss
    result["rss_4096_minus_16_mb"] = rss[4096] - rss[16]
    print(f"  RSS of the env rollout: N=4096 {rss[4096]:.1f} MB, N=16 {rss[16]:.1f} MB, "
          f"difference {rss[4096] - rss[16]:.1f} MB")
  out = write_result(args.out, f"rl-{label}", result)
  plt = pyplot()
  if plt is not None:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    names = list(summary)
    ax.bar(names, [summary[n]["env_steps_per_s_wall"] for n in names])
    ax.set_ylabel("env steps / s (wall)")
    ax.set_title(f"{label}: RL rollout vs physics, N={args.num_envs}")
    save_figure(fig, out.with_suffix(".png"), dpi=120)


if __name__ == "__main__":
  main(sys.argv[1:])
