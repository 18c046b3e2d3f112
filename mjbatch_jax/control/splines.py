"""Plans parameterised by knots: zero-order, linear and cubic interpolation as matrices.

A plan of T controls (control t applied over knot interval [t, t + 1)) is given by P <= T knots.
Every interpolation here is linear in the knots, so it is a (T, P) matrix W and the controls of
any batch of plans are W @ knots: one matmul under jit, whatever the batch.

- "zero": knot j holds for the controls t with floor(t P / T) = j (P equal blocks).
- "linear": knot j sits at time j (T - 1) / (P - 1); linear between knots.
- "cubic": the same knot times, cubic Hermite segments whose slopes are finite differences of
  the neighbouring knots (one-sided at the ends), as MuJoCo MPC's TimeSpline.

Beyond the last knot the last value holds (what a shifted plan sees at its end).
"""

from typing import Any

import numpy as np

from mjbatch_jax import _validate as v

INTERPOLATIONS = ("zero", "linear", "cubic")
"""The interpolations between knots that the functions here take as `kind` (the module's text
says what each one does)."""


def knot_times(num_knots: int, horizon: int, kind: str) -> np.ndarray:
  """(P,) the knots' times, in controls (t = 0 .. T - 1).

  With "zero" knot j starts its block, at j T / P; with "linear" and "cubic" the knots span the
  plan evenly, from 0 to T - 1 (a single knot sits at 0).

  Args:
    num_knots: P, the number of knots, an int in [1, horizon].
    horizon: T, the number of controls in the plan, an int >= 1.
    kind: the interpolation, one of INTERPOLATIONS: "zero", "linear" or "cubic".

  Returns:
    (P,) float64 times, in units of controls.

  Raises:
    ValueError: an argument is out of its range, or num_knots exceeds horizon.

  Example:
    splines.knot_times(3, 9, "linear")   # [0., 4., 8.]
  """
  check(num_knots, horizon, kind)
  if kind == "zero":
    return np.arange(num_knots) * horizon / num_knots
  if num_knots == 1:
    return np.zeros(1)
  return np.arange(num_knots) * (horizon - 1) / (num_knots - 1)


def matrix(num_knots: int, horizon: int, kind: str, times: Any = None) -> np.ndarray:
  """(len(times), P) weights of the knots at times (default: the T controls 0 .. T - 1).

  The controls of a plan are `matrix(...) @ knots`, for knots of shape (P, nu) or with leading
  batch dimensions (`W @ knots` broadcasts).

  Args:
    num_knots: P, the number of knots, an int in [1, horizon].
    horizon: T, the number of controls in the plan, an int >= 1.
    kind: the interpolation, one of INTERPOLATIONS: "zero", "linear" or "cubic".
    times: (n,) finite times in controls, known (numpy, not traced); before 0 the first value
      holds, beyond the last knot the last. None (default): the T controls 0 .. T - 1.

  Returns:
    (n, P) float64 weights (n = T without times); each row sums to 1.

  Raises:
    ValueError: an argument is out of its range, num_knots exceeds horizon, or times is
      traced, not one-dimensional or not finite.

  Example:
    W = splines.matrix(num_knots=4, horizon=20, kind="cubic")   # (20, 4)
    ctrls = jnp.asarray(W) @ knots                               # (..., 20, nu) from (..., 4, nu)
  """
  check(num_knots, horizon, kind)
  if times is None:
    tau = np.arange(horizon, dtype=np.float64)
  else:
    v.static("times", times)
    v.array("times", times, shape=(None,), finite=True)
    tau = np.asarray(times, np.float64)
  out = np.zeros((len(tau), num_knots))
  rows = np.arange(len(tau))
  if kind == "zero" or num_knots == 1:
    j = np.clip(np.floor(tau * num_knots / horizon + 1e-9).astype(int), 0, num_knots - 1)
    out[rows, j] = 1.0
    return out
  s = knot_times(num_knots, horizon, kind)
  step = s[1] - s[0]
  tau = np.clip(tau, 0.0, s[-1])
  left = np.clip(np.floor(tau / step + 1e-9).astype(int), 0, num_knots - 2)
  u = np.clip((tau - s[left]) / step, 0.0, 1.0)
  if kind == "linear":
    out[rows, left] += 1 - u
    out[rows, left + 1] += u
    return out
  # Cubic Hermite: p(u) = h00 p0 + h10 step m0 + h01 p1 + h11 step m1, with slopes m linear in
  # the knots: slope[j] = D[j] @ knots.
  slope = np.zeros((num_knots, num_knots))
  slope[0, :2] = [-1.0, 1.0]
  slope[-1, -2:] = [-1.0, 1.0]
  for j in range(1, num_knots - 1):
    slope[j, j - 1 : j + 2] = [-0.5, 0.0, 0.5]
  slope /= step
  h00, h10 = 2 * u**3 - 3 * u**2 + 1, (u**3 - 2 * u**2 + u) * step
  h01, h11 = -2 * u**3 + 3 * u**2, (u**3 - u**2) * step
  out[rows, left] += h00
  out[rows, left + 1] += h01
  out += h10[:, None] * slope[left] + h11[:, None] * slope[left + 1]
  return out


def shift_matrix(num_knots: int, horizon: int, kind: str, controls: float) -> np.ndarray:
  """(P, P): the knots of the same plan started `controls` (a number >= 0) later (the last value
  held).

  What a receding-horizon planner applies to its plan after executing some of its controls:
  `shift_matrix(...) @ knots` are the values of the old plan at the knot times moved on by
  controls, so that the plan keeps its course and holds its last value at the end.

  Args:
    num_knots: P, the number of knots, an int in [1, horizon].
    horizon: T, the number of controls in the plan, an int >= 1.
    kind: the interpolation, one of INTERPOLATIONS: "zero", "linear" or "cubic".
    controls: how far to shift, in controls, a finite number >= 0 (need not be an integer).

  Returns:
    (P, P) float64 matrix S; the shifted knots are S @ knots.

  Raises:
    ValueError: an argument is out of its range, or num_knots exceeds horizon.

  Example:
    knots = jnp.asarray(splines.shift_matrix(4, 20, "linear", controls=1)) @ knots
  """
  controls = v.number("controls", controls, low=0.0)
  return matrix(num_knots, horizon, kind, knot_times(num_knots, horizon, kind) + controls)


def check(num_knots: int, horizon: int, kind: str) -> None:
  """Validates a spline's shape: the check the other functions here run first.

  Args:
    num_knots: P, the number of knots, an int in [1, horizon].
    horizon: T, the number of controls in the plan, an int >= 1.
    kind: the interpolation, one of INTERPOLATIONS: "zero", "linear" or "cubic".

  Raises:
    ValueError: kind is not one of INTERPOLATIONS, horizon or num_knots is not an int >= 1, or
      num_knots exceeds horizon (a plan has no more knots than controls).

  Example:
    splines.check(num_knots=4, horizon=20, kind="cubic")
  """
  v.one_of("interpolation", kind, INTERPOLATIONS)
  horizon = v.integer("horizon", horizon, low=1)
  num_knots = v.integer("num_knots", num_knots, low=1)
  if num_knots > horizon:
    raise ValueError(f"num_knots ({num_knots}) must be at most the horizon ({horizon} "
                     "controls): a plan has no more knots than controls")


__all__ = ["INTERPOLATIONS", "check", "knot_times", "matrix", "shift_matrix"]
