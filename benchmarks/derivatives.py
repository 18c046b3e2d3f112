"""What derivatives cost: transition Jacobians next to the steps they are made of and to MuJoCo,
and the derivative rules' default (regime-checked, positions centred) next to the old one.

  python benchmarks/derivatives.py unitree_go1 --num-sims 256 --threads 2 --repeats 7

For N states of the model (stepped a little from the initial state or first keyframe so that
they differ and touch the ground), times, interleaved within each repeat and reported as medians
of CPU seconds (all threads; wall seconds beside them):
  rows:        mjbatch_jax.transition_fd (default: regime-checked rows in the engine, positions
               centred): one custom call of N*(1+nx+nu+nv) rows, plus a few where copies cross;
  rows_forward: the same with centered=False: N*(1+nx+nu) rows;
  native:      transition_fd(method="native"): mjd_transitionFD per simulation on the pool;
  steps:       one jitted mjbatch_jax.step on N*(1+nx+nu) rows, what forward differences cost
               at least;
  python:      mujoco.mjd_transitionFD in a Python loop over the N states (one thread);
  jvp_default: jax.jacfwd of mjbatch_jax.step w.r.t. the rows' state and the controls, with the
               default rules (regime-checked, positions centred, controls at eps / 10, the
               solver's warm start among the columns);
  jvp_forward: the same, forward differences (regime-checked, warm start among the columns);
  jvp_old:     the same, plain forward differences (no regime checks): the rules before
               derivatives through contact were made right by default.
and prints rows_forward/steps (target <= 1.1), python/rows_forward (target >= 1.8),
native/rows_forward, and jvp_default/jvp_old and jvp_forward/jvp_old (the default's cost; the
regime checks' cost). Writes benchmarks/results/derivatives-<model>-<date>.json and, when
matplotlib is installed, a bar plot beside it.
"""

import argparse
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import _rules  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
  RESULTS,
  cpu_times,
  interleaved,
  machine_info,
  median,
  model_label,
  pyplot,
  resolve_model,
  save_figure,
  wall_times,
  write_result,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import common  # noqa: E402  # pyright: ignore[reportMissingImports]  (progress, --quiet)


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
  parser.add_argument("--no-rules", action="store_true",
                      help="skip the jacfwd(step) rows (the derivative rules)")
  common.add_progress_args(parser)
  args = common.parse(parser, argv)  # its --quiet silences the rounds' progress

  path, model = resolve_model(args.model)
  n = args.num_sims
  nx, nu = 2 * model.nv + model.na, model.nu
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    state, ctrl, params = states_in_contact(sim, model, n)
    rows = jax.jit(lambda s, c, p: mjbatch_jax.transition_fd(s, c, p))
    rows_forward = jax.jit(lambda s, c, p: mjbatch_jax.transition_fd(s, c, p, centered=False))
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

    def jacobian(centered: bool | None, checked: bool, warm: bool):
      # Read when the rule is traced: here, at the first call.
      _rules.REGIME_CHECKED, _rules.WARMSTART_COLUMNS = checked, warm
      try:
        fn = jax.jit(jax.jacfwd(
          lambda s, c: mjbatch_jax.step(s, c, params, centered=centered), argnums=(0, 1)))
        jax.block_until_ready(fn(state, ctrl))
      finally:
        _rules.REGIME_CHECKED, _rules.WARMSTART_COLUMNS = True, True
      return lambda: fn(state, ctrl)

    cases = {
      "rows": lambda: rows(state, ctrl, params),
      "rows_forward": lambda: rows_forward(state, ctrl, params),
      "native": lambda: native(state, ctrl, params),
      "steps": lambda: steps(big_state, big_ctrl, big_params),
      "python": python_loop,
    }
    if not args.no_rules:
      cases["jvp_default"] = jacobian(None, True, True)
      cases["jvp_forward"] = jacobian(False, True, True)
      cases["jvp_old"] = jacobian(False, False, False)
    timings = interleaved(cases, args.repeats, progress=True)
    # The rows and native methods agree with each other (and with MuJoCo, see the tests).
    diff = float(jnp.max(jnp.abs(rows_forward(state, ctrl, params)[0]
                                 - native(state, ctrl, params)[0])))

  times = {name: wall_times(t) for name, t in timings.items()}
  cpu = {name: cpu_times(t) for name, t in timings.items()}
  medians = {name: median(t) for name, t in timings.items()}
  wall_median = {name: t.wall_s for name, t in medians.items()}
  cpu_median = {name: t.cpu_s for name, t in medians.items()}
  ratios = {
    "rows_over_steps": cpu_median["rows_forward"] / cpu_median["steps"],
    "python_over_rows": cpu_median["python"] / cpu_median["rows_forward"],
    "native_over_rows": cpu_median["native"] / cpu_median["rows_forward"],
    "rows_default_over_forward": cpu_median["rows"] / cpu_median["rows_forward"],
  }
  if "jvp_old" in cpu_median:
    ratios["jvp_default_over_old"] = cpu_median["jvp_default"] / cpu_median["jvp_old"]
    ratios["jvp_forward_over_old"] = cpu_median["jvp_forward"] / cpu_median["jvp_old"]
  label = model_label(args.model, path)
  result = {
    "model": label, "num_sims": n, "threads": args.threads, "nx": nx, "nu": nu,
    "seconds_median": wall_median, "seconds": times, "cpu_seconds_median": cpu_median,
    "cpu_seconds": cpu, "ratios": ratios, "max_abs_A_rows_vs_native": diff,
    "machine": machine_info(sys.argv),
  }
  print(f"{label}: N={n}, T={args.threads}, nx={nx}, nu={nu}; median CPU (wall) per batch of N")
  for name, value in cpu_median.items():
    print(f"  {name:13s} {value * 1e3:9.2f} ms  ({wall_median[name] * 1e3:9.2f} ms wall)")
  print(f"  rows_forward / (1+nx+nu) steps = {ratios['rows_over_steps']:.3f} (target <= 1.1)")
  print(f"  python loop / rows_forward     = {ratios['python_over_rows']:.2f} (target >= 1.8)")
  print(f"  native / rows_forward          = {ratios['native_over_rows']:.2f} (< 1: native is "
        "faster)")
  print(f"  rows default / rows_forward    = {ratios['rows_default_over_forward']:.2f}")
  if "jvp_default_over_old" in ratios:
    print(f"  jacfwd(step) default / old     = {ratios['jvp_default_over_old']:.2f} (target "
          "<= 1.5)")
    print(f"  jacfwd(step) forward / old     = {ratios['jvp_forward_over_old']:.2f} (the regime "
          "checks alone)")
  out = write_result(args.out, f"derivatives-{label}", result)
  if not args.no_plot and (plt := pyplot()) is not None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = list(cpu_median)
    ax.bar(names, [cpu_median[x] * 1e3 for x in names])
    ax.tick_params(axis="x", labelrotation=45)
    ax.set_ylabel(f"CPU ms per {n} Jacobians")
    ax.set_title(f"transition_fd, {label}, N={n}, {args.threads} threads")
    save_figure(fig, out.with_suffix(".png"), dpi=120)
  return result


if __name__ == "__main__":
  main()
