"""The planners on tasks nobody tuned them for: dm_control's models, as Playground ships them.

  python benchmarks/control_suite.py [--tasks acrobot_swingup,...] [--starts 5] [--threads 2]
                                     [--quick] [--no-gif] [--policy-iterations N]

Each task is a model this repository did not write (Playground's dm_control suite XMLs, read
where mujoco_playground is installed: this interpreter or .venv-rl; `pip install -e
'.[playground,examples]'` gives both them and the GIFs' pyopengl), a residual cost in a few
lines, a success predicate on the episode, and the planner and settings that docs/control.md
recommends for it. Every task runs `--starts` episodes from random starts (seeds 0, 1, ...) with
control.receding_horizon, and reports how many it solved, the final cost, and the time of a
control step (planning and the real system's step, with --threads threads) against the control
period: the real-time factor, control period / wall seconds of a control step (the median after
the first, which compiles), with CPU seconds beside it. Writes
benchmarks/results/control_suite-<date>.json (one entry per task: task, planner, starts, solved,
real_time_factor, ...), a bar plot, and a GIF of each task's first episode under
benchmarks/results/control_suite/.
"""

import argparse
import dataclasses
import functools
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

os.environ.setdefault("MUJOCO_GL", "egl")  # the GIFs render headless; read when mujoco loads

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import control  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))
from _common import (  # noqa: E402, I001
  RESULTS,
  machine_info,
  package_file,
  pyplot,
  save_figure,
  write_result,
)
import common  # noqa: E402  # pyright: ignore[reportMissingImports]
import hopper_policy  # noqa: E402
from common import render, run_mpc  # noqa: E402  # pyright: ignore[reportMissingImports]

XMLS = "_src/dm_control_suite/xmls"
PEER_PYTHONS = [str(HERE.parent / ".venv-rl/bin/python")]


def suite_xml(name: str) -> Path:
  """Playground's dm_control suite XML `name` (e.g. "acrobot"), from any interpreter that has it."""
  path = package_file("mujoco_playground", f"{XMLS}/{name}.xml", PEER_PYTHONS)
  if path is None:
    raise SystemExit(f"{name}.xml not found: the suite reads dm_control's models from "
                     "mujoco_playground (pip install playground, or the .venv-rl that .ci/run "
                     "builds)")
  return path


# -- tasks --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Setup:
  """A task on its model: the cost, how to start and how to judge an episode.

  Attributes:
    cost: the planner's control.Cost.
    start: rng -> a state row (nstate,) of the episode's start.
    solved: rows (T + 1, nstate), the real system's states from the start at every control
      step (under a policy: every physics step) -> (whether the episode solved the task, a dict
      of the numbers it judged by).
  """

  cost: control.Cost
  start: Callable[[np.random.Generator], np.ndarray]
  solved: Callable[[np.ndarray], tuple[bool, dict[str, float]]]


@dataclasses.dataclass(frozen=True)
class Task:
  """A task of the suite and the planner docs/control.md recommends for it.

  Attributes:
    name: the task's name.
    model: the suite XML's name.
    setup: (model, sim, control period in seconds) -> Setup.
    planner: "ilqr", a sampling method ("predictive", "mppi", "cem"), or "ppo": a policy that
      Brax's PPO trains in the run (the hopper's: benchmarks/hopper_policy.py).
    settings: the planner's settings (control.ILQRSettings, the sampling method's, or
      PolicySettings).
    horizon_s: the planning horizon in seconds (0 for a policy).
    control_s: the control period in seconds (a whole number of physics steps).
    seconds: the episode's length.
    iterations: iLQR iterations per control step.
    camera: the GIF's camera (-1: a free camera following body `track`).
    track: the body a free camera follows.
    build: edits the XML's MjSpec before it compiles, where the suite's env builds the model
      from the XML (the swimmer's segments, as Playground's Swim env adds them).
  """

  name: str
  model: str
  setup: Callable[[mujoco.MjModel, mjbatch_jax.Simulator, float], Setup]
  planner: str
  settings: Any
  horizon_s: float
  control_s: float
  seconds: float
  iterations: int = 1
  camera: str | int = -1
  track: str | None = None
  build: Callable[[mujoco.MjSpec], None] | None = None


def load_model(task: Task) -> mujoco.MjModel:
  """The task's model: its suite XML, edited by task.build."""
  spec = mujoco.MjSpec.from_file(str(suite_xml(task.model)))
  if task.build is not None:
    task.build(spec)
  return spec.compile()


def _id(model: mujoco.MjModel, kind: mujoco.mjtObj, name: str) -> int:
  found = mujoco.mj_name2id(model, kind, name)
  if found < 0:
    raise ValueError(f"the model has no {kind.name[6:].lower()} named {name!r}")
  return found


