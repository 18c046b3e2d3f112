"""iLQR's planning linearisation against MuJoCo MPC's (a Python loop of mjd_transitionFD over the
knots), and one iLQR iteration against that loop plus a numpy backward pass, side by side in one
run; with the accuracy of each linearisation on the same trajectories.

  python benchmarks/ilqr_linearization.py --threads 2 [--knots 75] [--nstep 1,4] [--quick]

The model: the dm_control hopper (Playground's hopper.xml, found in this interpreter or in
--rl-python's), settled onto the floor, so that the plan runs through contact. The cost: move
the first coordinate (the hopper's rootx) 1 m forward, hold the rest of the start's pose, small
velocities and controls. For each knot length (--nstep physics steps a knot; 1 is MJPC's
setting) on the initial plan's trajectory (zero controls) it times, CPU seconds of all threads
and wall seconds, the least of --repeats runs interleaved:

- linearisation, substeps: the dynamics Jacobians of every knot in one call, as
  ILQRSettings(linearization="substeps") computes them (MuJoCo's mjd_transitionFD per physics
  step on the batch's threads, chained over a knot's steps in JAX);
- linearisation, knot: the kink-safe default (transition_fd's rows: centred positions, every
  copy kept on the nominal side of contact switches), for reference;
- python mjd_transitionFD loop: mujoco.mjd_transitionFD (forward differences, the same eps) on
  one MjData over the same knots, each knot's physics steps chained in numpy;
- iLQR iteration, substeps / knot: control.ilqr with iterations=1 less iterations=0 (final_gains
  off, no retries): linearisation, cost derivatives, backward pass with the box QP, the line
  search's rollouts of every step size;
- backward pass: the Riccati scan alone on the same local model; numpy backward pass: a plain
  Riccati recursion over the same A, B and a quadratic cost (no box QP);
- python line search: the line search's closed-loop rollouts with mj_step in Python, for a
  like-for-like iteration (the loop + numpy backward + this).

Accuracy: each linearisation's relative error (Frobenius norm of A - A_ref over that of A_ref,
and of B, per knot: median and largest) against centred differences (transition_fd's kink-safe
rows with every column centred) on the same knots; and a full solve (--iterations) with each
option: its final cost, iterations, why it stopped and its CPU time.

Writes benchmarks/results/ilqr_linearization-<date>.json and a bar plot.
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
from mjbatch_jax import control  # noqa: E402
from mjbatch_jax.control import cost as cost_lib  # noqa: E402
from mjbatch_jax.control.backward import backward_pass  # noqa: E402
from mjbatch_jax.control.ilqr import _dynamics, _linearize  # noqa: E402
from mjbatch_jax.tangent import StateTangent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402, I001
  PROJECT,
  RESULTS,
  Stopwatch,
  int_list,
  interleaved,
  least,
  machine_info,
  package_file,
  pyplot,
  save_figure,
  write_result,
)

sys.path.insert(0, str(PROJECT / "examples"))
import common  # noqa: E402  # pyright: ignore[reportMissingImports]  (progress, --quiet)

HOPPER = ("mujoco_playground", "_src/dm_control_suite/xmls/hopper.xml")
EPS = 1e-6
SETTLE = 40  # physics steps from the model's initial state: the hopper lands on its foot
TARGET = 1.0  # metres the first coordinate moves


def hopper_path(rl_python: str) -> Path:
  found = package_file(*HOPPER, pythons=[rl_python])
  if found is None:
    raise SystemExit(f"{HOPPER[1]} of {HOPPER[0]} not found in this interpreter nor in "
                     f"{rl_python} (pass --rl-python, or --model PATH)")
  return found


class Problem:
  """The model, its settled start, the cost and the initial plan's trajectory of one knot length."""

  def __init__(self, model: mujoco.MjModel, knots: int, nstep: int, threads: int):
    self.model, self.knots, self.nstep = model, knots, nstep
    self.sim = mjbatch_jax.Simulator(model, num_threads=threads)
    self.tangent = StateTangent.of(model)
    self.nx, self.nu, nq = self.tangent.nx, model.nu, model.nq
    lay = self.sim.layout
    first = self.sim.init_state(1)
    rest = jnp.zeros((1, SETTLE, self.nu))
    self.start = mjbatch_jax.rollout(first, rest, self.sim.params(1))[0][0, -1]
    goal = np.asarray(self.start[lay.qpos]).copy()
    goal[0] += TARGET
    goal = jnp.asarray(goal)

    def residual(x, u, obs, t):
      return jnp.concatenate([x[lay.qpos] - goal, x[lay.qvel], u])

    final = np.r_[np.zeros(knots), 1.0]
    self.cost = control.Cost(residual, (control.Term(nq, 1.0 + 20.0 * final),
                                        control.Term(model.nv, 0.01),
                                        control.Term(self.nu, 0.01 * (1.0 - final))))
    self.ctrls = jnp.zeros((knots, self.nu))
    held = jnp.repeat(self.ctrls, nstep, axis=0)
    subs = mjbatch_jax.rollout(self.start[None], held[None], self.sim.params(1))[0][0]
    self.states = jnp.concatenate([self.start[None], subs[nstep - 1 :: nstep]])  # (T + 1, .)

  def settings(self, linearization: str, **kwargs) -> control.ILQRSettings:
    return control.ILQRSettings(linearization=linearization, eps=EPS, **kwargs)

  def dynamics(self, linearization: str):
    settings, p = self.settings(linearization), self.sim.params(1)
    return jax.jit(lambda s, u: _dynamics(p, self.tangent, s, u, self.nstep, settings))

  def solver(self, linearization: str, iterations: int):
    settings = self.settings(linearization, final_gains=False, max_retries=0)
    p = self.sim.params(1)
    return jax.jit(lambda s, u: control.ilqr(self.cost, p, s, u, nstep=self.nstep,
                                             iterations=iterations, settings=settings))

  def python_jacobians(self, data: mujoco.MjData):
    """The user's loop: mjd_transitionFD per physics step on one MjData, chained per knot."""
    model, nx, nu = self.model, self.nx, self.nu
    states, ctrls = np.asarray(self.states), np.asarray(self.ctrls)
    a, b = np.zeros((nx, nx)), np.zeros((nx, nu))
    out_a, out_b = np.zeros((self.knots, nx, nx)), np.zeros((self.knots, nx, nu))
    spec = mujoco.mjtState.mjSTATE_INTEGRATION

    def run():
      for t in range(self.knots):
        mujoco.mj_setState(model, data, states[t], spec)
        data.ctrl[:] = ctrls[t]
        if self.nstep == 1:
          mujoco.mjd_transitionFD(model, data, EPS, False, out_a[t], out_b[t], None, None)
          continue
        a_knot, b_knot = np.eye(nx), np.zeros((nx, nu))
        for _ in range(self.nstep):
          mujoco.mjd_transitionFD(model, data, EPS, False, a, b, None, None)
          a_knot, b_knot = a @ a_knot, a @ b_knot + b
          mujoco.mj_step(model, data)
        out_a[t], out_b[t] = a_knot, b_knot
      return out_a, out_b

    return run


