"""Leak soak: memory, open files and threads over many calls, lifetimes and errors.

  python benchmarks/soak.py [--calls 1000000] [--cycles 10000] [--errors 10000] [--models 1000]

Runs these phases one after the other in this one process, on small models from inline XML:
  step_loop:          --calls calls of a jitted mjbatch_jax.step from a Python loop (a cart-pole,
                      --num-sims simulations);
  step_scan:          the same number of steps as a jitted lax.scan, --scan-length steps a call;
  simulator_cycles:   --cycles times Simulator, init_state, params, one jitted step, close();
  batch_cycles:       --cycles times Batch(model, num_sims=N), step(), close();
  distinct_models:    --models times a cart-pole of a mass of its own (a new model, as a co-design
                      search makes), its Simulator, one eager and one jitted step, close(): the
                      programs JAX compiled for each model must not pile up;
  simulation_errors:  --errors calls of step that MuJoCo fails in one simulation, each raising
                      mjbatch_jax.SimulationError: its params give 12 balls a 1 m contact margin,
                      and the contacts overflow the model's small arena (mj_stackAlloc);
  argument_errors:    --errors calls of step with a wrongly shaped ctrl, each raising ValueError.
At --checkpoints evenly spaced points of each phase (after a garbage collection) it records the
resident set size (VmRSS), the open file descriptors and the threads of the process. The first
checkpoint, after the first 1/--checkpoints of the phase, is the end of its warm-up (JIT
compilation, pools, allocator arenas); a phase's growth is its last checkpoint minus that one, and
is also given per iteration. A phase stops early, and says so, when the RSS passes --max-rss-mb.

Writes benchmarks/results/soak-<date>.json and, when matplotlib is installed, a .png plot beside
it (or under --out).
"""

import argparse
import gc
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import _programs  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, Stopwatch, machine_info, pyplot, save_figure, write_result  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import common  # noqa: E402  # pyright: ignore[reportMissingImports]  (progress, --quiet)

CARTPOLE = """
<mujoco model="cartpole">
  <option timestep="0.01"/>
  <worldbody>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0" limited="true" range="-2 2" damping="1"/>
      <geom type="box" size=".2 .1 .05" mass="1"/>
      <body name="pole">
        <joint name="hinge" type="hinge" axis="0 1 0" damping=".05"/>
        <geom type="capsule" fromto="0 0 0 0 0 .6" size=".03" mass=".1"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slider" ctrlrange="-1 1"/></actuator>
</mujoco>
"""

# Twelve balls a metre apart above a plane, with a small arena.
BALLS = """
<mujoco model="balls">
  <size memory="100K"/>
  <worldbody>
    <geom type="plane" size="5 5 .1"/>
    {bodies}
  </worldbody>
</mujoco>
""".format(bodies="".join(
  f'<body pos="{i % 4} {i // 4} 1"><freejoint/><geom size=".1" mass="1"/></body>'
  for i in range(12)
))
# Metres: each ball then touches its neighbours, and the solver's memory for those contacts
# overflows the arena, a MuJoCo error. (A margin so wide that all pairs touch makes more contacts
# than the arena holds, which MuJoCo drops with a warning instead; zero or negative masses,
# inertias or time steps raise nothing.)
WIDE_MARGIN = 1.0

PHASES = ("step_loop", "step_scan", "simulator_cycles", "batch_cycles", "distinct_models",
          "simulation_errors", "argument_errors")
# How often the Python loop phases wait for their results: JAX dispatches asynchronously, and an
# unbounded queue of pending calls would read as growth.
SYNC_EVERY = 100


def sample() -> dict[str, float]:
  """RSS (MB), open file descriptors and threads of this process, now."""
  status = Path("/proc/self/status").read_text()
  rss = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
  threads = re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE)
  if rss is None or threads is None:
    raise RuntimeError("no VmRSS or Threads in /proc/self/status")
  return {
    "rss_mb": int(rss.group(1)) / 1024,
    "fds": len(os.listdir("/proc/self/fd")),
    "threads": int(threads.group(1)),
  }


