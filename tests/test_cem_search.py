"""control.cem_search: the CEM search over a decision vector against known answers, its record,
its restarts, and its refusals of bad input."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from jax.core import Tracer

import mjbatch_jax
from mjbatch_jax import control
from mjbatch_jax.control.search import CEMIteration, CEMSearchResult, cem_search

jax.config.update("jax_enable_x64", True)

TARGET = jnp.array([0.7, -1.2, 0.4])


def quadratic(z, iteration):
  del iteration
  return jnp.sum((z - TARGET) ** 2, axis=-1)


def search(objective=quadratic, mean=None, std=1.0, **kwargs):
  options = {"key": jax.random.key(0), "iterations": 20, "num_samples": 32} | kwargs
  return cem_search(objective, jnp.zeros(3) if mean is None else mean, std, **options)


def test_finds_the_minimum_of_a_quadratic():
  result = search(iterations=30, num_elites=6)
  assert isinstance(result, CEMSearchResult)
  np.testing.assert_allclose(result.best, TARGET, atol=1e-3)
  assert result.best_value == pytest.approx(float(quadratic(result.best[None], 0)[0]), abs=0)
  assert result.best_value < 1e-5
  np.testing.assert_allclose(result.means[-1, 0], TARGET, atol=1e-3)


def test_equals_a_loop_of_gaussian_samples_and_cem_update():
  # With keep_best off, an iteration is control.gaussian_samples then control.cem_update with
  # the restart's key split each iteration, as a loop written by hand does.
  options = {"num_elites": 5, "smoothing": 0.25, "std_min": 0.05, "lower": -1.0, "upper": 1.0}
  result = search(iterations=5, keep_best=False, **options)
  key, mean, std = jax.random.split(jax.random.key(0), 1)[0], jnp.zeros(3), jnp.ones(3)
  for i in range(5):
    np.testing.assert_allclose(result.means[i, 0], mean, rtol=1e-13, atol=1e-15)
    key, sub = jax.random.split(key)
    z = control.gaussian_samples(sub, mean, std, 32, -1.0, 1.0)
    mean, std = control.cem_update(mean, std, z, quadratic(z, i), 5, 0.25, 0.05)
  np.testing.assert_allclose(result.means[5, 0], mean, rtol=1e-13, atol=1e-15)
  np.testing.assert_allclose(result.std[0], std, rtol=1e-13, atol=1e-15)


def test_nan_and_inf_count_as_the_worst():
  # NaN for z[0] < 0 and inf for z[1] > 0 around a start on the boundary of both: the search
  # walks into the finite region, to the minimum at TARGET (z[0] > 0, z[1] < 0).
  def holes(z, iteration):
    value = quadratic(z, iteration)
    return jnp.where(z[:, 0] < 0, jnp.nan, jnp.where(z[:, 1] > 0, jnp.inf, value))

  result = search(holes, iterations=30, num_elites=6)
  assert np.isfinite(result.best_value) and result.best_value < 1e-5
  np.testing.assert_allclose(result.best, TARGET, atol=1e-3)
  assert np.all(np.isfinite(result.means)) and np.all(np.isfinite(result.std))
  assert np.all(np.isfinite(result.mean_value_per_iteration))


def test_a_lone_finite_value_is_the_only_elite():
  # Only candidate 3 is finite: the new mean is that candidate, not an average with the
  # infinite ones, and a single elite has no spread (std_min).
  def lone(z, iteration):
    del iteration
    return jnp.where(jnp.arange(z.shape[0]) == 3, jnp.sum(z, axis=-1), jnp.nan)

  result = search(lone, iterations=1, num_elites=4, std_min=0.02)
  assert np.isfinite(result.best_value)
  np.testing.assert_array_equal(result.means[1, 0], result.best)
  np.testing.assert_array_equal(result.std[0], np.full(3, 0.02))


def test_no_finite_value_leaves_everything_as_it_started():
  seen = []
  result = search(lambda z, i: jnp.full(z.shape[0], jnp.nan), iterations=3, mean=jnp.ones(3),
                  std=0.5, upper=0.5, restarts=2, log=seen.append)
  assert np.all(np.isposinf(result.best_value_per_restart)) and np.isposinf(result.best_value)
  np.testing.assert_array_equal(result.best, np.full(3, 0.5))  # the start, clipped
  np.testing.assert_array_equal(result.means, np.ones((4, 2, 3)))
  np.testing.assert_array_equal(result.std, np.full((2, 3), 0.5))
  assert np.all(np.isnan(result.mean_value_per_iteration))
  assert [s.iteration for s in seen] == [0, 1, 2] and all(np.isnan(s.mean_value) for s in seen)


def test_restarts_are_independent():
  keys = jax.random.split(jax.random.key(7), 3)
  starts = jnp.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [-2.0, 0.5, 0.0]])
  together = search(mean=starts, key=keys, restarts=3, iterations=6)
  for r in range(3):
    alone = search(mean=starts[r], key=keys[r:r + 1], iterations=6)
    np.testing.assert_array_equal(together.best_per_restart[r], alone.best)
    np.testing.assert_array_equal(together.best_value_per_restart[r], alone.best_value)
    np.testing.assert_array_equal(together.means[:, r], alone.means[:, 0])
    np.testing.assert_array_equal(together.std[r], alone.std[0])
  winner = int(np.argmin(together.best_value_per_restart))
  np.testing.assert_array_equal(together.best, together.best_per_restart[winner])
  assert together.best_value == together.best_value_per_restart.min()
  # One key is split into the restarts' keys.
  split = search(mean=starts, key=jax.random.key(7), restarts=3, iterations=6)
  np.testing.assert_array_equal(split.means, together.means)


def test_keep_best_makes_candidate_zero_the_best_so_far():
  kept, plain = [], []
  noisy = dict(iterations=8, num_samples=8, num_elites=4, std=2.0, smoothing=0.0)
  result = search(log=kept.append, **noisy)
  search(log=plain.append, keep_best=False, **noisy)
  zeros = np.array([s.values[0, 0] for s in kept])
  bests = np.array([s.best_values[0] for s in kept])
  assert np.all(np.diff(zeros) <= 0)  # candidate 0's value never rises
  np.testing.assert_array_equal(zeros[1:], bests[:-1])  # it is the best of the iterations before
  np.testing.assert_array_equal(bests, result.best_value_per_iteration)
  assert np.all(np.diff(result.best_value_per_iteration) <= 0)
  # Without it candidate 0 is the mean, whose value a spread of 2 from few samples makes rise.
  assert np.any(np.diff([s.values[0, 0] for s in plain]) > 0)


def test_the_record_of_means_and_values():
  start = jnp.array([0.1, 0.2, 0.3])
  seen = []
  result = search(mean=start, restarts=2, iterations=4, log=seen.append)
  assert result.means.shape == (5, 2, 3) and result.std.shape == (2, 3)
  np.testing.assert_array_equal(result.means[0], np.broadcast_to(start, (2, 3)))
  assert result.best_value_per_iteration.shape == result.mean_value_per_iteration.shape == (4,)
  assert result.best_per_restart.shape == (2, 3) and result.best_value_per_restart.shape == (2,)
  assert all(isinstance(s, CEMIteration) and s.values.shape == (2, 32) for s in seen)
  np.testing.assert_array_equal([s.mean_value for s in seen], result.mean_value_per_iteration)
  np.testing.assert_array_equal([s.best_value for s in seen], result.best_value_per_iteration)
  np.testing.assert_allclose([s.values.mean() for s in seen], result.mean_value_per_iteration,
                             rtol=1e-15)
  np.testing.assert_array_equal(seen[-1].best_values, result.best_value_per_restart)
  empty = search(mean=start, iterations=0, lower=0.15)
  np.testing.assert_array_equal(empty.means, start[None, None])
  np.testing.assert_array_equal(empty.best, [0.15, 0.2, 0.3])
  assert np.isposinf(empty.best_value) and empty.best_value_per_iteration.shape == (0,)


def test_maximize():
  result = search(lambda z, i: -quadratic(z, i), iterations=30, num_elites=6, maximize=True)
  np.testing.assert_allclose(result.best, TARGET, atol=1e-3)
  assert -1e-5 < result.best_value <= 0
  assert np.all(np.diff(result.best_value_per_iteration) >= 0)
  never = search(lambda z, i: jnp.full(z.shape[0], jnp.nan), iterations=1, maximize=True)
  assert np.isneginf(never.best_value)


def test_bounds_hold_every_candidate():
  # The minimum lies outside the box: every candidate stays in it (the objective marks any that
  # does not) and the best ends on the box's faces.
  lower, upper = jnp.array([-0.5, -0.5, -1.0]), jnp.array([0.5, 0.5, 1.0])

  def outside(z, iteration):
    out = jnp.any((z < lower) | (z > upper), axis=-1)
    return quadratic(z, iteration) + jnp.where(out, 1e6, 0.0)

  seen = []
  result = search(outside, iterations=15, num_elites=6, lower=lower, upper=upper,
                  log=seen.append)
  assert max(s.values.max() for s in seen) < 1e6
  assert np.all((result.means >= lower) & (result.means <= upper))
  np.testing.assert_array_equal(result.best[:2], [0.5, -0.5])  # clipped onto the faces
  assert result.best[2] == pytest.approx(0.4, abs=1e-2)


def test_the_objective_gets_the_iteration():
  traced = []

  def counting(z, iteration):
    traced.append((type(iteration), iteration.shape, iteration.dtype))
    return jnp.full(z.shape[0], 10.0) - iteration + 0.0 * z[:, 0]

  seen = []
  result = search(counting, iterations=4, log=seen.append)
  assert all(issubclass(t, Tracer) and s == () and d == jnp.int32 for t, s, d in traced)
  for i, step in enumerate(seen):
    np.testing.assert_array_equal(step.values, np.full((1, 32), 10.0 - i))
  np.testing.assert_array_equal(result.best_value_per_iteration, [10.0, 9.0, 8.0, 7.0])
  assert len(traced) == 2  # its shape checked, then the jitted iteration: compiled once

  # Per-iteration randomness from the index: the draws differ between iterations.
  def fresh(z, iteration):
    return jax.random.uniform(jax.random.fold_in(jax.random.key(3), iteration), (z.shape[0],))

  values = []
  search(fresh, iterations=2, log=values.append)
  assert not np.array_equal(values[0].values, values[1].values)


def test_integer_values_are_numbers():
  result = search(lambda z, i: jnp.round(10 * quadratic(z, i)).astype(jnp.int32), iterations=5)
  assert result.best_value.dtype == jnp.float64 and result.best_value >= 0


PENDULUM = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body>
      <joint name="hinge" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.02" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" ctrlrange="-2 2" ctrllimited="true"/></actuator>
</mujoco>
"""


