"""Whole-body motion tracking on the Unitree G1 by iLQR (mjbatch_jax.control.ilqr).

  python examples/g1_tracking.py [--frames 200] [--iterations 40] [--threads 0]
  python examples/g1_tracking.py --play      # replay the saved plan: metrics, plot, GIF

The reference, a squat into a reach and a turn, is motion.IK (weighted: one damped least squares
over the tasks and a weak posture) at each of 200 frames of 0.02 s, from five keyframes of task
targets eased between. A control is the 29 position servos' targets, a knot one frame (10
physics steps). The cost (motion.tracking_cost) tracks twelve bodies' positions and orientations
(Huber per body) and the controls against the reference's angles. It prints the tracking error
of holding the first pose, of the guess (the reference's angles) and of the plan, and whether
the replay stays upright.
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # --play renders headless

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import common  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import control, motion, rotations  # noqa: E402

CLIP_FRAMES, FRAME_DT = 200, 0.02
TRACKED, LABELS = common.G1_TRACKED, common.g1_labels(common.G1_TRACKED)
PELVIS_MIN = 0.45  # m: upright means the pelvis stays above this at every frame
# Contacts make the linearisation good only near the trajectory: mu starts strong (ILQRSettings).
SETTINGS = control.ILQRSettings(mu_init=10.0, mu_min=1e-3, mu_max=1e8, tolerance=1e-4)

# Keyframes: time (s), pelvis height (m), pelvis pitch and yaw, torso pitch and yaw (rad), hand
# positions (m, world frame before the torso's yaw turns them; None: where standing holds them).
_STAND = (0.755, 0.0, 0.0, 0.0, 0.0, None, None)
KEYFRAMES = (
  (0.0, *_STAND),
  (1.0, 0.60, 0.25, 0.0, 0.10, 0.0, (0.32, 0.20, 0.78), (0.32, -0.20, 0.78)),  # squat
  (1.8, 0.60, 0.30, 0.0, 0.35, -0.35, (0.05, 0.40, 0.90), (0.40, -0.02, 0.62)),  # reach
  (2.8, 0.72, 0.0, 0.35, 0.05, 0.80, (0.28, 0.20, 0.95), (0.28, -0.20, 0.95)),  # turn
  (3.6, *_STAND),
)
FEET = tuple(common.G1_FEET.values())
HANDS = ("left_wrist_yaw_link", "right_wrist_yaw_link")


def _yaw_pitch(yaw: float, pitch: float) -> np.ndarray:
  return np.asarray(rotations.multiply(rotations.from_axis_angle(np.array([0.0, 0, 1]), yaw),
                                       rotations.from_axis_angle(np.array([0.0, 1, 0]), pitch)))


def _tasks(targets: dict) -> list[motion.Task]:
  """One frame's IK tasks, strongest first: feet, pelvis, torso, centre of mass, hands."""
  tasks = []
  for foot in FEET:
    tasks += [motion.BodyPosition(foot, targets[foot][0], 10.0),
              motion.BodyOrientation(foot, targets[foot][1], 10.0)]
  tasks += [motion.BodyOrientation("pelvis", targets["pelvis_quat"], 3.0),
            motion.BodyPosition("pelvis", targets["pelvis_z"], 5.0, axes=(2,)),
            motion.BodyOrientation("torso_link", targets["torso_quat"], 1.0),
            # The pelvis's subtree: the whole robot.
            motion.CentreOfMass(targets["com_xy"], 5.0, axes=(0, 1), body="pelvis")]
  return tasks + [motion.BodyPosition(h, targets[h]) for h in HANDS if targets.get(h) is not None]


