"""Whole-body inverse kinematics: joint angles that put named bodies where tasks ask.

Gauss-Newton on MuJoCo's Jacobians (mj_jacBody, mj_jacSubtreeCom), one pose at a time, in numpy:
the tasks are small objects naming bodies and joints, solved together from a start pose. What is
left free by the tasks (a humanoid's arms while its feet and centre of mass are placed) is
settled by a posture, treated one of two ways:

- "weighted": the posture is one more task, weak, in one damped least squares over all rows;
  every task gives a little to every other (good for reference clips whose targets may conflict);
- "null_space": the tasks are met first (a damped pseudo-inverse), the posture only in their
  null space, so it never pulls a task off its target; joints at a limit that a step would push
  further are frozen and the step solved again (an active set), so that clipping afterwards does
  not stall the other joints.

  ik = IK(model, posture=model.key_qpos[0])
  tasks = [BodyPosition("left_foot", [0.0, 0.1, 0.0]), CentreOfMass([0.0, 0.0, 0.6])]
  solution = ik.solve(model.key_qpos[0], tasks, iterations=60)
  solution.qpos, solution.error  # the pose, and its largest position error (m)

Each step is limited to a trust region (its norm, in the tangent space of qpos) and limited
joints are clipped to their range after it. A solve stops after `iterations` steps or at a step
shorter than `tolerance`.
"""

import dataclasses
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import mujoco
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax.motion._arrays import mj_model, numbers
from mjbatch_jax.names import Names

MODES = ("weighted", "null_space")
# Defaults per mode: "weighted" damps J^T J (a Tikhonov term over every dof), "null_space" damps
# J J^T only enough to keep the pseudo-inverse finite at singular poses.
DAMPING = {"weighted": 1e-3, "null_space": 1e-9}
TRUST_REGION = {"weighted": 0.2, "null_space": 0.3}


def _axes(task: str, axes: Any) -> tuple[int, ...]:
  try:
    out = tuple(v.integer(f"{task} axis", a, 0, 2) for a in axes)
  except TypeError:
    raise ValueError(f"{task} axes must be a sequence of axes in 0..2, got "
                     f"{v.shown(axes)}") from None
  if not out or len(set(out)) != len(out):
    raise ValueError(f"{task} axes must name each of its axes in 0..2 once, got "
                     f"{v.shown(axes)}")
  return out


def _vector(name: str, value: Any, size: int) -> np.ndarray:
  return numbers(name, value, (size,))


def _target(name: str, target: Any, axes: tuple[int, ...]) -> np.ndarray:
  """target as the values of the axes taken: a (3,) point, or one value per axis."""
  value = numbers(name, target)
  if value.shape == (3,):
    return value[list(axes)]
  if value.shape == (len(axes),):
    return value
  raise ValueError(f"{name} must have shape (3,) or ({len(axes)},) (one value per axis), got "
                   f"{value.shape}")


@dataclasses.dataclass(frozen=True)
class BodyPosition:
  """A body's origin at a world position, on some axes.

  target: (3,) world position, or one value per axis in axes. weight: multiplies the task's
  rows and error (its squared error counts weight^2 in "weighted" mode).

  Example:
    BodyPosition("pelvis", [0.0, 0.0, 0.7], weight=5.0, axes=(2,))  # its height only
  """

  body: str
  target: Any
  weight: float = 1.0
  axes: tuple[int, ...] = (0, 1, 2)

  def __post_init__(self) -> None:
    axes = _axes("BodyPosition", self.axes)
    object.__setattr__(self, "axes", axes)
    object.__setattr__(self, "target", _target("BodyPosition target", self.target, axes))
    object.__setattr__(self, "weight", v.number("BodyPosition weight", self.weight, 0.0))


@dataclasses.dataclass(frozen=True)
class BodyOrientation:
  """A body's frame at a world orientation: a unit quaternion (w, x, y, z), used as given.

  Its error is the rotation vector (rad, in the world frame) that turns the body's frame to the
  target: three rows, one per axis.

  Attributes:
    body: the body's name.
    target: (4,) the orientation in the world frame, a unit quaternion (w, x, y, z) (norm 1
      within 1e-6; not normalised here).
    weight: multiplies the task's rows and error (its squared error counts weight^2 in
      "weighted" mode), a number >= 0.

  Raises:
    ValueError: target is not a unit quaternion, or weight is negative.

  Example:
    BodyOrientation("torso_link", [1.0, 0.0, 0.0, 0.0], weight=3.0)
  """

  body: str
  target: Any
  weight: float = 1.0

  def __post_init__(self) -> None:
    quat = _vector("BodyOrientation target", self.target, 4)
    norm = float(np.linalg.norm(quat))
    if abs(norm - 1.0) > 1e-6:
      raise ValueError(f"BodyOrientation target must be a unit quaternion (w, x, y, z), got "
                       f"{v.shown(quat)} of norm {norm:.6g}")
    object.__setattr__(self, "target", quat)
    object.__setattr__(self, "weight", v.number("BodyOrientation weight", self.weight, 0.0))


