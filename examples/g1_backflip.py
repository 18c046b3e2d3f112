"""A backflip on the Unitree G1: a reference built from physics, tracked whole-body, landed.

  python g1_backflip.py                     # solve (15-25 min on 2 cores), save, evaluate
  python g1_backflip.py --play              # replay on the nominal robot and 2 others (~3 min)
  python g1_backflip.py --play --robust 32  # the full evaluation (about 25 min)
  python g1_backflip.py --reference         # build the reference, check its feasibility, stop

The task: Config (fingerprinted into the saved plan), the reference's physics (a push at
constant acceleration of the centre of mass, a ballistic full turn, the fall caught), the flip's
scores and the landing's parts. A program of synergy targets (rise, push, tuck, open, settle)
starts iLQR; the push is searched again for the landing; in flight each robot chooses a longer
tuck and a pelvis tilt, and a sampling MPC lands it. docs/backflip.md: what the probes taught.
The last line is JSON; `complete`: the closed loop turns at least 2 pi - 0.3 rad in flight.
"""

import argparse
import collections
import dataclasses
import functools
import sys
from pathlib import Path

import _blas_kernels  # noqa: F401  (first: it pins OpenBLAS's kernels before numpy loads)
import common
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import control, motion  # noqa: E402
from mjbatch_jax.ensemble import Ensemble, evaluate, per_robot  # noqa: E402

KIND = "g1_backflip"
TRACKED = common.G1_TRACKED
FRAME_DT = 0.02  # s per frame of the clip and per knot of the plan
FINE = 4  # the reference is built on a grid FINE times finer, for its derivatives
CLIP_FRAMES = 200
FEET = tuple(common.G1_FEET.values())
SIDES = ("left", "right")
# The sole under each foot's four contact spheres, in the ankle roll link's frame (m).
SOLE = motion.Sole(x=(-0.05, 0.12), half_width=0.025, z=-0.035)
SYNERGIES = ("hip_pitch", "knee", "ankle_pitch", "waist_pitch", "shoulder_pitch", "elbow")
# Each purpose's robots: the push's search, the iLQR guard, the check that picks the push's mean,
# and the evaluation reported.
PURPOSES = ("push", "guard", "push_check", "evaluation")
TURN_TARGET = 2 * np.pi - 0.3  # rad: the flip is complete when the closed loop turns this far


@dataclasses.dataclass(frozen=True)
class Config:
  """The flip and its solve: every number a saved plan depends on (beside the model and --seed).

  Times in s, heights in m, angles in rad (pitch positive nose down). Centre-of-mass x is
  relative to the ankles. Upper-body poses are (shoulder pitch, elbow, waist pitch).
  """

  # --- the reference
  stand_s: float = 0.20
  crouch_s: float = 0.60
  tuck_in_s: float = 0.20  # in flight: from take-off to the full tuck
  tuck_out_s: float = 0.15  # in flight: from the full tuck to the landing pose
  catch_s: float = 0.25  # after touchdown: the pelvis's turn stopped
  settle_s: float = 0.40
  rise_s: float = 0.80
  stand_com: float = 0.665
  com_ahead: float = 0.02
  crouch_com: float = 0.40
  crouch_pitch: float = 0.60
  takeoff_com: float = 0.70
  takeoff_com_x: float = -0.02
  takeoff_vz: float = 3.5
  takeoff_vx: float = -0.3
  takeoff_pitch: float = 0.30
  landing_pitch: float = 0.20
  tuck_hip_pitch: float = -2.4
  tuck_knee: float = 2.6
  tuck_ankle: float = -0.3
  landing_com: float = 0.58
  landing_com_x: float = 0.12
  absorb_com: float = 0.42
  absorb_pitch: float = 0.60
  stand_upper: tuple = (0.2, 1.28, 0.0)
  crouch_upper: tuple = (0.5, 0.6, -0.45)
  takeoff_upper: tuple = (-1.4, 0.4, -0.45)
  landing_upper: tuple = (-0.8, 0.6, 0.40)
  arm_rate: float = 0.0
  # --- the warm start, knees first (docs/backflip.md): per phase (rise, push, tuck, open, settle)
  # the synergies' targets and the phase's duration; kept to 4 decimals (at 3 it lands on a knee).
  program: tuple = ((-2.1958, 0.8237, -0.0834, -0.2063, -1.2559, 1.1478, 0.0790),
                    (0.0892, 0.2708, 0.9235, -0.2046, -2.7890, -0.2516, 0.2000),
                    (-3.1659, 2.5694, -0.7904, -0.1028, -1.4005, 1.1663, 0.0800),
                    (-2.2016, 1.3584, -0.5946, 0.4386, -0.5518, 0.6483, 0.0600),
                    (-1.7602, 2.2354, -2.2249, 0.5736, -1.1879, 0.4252, 0.7600))
  ramp_s: float = 0.6  # from the settling crouch to standing
  frames: int = CLIP_FRAMES  # knots tracked
  # --- iLQR
  iterations: int = 12
  guard_robots: int = 8
  # --- the landing: the push's search and check (landing_push), the choice in flight, the MPC
  push_samples: int = 32
  push_iterations: int = 15
  push_robots: int = 12
  push_check_robots: int = 32
  push_short_weight: float = 4.0
  push_turn: float = 6.15
  push_spread: float = 0.1
  span: int = 32  # knots after a choice within which each robot must touch down
  tuck_holds: int = 5
  tilts: tuple = (0.35, -0.3, 0.0, 0.15, 0.25, 0.5)  # rad on the waist and hips, the plan's first
  tilt_lead: int = 2
  # Capture offset (x of the centre of mass ahead of the feet + tau x velocity): tau, goal,
  # scale, band within which the plan's own tail is kept; the pelvis's pitch floor and scale.
  capture: tuple = (0.21, 0.16, 0.2, 0.05)
  pitch_floor: tuple = (0.43, 0.1)
  early_knots: int = 3  # another body down this soon after touchdown: a fall
  land_lead: int = 3  # the MPC takes over this many knots before the plan's touchdown
  land_horizon: int = 20
  land_mpc: tuple = (64, 5, 0.1, 1, 8, 0.02)  # samples, knots, noise, iterations, elites, std_min
  land_weights: tuple = (300.0, 30.0, 50.0, 300.0, 0.5, 0.01, 0.05)  # motion.StandingWeights
  land_seed: int = 100
  # --- what counts
  pelvis_upright: float = 0.6  # m: standing means the pelvis above this
  min_flight: float = 0.1  # s: a shorter stretch off the floor is a stumble
  upright_goal: float = 1.0  # s upright after landing

  @property
  def push_start(self) -> float:
    return self.stand_s + self.crouch_s

  def stands(self, metrics: dict) -> bool:
    """Whether a replay's flip_metrics land it and keep it upright long enough."""
    return bool(metrics["landed"] and metrics["upright_s"] >= self.upright_goal)