def _trace(model: mujoco.MjModel, rows: np.ndarray, field: str, index: int) -> np.ndarray:
  """(steps + 1, 3) an MjData position field's row `index` ("site_xpos", "geom_xpos", "xpos")
  along the rows, by mj_kinematics on the host."""
  data = mujoco.MjData(model)
  out = np.empty((len(rows), 3))
  for i, row in enumerate(rows):
    mujoco.mj_setState(model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
    mujoco.mj_kinematics(model, data)
    out[i] = getattr(data, field)[index]
  return out


def _last(rows: np.ndarray, seconds: float, period: float) -> slice:
  """The rows of the episode's last `seconds` (one row per control step)."""
  return slice(max(len(rows) - round(seconds / period) - 1, 0), None)


def _hanging(layout: Any, qpos: Sequence[float], noise: float, rng: np.random.Generator,
             base: np.ndarray) -> np.ndarray:
  """The row base with its qpos at qpos plus Gaussian noise of `noise` rad (a seeded start)."""
  row = np.array(base)
  row[layout.qpos] = np.asarray(qpos) + noise * rng.standard_normal(len(qpos))
  return row


# Each task below: what it asks, its residual (blocks of the cost), its start and its test.


def with_energy(spec: mujoco.MjSpec) -> None:
  """Has MuJoCo compute the mechanical energy (mjData.energy, observable by a cost); the physics
  is unchanged."""
  spec.option.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY


def _energy_at(model: mujoco.MjModel, qpos: np.ndarray) -> float:
  """The energy (potential + kinetic) of the model at rest at qpos."""
  data = mujoco.MjData(model)
  data.qpos[:] = qpos
  mujoco.mj_forward(model, data)
  return float(data.energy.sum())


def _swing_up(field: str, index: int, goal: np.ndarray, tip: float, energy: float,
              model: mujoco.MjModel, layout: Any) -> control.Cost:
  """A swing-up's cost: a point's gap to its goal (row `index` of the observed `field`; an l2
  norm: from afar a pull of constant strength, quadratic within `tip` m), the energy's gap to
  resting at the top, small velocity and control terms. The energy term makes iLQR pump: on the
  gap alone its local model settles where a weak motor cannot go on (the acrobot folded, its
  forearm hanging), and the l2 norm lets the energy's pull outweigh the gap's there."""
  top = _energy_at(model, np.zeros(model.nq))

  def residual(x, u, obs, t):
    return jnp.concatenate([obs[field][index] - goal, (obs["energy"].sum() - top)[None],
                            0.1 * x[layout.qvel], 0.1 * u])

  return control.Cost(residual, (control.Term(3, 1.0, "l2", tip), control.Term(1, energy),
                                 control.Term(model.nv), control.Term(model.nu)),
                      observe=(field, "energy"))


def acrobot(qpos: tuple[float, float], noise: float):
  """The acrobot's tip to the target above the shoulder, from qpos (+- noise rad, at rest):
  swing-up from hanging, or from near the top, where the elbow's 2 Nm cannot hold a lean of
  0.1 rad (clipped LQR recovers 10% of such starts): recover and hold. Solved: the tip within
  0.2 m of the target for the last 3 s."""

  def setup(model, sim, period) -> Setup:
    layout, base = sim.layout, np.asarray(sim.init_state(1)[0])
    tip = _id(model, mujoco.mjtObj.mjOBJ_SITE, "tip")
    target = model.site_pos[_id(model, mujoco.mjtObj.mjOBJ_SITE, "target")]
    cost = _swing_up("site_xpos", tip, target, 0.3, 0.3, model, layout)

    def solved(rows):
      gap = np.linalg.norm(_trace(model, rows, "site_xpos", tip) - target, axis=1)
      worst = float(gap[_last(rows, 3.0, period)].max())
      return worst < 0.2, {"worst_tip_gap_last_3s": worst}

    return Setup(cost, lambda rng: _hanging(layout, qpos, noise, rng, base), solved)

  return setup


def pendulum_swingup(model, sim, period) -> Setup:
  """Swing the pendulum up from hanging (1 Nm against 4.9 Nm of gravity: pumping flat out takes
  6.4 s to reach the top's energy) and hold it; solved: within 0.2 rad of upright for the last
  3 s."""
  layout, base = sim.layout, np.asarray(sim.init_state(1)[0])
  pole = _id(model, mujoco.mjtObj.mjOBJ_BODY, "pole")
  data = mujoco.MjData(model)
  mujoco.mj_kinematics(model, data)
  cost = _swing_up("xipos", pole, np.array(data.xipos[pole]), 0.1, 10.0, model, layout)

  def solved(rows):
    angle = np.abs(np.angle(np.exp(1j * rows[:, layout.qpos][:, 0])))
    worst = float(angle[_last(rows, 3.0, period)].max())
    return worst < 0.2, {"worst_angle_last_3s": worst}

  return Setup(cost, lambda rng: _hanging(layout, [np.pi], 0.1, rng, base), solved)


def cartpole(hinge: float, noise: float, whole: bool):
  """The cart-pole's pole upright over the rail's centre, from hanging (swing-up) or near upright
  (balance: the pole within `noise` rad); the cart starts within 0.2 m of the centre. Solved:
  the pole within 0.2 rad of upright and the cart within 0.5 m of the centre for the last 3 s,
  or with `whole` at every control step (balance)."""

  def setup(model, sim, period) -> Setup:
    layout, base = sim.layout, np.asarray(sim.init_state(1)[0])

    def residual(x, u, obs, t):
      q, v = x[layout.qpos], x[layout.qvel]
      return jnp.concatenate([1 - jnp.cos(q[1:]), 0.3 * q[:1], 0.1 * v, 0.1 * u])

    def start(rng):
      row = np.array(base)
      row[layout.qpos] = [rng.uniform(-0.2, 0.2), hinge + rng.uniform(-noise, noise)]
      return row

    def solved(rows):
      q = rows[:, layout.qpos]
      judged = slice(1, None) if whole else _last(rows, 3.0, period)
      angle = float(np.abs(np.angle(np.exp(1j * q[judged, 1]))).max())
      off = float(np.abs(q[judged, 0]).max())
      return angle < 0.2 and off < 0.5, {"worst_angle": angle, "worst_offset": off}

    return Setup(control.Cost(residual, (control.Term(1), control.Term(1), control.Term(2),
                                         control.Term(1))), start, solved)

  return setup


def point_mass_reach(model, sim, period) -> Setup:
  """Bring the point mass to the target (the origin) from a random start and stop there;
  solved: within 0.015 m (the target's radius) for the last 1 s."""
  layout, base = sim.layout, np.asarray(sim.init_state(1)[0])

  def residual(x, u, obs, t):
    return jnp.concatenate([x[layout.qpos], 0.1 * x[layout.qvel], 0.01 * u])

  def start(rng):
    row = np.array(base)
    row[layout.qpos] = rng.uniform(-0.25, 0.25, 2)
    return row

  def solved(rows):
    gap = np.linalg.norm(rows[_last(rows, 1.0, period), layout.qpos], axis=1)
    return float(gap.max()) < 0.015, {"worst_gap_last_1s": float(gap.max())}

  return Setup(control.Cost(residual, (control.Term(2), control.Term(2), control.Term(2))), start,
               solved)


def swimmer_links(spec: mujoco.MjSpec, bodies: int = 6) -> None:
  """Playground's swimmer.xml holds the head alone; its Swim env (as dm_control's swimmer) adds
  `bodies - 1` segments, each hinged to the last with a motor, joint range +-360 / bodies deg."""
  parent = spec.body("head")
  swimmer = spec.find_default("swimmer")
  visual, inertial = spec.find_default("visual"), spec.find_default("inertial")
  limit = 360.0 / bodies  # degrees, as the XML's compiler reads angles
  for i in range(bodies - 1):
    body = parent.add_body(name=f"segment_{i}", pos=[0, 0.1, 0], childclass="swimmer")
    body.add_geom(name=f"visual_{i}", default=visual)
    body.add_geom(name=f"inertial_{i}", default=inertial)
    body.add_site(name=f"site_{i}", default=swimmer)
    body.add_joint(name=f"joint_{i}", default=swimmer, range=[-limit, limit])
    spec.add_actuator(name=f"motor_{i}", target=f"joint_{i}",
                      trntype=mujoco.mjtTrn.mjTRN_JOINT, default=spec.default)
    parent = body


def reacher_reach(model, sim, period) -> Setup:
  """Bring the reacher's fingertip to a target placed at random in the reachable annulus (the
  target is a mocap body, so it rides in the state row) and hold it there; solved: the
  fingertip within the target's radius plus its own for the last 1 s."""
  layout, base = sim.layout, np.asarray(sim.init_state(1)[0])
  finger = _id(model, mujoco.mjtObj.mjOBJ_GEOM, "finger")
  reach = float(model.geom_size[_id(model, mujoco.mjtObj.mjOBJ_GEOM, "target"), 0]
                + model.geom_size[finger, 0])
  wrist = model.jnt_range[_id(model, mujoco.mjtObj.mjOBJ_JOINT, "wrist")]

  def residual(x, u, obs, t):
    gap = obs["geom_xpos"][finger, :2] - x[layout.mocap_pos][:2]
    return jnp.concatenate([gap, 0.02 * x[layout.qvel], 0.01 * u])

  def start(rng):
    row = np.array(base)
    row[layout.qpos] = [rng.uniform(-np.pi, np.pi), rng.uniform(*wrist)]
    angle, radius = rng.uniform(0, 2 * np.pi), rng.uniform(0.05, 0.2)
    row[layout.mocap_pos.start:layout.mocap_pos.start + 2] = radius * np.array(
      [np.sin(angle), np.cos(angle)])
    return row

  def solved(rows):
    gap = np.linalg.norm(_trace(model, rows, "geom_xpos", finger)[:, :2]
                         - rows[:, layout.mocap_pos][:, :2], axis=1)
    worst = float(gap[_last(rows, 1.0, period)].max())
    return worst < reach, {"worst_gap_last_1s": worst}

  cost = control.Cost(residual, (control.Term(2, 1.0, "l2", 0.01), control.Term(2),
                                 control.Term(2)), observe=("geom_xpos",))
  return Setup(cost, start, solved)


def swimmer_reach(model, sim, period) -> Setup:
  """Swim the six-link swimmer's nose to a target 0.6-1 m away in a random direction (a mocap
  body, in the state row), from a random heading and shape; solved: the nose within the
  target's radius (0.1 m) for the last 1 s."""
  layout, base = sim.layout, np.asarray(sim.init_state(1)[0])
  nose = _id(model, mujoco.mjtObj.mjOBJ_GEOM, "nose")
  radius = float(model.geom_size[_id(model, mujoco.mjtObj.mjOBJ_GEOM, "target"), 0])
  joints = model.jnt_range[3:]

  def residual(x, u, obs, t):
    return jnp.concatenate([obs["geom_xpos"][nose, :2] - x[layout.mocap_pos][:2], u])

  def start(rng):
    row = np.array(base)
    row[layout.qpos] = np.r_[0.0, 0.0, rng.uniform(-np.pi, np.pi),
                             rng.uniform(joints[:, 0], joints[:, 1])]
    angle, distance = rng.uniform(0, 2 * np.pi), rng.uniform(0.6, 1.0)
    row[layout.mocap_pos.start:layout.mocap_pos.start + 2] = distance * np.array(
      [np.cos(angle), np.sin(angle)])
    return row

  def solved(rows):
    nose_path = _trace(model, rows, "geom_xpos", nose)
    gap = np.linalg.norm(nose_path[:, :2] - rows[:, layout.mocap_pos][:, :2], axis=1)
    worst = float(gap[_last(rows, 1.0, period)].max())
    return worst < radius, {"worst_gap_last_1s": worst, "closest": float(gap.min())}

  cost = control.Cost(residual, (control.Term(2, 1.0, "l2", 0.04), control.Term(model.nu, 0.01)),
                      observe=("geom_xpos",))
  return Setup(cost, start, solved)


def _floor_touches(model: mujoco.MjModel, rows: np.ndarray, geoms: Sequence[str]) -> int:
  """How many of the rows have one of geoms on the floor, by mj_forward on the host."""
  floor = _id(model, mujoco.mjtObj.mjOBJ_GEOM, "floor")
  watched = {_id(model, mujoco.mjtObj.mjOBJ_GEOM, name) for name in geoms}
  data, count = mujoco.MjData(model), 0
  for row in rows:
    mujoco.mj_setState(model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
    mujoco.mj_forward(model, data)
    pairs = zip(data.contact.geom1[:data.ncon], data.contact.geom2[:data.ncon], strict=True)
    count += any(floor in (g1, g2) and {g1, g2} & watched for g1, g2 in pairs)
  return count


def _planar(model: mujoco.MjModel) -> tuple[int, int, int, float, int]:
  """A planar walker's (dm_control's hopper, walker) qpos addresses of rootx, rootz and rooty,
  the torso's height at rootz = 0, and the sensordata address of the centre of mass's speed
  (not the torso's: a torso pitching forward is not walking)."""
  ahead, up, pitch = (int(model.jnt_qposadr[_id(model, mujoco.mjtObj.mjOBJ_JOINT, n)])
                      for n in ("rootx", "rootz", "rooty"))
  z0 = float(model.body_pos[_id(model, mujoco.mjtObj.mjOBJ_BODY, "torso"), 2])
  com = int(model.sensor_adr[_id(model, mujoco.mjtObj.mjOBJ_SENSOR, "torso_subtreelinvel")])
  return ahead, up, pitch, z0, com


def walker_cost(height: float, speed: float, weights: tuple[float, ...] = (10.0, 3.0, 1.0, 0.1)):
  """MJPC's walker cost for a planar walker: the torso at `height` and upright, moving forward at
  `speed` m/s, small controls (height, rotation, speed, control, weighted by `weights`)."""

  def build(model: mujoco.MjModel, layout: Any) -> control.Cost:
    _, up, pitch, z0, com = _planar(model)

    def residual(x, u, obs, t):
      q = x[layout.qpos]
      return jnp.stack([z0 + q[up] - height, q[pitch], obs["sensordata"][com] - speed, *u])

    return control.Cost(residual, (control.Term(1, weights[0]), control.Term(1, weights[1]),
                                   control.Term(1, weights[2]), control.Term(model.nu, weights[3])),
                        observe=("sensordata",))

  return build


def _locomotion(distance: float, lowest: float, tilt: float,
                cost: Callable[[mujoco.MjModel, Any], control.Cost],
                upper_body: tuple[str, ...] = ("torso", "nose", "pelvis", "thigh")):
  """A planar walker's task (dm_control's hopper, walker), planned with cost ((model, layout) ->
  the planner's control.Cost); solved: the torso `distance` m or more forward, never below
  `lowest` m nor tilted more than `tilt` rad, and never down on its torso, hips or thighs (the
  geoms `upper_body`): a hopper fallen onto its knee holds its torso above 0.6 m. A shin may
  brush the floor beside its foot as a walker steps."""

  def setup(model, sim, period) -> Setup:
    layout, base = sim.layout, np.asarray(sim.init_state(1)[0])
    ahead, up, pitch, z0, _ = _planar(model)
    limited = np.flatnonzero(model.jnt_limited)
    lower, upper = model.jnt_range[limited].T

    def start(rng):
      row = np.array(base)
      q = row[layout.qpos]
      q[model.jnt_qposadr[limited]] = np.clip(0.1 * rng.standard_normal(len(limited)), lower,
                                              upper)
      row[layout.qpos] = q
      return row

    def solved(rows):
      q = rows[:, layout.qpos]
      moved = float(q[-1, ahead] - q[0, ahead])
      low = float((z0 + q[:, up]).min())
      worst_tilt = float(np.abs(q[:, pitch]).max())
      down = _floor_touches(model, rows, upper_body)
      ok = moved >= distance and low > lowest and worst_tilt < tilt and down == 0
      return ok, {"moved": moved, "lowest_torso": low, "worst_tilt": worst_tilt,
                  "steps_upper_body_down": down}

    return Setup(cost(model, layout), start, solved)

  return setup


def hopper_cost(pace: float, height: float, horizon: int, lead: float = 0.3,
                knee: float = 1.0):
  """The hopper's cost, found over ten rounds (docs/control.md): hop at `pace` m/s with the torso
  at `height`. MJPC's walker cost (height, rotation, speed) lunges or stands still; what hops is
  the foot's x on a target moving at `pace` (its x in the model's pose + pace x the state's
  time: a gait reference reads `x[layout.time]`, the knot index restarts every step), the torso's
  height and pitch, a flat foot, the knee bent at most `knee` rad, small controls, and at the
  plan's last knot only (`horizon` control steps ahead) a capture state: the centre of mass
  `lead` s ahead (position + lead x speed) over the foot's middle, at `pace` and `height`. The
  capture term is what keeps a sampled plan from ending in a fall the horizon cannot see."""

  def build(model: mujoco.MjModel, layout: Any) -> control.Cost:
    _, up, pitch, z0, com_speed = _planar(model)
    joint = {n: int(model.jnt_qposadr[_id(model, mujoco.mjtObj.mjOBJ_JOINT, n)])
             for n in ("waist", "hip", "knee", "ankle")}
    torso = _id(model, mujoco.mjtObj.mjOBJ_BODY, "torso")
    foot = _id(model, mujoco.mjtObj.mjOBJ_GEOM, "foot")
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    foot0 = float(data.geom_xpos[foot, 0])
    angles = jnp.array([pitch, *joint.values()])  # their sum is the foot's pitch

    def residual(x, u, obs, t):
      q = x[layout.qpos]
      foot_x, speed = obs["geom_xpos"][foot, 0], obs["sensordata"][com_speed]
      torso_z = z0 + q[up]
      return jnp.stack([foot_x - foot0 - pace * x[layout.time][0], torso_z - height,
                        q[pitch], q[angles].sum(), jnp.maximum(q[joint["knee"]] - knee, 0.0),
                        obs["subtree_com"][torso, 0] + lead * speed - foot_x, speed - pace,
                        torso_z - height, *u])

    last = np.r_[np.zeros(horizon), 1000.0]
    terms = (control.Term(1, 150.0), control.Term(1, 100.0), control.Term(1, 30.0),
             control.Term(1, 10.0), control.Term(1, 100.0), control.Term(3, last),
             control.Term(model.nu, 0.1))
    return control.Cost(residual, terms, observe=("geom_xpos", "sensordata", "subtree_com"))

  return build


class PolicySettings(NamedTuple):
  """A "ppo" task's training: PPO iterations and seed (benchmarks/hopper_policy.py's flags)."""

  iterations: int = 1200
  seed: int = 0


ILQR = control.ILQRSettings(final_gains=False)  # receding horizon: no extra linearisation
HOPPER_HORIZON_S, HOPPER_CONTROL_S, HOPPER_KNOTS = 1.25, 0.005, 12
HOPPER_HORIZON = round(HOPPER_HORIZON_S / HOPPER_CONTROL_S)
HOPPER = _locomotion(1.0, 0.6, 0.8, hopper_cost(0.35, 0.93, HOPPER_HORIZON))

TASKS = [
  Task("acrobot_swingup", "acrobot", acrobot((np.pi, 0.0), 0.1), "ilqr", ILQR, horizon_s=4.0,
       control_s=0.05, seconds=10.0, iterations=3, camera="fixed", build=with_energy),
  Task("acrobot_balance", "acrobot", acrobot((0.0, 0.0), 0.1), "ilqr", ILQR, horizon_s=4.0,
       control_s=0.05, seconds=10.0, iterations=3, camera="fixed", build=with_energy),
  Task("pendulum_swingup", "pendulum", pendulum_swingup, "ilqr", ILQR, horizon_s=3.0,
       control_s=0.05, seconds=10.0, iterations=2, camera="fixed", build=with_energy),
  Task("cartpole_swingup", "cartpole", cartpole(np.pi, 0.1, False), "ilqr", ILQR, horizon_s=2.0,
       control_s=0.05, seconds=10.0, iterations=2, camera="fixed"),
  Task("cartpole_balance", "cartpole", cartpole(0.0, 0.15, True), "ilqr", ILQR, horizon_s=1.0,
       control_s=0.05, seconds=5.0, iterations=1, camera="fixed"),
  Task("point_mass_reach", "point_mass", point_mass_reach, "predictive",
       control.PredictiveSettings(num_samples=64, num_knots=5, noise=0.5), horizon_s=1.0,
       control_s=0.04, seconds=5.0, camera=-1),
  Task("reacher_reach", "reacher", reacher_reach, "predictive",
       control.PredictiveSettings(num_samples=32, num_knots=5, noise=0.1), horizon_s=0.8,
       control_s=0.04, seconds=4.0, camera="fixed"),
  Task("swimmer_reach", "swimmer", swimmer_reach, "predictive",
       control.PredictiveSettings(num_samples=16, num_knots=8, noise=0.5), horizon_s=2.0,
       control_s=0.06, seconds=20.0, camera=-1, track="head", build=swimmer_links),
  # No planner's setting hopped (docs/control.md, "The hopper: no planner hopped, a policy
  # does"): a policy trained in the run, acting every 0.02 s. The planners' best is
  # HOPPER_SAMPLING, below.
  Task("hopper_hop", "hopper", HOPPER, "ppo", PolicySettings(), horizon_s=0.0,
       control_s=hopper_policy.CONTROL_STEPS * HOPPER_CONTROL_S, seconds=5.0, camera="cam0"),
  Task("walker_walk", "walker", _locomotion(3.5, 0.9, 1.0, walker_cost(1.2, 1.2),
                                            upper_body=("torso", "right_thigh", "left_thigh")),
       "predictive",
       control.PredictiveSettings(num_samples=32, num_knots=3, noise=0.5), horizon_s=0.8,
       control_s=0.04, seconds=5.0, camera="side"),
]

# The best sampling setting found for the hopper (0 of 5), replanned at the physics rate: between
# plans 0.02 s apart the hopper falls. Run by name (--tasks hopper_hop_sampling), not by default.
HOPPER_SAMPLING = Task(
  "hopper_hop_sampling", "hopper", HOPPER, "predictive",
  control.PredictiveSettings(num_samples=64, num_knots=HOPPER_KNOTS, noise=0.4, iterations=3,
                             noise_decay=0.5),
  horizon_s=HOPPER_HORIZON_S, control_s=HOPPER_CONTROL_S, seconds=5.0, camera="cam0")


# -- running ------------------------------------------------------------------------------------


def make_planner(task: Task, model: mujoco.MjModel, sim: mjbatch_jax.Simulator, cost: Any
                 ) -> control.Planner:
  """The task's planner: horizon and control period from seconds to controls and steps."""
  nstep = round(task.control_s / model.opt.timestep)
  if not np.isclose(nstep * model.opt.timestep, task.control_s):
    raise ValueError(f"{task.name}: the control period {task.control_s} s is not a whole number "
                     f"of physics steps of {model.opt.timestep} s")
  horizon = max(round(task.horizon_s / task.control_s), 1)
  if task.planner == "ilqr":
    return control.ilqr_planner(cost, sim.params(1), horizon=horizon, nstep=nstep,
                                iterations=task.iterations, settings=task.settings)
  return control.sampling(cost, sim.params(1), horizon=horizon, nstep=nstep,
                          settings=task.settings)


def episode_cost(task: Task, cost: Any, rows: np.ndarray, sim: mjbatch_jax.Simulator) -> float:
  """The task's cost of the episode (every control step's residual, unit weights per term as
  the planner's own, the controls as applied), per control step."""
  states = jnp.asarray(rows)
  ctrls = states[1:, sim.layout.ctrl]
  ctrls = jnp.concatenate([ctrls, ctrls[-1:]])
  obs = mjbatch_jax.forward(states, sim.params(len(rows)), cost.observe) if cost.observe else {}
  r = jax.vmap(cost.residual)(states, ctrls, obs, jnp.arange(len(rows)))
  total = 0.0
  offset = 0
  for term in cost.terms:
    block = r[:, offset:offset + term.size]
    weight = float(np.ravel(np.asarray(term.weight, np.float64))[0])  # the running weight
    total += float(jnp.sum(control.norm(term.norm, block, term.param))) * weight
    offset += term.size
  return total / len(rows)


def task_steps(task: Task, seconds: float | None) -> int:
  """Control steps of one episode of the task."""
  return round((task.seconds if seconds is None else seconds) / task.control_s)


def train_policy(task: Task, threads: int, checkpoint: Path, iterations: int
                 ) -> dict[str, Any]:
  """Trains a "ppo" task's policy by benchmarks/hopper_policy.py in a subprocess (Brax trains in
  float32, this process runs in float64) into checkpoint; returns the training's size and time."""
  if importlib.util.find_spec("brax") is None:
    raise SystemExit(f"{task.name}'s policy is trained by Brax's PPO: pip install -e '.[rl]'")
  from mjbatch_jax.agents import ppo

  subprocess.run([sys.executable, str(HERE / "hopper_policy.py"), "--xml",
                  str(suite_xml(task.model)), "--out", str(checkpoint), "--iterations",
                  str(iterations), "--threads", str(threads), "--seed", str(task.settings.seed)],
                 check=True)
  _, meta = ppo.read_checkpoint(checkpoint)
  last = meta["curve"][-1]
  return {"checkpoint": checkpoint.name, "iterations": meta["iteration"],
          "env_steps": last["env_steps"], "train_wall_s": last["wall_s"],
          "train_cpu_s": last["cpu_s"]}


def policy_step(task: Task, checkpoint: Path, sim: mjbatch_jax.Simulator, nstep: int
                ) -> Callable[[jax.Array], jax.Array]:
  """The control step of the checkpoint's policy: a row -> the rows of the nstep physics steps
  its action is held for, (nstep, nstate). Deterministic: the policy's mean action."""
  from mjbatch_jax.agents import ppo

  env = hopper_policy.HopperHop(suite_xml(task.model), num_threads=1)
  try:
    policy, _ = ppo.load_policy(checkpoint, env)
  finally:
    env.close()
  layout, params, key = sim.layout, sim.params(1), jax.random.PRNGKey(0)

  @jax.jit
  def step(row):
    action, _ = policy(hopper_policy.observation(row[layout.qpos], row[layout.qvel]), key)
    held = jnp.broadcast_to(action.astype(row.dtype), (1, nstep, action.shape[-1]))
    states, _ = mjbatch_jax.rollout(row[None], held, params, nstep=1)
    return states[0]

  return step


def run_policy(step: Callable[[jax.Array], jax.Array], state: jax.Array, steps: int, bar: Any
               ) -> tuple[np.ndarray, dict[str, float]]:
  """`steps` control steps of a policy from state: the states at every physics step, and the
  steady-state median wall and CPU seconds of a control step (as common.run_mpc's)."""
  rows, wall, cpu = [np.asarray(state)], [], []
  for _ in range(steps):
    begin, begin_cpu = time.perf_counter(), time.process_time()
    held = jax.block_until_ready(step(state))
    wall.append(time.perf_counter() - begin)
    cpu.append(time.process_time() - begin_cpu)
    rows.extend(np.asarray(held))
    state = held[-1]
    bar.update()
  steady = slice(1, None) if steps > 1 else slice(None)
  return np.array(rows), {"seconds_per_step": float(np.median(wall[steady])),
                          "cpu_per_step": float(np.median(cpu[steady]))}


def run_task(task: Task, starts: int, threads: int, seconds: float | None, gif: Path | None,
             bar: Any, folder: Path, policy_iterations: int | None = None) -> dict[str, Any]:
  """Runs `starts` episodes of the task; returns its entry of the results. bar: the
  common.Progress its control steps count on. folder: where a "ppo" task's checkpoint goes;
  policy_iterations: its training's iterations (default the task's own)."""
  model = load_model(task)
  length = task.seconds if seconds is None else seconds
  steps = task_steps(task, seconds)
  episodes = []
  training: dict[str, Any] = {}
  with mjbatch_jax.Simulator(model, num_threads=threads) as sim:
    setup = task.setup(model, sim, task.control_s)
    if task.planner == "ppo":
      checkpoint = folder / f"{task.name}_policy.npz"
      iterations = task.settings.iterations if policy_iterations is None else policy_iterations
      training = train_policy(task, threads, checkpoint, iterations)
      step = policy_step(task, checkpoint, sim, round(task.control_s / model.opt.timestep))
      row_period = model.opt.timestep  # the predicate checks every physics step, as for MPC
      run = lambda state, seed: run_policy(step, state, steps, bar)  # noqa: E731
    else:
      planner = make_planner(task, model, sim, setup.cost)
      step = control.receding_horizon(planner, sim.params(1))
      row_period = task.control_s
      run = lambda state, seed: run_mpc(planner, sim.params(1), state, seed, steps,  # noqa: E731
                                        step=step, bar=bar)
    for s in range(starts):
      state = jnp.asarray(setup.start(np.random.default_rng(s)))
      rows, timing = run(state, s)
      ok, numbers = setup.solved(rows)
      episodes.append({"seed": s, "solved": bool(ok), **numbers,
                       "cost_per_step": episode_cost(task, setup.cost, rows, sim), **timing})
      say = functools.partial(bar.write, keep=True)
      say(f"{task.name} start {s}: solved={ok} {numbers} "
          f"{episodes[-1]['seconds_per_step'] * 1e3:.1f} ms/step")
      if gif is not None and s == 0:
        fps = min(1 / row_period, 10.0)  # small files: a GIF per task in the repository
        every = max(round(1 / (row_period * fps)), 1)
        say(render(model, rows[::every], gif / f"{task.name}.gif", 1 / (row_period * every),
                   camera=task.camera, track_body=task.track, height=150, width=200))
  step_wall = float(np.median([e["seconds_per_step"] for e in episodes]))
  step_cpu = float(np.median([e["cpu_per_step"] for e in episodes]))
  return {
    "task": task.name, "model": f"dm_control {task.model} (mujoco_playground)",
    "planner": task.planner, "settings": {k: v for k, v in task.settings._asdict().items()},
    "horizon_s": task.horizon_s, "control_s": task.control_s, "seconds": length,
    "starts": starts, "solved": sum(e["solved"] for e in episodes),
    "real_time_factor": task.control_s / step_wall,
    "cpu_per_control_period": step_cpu / task.control_s,
    "seconds_per_step": step_wall, "cpu_per_step": step_cpu,
    "cost_per_step": float(np.median([e["cost_per_step"] for e in episodes])),
    **({"training": training} if training else {}),
    "episodes": episodes,
  }


def plot(entries: list[dict[str, Any]], path: Path) -> Path | None:
  plt = pyplot()
  if plt is None:
    return None
  fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 0.45 * len(entries) + 1.5), sharey=True)
  names = [e["task"] for e in entries]
  y = np.arange(len(entries))
  ax0.barh(y, [e["solved"] / e["starts"] for e in entries], color="tab:green")
  ax0.set_yticks(y, [f"{n} ({e['planner']})" for n, e in zip(names, entries, strict=True)])
  ax0.set_xlim(0, 1)
  ax0.axvline(0.8, color="k", lw=0.8, ls="--")
  ax0.set_xlabel("share of starts solved")
  ax1.barh(y, [e["real_time_factor"] for e in entries], color="tab:blue")
  ax1.axvline(1.0, color="k", lw=0.8, ls="--")
  ax1.set_xscale("log")
  ax1.set_xlabel("real-time factor (control period / wall s per control step)")
  fig.suptitle("control suite: dm_control models, recommended planners")
  fig.tight_layout()
  return save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
  parser.add_argument("--tasks", default=",".join(t.name for t in TASKS),
                      help="comma-separated task names (default: all but hopper_hop_sampling)")
  parser.add_argument("--starts", type=int, default=5, help="episodes per task (seeds 0, 1, ...)")
  parser.add_argument("--threads", type=int, default=2, help="the batch's threads")
  parser.add_argument("--seconds", type=float, default=None,
                      help="episode length for every task (default: each task's own)")
  parser.add_argument("--quick", action="store_true",
                      help="one start of 0.5 s per task, no GIF (for tests)")
  parser.add_argument("--no-gif", action="store_true", help="do not render the GIFs")
  parser.add_argument("--policy-iterations", type=int, default=None,
                      help="PPO iterations of a policy's training (default: the task's own; "
                      "--quick: 2)")
  parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
  common.add_progress_args(parser)
  args = parser.parse_args(argv)
  by_name = {t.name: t for t in (*TASKS, HOPPER_SAMPLING)}
  chosen = [name for name in args.tasks.split(",") if name]
  unknown = [name for name in chosen if name not in by_name]
  if unknown or not chosen:
    parser.error(f"unknown task(s) {unknown}; the tasks are {sorted(by_name)}")
  if args.starts < 1 or args.threads < 1:
    parser.error("--starts and --threads must be >= 1")
  if args.policy_iterations is not None and args.policy_iterations < 1:
    parser.error("--policy-iterations must be >= 1")
  starts, seconds = (1, 0.5) if args.quick else (args.starts, args.seconds)
  policy_iterations = 2 if args.quick and args.policy_iterations is None else args.policy_iterations
  gif = None if args.quick or args.no_gif else args.out / "control_suite"
  # One bar over every task's control steps (a step's time differs between tasks: the estimate
  # settles as the run goes).
  total = sum(starts * task_steps(by_name[name], seconds) for name in chosen)
  with common.progress(total, "control suite", args, unit="step") as bar:
    entries = [run_task(by_name[name], starts, args.threads, seconds, gif, bar,
                        args.out / "control_suite", policy_iterations) for name in chosen]
  result = {"machine": machine_info(sys.argv if argv is None else ["control_suite.py", *argv]),
            "threads": args.threads, "tasks": entries}
  out = write_result(args.out, "control_suite", result)
  plot(entries, out.with_suffix(".png"))
  for e in entries:
    print(f"{e['task']:20s} {e['planner']:10s} solved {e['solved']}/{e['starts']}  "
          f"real-time factor {e['real_time_factor']:.2f}  cost/step {e['cost_per_step']:.4g}")
  return result


if __name__ == "__main__":
  main()

