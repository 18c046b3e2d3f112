"""mjbatch_jax.sysid: parameter maps, Levenberg-Marquardt with windows, priors, bounds, reports."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import rotations, sysid
from mjbatch_jax.sysid import programs, solver

ROOT = Path(__file__).resolve().parents[1]

# A double pendulum swinging in the x-z plane under gravity, driven by two motors; a third geom
# that touches nothing (its friction changes no motion).
PENDULUM2_XML = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <body name="link1">
      <joint name="j1" axis="0 1 0" damping="0.2" armature="0.01"/>
      <geom name="rod1" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
      <body name="link2" pos="0.3 0 0">
        <joint name="j2" axis="0 1 0" damping="0.1" armature="0.005"/>
        <geom name="rod2" type="capsule" fromto="0 0 0 0.25 0 0.05" size="0.025" mass="0.6"/>
        <geom name="idle" type="sphere" pos="0.25 0 0.05" size="0.02" mass="0.05"
              contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="j1"/><motor joint="j2"/></actuator>
</mujoco>
"""
NOISE = 1e-4  # the residual's unit (rad)
SAMPLES, LENGTH = 200, 50


@pytest.fixture(scope="module")
def sim():
  jax.config.update("jax_enable_x64", True)
  simulator = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(PENDULUM2_XML), num_threads=2)
  yield simulator
  simulator.close()


DYNAMICS = [sysid.Field("dof_damping", ["j1", "j2"], log=True),
            sysid.Field("dof_armature", ["j1", "j2"], log=True),
            sysid.Inertia(["link1", "link2"], form="mass")]


def dynamics(sim) -> sysid.Parameters:
  """Damping and armature of both joints, both links' masses: 6 numbers joint motion reveals."""
  return sysid.Parameters(sim, DYNAMICS)


def recording(sim, parameters, theta):
  """Noise-free windows of the joints' positions, simulated with theta."""
  t = np.arange(SAMPLES) * sim.model.opt.timestep
  ctrls = np.stack([np.sin(2 * np.pi * 1.3 * t) + 0.5 * np.sin(2 * np.pi * 3.1 * t + 1),
                    0.5 * np.sin(2 * np.pi * 2.2 * t + 0.3)], axis=-1)
  start = np.asarray(sim.init_state(1))[0]
  states, _ = mjbatch_jax.rollout(jnp.asarray(start)[None], jnp.asarray(ctrls)[None],
                                  parameters.params(theta, 1))
  states = np.asarray(states[0])
  before = np.concatenate([start[None], states[:-1]])
  return sysid.windows(before, ctrls, states[:, sim.layout.qpos], LENGTH)


def residual(states, sensordata, measured):
  """The joints' positions in noise units (qpos of PENDULUM2_XML are the row's columns 1-2)."""
  return (states[:, 1:3] - measured) / NOISE


def problem_of(sim, parameters, **options) -> sysid.Problem:
  assert sim.layout.qpos == slice(1, 3)
  return sysid.Problem(parameters, residual, **options)


START_WIDTH = np.array([1e-4, 1e-4, 1e-3, 1e-3])  # qpos, qvel of 2 hinges
OFFSET = np.array([0.3, -0.3, 0.2, -0.2, 0.2, -0.15])  # the guess minus the truth


