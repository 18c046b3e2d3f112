"""Whether a robot can perform a motion: inverse dynamics against its limits, frame by frame.

Given each frame's qpos, qvel and qacc (a reference clip and its derivatives) and which frames
the contact bodies (feet, hands) are on the floor, `feasibility` finds:

- the generalised forces the motion needs (mj_inverse, on a copy of the model without contacts);
- the floor's wrench on each contact body in contact: the free root's rows of those forces can
  only come from the floor, so they are split between the bodies by least squares (forces and
  moments alike, moments in units of force times `lever`), each applied at its sole;
- what is left on the joints: the actuators' torques, compared with their limits, and the
  position-servo targets that would give them (q + (tau + kv qdot) / kp);
- each body's centre of pressure in its sole frame, compared with its sole rectangle, and its
  force with the friction cone and with pushing (a floor cannot pull).

  result = feasibility(model, qpos, qvel, qacc, contact, ["left_foot", "right_foot"],
                       Sole(x=(-0.05, 0.12), half_width=0.025, z=-0.035))
  result.ok, result.worst["torque"], result.peak_ratio(frames_of_the_push)

Frames without contact are ballistic: the root force there is what the motion's physics leaves
unexplained (`flight_wrench`, zero for an exact flight).
"""

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax.motion._arrays import mj_model, numbers
from mjbatch_jax.names import Names


@dataclasses.dataclass(frozen=True)
class Sole:
  """A contact body's sole: a rectangle under the body's frame.

  x: (heel, toe) along the body's x axis (m); half_width: along its y axis (m), centred on the
  body; z: the sole's height along the body's z axis (negative: below the body's origin).

  Example:
    Sole(x=(-0.05, 0.12), half_width=0.025, z=-0.035)  # the G1's foot
  """

  x: tuple[float, float]
  half_width: float
  z: float = 0.0

  def __post_init__(self) -> None:
    try:
      heel, toe = self.x
    except (TypeError, ValueError):
      raise ValueError(f"Sole x must be (heel, toe), got {v.shown(self.x)}") from None
    heel, toe = v.number("Sole heel", heel), v.number("Sole toe", toe)
    if heel >= toe:
      raise ValueError(f"Sole x must be (heel, toe) with heel < toe, got ({heel}, {toe})")
    object.__setattr__(self, "x", (heel, toe))
    object.__setattr__(self, "half_width",
                       v.number("Sole half_width", self.half_width, 0.0, low_open=True))
    object.__setattr__(self, "z", v.number("Sole z", self.z))


@dataclasses.dataclass(frozen=True, eq=False)  # arrays: compare them with np.array_equal
class Feasibility:
  """What a motion asks of the robot, per frame (n frames, nu actuators, k contact bodies).

  torque: (n, nu) joint torques of the actuators' joints. servo: (n, nu) position-servo
  targets that give them (NaN for an actuator that is not a position servo). force: (n, k, 3)
  each contact body's force from the floor (world frame; zero when off the floor). cop: (n, k, 2)
  its centre of pressure (x, y) in its sole frame. flight_wrench: the largest root force (N)
  of the frames without contact. limit: (nu, 2) the torque limits used. torque_ratio: (nu,) the
  peak of torque / limit over the frames. worst: the binding margins, name -> (value, limit)
  (and the actuator's name for "torque"). ok: every margin met. actuators: (nu,) their names
  (#i for an unnamed one).
  """

  torque: np.ndarray
  servo: np.ndarray
  force: np.ndarray
  cop: np.ndarray
  flight_wrench: float
  limit: np.ndarray
  torque_ratio: np.ndarray
  worst: dict
  ok: bool
  actuators: tuple[str, ...]

  def peak_ratio(self, frames: Any) -> np.ndarray:
    """(nu,) the peak of torque / limit over frames (an index or an (n,) bool mask): a phase's.

    Example:
      push = result.peak_ratio((t >= push_start) & (t <= takeoff))
    """
    return _ratio(self.torque[frames], self.limit)

  def summary(self, top: int = 6) -> str:
    """One line for a log: the top actuators by peak torque / limit, and whether all is met.

    Example:
      print("feasibility: " + result.summary())
      # feasibility: peak torque / limit knee 2.57, hip 1.20; NOT within the robot's limits
    """
    worst = np.argsort(-self.torque_ratio, kind="stable")[:v.integer("top", top, low=1)]
    return ("peak torque / limit "
            + ", ".join(f"{self.actuators[i]} {self.torque_ratio[i]:.2f}" for i in worst)
            + ("; within the robot's limits" if self.ok else "; NOT within the robot's limits"))

  def record(self) -> dict:
    """For a JSON report: each actuator's peak torque / limit, the floor's binding margins
    (worst without "torque") and ok, as plain Python values.

    Example:
      json.dumps({"reference": result.record()})
    """
    return {"torque_ratio": dict(zip(self.actuators, self.torque_ratio.tolist(), strict=True)),
            "floor": {k: w for k, w in self.worst.items() if k != "torque"},
            "feasible": bool(self.ok)}