def raising(
  call: Callable[[], Any], expected: type[Exception], counts: dict[str, int]
) -> Callable[[int], None]:
  """A phase body that makes count calls, each of which must raise expected; counted by type."""

  def run(count: int) -> None:
    for _ in range(count):
      try:
        call()
      except expected as e:
        counts[type(e).__name__] = counts.get(type(e).__name__, 0) + 1
      else:
        raise RuntimeError(f"the call did not raise {expected.__name__}")

  return run


def run_phase(
  name: str, total: int, run: Callable[[int], None], checkpoints: int, max_rss_mb: float,
  quiet: bool = False
) -> dict[str, Any]:
  """Call run(k) to do the next k of total iterations, sampling at each checkpoint; progress on
  stderr (common.progress: a bar with the time left on a terminal, else lines) unless quiet."""
  marks = sorted({max(1, math.ceil(k * total / checkpoints)) for k in range(1, checkpoints + 1)})
  # Made before the first sample: what the bar holds is there from the start, not growth.
  bar = common.Progress(total, name, quiet=quiet)
  gc.collect()
  start = sample()
  clock = Stopwatch()
  points: list[dict[str, float]] = []
  done, stopped = 0, None
  with bar:
    for mark in marks:
      run(mark - done)
      done = mark
      # Garbage that only the cyclic collector frees is not a leak; collect it before sampling.
      gc.collect()
      points.append({"done": done, "seconds": clock.wall_s, **sample()})
      bar.to(done, postfix=f"{points[-1]['rss_mb']:.0f} MB")
      if points[-1]["rss_mb"] > max_rss_mb:
        stopped = f"RSS {points[-1]['rss_mb']:.0f} MB passed --max-rss-mb {max_rss_mb:.0f}"
        break
  first, last = points[0], points[-1]
  span = last["done"] - first["done"]
  growth = {key: last[key] - first[key] for key in ("rss_mb", "fds", "threads")}
  return {
    "iterations": done,
    "planned_iterations": total,
    "stopped_early": stopped,
    "seconds": last["seconds"],
    "start": start,
    "checkpoints": points,
    "growth_after_warmup": growth,
    "rss_kb_per_iteration_after_warmup": growth["rss_mb"] * 1024 / span if span else None,
    "warmup_iterations": first["done"],
  }


