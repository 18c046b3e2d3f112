"""What a batch of transition Jacobians costs, next to the steps it is made of and to MuJoCo.

  python benchmarks/derivatives.py unitree_go1 --num-sims 256 --threads 2 --repeats 7

For N states of the model (stepped a little from the initial state or first keyframe so that
they differ and touch the ground), times, interleaved within each repeat and reported as medians:
  rows:      mjbatch_jax.transition_fd, forward differences, one custom call of N*(1+nx+nu) rows;
  native:    transition_fd(method="native"): mjd_transitionFD per simulation on the batch's pool;
  steps:     one jitted mjbatch_jax.step on N*(1+nx+nu) rows, the physics rows costs at least;
  python:    mujoco.mjd_transitionFD in a Python loop over the N states (one thread).
and prints rows/steps (target <= 1.1), python/rows (target >= 1.8) and native/rows.
Writes benchmarks/results/derivatives-<model>-<date>.json and, when matplotlib is installed, a
bar plot beside it.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
  RESULTS,
  machine_info,
  model_label,
  pyplot,
  resolve_model,
  write_result,
)


def states_in_contact(sim: mjbatch_jax.Simulator, model: mujoco.MjModel, n: int):
  rng = np.random.default_rng(0)
  key = 0 if model.nkey else None
  base = model.key_ctrl[0] if model.nkey else np.zeros(model.nu)
  ctrl = jnp.asarray(base + rng.uniform(-0.2, 0.2, (n, model.nu)))
  state = sim.init_state(n, keyframe=key)
  params = sim.params(n)
  for _ in range(20):
    state = mjbatch_jax.step(state, ctrl, params)
  return state, ctrl, params


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("model")
  parser.add_argument("--num-sims", type=int, default=256)
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--out", type=Path, default=RESULTS)
  parser.add_argument("--no-plot", action="store_true")
  args = parser.parse_args(argv)

  path, model = resolve_model(args.model)
  n = args.num_sims
  nx, nu = 2 * model.nv + model.na, model.nu
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    state, ctrl, params = states_in_contact(sim, model, n)
    rows = jax.jit(lambda s, c, p: mjbatch_jax.transition_fd(s, c, p, method="rows"))
    native = jax.jit(lambda s, c, p: mjbatch_jax.transition_fd(s, c, p, method="native"))
    k = 1 + nx + nu
    big_state = jnp.repeat(state, k, axis=0)
    big_ctrl = jnp.repeat(ctrl, k, axis=0)
    big_params = sim.params(n * k)
    steps = jax.jit(mjbatch_jax.step)
    host_state, host_ctrl = np.asarray(state), np.asarray(ctrl)
    data = mujoco.MjData(model)
    a, b = np.zeros((nx, nx)), np.zeros((nx, nu))

    def python_loop() -> None:
      for i in range(n):
        mujoco.mj_setState(model, data, host_state[i], mujoco.mjtState.mjSTATE_INTEGRATION)
        data.ctrl[:] = host_ctrl[i]
        mujoco.mjd_transitionFD(model, data, 1e-6, False, a, b, None, None)

    cases = {
      "rows": lambda: jax.block_until_ready(rows(state, ctrl, params)),
      "native": lambda: jax.block_until_ready(native(state, ctrl, params)),
      "steps": lambda: jax.block_until_ready(steps(big_state, big_ctrl, big_params)),
      "python": python_loop,
    }
    for run in cases.values():
      run()  # compile and warm up
    times: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(args.repeats):
      for name, run in cases.items():
        start = time.perf_counter()
        run()
        times[name].append(time.perf_counter() - start)
      print(f"repeat {r + 1}/{args.repeats}", file=sys.stderr)
    # The rows and native methods agree with each other (and with MuJoCo, see the tests).
    diff = float(jnp.max(jnp.abs(rows(state, ctrl, params)[0] - native(state, ctrl, params)[0])))

  median = {name: statistics.median(values) for name, values in times.items()}
  ratios = {
    "rows_over_steps": median["rows"] / median["steps"],
    "python_over_rows": median["python"] / median["rows"],
    "native_over_rows": median["native"] / median["rows"],
  }
  label = model_label(args.model, path)
  result = {
    "model": label, "num_sims": n, "threads": args.threads, "nx": nx, "nu": nu,
    "seconds_median": median, "seconds": times, "ratios": ratios, "max_abs_A_rows_vs_native": diff,
    "machine": machine_info(sys.argv),
  }
  print(f"{label}: N={n}, T={args.threads}, nx={nx}, nu={nu}; median seconds per batch of N")
  for name, value in median.items():
    print(f"  {name:8s} {value * 1e3:9.2f} ms")
  print(f"  rows / (1+nx+nu) steps = {ratios['rows_over_steps']:.3f} (target <= 1.1)")
  print(f"  python loop / rows     = {ratios['python_over_rows']:.2f} (target >= 1.8)")
  print(f"  native / rows          = {ratios['native_over_rows']:.2f} (< 1: native is faster)")
  out = write_result(args.out, f"derivatives-{label}", result)
  if not args.no_plot and (plt := pyplot()) is not None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = list(median)
    ax.bar(names, [median[x] * 1e3 for x in names])
    ax.set_ylabel(f"ms per {n} Jacobians")
    ax.set_title(f"transition_fd, {label}, N={n}, {args.threads} threads")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    plt.close(fig)
    print(f"wrote {out.with_suffix('.png')}")
  return result


if __name__ == "__main__":
  main()
