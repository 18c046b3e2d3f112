"""Identify all 70 inertial parameters of a 7-link arm, and what an excitation can identify.

  python examples/sysid.py [--samples 1000] [--window 50] [--iterations 30] [--threads 2]
                           [--skip-rich] [--skip-mujoco-sysid] [--out FILE]
  python examples/sysid.py --play [--out FILE]   # replay examples/results/sysid.npz
  python examples/sysid.py --processes 2 [...]   # data-parallel (or python -m mjbatch_jax.launch)

The "true" arm (inline below: seven hinge joints hanging from a base, alternating axes) has, per
link, a mass, a centre of mass and a full inertia with tilted principal axes: 70 numbers, as
`sysid.Inertia` maps them (log mass, centre of mass, log radii of gyration, principal frame).
PD position servos drive the joints. The arm holds a pose, then tracks 1000 commands at 100 Hz
(five 2 ms steps each): per joint a multisine of three frequencies in 0.37-1.07 Hz (the seed's
excitation), or of eight in 0.2-4 Hz with 2.5x the amplitude (the rich one). The recording is
the joints' positions (noise 1e-4 rad) and velocities (2e-3 rad/s) after each command.

The fit is `mjbatch_jax.sysid`: windows of 50 commands with their starts fitted (the record
their prior), a weak prior at the guess (0.5 in log mass and log radii, 5 cm, 0.5 rad). It
reports the held-out prediction error (a fresh recording of each kind, open loop), each
number's error, and the identifiability report: joint motion never sees 27 of the 70
directions (the first link turns about a vertical axis), nor a link's mass alone. Then the same
fit with `mujoco.sysid` (its "mujoco" optimiser, the same windows and numbers). --processes N
shards the windows over processes (process 0 prints and saves). Numbers: results/README.md.
"""

import argparse
import contextlib
import functools
import importlib
import io
import os
import sys
import time
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import common  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import distributed, launch, rotations, sysid  # noqa: E402