@dataclasses.dataclass(frozen=True)
class CentreOfMass:
  """The centre of mass of a body's subtree at a world position, on some axes.

  Attributes:
    target: (3,) world position (m), or one value per axis in axes.
    weight: multiplies the task's rows and error (its squared error counts weight^2 in
      "weighted" mode), a number >= 0.
    axes: the world axes constrained, each of 0 (x), 1 (y), 2 (z) once; default all three.
    body: whose subtree; "world" (the default) is the whole model. On a floating robot the root
      body's subtree is the same mass, and its Jacobian the same up to rounding.

  Raises:
    ValueError: axes repeat or leave 0..2, target has neither shape (3,) nor one value per
      axis, or weight is negative.

  Example:
    CentreOfMass([0.02, 0.0, 0.0], weight=5.0, axes=(0, 1), body="pelvis")  # over the feet
  """

  target: Any
  weight: float = 1.0
  axes: tuple[int, ...] = (0, 1, 2)
  body: str = "world"

  def __post_init__(self) -> None:
    axes = _axes("CentreOfMass", self.axes)
    object.__setattr__(self, "axes", axes)
    object.__setattr__(self, "target", _target("CentreOfMass target", self.target, axes))
    object.__setattr__(self, "weight", v.number("CentreOfMass weight", self.weight, 0.0))


@dataclasses.dataclass(frozen=True)
class JointAngles:
  """Hinge or slide joints at given positions: {joint name: angle (rad) or position (m)}.

  One row per joint, in the mapping's order.

  Attributes:
    angles: joint name -> target position: an angle (rad) for a hinge, a position (m) for a
      slide. Other joint types are refused when IK.solve compiles the task.
    weight: multiplies the task's rows and error (its squared error counts weight^2 in
      "weighted" mode), a number >= 0.

  Raises:
    ValueError: angles is not a mapping of names to finite numbers, or weight is negative.

  Example:
    JointAngles({"left_elbow_joint": 1.2, "right_elbow_joint": 1.2})
  """

  angles: Mapping[str, float]
  weight: float = 1.0

  def __post_init__(self) -> None:
    if not isinstance(self.angles, Mapping):
      raise ValueError(f"JointAngles angles must be a mapping from joint names to positions, "
                       f"got {v.shown(self.angles)}")
    angles = {}
    for joint, angle in self.angles.items():
      if not isinstance(joint, str):
        raise ValueError(f"JointAngles names joints by strings, got {v.shown(joint)}")
      angles[joint] = v.number(f"JointAngles angle of {joint!r}", angle)
    object.__setattr__(self, "angles", angles)
    object.__setattr__(self, "weight", v.number("JointAngles weight", self.weight, 0.0))


Task = BodyPosition | BodyOrientation | CentreOfMass | JointAngles
"""Any of the IK tasks: what IK.solve takes a sequence of."""


class Solution(NamedTuple):
  """What IK.solve found.

  qpos: (nq,) the pose. error: the largest position error (m) of the BodyPosition and
  CentreOfMass tasks at the last pose linearised (before the last step; inf after no step; 0 with
  no such task). iterations: the steps taken.
  """

  qpos: np.ndarray
  error: float
  iterations: int


class SolvedFrames(NamedTuple):
  """What IK.solve_frames found: Solution's fields, one row per frame.

  qpos: (T, nq) the poses. error: (T,) each frame's Solution.error. iterations: (T,) its steps.
  """

  qpos: np.ndarray
  error: np.ndarray
  iterations: np.ndarray


