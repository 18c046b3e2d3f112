"""Properties of mjbatch_jax.control's argument checks and of its pure updates (Hypothesis).

Every count and gain of control's public functions is drawn from one pool of values (in range
and out, Python and numpy scalars, bools, NaN and inf, strings, None, lists): one in range is
taken, any other is a ValueError naming the argument, never another exception type. ilqr runs
with its solve replaced by a stub, so nothing compiles: reaching the stub proves every check
passed. The norms and the sampling updates are drawn over their inputs: finite in, finite out.
"""

import math
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mjbatch_jax
from mjbatch_jax import control
from tests import strategies
from tests.models import POINT_XML

jax.config.update("jax_enable_x64", True)

HORIZON = 4
SAMPLES = jnp.arange(12.0).reshape(4, 3)
COSTS = jnp.array([3.0, 1.0, 2.0, 4.0])

# Every kind of scalar a caller might pass where a count or a gain is expected.
SCALARS = st.one_of(
  st.sampled_from(strategies.BAD_NUMBERS),
  st.integers(-3, 12),
  st.floats(allow_nan=True, allow_infinity=True),
  strategies.numpy_scalars(st.floats(-3.0, 12.0)),
  st.sampled_from([[1.0], (2,), "abc", b"1", complex(1.0, 0.0), np.bool_(False),
                   np.array([1.0, 2.0])]),
)


class Reached(Exception):
  """Raised by the stub of ilqr's solve: every check before it passed."""


def count(low: int, high: int | None = None) -> Callable[[Any], bool]:
  """Whether a value is an int (numpy's too, never bool) in [low, high]."""
  def valid(x: Any) -> bool:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
      return False
    return low <= int(x) and (high is None or int(x) <= high)
  return valid


def number(low: float, *, low_open: bool = False, high: float | None = None,
           high_open: bool = False) -> Callable[[Any], bool]:
  """Whether a value is a finite number (numpy's too, never bool) in the range given."""
  def valid(x: Any) -> bool:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
      return False
    x = float(x)
    if not math.isfinite(x) or x < low or (low_open and x == low):
      return False
    return high is None or x < high or (x == high and not high_open)
  return valid


@pytest.fixture(scope="module")
def point():
  with mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(POINT_XML), num_threads=1) as sim:
    yield sim


@pytest.fixture
def no_solve(monkeypatch):
  module = sys.modules["mjbatch_jax.control.ilqr"]  # control.ilqr is the function
  monkeypatch.setattr(module, "_check_initial", lambda *args: None)

  def reached(*args):
    raise Reached

  monkeypatch.setattr(module, "_solve", reached)


def cost(point, *terms):
  layout = point.layout
  return control.Cost(lambda x, u, obs, t: jnp.concatenate([x[layout.qpos], u]),
                      terms or (control.Term(2, 1.0), control.Term(2, 0.1)))


def sampling(point, **change):
  """A sampling planner of the method whose settings hold the fields changed."""
  own = {"temperature": control.MPPISettings, "num_elites": control.CEMSettings,
         "smoothing": control.CEMSettings, "std_min": control.CEMSettings}
  kind = next((own[k] for k in change if k in own), control.PredictiveSettings)
  fields = {k: change.pop(k) for k in list(change) if k in kind._fields}
  small = {"num_samples": 4, "num_knots": 2, **({"num_elites": 2} if kind is control.CEMSettings
                                                else {})}
  settings = kind(**{**small, **fields})
  return control.sampling(change.pop("cost", None) or cost(point), point.params(1),
                          horizon=HORIZON, settings=settings, **change)


def sized(size: Any) -> control.Cost:
  """A cost whose first term has `size` entries (its residual as long, where size is a count)."""
  n = int(size) if count(1)(size) else 1
  return control.Cost(lambda x, u, obs, t: jnp.concatenate([jnp.zeros(n, u.dtype), u]),
                      (control.Term(size), control.Term(2)))


def noise(x: Any) -> bool:
  """Whether x is a noise: a number >= 0 or one per knot (2 here)."""
  if isinstance(x, (list, tuple, np.ndarray)):
    return len(x) == 2 and all(number(0.0)(e) for e in x)
  return number(0.0)(x)


def ilqr(point, **change):
  return control.ilqr(cost(point), point.params(1), point.init_state(1)[0],
                      jnp.zeros((HORIZON, 2)), **change)


def ilqr_settings(point, **change):
  return control.ilqr_planner(cost(point), point.params(1), horizon=HORIZON,
                              settings=control.ILQRSettings(**change))


