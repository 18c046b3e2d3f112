"""Which of the fit's choices matter, and its time against mujoco.sysid, on examples/sysid.py's arm.

The seed recording, held-out recording and guess of examples/sysid.py (seed 0), fitted by
`mjbatch_jax.sysid` four ways: window starts fitted or fixed at their records, with the
example's prior at the guess or with mujoco.sysid's bounds (4 prior widths about the guess)
instead; then by `mujoco.sysid` on the same windows (its starts are the records, its box the
same bounds). Each row: held-out prediction error, mean |mass error|, iterations, final cost,
and CPU seconds (all threads) per iteration and in all, measured in this one process.

  python benchmarks/sysid.py [--samples 1000] [--iterations 30] [--threads 2] [--skip-mujoco-sysid]
"""

import argparse
import dataclasses
import importlib
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
sys.path.insert(0, str(HERE))
sys.path.append(str(EXAMPLES))  # for the example's own `import common`

import common  # noqa: E402  # pyright: ignore[reportMissingImports]  (progress, --quiet)
import numpy as np  # noqa: E402
from _common import RESULTS, machine_info, run_timed, write_result  # noqa: E402

from mjbatch_jax import sysid  # noqa: E402

# examples/sysid.py, by its path (this file has its name).
_spec = importlib.util.spec_from_file_location("sysid_example", EXAMPLES / "sysid.py")
assert _spec is not None and _spec.loader is not None
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--samples", type=int, default=1000, help="commands per recording")
  parser.add_argument("--window", type=int, default=50)
  parser.add_argument("--iterations", type=int, default=30)
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--skip-mujoco-sysid", action="store_true")
  parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON")
  common.add_progress_args(parser)
  args = parser.parse_args(argv)
  if args.samples < 100 or args.samples % args.window or min(args.iterations, args.window) < 1:
    parser.error("--samples >= 100 must be a multiple of --window; sizes >= 1")
  arm = example.Arm(args.threads)
  rng = np.random.default_rng(0)  # the example's draws, in its order
  commands = {(k, part): example.multisine(rng, args.samples, k) for k in ("seed", "rich")
              for part in ("fit", "test")}
  q, v = arm.record(np.stack(list(commands.values())), rng)
  recorded = {key: (q[i], v[i]) for i, key in enumerate(commands)}
  theta0 = arm.theta_true + rng.normal(0, 1, arm.theta_true.shape) * example.GUESS
  data = arm.windows(commands["seed", "fit"], *recorded["seed", "fit"], args.window)
  width = np.tile(example.WIDTH, example.LINKS)
  box = {"prior_width": None, "scale": width,
         "bounds": (theta0.ravel() - 4 * width, theta0.ravel() + 4 * width)}
  base = arm.problem
  variants = {
    "starts fitted, prior (the example)": base,
    "starts fixed, prior": dataclasses.replace(base, start_width=None),
    "starts fitted, bounds": dataclasses.replace(base, **box),
    "starts fixed, bounds": dataclasses.replace(base, start_width=None, **box),
  }
  rows = []

  def row(name: str, theta, iterations: int, cost: float, cpu: float, cpu_each: float) -> None:
    rows.append({
      "variant": name, "iterations": iterations, "cost": cost, "cpu_s": cpu,
      "cpu_s_per_iteration": cpu_each,
      "heldout_rad": arm.prediction(theta, commands["seed", "test"], recorded["seed", "test"][0]),
      "mass_error_percent": float(np.abs(example.errors(arm, theta)["mass"]).mean()),
    })
    r = rows[-1]
    bar.write(f"{name:36s} held-out {r['heldout_rad']:.3e} rad, mass "
              f"{r['mass_error_percent']:5.1f}%, {iterations:2d} iterations, cost {cost:9.1f}, "
              f"CPU {cpu:6.1f} s ({cpu_each:.2f} s an iteration)", keep=True)
    bar.update(postfix=name)

  toolbox = importlib.import_module("mujoco.sysid")
  toolbox_runs = not args.skip_mujoco_sysid and hasattr(toolbox, "ParameterDict")
  # A count per fit, between the timed fits (sysid.fit takes no per-iteration callback).
  bar = common.progress(len(variants) + toolbox_runs, "fits", args, unit="fit")
  for name, problem in variants.items():
    fit = sysid.fit(problem, data, theta0.ravel(), args.iterations)
    later = fit.cpu[1:] if fit.iterations > 1 else fit.cpu  # the first compiles
    row(name, fit.theta, fit.iterations, float(fit.costs[-1]), float(fit.cpu.sum()),
        float(np.median(later)))
  if toolbox_runs:
    timing, (theta, done) = run_timed(example.fit_mujoco_sysid, arm, commands["seed", "fit"],
                                      *recorded["seed", "fit"], theta0, args.window,
                                      args.iterations)
    cpu = timing.cpu_s
    # Its cost in the same terms: the chi-square / 2 with the starts at their records.
    cost = sysid.fit(variants["starts fixed, bounds"], data, theta.ravel(), 1).costs[0]
    row("mujoco.sysid (starts fixed, bounds)", theta, done, float(cost), cpu, cpu / done)
  bar.close()
  arm.sim.close()
  write_result(args.out, "sysid", {"machine": machine_info(argv), "samples": args.samples,
                                   "window": args.window, "threads": args.threads, "rows": rows})


if __name__ == "__main__":
  main(sys.argv[1:])