def numpy_backward(a: np.ndarray, b: np.ndarray, q: np.ndarray, r: np.ndarray):
  """A plain Riccati recursion of sum x'Qx/2 + u'Ru/2 over A_t, B_t: gains and feedforward."""
  horizon = a.shape[0]
  v_x, v_xx = np.zeros(q.shape[0]), q.copy()
  ks, gains = np.zeros((horizon, r.shape[0])), np.zeros((horizon, r.shape[0], q.shape[0]))
  l_x, l_u = np.ones(q.shape[0]), np.ones(r.shape[0])
  for t in range(horizon - 1, -1, -1):
    q_x = l_x + a[t].T @ v_x
    q_u = l_u + b[t].T @ v_x
    va = v_xx @ a[t]
    q_xx = q + a[t].T @ va
    q_ux = b[t].T @ va
    q_uu = r + b[t].T @ v_xx @ b[t]
    factor = np.linalg.cholesky(q_uu)
    k = -np.linalg.solve(factor.T, np.linalg.solve(factor, q_u))
    gain = -np.linalg.solve(factor.T, np.linalg.solve(factor, q_ux))
    v_x = q_x + gain.T @ (q_uu @ k + q_u) + q_ux.T @ k
    v_xx = q_xx + gain.T @ q_uu @ gain + gain.T @ q_ux + q_ux.T @ gain
    v_xx = 0.5 * (v_xx + v_xx.T)
    ks[t], gains[t] = k, gain
  return ks, gains