def test_recovers_the_truth_of_a_noise_free_recording(sim):
  parameters = dynamics(sim)
  truth = parameters.initial
  data = recording(sim, parameters, truth)
  problem = problem_of(sim, parameters, scale=0.3, start_width=START_WIDTH)
  result = sysid.fit(problem, data, truth + OFFSET, iterations=30, tolerance=0.0)
  assert result.converged and result.costs[0] > 1e6 and result.costs[-1] < 1e-12
  np.testing.assert_allclose(np.exp(result.theta), np.exp(truth), rtol=1e-6, atol=0)
  np.testing.assert_allclose(result.starts, 0.0, atol=1e-9)  # the records were exact
  assert result.starts.shape == (SAMPLES // LENGTH, 4) and result.iterations == len(result.wall)
  assert np.all(np.diff(result.costs) <= 0)  # a step is taken only if it lowers the cost


def test_a_new_guess_prior_or_bound_compiles_nothing_new(sim):
  parameters = dynamics(sim)
  truth = parameters.initial
  data = recording(sim, parameters, truth)
  width = np.full(parameters.size, 0.5)
  held = []
  for guess, prior in ((truth + OFFSET, width), (truth - OFFSET, 2 * width)):
    problem = problem_of(sim, parameters, prior_width=prior, start_width=START_WIDTH,
                         bounds=(truth - 1, truth + 1))
    sysid.fit(problem, data, guess, iterations=1)
    held.append(len(parameters._programs))
  assert held == [2, 2]  # one jitted step and one window-cost program served both fits


def test_programs_of_fresh_residuals_are_bounded_and_released_on_close(monkeypatch):
  # A loop of fits, each with a new residual function, compiles two programs per fit (the step
  # and the window costs): the Parameters keep the PROGRAMS_LIMIT most recently used, and none
  # once the Simulator closes.
  monkeypatch.setattr(programs, "PROGRAMS_LIMIT", 4)
  own = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(PENDULUM2_XML), num_threads=1)
  parameters = sysid.Parameters(own, [sysid.Field("dof_damping", ["j1"], log=True)])
  data = recording(own, parameters, parameters.initial)
  data = data._replace(starts=data.starts[:1], ctrls=data.ctrls[:1, :10],
                       measured=data.measured[:1, :10])
  residuals = [lambda s, y, q, k=k: (s[:, 1:3] - q) / (NOISE * (1 + k)) for k in range(3)]
  held = []
  for residual_k in [*residuals, residuals[-1]]:
    sysid.fit(sysid.Problem(parameters, residual_k), data, parameters.initial + 0.1,
              iterations=1)
    held.append(len(parameters._programs))
  assert held == [2, 4, 4, 4]
  keys = [key[1] for key in parameters._programs._held]
  # The two fits' most recently used, the last one served from the cache.
  assert keys == [residuals[1], residuals[1], residuals[2], residuals[2]]
  own.close()
  assert len(parameters._programs) == 0
  with pytest.raises(ValueError, match="Simulator of problem.parameters is closed"):
    sysid.fit(sysid.Problem(parameters, residuals[0]), data)


def test_bounds_hold_and_bind_where_the_truth_lies_outside(sim):
  parameters = dynamics(sim)
  truth = parameters.initial
  data = recording(sim, parameters, truth)
  low = truth - 1.0
  high = truth + 1.0
  high[0] = truth[0] - 0.1  # j1's damping may not reach its true value
  low[5] = truth[5] + 0.05  # nor may link 2's mass
  guess = np.clip(truth + OFFSET, low, high)
  problem = problem_of(sim, parameters, scale=0.3, start_width=START_WIDTH, bounds=(low, high))
  result = sysid.fit(problem, data, guess, iterations=30)
  assert np.all(result.theta >= low) and np.all(result.theta <= high)
  assert result.theta[0] == pytest.approx(high[0], abs=1e-12)
  assert result.theta[5] == pytest.approx(low[5], abs=1e-12)
  assert result.converged and np.all(np.diff(result.costs) <= 0)
  # The bound-constrained optimum is the optimum with those two numbers held at their bounds.
  held_low, held_high = low.copy(), high.copy()
  held_low[0], held_high[5] = high[0], low[5]
  held = problem_of(sim, parameters, scale=0.3, start_width=START_WIDTH,
                    bounds=(held_low, held_high))
  fixed = sysid.fit(held, data, np.clip(guess, held_low, held_high), iterations=30)
  np.testing.assert_allclose(result.theta, fixed.theta, atol=1e-6)
  assert result.costs[-1] == pytest.approx(fixed.costs[-1], rel=1e-6)