# The clip on the fine grid, where the feet are down, the report (flight_s, apex_m, momentum).
Reference = collections.namedtuple("Reference", "qpos qvel qacc contact report")


class _Builder:
  """The reference's pieces on the fine grid: IK poses, the centre of mass, the feet's poses."""

  def __init__(self, model: mujoco.MjModel):
    self.dt = FRAME_DT / FINE
    # The posture in the null space: each frame converges to the same pose from a nearby start.
    self.ik = motion.IK(model, common.g1_ik_posture(model), mode="null_space")
    self.foot_ids = [model.body(f).id for f in FEET]
    self.pelvis = model.body("pelvis").id
    d = self.ik.kinematics(model.key_qpos[0])
    self.feet = [(d.xpos[b].copy(), np.array([1.0, 0, 0, 0])) for b in self.foot_ids]

  def upper(self, shoulder_pitch: float, elbow: float, waist_pitch: float) -> dict:
    """Joint targets of the upper body: both arms alike, the waist's yaw and roll straight."""
    out = {"waist_yaw_joint": 0.0, "waist_roll_joint": 0.0, "waist_pitch_joint": waist_pitch}
    for side in SIDES:
      out[f"{side}_shoulder_pitch_joint"] = shoulder_pitch
      out[f"{side}_shoulder_roll_joint"] = 0.25 if side == "left" else -0.25
      out[f"{side}_elbow_joint"] = elbow
    return out

  def tasks(self, targets: dict, free_root: bool = True) -> list:
    """IK tasks of targets' "feet" [(pos, quat)], "com", "pelvis_quat" (free root), "joints"."""
    tasks = []
    for foot, (pos, quat) in zip(FEET, targets["feet"], strict=True):
      tasks += [motion.BodyPosition(foot, pos), motion.BodyOrientation(foot, quat)]
    if free_root:
      tasks += [motion.CentreOfMass(targets["com"], body="pelvis"),
                motion.BodyOrientation("pelvis", targets["pelvis_quat"])]
    return tasks + [motion.JointAngles(targets["joints"])]

  def stance(self, t: np.ndarray, qpos: np.ndarray, targets_at) -> tuple[np.ndarray, float]:
    """IK at each time of a ground phase, each frame from the last: poses, the worst error."""
    path = self.ik.solve_frames(qpos, (self.tasks(targets_at(ti)) for ti in t))
    return path.qpos, float(path.error.max())

  def relative_feet(self, qpos: np.ndarray) -> np.ndarray:
    """(2, 4): each foot's x, y, z and pitch in the pelvis frame."""
    d = self.ik.kinematics(qpos)
    rot = d.xmat[self.pelvis].reshape(3, 3)
    out = []
    for b in self.foot_ids:
      m = rot.T @ d.xmat[b].reshape(3, 3)  # the foot's pitch: where its x axis points in x-z
      out.append([*(rot.T @ (d.xpos[b] - d.xpos[self.pelvis])), np.arctan2(-m[2, 0], m[0, 0])])
    return np.array(out)