def python_line_search(problem: Problem, data: mujoco.MjData, ks, gains, step_sizes):
  """The line search's closed-loop rows in Python: mj_step, one row after the other."""
  model, nv, lay = problem.model, problem.model.nv, problem.sim.layout
  states, ctrls = np.asarray(problem.states), np.asarray(problem.ctrls)
  x = np.zeros(problem.nx)
  spec = mujoco.mjtState.mjSTATE_INTEGRATION
  low, high = model.actuator_ctrlrange.T

  def run():
    for alpha in step_sizes:
      mujoco.mj_setState(model, data, states[0], spec)
      for t in range(problem.knots):
        mujoco.mj_differentiatePos(model, x[:nv], 1.0, states[t][lay.qpos], data.qpos)
        x[nv:2 * nv] = data.qvel - states[t][lay.qvel]
        data.ctrl[:] = np.clip(ctrls[t] + alpha * ks[t] + gains[t] @ x, low, high)
        mujoco.mj_step(model, data, problem.nstep)

  return run


def relative_errors(a: np.ndarray, ref: np.ndarray) -> dict[str, float]:
  per_knot = (np.linalg.norm(a - ref, axis=(1, 2))
              / np.maximum(np.linalg.norm(ref, axis=(1, 2)), 1e-300))
  return {"median": float(np.median(per_knot)), "max": float(per_knot.max())}


def accuracy(problem: Problem) -> dict:
  """Each linearisation against centred kink-safe differences on the same knots."""
  s, u = problem.states, problem.ctrls
  ref_a, ref_b = mjbatch_jax.transition_fd(s[:-1], u, problem.sim.params(problem.knots),
                                           eps=EPS, centered=True, nstep=problem.nstep)
  out = {}
  for option in ("substeps", "knot"):
    a, b = problem.dynamics(option)(s, u)
    out[option] = {"A": relative_errors(np.asarray(a), np.asarray(ref_a)),
                   "B": relative_errors(np.asarray(b), np.asarray(ref_b))}
  return out


def solves(problem: Problem, iterations: int) -> dict:
  """A full solve with each option: final cost, iterations, why it stopped, CPU seconds."""
  out = {}
  for option in ("substeps", "knot"):
    settings = problem.settings(option)
    run = jax.jit(lambda s, u, settings=settings: control.ilqr(
      problem.cost, problem.sim.params(1), s, u, nstep=problem.nstep, iterations=iterations,
      settings=settings))
    jax.block_until_ready(run(problem.start, problem.ctrls))  # compiled
    clock = Stopwatch()
    result = jax.block_until_ready(run(problem.start, problem.ctrls))
    timing = clock.lap()
    out[option] = {"initial_cost": float(result.costs[0]), "final_cost": float(result.cost),
                   "iterations": int(result.iterations), "stop": result.stopped,
                   "converged": bool(result.converged), "cpu_s": timing.cpu_s,
                   "wall_s": timing.wall_s}
  return out


