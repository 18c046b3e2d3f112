"""Brax's PPO on MuJoCo Playground's own envs, on mjbatch_jax and on MJX, for the same wall clock.

Each run trains one env on one physics in a fresh process with Playground's own PPO config for
that env (`mujoco_playground.config.*_params.brax_ppo_config`, passed to
`brax.training.agents.ppo.train` as Playground's train_jax_ppo.py does: its networks, its
wrap_env_fn, its learning rate, discount, entropy cost, reward scaling, episode length), scaled
for a CPU by --cpu-scale (the default): 256 envs, batch 256 x 8 minibatches, 4 updates per
batch and an evaluation every --iterations-per-eval iterations (Playground's GPU sizes: 2048 or
8192 envs, batch 1024 or 256 x 32 minibatches, 16 or 4 updates, which on 2 CPU cores spend
minutes of SGD per iteration). A run stops at the first evaluation after --budget seconds of
wall clock, compile time included. Float32, as Playground trains. The runs of an env follow
one another, or with --side-by-side run at once, each process pinned to a CPU of its own (our
physics on one thread): both physics then see the same wall clock and the same machine load,
which on a shared machine matters more than a second core.

Reported per run: the eval reward against wall seconds, process CPU seconds and env steps, and
the time to the first evaluation (compile); a plot of the curves, ours beside MJX's.

  python benchmarks/playground_ppo.py --envs CartpoleBalance,Go1JoystickFlatTerrain \
      --budget 600,600
  python benchmarks/playground_ppo.py --side-by-side --budget 900
"""

import argparse
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
  RESULTS,
  SHARED_MODELS,
  Stopwatch,
  machine_info,
  pyplot,
  save_figure,
  write_result,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import common  # noqa: E402  # pyright: ignore[reportMissingImports]  (progress, --quiet)

# Playground's locomotion envs read Menagerie's robots: the shared models stand in for a checkout.
if SHARED_MODELS.is_dir():
  os.environ.setdefault("MJBATCH_JAX_MENAGERIE", str(SHARED_MODELS))

PHYSICS = ("mjbatch_jax", "mjx")


class _BudgetSpent(Exception):
  pass


# What --cpu-scale changes in Playground's config.
CPU_SCALE = {"num_envs": 256, "batch_size": 256, "num_minibatches": 8,
             "num_updates_per_batch": 4, "num_resets_per_eval": 0}


