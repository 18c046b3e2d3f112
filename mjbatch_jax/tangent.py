"""Positions in MuJoCo's tangent space, in JAX: what mj_integratePos and mj_differentiatePos do.

Free and ball joints hold quaternions in qpos but three rotational degrees of freedom in qvel, so
finite differences perturb and compare positions through these maps, as mjd_transitionFD does.
"""

import dataclasses

import jax
import jax.numpy as jnp
import mujoco

from mjbatch_jax import rotations

_FREE = int(mujoco.mjtJoint.mjJNT_FREE)
_BALL = int(mujoco.mjtJoint.mjJNT_BALL)


@dataclasses.dataclass(frozen=True)
class Joints:
  """The joint structure of a model: type, qpos address and dof address of each joint."""

  types: tuple[int, ...]
  qposadr: tuple[int, ...]
  dofadr: tuple[int, ...]
  nq: int
  nv: int

  @classmethod
  def of(cls, model: mujoco.MjModel) -> "Joints":
    return cls(
      types=tuple(int(t) for t in model.jnt_type),
      qposadr=tuple(int(a) for a in model.jnt_qposadr),
      dofadr=tuple(int(a) for a in model.jnt_dofadr),
      nq=model.nq,
      nv=model.nv,
    )


def integrate_pos(joints: Joints, qpos: jax.Array, qvel: jax.Array, scale: float) -> jax.Array:
  """qpos (..., nq) moved by qvel (..., nv) * scale on the manifold, as mj_integratePos.

  The leading axes of qpos and qvel broadcast against each other (one pose moved along many
  directions, or many poses along one).
  """
  lead = jnp.broadcast_shapes(qpos.shape[:-1], qvel.shape[:-1])
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


def differentiate_pos(joints: Joints, qpos1: jax.Array, qpos2: jax.Array, dt: float) -> jax.Array:
  """(qpos2 - qpos1) / dt in the tangent space, (..., nv), as mj_differentiatePos."""
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
    return jnp.zeros((*qpos1.shape[:-1], 0), qpos1.dtype)
  # Joints are stored in dof order, so the parts already are; checked, not assumed.
  assert order == sorted(order)
  return jnp.concatenate(parts, axis=-1)


def dof_perturbations(joints: Joints, qpos: jax.Array, eps: float) -> jax.Array:
  """(..., nv, nq): qpos moved by eps along each degree of freedom, as mjd_transitionFD does."""
  return integrate_pos(joints, qpos[..., None, :], eps * jnp.eye(joints.nv, dtype=qpos.dtype),
                       1.0)
