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
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from _common import (  # noqa: E402
  RESULTS,
  machine_info,
  model_label,
  pyplot,
  resolve_model,
  write_result,
)

import mjbatch_jax  # noqa: E402
from mjbatch_jax import envs  # noqa: E402


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
    start = time.perf_counter()
    key = jax.random.fold_in(jax.random.key(3), i)
    out = jax.block_until_ready(env_rollout(state, policy, key))
    calls.append(time.perf_counter() - start)
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


def timed(fn: Any, args: tuple) -> tuple[float, float]:
  wall, cpu = time.perf_counter(), time.process_time()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - wall, time.process_time() - cpu


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


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("model", help="an XML path or a folder under ../shared/models")
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
  args = parser.parse_args(argv)
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
  first, _ = timed(*rows["physics"])
  steady, _ = timed(*rows["physics"])
  compile_s["physics"] = first - steady
  times: dict[str, list[tuple[float, float]]] = {"physics": [], "env": []}
  for _ in range(args.repeats):
    for name in ("physics", "env"):
      times[name].append(timed(*rows[name]))
  env_steps = args.num_envs * args.unroll
  summary = {}
  for name, samples in times.items():
    wall = np.array([w for w, _ in samples])
    cpu = np.array([c for _, c in samples])
    summary[name] = {
      "env_steps_per_s_wall": env_steps / float(np.median(wall)),
      "env_steps_per_s_cpu": env_steps / float(np.median(cpu)),
      "wall_s": wall.tolist(), "cpu_s": cpu.tolist(), "compile_s": compile_s[name],
    }
  ratio_wall = summary["env"]["env_steps_per_s_wall"] / summary["physics"]["env_steps_per_s_wall"]
  ratio_cpu = summary["env"]["env_steps_per_s_cpu"] / summary["physics"]["env_steps_per_s_cpu"]
  per_repeat = [p[0] / e[0] for p, e in zip(times["physics"], times["env"], strict=True)]
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
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)


if __name__ == "__main__":
  main(sys.argv[1:])
