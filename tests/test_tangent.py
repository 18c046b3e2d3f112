"""mjbatch_jax.tangent against MuJoCo's own mj_integratePos and mj_differentiatePos."""

import jax
import mujoco
import numpy as np
import pytest

from mjbatch_jax import rotations, tangent

jax.config.update("jax_enable_x64", True)

# Every joint kind, out of the order of their kinds: hinge, free, slide, ball (nq 13, nv 11).
XML = """
<mujoco>
  <worldbody>
    <body><joint type="hinge" axis="0 0 1"/><geom size=".1"/></body>
    <body pos="0 0 .3"><freejoint/><geom size=".1"/></body>
    <body pos="1 0 0"><joint type="slide" axis="1 0 0"/><geom size=".1"/>
      <body pos="0 0 .3"><joint type="ball"/><geom size=".1"/></body>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
  return mujoco.MjModel.from_xml_string(XML)


@pytest.fixture(scope="module")
def maps(model):
  """integrate_pos and differentiate_pos of the model's joints, compiled (once per shape)."""
  joints = tangent.Joints.of(model)
  integrate = jax.jit(lambda qpos, qvel, scale: tangent.integrate_pos(joints, qpos, qvel, scale))
  differentiate = jax.jit(lambda a, b, dt: tangent.differentiate_pos(joints, a, b, dt))
  return integrate, differentiate


def random_qpos(model: mujoco.MjModel, rng: np.random.Generator, n: int) -> np.ndarray:
  qpos = np.tile(model.qpos0, (n, 1)) + 0.3 * rng.normal(size=(n, model.nq))
  for kind, adr in zip(model.jnt_type, model.jnt_qposadr, strict=True):
    start = {mujoco.mjtJoint.mjJNT_FREE: adr + 3, mujoco.mjtJoint.mjJNT_BALL: adr}.get(kind)
    if start is not None:
      quat = qpos[:, start:start + 4]
      qpos[:, start:start + 4] = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
  return qpos


def test_joints_of_a_model(model):
  joints = tangent.Joints.of(model)
  assert (joints.nq, joints.nv) == (13, 11)
  assert joints.types == tuple(int(t) for t in model.jnt_type)
  assert joints.qposadr == (0, 1, 8, 9) and joints.dofadr == (0, 1, 7, 8)


def test_integrate_and_differentiate_equal_mujoco(model, maps):
  integrate, differentiate = maps
  rng = np.random.default_rng(0)
  qpos = random_qpos(model, rng, 8)
  qvel = rng.normal(size=(8, model.nv))
  moved = np.asarray(integrate(qpos, qvel, 0.3))
  velocity = np.asarray(differentiate(qpos, moved, 0.3))
  for i in range(8):
    expected = qpos[i].copy()
    mujoco.mj_integratePos(model, expected, qvel[i], 0.3)
    np.testing.assert_allclose(moved[i], expected, atol=1e-14)
    difference = np.zeros(model.nv)
    mujoco.mj_differentiatePos(model, difference, 0.3, qpos[i], moved[i])
    np.testing.assert_allclose(velocity[i], difference, atol=1e-11)
  np.testing.assert_allclose(velocity, qvel, atol=1e-11)


def test_leading_axes_broadcast(model, maps):
  integrate, differentiate = maps
  rng = np.random.default_rng(1)
  qpos = random_qpos(model, rng, 1)[0]
  directions = np.eye(model.nv)[:, None, :] * np.array([1.0, -1.0])[None, :, None]  # (nv, 2, nv)
  moved = np.asarray(integrate(qpos, directions, 1e-3))
  assert moved.shape == (model.nv, 2, model.nq)
  one = np.asarray(integrate(qpos, directions[4, 1], 1e-3))
  np.testing.assert_allclose(moved[4, 1], one, rtol=0, atol=1e-15)
  back = np.asarray(differentiate(qpos, moved, 1e-3))
  assert back.shape == (model.nv, 2, model.nv)
  np.testing.assert_allclose(back, directions, atol=1e-9)


def test_quaternions_stay_unit_and_match_rotations(model, maps):
  integrate, _ = maps
  qpos = np.asarray(model.qpos0, float)
  qvel = np.zeros(model.nv)
  qvel[4:7] = [0.0, 0.0, np.pi / 2]  # the free joint's angular velocity, in its body frame
  moved = np.asarray(integrate(qpos, qvel, 1.0))
  np.testing.assert_allclose(moved[4:8], rotations.exp(np.array([0.0, 0.0, np.pi / 2])),
                             atol=1e-15)
  np.testing.assert_allclose(np.linalg.norm(moved[9:13]), 1.0, atol=1e-15)


def test_shapes_are_checked_by_name_when_traced(model):
  joints = tangent.Joints.of(model)
  integrate = jax.jit(lambda a, b: tangent.integrate_pos(joints, a, b, 1.0))
  with pytest.raises(ValueError, match=r"^qvel must have shape \(\.\.\., 11\), got \(4, 13\)"):
    integrate(np.zeros(model.nq), np.zeros((4, model.nq)))
  with pytest.raises(ValueError, match=r"^qpos1 must have shape \(\.\.\., 13\), got \(11,\)"):
    tangent.differentiate_pos(joints, np.zeros(model.nv), np.zeros(model.nq), 1.0)


def test_state_tangent_moves_rows_as_mj_integrate_pos_and_back(model):
  space = tangent.StateTangent.of(model)
  assert space.nx == 2 * model.nv + model.na
  rng = np.random.default_rng(3)
  data = mujoco.MjData(model)
  size = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION)
  rows = np.empty((4, size))
  for i in range(4):
    data.qpos[:] = random_qpos(model, rng, 1)[0]
    data.qvel[:] = rng.normal(size=model.nv)
    data.time = 0.1 * i
    mujoco.mj_getState(model, data, rows[i], mujoco.mjtState.mjSTATE_INTEGRATION)
  dx = 0.1 * rng.normal(size=(4, space.nx))
  moved = np.asarray(space.retract(rows, dx))
  for i in range(4):
    qpos = rows[i, space.layout.qpos].copy()
    mujoco.mj_integratePos(model, qpos, dx[i, : model.nv], 1.0)
    np.testing.assert_allclose(moved[i, space.layout.qpos], qpos, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(moved[i, space.layout.qvel],
                                  rows[i, space.layout.qvel] + dx[i, model.nv : 2 * model.nv])
    assert moved[i, 0] == rows[i, 0]  # time (and the rest of the row) carried over
  np.testing.assert_allclose(np.asarray(space.difference(rows, moved)), dx, atol=1e-12)
  # One start broadcast against many offsets, as Fit.starts against one window's record.
  assert space.retract(rows[0], dx).shape == (4, size)


def test_state_tangent_names_bad_shapes(model):
  space = tangent.StateTangent.of(model)
  size = space.layout.size
  with pytest.raises(ValueError, match="dx must have shape"):
    space.retract(np.zeros(size), np.zeros(space.nx + 1))
  with pytest.raises(ValueError, match="rows must have shape"):
    space.retract(np.zeros(size - 1), np.zeros(space.nx))
  with pytest.raises(ValueError, match="leading dimensions of rows"):
    space.retract(np.zeros((3, size)), np.zeros((2, space.nx)))
  with pytest.raises(ValueError, match="nominal must have shape"):
    space.difference(np.zeros(2), np.zeros(size))