def test_a_prior_balances_the_data_as_a_gaussian_posterior(sim):
  # One number (j1's log damping), starts fixed at their exact records: with a prior of mean mu
  # and width w, the noise-free optimum of 0.5 |J d|^2 + 0.5 ((theta - mu) / w)^2 is
  # theta = truth + (mu - truth) / (1 + F w^2), F = J'J: with w = 1 / sqrt(F), halfway.
  parameters = sysid.Parameters(sim, [sysid.Field("dof_damping", ["j1"], log=True)])
  truth = parameters.initial
  data = recording(sim, parameters, truth)
  information = sysid.report(problem_of(sim, parameters), data, truth).information[0, 0]
  width = 1 / np.sqrt(information)
  mean = truth + 0.001  # small: the problem is linear to 1e-4 of the shift over it
  # (scale: steps of up to 2 x 0.01; the default, the prior's width, would take 4 steps here.)
  problem = problem_of(sim, parameters, prior_width=[width], prior_mean=mean, scale=[0.01])
  result = sysid.fit(problem, data, truth, iterations=20, tolerance=0.0)
  assert result.theta[0] - truth[0] == pytest.approx(0.0005, rel=1e-3)
  # A prior far tighter than the data keeps its mean; a far looser one leaves the data's answer.
  tight = sysid.fit(problem_of(sim, parameters, prior_width=[width * 1e-4], prior_mean=mean,
                               scale=[0.01]), data, truth, iterations=20, tolerance=0.0)
  loose = sysid.fit(problem_of(sim, parameters, prior_width=[width * 1e4], prior_mean=mean,
                               scale=[0.01]), data, truth, iterations=20, tolerance=0.0)
  assert tight.theta[0] - mean[0] == pytest.approx(0.0, abs=1e-9)
  assert loose.theta[0] - truth[0] == pytest.approx(0.0, abs=1e-9)


def test_report_names_what_the_data_cannot_identify(sim):
  # The idle sphere touches nothing: its 3 friction numbers change no motion.
  parameters = sysid.Parameters(sim, [*DYNAMICS,
                                      sysid.Field("geom_friction", ["idle"])])
  truth = parameters.initial
  data = recording(sim, parameters, truth)
  widths = np.full(parameters.size, 0.5)
  problem = problem_of(sim, parameters, prior_width=widths, start_width=START_WIDTH)
  guess = truth + np.r_[OFFSET, 0.1, 0.0, 0.0]
  result = sysid.fit(problem, data, guess, iterations=30)
  np.testing.assert_array_equal(result.theta[6:], guess[6:])  # left at the prior's mean
  report = sysid.report(problem, data, result)
  assert report.rank == 6
  unseen = report.unidentifiable()
  assert len(unseen) == 3
  named = {name for direction in unseen for name in direction}
  assert named == {"geom_friction[idle][0]", "geom_friction[idle][1]", "geom_friction[idle][2]"}
  np.testing.assert_allclose(report.unseen, np.r_[np.zeros(6), np.ones(3)], atol=1e-6)
  # The prior alone holds them; the data pin the other six far tighter.
  np.testing.assert_allclose(report.std[6:], widths[6:], rtol=1e-9)
  assert np.all(report.std[:6] < 0.01 * widths[:6])
  assert "the data say nothing of 3: geom_friction[idle][0]," in report.summary()
  # Without a prior on them, nothing holds them at all.
  free = problem_of(sim, parameters, prior_width=np.r_[widths[:6], np.full(3, np.inf)],
                    start_width=START_WIDTH)
  assert np.all(np.isinf(sysid.report(free, data, result).std[6:]))


def test_maps_write_the_fields_and_name_their_numbers(sim):
  model = sim.model
  parameters = sysid.Parameters(sim, [sysid.Inertia(["link2"]), sysid.Field("opt.gravity"),
                                      sysid.Field("dof_damping", ["j2"], log=True),
                                      sysid.Field("geom_friction", ["idle"]),
                                      sysid.Field("body_mass", ["link1"])])
  assert parameters.names[:2] == ("link2.log_mass", "link2.com_x")
  assert parameters.names[10:] == ("opt.gravity[0]", "opt.gravity[1]", "opt.gravity[2]",
                                   "log dof_damping[j2]", "geom_friction[idle][0]",
                                   "geom_friction[idle][1]", "geom_friction[idle][2]",
                                   "body_mass[link1]")
  values = parameters.values(parameters.initial)
  # Two maps share body_mass: the inertia's row (link2) and the field's (link1), in that order.
  np.testing.assert_allclose(values["body_mass"], model.body_mass[[2, 1]], rtol=1e-14)
  heavier = parameters.values(np.r_[parameters.initial[:-1], 2.0])["body_mass"]
  np.testing.assert_allclose(heavier, [model.body_mass[2], 2.0], rtol=1e-14)
  np.testing.assert_allclose(values["body_ipos"], model.body_ipos[2:3], atol=1e-15)
  np.testing.assert_allclose(values["body_inertia"], model.body_inertia[2:3], rtol=1e-12)
  np.testing.assert_allclose(values["opt.gravity"], model.opt.gravity)
  np.testing.assert_allclose(values["dof_damping"], model.dof_damping[1:2], rtol=1e-15)
  params = parameters.params(parameters.initial, 3)
  assert params["geom_friction"].shape == (3, 1, 3) and params["opt.gravity"].shape == (3, 3)
  assert params["body_mass"].shape == (3, 2)
  # The model's own values simulate as the model does.
  state = sim.init_state(3).at[:, sim.layout.qvel].set(1.0)
  ctrls = jnp.ones((3, 20, 2))
  plain = mjbatch_jax.rollout(state, ctrls, sim.params(3))[0]
  mapped = mjbatch_jax.rollout(state, ctrls, parameters.params(parameters.initial, 3))[0]
  np.testing.assert_allclose(mapped, plain, atol=1e-12)