def build_reference(model: mujoco.MjModel, cfg: Config, frames: int = CLIP_FRAMES,
                    log=print) -> Reference:
  """The clip: standing, the crouch, the push at constant acceleration of the centre of mass,
  the ballistic flight, the landing's caught fall, standing up; see the module docstring."""
  b = _Builder(model)
  dt, n = b.dt, FINE * (frames - 1) + 1
  t_all = dt * np.arange(n)
  push_s = dt * max(round(2 * (cfg.takeoff_com - cfg.crouch_com) / cfg.takeoff_vz / dt), 4)
  t_crouch, t_push = cfg.stand_s, cfg.push_start
  t_off = t_push + push_s
  i_push, i_off = round(t_push / dt), round(t_off / dt)
  if not np.isclose(i_push * dt, t_push):
    raise ValueError(f"standing and crouching ({t_push} s) must be whole multiples of {dt} s")
  feet = b.feet
  ankle_x = feet[0][0][0]
  stand_com = np.array([ankle_x + cfg.com_ahead, 0.0, cfg.stand_com])
  crouch_com = np.array([ankle_x + cfg.com_ahead, 0.0, cfg.crouch_com])

  def ground(com, pitch, upper, feet=feet) -> dict:
    return {"feet": feet, "com": com, "pelvis_quat": motion.pitch_quat(pitch),
            "joints": b.upper(*upper)}

  stand_target = ground(stand_com, 0.0, cfg.stand_upper)
  q_stand = b.ik.solve(b.ik.posture, b.tasks(stand_target), 500).qpos

  def before_push(ti: float) -> dict:
    if ti <= t_crouch:
      return stand_target
    s = ti - t_crouch
    com = motion.quintic(stand_com, 0, 0, crouch_com, 0, 0, cfg.crouch_s, s)
    pitch = motion.quintic(0.0, 0, 0, cfg.crouch_pitch, 0, 0, cfg.crouch_s, s)
    upper = motion.quintic(cfg.stand_upper, 0, 0, cfg.crouch_upper, 0, 0, cfg.crouch_s, s)
    return ground(com, float(pitch), upper)

  q_before, err_before = b.stance(t_all[:i_push + 1], q_stand, before_push)
  # The landing pose's and the tuck's feet in the pelvis frame end the flight's tuck and untuck.
  land_com = np.array([ankle_x + cfg.landing_com_x, 0.0, cfg.landing_com])
  q_land = b.ik.solve(q_stand, b.tasks(ground(land_com, cfg.landing_pitch, cfg.landing_upper)),
                      500).qpos
  rel_land = b.relative_feet(q_land)
  q_tuck = q_stand.copy()
  for side in SIDES:
    for joint, angle in (("hip_pitch", cfg.tuck_hip_pitch), ("knee", cfg.tuck_knee),
                         ("ankle_pitch", cfg.tuck_ankle)):
      q_tuck[model.joint(f"{side}_{joint}_joint").qposadr[0]] = angle
  rel_tuck = b.relative_feet(q_tuck)
  # Flight time: the parabola from the take-off height to the landing pose's, on the grid (the
  # vertical take-off velocity adjusted by less than a grid step's worth).
  rise, g = cfg.landing_com - cfg.takeoff_com, -model.opt.gravity[2]
  k_flight = max(round((cfg.takeoff_vz + np.sqrt(cfg.takeoff_vz**2 - 2 * g * rise)) / g / dt), 2)
  flight = k_flight * dt
  vz = (rise + 0.5 * g * flight**2) / flight
  if flight < cfg.tuck_in_s + cfg.tuck_out_s:
    raise ValueError(f"a flight of {flight:.3f} s is shorter than tucking in and out: jump higher")
  v_off = np.array([cfg.takeoff_vx, 0.0, vz])
  c_off = np.array([ankle_x + cfg.takeoff_com_x, 0.0, cfg.takeoff_com])
  accel = 2 * (c_off - crouch_com - v_off * push_s) / push_s**2 + 2 * v_off / push_s
  theta_down = cfg.landing_pitch - 2 * np.pi
  s_flight = dt * np.arange(k_flight + 1)
  t_out = flight - cfg.tuck_out_s

  def push(omega_off: float):
    """The push, ending at the take-off pitch with pitch rate omega_off."""
    def push_at(ti: float) -> dict:
      s = ti - t_push
      com = motion.quintic(crouch_com, 0, accel, c_off, v_off, accel, push_s, s)
      pitch = motion.quintic(cfg.crouch_pitch, 0, 0, cfg.takeoff_pitch, omega_off, 0, push_s, s)
      upper = motion.quintic(cfg.crouch_upper, 0, 0, cfg.takeoff_upper, (cfg.arm_rate, 0, 0), 0,
                      push_s, s)
      return ground(com, float(pitch), upper)

    return b.stance(t_all[i_push + 1:i_off + 1], q_before[-1], push_at)

  def fly(q_push: np.ndarray):
    """The flight after the push: the joints' tuck and untuck (IK with the root still), then
    motion.ballistic_flight's turn to the landing pitch a turn later. At take-off the legs stop
    extending: an internal impulse, the body's momentum unchanged."""
    rel_off = b.relative_feet(q_push[-1])
    frozen = q_push[-1].copy()
    frozen[:7] = (0, 0, 0, 1, 0, 0, 0)

    def tasks(s: float) -> list:
      if s <= cfg.tuck_in_s:
        rel = motion.quintic(rel_off, 0, 0, rel_tuck, 0, 0, cfg.tuck_in_s, s)
      else:
        rel = motion.quintic(rel_tuck, 0, 0, rel_land, 0, 0, cfg.tuck_out_s, s - t_out)
      upper = motion.quintic(cfg.takeoff_upper, (cfg.arm_rate, 0, 0), 0, cfg.landing_upper, 0, 0,
                             flight, s)
      return b.tasks({"feet": [(r[:3].copy(), motion.pitch_quat(r[3])) for r in rel],
                      "joints": b.upper(*upper)}, free_root=False)

    path = b.ik.solve_frames(frozen, map(tasks, s_flight), free_root=False)
    return motion.ballistic_flight(model, path.qpos, dt, pitch0=cfg.takeoff_pitch,
                                   pitch1=theta_down, com0=c_off, vel0=v_off), path.error.max()

  def attempt(omega: float):
    """How far the momentum the push hands over misses what the flight needs."""
    q_push, err_push = push(omega)
    flown, err_flight = fly(q_push)
    handed = motion.angular_momentum(model, None, q_push[-1],
                                     motion.velocities(model, q_push[-3:], dt)[-1])[1]
    return handed - flown.momentum, (q_push, err_push, flown, err_flight)

  # The push's take-off pitch rate that hands the flight its L.
  omega_off, (q_push, err_push, flown, err_flight), misses = common.secant(
    attempt, -4.0, -8.0, done=lambda miss, out: abs(miss) < 1e-3 * abs(out[2].momentum))
  q_flight, momentum, omega_down = flown.qpos, flown.momentum, flown.final_rate
  # Landing: the feet stay where they touched down; the fall is stopped at constant deceleration
  # over the drop to the landing crouch while the turn is caught; then settling, standing up.
  i_down = i_off + k_flight
  t_down = i_down * dt
  d = b.ik.kinematics(q_flight[-1])
  feet_down = [(d.xpos[f].copy(), np.array([1.0, 0, 0, 0])) for f in b.foot_ids]
  c_down = d.subtree_com[1].copy()
  v_down = v_off + np.array([0, 0, -g * flight])
  ankle_down = feet_down[0][0][0]
  stop_s = 2 * (c_down[2] - cfg.absorb_com) / -v_down[2]
  low_com = c_down + 0.5 * v_down * stop_s
  decel = -v_down / stop_s
  catch_s = max(stop_s, cfg.catch_s)
  settle_com = np.array([ankle_down + cfg.com_ahead, 0.0, cfg.absorb_com])
  end_com = np.array([ankle_down + cfg.com_ahead, 0.0, cfg.stand_com])
  t_rise = t_down + stop_s + cfg.settle_s
  if t_rise + cfg.rise_s > t_all[-1]:
    raise ValueError(f"the flip ends at {t_rise + cfg.rise_s:.2f} s, after the clip's "
                     f"{t_all[-1]:.2f} s")

  def after_touchdown(ti: float) -> dict:
    s = ti - t_down
    pitch = motion.quintic(cfg.landing_pitch, omega_down, 0, cfg.absorb_pitch, 0, 0, catch_s, s)
    upper = cfg.landing_upper
    if s <= stop_s:
      com = motion.quintic(c_down, v_down, decel, low_com, 0, decel, stop_s, s)
    elif s <= stop_s + cfg.settle_s:
      com = motion.quintic(low_com, 0, 0, settle_com, 0, 0, cfg.settle_s, s - stop_s)
    else:
      s -= stop_s + cfg.settle_s
      com = motion.quintic(settle_com, 0, 0, end_com, 0, 0, cfg.rise_s, s)
      pitch = motion.quintic(cfg.absorb_pitch, 0, 0, 0.0, 0, 0, cfg.rise_s, s)
      upper = motion.quintic(cfg.landing_upper, 0, 0, cfg.stand_upper, 0, 0, cfg.rise_s, s)
    return ground(com, float(pitch), upper, feet_down)

  q_after, err_after = b.stance(t_all[i_down + 1:], q_flight[-1], after_touchdown)
  qpos = np.concatenate([q_before, q_push, q_flight[1:], q_after])
  contact = np.ones(n, bool)
  contact[i_off + 1:i_down] = False  # row i_off: just before take-off, i_down: after touchdown
  qvel, qacc = motion.phase_derivatives(model, qpos, dt, contact)
  apex = float(qpos[i_off:i_down + 1, 2].max())
  log(f"reference: take-off at {t_off:.3f} s at ({v_off[0]:+.2f}, {v_off[2]:.2f}) m/s; flight "
      f"{flight:.3f} s; apex {apex:.2f} m; the turn's L = {momentum:.2f} kg m^2/s (the push hands "
      f"it over within {abs(misses[-1]):.1e} after {len(misses)} tries; pelvis {omega_off:.2f} "
      f"rad/s at take-off, {omega_down:.1f} at touchdown); IK within "
      f"{1e3 * max(err_before, err_push, err_flight, err_after):.2f} mm")
  return Reference(qpos, qvel, qacc, contact, {"flight_s": flight, "apex_m": apex,
                                               "momentum": float(momentum)})