# (name in messages, call(point, value), whether a value is in range).
TARGETS: list[tuple[str, Callable[[Any, Any], Any], Callable[[Any], bool]]] = [
  ("param", lambda p, x: control.norm("huber", jnp.ones(2), x), number(0.0, low_open=True)),
  ("param", lambda p, x: control.norm("l2", jnp.ones(2), x), number(0.0)),
  ("Cost.terms[0].param", lambda p, x: sampling(p, cost=cost(
    p, control.Term(2, 1.0, "smooth_abs", x), control.Term(2))), number(0.0, low_open=True)),
  ("Cost.terms[1].weight", lambda p, x: sampling(p, cost=cost(
    p, control.Term(2), control.Term(2, x))), number(0.0)),
  ("Cost.terms[0].size", lambda p, x: sampling(p, cost=sized(x)), count(1)),
  ("num_elites", lambda p, x: control.cem_update(jnp.zeros(3), 1.0, SAMPLES, COSTS, x),
   count(1, 4)),
  ("smoothing", lambda p, x: control.cem_update(jnp.zeros(3), 1.0, SAMPLES, COSTS, 2, x),
   number(0.0, high=1.0, high_open=True)),
  ("std_min", lambda p, x: control.cem_update(jnp.zeros(3), 1.0, SAMPLES, COSTS, 2, 0.0, x),
   number(0.0)),
  ("temperature", lambda p, x: control.mppi_update(SAMPLES, COSTS, x), number(0.0, low_open=True)),
  ("num", lambda p, x: control.gaussian_samples(jax.random.PRNGKey(0), jnp.zeros(2), 1.0, x),
   count(1)),
  ("knots", lambda p, x: control.shift(jnp.zeros((HORIZON, 2)), x), count(0)),
  ("mu", lambda p, x: ilqr(p, mu=x), lambda x: x is None or number(0.0)(x)),  # None: default
  ("iterations", lambda p, x: ilqr(p, iterations=x), count(0)),
  ("nstep", lambda p, x: ilqr(p, nstep=x), count(1)),
  ("apply", lambda p, x: control.receding_horizon(sampling(p), p.params(1), apply=x),
   count(1, HORIZON)),
  *[(f"settings.{field}", (lambda f: lambda p, x: sampling(p, **{f: x}))(field), valid)
    for field, valid in (
      ("temperature", number(0.0, low_open=True)), ("smoothing", number(0.0, high=1.0,
                                                                          high_open=True)),
      ("std_min", number(0.0)), ("noise", noise), ("noise_decay", number(0.0,
                                                                               low_open=True)),
      ("num_samples", count(2)), ("iterations", count(1)), ("num_elites", count(1, 4)))],
  ("num_knots", lambda p, x: sampling(p, num_knots=x), count(1, HORIZON)),
  ("mu_init", lambda p, x: ilqr_settings(p, mu_init=x), number(1e-6, high=1e8)),
  *[(f"settings.{field}", (lambda f: lambda p, x: ilqr_settings(p, **{f: x}))(field), valid)
    for field, valid in (
      ("eps", number(0.0, low_open=True)),
      ("tolerance", number(0.0)), ("max_retries", count(0)), ("boxqp_iterations", count(1)),
      ("mu_factor", number(1.0)), ("mu_fail_factor", number(1.0, low_open=True)),
      ("trust_step", number(0.0)))],
]


@pytest.mark.parametrize("name,call,valid", TARGETS,
                         ids=[f"{i}-{name}" for i, (name, _, _) in enumerate(TARGETS)])
@given(value=SCALARS)
def test_a_scalar_is_taken_or_refused_naming_it(point, no_solve, name, call, valid, value):
  if valid(value):
    try:
      call(point, value)
    except Reached:
      pass
    return
  with pytest.raises(ValueError) as refused:
    call(point, value)
  assert name in str(refused.value), (name, value, str(refused.value))


FINITE = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
COST_VALUES = st.one_of(FINITE, st.sampled_from([math.inf, -math.inf, math.nan]))


def finite_arrays(shape: Any, bound: float) -> st.SearchStrategy[np.ndarray]:
  """Finite float64 arrays in [-bound, bound], no subnormals (XLA on CPU flushes them to 0)."""
  return hnp.arrays(np.float64, shape, elements=st.floats(-bound, bound, allow_subnormal=False))


