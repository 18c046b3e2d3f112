"""Which PPO sizes make the Go1 joystick (feet-only model) walk soonest: the --preset search.

Each configuration trains examples/go1_joystick.py's task with Brax's PPO (mjbatch_jax.agents.ppo)
until its check passes (forward-velocity error below 0.1 m/s at 0.5 m/s, no fall, 16 envs,
10 s), and reports the iterations, env steps, training CPU and wall seconds to that check
(checks not counted) and the load average. On a shared machine compare the CPU seconds and the
env steps; the wall clock of the chosen size is benchmarks/rl.py --time-to-walk's go1_minute row.

  python benchmarks/ppo_sizes.py                       # the sizes docs/rl.md's table lists
  python benchmarks/ppo_sizes.py --sizes 256x16x8x16 --seeds 0,1,2 --desired-kl 0.02

A size is ENVSxUNROLLxMINIBATCHESxEPOCHS.
"""

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "examples"))  # go1_joystick

from _common import RESULTS, SHARED_MODELS, machine_info, write_result  # noqa: E402

from mjbatch_jax.agents import ppo  # noqa: E402

# From the example's full size down to the preset's: fewer envs and more SGD passes per sample.
SIZES = ("1024x24x4x5", "512x24x4x5", "512x24x8x10", "256x16x8x10", "256x16x8x16",
         "256x16x8x24", "128x16x4x10")


def parse_size(text: str) -> tuple[int, int, int, int]:
  try:
    envs, unroll, minibatches, epochs = (int(part) for part in text.split("x"))
  except ValueError:
    raise argparse.ArgumentTypeError(f"{text!r}: expected ENVSxUNROLLxMINIBATCHESxEPOCHS, e.g. "
                                     "256x16x8x16") from None
  if min(envs, unroll, minibatches, epochs) < 1 or envs % minibatches:
    raise argparse.ArgumentTypeError(f"{text!r}: sizes must be >= 1 and ENVS a multiple of "
                                     "MINIBATCHES")
  return envs, unroll, minibatches, epochs


def run(size: tuple[int, int, int, int], seed: int, args: argparse.Namespace,
        bar: Any = None) -> dict[str, Any]:
  """One training of the size to the first passing check; bar: the common.Progress of the runs
  (its log lines go through it)."""
  import go1_joystick as go1  # pyright: ignore[reportMissingImports]  (examples/, on the path)

  envs, unroll, minibatches, epochs = size
  scene = SHARED_MODELS / "unitree_go1" / "scene.xml"
  env = go1.Joystick(scene, {"collisions": "feet"}, num_threads=args.threads)
  evaluation = go1.Evaluation(scene, args.threads, collisions="feet")
  kwargs = go1.training(env, envs, unroll, args.max_iterations, 500, minibatches,
                        num_updates_per_batch=epochs, desired_kl=args.desired_kl)
  load: list[float] = []

  def log(p: ppo.Progress) -> None:
    load.append(os.getloadavg()[0])
    line = (f"  {'x'.join(map(str, size))} seed {seed} iter {p.iteration:4d}: error "
            f"{p.metrics['eval/forward_error']:.3f}, train {p.wall_s:5.1f} s (CPU "
            f"{p.cpu_s:5.1f} s)")
    if bar is None:
      print(line, flush=True)
    else:
      bar.write(line)
      bar.update(0, postfix=f"{'x'.join(map(str, size))} seed {seed} iter {p.iteration}")

  curve = ppo.train(env, **kwargs, iterations_per_eval=args.eval_every, evaluate=evaluation,
                    log=log, stop=lambda p: go1.walks(p.metrics), seed=seed).curve
  env.close()
  evaluation.task.close()
  first = next((p for p in curve if go1.walks(p.metrics)), None)
  return {"size": "x".join(map(str, size)), "seed": seed, "walked": first is not None,
          "iterations": None if first is None else first.iteration,
          "env_steps": None if first is None else first.env_steps,
          "cpu_s": None if first is None else first.cpu_s,
          "wall_s": None if first is None else first.wall_s,
          "load_average": [min(load, default=0.0), max(load, default=0.0)]}


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--sizes", default=",".join(SIZES),
                      help="comma-separated ENVSxUNROLLxMINIBATCHESxEPOCHS")
  parser.add_argument("--seeds", default="0", help="comma-separated seeds, each size each seed")
  parser.add_argument("--desired-kl", type=float, default=0.02,
                      help="the adaptive learning rate's KL target (the example's: 0.01)")
  parser.add_argument("--max-iterations", type=int, default=400)
  parser.add_argument("--eval-every", type=int, default=5)
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON")
  parser.add_argument("--quiet", action="store_true",
                      help="no progress bar or progress lines, no per-check lines")
  args = parser.parse_args(argv)
  try:
    sizes = [parse_size(text) for text in args.sizes.split(",")]
    seeds = [int(seed) for seed in args.seeds.split(",")]
  except (argparse.ArgumentTypeError, ValueError) as e:
    parser.error(f"--sizes/--seeds: {e}")
  if args.max_iterations < 1 or args.eval_every < 1 or args.max_iterations % args.eval_every:
    parser.error("--max-iterations and --eval-every must be >= 1, the first a multiple of the "
                 "second")
  if not args.desired_kl > 0:
    parser.error(f"--desired-kl must be > 0, got {args.desired_kl}")
  import common  # pyright: ignore[reportMissingImports]  (examples/, on the path)

  # Each run stops at its first passing check: the count is of runs, the check in the note.
  rows = []
  with common.Progress(len(sizes) * len(seeds), "runs", quiet=args.quiet, unit="run") as bar:
    for size in sizes:
      for seed in seeds:
        rows.append(run(size, seed, args, bar))
        bar.update()
  for row in rows:
    print(f"{row['size']:>14s} seed {row['seed']}: " + (
      "did not walk" if not row["walked"] else
      f"{row['iterations']} iterations, {row['env_steps']:,} env steps, {row['cpu_s']:.1f} CPU s, "
      f"{row['wall_s']:.1f} s"))
  write_result(args.out, "ppo-sizes", {"machine": machine_info(sys.argv),
                                       "desired_kl": args.desired_kl, "rows": rows})


if __name__ == "__main__":
  main(sys.argv[1:])