# The G1 with its floor-contact sensors, checked for the tracked bodies.
load_model = functools.partial(common.g1_scene, bodies=TRACKED)


def prepare(model: mujoco.MjModel, cfg: Config, log=print) -> tuple[dict, dict]:
  """The reference, its feasibility report and the tracker's clip: per frame qpos and the
  tracked bodies' poses; per knot two warm starts: the servo targets that give the reference's
  torques and its joint angles."""
  ref = build_reference(model, cfg, CLIP_FRAMES, log=log)
  checked = np.ones(len(ref.qpos), bool)
  checked[[0, -1]] = False  # one-sided differences there
  f = motion.feasibility(model, ref.qpos, ref.qvel, ref.qacc, ref.contact, FEET, SOLE,
                         friction=0.6, checked=checked)
  log(f"feasibility: {f.summary()}")
  report = {**ref.report, **f.record()}
  frames, rows = cfg.frames, slice(0, FINE * cfg.frames, FINE)
  qpos = ref.qpos[rows]
  xpos, xquat = motion.body_poses(model, qpos, TRACKED)
  # Knot t runs from frame t to t + 1: the mean of the fine grid's servo targets over it.
  servo = f.servo[1:FINE * (frames - 1) + 1].reshape(frames - 1, FINE, -1).mean(axis=1)
  servo = np.clip(np.concatenate([servo, qpos[-1:, 7:]]), *model.actuator_ctrlrange.T)
  angles = np.clip(qpos[np.minimum(np.arange(1, frames + 1), frames - 1), 7:],
                   *model.actuator_ctrlrange.T)  # the angles each knot ends at, as targets
  return {"qpos": qpos, "xpos": xpos, "xquat": xquat, "servo": servo, "angles": angles}, report