def reference(model: mujoco.MjModel, frames: int) -> dict[str, np.ndarray]:
  """The clip's first frames: IK qpos (F, nq), tracked body poses (F, 12, 3) and (F, 12, 4)."""
  data = mujoco.MjData(model)
  data.qpos[:] = model.key_qpos[0]
  mujoco.mj_forward(model, data)
  feet = {f: (data.body(f).xpos.copy(), data.body(f).xquat.copy()) for f in FEET}
  com_xy = np.mean([data.contact[i].pos[:2] for i in range(data.ncon)], axis=0)
  posture = common.g1_ik_posture(model)

  def targets(key, hands):
    _, z, pitch, yaw, torso_pitch, torso_yaw, *held = key
    c, s = np.cos(torso_yaw), np.sin(torso_yaw)
    turn = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    return {**feet, "pelvis_z": np.array([z]), "pelvis_quat": _yaw_pitch(yaw, pitch),
            "torso_quat": _yaw_pitch(torso_yaw, torso_pitch), "com_xy": com_xy,
            **{h: hands[h] if p is None else turn @ p for h, p in zip(HANDS, held, strict=True)}}

  ik = motion.IK(model, posture)  # weighted: the posture a weak task (weight 0.05)
  qpos = ik.solve(posture, _tasks(targets(KEYFRAMES[0], dict.fromkeys(HANDS))), 500).qpos
  data.qpos[:] = qpos
  mujoco.mj_kinematics(model, data)
  keys = [targets(k, {h: data.body(h).xpos.copy() for h in HANDS}) for k in KEYFRAMES]
  times = [k[0] for k in KEYFRAMES]

  def frame_tasks(i: int) -> list:
    t = i * FRAME_DT
    k = min(int(np.searchsorted(times, t, side="right")) - 1, len(keys) - 2)
    s = np.clip((t - times[k]) / (times[k + 1] - times[k]), 0.0, 1.0)
    s = s * s * (3 - 2 * s)
    target = {n: v if isinstance(v, tuple) else (1 - s) * v + s * keys[k + 1][n]
              for n, v in keys[k].items()}
    for n in ("pelvis_quat", "torso_quat"):
      target[n] = np.asarray(target[n]) / np.linalg.norm(target[n])
    return _tasks(target)

  first = ik.solve(qpos, frame_tasks(0), 200).qpos
  qpos = np.concatenate([first[None], ik.solve_frames(first, map(frame_tasks, range(1, frames)),
                                                      50).qpos])
  xpos, xquat = motion.body_poses(model, qpos, TRACKED)
  return {"qpos": qpos, "xpos": xpos, "xquat": xquat}


def metrics(sim, ref, start, ctrls, nstep) -> tuple[dict, np.ndarray]:
  """Tracking errors and uprightness of the controls replayed open-loop from start; states."""
  states, _, obs = jax.jit(mjbatch_jax.rollout, static_argnames=("nstep", "observe"))(
    start[None], jnp.asarray(ctrls)[None], sim.params(1), nstep=nstep, observe=("xpos", "xquat"))
  ids, frames = np.asarray(sim.names.bodies(list(TRACKED))), len(ctrls)
  held = np.minimum(np.arange(1, frames + 1), len(ref["qpos"]) - 1)
  e = np.asarray(motion.pose_errors(obs["xpos"][0][:, ids], obs["xquat"][0][:, ids],
                                    ref["xpos"][held], ref["xquat"][held]))
  pos = 1e3 * np.linalg.norm(e[..., :3], axis=-1)
  rot = np.degrees(np.linalg.norm(e[..., 3:], axis=-1))
  height = np.asarray(states[0, :, sim.layout.qpos][:, 2])
  return {"pos_mm": float(pos.mean()), "rot_deg": float(rot.mean()),
          "body_pos_mm": pos.mean(0).tolist(), "body_rot_deg": rot.mean(0).tolist(),
          "pelvis_min_height": float(height.min()), "upright": bool(height.min() > PELVIS_MIN)
          }, np.concatenate([np.asarray(start)[None], np.asarray(states[0])])


def print_table(columns: dict[str, dict]) -> None:
  print(f"{'mean error':16s}" + "".join(f"{n:>22s}" for n in columns))
  print(f"{'':16s}" + f"{'pos mm':>12s}{'rot deg':>10s}" * len(columns))
  for i, label in enumerate([*LABELS, "all bodies"]):
    print(f"{label:16s}" + "".join(f"{[*c['body_pos_mm'], c['pos_mm']][i]:12.1f}"
                                   f"{[*c['body_rot_deg'], c['rot_deg']][i]:10.2f}"
                                   for c in columns.values()))
  print(f"{'pelvis min z m':16s}" + "".join(f"{c['pelvis_min_height']:22.3f}"
                                            for c in columns.values()))


def setup(args, frames: int):
  model = common.load_scene(args.model, "unitree_g1", bodies=TRACKED)
  sim = mjbatch_jax.Simulator(model, num_threads=args.threads)
  ref = reference(model, frames)
  start = common.g1_at_rest(sim, ref["qpos"][0])
  version = common.model_fingerprint(model, KEYFRAMES, TRACKED, FRAME_DT,
                                     *common.g1_tracking_parts())
  return model, sim, ref, start, version