def train_one(name: str, physics: str, budget: float, iterations_per_eval: int,
              seed: int, cpu_scale: bool, cpu: int | None = None, quiet: bool = False
              ) -> dict[str, Any]:
  """One PPO run; the curve up to the first evaluation after budget seconds. With cpu, the
  process runs on that CPU alone (before JAX starts) and our physics on one thread. Its
  progress goes to stderr (stdout is the parent's): a bar of the budget's seconds on a
  terminal, plain lines side by side (cpu given) or on a file; quiet: none."""
  import importlib

  if cpu is not None:
    os.sched_setaffinity(0, {cpu})

  import jax

  from mjbatch_jax import envs
  from mjbatch_jax.envs import playground

  # By name: Brax and Playground are the optional playground extra.
  ppo_networks = importlib.import_module("brax.training.agents.ppo.networks")
  ppo = importlib.import_module("brax.training.agents.ppo.train")
  registry = importlib.import_module("mujoco_playground").registry
  wrapper = importlib.import_module("mujoco_playground._src.wrapper")
  dm_control_suite_params = importlib.import_module(
    "mujoco_playground.config.dm_control_suite_params")
  locomotion_params = importlib.import_module("mujoco_playground.config.locomotion_params")

  envs.install_brax_compat()
  clock = Stopwatch()
  if physics == "mjbatch_jax":
    load = functools.partial(playground.load, num_threads=0 if cpu is None else 1)
  else:
    load = playground.load_mjx
  env = load(name)
  eval_env = load(name)
  if name in registry.dm_control_suite.ALL_ENVS:
    config = dm_control_suite_params.brax_ppo_config(name)
  else:
    config = locomotion_params.brax_ppo_config(name)
  params = config.to_dict()
  network = params.pop("network_factory", None)
  network_factory = (functools.partial(ppo_networks.make_ppo_networks, **network) if network
                     else ppo_networks.make_ppo_networks)
  num_eval_envs = params.pop("num_eval_envs", 128)
  playground_config = dict(params)
  if cpu_scale:
    params.update(CPU_SCALE)
  # Evaluations every iterations_per_eval PPO iterations (times the resets per evaluation, which
  # Brax runs between two evaluations), and so many of them that the budget ends the run.
  steps_per_iteration = (params["batch_size"] * params["num_minibatches"]
                         * params["unroll_length"] * params["action_repeat"])
  resets = max(params.get("num_resets_per_eval", 0), 1)
  num_evals = 10_000
  params["num_evals"] = num_evals
  params["num_timesteps"] = (num_evals - 1) * steps_per_iteration * resets * iterations_per_eval
  curve: list[dict[str, float]] = []
  # The run ends at the first evaluation after the budget: its seconds are the bar's count.
  bar = common.Progress(round(budget), f"{name} on {physics}", quiet=quiet, unit="s",
                        plain=cpu is not None)

  def progress(step: int, metrics: dict[str, Any]) -> None:
    wall, cpu = clock.lap()
    reward = float(metrics["eval/episode_reward"])
    curve.append({"wall_s": wall, "cpu_s": cpu, "env_steps": int(step), "eval_reward": reward})
    # stderr: the parent passes it through as it comes
    bar.write(f"{name} {physics}: {wall:7.1f} s  {int(step):>11,} steps  reward {reward:8.2f}",
              file=sys.stderr)
    bar.to(min(round(wall), bar.total), postfix=f"reward {reward:.2f}")
    if wall > budget:
      raise _BudgetSpent

  try:
    with bar:
      ppo.train(environment=env, eval_env=eval_env, **params, network_factory=network_factory,
                num_eval_envs=num_eval_envs, seed=seed,
                wrap_env_fn=wrapper.wrap_for_brax_training, progress_fn=progress)
  except _BudgetSpent:
    pass
  return {
    "env": name, "physics": physics, "budget_s": budget, "seed": seed,
    "iterations_per_eval": iterations_per_eval, "env_steps_per_iteration": steps_per_iteration,
    "ppo_config": {k: v for k, v in params.items() if isinstance(v, (int, float, str, bool))},
    "playground_config": {k: v for k, v in playground_config.items()
                          if isinstance(v, (int, float, str, bool))},
    "cpu_scale": CPU_SCALE if cpu_scale else None,
    "network": network, "num_eval_envs": num_eval_envs, "jax": jax.__version__,
    "cpu": cpu, "first_eval_s": curve[0]["wall_s"] if curve else None, "curve": curve,
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--envs", default="CartpoleBalance,Go1JoystickFlatTerrain")
  parser.add_argument("--budget", default="600,600",
                      help="wall-clock seconds per run, one for all envs or one per env")
  parser.add_argument("--physics", default=",".join(PHYSICS))
  parser.add_argument("--iterations-per-eval", type=int, default=2)
  parser.add_argument("--playground-sizes", action="store_true",
                      help="Playground's own (GPU) sizes instead of --cpu-scale's")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--side-by-side", action="store_true",
                      help="an env's runs at once, each process on a CPU of its own")
  parser.add_argument("--one", action="store_true", help="internal: a single run, JSON to stdout")
  parser.add_argument("--cpu", type=int, default=None, help="internal: with --one, the CPU")
  parser.add_argument("--out", type=Path, default=RESULTS)
  common.add_progress_args(parser)
  args = parser.parse_args()
  names = [n for n in args.envs.split(",") if n]
  budgets = [float(b) for b in args.budget.split(",")]
  if len(budgets) == 1:
    budgets *= len(names)
  if len(budgets) != len(names):
    parser.error(f"--budget needs one value or one per env ({len(names)}), got {args.budget}")
  physics = [p for p in args.physics.split(",") if p]
  for p in physics:
    if p not in PHYSICS:
      parser.error(f"--physics takes {PHYSICS}, got {p!r}")
  if args.one:
    run = train_one(names[0], physics[0], budgets[0], args.iterations_per_eval, args.seed,
                    not args.playground_sizes, args.cpu, args.quiet)
    print("RESULT " + json.dumps(run))
    return
  cpus = sorted(os.sched_getaffinity(0))
  if args.side_by_side and len(cpus) < len(physics):
    parser.error(f"--side-by-side needs a CPU per physics ({len(physics)}), this process has "
                 f"{len(cpus)}")
  runs = []
  # The runs' own bars share the terminal: the parent's count of them is in plain lines.
  done = common.Progress(len(names) * len(physics), "runs", quiet=args.quiet, unit="run",
                         plain=True)
  for name, budget in zip(names, budgets, strict=True):
    # Each run in a fresh process: no compile cache, no memory carried over. Side by side, the
    # physics' runs share the machine's wall clock and load, each on a CPU of its own.
    finished, running = [], []
    for i, p in enumerate(physics):
      command = [sys.executable, __file__, "--one", "--envs", name, "--physics", p,
                 "--budget", str(budget), "--iterations-per-eval", str(args.iterations_per_eval),
                 "--seed", str(args.seed)] + (["--playground-sizes"] if args.playground_sizes
                                              else [])
      command += ["--cpu", str(cpus[i])] if args.side_by_side else []
      command += ["--quiet"] if args.quiet else []
      child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)  # stderr: as it comes
      if args.side_by_side:
        running.append((p, child))
      else:
        finished.append((p, child.communicate()[0], child.returncode))
    finished += [(p, child.communicate()[0], child.returncode) for p, child in running]
    for p, stdout, code in finished:
      lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
      if code != 0 or not lines:
        raise SystemExit(f"{name} on {p} failed")
      runs.append(json.loads(lines[-1][len("RESULT "):]))
      last = runs[-1]["curve"][-1]
      print(f"{name} on {p}: {last['env_steps']:,} env steps in {last['wall_s']:.0f} s, "
            f"eval reward {last['eval_reward']:.1f}", flush=True)
      done.update()
  done.close()
  result = {"machine": machine_info(sys.argv), "runs": runs}
  path = write_result(args.out, "playground_ppo", result)
  plot(runs, path.with_suffix(".png"))


def plot(runs: list[dict[str, Any]], path: Path) -> None:
  plt = pyplot()
  if plt is None:
    return
  names = list(dict.fromkeys(run["env"] for run in runs))
  fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4), squeeze=False)
  for ax, name in zip(axes[0], names, strict=True):
    for run in (r for r in runs if r["env"] == name):
      curve = run["curve"]
      label = "mjbatch_jax" if run["physics"] == "mjbatch_jax" else "MJX (impl jax)"
      ax.plot([c["wall_s"] for c in curve], [c["eval_reward"] for c in curve], "o-", label=label)
    ax.set_title(f"{name}: Brax PPO, Playground config")
    ax.set_xlabel("wall-clock seconds (compile included)")
    ax.set_ylabel("eval episode reward")
    ax.legend()
  save_figure(fig, path)


if __name__ == "__main__":
  main()