def program(model: mujoco.MjModel, cfg: Config, servo: np.ndarray) -> motion.SynergyProgram:
  """z (phases * 7,) -> the plan (F, nu): servo up to the push, each phase's synergy targets
  held for its duration, then a ramp to servo's last (standing) targets."""
  return motion.SynergyProgram(common.g1_synergies(model, SYNERGIES), servo, FRAME_DT,
                               start=cfg.push_start, ramp_s=cfg.ramp_s, durations=(0.04, 1.0),
                               ctrlrange=model.actuator_ctrlrange)


def flip_metrics(cfg: Config, qpos: np.ndarray, floor: np.ndarray, dt: float) -> dict:
  """One replay's numbers from its physics steps' qpos (S, nq) and floor contacts (S, 3: left
  foot, right foot, the robot): motion.landing's, and the pelvis's turn in flight."""
  pitch = np.unwrap(np.asarray(motion.quat_pitch(qpos[:, 3:7])))
  done = motion.landing(floor, qpos[:, 2], dt, min_flight=cfg.min_flight,
                        upright_height=cfg.pelvis_upright)
  off, last = done.takeoff, min(done.touchdown, len(pitch) - 1)
  return {"rotation_rad": float(pitch[off] - pitch[last]) if done.flight_s else 0.0,
          "flight_s": done.flight_s, "apex_m": float(qpos[:, 2].max()), "landed": done.landed,
          "upright_s": done.upright_s, "takeoff_s": done.takeoff_s, "touchdown_s": done.touchdown_s}


def replay_metrics(sim, cfg: Config, states, sensors) -> list[dict]:
  """flip_metrics of each robot of a replay's (N, S, ...) states and sensordata."""
  rows = per_robot((np.asarray(states)[..., sim.layout.qpos],
                    np.asarray(sensors)[..., common.g1_floor_columns(sim.model)]))
  return [flip_metrics(cfg, q, f, sim.model.opt.timestep) for q, f in rows]


def tuck_holds(model, cfg: Config, ctrl: np.ndarray, decide: int, tilt: tuple[int, int]
               ) -> np.ndarray:
  """(tuck_holds, len(tilts), F, nu): the tuck's last knot held longer, each tilt on the waist's
  and hips' pitch targets over the knots tilt (control.plan_variants); [0, 0] is the plan's."""
  tilted = [model.actuator(f"{n}_pitch_joint").id for n in ("waist", "left_hip", "right_hip")]
  return control.plan_variants(ctrl, decide, holds=cfg.tuck_holds, offsets=cfg.tilts,
                               actuators=tilted, window=tilt, ctrlrange=model.actuator_ctrlrange)


def touchdowns(sim, cfg: Config, states, sensors, obs, nstep: int) -> tuple:
  """Per row of physics steps from a state in flight: the pelvis's pitch at the first step
  with a foot down, whether that landing is bad (motion.first_touchdown within early_knots),
  and the capture offset there."""
  first, bad = motion.first_touchdown(sensors[..., common.g1_floor_columns(sim.model)],
                                      cfg.early_knots * nstep)
  rows = jnp.arange(states.shape[0])
  com = obs["subtree_com"][:, :, 1, 0]
  feet = obs["xpos"][:, :, np.asarray(sim.names.bodies(list(FEET))), 0].mean(axis=-1)
  vx = (com[rows, first] - com[rows, jnp.maximum(first - 1, 0)]) / sim.model.opt.timestep
  return (motion.quat_pitch(states[..., sim.layout.qpos][..., 3:7])[rows, first], bad,
          com[rows, first] - feet[rows, first] + cfg.capture[0] * vx)


def landing_miss(cfg: Config, pitch, offset) -> jax.Array:
  """How far a touchdown is from what the landing MPC catches."""
  _, goal, scale, _ = cfg.capture
  floor, pitch_scale = cfg.pitch_floor
  return jnp.abs(offset - goal) / scale + jnp.maximum(floor - pitch, 0.0) / pitch_scale


