"""Identification on a recording with contacts: dm_control's cheetah or walker, against
mujoco.sysid.

The held-out model: dm_control suite's cheetah (or walker, --model walker), as mujoco_playground
ships it, its masses made explicit (the cheetah's settotalmass applied once). Unknowns: 4
bodies' log masses (rotational inertia scaled with the mass) and the 6 leg joints' log
dampings, the guess off by 17-67% each. The recording: random piecewise-constant controls from
rest, the robot falling onto the floor and kicking along it (contacts throughout), joint
positions measured with noise 1e-4 and the windows' start records noisy (positions 1e-4,
velocities 1e-2).

Fitted by `mjbatch_jax.sysid` with fitted starts (squared and Huber loss), with starts fixed at
their noisy records (mujoco.sysid's terms), and by `mujoco.sysid` (its "mujoco" optimiser, the
same windows, the same bounds). Each row: the final cost in one cost function (fixed starts,
chi-square / 2: mujoco.sysid's answer and the truth evaluated in it too), the mean |relative
error| of the 10 values, iterations, CPU seconds (all threads of this process).

  python benchmarks/sysid_contacts.py [--model cheetah] [--samples 1000] [--window 50]
                                      [--iterations 30] [--quick] [--skip-mujoco-sysid]
"""

import argparse
import contextlib
import dataclasses
import importlib
import io
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from _common import RESULTS, machine_info, package_file, run_timed, write_result  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import sysid  # noqa: E402

sys.path.insert(0, str(HERE.parent / "examples"))
import common  # noqa: E402  # pyright: ignore[reportMissingImports]  (progress, --quiet)

XMLS = "_src/dm_control_suite/xmls"
# Each model's unknowns: 4 bodies' masses and 6 joints' dampings.
MODELS = {
  "cheetah": (["torso", "bthigh", "bshin", "fthigh"],
              ["bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot"]),
  "walker": (["torso", "right_thigh", "right_leg", "left_thigh"],
             ["right_hip", "right_knee", "right_ankle", "left_hip", "left_knee", "left_ankle"]),
}
NOISE, START_Q, START_V = 1e-4, 1e-4, 1e-2
BOX = 1.5  # bounds: the guess +- this, in log units


def robot_spec(name: str) -> mujoco.MjSpec:
  """The model with its compiled inertias written into the bodies (no settotalmass), and
  position sensors of its joints (mujoco.sysid reads its measurements by sensor name)."""
  xml = f"{XMLS}/{name}.xml"
  path = package_file("mujoco_playground", xml, [str(HERE.parent / ".venv-rl/bin/python")])
  if path is None:
    raise SystemExit(f"{name}.xml not found (mujoco_playground's {xml})")
  spec = mujoco.MjSpec.from_file(str(path))
  model = spec.compile()
  spec.compiler.settotalmass = -1
  for i in range(1, model.nbody):
    body = spec.body(model.body(i).name)
    body.explicitinertial = True
    body.mass, body.ipos = model.body_mass[i], model.body_ipos[i]
    body.iquat, body.inertia = model.body_iquat[i], model.body_inertia[i]
  for sensor in list(spec.sensors):  # its own sensors measure nothing of the fit
    spec.delete(sensor)
  for j in range(model.njnt):
    spec.add_sensor(name=f"q_{model.joint(j).name}", type=mujoco.mjtSensor.mjSENS_JOINTPOS,
                    objtype=mujoco.mjtObj.mjOBJ_JOINT, objname=model.joint(j).name)
  again = spec.compile()
  np.testing.assert_allclose(again.body_mass, model.body_mass, rtol=1e-12)
  return spec


