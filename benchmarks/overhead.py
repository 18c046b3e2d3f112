"""What a custom call adds to the physics: per-call overhead at N=1 on a tiny model.

  python benchmarks/overhead.py [--calls 20000] [--repeats 7]

A one-body hinge model costs a few microseconds per mj_step, so the fixed cost of a call shows.
Times, interleaved within each repeat (medians reported):
  c_loop:        ext.step_loop, `calls` mj_step calls on one MjData in C++;
  step_fori:     mjbatch_jax.step inside a jitted lax.fori_loop of `calls` iterations, N=1;
  mujoco.batch:  `calls` calls of MuJoCo's own batch step (the raw binding), N=1, from Python.
and prints (step_fori - c_loop) / calls, the overhead of one custom call (target < 5 us).
Writes benchmarks/results/overhead-<date>.json.
"""

import argparse
import statistics
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from mujoco import batch as mujoco_batch  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax._extension import ext  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, machine_info, timed, write_result  # noqa: E402

TINY = '<mujoco><worldbody><body><joint/><geom size=".1" mass="1"/></body></worldbody></mujoco>'


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--calls", type=int, default=20000)
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--out", type=Path, default=RESULTS)
  args = parser.parse_args(argv)

  model = mujoco.MjModel.from_xml_string(TINY)
  calls = args.calls
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    state, params, ctrl = sim.init_state(1), sim.params(1), jnp.zeros((1, 0))
    rows = np.ascontiguousarray(np.asarray(state))
    loop = jax.jit(lambda s: jax.lax.fori_loop(0, calls, lambda _, s: mjbatch_jax.step(
      s, ctrl, params), s))
    loop(state).block_until_ready()
    batch = mujoco_batch.Batch(model, 1, 1)

    def batch_calls() -> None:
      for _ in range(calls):
        batch._b.step(None, 1, 0)

    # Wall seconds; the C loop times itself.
    cases = {
      "c_loop": lambda: ext.step_loop(model._address, rows, 1, calls),
      "step_fori": lambda: timed(loop, state).wall_s,
      "mujoco.batch": lambda: timed(batch_calls).wall_s,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):
      for name, run in cases.items():
        times[name].append(run())
  per_call = {name: statistics.median(values) / calls * 1e6 for name, values in times.items()}
  overhead = per_call["step_fori"] - per_call["c_loop"]
  result = {"calls": calls, "us_per_call": per_call, "custom_call_overhead_us": overhead,
            "seconds": times, "machine": machine_info(sys.argv)}
  for name, value in per_call.items():
    print(f"{name:13s} {value:7.2f} us per call")
  print(f"custom call overhead at N=1: {overhead:.2f} us (target < 5 us)")
  write_result(args.out, "overhead", result)
  return result


if __name__ == "__main__":
  main()