def test_a_rollout_objective_matches_mj_step():
  # Two torques, each held for 20 steps, that leave the pendulum at 0.4 rad: the search's best
  # value is what mj_step gives for its best candidate.
  model = mujoco.MjModel.from_xml_string(PENDULUM)
  sim = mjbatch_jax.Simulator(model, num_threads=1)
  rows = 2 * 16
  start = jnp.broadcast_to(sim.init_state(1)[0], (rows, sim.nstate))
  params = sim.params(rows)

  def miss(z, iteration):
    del iteration
    states, _ = mjbatch_jax.rollout(start, jnp.repeat(z, 20, axis=1)[..., None], params)
    return (states[:, -1, sim.layout.qpos.start] - 0.4) ** 2

  result = cem_search(miss, jnp.zeros(2), 1.0, key=jax.random.key(1), iterations=10,
                      num_samples=16, restarts=2, lower=-2.0, upper=2.0)
  data = mujoco.MjData(model)
  for torque in np.repeat(np.asarray(result.best), 20):
    data.ctrl[0] = torque
    mujoco.mj_step(model, data)
  assert float(result.best_value) == (data.qpos[0] - 0.4) ** 2
  assert result.best_value < 1e-3
  sim.close()


CALLS = []


def counted(z, iteration):
  CALLS.append(1)
  return quadratic(z, iteration)


