"""The Unitree G1 jumps forward and lands on its feet: a program of servo targets found by CEM.

  python examples/g1_jump.py [--samples 40] [--iterations 30] [--threads 2]
  python examples/g1_jump.py --play [--robust 32]   # replay the saved plan: metrics, plot, GIF

The 29 position servos' targets, both sides alike, go from standing through four poses of six
synergies (hip, knee, ankle and waist pitch, shoulder pitch, elbow), each reached linearly in its
own time, and back to standing (3 s). Started as crouch, push, flight and landing, the saved plan
uses them as crouch, half rise, deep crouch and push, taking off on the way to the last.
control.cem_search searches the 28 numbers, each candidate run open loop on the nominal robot
and SEARCH_ROBOTS "search" robots of common.g1_robots in one rollout call; the plan is the
best candidate or one of the last means, whichever passes on most "validation" robots. A robot
passes (jump_metrics, from each step's floor contacts) when it lands (a flight of MIN_FLIGHT or
more, then only the feet on the floor, both), is GOAL_DISTANCE ahead and has the pelvis above
PELVIS_UPRIGHT UPRIGHT_GOAL_S after its last dip; the robust share counts "evaluation" robots.
"""

import dataclasses
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")  # --play renders headless

import common  # noqa: E402
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import control, ensemble, motion  # noqa: E402

NSTEP, KNOT_S, KNOTS = 10, 0.02, 150  # 3 s of knots of 10 physics steps
SYNERGIES = ("hip_pitch", "knee", "ankle_pitch", "waist_pitch", "shoulder_pitch", "elbow")
PHASES = ("crouch", "push", "flight", "land")
# Where the search starts (an earlier search's end): per phase, targets (rad) and time to them (s).
PROGRAM = np.array([[-1.50, 1.33, -0.73, 0.61, 0.99, 0.62, 0.324],
                    [-0.59, 0.12, -0.40, 0.41, -1.56, 0.23, 0.177],
                    [-1.88, 1.54, -0.49, 0.37, -0.22, 0.96, 0.162],
                    [-0.78, 1.06, -0.27, 0.59, 0.29, -0.19, 0.380]])
SPREAD = np.r_[[0.25] * len(SYNERGIES), 0.05]  # CEM's first standard deviations, per phase
MIN_PHASE_S, MAX_PHASE_S, RAMP_S = 0.06, 0.8, 0.5  # s; RAMP_S: from landing to standing
PELVIS_UPRIGHT, MIN_FLIGHT, GOAL_DISTANCE, UPRIGHT_GOAL_S = 0.6, 0.1, 0.5, 1.0  # m, s, m, s
# The search's score per robot: metres forward and seconds in the air (capped: landing matters
# more than going further), shares of knots with a body other than the feet on the floor and,
# over the last STAND_S, with the pelvis low, and its mean tilt (1 - cos) there.
DISTANCE_CAP, FLIGHT_CAP, STAND_S = 0.75, 0.15, 1.2
WEIGHTS = {"distance": 20.0, "flight": 10.0, "touch": 100.0, "low": 20.0, "tilt": 20.0}
# Robots each candidate runs on; the last means the plan is chosen from, and on how many robots.
SEARCH_ROBOTS, CHOICES, VALIDATION_ROBOTS = 5, 5, 16


@dataclasses.dataclass(frozen=True)
class JumpConfig:
  """What the solve depends on besides the model and the constants above."""
  samples: int = 40
  iterations: int = 30
  seed: int = 0


def load_model(path) -> tuple[mujoco.MjModel, motion.SynergyProgram, np.ndarray]:
  """The G1 scene with floor-contact sensors, the jump's program (a flat z: (KNOTS, nu) servo
  targets from standing, each phase's reached linearly over its duration, then standing's again
  over RAMP_S), the sensors' slots."""
  model = common.g1_scene(path)
  if model.nkey == 0:
    raise SystemExit("expected a standing keyframe, as the Unitree G1 has")
  program = motion.SynergyProgram(common.g1_synergies(model, SYNERGIES), model.key_ctrl[0],
                                  KNOT_S, frames=KNOTS, ramp_s=RAMP_S, interpolation="linear",
                                  ctrlrange=model.actuator_ctrlrange)
  return model, program, common.g1_floor_columns(model)


