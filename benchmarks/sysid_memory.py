"""Resident memory over a loop of `sysid.fit`s, each with a fresh residual function.

  python benchmarks/sysid_memory.py [--fits 60] [--out benchmarks/results/sysid_memory-<date>.json]

A loop of fits that makes its residual anew each time (a lambda per fit, as a script that tries
several residuals or noise units does) compiles a program per fit, since the residual is traced
into it. The Parameters keep a bounded number of them (sysid.programs.PROGRAMS_LIMIT), so memory
should level off once that many are held. On a one-hinge pendulum (one log-damping number, 4
windows of 25 controls), each fit of 2 iterations; after each fit: RSS (VmRSS of
/proc/self/status, else the peak from getrusage), and how many compiled programs the Parameters
hold. Reports the growth from the end of warm-up (by default the fit after the cache first
fills) to the last fit, against a budget of 60 MB. Writes the JSON, and a .png plot beside it when
matplotlib is installed.
"""

import argparse
import datetime
import gc
import json
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, machine_info, pyplot  # noqa: E402

GROWTH_BUDGET_MB = 60.0

PENDULUM_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body name="link">
      <joint name="hinge" axis="0 1 0" damping="0.2"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge"/></actuator>
</mujoco>
"""


def rss_mb() -> float:
  """The resident set now (VmRSS), or the peak where /proc is absent."""
  try:
    for line in Path("/proc/self/status").read_text().splitlines():
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024
  except OSError:
    pass
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def run(fits: int, threads: int, quiet: bool = False) -> dict[str, Any]:
  """fits fits with fresh residuals; RSS and cached programs after each; progress on stderr
  (examples/common.progress) unless quiet."""
  import jax

  jax.config.update("jax_enable_x64", True)
  import mujoco
  import numpy as np

  import mjbatch_jax
  from mjbatch_jax import sysid
  from mjbatch_jax.sysid import programs

  sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
  import common  # pyright: ignore[reportMissingImports]

  sim = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(PENDULUM_XML), num_threads=threads)
  parameters = sysid.Parameters(sim, [sysid.Field("dof_damping", ["hinge"], log=True)])
  samples, length = 100, 25
  t = np.arange(samples) * sim.model.opt.timestep
  ctrls = np.sin(2 * np.pi * 1.5 * t)[:, None]
  start = np.asarray(sim.init_state(1))
  states, _ = mjbatch_jax.rollout(jax.numpy.asarray(start), jax.numpy.asarray(ctrls)[None],
                                  parameters.params(parameters.initial, 1))
  states = np.asarray(states[0])
  before = np.concatenate([start, states[:-1]])
  qpos = sim.layout.qpos
  data = sysid.windows(before, ctrls, states[:, qpos], length)
  theta0 = parameters.initial + 0.3
  rows = []
  bar = common.Progress(fits, "fits", quiet=quiet, unit="fit")  # before the first RSS sample
  begin = time.perf_counter()
  with bar:
    for i in range(fits):
      noise = 1e-4 * (1 + i % 3)  # a different residual object each fit, as a loop makes them
      problem = sysid.Problem(parameters, lambda s, y, q, noise=noise: (s[:, qpos] - q) / noise)
      result = sysid.fit(problem, data, theta0, iterations=2, tolerance=0.0)
      del problem
      gc.collect()
      rows.append({"fit": i + 1, "rss_mb": rss_mb(), "programs": len(parameters._programs),
                   "cost": float(result.costs[-1])})
      bar.update(postfix=f"{rows[-1]['rss_mb']:.0f} MB, {rows[-1]['programs']} programs")
  sim.close()
  return {"rows": rows, "seconds": time.perf_counter() - begin,
          "limit": programs.PROGRAMS_LIMIT}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--fits", type=int, default=60)
  parser.add_argument("--warmup", type=int, default=None,
                      help="fits before the growth is measured (default: the cache's bound + 2)")
  parser.add_argument("--threads", type=int, default=1)
  parser.add_argument("--out", type=Path, default=None,
                      help="JSON path (default benchmarks/results/sysid_memory-<date>.json)")
  parser.add_argument("--no-plot", action="store_true")
  parser.add_argument("--quiet", action="store_true", help="no progress bar or progress lines")
  args = parser.parse_args(argv)
  if args.fits < 2 or args.threads < 1 or (args.warmup is not None and args.warmup < 1):
    parser.error("--fits >= 2, --threads >= 1, --warmup >= 1")
  return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parse_args(argv)
  measured = run(args.fits, args.threads, args.quiet)
  rows = measured["rows"]
  warmup = min(args.warmup or measured["limit"] + 2, len(rows) - 1)
  settled, last = rows[warmup - 1], rows[-1]
  growth = last["rss_mb"] - settled["rss_mb"]
  most = max(r["programs"] for r in rows)
  print(f"{args.fits} fits, each with a fresh residual: RSS {rows[0]['rss_mb']:.0f} MB after the "
        f"first, {settled['rss_mb']:.0f} MB after fit {warmup} (warm-up), {last['rss_mb']:.0f} "
        f"MB after the last: {growth:+.1f} MB since warm-up (budget {GROWTH_BUDGET_MB:.0f} MB); "
        f"at most {most} programs held (limit {measured['limit']})")
  result = {
    "date": datetime.datetime.now().isoformat(timespec="seconds"),
    "machine": machine_info([sys.argv[0], *argv]),
    "settings": {"fits": args.fits, "warmup": warmup, "threads": args.threads,
                 "iterations_per_fit": 2, "programs_limit": measured["limit"]},
    "seconds": measured["seconds"],
    "growth_after_warmup_mb": growth,
    "growth_budget_mb": GROWTH_BUDGET_MB,
    "most_programs": most,
    "rows": rows,
  }
  out = args.out
  if out is None:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"sysid_memory-{stamp}.json"
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(result, indent=2))
  print(f"wrote {out}")
  if not args.no_plot and (plt := pyplot()) is not None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    fits = [r["fit"] for r in rows]
    ax.plot(fits, [r["rss_mb"] for r in rows], marker=".", label="RSS (MB)")
    ax.axvline(warmup, color="gray", linestyle=":", label="end of warm-up")
    ax.set_xlabel("fits, each with a fresh residual")
    ax.set_ylabel("RSS (MB)")
    ax.grid(True, alpha=0.3)
    programs = ax.twinx()
    programs.step(fits, [r["programs"] for r in rows], where="post", color="tab:orange",
                  label="programs held")
    programs.set_ylabel("compiled programs held")
    programs.set_ylim(0, max(most, measured["limit"]) + 1)
    ax.set_title(f"sysid.fit in a loop: {growth:+.1f} MB after warm-up")
    handles = ax.get_legend_handles_labels()[0] + programs.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="lower right")
    fig.tight_layout()
    png = out.with_suffix(".png")
    fig.savefig(png, dpi=100)
    plt.close(fig)
    print(f"wrote {png}")
  return result


if __name__ == "__main__":
  main()