def cases(problem: Problem) -> tuple[dict, dict]:
  """The timed cases (no-argument functions) and what they were measured on."""
  s, u = problem.states, problem.ctrls
  data = mujoco.MjData(problem.model)
  substeps, knot = problem.dynamics("substeps"), problem.dynamics("knot")
  python_jacobians = problem.python_jacobians(data)
  one = {opt: problem.solver(opt, 1) for opt in ("substeps", "knot")}
  none = {opt: problem.solver(opt, 0) for opt in ("substeps", "knot")}

  # The local model of the plan and the backward pass alone on it.
  settings = problem.settings("substeps")
  weights = cost_lib.weights(problem.cost.terms, problem.knots)
  static = cost_lib.static(problem.cost)
  model = jax.jit(lambda s, u: _linearize(static, weights, problem.sim.params(1), problem.tangent,
                                          s, u, problem.nstep, settings))(s, u)
  lo = jnp.full(problem.nu, -1.0)
  hi = jnp.full(problem.nu, 1.0)
  backward = jax.jit(lambda m, u: backward_pass(m, u, jnp.asarray(settings.mu_init), lo, hi,
                                                settings.boxqp_iterations))
  ks, gains, _, _ = backward(model, u)

  a, b = python_jacobians()
  q, r = np.eye(problem.nx), 0.01 * np.eye(problem.nu)
  line = python_line_search(problem, data, np.asarray(ks), np.asarray(gains), settings.step_sizes)
  timed = {
    "linearisation, substeps": lambda: substeps(s, u),
    "python mjd_transitionFD loop": python_jacobians,
    "linearisation, knot": lambda: knot(s, u),
    "iLQR iterations=1, substeps": lambda: one["substeps"](problem.start, u),
    "iLQR iterations=0, substeps": lambda: none["substeps"](problem.start, u),
    "iLQR iterations=1, knot": lambda: one["knot"](problem.start, u),
    "iLQR iterations=0, knot": lambda: none["knot"](problem.start, u),
    "backward pass": lambda: backward(model, u),
    "numpy backward pass": lambda: numpy_backward(a, b, q, r),
    "python line search": line,
  }
  info = {"knots": problem.knots, "nstep": problem.nstep, "nx": problem.nx, "nu": problem.nu,
          "line_search_rows": len(settings.step_sizes), "eps": EPS}
  return timed, info