def landing_push(sim, cfg: Config, start, ctrl: np.ndarray, z, nstep: int, decide: int,
                 tilt: tuple[int, int], ensemble: Ensemble, seed: int) -> np.ndarray:
  """ctrl with the push phases' synergy targets searched by cem_search for the landing: each
  candidate flown to knot decide on the nominal robot and push_robots others (new each
  iteration), then each tuck hold for span knots; a robot scores its best hold's miss (at most 1,
  plus 1 for a bad landing); a candidate the robots' mean, the nominal robot's once more and its
  turn short of push_turn. Of the means the search sampled about, the one with the least score
  on push_check robots is flown (the best of noisy scores is the luckiest draw)."""
  warm = program(sim.model, cfg, ctrl)
  pushes = warm.masks(z, decide)[:-3]  # before the tuck, open and settle
  plan = functools.partial(warm.retarget, ctrl[:decide], pushes)
  span = min(cfg.span, len(ctrl) - decide)
  holds = tuck_holds(sim.model, cfg, ctrl, decide, tilt)[:, 0, decide:decide + span]
  tails = jnp.repeat(jnp.asarray(holds), nstep, axis=1)

  def misses(targets, params):
    """(candidates, robots) each robot's best miss; (candidates,) the nominal turn short."""
    count, robots_n = len(targets), len(params["body_mass"])
    rows = count * robots_n
    params = jax.tree.map(lambda leaf: jnp.tile(leaf, (count,) + (1,) * (leaf.ndim - 1)), params)
    ctrls = jnp.repeat(jnp.repeat(jax.vmap(plan)(targets), nstep, axis=1), robots_n, axis=0)
    states, sensors = mjbatch_jax.rollout(jnp.broadcast_to(start, (rows, sim.nstate)), ctrls,
                                          params)
    on_floor = sensors[..., common.g1_floor_columns(sim.model)[2]] > 0
    off = states.shape[1] - jnp.argmax(on_floor[:, ::-1], axis=-1)
    off_state = states[jnp.arange(rows), jnp.minimum(off, states.shape[1] - 1)]
    off_pitch = motion.quat_pitch(off_state[:, sim.layout.qpos][:, 3:7])
    params = jax.tree.map(lambda leaf: jnp.repeat(leaf, len(holds), axis=0), params)
    states, sensors, obs = mjbatch_jax.rollout(
      jnp.repeat(states[:, -1], len(holds), axis=0), jnp.tile(tails, (rows, 1, 1)), params,
      observe=("subtree_com", "xpos"))
    pitch, bad, cp = touchdowns(sim, cfg, states, sensors, obs, nstep)
    miss = (jnp.minimum(landing_miss(cfg, pitch, cp), 1.0) + bad).reshape(rows, len(holds))
    miss = jnp.where(jnp.isfinite(miss), miss, 2.0)
    best = jnp.argmin(miss, axis=-1)
    turn = 2 * jnp.pi + off_pitch - pitch.reshape(rows, len(holds))[jnp.arange(rows), best]
    short = jnp.maximum(cfg.push_turn - turn, 0.0).reshape(count, robots_n)[:, 0]
    return miss.min(axis=-1).reshape(count, robots_n), jnp.where(jnp.isfinite(short), short, 2.0)

  def objective(targets, iteration):
    miss, short = misses(targets, ensemble.params("push", cfg.push_robots, iteration=iteration))
    return miss.mean(axis=1) + miss[:, 0] + cfg.push_short_weight * short

  mean = np.asarray(z).reshape(-1, len(SYNERGIES) + 1)[:len(pushes), :-1].ravel()
  result = common.cem_with_progress(
    objective, mean, cfg.push_spread, label="push search", iterations=cfg.push_iterations,
    key=jax.random.fold_in(jax.random.key(seed), 1), num_samples=cfg.push_samples,
    num_elites=cfg.push_samples // 8, std_min=0.01, keep_best=False)
  check, judge = ensemble.params("push_check", cfg.push_check_robots), jax.jit(misses)
  band = cfg.capture[3] / cfg.capture[2]
  scores = []
  with common.progress(len(result.means), "push check") as bar:
    for i, candidate in enumerate(result.means[:, 0]):  # one call each: all at once is > 1 GB
      miss, short = (np.asarray(a)[0] for a in judge(candidate[None], check))
      scores.append(miss[1:].mean() + cfg.push_short_weight * (short + max(miss[0] - band, 0.0)))
      bar.write(f"push check {i:2d}: miss per robot {miss[1:].mean():.3f}, nominal "
                f"{miss[0]:.3f}, short {short:.3f}")
      bar.update()
  pick = int(np.argmin(scores))
  print(f"push: the mean of iteration {pick} is flown")
  out = np.array(ctrl)
  out[:decide] = np.asarray(plan(result.means[pick, 0]))
  return out


def plan_landing(sim, cfg: Config, start, ctrl: np.ndarray, z, nstep: int, ensemble: Ensemble,
                 seed: int) -> dict:
  """The plan with its landing: the searched push, its holds and tilts, and the knots at which
  the hold and the tilt are chosen and the MPC takes over (about iLQR's touchdown)."""
  frames = len(ctrl)
  opening = program(sim.model, cfg, ctrl).masks(z)[-2]
  xs, sensors = control.open_loop(sim.params(1), start, ctrl, nstep)
  m = replay_metrics(sim, cfg, xs, sensors)[0]
  touch = round(m["touchdown_s"] / sim.model.opt.timestep) // nstep
  decide = int(np.flatnonzero(opening)[0]) if opening.any() else frames
  if m["flight_s"] < cfg.min_flight or touch + 2 >= frames or touch - 1 - cfg.tilt_lead <= decide:
    raise SystemExit("the plan does not land inside the clip after the tuck opens: no landing "
                     "to plan (more --frames?)")
  tilt = (touch - 1, touch + 2)
  pushed = landing_push(sim, cfg, start, ctrl, z, nstep, decide, tilt, ensemble, seed)
  holds = tuck_holds(sim.model, cfg, pushed, decide, tilt)
  xs, _ = control.open_loop(sim.params(1), start, holds[0, 0], nstep)
  states = np.concatenate([np.asarray(start)[None], np.asarray(xs[0])[nstep - 1::nstep]])
  return {"ctrl": holds[0, 0], "states": states, "holds": holds,
          "landing_knots": np.array([decide, tilt[0] - cfg.tilt_lead, touch - cfg.land_lead])}


def landing_replay(sim, cfg: Config, params, start, holds: np.ndarray, knots, nstep: int,
                   stand_height: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The closed loop on params' robots: the plan to knot decide, the hold and tilt chosen from
  each robot's state by rollouts of the nominal model (control.fly_variants), the landing MPC
  (receding_horizon_fleet). Every physics step's states and sensordata; each robot's choice."""
  decide, tilt_at, land_from = (int(k) for k in knots)

  def score(xs, sensors, obs):
    pitch, bad, cp = touchdowns(sim, cfg, xs, sensors, obs, nstep)
    return landing_miss(cfg, pitch, cp) + 10.0 * bad

  flown = control.fly_variants(params, sim.params(1), start, holds, (decide, tilt_at), nstep,
                               score, end=land_from, span=cfg.span,
                               observe=("subtree_com", "xpos"),
                               keep_first=cfg.capture[3] / cfg.capture[2])
  ctrls, n = flown.ctrls, len(flown.ctrls)
  samples, knots_n, noise, iterations, elites, std_min = cfg.land_mpc
  cost = motion.standing_cost(sim, common.g1_floor_columns(sim.model), FEET, ctrls[0, -1],
                              stand_height, motion.StandingWeights(*cfg.land_weights))
  planner = control.sampling(cost, sim.params(1), horizon=cfg.land_horizon, nstep=nstep,
                             settings=control.CEMSettings(
      num_samples=samples, num_knots=knots_n, interpolation="linear", noise=noise,
      iterations=iterations, num_elites=elites, std_min=std_min))
  # Each robot's keys from its row alone: the nominal robot lands alike among any others.
  key = jax.random.key(cfg.land_seed)
  keys = jax.vmap(lambda i: jax.random.split(jax.random.fold_in(key, i), len(ctrls[0]) - land_from)
                  )(jnp.arange(n))
  run = control.receding_horizon_fleet(planner, params, flown.states[:, -1], ctrls, keys,
                                       first=land_from)
  return (np.concatenate([flown.states, np.asarray(run.states)], axis=1),
          np.concatenate([flown.sensordata, np.asarray(run.sensordata)], axis=1), flown.chosen)


def evaluate_plan(sim, cfg: Config, plan: dict, nstep: int, robust: int,
                  ensemble: Ensemble) -> dict:
  """The nominal robot (row 0) and robust evaluation robots, open loop (the plan's controls)
  and closed loop (landing_replay), as the rows of the same calls."""
  params = ensemble.params("evaluation", robust) if robust else ensemble.nominal(1)
  start = jnp.asarray(plan["start"])
  open_xs, open_sensors = control.open_loop(params, start, plan["ctrl"], nstep)
  stand_height = float(np.asarray(start)[sim.layout.qpos][2])
  xs, sensors, chosen = landing_replay(sim, cfg, params, start, plan["holds"],
                                       plan["landing_knots"], nstep, stand_height)
  closed = replay_metrics(sim, cfg, xs, sensors)
  opened = replay_metrics(sim, cfg, open_xs, open_sensors)
  out = {"closed_loop": closed[0], "open_loop": opened[0], "chosen": chosen,
         "closed_loop_states": xs[0],
         "closed_loop_floor": sensors[0][:, common.g1_floor_columns(sim.model)],
         "replay_gap": float(np.max(np.abs(np.asarray(open_xs[0])[nstep - 1::nstep]
                                           - np.asarray(plan["states"])[1:])))}
  if robust:
    out["robust"] = evaluate(closed, cfg.stands)
    out["robust_open_loop"] = evaluate(opened, cfg.stands)
  return out


def report(cfg: Config, result: dict) -> dict:
  """Prints the replays' numbers; the summary for the JSON line."""
  for name in ("open_loop", "closed_loop"):
    m = result[name]
    print(f"{name.replace('_', ' ')}: turns {m['rotation_rad']:.2f} rad over a flight of "
          f"{m['flight_s']:.3f} s ({m['takeoff_s']:.2f}-{m['touchdown_s']:.2f} s), apex "
          f"{m['apex_m']:.2f} m, {'landed' if m['landed'] else 'did NOT land'} on the feet, "
          f"upright {m['upright_s']:.2f} s")
  hold, tilt = result["chosen"][0]
  print(f"landing: the nominal robot holds the tuck {hold} knots longer and tilts the pelvis "
        f"{cfg.tilts[tilt]:g} rad; open loop replays the plan's states within "
        f"{result['replay_gap']:.1e}")
  robust = result.get("robust")  # None: the nominal robot only
  if robust is not None:
    print(f"robustness (link masses x[0.9, 1.1], floor friction [0.6, 1.0]): closed loop: "
          f"{robust}; open loop: {result['robust_open_loop']}")
  closed = result["closed_loop"]
  return {
    "rotation_rad": closed["rotation_rad"], "target_rad": TURN_TARGET,
    "complete": closed["rotation_rad"] >= TURN_TARGET, "flight_s": closed["flight_s"],
    "apex_m": closed["apex_m"], "landed": closed["landed"], "upright_s": closed["upright_s"],
    "open_loop_landed": result["open_loop"]["landed"],
    "robust_robots": robust and robust.robots, "robust_landed_share": robust and robust.share}


def solve(args: argparse.Namespace, cfg: Config, sim: mjbatch_jax.Simulator, ensemble: Ensemble,
          version: str) -> tuple[dict, dict]:
  """The plan (see plan_landing) with its start and reference, saved; the report for the JSON."""
  model = sim.model
  nstep = round(FRAME_DT / model.opt.timestep)
  clip, report = prepare(model, cfg)
  cost = motion.tracking_cost(sim, clip["xpos"], clip["xquat"], clip["qpos"], TRACKED,
                              **common.G1_TRACKING)
  start = common.g1_at_rest(sim, clip["qpos"][0])
  watch = common.Stopwatch()
  with watch():
    # Up to the push, the cheaper of the two warm starts; from it on, the program.
    base = min((clip["angles"], clip["servo"]), key=lambda u: float(
      control.plan_cost(cost, sim.params(1), start, u, nstep)[0]))
    z = np.asarray(cfg.program)
    guess = np.asarray(program(model, cfg, base)(jnp.asarray(z.ravel())))
    guard = control.ensemble_guard(
      lambda u: control.open_loop(ensemble.params("guard", cfg.guard_robots), start, u, nstep),
      lambda row: cfg.stands(replay_metrics(sim, cfg, row[0][None], row[1][None])[0]),
      guess, log=print)
    result = common.ilqr_with_progress(
      cost, sim.params(1), start, guess, nstep=nstep, iterations=cfg.iterations,
      settings=control.ILQRSettings(mu_init=10.0, mu_min=1e-3, mu_max=1e8, tolerance=1e-4,
                                    final_gains=False), accept=guard.accept, cli=args)
    history = np.asarray(result.costs)  # up to the first NaN (stopped) or no lower (no step)
    costs = history[:1 + np.argmin(np.r_[np.diff(history) < 0, False])].tolist()
    print(f"iLQR: cost {costs[0]:.1f} -> {costs[-1]:.1f} in {len(costs) - 1} iterations; the "
          f"guard refused {len(guard.refusals)} of {guard.asked} steps")
    plan = plan_landing(sim, cfg, start, np.asarray(result.ctrls), z, nstep, ensemble, args.seed)
  print(f"solve: {watch.wall:.0f} s with compilation ({sim.num_threads} threads)")
  meta = {**common.config_meta(cfg), "seed": args.seed, "nstep": nstep,
          "solve_seconds": watch.wall}
  plan = {**plan, "start": np.asarray(start), "ref_qpos": clip["qpos"], "ref_xpos": clip["xpos"],
          "ref_xquat": clip["xquat"]}
  common.save_result(args.out, KIND, plan, meta, version=version)
  print(f"plan saved to {args.out}")
  return plan, {"reference": report, "costs": costs, "meta": meta}


def plots(model: mujoco.MjModel, cfg: Config, result: dict, path: Path) -> None:
  """The closed loop on the nominal robot: the pelvis's height and pitch, what is on the floor."""
  states, floor = result["closed_loop_states"], result["closed_loop_floor"]
  qpos = states[:, 1:1 + model.nq]
  common.plot_series(path, model.opt.timestep * np.arange(1, len(states) + 1), {
    "pelvis height (m)": {"pelvis": qpos[:, 2],
                          "upright threshold": np.full(len(qpos), cfg.pelvis_upright)},
    "pelvis pitch (rad)": {"pitch": np.unwrap(np.asarray(motion.quat_pitch(qpos[:, 3:7])))},
    "floor contacts": {"left foot": floor[:, 0], "right foot": floor[:, 1],
                       "other bodies": floor[:, 2] - floor[:, 0] - floor[:, 1]}},
    title="G1 backflip, closed loop on the nominal robot")


FLAGS = {"frames": (2, CLIP_FRAMES, "knots tracked (the clip's first N frames)"),
         "iterations": (0, 1000, "most iLQR iterations"),
         "push_iterations": (0, 1000, "iterations of the push's search for the landing")}


def main(argv: list[str] | None = None) -> dict:
  parser = common.example_parser(KIND, "A backflip on the Unitree G1.", robot="unitree_g1")
  common.config_flags(parser, Config(), FLAGS)
  parser.add_argument("--robust", type=common.int_in(0, 4096, "0: the nominal robot only"),
                      default=2, help="evaluation robots beside the nominal one (default 2: about "
                      "3 minutes; 32: the full evaluation); --seed picks them")
  parser.add_argument("--reference", action="store_true",
                      help="build the reference, check its feasibility and stop")
  args = common.parse(parser, argv)
  if args.reference and args.play:
    parser.error("--reference builds the reference and stops: leave out --play")
  cfg, model = common.config_from(args, Config(), FLAGS), load_model(args.model)
  if args.reference:
    return prepare(model, cfg)[1]
  # What a saved plan depends on beside its Config: the model's bytes, the grid, the cost.
  version = common.model_fingerprint(model, FRAME_DT, FINE, TRACKED, *common.g1_tracking_parts())
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    # One seed for all purposes: their names keep their robots apart.
    ensemble = common.g1_robots(sim, dict.fromkeys(PURPOSES, args.seed))
    if args.play:
      plan, meta = common.load_result(args.out, KIND, version=version, config=cfg, keys={
        "ctrl": ("K", model.nu), "states": ("K+1", sim.layout.size), "start": (sim.layout.size,),
        "holds": (cfg.tuck_holds, None, None, model.nu), "landing_knots": (3,),
        "ref_qpos": ("K", model.nq), "ref_xpos": ("K", "B", 3), "ref_xquat": ("K", "B", 4)})
    else:
      plan, solved = solve(args, cfg, sim, ensemble, version)
      meta = solved["meta"]
    nstep = int(meta["nstep"])
    watch = common.Stopwatch()
    with watch(), common.progress(1, f"replay on {args.robust + 1} robots") as bar:
      result = evaluate_plan(sim, cfg, plan, nstep, args.robust, ensemble)
      bar.update()
    print(f"replayed on the nominal robot and {args.robust} others in {watch.wall:.0f} s")
  summary = report(cfg, result)
  if args.play:
    plots(model, cfg, result, args.out.with_suffix(".png"))
    print(common.render(model, result["closed_loop_states"][nstep - 1::2 * nstep],
                        args.out.with_suffix(".gif"), 1 / (2 * FRAME_DT), track_body="pelvis",
                        distance=3.2, azimuth=90.0, elevation=-5.0))
  else:
    common.write_json(args.out.with_suffix(".json"), {**solved, "summary": summary})
  common.print_summary(summary)
  return summary


if __name__ == "__main__":
  main(sys.argv[1:])