LINKS = 7
TIMESTEP = 0.002
SUBSTEPS = 5  # physics steps per command: 100 Hz
SETTLE = 200  # commands of holding the pose before the recording
KP = (400.0, 400.0, 200.0, 200.0, 60.0, 30.0, 10.0)
KV = (30.0, 30.0, 12.0, 12.0, 3.0, 1.5, 0.5)
HOME = (0.0, 0.6, 0.0, -0.9, 0.0, 0.5, 0.0)  # the held pose: bent, so gravity loads every link
NOISE_POS, NOISE_VEL = 1e-4, 2e-3  # rad, rad/s
# (frequencies per joint, their band in Hz, peak amplitude shoulder .. wrist in rad)
EXCITATIONS = {"seed": (3, (0.37, 1.07), (0.3, 0.08)), "rich": (8, (0.2, 4.0), (0.75, 0.2))}
# Prior widths of a link's 10 numbers: log m, c (m), log radii of gyration, frame (rad).
WIDTH = np.array([0.5, 0.05, 0.05, 0.05, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
# How far off the guess is, in the same units.
GUESS = np.array([0.3, 0.02, 0.02, 0.02, 0.3, 0.3, 0.3, 0.2, 0.2, 0.2])
BODIES = [f"link{i + 1}" for i in range(LINKS)]


def arm_xml() -> str:
  """Seven links hanging from the base, alternating axes, with tilted principal frames."""
  axes = ["0 0 1", "0 1 0", "1 0 0", "0 1 0", "0 0 1", "1 0 0", "0 1 0"]
  lengths = [0.25, 0.3, 0.25, 0.25, 0.2, 0.15, 0.1]
  masses = [2.0, 1.6, 1.2, 1.0, 0.7, 0.5, 0.3]
  body, close, actuators, pos = "", "", "", "0 0 0"
  for i in range(LINKS):
    length, mass = lengths[i], masses[i]
    com = f"{0.01 * (i % 3):.3f} {-0.01 * (i % 2):.3f} {-0.5 * length:.3f}"
    second = mass * np.array([0.03, 0.045, length / np.sqrt(12)]) ** 2  # a slab-like rod
    tilt = np.asarray(rotations.to_matrix(rotations.exp(
      0.4 * np.array([np.sin(i + 1), np.cos(2 * i + 1), np.sin(3 * i + 2)]))))
    full = tilt @ np.diag(second.sum() - second) @ tilt.T
    inertia = " ".join(f"{v:.8f}" for v in (*np.diag(full), full[0, 1], full[0, 2], full[1, 2]))
    body += f"""
      <body name="link{i + 1}" pos="{pos}">
        <joint name="joint{i + 1}" axis="{axes[i]}" damping="0.3" armature="0.005"/>
        <geom type="capsule" fromto="0 0 0 0 0 {-length}" size="0.03"/>
        <inertial pos="{com}" mass="{mass}" fullinertia="{inertia}"/>"""
    close += "\n      </body>"
    actuators += (f'\n    <position name="servo{i + 1}" joint="joint{i + 1}" kp="{KP[i]}" '
                  f'kv="{KV[i]}"/>')
    pos = f"0 0 {-length}"
  return f"""
<mujoco model="arm7">
  <option timestep="{TIMESTEP}" integrator="implicitfast"><flag contact="disable"/></option>
  <worldbody>{body}{close}
  </worldbody>
  <actuator>{actuators}
  </actuator>
</mujoco>
"""


def version() -> str:
  """The fingerprint saved results carry (not at import: JAX's distributed runtime starts first)."""
  return common.fingerprint(arm_xml(), SUBSTEPS, SETTLE, HOME, NOISE_POS, NOISE_VEL, EXCITATIONS,
                            WIDTH, GUESS)


def multisine(rng: np.random.Generator, samples: int, kind: str) -> np.ndarray:
  """(samples, 7) position commands about HOME: per joint a sum of sines of random frequencies
  in the kind's band and random phases, ramped in over a second, scaled to the joint's peak."""
  count, (f_lo, f_hi), (a_hi, a_lo) = EXCITATIONS[kind]
  times = np.arange(samples) * SUBSTEPS * TIMESTEP
  freqs = rng.uniform(f_lo, f_hi, (count, LINKS))
  phases = rng.uniform(0, 2 * np.pi, (count, LINKS))
  waves = np.sin(2 * np.pi * freqs * times[:, None, None] + phases).sum(axis=1)
  waves = np.clip(times / 1.0, 0.0, 1.0)[:, None] * (waves - waves[0])
  peak = np.geomspace(a_hi, a_lo, LINKS)
  return np.asarray(HOME) + peak * waves / np.max(np.abs(waves), axis=0)


class Arm:
  """The arm's simulator, its 70 unknowns and its settled start."""

  def __init__(self, threads: int):
    self.model = mujoco.MjModel.from_xml_string(arm_xml())
    self.sim = mjbatch_jax.Simulator(self.model, num_threads=threads)
    self.layout = self.sim.layout
    self.parameters = sysid.Parameters(self.sim, [sysid.Inertia(BODIES)])
    self.theta_true = self.parameters.initial.reshape(LINKS, 10)
    hold = np.broadcast_to(HOME, (1, SETTLE, LINKS))
    self.start = self.simulate(self.theta_true, hold, self.sim.init_state(1).at[
      :, self.layout.qpos].set(HOME)[0])[0, -1]

  def simulate(self, theta, ctrls, start=None) -> np.ndarray:
    """States (K, T, nstate) of one parameter set under commands (K, T, 7) from start (the
    settled one)."""
    rows = jnp.broadcast_to(self.start if start is None else start, (len(ctrls), self.sim.nstate))
    return np.asarray(mjbatch_jax.rollout(rows, jnp.asarray(ctrls), self.parameters.params(
      np.ravel(theta), len(ctrls)), nstep=SUBSTEPS)[0])

  def record(self, ctrls: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Noisy joint positions and velocities (K, T, 7) after each command of ctrls (K, T, 7)."""
    states = self.simulate(self.theta_true, ctrls)
    q, v = states[..., self.layout.qpos], states[..., self.layout.qvel]
    return q + rng.normal(0, NOISE_POS, q.shape), v + rng.normal(0, NOISE_VEL, v.shape)

  @functools.cached_property
  def problem(self) -> sysid.Problem:  # one for every fit: they compile once
    qpos, qvel = self.layout.qpos, self.layout.qvel

    def residual(states, sensordata, measured):  # one window, in noise units
      return jnp.concatenate([(states[:, qpos] - measured["q"]) / NOISE_POS,
                              (states[:, qvel] - measured["v"]) / NOISE_VEL], axis=-1)

    return sysid.Problem(self.parameters, residual, nstep=SUBSTEPS, prior_width=np.tile(
      WIDTH, LINKS), start_width=np.repeat([NOISE_POS, NOISE_VEL], LINKS))

  def windows(self, ctrls, q, v, window: int) -> sysid.Windows:
    """Window w starts from the recorded state before its first command."""
    before = np.repeat(np.asarray(self.start)[None], len(ctrls), axis=0)
    before[1:, self.layout.qpos], before[1:, self.layout.qvel] = q[:-1], v[:-1]
    return sysid.windows(before, ctrls, {"q": q, "v": v}, window)

  def prediction(self, theta, ctrls, q) -> float:
    """RMS (rad) of the open-loop simulated minus the recorded positions."""
    simulated = self.simulate(theta, ctrls[None])[0, :, self.layout.qpos]
    return float(np.sqrt(np.mean((simulated - q) ** 2)))


def standard(arm: Arm, theta) -> np.ndarray:
  """(7, 10) m, c and the inertia about c in the link frame (Ixx Iyy Izz Ixy Ixz Iyz): what the
  comparison with the truth uses, free of the parametrisation."""
  values = {k: np.asarray(v) for k, v in arm.parameters.values(np.ravel(theta)).items()}
  rot = np.asarray(rotations.to_matrix(values["body_iquat"]))
  full = rot @ (values["body_inertia"][..., :, None] * rot.swapaxes(-1, -2))
  return np.concatenate([values["body_mass"][:, None], values["body_ipos"],
                         full[:, [0, 1, 2, 0, 0, 1], [0, 1, 2, 1, 2, 2]]], axis=-1)


def errors(arm: Arm, theta) -> dict[str, np.ndarray]:
  """Per link: mass (%), centre of mass (mm), inertia (Frobenius, % of the truth's); and every
  standard number's error (m %, c mm, inertia % of the link's largest principal moment)."""
  fit, true = standard(arm, theta), standard(arm, arm.theta_true)

  def full(s):
    return np.stack([s[:, [4, 7, 8]], s[:, [7, 5, 9]], s[:, [8, 9, 6]]], axis=1)

  largest = np.max(arm.model.body_inertia[1:], axis=1, keepdims=True)
  diff = fit - true
  return {"mass": 100 * (fit[:, 0] / true[:, 0] - 1),
          "com": 1000 * np.linalg.norm(diff[:, 1:4], axis=1),
          "inertia": 100 * np.linalg.norm(full(fit) - full(true), axis=(1, 2))
          / np.linalg.norm(full(true), axis=(1, 2)),
          "every": np.concatenate([100 * diff[:, :1] / true[:, :1], 1000 * diff[:, 1:4],
                                   100 * diff[:, 4:] / largest], axis=1)}


def fit(arm: Arm, dist, ctrls, q, v, theta0, window: int, iterations: int) -> dict[str, Any]:
  """The library's fit and identifiability report on one recording."""
  problem, data = arm.problem, arm.windows(ctrls, q, v, window)
  result = sysid.fit(problem, data, np.ravel(theta0), iterations, dist=dist)
  report = sysid.report(problem, data, result, dist=dist)
  later = slice(1 if result.iterations > 1 else 0, None)  # the first compiles
  return {"theta": result.theta.reshape(LINKS, 10), "costs": result.costs,
          "iterations": result.iterations, "seconds_first": result.wall[0],
          "seconds_per_iteration": float(np.median(result.wall[later])),
          "cpu_per_iteration": float(np.median(result.cpu[later])),
          "singular": report.singular, "rank": report.rank, "windows": len(data.starts),
          "spread": (report.std / report.prior_width).reshape(LINKS, 10),
          "summary": report.summary(most=3)}


def fit_mujoco_sysid(arm: Arm, ctrls, q, v, theta0, window: int, iterations: int,
                     bar: common.Progress | None = None) -> tuple[np.ndarray, int]:
  """The same fit with MuJoCo's toolbox: the same 10 numbers per link set on an MjSpec, the same
  windows as its sequences, joint position and velocity sensors as the measurements. bar: a
  common.Progress its iterations go to."""
  mj_sysid = importlib.import_module("mujoco.sysid")
  xml = arm_xml().replace("</actuator>", "</actuator>\n  <sensor>" + "".join(
    f'<jointpos name="q{i + 1}" joint="joint{i + 1}"/>'
    f'<jointvel name="v{i + 1}" joint="joint{i + 1}"/>'
    for i in range(LINKS)) + "</sensor>")  # named: its TimeSeries maps data by name
  spec = mujoco.MjSpec.from_string(xml)
  model = spec.compile()
  params = mj_sysid.ParameterDict()
  for i in range(LINKS):

    def modifier(spec, p, i=i):  # numpy and MuJoCo's functions: it runs for every model
      mass, (com, radii, frame) = np.exp(p.value[0]), np.split(p.value[1:], 3)
      second, quat, rot = mass * np.exp(2 * radii), np.zeros(4), np.zeros(9)
      angle = np.linalg.norm(frame)
      mujoco.mju_axisAngle2Quat(quat, frame / max(angle, 1e-300), angle)
      mujoco.mju_quat2Mat(rot, quat)
      full = rot.reshape(3, 3) @ np.diag(second.sum() - second) @ rot.reshape(3, 3).T
      body = spec.body(BODIES[i])
      body.mass, body.ipos = mass, com
      body.fullinertia = full[[0, 1, 2, 0, 0, 1], [0, 1, 2, 1, 2, 2]]

    params.add(mj_sysid.Parameter(BODIES[i], theta0[i], theta0[i] - 4 * WIDTH,
                                  theta0[i] + 4 * WIDTH, modifier=modifier))
  data = arm.windows(ctrls, q, v, window)
  sequences = []
  for w in range(len(data.starts)):
    # Its rollouts step once per control: hold each command for the five substeps.
    per_step = np.repeat(data.ctrls[w], SUBSTEPS, axis=0)
    times = np.arange(len(per_step) + 1) * TIMESTEP
    control = mj_sysid.TimeSeries(times, np.concatenate([per_step, per_step[-1:]]))
    measured = np.stack([data.measured["q"][w], data.measured["v"][w]], -1).reshape(window, -1)
    # Its rollouts record a step's sensors at the state before the step, tagged with the time
    # after it: a measurement of the state at t goes in at t + one step.
    sensors = mj_sysid.TimeSeries.from_names(times[SUBSTEPS::SUBSTEPS] + TIMESTEP, measured,
                                             model)
    initial = mj_sysid.create_initial_state(model, data.starts[w, arm.layout.qpos],
                                            data.starts[w, arm.layout.qvel])
    sequences.append(mj_sysid.ModelSequences("arm7", spec, f"window{w}", initial, control,
                                             sensors))
  residual_fn = mj_sysid.build_residual_fn(models_sequences=sequences)
  # Its optimiser calls iter_callback with the iterations so far, the initial point first.
  counted = {} if bar is None else {"iter_callback": lambda trace: bar.to(max(len(trace) - 1, 0))}
  with contextlib.redirect_stdout(io.StringIO()):  # its optimiser prints every iteration
    fitted, result = mj_sysid.optimize(params, residual_fn, optimizer="mujoco", verbose=False,
                                       max_iters=iterations, **counted)
  done = max(len(getattr(result, "extras", {}).get("objective", [])) - 1, 0) or iterations
  return np.stack([fitted[b].value for b in BODIES]), done


def print_heldout(heldout: dict, kinds: list[str]) -> None:
  for name, values in heldout.items():
    print(f"held-out prediction error, {name:5s}: " + ", ".join(
      f"{k} recording {e:.5f} rad RMS" for k, e in zip(kinds, values, strict=True)))


def print_tables(arm: Arm, theta0, fits: dict) -> None:
  numbers = [name.split(".")[1] for name in arm.parameters.names[:10]]  # a link's 10 numbers
  columns = {"guess": theta0, **{k: f["theta"] for k, f in fits.items()}}
  table = {k: errors(arm, t) for k, t in columns.items()}
  print(f"parameter errors vs the truth, per link ({' | '.join(columns)}):")
  print("  link " + "".join(f"{'mass%  com mm  inert%':>22s}" for _ in columns))
  for i in range(LINKS):
    print(f"  {i + 1:4d}  " + "".join(f"{e['mass'][i]:+7.1f} {e['com'][i]:6.1f} "
                                      f"{e['inertia'][i]:7.1f} " for e in table.values()))
  for name, e in table.items():
    print(f"every parameter's error, {name} (m %, c mm, inertia % of the largest moment):")
    print("  link" + "".join(f"{n:>7s}" for n in "m cx cy cz Ixx Iyy Izz Ixy Ixz Iyz".split()))
    for i in range(LINKS):
      print(f"  {i + 1:4d}" + "".join(f"{x:+7.1f}" for x in e["every"][i]))
  rank = int(fits[list(fits)[-1]]["rank"])
  print(f"identifiable: {rank} of 70 directions (structural rank of the Jacobian; the other "
        f"{70 - rank} combinations never change the joints' motion)")
  for k, f in fits.items():
    weak = f["spread"] > 0.5
    print(f"{k} excitation: {int(np.sum(f['singular'] >= 10))} of the {int(f['rank'])} "
          f"identifiable directions pinned to a tenth of the prior or better (their "
          f"information's square roots in prior widths {f['singular'][0]:.2g} .. "
          f"{f['singular'][rank - 1]:.2g}); {int(weak.sum())} of the 70 numbers left mostly to "
          "the prior (posterior spread > half the prior's), by link:")
    print("  " + "; ".join(f"{name} {''.join(str(i + 1) for i in np.flatnonzero(weak[:, j]))}"
                           for j, name in enumerate(numbers) if weak[:, j].any()))
    # log m's prior width is 0.5: its posterior spread times that is the mass's relative spread.
    print("  posterior spread of each link's mass: "
          + " ".join(f"{100 * WIDTH[0] * x:.0f}%" for x in f["spread"][:, 0]))


def solve(args: argparse.Namespace) -> dict:
  distributed.initialize()  # before any JAX computation: joins the launcher's processes
  count, devices = args.samples // args.window, jax.device_count()
  if count % devices:
    raise SystemExit(f"--samples / --window = {count} windows must be a multiple of the "
                     f"{devices} CPU devices of the {jax.process_count()} process(es)")
  leader = jax.process_index() == 0
  if not leader:  # every process computes the same report; process 0 alone prints and saves
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (until the process ends)
  arm = Arm(args.threads)
  dist = distributed.setup(arm.model, count, num_threads=args.threads)
  rng = np.random.default_rng(args.seed)
  kinds = ["seed"] if args.skip_rich else ["seed", "rich"]
  # A recording to fit and a held-out one of each kind.
  commands = {(k, part): multisine(rng, args.samples, k) for k in kinds for part in ("fit", "test")}
  q, v = arm.record(np.stack(list(commands.values())), rng)
  recorded = {key: (q[i], v[i]) for i, key in enumerate(commands)}
  theta0 = arm.theta_true + rng.normal(0, 1, arm.theta_true.shape) * GUESS
  print(f"arm: {LINKS} links, {10 * LINKS} parameters; {args.samples} commands at "
        f"{1 / (SUBSTEPS * TIMESTEP):.0f} Hz, {SUBSTEPS} substeps each, windows of "
        f"{args.window}; {arm.sim.num_threads} threads; {jax.process_count()} process(es), "
        f"{dist.num_local} windows here")
  fits, begin = {}, time.perf_counter()
  # sysid.fit takes no per-iteration callback: the bar counts whole fits.
  with common.progress(len(kinds), "LM fits", args, unit="fit", quiet=not leader) as bar:
    for kind in kinds:
      fits[kind] = f = fit(arm, dist, commands[kind, "fit"], *recorded[kind, "fit"], theta0,
                           args.window, args.iterations)
      bar.write(f"{kind} excitation: cost {f['costs'][0]:.4g} -> {f['costs'][-1]:.4g} (noise "
                f"alone: {2 * LINKS * args.samples / 2:.4g}) in {f['iterations']} LM iterations; "
                f"per iteration {f['seconds_per_iteration']:.2f} s wall, "
                f"{f['cpu_per_iteration']:.2f} s CPU ({f['windows']} windows); the first "
                f"{f['seconds_first']:.1f} s with compilation", keep=True)
      bar.update(postfix=f"{kind}: {f['iterations']} iterations")
  seconds = time.perf_counter() - begin
  thetas = {"guess": theta0, **{k: f["theta"] for k, f in fits.items()}}
  heldout = {name: [arm.prediction(theta, commands[k, "test"], recorded[k, "test"][0])
                    for k in kinds] for name, theta in thetas.items()}
  print_heldout(heldout, kinds)
  before, after = heldout["guess"][0], heldout["seed"][0]
  print(f"held-out prediction error before: {before:.5f} rad RMS")
  print(f"held-out prediction error after:  {after:.5f} rad RMS ({before / after:.0f}x lower, "
        f"seed excitation; encoder noise {NOISE_POS:g} rad); fits {seconds:.1f} s wall in all")
  print_tables(arm, theta0, fits)
  print("a link's mass alone is not among the identifiable combinations (joint motion sees it "
        "with its neighbours' first moments), so no excitation pins every mass")
  print(f"the seed fit's report (the first 3 unidentifiable directions):\n"
        f"{fits['seed']['summary']}")
  mass = {k: float(np.abs(errors(arm, t)["mass"]).mean()) for k, t in thetas.items()}
  meta: dict[str, Any] = {"heldout_before": before, "heldout_after": after, "seconds": seconds,
                          "mass_error": mass, "heldout": heldout, "kinds": kinds, **{
                            key: {k: f[key] for k, f in fits.items()} for key in (
                              "iterations", "rank", "cpu_per_iteration", "seconds_per_iteration")}}
  arrays: dict[str, Any] = {"theta_true": arm.theta_true, "theta0": theta0}
  mj_sysid = importlib.import_module("mujoco.sysid")  # it imports empty without its packages
  why = "it runs in one process" if jax.process_count() > 1 else None if hasattr(
    mj_sysid, "ParameterDict") else "pip install 'mujoco-core[sysid]==4.0.0' for it"
  if why and not args.skip_mujoco_sysid:
    print(f"mujoco.sysid skipped: {why}")
  elif not args.skip_mujoco_sysid:
    watch = common.Stopwatch()
    with watch(), common.progress(args.iterations, "mujoco.sysid", args) as bar:
      theta_mj, done = fit_mujoco_sysid(arm, commands["seed", "fit"], *recorded["seed", "fit"],
                                        theta0, args.window, args.iterations, bar)
    after_mj = arm.prediction(theta_mj, commands["seed", "test"], recorded["seed", "test"][0])
    mass["mujoco.sysid"] = float(np.abs(errors(arm, theta_mj)["mass"]).mean())
    ours = fits["seed"]
    print(f"mujoco.sysid (seed excitation, the 70 numbers; its windows start from the record): "
          f"held-out prediction error {after_mj:.5f} rad RMS, mean |mass error| "
          f"{mass['mujoco.sysid']:.1f}%, {done} iterations of {watch.wall / done:.2f} s wall, "
          f"{watch.cpu / done:.2f} s CPU; mjbatch_jax: {after:.5f} rad RMS, {mass['seed']:.1f}%, "
          f"{ours['iterations']} iterations of {ours['seconds_per_iteration']:.2f} s wall, "
          f"{ours['cpu_per_iteration']:.2f} s CPU")
    meta.update(heldout_mujoco_sysid=after_mj, iterations_mujoco_sysid=done,
                seconds_mujoco_sysid=watch.wall, cpu_mujoco_sysid=watch.cpu)
    arrays["mujoco_sysid_theta"] = theta_mj
  for k, f in fits.items():
    arrays.update({f"{k}_{name}": f[name] for name in ("theta", "costs", "singular", "spread")})
  for (k, part), (q, v) in recorded.items():
    arrays.update({f"{k}_{part}_q": q, f"{k}_{part}_v": v, f"{k}_{part}_ctrl": commands[k, part]})
  if leader:
    common.save_result(args.out, "sysid", arrays, meta, version=version())
    print(f"saved to {args.out}")
  dist.close()
  arm.sim.close()
  return meta


def play(args: argparse.Namespace) -> dict:
  """Re-simulate the held-out recordings with the saved fits; print the tables and plot."""
  theta = (LINKS, 10)
  arrays, meta = common.load_result(args.out, "sysid", version=version(), keys={
    "theta_true": theta, "theta0": theta})
  kinds = meta.get("kinds")  # the meta is no part of the version: a fit's own record
  if (not isinstance(kinds, list) or kinds[:1] != ["seed"] or not set(kinds) <= {"seed", "rich"}
      or any(not isinstance(meta.get(key), dict) or not names <= meta[key].keys() for key, names in
             (("rank", set(kinds)), ("heldout", {"guess", *kinds})))):
    raise SystemExit(f"{args.out}: its meta's kinds, ranks or held-out errors are not a fit's "
                     f"(kinds {kinds!r}); solve again")
  arm = Arm(args.threads)  # its model sizes the recordings: the XML compiles once
  common.check_arrays(args.out, arrays, {f"{k}_{name}": shape for k in kinds for name, shape in (
    ("theta", theta), ("singular", (None,)), ("spread", theta),
    ("test_ctrl", (f"N_{k}", arm.model.nu)), ("test_q", (f"N_{k}", arm.model.nq)))})
  fits: dict[str, dict[str, Any]] = {k: {"rank": meta["rank"][k], **{
    name: arrays[f"{k}_{name}"] for name in ("theta", "singular", "spread")}} for k in kinds}
  thetas = {"guess": arrays["theta0"], **{k: f["theta"] for k, f in fits.items()}}
  heldout = {name: [arm.prediction(theta, arrays[f"{k}_test_ctrl"], arrays[f"{k}_test_q"])
                    for k in kinds] for name, theta in thetas.items()}
  print_heldout(heldout, kinds)
  for name, values in heldout.items():
    if not np.allclose(values, meta["heldout"][name], rtol=1e-9, atol=0):
      raise SystemExit(f"replayed errors {values} of {name} differ from the saved "
                       f"{meta['heldout'][name]}")
  print_tables(arm, arrays["theta0"], fits)
  plt = common.pyplot()
  if plt is not None:
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
    kind, joint = kinds[-1], 3
    ctrls, q = arrays[f"{kind}_test_ctrl"], arrays[f"{kind}_test_q"]
    t = (np.arange(len(q)) + 1) * SUBSTEPS * TIMESTEP
    axes[0].plot(t, q[:, joint], "k.", ms=2, label="recorded")
    for name, theta in thetas.items():
      axes[0].plot(t, arm.simulate(theta, ctrls[None])[0, :, arm.layout.qpos][:, joint],
                   label=name)
    axes[0].set(xlabel="t (s)", ylabel=f"joint {joint + 1} (rad)",
                title=f"held-out {kind} recording, open loop")
    width = 0.8 / len(thetas)
    for i, (name, theta) in enumerate(thetas.items()):
      axes[1].bar(np.arange(LINKS) + 1 + (i - len(thetas) / 2 + 0.5) * width,
                  np.abs(errors(arm, theta)["mass"]), width, label=name)
    axes[1].set(xlabel="link", ylabel="|mass error| (%)", title="identified masses")
    for name, f in fits.items():
      axes[2].semilogy(f["singular"], ".-", label=f"{name} excitation")
    axes[2].axhline(10, color="k", lw=0.8, ls=":")
    axes[2].set(xlabel="direction of the 70 numbers", ylabel="sqrt(information) per prior width",
                title="identifiability (dotted: pinned to a tenth of the prior)")
    for ax in axes:
      ax.legend(fontsize=8)
    common.save_figure(fig, args.out.with_suffix(".png"), dpi=90)
  arm.sim.close()
  return {name: values[0] for name, values in heldout.items()}


def main() -> None:
  parser = argparse.ArgumentParser(description="Inertial identification of a 7-link arm.")
  common.add_standard_args(parser, "sysid", threads=2)
  parser.add_argument("--samples", type=common.int_in(100, 10**6, "commands per recording"),
                      default=1000, help="commands per recording (at least 100: 1 s of ramp)")
  parser.add_argument("--window", type=common.int_in(1, 10**6, "samples per window"),
                      default=50, help="samples per shooting window")
  parser.add_argument("--iterations", type=common.int_in(1, 10**4, "most LM iterations"),
                      default=30, help="most Levenberg-Marquardt iterations")
  parser.add_argument("--skip-rich", action="store_true", help="fit the seed's excitation only")
  parser.add_argument("--skip-mujoco-sysid", action="store_true",
                      help="fit with mjbatch_jax only, not also with mujoco.sysid")
  parser.add_argument("--processes", type=common.int_in(1, 1024, "local processes"), default=1,
                      help="fit over this many local processes (python -m mjbatch_jax.launch)")
  args = common.parse(parser)
  if args.processes > 1 and args.play:
    parser.error("--play replays in one process: drop --processes")
  if args.samples % args.window:
    parser.error(f"--samples must be a multiple of --window ({args.window}), got {args.samples}")
  if args.processes > 1 and launch.ENV_NUM_PROCESSES not in os.environ:
    # Each process runs this script again with the same arguments (the launcher ignores
    # --processes).
    sys.exit(launch.launch(args.processes, [__file__, *sys.argv[1:]]))
  result = play(args) if args.play else solve(args)
  if jax.process_index() == 0:
    common.print_summary(result)


if __name__ == "__main__":
  main()