def summarise(seconds: dict) -> dict:
  """The ratios the issue asks for (CPU; wall beside)."""
  def of(name, kind):
    return seconds[name][kind]

  out = {}
  for kind in ("cpu", "wall"):
    loop = of("python mjd_transitionFD loop", kind)
    numpy_bw = of("numpy backward pass", kind)
    python_iteration = loop + numpy_bw + of("python line search", kind)
    row = {"substeps_linearisation_over_loop": of("linearisation, substeps", kind) / loop,
           "knot_linearisation_over_loop": of("linearisation, knot", kind) / loop}
    for opt in ("substeps", "knot"):
      iteration = of(f"iLQR iterations=1, {opt}", kind) - of(f"iLQR iterations=0, {opt}", kind)
      row[f"iteration_{opt}_s"] = iteration
      row[f"iteration_{opt}_over_loop_and_backward"] = iteration / (loop + numpy_bw)
      row[f"iteration_{opt}_over_python_iteration"] = iteration / python_iteration
    out[kind] = row
  return out


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--model", type=Path, default=None,
                      help="an XML instead of the dm_control hopper")
  parser.add_argument("--rl-python", default=str(PROJECT / ".venv-rl" / "bin" / "python"),
                      help="an interpreter with mujoco_playground, to find hopper.xml")
  parser.add_argument("--knots", type=int, default=75)
  parser.add_argument("--nstep", default=None,
                      help="physics steps per knot, comma-separated (default 1,4; --quick 1,2)")
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--iterations", type=int, default=50, help="of each accuracy solve")
  parser.add_argument("--quick", action="store_true",
                      help="a reduced run (8 knots, 1 repeat, 2 iterations)")
  parser.add_argument("--out", type=Path, default=RESULTS)
  parser.add_argument("--no-plot", action="store_true")
  common.add_progress_args(parser)
  args = parser.parse_args(argv)
  if args.quick:
    args.knots, args.repeats, args.iterations = 8, 1, 2
  nsteps = int_list(args.nstep or ("1,2" if args.quick else "1,4"))
  if min(args.knots, args.repeats, args.threads, *nsteps) < 1 or args.iterations < 0:
    parser.error("--knots, --nstep, --repeats and --threads must be >= 1, --iterations >= 0")
  path = args.model if args.model is not None else hopper_path(args.rl_python)
  model = mujoco.MjModel.from_xml_path(str(path))
  label = path.stem
  result: dict = {"model": label, "model_path": str(path), "threads": args.threads,
                  "repeats": args.repeats, "machine": machine_info(sys.argv), "rows": []}
  # Per nstep: the timed rounds, then the accuracy and the solves (one more count).
  bar = common.progress(len(nsteps) * (args.repeats + 1), "rounds", args, unit="round")
  for nstep in nsteps:
    problem = Problem(model, args.knots, nstep, args.threads)
    timed, info = cases(problem)
    best = {name: least(t) for name, t in interleaved(timed, args.repeats, progress=bar).items()}
    seconds = {name: {"cpu": t.cpu_s, "wall": t.wall_s} for name, t in best.items()}
    row = {**info, "seconds": seconds, "ratios": summarise(seconds),
           "accuracy": accuracy(problem), "solves": solves(problem, args.iterations)}
    bar.update(postfix=f"nstep {nstep} done")
    result["rows"].append(row)
    cpu = row["ratios"]["cpu"]
    bar.write(f"{label}, {args.knots} knots of {nstep} step(s), {args.threads} threads, CPU ms: "
              + ", ".join(f"{n} {v['cpu'] * 1e3:.2f}" for n, v in seconds.items()), keep=True)
    bar.write(f"  substeps linearisation / python loop "
              f"{cpu['substeps_linearisation_over_loop']:.2f}x (knot "
              f"{cpu['knot_linearisation_over_loop']:.2f}x); iteration / (loop + numpy "
              f"backward) {cpu['iteration_substeps_over_loop_and_backward']:.2f}x (knot "
              f"{cpu['iteration_knot_over_loop_and_backward']:.2f}x); iteration / python "
              f"iteration {cpu['iteration_substeps_over_python_iteration']:.2f}x", keep=True)
    for option, acc in row["accuracy"].items():
      solve = row["solves"][option]
      bar.write(f"  {option}: A error median {acc['A']['median']:.2e} max "
                f"{acc['A']['max']:.2e}, B median {acc['B']['median']:.2e} max "
                f"{acc['B']['max']:.2e}; solve cost {solve['initial_cost']:.4g} -> "
                f"{solve['final_cost']:.4g} in {solve['iterations']} iterations "
                f"({solve['stop']}), {solve['cpu_s']:.2f} CPU s", keep=True)
  bar.close()
  out = write_result(args.out, "ilqr_linearization", result)
  if not args.no_plot and (plt := pyplot()) is not None:
    fig, axes = plt.subplots(1, len(result["rows"]), figsize=(6 * len(result["rows"]), 4.5),
                             squeeze=False)
    for ax, row in zip(axes[0], result["rows"], strict=True):
      names = ["linearisation, substeps", "linearisation, knot", "python mjd_transitionFD loop",
               "backward pass", "numpy backward pass", "python line search"]
      values = [row["seconds"][n]["cpu"] * 1e3 for n in names]
      names += ["iLQR iteration, substeps", "iLQR iteration, knot"]
      values += [row["ratios"]["cpu"][f"iteration_{o}_s"] * 1e3 for o in ("substeps", "knot")]
      ax.barh(names, values)
      ax.set_xlabel("CPU ms, all threads (least of repeats)")
      ax.set_title(f"{row['knots']} knots of {row['nstep']} step(s)")
      ax.invert_yaxis()
    fig.suptitle(f"iLQR linearisation on the {label}, {args.threads} threads")
    save_figure(fig, out.with_suffix(".png"))
  return result


if __name__ == "__main__":
  main()