def feasibility(model: mujoco.MjModel, qpos: Any, qvel: Any, qacc: Any, contact: Any,
                contact_bodies: Sequence[str], sole: Sole | Sequence[Sole], *,
                friction: float = 0.6, lever: float = 0.1, checked: Any = None) -> Feasibility:
  """Inverse dynamics of a motion against the robot's limits (see the module docstring).

  Args:
    model: a robot with one free root joint, its actuators (at least one) on hinge or slide
      joints.
    qpos, qvel, qacc: (n, nq), (n, nv), (n, nv) the motion.
    contact: (n,) bool, every contact body on the floor or none; or (n, k) per body.
    contact_bodies: the k bodies the floor may push (at least one).
    sole: one Sole for every contact body, or one each.
    friction: the friction cone's coefficient: |tangential force| <= friction * normal force.
    lever: the length (m) that makes moments forces in the least-squares split.
    checked: (n,) bool, the frames whose contact margins (normal force, friction, centre of
      pressure) count; default every frame (a caller leaves out frames whose accelerations are
      one-sided differences, for instance).

  Example:
    result = feasibility(model, qpos, qvel, qacc, np.ones(len(qpos), bool), ["foot"],
                         Sole((-0.1, 0.1), 0.05))
  """
  model = mj_model("model", model)
  qpos = numbers("qpos", qpos, (None, model.nq))
  n = len(qpos)
  if n == 0:
    raise ValueError("qpos must hold at least one frame")
  qvel = numbers("qvel", qvel, (n, model.nv))
  qacc = numbers("qacc", qacc, (n, model.nv))
  if isinstance(contact_bodies, str) or not isinstance(contact_bodies, Sequence):
    raise ValueError(f"contact_bodies must be a sequence of body names, got "
                     f"{v.shown(contact_bodies)}")
  if not contact_bodies:
    raise ValueError("contact_bodies must name at least one body (those the floor may push)")
  names = Names.of(model)
  bodies = [names.id("body", b) for b in contact_bodies]
  k = len(bodies)
  if 0 in bodies or len(set(bodies)) != k:
    raise ValueError(f"contact_bodies must name distinct bodies of the robot (not the world), "
                     f"got {v.shown(contact_bodies)}")
  contact = _flags("contact", contact, ((n,), (n, k)))
  if contact.ndim == 1:
    contact = np.repeat(contact[:, None], k, axis=1)
  checked = np.ones(n, bool) if checked is None else _flags("checked", checked, ((n,),))
  soles = [sole] * k if isinstance(sole, Sole) else list(sole)
  if len(soles) != k or not all(isinstance(s, Sole) for s in soles):
    raise ValueError(f"sole must be a Sole or {k} of them (one per contact body), got "
                     f"{v.shown(sole)}")
  friction = v.number("friction", friction, 0.0, low_open=True)
  lever = v.number("lever", lever, 0.0, low_open=True)
  free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
  if len(free) != 1:
    raise ValueError(f"model must have one free root joint (the floor's wrench is solved from "
                     f"its rows), it has {len(free)}")
  root = slice(int(model.jnt_dofadr[free[0]]), int(model.jnt_dofadr[free[0]]) + 6)
  if model.nu == 0:
    raise ValueError("model must have actuators (their torques are what is checked), it has none")
  joint_of = model.actuator_trnid[:, 0]
  scalar = [int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)]
  on_joint = model.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT
  # trnid of a site, tendon or body actuator is no joint id: read jnt_type only where it is.
  on_joint[on_joint] = np.isin(model.jnt_type[joint_of[on_joint]], scalar)
  if not np.all(on_joint):
    raise ValueError(f"every actuator must drive a hinge or slide joint; these do not: "
                     f"{[model.actuator(i).name or f'#{i}' for i in np.flatnonzero(~on_joint)]}")

  m = copy.deepcopy(model)
  m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT  # the floor's wrench is solved for
  d = mujoco.MjData(m)
  nv, nu = m.nv, m.nu
  dof, adr = m.jnt_dofadr[joint_of], m.jnt_qposadr[joint_of]
  limit = _limits(m, joint_of)
  kp, kv = m.actuator_gainprm[:, 0], -m.actuator_biasprm[:, 2]
  servo_ok = (kp > 0) & (m.actuator_biasprm[:, 1] == -kp) & (m.actuator_gaintype == 0)
  torque, servo = np.zeros((n, nu)), np.zeros((n, nu))
  force, cop = np.zeros((n, k, 3)), np.zeros((n, k, 2))
  flight_wrench = 0.0
  jacp, jacr = np.zeros((3, nv)), np.zeros((3, nv))
  for i in range(n):
    d.qpos[:], d.qvel[:], d.qacc[:] = qpos[i], qvel[i], qacc[i]
    mujoco.mj_inverse(m, d)
    qfrc = d.qfrc_inverse.copy()
    on = np.flatnonzero(contact[i])
    if len(on):
      rows = []
      for c in on:
        b = bodies[c]
        point = d.xpos[b] + d.xmat[b].reshape(3, 3) @ np.array([0.0, 0.0, soles[c].z])
        mujoco.mj_jac(m, d, jacp, jacr, point, b)
        rows.append(np.concatenate([jacp, jacr / lever]))
      jac = np.concatenate(rows)  # the bodies' wrenches to generalised forces
      wrench = np.linalg.lstsq(jac[:, root].T, qfrc[root], rcond=None)[0]
      qfrc -= jac.T @ wrench
      for j, c in enumerate(on):
        b = bodies[c]
        f, moment = wrench[6 * j:6 * j + 3], wrench[6 * j + 3:6 * j + 6] / lever
        force[i, c] = f
        rot = d.xmat[b].reshape(3, 3)
        local_force, local_moment = rot.T @ f, rot.T @ moment
        fz = max(local_force[2], 1e-9)
        cop[i, c] = (-local_moment[1] / fz, local_moment[0] / fz)
    else:
      flight_wrench = max(flight_wrench, float(np.linalg.norm(qfrc[root][:3])))
    torque[i] = qfrc[dof]
    servo[i] = qpos[i, adr] + (torque[i] + kv * qvel[i, dof]) / kp
  servo[:, ~servo_ok] = np.nan
  ratio = _ratio(torque, limit)
  worst, ok = _margins(m, ratio, servo, force, cop, contact & checked[:, None], soles, friction)
  actuators = tuple(m.actuator(i).name or f"#{i}" for i in range(nu))
  return Feasibility(torque, servo, force, cop, flight_wrench, limit, ratio, worst, ok, actuators)


