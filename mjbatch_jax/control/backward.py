"""iLQR's backward pass: the Riccati recursion over a trajectory's local model, a box QP a knot.

The local model is what a linearisation of a plan gives at each knot: the dynamics' Jacobians
A_t, B_t in the state's tangent space and the cost's Gauss-Newton derivatives. The pass runs
backwards from the final knot's cost-to-go and returns, at every knot, the control change k_t
and the feedback gain K_t that minimise the quadratic model within the control box (clamped
controls get no feedback), as MuJoCo MPC's iLQR backward pass.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from mjbatch_jax.control.qp import _box_qp


class LocalModel(NamedTuple):
  """The local model of a trajectory of T knots: dynamics and cost derivatives at each knot.

  Attributes:
    a: (T, nx, nx) dx_{t+1} / dx_t (tangent coordinates).
    b: (T, nx, nu) dx_{t+1} / du_t.
    l_x, l_u: (T + 1, nx), (T + 1, nu) the cost's gradient at each knot.
    l_xx, l_ux, l_uu: (T + 1, nx, nx), (T + 1, nu, nx), (T + 1, nu, nu) its Hessian.
  """

  a: jax.Array
  b: jax.Array
  l_x: jax.Array
  l_u: jax.Array
  l_xx: jax.Array
  l_ux: jax.Array
  l_uu: jax.Array


def backward_pass(model: LocalModel, us: jax.Array, mu: jax.Array, lower: jax.Array,
                  upper: jax.Array, boxqp_iterations: int
                  ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """The Riccati recursion with Q_uu + mu I, the controls us + k kept in [lower, upper].

  Args:
    model: the LocalModel of the trajectory of the controls us.
    us: (T, nu) the nominal controls.
    mu: the regularisation added to Q_uu (a scalar).
    lower, upper: (nu,) the control box (infinite: no bound).
    boxqp_iterations: projected-Newton iterations of each knot's box QP (static).

  Returns:
    feedforward (T, nu), gains (T, nu, nx), the expected decrease's linear and quadratic terms
    (2,), and whether every knot's Q_uu + mu I was positive definite.
  """
  def riccati(carry, knot):
    v_x, v_xx, ok, dv = carry
    a, b, l_x, l_u, l_xx, l_ux, l_uu, u = knot
    q_x = l_x + a.T @ v_x
    q_u = l_u + b.T @ v_x
    va = v_xx @ a
    q_xx = l_xx + a.T @ va
    q_ux = l_ux + b.T @ va
    q_uu = l_uu + b.T @ v_xx @ b
    q_uu = 0.5 * (q_uu + q_uu.T)
    k, gain, pd = _box_qp(q_uu + mu * jnp.eye(q_uu.shape[0], dtype=q_uu.dtype), q_u, q_ux,
                          lower - u, upper - u, boxqp_iterations)
    v_x = q_x + gain.T @ (q_uu @ k + q_u) + q_ux.T @ k
    v_xx = q_xx + gain.T @ q_uu @ gain + gain.T @ q_ux + q_ux.T @ gain
    dv = dv + jnp.stack([k @ q_u, 0.5 * k @ q_uu @ k])
    return (v_x, 0.5 * (v_xx + v_xx.T), ok & pd, dv), (k, gain)

  final = (model.l_x[-1], model.l_xx[-1], jnp.asarray(True), jnp.zeros(2, us.dtype))
  inputs = (model.a, model.b, model.l_x[:-1], model.l_u[:-1], model.l_xx[:-1], model.l_ux[:-1],
            model.l_uu[:-1], us)
  (_, _, ok, dv), (ks, gains) = jax.lax.scan(riccati, final, inputs, reverse=True)
  return ks, gains, dv, ok


__all__ = ["LocalModel", "backward_pass"]