def record(sim, params, samples: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(states before each control, controls, measured positions after each) of one run."""
  held = rng.uniform(-1, 1, (samples // 10 + 1, sim.nu))
  ctrls = np.repeat(held, 10, axis=0)[:samples]
  start = np.asarray(sim.init_state(1))[0]
  states, _ = mjbatch_jax.rollout(jnp.asarray(start)[None], jnp.asarray(ctrls)[None], params)
  states = np.asarray(states[0])
  before = np.concatenate([start[None], states[:-1]])
  q = states[:, sim.layout.qpos] + rng.normal(0, NOISE, (samples, sim.model.nq))
  noisy = before.copy()
  noisy[:, sim.layout.qpos] += rng.normal(0, START_Q, (samples, sim.model.nq))
  noisy[:, sim.layout.qvel] += rng.normal(0, START_V, (samples, sim.model.nv))
  return noisy, ctrls, q


def fit_mujoco_sysid(spec, model, data, layout, theta0, low, high, iterations: int, name: str):
  """The same fit with MuJoCo's toolbox: the same numbers set on the spec by modifiers, the
  windows as its sequences (started from the records), joint position sensors."""
  mj_sysid = importlib.import_module("mujoco.sysid")
  bodies, joints = MODELS[name]
  mass0 = {b: model.body(b).mass[0] for b in bodies}
  inertia0 = {b: model.body(b).inertia.copy() for b in bodies}

  def masses(spec, p):
    for b, value in zip(bodies, np.exp(p.value), strict=True):
      spec.body(b).mass = value
      spec.body(b).inertia = inertia0[b] * value / mass0[b]

  def dampings(spec, p):
    for j, value in zip(joints, np.exp(p.value), strict=True):
      joint = spec.joint(j)
      damping = np.array(joint.damping)  # (3,): the first is the linear damping
      damping[0] = value
      joint.damping = damping

  params = mj_sysid.ParameterDict()
  k = len(bodies)
  params.add(mj_sysid.Parameter("masses", theta0[:k], low[:k], high[:k], modifier=masses))
  params.add(mj_sysid.Parameter("dampings", theta0[k:], low[k:], high[k:], modifier=dampings))
  dt = model.opt.timestep
  sequences = []
  for w in range(len(data.starts)):
    ctrls = data.ctrls[w]
    times = np.arange(len(ctrls) + 1) * dt
    control = mj_sysid.TimeSeries(times, np.concatenate([ctrls, ctrls[-1:]]))
    # Its rollouts record a step's sensors at the state before the step, tagged with the time
    # after it: the measurement after control t (time (t + 1) dt) goes in at (t + 2) dt.
    sensors = mj_sysid.TimeSeries.from_names(times[1:] + dt, data.measured[w], model)
    initial = mj_sysid.create_initial_state(model, data.starts[w, layout.qpos],
                                            data.starts[w, layout.qvel])
    sequences.append(mj_sysid.ModelSequences(name, spec, f"window{w}", initial, control,
                                             sensors))
  residual_fn = mj_sysid.build_residual_fn(models_sequences=sequences)
  with contextlib.redirect_stdout(io.StringIO()):  # its optimiser prints every iteration
    fitted, result = mj_sysid.optimize(params, residual_fn, optimizer="mujoco", verbose=False,
                                       max_iters=iterations)
  done = max(len(getattr(result, "extras", {}).get("objective", [])) - 1, 0) or iterations
  return np.concatenate([fitted["masses"].value, fitted["dampings"].value]), done


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", choices=sorted(MODELS), default="cheetah")
  parser.add_argument("--samples", type=int, default=1000, help="controls in the recording")
  parser.add_argument("--window", type=int, default=50)
  parser.add_argument("--iterations", type=int, default=30)
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--quick", action="store_true", help="300 samples, 15 iterations")
  parser.add_argument("--skip-mujoco-sysid", action="store_true")
  parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON")
  common.add_progress_args(parser)
  args = parser.parse_args(argv)
  if args.quick:
    args.samples, args.iterations = 300, 15
  if args.samples < args.window or min(args.iterations, args.window) < 1:
    parser.error("--samples >= --window; sizes >= 1")
  spec = robot_spec(args.model)
  model = spec.compile()
  bodies, joints = MODELS[args.model]
  sim = mjbatch_jax.Simulator(model, num_threads=args.threads)
  layout = sim.layout
  parameters = sysid.Parameters(sim, [sysid.Inertia(bodies, form="mass"),
                                      sysid.Field("dof_damping", joints, log=True)])
  truth = parameters.initial
  rng = np.random.default_rng(args.seed)
  off = rng.uniform(0.17, 0.67, truth.size) * rng.choice([-1.0, 1.0], truth.size)
  theta0 = truth + np.sign(off) * np.log1p(np.abs(off))  # each value 17-67% off
  states, ctrls, q = record(sim, parameters.params(truth, 1), args.samples, rng)
  data = sysid.windows(states, ctrls, q, args.window)
  contacts = count_contacts(model, states)
  qpos = layout.qpos

  def residual(s, y, measured):
    return (s[:, qpos] - measured) / NOISE

  low, high = theta0 - BOX, theta0 + BOX
  fitted_starts = np.r_[np.full(model.nv, START_Q), np.full(model.nv, START_V)]
  base = sysid.Problem(parameters, residual, bounds=(low, high), scale=np.full(truth.size, 0.3))
  variants = {
    "mjbatch_jax.sysid: starts fitted": dataclasses.replace(base, start_width=fitted_starts),
    "mjbatch_jax.sysid: starts fitted, Huber": dataclasses.replace(
      base, start_width=fitted_starts, loss="huber"),
    "mjbatch_jax.sysid: starts fixed (mujoco.sysid's terms)": base,
  }

  def fixed_cost(theta) -> float:
    return float(sysid.fit(base, data, np.clip(theta, low, high), 1).costs[0])

  def error(theta) -> float:
    return float(np.mean(np.abs(np.exp(theta - truth) - 1)) * 100)

  rows = []

  def row(name, theta, iterations, cpu, **extra) -> None:
    rows.append({"variant": name, "iterations": iterations, "cpu_s": cpu,
                 "fixed_start_cost": fixed_cost(theta), "error_percent": error(theta), **extra})
    r = rows[-1]
    bar.write(f"{name:55s} cost (starts fixed) {r['fixed_start_cost']:.4g}, error "
              f"{r['error_percent']:6.2f}%, {iterations:2d} iterations, CPU {cpu:7.2f} s "
              + " ".join(f"{k} {v}" for k, v in extra.items()), keep=True)
    bar.update(postfix=name.removeprefix("mjbatch_jax.sysid: "))

  truth_cost = fixed_cost(truth)
  print(f"{args.model}: {args.samples} controls, {len(data.starts)} windows of {args.window}, "
        f"contacts in {contacts:.0%} of the steps; the guess: error {error(theta0):.1f}%, "
        f"the truth's cost {truth_cost:.4g} ({len(data.starts) * args.window * model.nq}"
        " residuals)", flush=True)
  toolbox = importlib.import_module("mujoco.sysid")
  toolbox_runs = not args.skip_mujoco_sysid and hasattr(toolbox, "ParameterDict")
  # A count per fit, between the timed fits (sysid.fit takes no per-iteration callback).
  bar = common.progress(len(variants) + toolbox_runs, "fits", args, unit="fit")
  for name, problem in variants.items():
    begin = time.process_time()
    result = sysid.fit(problem, data, theta0, args.iterations)
    cpu = time.process_time() - begin
    report = sysid.report(problem, data, result)
    row(name, result.theta, result.iterations, cpu, stopped=result.stopped,
        chi2_dof=round(result.chi2_dof, 3), outliers=report.outliers().tolist()[:5],
        least_weight=round(float(result.window_weights.min()), 3))
  if toolbox_runs:
    timing, (theta, done) = run_timed(fit_mujoco_sysid, spec, model, data, layout, theta0, low,
                                      high, args.iterations, args.model)
    row("mujoco.sysid (starts fixed)", theta, done, timing.cpu_s)
  bar.close()
  sim.close()
  write_result(args.out, f"sysid_contacts-{args.model}", {
    "machine": machine_info(argv), "model": args.model, "samples": args.samples,
    "window": args.window,
    "threads": args.threads, "seed": args.seed, "guess_error_percent": error(theta0),
    "truth_cost": truth_cost, "contact_share": contacts, "rows": rows})


def count_contacts(model: mujoco.MjModel, states: np.ndarray) -> float:
  """The share of recorded states with at least one contact."""
  data = mujoco.MjData(model)
  spec = mujoco.mjtState.mjSTATE_INTEGRATION
  touching = 0
  for row in states:
    mujoco.mj_setState(model, data, row, spec)
    mujoco.mj_forward(model, data)
    touching += data.ncon > 0
  return touching / len(states)


if __name__ == "__main__":
  main(sys.argv[1:])