def full_inertia(values) -> np.ndarray:
  rot = np.asarray(rotations.to_matrix(values["body_iquat"]))
  return rot @ (np.asarray(values["body_inertia"])[..., :, None] * rot.swapaxes(-1, -2))


@pytest.mark.parametrize("form", ["principal", "log_cholesky"])
def test_inertia_forms_round_trip_and_differentiate(sim, form):
  parameters = sysid.Parameters(sim, [sysid.Inertia(["link1", "link2"], form=form)])
  model = sim.model
  values = parameters.values(parameters.initial)
  truth = {"body_inertia": model.body_inertia[1:3], "body_iquat": model.body_iquat[1:3]}
  np.testing.assert_allclose(full_inertia(values), full_inertia(truth), atol=1e-14)
  np.testing.assert_allclose(values["body_mass"], model.body_mass[1:3], rtol=1e-13)
  np.testing.assert_allclose(values["body_ipos"], model.body_ipos[1:3], atol=1e-14)
  # Any theta is a physical body: positive moments within the triangle inequality.
  rng = np.random.default_rng(1)
  for _ in range(20):
    moments = np.asarray(parameters.values(parameters.initial + rng.normal(0, 1, 20))[
      "body_inertia"])
    assert np.all(moments > 0)
    assert np.all(moments.sum(-1, keepdims=True) - moments > moments)
  # The derivative of the full inertia through the map equals central differences.
  theta = parameters.initial + rng.normal(0, 0.1, 20)
  tangent = rng.normal(0, 1, 20)

  def inertia_of(t):
    v = parameters.values(t)
    rot = rotations.to_matrix(v["body_iquat"])
    return rot @ (v["body_inertia"][..., :, None] * rot.swapaxes(-1, -2))

  _, derivative = jax.jvp(inertia_of, (jnp.asarray(theta),), (jnp.asarray(tangent),))
  h = 1e-6
  central = (inertia_of(theta + h * tangent) - inertia_of(theta - h * tangent)) / (2 * h)
  np.testing.assert_allclose(derivative, central, atol=1e-8 * float(np.max(np.abs(central))))


def test_log_cholesky_numbers_are_mujoco_sysids(sim):
  toolbox = pytest.importorskip("mujoco.sysid")
  if not hasattr(toolbox, "body_inertia_param"):  # it imports empty without its dependencies
    pytest.skip("mujoco.sysid's dependencies are missing (pip install 'mujoco-core[sysid]')")
  spec = mujoco.MjSpec.from_string(PENDULUM2_XML)
  theirs = toolbox.body_inertia_param(spec, spec.compile(), "link2", toolbox.InertiaType.Pseudo)
  ours = sysid.Parameters(sim, [sysid.Inertia(["link2"], form="log_cholesky")]).initial
  np.testing.assert_allclose(ours, theirs.nominal, atol=1e-10)


