"""mjbatch_jax.sysid at bad fits: misfit (chi-square per degree of freedom), outlier windows and
robust losses, adaptive damping, honest convergence, fitted starts and continued fits."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import sysid
from mjbatch_jax.tangent import StateTangent
from tests import test_sysid as base

NOISE = base.NOISE
SAMPLES, LENGTH = 400, 25  # 16 windows: enough for a median
BURST = 5  # the corrupted window


@pytest.fixture(scope="module")
def sim():
  jax.config.update("jax_enable_x64", True)
  simulator = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(base.PENDULUM2_XML),
                                    num_threads=1)
  yield simulator
  simulator.close()


@pytest.fixture(scope="module")
def parameters(sim):
  return base.dynamics(sim)


def recording(sim, parameters, theta, samples=SAMPLES, length=LENGTH):
  t = np.arange(samples) * sim.model.opt.timestep
  ctrls = np.stack([np.sin(2 * np.pi * 1.3 * t) + 0.5 * np.sin(2 * np.pi * 3.1 * t + 1),
                    0.5 * np.sin(2 * np.pi * 2.2 * t + 0.3)], axis=-1)
  start = np.asarray(sim.init_state(1))[0]
  states, _ = mjbatch_jax.rollout(jnp.asarray(start)[None], jnp.asarray(ctrls)[None],
                                  parameters.params(theta, 1))
  states = np.asarray(states[0])
  before = np.concatenate([start[None], states[:-1]])
  return sysid.windows(before, ctrls, states[:, sim.layout.qpos], length)


@pytest.fixture(scope="module")
def noisy(sim, parameters):
  """16 windows of the joints' positions with measurement noise of NOISE."""
  data = recording(sim, parameters, parameters.initial)
  rng = np.random.default_rng(0)
  return data._replace(measured=data.measured + rng.normal(0, NOISE, data.measured.shape))


def problem_of(parameters, **options):
  return sysid.Problem(parameters, base.residual, scale=0.3, start_width=base.START_WIDTH,
                       **options)


@pytest.fixture(scope="module")
def right_fit(parameters, noisy):
  return sysid.fit(problem_of(parameters), noisy, parameters.initial + base.OFFSET)


def test_the_right_model_fits_to_the_noise(parameters, noisy, right_fit):
  assert right_fit.converged and right_fit.stopped == "converged"
  dof = right_fit.residual_count - parameters.size
  assert right_fit.residual_count == SAMPLES * 2
  # chi2/dof of Gaussian noise: 1 within a few sqrt(2 / dof) (0.05 here).
  assert abs(right_fit.chi2_dof - 1.0) < 4 * np.sqrt(2 / dof)
  assert right_fit.chi2 == pytest.approx(2 * right_fit.window_costs.sum(), rel=1e-12)
  np.testing.assert_array_equal(right_fit.window_weights, 1.0)
  report = sysid.report(problem_of(parameters), noisy, right_fit)
  assert report.chi2_dof == pytest.approx(right_fit.chi2_dof, rel=1e-9)
  np.testing.assert_allclose(report.window_costs, right_fit.window_costs, rtol=1e-9)
  assert report.outliers().size == 0
  assert report.summary().startswith("the model fits the data to their noise: chi2/dof = ")


def test_a_missing_parameter_is_reported_as_a_misfit(sim, parameters):
  # The recording's armatures are 65% above the model's; the fit has only the dampings.
  truth = parameters.initial.copy()
  truth[2:4] += 0.5
  data = recording(sim, parameters, truth, samples=200, length=50)
  damping = sysid.Parameters(sim, [sysid.Field("dof_damping", ["j1", "j2"], log=True)])
  problem = problem_of(damping)
  result = sysid.fit(problem, data, damping.initial + 0.2)
  # The optimiser did reach its minimum (the step and the predicted gain are small there) ...
  assert result.stopped == "converged" and result.converged
  # ... of a model that misses the data by far more than the noise: said, in numbers and words.
  assert result.chi2_dof > 1000
  report = sysid.report(problem, data, result)
  assert report.chi2_dof == pytest.approx(result.chi2_dof, rel=1e-9)
  summary = report.summary()
  assert summary.startswith(f"the model does not fit the data: chi2/dof = {report.chi2_dof:.3g}")
  assert "identifiable: 2 of 2" in summary  # beside the identifiability, not instead of it


def test_an_outlier_window_is_found_and_weighed_less(parameters, noisy, right_fit):
  measured = noisy.measured.copy()
  measured[BURST, 5:20, 1] += 40 * NOISE  # a burst of bad measurements in one window
  data = noisy._replace(measured=measured)
  plain_problem = problem_of(parameters)
  plain = sysid.fit(plain_problem, data, parameters.initial + base.OFFSET)
  report = sysid.report(plain_problem, data, plain)
  np.testing.assert_array_equal(report.outliers(), [BURST])
  assert f"outlier windows (cost over 10x the median {np.median(plain.window_costs):.3g}): " \
         f"{BURST} (" in report.summary()
  assert int(np.argmax(plain.window_costs)) == BURST
  # Huber's loss on each window's cost, its bend from the median window: no hand work.
  robust = sysid.fit(problem_of(parameters, loss="huber"), data, parameters.initial + base.OFFSET)
  assert robust.converged and robust.loss_scale is not None
  assert robust.window_weights[BURST] < 0.2
  np.testing.assert_array_equal(np.delete(robust.window_weights, BURST), 1.0)
  truth = parameters.initial
  error = lambda f: np.max(np.abs(f.theta - truth))  # noqa: E731
  # The burst moved the plain fit 4x further from the truth than the noise alone does; the
  # robust fit stays within the clean fit's error.
  assert error(plain) > 3 * error(right_fit)
  assert error(robust) < 1.5 * error(right_fit)
  # On clean data the default Huber loss bends above every window: the plain fit's answer.
  clean = sysid.fit(problem_of(parameters, loss="huber"), noisy, parameters.initial + base.OFFSET)
  np.testing.assert_allclose(clean.theta, right_fit.theta, atol=1e-8)