def solve(args) -> dict:
  model, sim, ref, start, version = setup(args, args.frames)
  nstep = round(FRAME_DT / model.opt.timestep)
  lo, hi = model.actuator_ctrlrange.T
  frames = np.minimum(np.arange(1, args.frames + 1), args.frames - 1)
  guess = jnp.asarray(np.clip(ref["qpos"][frames, 7:], lo, hi))
  hold = jnp.asarray(np.broadcast_to(np.clip(ref["qpos"][0, 7:], lo, hi), guess.shape))
  results = {"hold first pose": metrics(sim, ref, start, hold, nstep)[0],
             "initial guess": metrics(sim, ref, start, guess, nstep)[0]}
  watch = common.Stopwatch()
  with watch():
    # State t against frame min(t, F - 1); control t against the angles of frame t + 1.
    cost = motion.tracking_cost(sim, ref["xpos"], ref["xquat"], ref["qpos"], TRACKED,
                                **common.G1_TRACKING)
    plan = common.ilqr_with_progress(cost, sim.params(1), start, guess, nstep=nstep,
                                     iterations=args.iterations, settings=SETTINGS, cli=args)
  results["iLQR plan"], replay = metrics(sim, ref, start, plan.ctrls, nstep)
  gap = float(np.max(np.abs(replay - np.asarray(plan.states))))
  print_table(results)
  first, final = float(plan.costs[0]), float(plan.cost)
  print(f"solve: {int(plan.iterations)} iterations in {watch.wall:.1f} s ({watch.cpu:.1f} s CPU, "
        f"compilation included) on {sim.num_threads} threads; cost: {first:.3f} -> {final:.3f}")
  after = results["iLQR plan"]
  print(f"open-loop replay: pelvis min height {after['pelvis_min_height']:.3f} m ("
        f"{'upright' if after['upright'] else 'FELL'}); replay differs from the plan by {gap:.1e}")
  summary = {"frames": args.frames, "iterations": int(plan.iterations), "cost": final,
             "initial_cost": first, "solve_seconds": watch.wall, "solve_cpu_seconds": watch.cpu,
             "threads": sim.num_threads, "results": results, "replay_gap": gap}
  common.save_result(args.out, "g1_tracking", {
    "ctrl": plan.ctrls, "start": start, "qpos": replay[:, sim.layout.qpos], "costs": plan.costs},
    summary, version)
  print(f"plan saved to {args.out}")
  common.print_summary(summary)
  return summary


def play(args) -> dict:
  saved, _ = common.load_result(args.out, "g1_tracking", keys={"ctrl": ("T", None)})
  if not 2 <= len(saved["ctrl"]) <= CLIP_FRAMES:  # the frames the plan tracks
    raise SystemExit(f"{args.out} holds a plan of {len(saved['ctrl'])} frames, not 2 to "
                     f"{CLIP_FRAMES}; solve again")
  model, sim, ref, start, version = setup(args, len(saved["ctrl"]))
  common.load_result(args.out, "g1_tracking", version, {  # refuses a plan of another task
    "ctrl": ("T", model.nu), "qpos": ("T+1", model.nq), "start": (sim.layout.size,),
    "costs": ("I",)})
  result, replay = metrics(sim, ref, start, saved["ctrl"], round(FRAME_DT / model.opt.timestep))
  print_table({"open-loop replay": result})
  qpos = replay[:, sim.layout.qpos]
  print(f"replay differs from the saved plan by {float(np.max(np.abs(qpos - saved['qpos']))):.1e}")
  common.plot_series(args.out.with_suffix(".png"), FRAME_DT * np.arange(len(qpos)), {
    "pelvis height (m)": {"replay": qpos[:, 2], "reference": ref["qpos"][:, 2],
                          "upright threshold": np.full(len(qpos), PELVIS_MIN)}},
    title=f"G1 tracking: iLQR cost {saved['costs'][0]:.3g} -> {saved['costs'][-1]:.3g}")
  print(common.render(model, qpos[::4], args.out.with_suffix(".gif"), fps=12.5,
                      track_body="pelvis", distance=2.6, qpos_only=True))
  common.print_summary(result)
  return result


def main(argv=None) -> dict:
  parser = common.example_parser("g1_tracking", "G1 whole-body motion tracking by iLQR.",
                                 robot="unitree_g1")
  parser.add_argument("--frames", type=common.int_in(2, CLIP_FRAMES, "frames"),
                      default=CLIP_FRAMES, help="track the clip's first N frames")
  parser.add_argument("--iterations", type=common.int_in(0, 1000, "iterations"), default=40,
                      help="most iLQR iterations")
  args = common.parse(parser, argv)
  return play(args) if args.play else solve(args)


if __name__ == "__main__":
  main()
