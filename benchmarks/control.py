"""What a planning iteration of mjbatch_jax.control spends in the custom calls, and what a user's
own Python loop of MuJoCo calls costs instead, side by side in one run.

  python benchmarks/control.py [--model unitree_g1] [--knots 200] [--samples 1024] [--threads 2]

iLQR (control.ilqr, one iteration: the nominal rollout, one transition_fd call for all knots,
one forward call for the cost's state Jacobians, the backward pass, the line search's step calls)
on MODEL, knots of 10 physics steps, a cost that observes every body's position (hold the first
keyframe's pose) and the controls; also with linearization="substeps" (mjd_transitionFD per
physics step, chained). Its physics alone: the same custom calls on the same inputs
(transition_fd, the forward call, the line search's step calls, the nominal rollout). The
user's alternative: one iteration's physics in Python with MuJoCo's own functions on one
thread, mujoco.mjd_transitionFD per substep (composed into each knot's A and B), mj_forward on
each perturbed state, mj_step for every line-search row; its cost arithmetic and backward pass
are not even counted.

Sampling (control.sampling, predictive sampling as examples/cartpole_mpc.py: SAMPLES candidates
of 25 knots of 4 steps, one control step of control.receding_horizon) on the cart-pole. Its
physics alone: the rollout call of the candidates and the real system's step. The user's
alternative: the same planner in numpy around mujoco.rollout.Rollout (a persistent pool of the
same threads).

Times are CPU seconds (all threads) of each case, the least of --repeats runs interleaved, and
wall seconds likewise. Writes benchmarks/results/control-<model>-<date>.json and a bar plot.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from _common import (  # noqa: E402, I001
  RESULTS,
  interleaved,
  least,
  machine_info,
  model_label,
  pyplot,
  resolve_model,
  save_figure,
  write_result,
)
import common  # noqa: E402  # pyright: ignore[reportMissingImports]  (progress, --quiet)

NSTEP = 10


def measure(cases: dict, repeats: int) -> dict[str, dict[str, float]]:
  """Least CPU and wall seconds of each case (a no-argument function), interleaved."""
  best = {name: least(t) for name, t in interleaved(cases, repeats, progress=True).items()}
  return {name: {"cpu": t.cpu_s, "wall": t.wall_s} for name, t in best.items()}


# -- iLQR ----------------------------------------------------------------------------------------


def ilqr_cases(model: mujoco.MjModel, knots: int, threads: int) -> tuple[dict, dict]:
  sim = mjbatch_jax.Simulator(model, num_threads=threads)
  lay, nv, nu = sim.layout, model.nv, model.nu
  nx = 2 * nv + model.na
  start = sim.init_state(1, keyframe=0 if model.nkey else None)[0]
  ref_ctrl = np.asarray(model.key_ctrl[0] if model.nkey else np.zeros(nu))
  ref_pos = np.asarray(mjbatch_jax.forward(start[None], sim.params(1), ("xpos",))["xpos"][0])

  def residual(x, u, obs, t):
    return jnp.concatenate([10.0 * (obs["xpos"][1:] - ref_pos[1:]).ravel(), u - ref_ctrl])

  cost = control.Cost(residual, (control.Term(3 * (model.nbody - 1)), control.Term(nu, 0.01)),
                      observe=("xpos",))
  ctrls = jnp.asarray(np.broadcast_to(ref_ctrl, (knots, nu)))
  settings = control.ILQRSettings(final_gains=False, max_retries=0)
  steps = len(settings.step_sizes)
  iteration = jax.jit(lambda s, u: control.ilqr(cost, sim.params(1), s, u, nstep=NSTEP,
                                                iterations=1, settings=settings))
  by_substeps = settings._replace(linearization="substeps")
  iteration_substeps = jax.jit(lambda s, u: control.ilqr(cost, sim.params(1), s, u, nstep=NSTEP,
                                                         iterations=1, settings=by_substeps))
  result = iteration(start, ctrls)
  states, gains, ks = np.asarray(result.states), np.asarray(result.gains), np.asarray(
    result.feedforward)

  # The same custom calls on the same rows, alone (transition_fd is one custom call and a
  # reshape of its output).
  forward_rows = jnp.repeat(jnp.asarray(states), 1 + nx, axis=0)
  knot_states = jnp.asarray(states[:-1])
  p_knots, p_fwd, p_line, p_one = (sim.params(n) for n in (knots, (knots + 1) * (1 + nx), steps,
                                                           1))
  transition_fd = jax.jit(lambda s, c: mjbatch_jax.transition_fd(s, c, p_knots, nstep=NSTEP))
  forward = jax.jit(lambda r: mjbatch_jax.forward(r, p_fwd, ("xpos",)))

  @jax.jit
  def line_search_steps(first, us):
    def knot(x, u):
      x, obs, warnings, errors = mjbatch_jax.step(x, u, p_line, nstep=NSTEP, observe=("xpos",),
                                                  return_warnings=True, return_errors=True)
      return x, (obs["xpos"], warnings, errors)
    return jax.lax.scan(knot, first, us)

  nominal = jax.jit(lambda s, u: (
    mjbatch_jax.rollout(s[None], u[None], p_one, nstep=NSTEP, observe=("xpos",),
                        return_warnings=True, return_errors=True),
    mjbatch_jax.forward(s[None], p_one, ("xpos",))))
  line_first = jnp.broadcast_to(start, (steps, sim.nstate))
  line_ctrls = jnp.broadcast_to(ctrls[:, None], (knots, steps, nu))

  # The user's alternative: the iteration's physics with MuJoCo's functions in a Python loop.
  data = mujoco.MjData(model)
  a, b = np.zeros((nx, nx)), np.zeros((nx, nu))
  spec = mujoco.mjtState.mjSTATE_INTEGRATION
  host_ctrls = np.asarray(ctrls)
  alphas = np.asarray(settings.step_sizes)

  def python_iteration() -> None:
    for t in range(knots):  # each knot's A, B: its substeps' mjd_transitionFD composed
      mujoco.mj_setState(model, data, states[t], spec)
      data.ctrl[:] = host_ctrls[t]
      a_knot, b_knot = np.eye(nx), np.zeros((nx, nu))
      for _ in range(NSTEP):
        mujoco.mjd_transitionFD(model, data, 1e-6, False, a, b, None, None)
        a_knot, b_knot = a @ a_knot, a @ b_knot + b
        mujoco.mj_step(model, data)
    dq = np.zeros(nv)
    for t in range(knots + 1):  # the cost's state Jacobians: every tangent perturbation
      for i in range(1 + nx):
        mujoco.mj_setState(model, data, states[t], spec)
        if 0 < i <= nv:
          dq[:] = 0
          dq[i - 1] = 1e-6
          mujoco.mj_integratePos(model, data.qpos, dq, 1.0)
        elif i > nv:
          data.qvel[(i - 1 - nv) % nv] += 1e-6
        mujoco.mj_forward(model, data)
    x = np.zeros(nx)
    for alpha in alphas:  # the line search, one row at a time, closing the feedback loop
      mujoco.mj_setState(model, data, states[0], spec)
      for t in range(knots):
        mujoco.mj_differentiatePos(model, x[:nv], 1.0, states[t][lay.qpos], data.qpos)
        x[nv:2 * nv] = data.qvel - states[t][lay.qvel]
        data.ctrl[:] = np.clip(host_ctrls[t] + alpha * ks[t] + gains[t] @ x,
                               *model.actuator_ctrlrange.T)
        mujoco.mj_step(model, data, NSTEP)

  cases = {
    "iteration": lambda: iteration(start, ctrls),
    "nominal rollout": lambda: nominal(start, ctrls),
    "transition_fd": lambda: transition_fd(knot_states, ctrls),
    "forward": lambda: forward(forward_rows),
    "line-search steps": lambda: line_search_steps(line_first, line_ctrls),
    "python loop": python_iteration,
    "iteration, substeps": lambda: iteration_substeps(start, ctrls),
  }
  info = {"knots": knots, "nstep": NSTEP, "nx": nx, "nu": nu, "line_search_rows": steps,
          "physics": ["nominal rollout", "transition_fd", "forward", "line-search steps"]}
  return cases, info


# -- sampling ------------------------------------------------------------------------------------


def sampling_cases(samples: int, threads: int) -> tuple[dict, dict]:
  import cartpole_mpc  # pyright: ignore[reportMissingImports]
  from mujoco import rollout  # pyright: ignore[reportAttributeAccessIssue]

  model = mujoco.MjModel.from_xml_string(cartpole_mpc.CARTPOLE)
  sim = mjbatch_jax.Simulator(model, num_threads=threads)
  lay = sim.layout
  knots, substeps = cartpole_mpc.KNOTS, cartpole_mpc.SUBSTEPS
  planner = cartpole_mpc.make_planner(sim, "predictive", samples)
  step = control.receding_horizon(planner, sim.params(1))
  start = sim.init_state(1)[0].at[lay.qpos].set(jnp.array([0.0, 3.0]))
  plan, key = planner.init(), jax.random.PRNGKey(0)

  p_k, p_one = sim.params(samples), sim.params(1)
  starts = jnp.broadcast_to(start, (samples, sim.nstate))
  candidates = jnp.zeros((samples, knots, sim.nu))
  physics = jax.jit(lambda s, c, s1: (
    mjbatch_jax.rollout(s, c, p_k, nstep=substeps, return_warnings=True, return_errors=True),
    mjbatch_jax.rollout(s1[None], c[:1, :1], p_one, nstep=substeps)))

  # The user's alternative: the same predictive sampling in numpy around mujoco.rollout.
  full = mujoco.mjtState.mjSTATE_FULLPHYSICS
  runner = rollout.Rollout(nthread=threads if threads > 1 else 0)
  datas = [mujoco.MjData(model) for _ in range(max(threads, 1))]
  data = mujoco.MjData(model)
  mujoco.mj_setState(model, data, np.asarray(start), mujoco.mjtState.mjSTATE_INTEGRATION)
  first = np.empty(mujoco.mj_stateSize(model, full))
  mujoco.mj_getState(model, data, first, full)
  initial = np.tile(first, (samples, 1))
  qpos = np.arange(1, 1 + model.nq)  # in a FULLPHYSICS row: time first
  qvel = np.arange(1 + model.nq, 1 + model.nq + model.nv)
  rng = np.random.default_rng(0)
  state_out = np.empty((samples, knots * substeps, len(first)))
  sensor_out = np.empty((samples, knots * substeps, 0))
  effort = np.r_[np.ones(knots), 0.0]

  def python_step() -> None:
    noise = 0.5 * rng.standard_normal((samples, knots, sim.nu))
    noise[0] = 0
    cands = np.clip(np.asarray(plan.knots)[None] + noise, -1, 1)
    runner.rollout(model, datas, initial, np.repeat(cands, substeps, axis=1), state=state_out,
                   sensordata=sensor_out)
    after = state_out[:, substeps - 1 :: substeps]
    q, v = after[..., qpos], after[..., qvel]
    cost = np.sum(1 - np.cos(q[..., 1]) + 0.2 * q[..., 0] ** 2 + 0.01 * np.sum(v**2, -1), -1)
    cost += 0.01 * np.sum(effort[:-1] * cands[..., 0] ** 2, -1)
    best = cands[np.argmin(cost)]
    data.ctrl[:] = best[0]
    mujoco.mj_step(model, data, substeps)

  cases = {
    "control step": lambda: step(start, plan, key),
    "rollout calls": lambda: physics(starts, candidates, start),
    "python + mujoco.rollout": python_step,
  }
  info = {"samples": samples, "knots": knots, "nstep": substeps,
          "physics": ["rollout calls"]}
  return cases, info


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--model", default="unitree_g1", help="the iLQR case's model")
  parser.add_argument("--knots", type=int, default=200)
  parser.add_argument("--samples", type=int, default=1024)
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--out", type=Path, default=RESULTS)
  parser.add_argument("--no-plot", action="store_true")
  common.add_progress_args(parser)
  args = common.parse(parser, argv)  # its --quiet silences the rounds' progress
  path, model = resolve_model(args.model)
  label = model_label(args.model, path)
  result: dict = {"model": label, "threads": args.threads, "machine": machine_info(sys.argv)}
  for part, (cases, info) in (("ilqr", ilqr_cases(model, args.knots, args.threads)),
                              ("sampling", sampling_cases(args.samples, args.threads))):
    seconds = measure(cases, args.repeats)
    whole = next(iter(cases))
    share = sum(seconds[name]["cpu"] for name in info["physics"]) / seconds[whole]["cpu"]
    python = next(name for name in cases if "python" in name)
    result[part] = {**info, "seconds": seconds, "custom_call_share": share,
                    "python_over_ours": seconds[python]["wall"] / seconds[whole]["wall"],
                    "python_over_ours_cpu": seconds[python]["cpu"] / seconds[whole]["cpu"]}
    if "iteration, substeps" in seconds:
      result[part]["python_over_substeps_cpu"] = (seconds[python]["cpu"]
                                                  / seconds["iteration, substeps"]["cpu"])
    print(f"{part}: " + ", ".join(f"{n} {v['cpu'] * 1e3:.1f} ms CPU ({v['wall'] * 1e3:.1f} wall)"
                                  for n, v in seconds.items()))
    print(f"{part}: custom calls {100 * share:.1f}% of the {whole}'s CPU time; the Python "
          f"alternative takes {result[part]['python_over_ours']:.2f}x its wall time "
          f"({result[part]['python_over_ours_cpu']:.2f}x its CPU time)")
  out = write_result(args.out, f"control-{label}", result)
  if not args.no_plot and (plt := pyplot()) is not None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, part in zip(axes, ("ilqr", "sampling"), strict=True):
      names = list(result[part]["seconds"])
      ax.barh(names, [result[part]["seconds"][n]["cpu"] for n in names])
      ax.set_xlabel("CPU seconds, all threads (least of repeats)")
      ax.set_title(f"{part}: custom calls {100 * result[part]['custom_call_share']:.0f}% of CPU")
      ax.invert_yaxis()
    fig.suptitle(f"mjbatch_jax.control on {args.threads} threads ({label}, {args.knots} knots; "
                 f"cart-pole, {args.samples} x 25 knots)")
    save_figure(fig, out.with_suffix(".png"))
  return result


if __name__ == "__main__":
  main()
