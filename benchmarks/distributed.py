"""Weak scaling over processes: the same rows per process, 1 thread each, 1 then 2 processes.

  python benchmarks/distributed.py [MODEL] [--rows 256] [--steps 20] [--processes 1,2]
                                   [--repeats 7] [--rounds 2] [--allreduce-floats 100000]

Each configuration is one `python -m mjbatch_jax.launch -n P` job of this script in worker
mode: `mjbatch_jax.distributed.setup(model, P * rows, num_threads=1)`, then one jitted
shard_map per timed call that steps every row `--steps` times in a lax.scan and ends with a
gloo all-reduce of `--allreduce-floats` float64 values (a policy gradient's worth, as one
training iteration of data-parallel policy gradient would). Before each call the processes meet
at a barrier; a call's time is the slowest process's, and the median over `--rounds` jobs of each
configuration (run in turn: 1 2 1 2 ...) x `--repeats` calls is reported. The all-reduce alone
is timed the same way.

Weak-scaling efficiency = t(1 process) / t(P processes): 1.0 when P processes do P times the
work in the same time. On a shared machine with fewer free cores than processes it falls; the
result is what was measured, noise and all. Writes
benchmarks/results/distributed-<model>-<date>.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
  PROJECT,
  RESULTS,
  Stopwatch,
  int_list,
  machine_info,
  model_label,
  resolve_model,
  timed,
  write_result,
)


def worker(args: argparse.Namespace) -> None:
  """One process of a job: time the calls, and let process 0 write what all measured."""
  import jax

  jax.config.update("jax_enable_x64", True)
  import mujoco
  import numpy as np
  from jax.experimental import multihost_utils
  from jax.sharding import PartitionSpec as P

  import mjbatch_jax
  from mjbatch_jax import distributed

  _, model = resolve_model(args.model)
  key = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "home")
  keyframe = key if key >= 0 else (0 if model.nkey else None)
  clock = Stopwatch()
  distributed.initialize()
  count = jax.process_count()
  dist = distributed.setup(model, args.rows * count, num_threads=1, keyframe=keyframe)
  setup_s = clock.wall_s
  axis, steps = dist.axis, args.steps
  ctrl = dist.from_rows(lambda rows: np.broadcast_to(
    model.key_ctrl[keyframe] if keyframe is not None else np.zeros(model.nu),
    (len(rows), model.nu)).copy())

  def iteration(state, ctrl, params, gradient):
    state = jax.lax.fori_loop(0, steps, lambda _, s: mjbatch_jax.step(s, ctrl, params), state)
    return state, jax.lax.psum(gradient, axis)

  def allreduce(gradient):
    return jax.lax.psum(gradient, axis)

  gradient = dist.shard(np.ones((dist.num_local, args.allreduce_floats // dist.num_local + 1)))
  physics = dist.map(iteration, out_specs=(P(axis), P()))
  reduce_only = dist.map(allreduce, out_specs=P())

  def slowest(name: str, call) -> list[float]:
    times = []
    for r in range(args.warmup + args.repeats):
      multihost_utils.sync_global_devices(f"{name} {r}")
      wall_s = timed(call).wall_s
      if r >= args.warmup:
        times.append(wall_s)
    # A call ends for all at its collective; the slowest process's clock is the call's time.
    every = np.asarray(multihost_utils.process_allgather(np.asarray(times)))
    return every.reshape(count, -1).max(axis=0).tolist()

  compile_s = timed(physics, dist.state, ctrl, dist.params, gradient).wall_s
  run = slowest("iteration", lambda: physics(dist.state, ctrl, dist.params, gradient))
  reduce = slowest("all-reduce", lambda: reduce_only(gradient))
  if dist.process_index == 0:
    Path(args.worker).write_text(json.dumps({
      "processes": count,
      "rows_per_process": dist.num_local,
      "allreduce_bytes": int(dist.num_local * gradient.shape[1] * 8),  # one device per process
      "iteration_s": run,
      "allreduce_s": reduce,
      "setup_s": setup_s,
      "first_call_s": compile_s,
      "step_rows_per_s": dist.num_sims * steps / statistics.median(run),
    }))


def main(argv: list[str] | None = None) -> dict[str, Any]:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("model", nargs="?", default="unitree_go1",
                      help="XML path, folder under ../shared/models, or Menagerie name")
  parser.add_argument("--rows", type=int, default=256, help="simulations per process")
  parser.add_argument("--steps", type=int, default=20, help="steps of each row per call")
  parser.add_argument("--processes", type=int_list, default=[1, 2])
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--warmup", type=int, default=2)
  parser.add_argument("--rounds", type=int, default=2, help="runs of every configuration, in turn")
  parser.add_argument("--allreduce-floats", type=int, default=100_000,
                      help="float64 values all-reduced per call (a policy gradient)")
  parser.add_argument("--timeout", type=float, default=600, help="seconds per launcher job")
  parser.add_argument("--out", type=Path, default=RESULTS)
  parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--quiet", action="store_true", help="no progress bar or progress lines")
  args = parser.parse_args(argv)
  if args.worker:
    worker(args)
    return {}
  # Here, not at the top: the workers (this script with --worker) never load it.
  sys.path.insert(0, str(PROJECT / "examples"))
  import common  # pyright: ignore[reportMissingImports]

  path, _ = resolve_model(args.model)
  label = model_label(args.model, path)
  # Rounds alternate the configurations (1 2 1 2 ...), so that a shared machine's changing load
  # falls on all of them alike.
  jobs: dict[int, dict[str, Any]] = {}
  with (tempfile.TemporaryDirectory() as tmp,
        common.Progress(args.rounds * len(args.processes), "launcher jobs", quiet=args.quiet,
                        unit="job") as bar):
    for round_ in range(args.rounds):
      for count in args.processes:
        out = Path(tmp) / f"job{count}-{round_}.json"
        command = [sys.executable, "-m", "mjbatch_jax.launch", "-n", str(count), "--timeout",
                   str(args.timeout), str(Path(__file__).resolve()), str(path or args.model),
                   "--rows", str(args.rows), "--steps", str(args.steps), "--repeats",
                   str(args.repeats), "--warmup", str(args.warmup), "--allreduce-floats",
                   str(args.allreduce_floats), "--worker", str(out)]
        clock = Stopwatch()
        done = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(PROJECT)})
        if done.returncode != 0 or not out.exists():
          raise SystemExit(f"{count} process(es) failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
        run = json.loads(out.read_text())
        job = jobs.setdefault(count, {**run, "iteration_s": [], "allreduce_s": [], "wall_s": [],
                                      "setup_s": [], "first_call_s": []})
        for key in ("iteration_s", "allreduce_s"):
          job[key].extend(run[key])
        for key in ("setup_s", "first_call_s"):
          job[key].append(run[key])
        job["wall_s"].append(clock.wall_s)
        bar.write(f"round {round_ + 1}: {count} process(es) x {args.rows} rows x {args.steps} "
                  f"steps: {statistics.median(run['iteration_s']) * 1e3:.1f} ms per iteration "
                  f"(median), all-reduce of {run['allreduce_bytes'] / 1e6:.2f} MB alone "
                  f"{statistics.median(run['allreduce_s']) * 1e3:.2f} ms", keep=True)
        bar.update(postfix=f"round {round_ + 1}, {count} process(es)")
  ordered = [jobs[count] for count in args.processes]
  for job in ordered:
    job.pop("step_rows_per_s", None)
    job["median_iteration_s"] = statistics.median(job["iteration_s"])
    job["median_allreduce_s"] = statistics.median(job["allreduce_s"])
    job["step_rows_per_s"] = job["processes"] * args.rows * args.steps / job["median_iteration_s"]
  base = ordered[0]
  for job in ordered:
    job["efficiency"] = base["median_iteration_s"] / job["median_iteration_s"]
  for job in ordered[1:]:
    print(f"weak-scaling efficiency {base['processes']} -> {job['processes']} processes: "
          f"t{base['processes']}/t{job['processes']} = {job['efficiency']:.3f} (medians over "
          f"{args.rounds} rounds x {args.repeats} calls)")
  result = {
    "model": label,
    "model_path": str(path) if path else None,
    "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
    "machine": machine_info([sys.argv[0], *(sys.argv[1:] if argv is None else argv)]),
    "settings": {"rows_per_process": args.rows, "steps": args.steps, "threads": 1,
                 "repeats": args.repeats, "warmup": args.warmup, "rounds": args.rounds,
                 "allreduce_floats": args.allreduce_floats, "processes": args.processes},
    "meaning": "weak scaling: the same rows per process; efficiency = t(first) / t(P), the "
               "median time of one iteration (steps of every row, then a gloo all-reduce), "
               "the slowest process's clock per call",
    "jobs": ordered,
  }
  write_result(args.out, f"distributed-{label}", result)
  return result


if __name__ == "__main__":
  main()