class IK:
  """Inverse kinematics of one model: see the module docstring.

  Args:
    model: the MuJoCo model.
    posture: (nq,) the pose that settles what the tasks leave free (of its hinge and slide
      joints; free and ball joints are not pulled). Default: qpos0.
    mode: "weighted" or "null_space" (see the module docstring).
    posture_weight: the posture task's weight in "weighted" mode (unused in "null_space").
    damping: added to J^T J ("weighted") or J J^T ("null_space"), > 0; default per mode,
      DAMPING.
    trust_region: the longest step, in the tangent space of qpos; default per mode,
      TRUST_REGION.
    tolerance: a solve stops after a step shorter than this.
    active_set_passes: in "null_space" mode, how many times a step is solved again with the
      joints that it pushes past a limit frozen.

  An IK computes in one MjData of its own (data), so it solves one pose at a time: solve and
  kinematics hold a lock while they use it, and threads that share an IK take turns (each gets
  the answer it would get alone). For poses solved in parallel, give each thread its own IK.
  kinematics returns that MjData itself: read it before this IK is used again.

  Example:
    ik = IK(model, posture, mode="null_space")
    qpos = ik.solve(qpos, [BodyPosition("hand", target)], iterations=60).qpos
  """

  def __init__(self, model: mujoco.MjModel, posture: Any = None, *, mode: str = "weighted",
               posture_weight: float = 0.05, damping: float | None = None,
               trust_region: float | None = None, tolerance: float = 1e-9,
               active_set_passes: int = 4):
    self.model = mj_model("model", model)
    self.data = mujoco.MjData(model)
    self._lock = threading.Lock()  # self.data is one MjData: one solve at a time
    self.names = Names.of(model)
    self.mode = v.one_of("mode", mode, MODES)
    self.posture = (model.qpos0.copy() if posture is None
                    else _vector("posture", posture, model.nq).copy())
    self.posture_weight = v.number("posture_weight", posture_weight, 0.0)
    # > 0: tasks may repeat or conflict (J^T J or J J^T singular), and the damping keeps the
    # step's system solvable.
    self.damping = v.number("damping", DAMPING[mode] if damping is None else damping, 0.0,
                            low_open=True)
    self.trust_region = v.number(
      "trust_region", TRUST_REGION[mode] if trust_region is None else trust_region, 0.0,
      low_open=True)
    self.tolerance = v.number("tolerance", tolerance, 0.0)
    self.active_set_passes = v.integer("active_set_passes", active_set_passes, 1)
    free = mujoco.mjtJoint.mjJNT_FREE
    scalar = np.isin(model.jnt_type, [int(mujoco.mjtJoint.mjJNT_HINGE),
                                      int(mujoco.mjtJoint.mjJNT_SLIDE)])
    # The joints that the posture pulls and that limits clip: hinges and slides, one qpos and one
    # dof each. The free joints' dofs are the root's, which free_root=False holds still.
    self._joint_qpos = model.jnt_qposadr[scalar]
    self._joint_dof = model.jnt_dofadr[scalar]
    self._joint_limited = model.jnt_limited[scalar].astype(bool)
    self._joint_range = model.jnt_range[scalar]
    self._root_dofs = np.concatenate(
      [np.arange(a, a + 6) for a in model.jnt_dofadr[model.jnt_type == free]] or
      [np.zeros(0, int)])
    self._posture_qpos = _contiguous(self._joint_qpos)
    self._posture_dof = _contiguous(self._joint_dof)

  def kinematics(self, qpos: np.ndarray) -> mujoco.MjData:
    """The IK's MjData at qpos, with what the Jacobians read (mj_kinematics, mj_comPos).

    The IK's own MjData, not a copy: what it holds is valid until the IK is used again (a solve
    or kinematics, from any thread).
    """
    qpos = _vector("qpos", qpos, self.model.nq)
    with self._lock:
      return self._kinematics(qpos)

  def _kinematics(self, qpos: np.ndarray) -> mujoco.MjData:
    self.data.qpos[:] = qpos
    mujoco.mj_kinematics(self.model, self.data)
    mujoco.mj_comPos(self.model, self.data)
    return self.data

  def solve(self, qpos: Any, tasks: Sequence[Task], iterations: int = 60,
            free_root: bool = True) -> Solution:
    """The pose that meets tasks, from qpos, after at most iterations steps.

    free_root: whether the free joints' dofs move; False holds the root where qpos has it (a
    pose solved relative to the root, as a tuck in flight).

    Example:
      solution = ik.solve(qpos, [BodyPosition("foot", [0.1, 0.0, 0.0])], iterations=100)
    """
    qpos, iterations, free_root = self._start(qpos, iterations, free_root)
    compiled = self._compile(tasks)
    with self._lock:
      return self._solve(qpos, compiled, iterations, free_root)

  def solve_frames(self, qpos: Any, frames: Iterable[Sequence[Task]], iterations: int = 60,
                   free_root: bool = True) -> SolvedFrames:
    """A clip's poses: frame k's tasks solved from frame k - 1's pose (frame 0's from qpos).

    Warm-starting each frame from the last keeps a clip continuous: a nearby start converges to
    the nearby pose. frames may be a generator (its targets made as the clip goes); a frame of
    bad tasks raises ValueError naming the frame.

    Returns:
      SolvedFrames: (T, nq) poses, (T,) errors and (T,) steps, solve's per frame.

    Example:
      path = ik.solve_frames(qpos, ([BodyPosition("hand", p)] for p in hand_path))
      path.qpos, path.error.max()
    """
    qpos, iterations, free_root = self._start(qpos, iterations, free_root)
    if isinstance(frames, (str, bytes, Mapping)) or not isinstance(frames, Iterable):
      raise ValueError(f"frames must be an iterable of task sequences, one per frame, got "
                       f"{type(frames).__name__}")
    poses, errors, steps = [], [], []
    for k, tasks in enumerate(frames):
      try:  # a frame's bad tasks, or a step of its solve that is not finite
        compiled = self._compile(tasks)
        with self._lock:
          qpos, error, taken = self._solve(qpos, compiled, iterations, free_root)
      except ValueError as e:
        raise ValueError(f"frame {k}: {e}") from None
      poses.append(qpos.copy())
      errors.append(error)
      steps.append(taken)
    return SolvedFrames(np.array(poses).reshape(len(poses), self.model.nq),
                        np.array(errors, float), np.array(steps, int))

  def _start(self, qpos: Any, iterations: Any, free_root: Any) -> tuple[np.ndarray, int, bool]:
    """solve's and solve_frames' checks: a copy of qpos to step, the count, the flag."""
    return (_vector("qpos", qpos, self.model.nq).copy(), v.integer("iterations", iterations, 0),
            v.flag("free_root", free_root))

  def _solve(self, qpos: np.ndarray, compiled: list[tuple], iterations: int,
             free_root: bool) -> Solution:
    """solve's steps in self.data, under self._lock."""
    m, d, nv = self.model, self.data, self.model.nv
    jacp, jacr = np.zeros((3, nv)), np.zeros((3, nv))
    eye = np.eye(nv)
    lo, hi = self._joint_range[:, 0], self._joint_range[:, 1]
    free = np.ones(nv, bool)
    free[self._root_dofs] = free_root
    error_m, steps = np.inf, 0
    for _ in range(iterations):
      self._kinematics(qpos)
      rows, errors = [], []
      error_m = 0.0
      for kind, index, weight, axes, target in compiled:
        if kind == "position":
          mujoco.mj_jacBody(m, d, jacp, None, index)
          e = target - d.xpos[index][axes]
          error_m = max(error_m, float(np.linalg.norm(e)))
          rows.append(weight * jacp[axes])
          errors.append(weight * e)
        elif kind == "orientation":
          mujoco.mj_jacBody(m, d, None, jacr, index)
          local = np.zeros(3)
          mujoco.mju_subQuat(local, target, d.xquat[index])
          rows.append(weight * jacr.copy())
          errors.append(weight * (d.xmat[index].reshape(3, 3) @ local))
        elif kind == "com":
          mujoco.mj_jacSubtreeCom(m, d, jacp, index)
          e = target - d.subtree_com[index][axes]
          error_m = max(error_m, float(np.linalg.norm(e)))
          rows.append(weight * jacp[axes])
          errors.append(weight * e)
        else:  # joints: index holds their dofs, axes their qpos addresses
          for dof, adr, angle in zip(index, axes, target, strict=True):
            rows.append(weight * eye[dof:dof + 1])
            errors.append(weight * np.array([angle - qpos[adr]]))
      posture = self.posture[self._posture_qpos] - qpos[self._posture_qpos]
      if self.mode == "weighted":
        step = self._weighted_step(rows, errors, posture, free, eye)
      else:
        step = self._null_space_step(qpos, rows, errors, posture, free.copy(), eye)
      if not np.all(np.isfinite(step)):  # weights so large that the step's system overflowed
        raise ValueError(f"IK step {steps} is not finite: a task's weight or target is too large "
                         f"for float64")
      step = step * min(1.0, self.trust_region / max(float(np.linalg.norm(step)), 1e-12))
      mujoco.mj_integratePos(m, qpos, np.asarray(step, np.float64), 1.0)
      joints = qpos[self._joint_qpos]
      qpos[self._joint_qpos] = np.where(self._joint_limited, np.clip(joints, lo, hi), joints)
      steps += 1
      if np.linalg.norm(step) < self.tolerance:
        break
    return Solution(qpos, error_m, steps)

  def _weighted_step(self, rows, errors, posture, free, eye) -> np.ndarray:
    """One damped least squares over the tasks' rows and the posture's."""
    w = self.posture_weight
    jac = np.concatenate([*rows, w * eye[self._posture_dof]])
    error = np.concatenate([*errors, w * posture])
    if not free.all():
      jac = jac * free
    return np.linalg.solve(jac.T @ jac + self.damping * np.eye(len(eye)), jac.T @ error)

  def _null_space_step(self, qpos, rows, errors, posture, free, eye) -> np.ndarray:
    """The tasks' damped pseudo-inverse step, the posture in their null space, an active set."""
    nv = len(eye)
    jac = np.concatenate(rows) if rows else np.zeros((0, nv))  # JointAngles({}) has no rows
    error = np.concatenate(errors) if errors else np.zeros(0)
    p = self._posture_dof
    lo, hi = self._joint_range[:, 0], self._joint_range[:, 1]
    step = np.zeros(nv)
    for _ in range(self.active_set_passes):
      j = jac * free
      pinv = j.T @ np.linalg.inv(j @ j.T + self.damping * np.eye(len(j)))
      step = pinv @ error
      null = (eye - pinv @ j) * free
      block = null[p, p] if isinstance(p, slice) else null[np.ix_(p, p)]
      step += null[:, p] @ np.linalg.lstsq(block, posture - step[p], rcond=1e-6)[0]
      step *= free
      q, dq = qpos[self._joint_qpos], step[self._joint_dof]
      blocked = self._joint_limited & (((q <= lo + 1e-9) & (dq < 0)) | ((q >= hi - 1e-9) &
                                                                       (dq > 0)))
      if not blocked.any():
        break
      free[self._joint_dof[blocked]] = False
    return step

  def _compile(self, tasks: Sequence[Task]) -> list[tuple]:
    """(kind, body id or dofs, weight, axes or qpos addresses, target) per task."""
    if isinstance(tasks, (str, Mapping)) or not isinstance(tasks, Sequence):
      raise ValueError(f"tasks must be a sequence of tasks, got {v.shown(tasks)}")
    if not tasks:
      raise ValueError("tasks must hold at least one task")
    out = []
    scalar = dict(zip(self._joint_qpos.tolist(), self._joint_dof.tolist(), strict=True))
    for task in tasks:
      if isinstance(task, BodyPosition):
        out.append(("position", self.names.id("body", task.body), task.weight, list(task.axes),
                    task.target))
      elif isinstance(task, BodyOrientation):
        out.append(("orientation", self.names.id("body", task.body), task.weight, None,
                    task.target))
      elif isinstance(task, CentreOfMass):
        out.append(("com", self.names.id("body", task.body), task.weight, list(task.axes),
                    task.target))
      elif isinstance(task, JointAngles):
        adrs, dofs = [], []
        for joint in task.angles:
          adr = int(self.model.jnt_qposadr[self.names.id("joint", joint)])
          if adr not in scalar:
            raise ValueError(f"JointAngles: joint {joint!r} is not a hinge or a slide")
          adrs.append(adr)
          dofs.append(scalar[adr])
        out.append(("joints", dofs, task.weight, adrs, list(task.angles.values())))
      else:
        raise ValueError(f"tasks must be BodyPosition, BodyOrientation, CentreOfMass or "
                         f"JointAngles, got {v.shown(task)}")
    return out


def _contiguous(index: np.ndarray) -> slice | np.ndarray:
  """index as a slice where it is a run of consecutive integers (a view, not a copy)."""
  if len(index) and np.array_equal(index, np.arange(index[0], index[0] + len(index))):
    return slice(int(index[0]), int(index[0]) + len(index))
  return index


__all__ = ["DAMPING", "MODES", "TRUST_REGION", "BodyOrientation", "BodyPosition", "CentreOfMass",
           "IK", "JointAngles", "Solution", "SolvedFrames", "Task"]