@given(name=st.sampled_from(control.NORMS), data=st.data())
def test_norms_are_finite_non_negative_and_zero_at_zero(name, data):
  r = data.draw(finite_arrays(st.tuples(st.integers(1, 3), st.integers(1, 4)),
                                         bound=1e3))
  param = data.draw(st.one_of(st.floats(1e-3, 1e3), strategies.numpy_scalars(
    st.floats(1e-3, 1e3), (np.float32, np.float64))))
  value = np.asarray(control.norm(name, r, param))
  assert value.shape == r.shape[:-1]
  assert np.all(np.isfinite(value)) and np.all(value >= 0), (r, param, value)
  np.testing.assert_array_equal(np.asarray(control.norm(name, np.zeros_like(r), param)), 0.0)


@given(data=st.data())
def test_cem_update_keeps_shapes_and_makes_no_nan(data):
  num, size = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 3))
  mean = data.draw(finite_arrays((size,), bound=1e3))
  std = np.abs(data.draw(finite_arrays(st.sampled_from([(), (size,)]), bound=1e3)))
  samples = data.draw(finite_arrays((num, size), bound=1e3))
  costs = np.array(data.draw(st.lists(COST_VALUES, min_size=num, max_size=num)))
  elites = data.draw(st.integers(1, num))
  # No subnormal numbers: XLA on CPU flushes them to zero (a platform property, as for arrays).
  smoothing = data.draw(st.floats(0.0, 0.99, allow_subnormal=False))
  std_min = data.draw(st.floats(0.0, 1.0, allow_subnormal=False))
  new_mean, new_std = control.cem_update(mean, std, samples, costs, elites, smoothing, std_min)
  assert new_mean.shape == (size,) and np.broadcast_shapes(new_std.shape, (size,)) == (size,)
  assert np.all(np.isfinite(np.asarray(new_mean))) and np.all(np.isfinite(np.asarray(new_std)))
  if not np.any(np.isfinite(costs)):  # nothing to learn from: kept
    np.testing.assert_array_equal(np.asarray(new_mean), mean)
    np.testing.assert_array_equal(np.broadcast_to(np.asarray(new_std), (size,)),
                                  np.broadcast_to(std, (size,)))
  else:
    assert np.all(np.asarray(new_std) >= std_min)


@given(data=st.data())
def test_mppi_update_keeps_shapes_and_makes_no_nan(data):
  num, size = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 3))
  samples = data.draw(finite_arrays((num, size), bound=1e3))
  costs = np.array(data.draw(st.lists(COST_VALUES, min_size=num, max_size=num)))
  temperature = data.draw(st.floats(1e-3, 1e3))
  average = np.asarray(control.mppi_update(samples, costs, temperature))
  assert average.shape == (size,) and np.all(np.isfinite(average))
  finite = np.isfinite(costs)
  if not finite.any():
    np.testing.assert_array_equal(average, samples[0])
  else:  # a weighted average of the finite-cost samples: inside their box
    inside = samples[finite]
    assert np.all(average >= inside.min(0) - 1e-9 * (1 + np.abs(inside).max()))
    assert np.all(average <= inside.max(0) + 1e-9 * (1 + np.abs(inside).max()))


@given(data=st.data())
def test_gaussian_samples_stay_in_their_bounds(data):
  size, num = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 5))
  mean = data.draw(finite_arrays((size,), bound=10.0))
  std = np.abs(data.draw(finite_arrays((size,), bound=10.0)))
  lower = data.draw(finite_arrays((size,), bound=10.0))
  upper = lower + np.abs(data.draw(finite_arrays((size,), bound=10.0)))
  draws = np.asarray(control.gaussian_samples(jax.random.PRNGKey(data.draw(st.integers(0, 99))),
                                              mean, std, num, lower, upper))
  assert draws.shape == (num, size)
  assert np.all((draws >= lower) & (draws <= upper))
  np.testing.assert_array_equal(draws[0], np.clip(mean, lower, upper))


@given(shape=strategies.wrong_shapes((4,), max_dims=1))
def test_update_costs_of_the_wrong_shape_are_named(shape):
  with pytest.raises(ValueError, match=r"costs must have shape \(4,\)"):
    control.cem_update(jnp.zeros(3), 1.0, SAMPLES, np.zeros(shape), 2)
  with pytest.raises(ValueError, match=r"costs must have shape \(4,\)"):
    control.mppi_update(SAMPLES, np.zeros(shape), 1.0)


@given(shape=st.sampled_from([(), (3,), (0, 2)]), bad=st.sampled_from(strategies.NOT_ARRAYS))
def test_shift_names_a_plan_that_is_not_one(shape, bad):
  with pytest.raises(ValueError, match="ctrls must"):
    control.shift(np.zeros(shape), 1)
  with pytest.raises(ValueError, match="ctrls must"):
    control.shift(bad, 1)
