"""Positions in MuJoCo's tangent space, in JAX: what mj_integratePos and mj_differentiatePos do.

Free and ball joints hold quaternions in qpos but three rotational degrees of freedom in qvel, so
finite differences perturb and compare positions through these maps, as mjd_transitionFD does.
Positions and velocities are checked against the joints on their shapes when traced (qpos
(..., nq), qvel (..., nv)), so that a wrong width is a ValueError naming it, never a slice past
the end that JAX clamps.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.typing import ArrayLike

from mjbatch_jax import _validate, rotations
from mjbatch_jax.layout import StateLayout
from mjbatch_jax.rotations import _checked, _lead, _numbers

_FREE = int(mujoco.mjtJoint.mjJNT_FREE)
_BALL = int(mujoco.mjtJoint.mjJNT_BALL)
_KINDS = {int(kind) for kind in mujoco.mjtJoint.__members__.values()}
# (qpos width, dof width) of the joints that are not one number each.
_WIDTHS = {_FREE: (7, 6), _BALL: (4, 3)}


def _joints(joints: Any) -> "Joints":
  if not isinstance(joints, Joints):
    raise ValueError(f"joints must be a tangent.Joints (Joints.of(model)), got "
                     f"{type(joints).__name__}")
  return joints


def _check_scalar(name: str, x: Any) -> None:
  """ValueError unless x is one number (a traced one too): a scale or a time step."""
  shape = _numbers(name, x).shape
  if shape != ():
    raise ValueError(f"{name} must be a number (shape ()), got shape {tuple(shape)}")


@dataclasses.dataclass(frozen=True)
class Joints:
  """The joint structure of a model: type, qpos address and dof address of each joint."""

  types: tuple[int, ...]
  qposadr: tuple[int, ...]
  dofadr: tuple[int, ...]
  nq: int
  nv: int

  def __post_init__(self) -> None:
    nq = _validate.integer("Joints.nq", self.nq, low=0)
    nv = _validate.integer("Joints.nv", self.nv, low=0)
    sizes = {len(self.types), len(self.qposadr), len(self.dofadr)}
    if len(sizes) != 1:
      raise ValueError("Joints.types, qposadr and dofadr must have one entry per joint, got "
                       f"lengths {len(self.types)}, {len(self.qposadr)}, {len(self.dofadr)}")
    if list(self.dofadr) != sorted(self.dofadr):  # differentiate_pos puts the parts in this order
      raise ValueError(f"Joints.dofadr must increase, as MuJoCo stores joints, got {self.dofadr}")
    for kind, qa, da in zip(self.types, self.qposadr, self.dofadr, strict=True):
      width, dofs = _WIDTHS.get(kind, (1, 1))
      if kind not in _KINDS or not (0 <= qa <= nq - width) or not (0 <= da <= nv - dofs):
        raise ValueError(f"Joints: a joint of type {kind} at qpos {qa}, dof {da} does not fit "
                         f"nq={nq}, nv={nv}; make Joints with Joints.of(model)")

  @classmethod
  def of(cls, model: mujoco.MjModel) -> "Joints":
    """The joints of model."""
    if not isinstance(model, mujoco.MjModel):
      raise ValueError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
    return cls(
      types=tuple(int(t) for t in model.jnt_type),
      qposadr=tuple(int(a) for a in model.jnt_qposadr),
      dofadr=tuple(int(a) for a in model.jnt_dofadr),
      nq=model.nq,
      nv=model.nv,
    )


def integrate_pos(joints: Joints, qpos: ArrayLike, qvel: ArrayLike, scale: ArrayLike
                  ) -> jax.Array:
  """qpos (..., nq) moved by qvel (..., nv) * scale on the manifold, as mj_integratePos.

  The leading axes of qpos and qvel broadcast against each other (one pose moved along many
  directions, or many poses along one). scale is one number.
  """
  joints = _joints(joints)
  qpos = _checked("qpos", qpos, (..., joints.nq))
  qvel = _checked("qvel", qvel, (..., joints.nv))
  _check_scalar("scale", scale)
  lead = _lead(("qpos", qpos.shape[:-1]), ("qvel", qvel.shape[:-1]))
  out = jnp.broadcast_to(qpos, (*lead, qpos.shape[-1]))
  qvel = jnp.broadcast_to(qvel, (*lead, qvel.shape[-1]))
  for kind, qa, da in zip(joints.types, joints.qposadr, joints.dofadr, strict=True):
    if kind == _FREE:
      out = out.at[..., qa : qa + 3].add(scale * qvel[..., da : da + 3])
      quat = rotations.integrate(out[..., qa + 3 : qa + 7], qvel[..., da + 3 : da + 6], scale)
      out = out.at[..., qa + 3 : qa + 7].set(quat)
    elif kind == _BALL:
      quat = rotations.integrate(out[..., qa : qa + 4], qvel[..., da : da + 3], scale)
      out = out.at[..., qa : qa + 4].set(quat)
    else:
      out = out.at[..., qa].add(scale * qvel[..., da])
  return out


def differentiate_pos(joints: Joints, qpos1: ArrayLike, qpos2: ArrayLike, dt: ArrayLike
                      ) -> jax.Array:
  """(qpos2 - qpos1) / dt in the tangent space, (..., nv), as mj_differentiatePos.

  The leading axes of qpos1 and qpos2 broadcast against each other; dt is one number.
  """
  joints = _joints(joints)
  qpos1 = _checked("qpos1", qpos1, (..., joints.nq))
  qpos2 = _checked("qpos2", qpos2, (..., joints.nq))
  if isinstance(dt, (int, float, np.integer, np.floating)) and dt == 0:
    raise ValueError("dt must be a nonzero number (the difference is divided by it), got 0")
  _check_scalar("dt", dt)
  lead = _lead(("qpos1", qpos1.shape[:-1]), ("qpos2", qpos2.shape[:-1]))
  parts: list[jax.Array] = []
  order: list[int] = []
  for kind, qa, da in zip(joints.types, joints.qposadr, joints.dofadr, strict=True):
    if kind == _FREE:
      parts.append((qpos2[..., qa : qa + 3] - qpos1[..., qa : qa + 3]) / dt)
      rot = rotations.difference(qpos2[..., qa + 3 : qa + 7], qpos1[..., qa + 3 : qa + 7]) / dt
      parts.append(rot)
      order += [da, da + 3]
    elif kind == _BALL:
      parts.append(rotations.difference(qpos2[..., qa : qa + 4], qpos1[..., qa : qa + 4]) / dt)
      order.append(da)
    else:
      parts.append((qpos2[..., qa : qa + 1] - qpos1[..., qa : qa + 1]) / dt)
      order.append(da)
  if not parts:
    return jnp.zeros((*lead, 0), qpos1.dtype)
  # Joints (which checks that dofadr increases) are in dof order, so the parts already are.
  assert order == sorted(order)
  return jnp.concatenate(parts, axis=-1)


@dataclasses.dataclass(frozen=True)
class StateTangent:
  """The tangent space of state rows: x = (qpos tangent (nv), qvel (nv), act (na)), nx = 2 nv + na.

  The coordinates of transition_fd's A, of iLQR's state deviations and of sysid's window starts
  (`Fit.starts`): free and ball joints move through their quaternions, everything else adds.
  The rest of a row (time, ctrl, warm start, ...) is carried over from the row moved.

    tangent = StateTangent.of(model)
    dx = tangent.difference(nominal, rows)                 # (..., nx)
    rows = tangent.retract(windows.starts, fit.starts)     # the fitted starts, as rows
  """

  joints: Joints
  layout: StateLayout
  nv: int
  na: int

  @classmethod
  def of(cls, model: mujoco.MjModel) -> "StateTangent":
    """The tangent space of model's mjSTATE_INTEGRATION rows."""
    return cls(Joints.of(model), StateLayout.of(model), model.nv, model.na)

  @property
  def nx(self) -> int:
    return 2 * self.nv + self.na

  def _rest(self) -> np.ndarray:
    """Row indices of qvel and act: the coordinates that add."""
    lay = self.layout
    return np.r_[np.arange(lay.qvel.start, lay.qvel.stop), np.arange(lay.act.start,
                                                                     lay.act.stop)]

  def difference(self, nominal: ArrayLike, rows: ArrayLike) -> jax.Array:
    """(..., nx): rows minus nominal in the tangent space (broadcast against each other)."""
    nominal = _validate.array("nominal", nominal, (..., self.layout.size))
    rows = _validate.array("rows", rows, (..., self.layout.size))
    q = self.layout.qpos
    dq = differentiate_pos(self.joints, nominal[..., q], rows[..., q], 1.0)
    rest = self._rest()
    return jnp.concatenate([dq, rows[..., rest] - nominal[..., rest]], axis=-1)

  def retract(self, rows: ArrayLike, dx: ArrayLike) -> jax.Array:
    """rows (..., nstate) moved by tangent dx (..., nx), broadcast against each other."""
    rows = _validate.array("rows", rows, (..., self.layout.size))
    dx = _validate.array("dx", dx, (..., self.nx))
    lead = _lead(("rows", rows.shape[:-1]), ("dx", dx.shape[:-1]))
    rows = jnp.broadcast_to(rows, (*lead, rows.shape[-1]))
    dx = jnp.broadcast_to(dx, (*lead, dx.shape[-1]))
    q = self.layout.qpos
    qpos = integrate_pos(self.joints, rows[..., q], dx[..., : self.nv], 1.0)
    rows = rows.at[..., q].set(qpos)
    return rows.at[..., self._rest()].add(dx[..., self.nv :])
