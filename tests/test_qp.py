"""control.box_qp, the library's box QP, against a brute-force reference on small problems."""

import importlib
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mjbatch_jax import control
from mjbatch_jax.control import qp

jax.config.update("jax_enable_x64", True)


def enumerated(h: np.ndarray, g: np.ndarray, lower: np.ndarray, upper: np.ndarray
               ) -> tuple[float, np.ndarray]:
  """The minimum of 1/2 d'Hd + g'd over the box, and its d, by trying every active set.

  Each entry is free, at its lower or at its upper bound; the free ones solve the KKT system.
  For a strictly convex QP the cheapest feasible point of all 3^m is the minimum.
  """
  m = g.shape[0]
  best, where = np.inf, np.zeros(m)
  for assignment in itertools.product((0, 1, 2), repeat=m):
    kind = np.array(assignment)
    x = np.where(kind == 1, lower, np.where(kind == 2, upper, 0.0))
    free = kind == 0
    if free.any():
      rhs = -(g[free] + h[np.ix_(free, ~free)] @ x[~free])
      x[free] = np.linalg.solve(h[np.ix_(free, free)], rhs)
    if np.all(x >= lower - 1e-12) and np.all(x <= upper + 1e-12):
      value = float(0.5 * x @ h @ x + g @ x)
      if value < best:
        best, where = value, x
  return best, where


@pytest.fixture(scope="module")
def solve():
  return jax.jit(control.box_qp, static_argnums=5)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_box_qp_is_the_minimum_over_every_active_set(solve, m):
  rng = np.random.default_rng(m)
  for _ in range(10):
    root = rng.normal(size=(m, m))
    h = root @ root.T + 0.1 * np.eye(m)
    g = rng.normal(size=m) * 3
    lower, upper = -rng.uniform(0.1, 1, m), rng.uniform(0.1, 1, m)
    h_xu = rng.normal(size=(m, 3))
    d, gain, pd = solve(jnp.asarray(h), jnp.asarray(g), jnp.asarray(h_xu), jnp.asarray(lower),
                        jnp.asarray(upper), 20)
    d, gain = np.asarray(d), np.asarray(gain)
    best, where = enumerated(h, g, lower, upper)
    assert bool(pd)
    assert np.all(d >= lower) and np.all(d <= upper)
    assert 0.5 * d @ h @ d + g @ d == pytest.approx(best, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(d, where, rtol=0, atol=1e-7)
    # The gain: -H_ff^-1 h_xu on the free rows (not at a bound the gradient pushes against), 0
    # on the clamped ones.
    grad = g + h @ d
    free = ~(((d <= lower) & (grad > 0)) | ((d >= upper) & (grad < 0)))
    want = np.zeros_like(gain)
    if free.any():
      want[free] = -np.linalg.solve(h[np.ix_(free, free)], h_xu[free])
    np.testing.assert_allclose(gain, want, rtol=1e-9, atol=1e-12)


def test_box_qp_without_bounds_is_the_newton_step(solve):
  rng = np.random.default_rng(7)
  root = rng.normal(size=(3, 3))
  h, g, h_xu = root @ root.T + np.eye(3), rng.normal(size=3), rng.normal(size=(3, 2))
  d, gain, pd = solve(h, g, h_xu, -jnp.inf, jnp.inf, 5)
  np.testing.assert_allclose(np.asarray(d), -np.linalg.solve(h, g), rtol=1e-12)
  np.testing.assert_allclose(np.asarray(gain), -np.linalg.solve(h, h_xu), rtol=1e-12)
  assert bool(pd)


def test_box_qp_reports_a_matrix_that_is_not_positive_definite():
  assert not bool(control.box_qp(-jnp.eye(2), jnp.ones(2), jnp.eye(2), -jnp.ones(2),
                                 jnp.ones(2), 5)[2])
  assert not bool(qp._positive_definite(jnp.array([[1.0, 2.0], [2.0, 1.0]])))
  assert bool(qp._positive_definite(jnp.array([[2.0, 1.0], [1.0, 2.0]])))


def test_box_qp_is_the_one_of_the_package_and_of_ilqrs_backward_pass():
  ilqr_module = importlib.import_module("mjbatch_jax.control.ilqr")  # control.ilqr: the function
  backward = importlib.import_module("mjbatch_jax.control.backward")
  assert control.box_qp is qp.box_qp and ilqr_module.box_qp is qp.box_qp
  assert backward._box_qp is qp._box_qp


@pytest.mark.parametrize("call, pattern", [
  (lambda: control.box_qp(jnp.eye(3), jnp.ones(2), jnp.eye(2), -1.0, 1.0, 5),
   r"h must have shape \(2, 2\)"),
  (lambda: control.box_qp(jnp.eye(2), jnp.ones(2), jnp.eye(2), -jnp.ones(3), 1.0, 5), r"lower"),
  (lambda: control.box_qp(jnp.eye(2), jnp.ones(2), jnp.eye(2), 1.0, -1.0, 5),
   r"lower must be <= upper"),
  (lambda: control.box_qp(jnp.eye(2), jnp.ones(2), jnp.eye(2), -1.0, 1.0, -1),
   r"iterations must be an int >= 0"),
])
def test_box_qp_refuses_bad_input(call, pattern):
  with pytest.raises(ValueError, match=pattern):
    call()