def search_score(slots, sim, start, states, sensors):
  """Each run's score (lower is better) from its knots' states and floor contacts."""
  floor, qpos = sensors[..., slots], states[..., sim.layout.qpos]
  robot, feet = floor[..., 2], floor[..., 0] + floor[..., 1]
  stand = slice(-round(STAND_S / KNOT_S), None)
  tilt = 2 * (qpos[..., stand, 4] ** 2 + qpos[..., stand, 5] ** 2)  # 1 - cos, from the quaternion
  terms = {"distance": -jnp.minimum(qpos[..., -1, 0] - start[sim.layout.qpos][0], DISTANCE_CAP),
           "flight": -jnp.minimum(jnp.sum(robot == 0, -1) * KNOT_S, FLIGHT_CAP),
           "touch": jnp.mean(robot > feet, -1),
           "low": jnp.mean(qpos[..., stand, 2] < PELVIS_UPRIGHT, -1), "tilt": jnp.mean(tilt, -1)}
  return jnp.sum(jnp.stack([WEIGHTS[name] * value for name, value in terms.items()]), axis=0)


def solve(program, slots, sim, start, config: JumpConfig) -> control.CEMSearchResult:
  """CEM over programs, each run on the nominal robot and fresh search robots every iteration."""
  ens, count = common.g1_robots(sim), SEARCH_ROBOTS + 1

  def objective(z, iteration):
    params = ens.params("search", SEARCH_ROBOTS, iteration=iteration)
    params = jax.tree.map(lambda a: jnp.tile(a, (z.shape[0],) + (1,) * (a.ndim - 1)), params)
    ctrls = jnp.repeat(jax.vmap(program)(z), count, 0)
    states, sensors = mjbatch_jax.rollout(jnp.broadcast_to(start, (len(ctrls), len(start))),
                                          ctrls, params, nstep=NSTEP)
    return search_score(slots, sim, start, states, sensors).reshape(-1, count).mean(-1)

  lo = np.tile(np.r_[[-np.inf] * len(SYNERGIES), MIN_PHASE_S], len(PHASES))
  hi = np.tile(np.r_[[np.inf] * len(SYNERGIES), MAX_PHASE_S], len(PHASES))
  return common.cem_with_progress(
    objective, PROGRAM.ravel(), np.tile(SPREAD, len(PHASES)), label="CEM",
    iterations=config.iterations, key=jax.random.key(config.seed), num_samples=config.samples,
    lower=lo, upper=hi, smoothing=0.2)


def jump_metrics(qpos: np.ndarray, floor: np.ndarray, origin: np.ndarray, dt: float) -> dict:
  """A replay's numbers from each physics step's qpos and floor counts; origin: the start's x, y."""
  done = motion.landing(floor, qpos[:, 2], dt, min_flight=MIN_FLIGHT,
                        upright_height=PELVIS_UPRIGHT)
  landed = done.landed
  out = {"distance_m": float(qpos[-1, 0] - origin[0]), "flight_s": done.flight_s,
         "apex_m": float(qpos[:, 2].max()), "takeoff_s": done.takeoff_s,
         "touchdown_s": done.touchdown_s, "landed": landed, "upright_s": done.upright_s,
         "final_height_m": float(qpos[-1, 2]), "drift_m": float(qpos[-1, 1] - origin[1])}
  out["passed"] = bool(landed and out["distance_m"] >= GOAL_DISTANCE
                       and out["upright_s"] >= UPRIGHT_GOAL_S)
  return out


def replay(slots, sim, start, ctrls, params) -> tuple[list[dict], np.ndarray]:
  """The metrics of ctrls on each robot of params, and row 0's states at every physics step."""
  states, sensors = control.open_loop(params, start, jnp.asarray(ctrls), NSTEP)
  qpos, floor = np.asarray(states[..., sim.layout.qpos]), np.asarray(sensors[..., slots])
  origin, dt = np.asarray(start[sim.layout.qpos][:2]), sim.model.opt.timestep
  return ([jump_metrics(q, f, origin, dt) for q, f in zip(qpos, floor, strict=True)],
          np.asarray(states[0]))


def choose(program, slots, sim, start, result: control.CEMSearchResult) -> jax.Array:
  """The search's candidate that passes on most validation robots (ties: nominal, distance)."""
  params = common.g1_robots(sim).params("validation", VALIDATION_ROBOTS)
  scores = []
  for z in (result.best, *result.means[-CHOICES:, 0]):
    metrics, _ = replay(slots, sim, start, program(z), params)
    scores.append((sum(m["passed"] for m in metrics[1:]), metrics[0]["passed"],
                   np.mean([m["distance_m"] for m in metrics]), z))
    print(f"validation: {scores[-1][0]} of {VALIDATION_ROBOTS} pass", flush=True)
  return max(scores, key=lambda s: s[:3])[3]