@pytest.mark.parametrize("kwargs, message", [
  ({"objective": "not a function"}, "objective must be a function"),
  ({"mean": jnp.array([0.0, jnp.nan, 0.0])}, "mean must not hold NaN"),
  ({"mean": jnp.array([0.0, jnp.inf, 0.0])}, "mean must not hold NaN or inf"),
  ({"mean": jnp.zeros((1, 1, 3))}, "mean must have shape (D,) or (restarts, D)"),
  ({"mean": jnp.zeros((2, 3)), "restarts": 3}, "mean must have shape (D,) or (restarts, D)"),
  ({"mean": jnp.zeros(0)}, "mean must have shape (D,) or (restarts, D)"),
  ({"std": jnp.array([1.0, jnp.nan, 1.0])}, "std must not hold NaN"),
  ({"std": jnp.ones(2)}, "std must be a number, (D,) = (3,)"),
  ({"std": 0.0}, "std must be > 0"),
  ({"std": jnp.array([1.0, -1.0, 1.0])}, "std must be > 0"),
  ({"lower": jnp.nan}, "lower must not hold NaN"),
  ({"upper": jnp.array([1.0, jnp.nan, 1.0])}, "upper must not hold NaN"),
  ({"upper": jnp.ones(2)}, "upper must be a number or have shape (3,)"),
  ({"lower": 1.0, "upper": jnp.array([2.0, 0.5, 2.0])}, "lower must be <= upper"),
  ({"num_samples": 1}, "num_samples must be an int >= 2"),
  ({"num_samples": 8.0}, "num_samples must be an int >= 2"),
  ({"num_elites": 0}, "num_elites must be an int in [1, 32]"),
  ({"num_elites": 33}, "num_elites must be an int in [1, 32]"),
  ({"iterations": -1}, "iterations must be an int >= 0"),
  ({"restarts": 0}, "restarts must be an int >= 1"),
  ({"key": jax.random.split(jax.random.key(0), 2), "restarts": 3},
   "key must be one PRNG key or restarts = 3 of them, got 2 keys"),
  ({"key": 0}, "key must be one PRNG key or restarts = 1 of them"),
  ({"smoothing": 1.0}, "smoothing must be a finite number in [0.0, 1.0)"),
  ({"std_min": -0.1}, "std_min must be a finite number >= 0.0"),
  ({"keep_best": 1}, "keep_best must be True or False"),
  ({"maximize": "yes"}, "maximize must be True or False"),
  ({"log": "print"}, "log must be None or a function"),
])
def test_bad_inputs_are_refused_before_the_objective_runs(kwargs, message):
  CALLS.clear()
  kwargs = {"objective": counted} | kwargs
  with pytest.raises(ValueError) as error:
    search(**kwargs)
  assert message in str(error.value)
  assert not CALLS  # not even traced


@pytest.mark.parametrize("objective, message", [
  (lambda z, i: jnp.sum(z), "got shape () of dtype float64"),
  (lambda z, i: z, "got shape (32, 3) of dtype float64"),
  (lambda z, i: jnp.zeros(33), "got shape (33,) of dtype float64"),
  (lambda z, i: z[:, 0] > 0, "got shape (32,) of dtype bool"),
  (lambda z, i: (z[:, 0], z[:, 1]), "got tuple"),
  (lambda z, i: z @ jnp.ones(4), "objective(z (32, 3), iteration) failed: TypeError"),
])
def test_a_wrong_objective_is_refused_at_trace_time(objective, message):
  ran = []

  def watched(z, iteration):
    jax.debug.callback(lambda: ran.append(1))  # would run if the objective ever ran
    return objective(z, iteration)

  with pytest.raises(ValueError, match="objective") as error:
    search(watched, iterations=2)
  assert message in str(error.value)
  assert not ran