def _flags(name: str, value: Any, shapes: tuple[tuple[int, ...], ...]) -> np.ndarray:
  out = np.asarray(value)
  if out.dtype != bool or out.shape not in shapes:
    want = " or ".join(v.pattern(s) for s in shapes)
    raise ValueError(f"{name} must be booleans of shape {want}, got {v.shown(value)} of dtype "
                     f"{out.dtype}")
  return out


def _limits(m: mujoco.MjModel, joint_of: np.ndarray) -> np.ndarray:
  """(nu, 2) each actuator's torque range at its joint: the joint's, else the actuator's force
  range times its gear, else unlimited."""
  limit = np.tile([-np.inf, np.inf], (m.nu, 1))
  for a, j in enumerate(joint_of):
    if m.jnt_actfrclimited[j]:
      limit[a] = m.jnt_actfrcrange[j]
    elif m.actuator_forcelimited[a]:
      limit[a] = np.sort(m.actuator_forcerange[a] * m.actuator_gear[a, 0])
  return limit


def _ratio(torque: np.ndarray, limit: np.ndarray) -> np.ndarray:
  """(nu,) the peak over frames of each torque over its limit on its side."""
  if len(torque) == 0:
    return np.zeros(limit.shape[0])
  side = np.where(torque >= 0, limit[:, 1], limit[:, 0])
  return (torque / side).max(axis=0)


def _margins(m, ratio, servo, force, cop, checked, soles, friction) -> tuple[dict, bool]:
  """The binding margins (name -> (value, limit)) and whether all are met."""
  worst_actuator = int(np.argmax(ratio))
  lo, hi = m.actuator_ctrlrange.T
  limited = m.actuator_ctrllimited.astype(bool)
  beyond = np.maximum(lo - servo, servo - hi)[:, limited & ~np.isnan(servo[0])]
  outside_range = float(beyond.max()) if beyond.size else -np.inf
  worst: dict[str, tuple] = {
    "torque": (float(ratio[worst_actuator]), 1.0, m.actuator(worst_actuator).name)}
  ok = ratio.max() <= 1.0 and outside_range <= 0
  if checked.any():
    fz = [force[checked[:, c], c, 2] for c in range(len(soles))]
    slip = [np.linalg.norm(force[checked[:, c], c, :2], axis=-1) / np.maximum(f, 1e-9)
            for c, f in enumerate(fz)]
    x = [cop[checked[:, c], c, 0] for c in range(len(soles))]
    y = [np.abs(cop[checked[:, c], c, 1]) for c in range(len(soles))]
    on = [c for c in range(len(soles)) if checked[:, c].any()]
    fz_all = np.concatenate(fz)
    # Per sole, the body whose margin is smallest binds: its value and its limit.
    heel = min(on, key=lambda c: x[c].min() - soles[c].x[0])
    toe = min(on, key=lambda c: soles[c].x[1] - x[c].max())
    side = min(on, key=lambda c: soles[c].half_width - y[c].max())
    slip_max = float(np.concatenate(slip).max())
    worst.update({
      "normal force N": (float(fz_all.min()), 0.0),
      "friction ratio": (slip_max, friction),
      "cop heel m": (float(x[heel].min()), soles[heel].x[0]),
      "cop toe m": (float(x[toe].max()), soles[toe].x[1]),
      "cop side m": (float(y[side].max()), soles[side].half_width),
    })
    ok = (ok and fz_all.min() > 0 and slip_max <= friction
          and all(x[c].min() >= soles[c].x[0] and x[c].max() <= soles[c].x[1]
                  and y[c].max() <= soles[c].half_width for c in on))
  worst["servo beyond range rad"] = (outside_range, 0.0)
  return worst, bool(ok)


__all__ = ["Feasibility", "Sole", "feasibility"]