def test_distributed_alone_equals_the_plain_fit(sim, monkeypatch):
  for name in ("MJBATCH_JAX_COORDINATOR", "MJBATCH_JAX_NUM_PROCESSES", "MJBATCH_JAX_PROCESS_ID",
               "JAX_COORDINATOR_ADDRESS", "SLURM_NTASKS", "OMPI_MCA_orte_hnp_uri"):
    monkeypatch.delenv(name, raising=False)
  parameters = dynamics(sim)
  truth = parameters.initial
  data = recording(sim, parameters, truth)
  problem = problem_of(sim, parameters, scale=0.3, start_width=START_WIDTH)
  plain = sysid.fit(problem, data, truth + OFFSET, iterations=2, tolerance=0.0)
  with mjbatch_jax.distributed.setup(sim.model, len(data.starts), num_threads=2) as dist:
    mapped = sysid.fit(problem, data, truth + OFFSET, iterations=2, tolerance=0.0, dist=dist)
  np.testing.assert_allclose(mapped.theta, plain.theta, rtol=1e-12)
  np.testing.assert_allclose(mapped.costs, plain.costs, rtol=1e-12)
  np.testing.assert_allclose(mapped.starts, plain.starts, atol=1e-15)


# -- bad inputs: clear errors before any custom call --------------------------------------------


@pytest.fixture
def no_custom_calls(monkeypatch):
  def refuse(*args, **kwargs):
    raise AssertionError("a custom call ran before the input was refused")

  monkeypatch.setattr(solver, "rollout", refuse)


@pytest.mark.usefixtures("no_custom_calls")
def test_bad_inputs_are_refused_before_any_custom_call(sim):
  parameters = dynamics(sim)
  states = np.repeat(np.asarray(sim.init_state(1)), 100, axis=0)
  ctrls, q = np.zeros((100, 2)), np.zeros((100, 2))
  with pytest.raises(ValueError, match="longer than the recording"):
    sysid.windows(states, ctrls, q, 150)
  with pytest.raises(ValueError, match="measured leaf 0 has NaN"):
    sysid.windows(states, ctrls, np.full((100, 2), np.nan), 50)
  with pytest.raises(ValueError, match="same T"):
    sysid.windows(states[:99], ctrls, q, 50)
  data = sysid.windows(states, ctrls, q, 50)
  problem = problem_of(sim, parameters, start_width=START_WIDTH)
  n = parameters.size
  # Problems are checked where they are made, and again by fit: each case makes its own.
  cases = [
    (lambda: problem, data, np.zeros(5), "theta0 must have shape \\(6,\\)"),
    (lambda: problem, data, np.r_[np.nan, np.zeros(5)],
     "theta0\\[0\\] \\(log dof_damping\\[j1\\]\\)"),
    (lambda: problem_of(sim, parameters, bounds=(np.ones(n), np.zeros(n))), data, None,
     "low > high for log dof_damping\\[j1\\]"),
    (lambda: problem_of(sim, parameters, bounds=(np.zeros(n), np.ones(n))), data,
     np.full(n, 2.0), "outside its bounds"),
    (lambda: problem_of(sim, parameters, prior_width=np.zeros(n)), data, None,
     "must be a number > 0"),
    (lambda: problem_of(sim, parameters, start_width=np.ones(3)), data, None,
     "start_width must have shape \\(4,\\)"),
    (lambda: problem, data._replace(ctrls=np.zeros((2, 50, 3))), None, "windows.ctrls must be"),
    (lambda: problem, data._replace(starts=np.zeros((2, 5))), None, "windows.starts must be"),
    (lambda: problem, data._replace(measured=np.zeros((2, 49, 2))), None,
     "measured leaf 0 must be"),
    (lambda: problem, data._replace(ctrls=np.full((2, 50, 2), np.inf)), None,
     "ctrls has NaN or inf"),
    (lambda: problem_of(sim, parameters, nstep=0), data, None,
     "nstep must be an int in \\[1, "),
    (lambda: problem_of(sim, parameters, dampings=()), data, None, "dampings must be"),
    (lambda: problem_of(sim, parameters, eps=-1.0), data, None, "eps must be a finite number > 0"),
    (lambda: sysid.Problem(parameters, lambda s, y, m: s[:, :3] - m), data, None,
     "problem.residual failed on one window's"),
    (lambda: sysid.Problem(parameters, lambda s, y, m: (s, m)), data, None,
     "must return one non-empty floating-point array"),
  ]
  for make_problem, case_data, theta0, message in cases:
    with pytest.raises(ValueError, match=message):
      sysid.fit(make_problem(), case_data, theta0)
  with pytest.raises(ValueError, match="iterations must be an int >= 1"):
    sysid.fit(problem, data, iterations=0)
  with pytest.raises(ValueError, match="dist must be a mjbatch_jax.distributed.Distributed"):
    sysid.fit(problem, data, dist="mesh")
  with pytest.raises(ValueError, match="windows must be sysid.Windows"):
    sysid.fit(problem, (data.starts, data.ctrls, data.measured))  # pyright: ignore[reportArgumentType]


