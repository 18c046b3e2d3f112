"""mjbatch_jax.rotations against MuJoCo's own quaternion functions (mju_*)."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from mjbatch_jax import rotations

jax.config.update("jax_enable_x64", True)


def random_quats(rng: np.random.Generator, n: int) -> np.ndarray:
  q = rng.normal(size=(n, 4))
  return q / np.linalg.norm(q, axis=-1, keepdims=True)


@pytest.fixture
def rng() -> np.random.Generator:
  return np.random.default_rng(0)


def test_products_and_rotations_equal_mujoco(rng):
  a, b = random_quats(rng, 16), random_quats(rng, 16)
  v = rng.normal(size=(16, 3))
  product = np.asarray(rotations.multiply(a, b))
  rotated = np.asarray(rotations.rotate(a, v))
  back = np.asarray(rotations.rotate_inverse(a, rotated))
  matrices = np.asarray(rotations.to_matrix(a))
  for i in range(16):
    expected = np.zeros(4)
    mujoco.mju_mulQuat(expected, a[i], b[i])
    np.testing.assert_allclose(product[i], expected, atol=1e-15)
    turned = np.zeros(3)
    mujoco.mju_rotVecQuat(turned, v[i], a[i])
    np.testing.assert_allclose(rotated[i], turned, atol=1e-14)
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, a[i])
    np.testing.assert_allclose(matrices[i].ravel(), mat, atol=1e-15)
  np.testing.assert_allclose(back, v, atol=1e-14)


def test_matrix_to_quaternion_inverts_to_matrix(rng):
  q = random_quats(rng, 64)
  # Rotations near each of the four pivots' regimes: identity, and half turns about x, y, z.
  q[:4] = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [1e-9, 0, 0, 1]]
  q /= np.linalg.norm(q, axis=-1, keepdims=True)
  back = np.asarray(rotations.from_matrix(rotations.to_matrix(q)))
  same = np.where(q[:, :1] < 0, -q, q)
  np.testing.assert_allclose(back, same, atol=1e-12)
  for i in range(64):
    expected = np.zeros(4)
    mujoco.mju_mat2Quat(expected, np.asarray(rotations.to_matrix(q[i])).ravel())
    expected *= np.sign(expected[0]) or 1.0
    np.testing.assert_allclose(back[i], expected, atol=1e-12)


def test_exp_log_integrate_difference_equal_mujoco(rng):
  q = random_quats(rng, 16)
  omega = rng.normal(size=(16, 3))
  turned = np.asarray(rotations.integrate(q, omega, 0.3))
  for i in range(16):
    expected = q[i].copy()
    mujoco.mju_quatIntegrate(expected, omega[i], 0.3)
    np.testing.assert_allclose(turned[i], expected, atol=1e-14)
    sub = np.zeros(3)
    mujoco.mju_subQuat(sub, turned[i], q[i])
    np.testing.assert_allclose(np.asarray(rotations.difference(turned[i], q[i])), sub, atol=1e-12)
  # exp and log are inverses for angles below pi; log(-q) == log(q).
  v = rng.normal(size=(16, 3))
  v *= (np.pi - 0.1) * rng.uniform(size=(16, 1)) / np.linalg.norm(v, axis=-1, keepdims=True)
  np.testing.assert_allclose(np.asarray(rotations.log(rotations.exp(v))), v, atol=1e-13)
  np.testing.assert_allclose(np.asarray(rotations.log(-rotations.exp(v))), v, atol=1e-13)
  axis_angle = np.asarray(rotations.from_axis_angle(jnp.array([0.0, 0.0, 2.0]), jnp.array(0.5)))
  expected = np.zeros(4)
  mujoco.mju_axisAngle2Quat(expected, np.array([0.0, 0.0, 1.0]), 0.5)
  np.testing.assert_allclose(axis_angle, expected, atol=1e-15)


def test_maps_have_finite_exact_derivatives_at_zero_rotation():
  jac_exp = jax.jacfwd(rotations.exp)(jnp.zeros(3))
  np.testing.assert_allclose(jac_exp, np.vstack([np.zeros((1, 3)), 0.5 * np.eye(3)]), atol=1e-15)
  jac_log = jax.jacfwd(rotations.log)(jnp.array([1.0, 0.0, 0.0, 0.0]))
  np.testing.assert_allclose(jac_log[:, 1:], 2 * np.eye(3), atol=1e-15)
  grad = jax.grad(lambda v: jnp.sum(rotations.log(rotations.exp(v)) ** 2))(jnp.zeros(3))
  assert np.all(np.isfinite(grad))