def main(argv: list[str] | None = None) -> dict[str, Any]:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--calls", type=int, default=1_000_000, help="jitted step calls")
  parser.add_argument("--cycles", type=int, default=10_000,
                      help="Simulator and Batch create/step/close cycles, each")
  parser.add_argument("--errors", type=int, default=10_000, help="failing calls, of each kind")
  parser.add_argument("--models", type=int, default=1000,
                      help="distinct models, each made, stepped and closed")
  parser.add_argument("--checkpoints", type=int, default=20, help="samples per phase")
  parser.add_argument("--num-sims", type=int, default=8)
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--scan-length", type=int, default=100, help="steps per scan call")
  parser.add_argument("--max-rss-mb", type=float, default=4096.0,
                      help="stop a phase once the process holds this much")
  parser.add_argument("--phases", default=",".join(PHASES), help=f"of {','.join(PHASES)}")
  parser.add_argument("--out", type=Path, default=RESULTS, help="output folder")
  parser.add_argument("--no-plot", action="store_true")
  common.add_progress_args(parser)
  args = parser.parse_args(argv)
  phases = [p for p in args.phases.split(",") if p]
  unknown = set(phases) - set(PHASES)
  if unknown:
    parser.error(f"unknown phases {sorted(unknown)}; choose from {PHASES}")
  if min(args.calls, args.cycles, args.errors, args.models, args.checkpoints, args.num_sims,
         args.scan_length) < 1 or args.threads < 0:
    parser.error("--calls, --cycles, --errors, --models, --checkpoints, --num-sims and "
                 "--scan-length must be >= 1, --threads >= 0")

  n, threads = args.num_sims, args.threads
  model = mujoco.MjModel.from_xml_string(CARTPOLE)
  ctrl = jnp.asarray(np.random.default_rng(0).uniform(-0.5, 0.5, (n, model.nu)))
  step = jax.jit(mjbatch_jax.step)
  scan_length = args.scan_length

  @jax.jit
  def scan(state: jax.Array, params: Any) -> jax.Array:
    def body(s: jax.Array, _: Any) -> tuple[jax.Array, None]:
      return mjbatch_jax.step(s, ctrl, params), None

    return jax.lax.scan(body, state, None, length=scan_length)[0]

  sim = mjbatch_jax.Simulator(model, num_threads=threads)
  params = sim.params(n, fields=("body_mass",))
  state = sim.init_state(n)

  def step_loop(count: int) -> None:
    nonlocal state
    for i in range(count):
      state = step(state, ctrl, params)
      if i % SYNC_EVERY == SYNC_EVERY - 1:
        state.block_until_ready()
    state.block_until_ready()

  def step_scan(count: int) -> None:
    nonlocal state
    for _ in range(count):
      state = scan(state, params).block_until_ready()

  def simulator_cycles(count: int) -> None:
    for _ in range(count):
      other = mjbatch_jax.Simulator(model, num_threads=threads)
      rows = other.init_state(n)
      jax.block_until_ready(step(rows, ctrl, other.params(n, fields=("body_mass",))))
      other.close()

  made = 0

  def distinct_models(count: int) -> None:
    nonlocal made
    for _ in range(count):
      made += 1
      # A cart of a mass no other model here has: new bytes, a new engine and new programs.
      own = mujoco.MjModel.from_xml_string(CARTPOLE.replace('mass="1"', f'mass="{1 + made / 1e6}"'))
      with mjbatch_jax.Simulator(own, num_threads=threads) as candidate:
        rows, own_params = candidate.init_state(n), candidate.params(n, fields=("body_mass",))
        jax.block_until_ready(mjbatch_jax.step(rows, ctrl, own_params))
        jax.block_until_ready(step(rows, ctrl, own_params))

  def batch_cycles(count: int) -> None:
    for _ in range(count):
      batch = mjbatch_jax.Batch(model, num_sims=n)
      batch.step()
      batch.close()

  balls = mujoco.MjModel.from_xml_string(BALLS)
  balls_sim = mjbatch_jax.Simulator(balls, num_threads=threads)
  balls_state = balls_sim.init_state(n)
  balls_ctrl = jnp.zeros((n, balls.nu))
  # Only the last simulation has the wide margin; the others step as usual in the same call.
  wide = jax.tree_util.tree_map(lambda leaf: leaf.at[-1].set(WIDE_MARGIN),
                                balls_sim.params(n, fields=("geom_margin",)))
  caught: dict[str, dict[str, int]] = {"simulation_errors": {}, "argument_errors": {}}
  bad_ctrl = jnp.zeros((n, model.nu + 1))
  runs: dict[str, tuple[int, Callable[[int], None]]] = {
    "step_loop": (args.calls, step_loop),
    "step_scan": (max(1, args.calls // scan_length), step_scan),
    "simulator_cycles": (args.cycles, simulator_cycles),
    "batch_cycles": (args.cycles, batch_cycles),
    "distinct_models": (args.models, distinct_models),
    "simulation_errors": (args.errors, raising(
      lambda: mjbatch_jax.step(balls_state, balls_ctrl, wide), mjbatch_jax.SimulationError,
      caught["simulation_errors"])),
    "argument_errors": (args.errors, raising(
      lambda: step(state, bad_ctrl, params), ValueError, caught["argument_errors"])),
  }
  meanings = {
    "step_loop": f"jitted step in a Python loop, N={n}",
    "step_scan": f"jitted lax.scan of {scan_length} steps, N={n}",
    "simulator_cycles": "Simulator, init_state, params, one jitted step, close()",
    "batch_cycles": f"Batch(model, num_sims={n}), step(), close()",
    "distinct_models": "a new model per iteration: Simulator, eager and jitted step, close()",
    "simulation_errors": "step raising SimulationError (mj_stackAlloc in one simulation)",
    "argument_errors": "jitted step with a wrongly shaped ctrl, raising ValueError",
  }
  clock = Stopwatch()
  releases_before = _programs.clearings()
  results: dict[str, Any] = {}
  try:
    for name in phases:
      total, run = runs[name]
      results[name] = {"meaning": meanings[name], "starts_at_s": clock.wall_s,
                       **run_phase(name, total, run, args.checkpoints, args.max_rss_mb,
                                   args.quiet)}
      if name in caught:
        results[name]["caught"] = caught[name]
      if name == "distinct_models":
        # How often the programs of closed models were released (mjbatch_jax._programs).
        results[name]["program_releases"] = _programs.clearings() - releases_before
  finally:
    sim.close()
    balls_sim.close()

  result = {
    "settings": {"calls": args.calls, "cycles": args.cycles, "errors": args.errors,
                 "checkpoints": args.checkpoints, "num_sims": n, "threads": threads,
                 "scan_length": scan_length, "max_rss_mb": args.max_rss_mb, "phases": phases},
    "machine": machine_info([sys.argv[0], *(sys.argv[1:] if argv is None else argv)]),
    "phases": results,
  }
  print(format_table(results))
  json_path = write_result(args.out, "soak", result)
  if not args.no_plot and (plt := pyplot()) is not None:
    plot(plt, results, json_path.with_suffix(".png"))
  return result


def format_table(results: dict[str, Any]) -> str:
  lines = [
    "growth after the warm-up (first checkpoint) to the end of each phase",
    f"{'phase':<19}{'iterations':>11}{'seconds':>9}{'RSS MB start/warm/end':>24}"
    f"{'RSS MB':>9}{'KB/iter':>9}{'fds':>6}{'threads':>8}",
  ]
  for name, phase in results.items():
    first, last = phase["checkpoints"][0], phase["checkpoints"][-1]
    growth, per = phase["growth_after_warmup"], phase["rss_kb_per_iteration_after_warmup"]
    rss = f"{phase['start']['rss_mb']:.0f}/{first['rss_mb']:.0f}/{last['rss_mb']:.0f}"
    lines.append(
      f"{name:<19}{phase['iterations']:>11}{phase['seconds']:>9.1f}{rss:>24}"
      f"{growth['rss_mb']:>+9.1f}{'-' if per is None else f'{per:+.3f}':>9}"
      f"{growth['fds']:>+6.0f}{growth['threads']:>+8.0f}"
    )
    if phase["stopped_early"]:
      lines.append(f"  stopped early: {phase['stopped_early']}")
  return "\n".join(lines)


def plot(plt: Any, results: dict[str, Any], path: Path) -> None:
  fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
  for name, phase in results.items():
    xs = [phase["starts_at_s"] + p["seconds"] for p in phase["checkpoints"]]
    for ax, key in zip(axes, ("rss_mb", "fds", "threads"), strict=True):
      ax.plot(xs, [p[key] for p in phase["checkpoints"]], marker=".", label=name)
  for ax, label in zip(axes, ("RSS (MB)", "open fds", "threads"), strict=True):
    ax.set_ylabel(label)
    ax.grid(True, alpha=0.3)
  axes[-1].set_xlabel("seconds since the soak began")
  axes[0].set_title("soak: one process, phases one after the other")
  axes[0].legend(fontsize=8)
  save_figure(fig, path, dpi=100)


if __name__ == "__main__":
  main()