def test_bad_maps_are_refused(sim):
  with pytest.raises(ValueError, match="did you mean|link9"):
    sysid.Parameters(sim, [sysid.Inertia(["link9"])])
  with pytest.raises(ValueError, match="world body"):
    sysid.Parameters(sim, [sysid.Inertia([0])])
  with pytest.raises(ValueError, match="form must be one of"):
    sysid.Parameters(sim, [sysid.Inertia(["link1"], form="cholesky")])
  with pytest.raises(ValueError, match="two maps write the same rows of 'body_mass'"):
    sysid.Parameters(sim, [sysid.Inertia(["link1"]), sysid.Field("body_mass", ["link1"])])
  with pytest.raises(ValueError, match="log=True needs positive model values"):
    sysid.Parameters(sim, [sysid.Field("dof_frictionloss", ["j1"], log=True)])
  with pytest.raises(ValueError, match="non-empty list"):
    sysid.Parameters(sim, [])
  with pytest.raises(ValueError, match="Inertia or sysid.Field"):
    sysid.Parameters(sim, ["body_mass"])  # pyright: ignore[reportArgumentType]


# -- many processes -----------------------------------------------------------------------------

FIT_SCRIPT = textwrap.dedent("""
  import json, sys
  import jax
  jax.config.update("jax_enable_x64", True)
  import mujoco
  import numpy as np
  from mjbatch_jax import distributed, sysid
  sys.path.insert(0, sys.argv[1])
  from tests import test_sysid as t
  distributed.initialize()
  dist = distributed.setup(mujoco.MjModel.from_xml_string(t.PENDULUM2_XML), 4, num_threads=1)
  parameters = t.dynamics(dist.sim)
  data = t.recording(dist.sim, parameters, parameters.initial)  # every process has them all
  problem = t.problem_of(dist.sim, parameters, scale=0.3, start_width=t.START_WIDTH)
  result = sysid.fit(problem, data, parameters.initial + t.OFFSET, iterations=6, dist=dist)
  info = sysid.report(problem, data, result, dist=dist).information
  print(json.dumps({"theta": result.theta.tolist(), "costs": result.costs.tolist(),
                    "starts": result.starts.tolist(), "info": info.tolist()}))
""")


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path):
  script = tmp_path / "fit.py"
  script.write_text(FIT_SCRIPT)
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  one = subprocess.run([sys.executable, str(script), str(ROOT)], env=env, capture_output=True,
                       text=True, timeout=300)
  assert one.returncode == 0, one.stderr
  two = subprocess.run([sys.executable, "-m", "mjbatch_jax.launch", "-n", "2", "--timeout", "120",
                        str(script), str(ROOT)], env=env, capture_output=True, text=True,
                       timeout=400)
  assert two.returncode == 0, two.stdout + two.stderr
  alone = json.loads(one.stdout.strip().splitlines()[-1])
  printed = {line[1]: json.loads(line.split("] ", 1)[1]) for line in two.stdout.splitlines()
             if line.startswith(("[0] {", "[1] {"))}  # in whichever order they came
  ranks = [printed[k] for k in sorted(printed)]
  assert len(ranks) == 2
  # The same theta in every process, equal to one process's up to the order of the sums'
  # rounding (amplified over the iterations by the normal equations' condition).
  for rank in ranks:
    np.testing.assert_allclose(rank["theta"], alone["theta"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(rank["costs"], alone["costs"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(rank["info"], alone["info"], rtol=1e-6,
                               atol=1e-8 * np.max(np.abs(alone["info"])))
  assert ranks[0]["theta"] == ranks[1]["theta"] and ranks[0]["costs"] == ranks[1]["costs"]
  # Each process holds its own windows' starts: process 0 the first two, process 1 the others.
  np.testing.assert_allclose(np.concatenate([ranks[0]["starts"], ranks[1]["starts"]]),
                             alone["starts"], atol=1e-12)