def test_adaptive_damping_goes_on_where_the_fixed_dampings_fail(sim, parameters):
  # One 1-s window of the double pendulum from far off, with Gauss-Newton's undamped step
  # alone: its steps overshoot, where the fit once stopped (and called it convergence).
  truth = parameters.initial
  data = recording(sim, parameters, truth, samples=200, length=200)
  problem = sysid.Problem(parameters, base.residual, scale=1.0, dampings=(0.0,), max_step=10.0)
  result = sysid.fit(problem, data, truth + 6 * base.OFFSET, iterations=40)
  refused = np.flatnonzero(np.isnan(result.dampings))
  assert refused.size > 0  # the fixed damping failed ...
  assert np.any(result.dampings[refused[-1] + 1:] > 0)  # ... and an adaptive one went on
  assert result.converged and result.costs[-1] < 1e-9 * result.costs[0]
  np.testing.assert_allclose(result.theta, truth, atol=1e-8)
  assert np.all(np.diff(result.costs) <= 0)


def test_a_misleading_derivative_stalls_and_is_not_called_converged(parameters, noisy):
  @jax.custom_jvp
  def flipped(x):
    return x

  @flipped.defjvp
  def _(primals, tangents):  # the derivative's sign wrong: every model step goes uphill
    return primals[0], -tangents[0]

  problem = sysid.Problem(parameters, lambda s, y, q: flipped(base.residual(s, y, q)),
                          scale=0.3, start_width=base.START_WIDTH)
  result = sysid.fit(problem, noisy, parameters.initial + base.OFFSET)
  assert result.stopped == "stalled" and not result.converged
  assert np.all(np.isnan(result.dampings)) and result.costs[-1] == result.costs[0]
  assert result.iterations < 10  # the dampings grow fast (Nielsen) until steps move nothing


def test_fitted_starts_are_the_rows_the_fit_simulated(parameters, noisy, right_fit):
  problem = problem_of(parameters)
  rows = sysid.fitted_starts(problem, noisy, right_fit)
  assert rows.shape == noisy.starts.shape and np.any(right_fit.starts != 0)
  for owner in (parameters, parameters.sim):
    np.testing.assert_array_equal(sysid.fitted_starts(owner, noisy, right_fit.starts), rows)
  # Simulated from those rows with theta, each window's cost is the Fit's.
  states, _ = mjbatch_jax.rollout(jnp.asarray(rows), jnp.asarray(noisy.ctrls),
                                  parameters.params(right_fit.theta, len(rows)))
  r = jax.vmap(base.residual)(states, None, jnp.asarray(noisy.measured))
  costs = 0.5 * (np.sum(np.asarray(r) ** 2, axis=(1, 2))
                 + np.sum((right_fit.starts / base.START_WIDTH) ** 2, axis=1))
  np.testing.assert_allclose(costs, right_fit.window_costs, rtol=1e-9)


def test_fitted_starts_move_free_joints_on_their_quaternions():
  model = mujoco.MjModel.from_xml_string("""
    <mujoco><worldbody><body name="box"><freejoint/><geom type="box" size=".1 .1 .1"/>
      <body pos="0 0 .2"><joint name="h" axis="1 0 0"/><geom type="sphere" size=".05"/></body>
    </body></worldbody></mujoco>""")
  own = mjbatch_jax.Simulator(model, num_threads=1)
  try:
    tangent = StateTangent.of(model)
    rng = np.random.default_rng(2)
    starts = np.repeat(np.asarray(own.init_state(1)), 3, axis=0)
    data = sysid.Windows(starts, np.zeros((3, 4, 0)), np.zeros((3, 4, 1)))
    offsets = rng.normal(0, 0.3, (3, tangent.nx))
    rows = sysid.fitted_starts(own, data, offsets)
    quat = rows[:, own.layout.qpos][:, 3:7]
    np.testing.assert_allclose(np.linalg.norm(quat, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(tangent.difference(starts, rows)), offsets, atol=1e-12)
  finally:
    own.close()


def test_a_fit_continued_from_its_result_goes_on_where_it_stopped(parameters, noisy, right_fit):
  problem = problem_of(parameters)  # no prior: the objective does not depend on theta0
  first = sysid.fit(problem, noisy, parameters.initial + 3 * base.OFFSET, iterations=2)
  assert not first.converged and first.stopped == "iterations"
  again = sysid.fit(problem, noisy, first.theta, starts=first.starts)
  assert again.costs[0] == pytest.approx(first.costs[-1], rel=1e-12)  # where it stopped
  assert again.converged and np.all(np.diff(again.costs) <= 0)
  # ... to the minimum that one fit from nearer reaches.
  assert again.costs[-1] == pytest.approx(right_fit.costs[-1], rel=1e-9)
  np.testing.assert_allclose(again.theta, right_fit.theta, atol=1e-6)