def summarise(metrics: list[dict]) -> dict:
  """The nominal robot's metrics and the shares of the randomised ones that pass and land."""
  passed = ensemble.evaluate(metrics, lambda m: m["passed"])
  landed = ensemble.evaluate(metrics, lambda m: m["landed"])
  print(f"robust: {passed} (landed: {landed.passing} of {landed.robots})")
  return {**metrics[0], "robust_robots": passed.robots, "robust_share": passed.share,
          "robust_landed_share": landed.share,
          "robust_min_distance_m": min(m["distance_m"] for m in metrics[1:])}


def plot_and_video(args, model, sim, rows: np.ndarray, summary: dict) -> None:
  qpos, t = rows[:, sim.layout.qpos], model.opt.timestep * np.arange(1, len(rows) + 1)
  targets = {n: rows[:, sim.layout.ctrl][:, model.actuator(f"left_{n}_joint").id]
             for n in ("hip_pitch", "knee", "ankle_pitch")}
  common.plot_series(args.out.with_suffix(".png"), t, {
    "pelvis forward (m)": {"x": qpos[:, 0] - qpos[0, 0]}, "servo targets (rad)": targets,
    "pelvis height (m)": {"z": qpos[:, 2], "upright threshold": np.full(len(t), PELVIS_UPRIGHT)}},
    title=f"G1 jump: {summary['distance_m']:.2f} m, flight {summary['flight_s']:.2f} s")
  print(common.render(model, rows[::2 * NSTEP], args.out.with_suffix(".gif"), 1 / (2 * KNOT_S),
                      track_body="pelvis", distance=2.5, azimuth=90.0))


def main(argv=None) -> dict:
  parser = common.example_parser("g1_jump", "Unitree G1: a forward jump by CEM.", threads=2,
                                 robot="unitree_g1")
  flags = {"samples": (4, 4096, "CEM candidates"), "iterations": (0, 4096, "CEM iterations")}
  common.config_flags(parser, JumpConfig(), flags)
  parser.add_argument("--robust", type=common.int_in(1, 4096, "evaluation robots"), default=32)
  args = common.parse(parser, argv)
  config = common.config_from(args, JumpConfig(seed=args.seed), flags)
  model, jump, slots = load_model(args.model)
  version = common.model_fingerprint(model, config, PROGRAM.tolist(), SPREAD.tolist(), WEIGHTS, (
    SYNERGIES, NSTEP, KNOT_S, KNOTS, RAMP_S, MIN_PHASE_S, MAX_PHASE_S, PELVIS_UPRIGHT, MIN_FLIGHT,
    GOAL_DISTANCE, UPRIGHT_GOAL_S, DISTANCE_CAP, FLIGHT_CAP, STAND_S, SEARCH_ROBOTS, CHOICES,
    VALIDATION_ROBOTS))
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    start = sim.init_state(1)[0].at[sim.layout.qpos].set(model.key_qpos[0])  # at rest, standing
    start = start.at[sim.layout.ctrl].set(model.key_ctrl[0])
    if args.play:
      arrays, saved = common.load_result(args.out, "g1_jump", version, {
        "program": (None,), "ctrls": (None, model.nu)}, config=config)
      program, ctrls = arrays["program"], arrays["ctrls"]
      head = {key: saved[key] for key in ("solve_wall_s", "best_value")}
    else:
      begin = time.perf_counter()
      result = solve(jump, slots, sim, start, config)
      program = choose(jump, slots, sim, start, result)
      ctrls = np.asarray(jump(program))
      head = {"solve_wall_s": time.perf_counter() - begin, "best_value": float(result.best_value)}
    metrics, rows = replay(slots, sim, start, ctrls,
                           common.g1_robots(sim).params("evaluation", args.robust))
  summary = {**head, **summarise(metrics)}
  if args.play:
    plot_and_video(args, model, sim, rows, summary)
  else:
    common.save_result(args.out, "g1_jump", {"program": program, "ctrls": ctrls},
                       {**summary, "config": config}, version)
    common.write_json(args.out.with_suffix(".json"), summary)
    print(f"saved to {args.out}; per phase {PHASES}, targets (rad) and duration (s):\n"
          f"{np.array2string(np.asarray(program).reshape(len(PHASES), -1), precision=3)}")
  common.print_summary(summary)
  return summary


if __name__ == "__main__":
  main()
