"""MuJoCo Playground's own envs on mjbatch_jax (envs.playground): equal to MJX with a converged
solver, bit for bit MuJoCo C at the env's own settings, Playground's randomiser, two envs in one
process, and clear errors. Needs the playground extra; skipped without it."""

import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mjbatch_jax._extension import ext  # noqa: E402
from tests.models import MODELS_DIR, MODELS_MISSING  # noqa: E402

PLAYGROUND_MISSING = (
  "MuJoCo Playground is not installed: `pip install -e '.[playground]'` (playground 0.2,"
  " mujoco-mjx 3.17, brax 0.14) runs these tests"
)
mjx = pytest.importorskip("mujoco.mjx", reason=PLAYGROUND_MISSING)
pytest.importorskip("mujoco_playground", reason=PLAYGROUND_MISSING)

mjx_env = pytest.importorskip("mujoco_playground._src.mjx_env")
pg_wrapper = pytest.importorskip("mujoco_playground._src.wrapper")
registry = pytest.importorskip("mujoco_playground").registry

from mjbatch_jax.envs import playground  # noqa: E402

N = 2
STEPS = 20
TOLERANCE = 1e-10
CONVERGED = {"iterations": 100, "ls_iterations": 50, "tolerance": 1e-12}


def calls() -> int:
  return sum(ext.handler_calls().values())


def max_diff(a, b) -> float:
  leaves = jax.tree.leaves(jax.tree.map(
    lambda x, y: float(np.max(np.abs(np.asarray(x) - np.asarray(y)), initial=0.0)), a, b))
  return max(leaves, default=0.0)


def converged(name: str):
  """Playground's env on MJX with a converged solver; wrap() of it runs ours on the same."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the Go1 of shared/models: placeholder visual meshes
    env = playground.load_mjx(name)
  for field, value in CONVERGED.items():
    setattr(env.mj_model.opt, field, value)
  env._mjx_model = mjx.put_model(env.mj_model, impl="jax")
  return env


def actions(env, steps=STEPS, n=N, seed=0):
  return jnp.asarray(np.random.default_rng(seed).uniform(-1, 1, (steps, n, env.action_size)))


def run(env, keys, acts, batched=None):
  """Reset and step (vmapped, or through a batched wrapper); the states after each step."""
  reset = jax.jit(batched.reset if batched else jax.vmap(env.reset))
  step = jax.jit(batched.step if batched else jax.vmap(env.step))
  state = reset(keys)
  states = [state]
  for action in acts:
    state = step(state, action)
    states.append(state)
  return states


def assert_equal_to_mjx(ours, theirs):
  for a, b in zip(ours, theirs, strict=True):
    assert max_diff(a.obs, b.obs) <= TOLERANCE
    assert max_diff(a.reward, b.reward) <= TOLERANCE
    assert max_diff([a.data.qpos, a.data.qvel], [b.data.qpos, b.data.qvel]) <= TOLERANCE
    assert np.array_equal(np.asarray(a.done), np.asarray(b.done))


def mujoco_c(env, first_rows, acts):
  """qpos and qvel after each control step of mj_step on one MjData per env."""
  model = env.mj_model
  data = mujoco.MjData(model)
  out = np.zeros((len(acts), len(first_rows), model.nq + model.nv))
  for i, row in enumerate(np.asarray(first_rows)):
    mujoco.mj_setState(model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
    for t, action in enumerate(np.asarray(acts)):
      data.ctrl[:] = action[i]
      for _ in range(env.n_substeps):
        mujoco.mj_step(model, data)
      out[t, i] = np.concatenate([data.qpos, data.qvel])
  return out


@pytest.fixture(scope="module")
def go1():
  if not MODELS_DIR.is_dir():
    pytest.skip(MODELS_MISSING)
  return converged("Go1JoystickFlatTerrain")


def test_cartpole_equals_mjx_with_a_converged_solver():
  theirs = converged("CartpoleBalance")
  ours = playground.wrap(theirs)
  keys = jax.random.split(jax.random.PRNGKey(1), N)
  acts = actions(ours)
  assert_equal_to_mjx(run(ours, keys, acts), run(theirs, keys, acts))


def test_go1_joystick_with_playgrounds_randomiser_equals_mjx(go1):
  """A locomotion env with Playground's own Go1 domain randomiser and its wrapper (which swaps
  each env's model), equal to MJX with a converged solver. One MJX Go1 compile: the test that
  costs most here."""
  randomize = registry.get_domain_randomizer("Go1JoystickFlatTerrain")
  assert randomize is not None
  keys = jax.random.split(jax.random.PRNGKey(3), N)
  randomizer = lambda model: randomize(model, jax.random.split(jax.random.PRNGKey(4), N))  # noqa: E731
  ours = playground.wrap(go1)
  assert set(ours.observed_fields) >= {"sensordata", "site_xpos", "site_xmat"}
  ours_batched = pg_wrapper.BraxDomainRandomizationVmapWrapper(ours, randomizer)
  their_batched = pg_wrapper.BraxDomainRandomizationVmapWrapper(go1, randomizer)
  acts = actions(ours, seed=3)
  states = run(ours, keys, acts, ours_batched)
  assert_equal_to_mjx(states, run(go1, keys, acts, their_batched))
  # xmat-like fields come in MJX's (n, 3, 3).
  assert states[-1].data.site_xmat.shape == (N, go1.mj_model.nsite, 3, 3)
  # The randomised fields reached our physics: the envs differ from an unrandomised run.
  plain = run(ours, keys, acts)
  assert max_diff(states[-1].data.qpos, plain[-1].data.qpos) > 1e-6


def test_default_settings_are_mujoco_c_bit_for_bit():
  """At the env's own solver settings (iterations=1 here), ours is mj_step exactly."""
  env = playground.load("CartpoleSwingup")
  assert env.mj_model.opt.iterations == 1
  keys = jax.random.split(jax.random.PRNGKey(5), N)
  acts = actions(env, seed=5)
  states = run(env, keys, acts)
  ours = np.stack([np.concatenate([s.data.qpos, s.data.qvel], -1) for s in states[1:]])
  assert np.array_equal(ours, mujoco_c(env, states[0].data.row, acts))


def test_two_envs_of_different_models_in_one_process():
  cartpole = playground.load("CartpoleBalance", num_threads=1)
  acrobot = playground.load("AcrobotSwingup", num_threads=1)
  keys = jax.random.split(jax.random.PRNGKey(6), N)
  step_c, step_a = jax.jit(jax.vmap(cartpole.step)), jax.jit(jax.vmap(acrobot.step))
  state_c, state_a = jax.vmap(cartpole.reset)(keys), jax.vmap(acrobot.reset)(keys)
  first_c, first_a = state_c.data.row, state_a.data.row
  acts_c, acts_a = actions(cartpole, 5), actions(acrobot, 5, seed=1)
  traces = {"c": [], "a": []}
  for t in range(5):  # interleaved, so each step sees the other env's calls in between
    state_c = step_c(state_c, acts_c[t])
    state_a = step_a(state_a, acts_a[t])
    traces["c"].append(np.concatenate([state_c.data.qpos, state_c.data.qvel], -1))
    traces["a"].append(np.concatenate([state_a.data.qpos, state_a.data.qvel], -1))
  assert np.array_equal(np.stack(traces["c"]), mujoco_c(cartpole, first_c, acts_c))
  assert np.array_equal(np.stack(traces["a"]), mujoco_c(acrobot, first_a, acts_a))
  # Nothing global changed: Playground's and MJX's own functions are what they were.
  assert mjx_env.step.__module__ == "mujoco_playground._src.mjx_env"
  assert mjx.forward.__module__.startswith("mujoco.mjx")
  assert not hasattr(type(playground.load_mjx("CartpoleBalance")), "observed_fields")


class ReadsContacts(mjx_env.MjxEnv):
  """A user's env that reads MJX's contacts: the adapter must refuse it by name."""

  def __init__(self, field="contact"):
    self._mj_model = mujoco.MjModel.from_xml_string(
      "<mujoco><worldbody><geom type='plane' size='1 1 .1'/><body pos='0 0 .1'><freejoint/>"
      "<geom size='.05'/></body></worldbody><actuator/></mujoco>")
    self._mjx_model = mjx.put_model(self._mj_model, impl="jax")
    self._field = field
    self._ctrl_dt = self._sim_dt = 0.002

  def reset(self, rng):
    data = mjx_env.make_data(self._mj_model, impl="jax")
    data = mjx.forward(self._mjx_model, data)
    return mjx_env.State(data, data.qpos, jnp.zeros(()), jnp.zeros(()), {}, {})

  def step(self, state, action):
    data = mjx_env.step(self._mjx_model, state.data, action)
    return state.replace(data=data, obs=data.qpos, reward=jnp.sum(getattr(data, self._field)))

  xml_path = "none"
  action_size = 0
  mj_model = property(lambda self: self._mj_model)
  mjx_model = property(lambda self: self._mjx_model)


@pytest.mark.parametrize("field", ["contact", "efc_force", "ncon"])
def test_a_field_we_cannot_give_raises_naming_it(field):
  before = calls()
  with pytest.raises(ValueError, match=f"data.{field}"):
    playground.wrap(ReadsContacts(field))
  assert calls() == before


def test_a_users_own_env_runs_when_it_reads_what_we_give():
  env = playground.wrap(ReadsContacts("qacc"))
  assert env.observed_fields == ("qacc",)
  state = env.step(env.reset(jax.random.PRNGKey(0)), jnp.zeros(0))
  data = mujoco.MjData(env.mj_model)
  mujoco.mj_step(env.mj_model, data)  # MJX reads qacc as mj_step leaves it: before its update
  assert float(state.reward) == float(np.sum(data.qacc))


@pytest.mark.parametrize("name, overrides, config, match", [
  ("CartpoleBalanc", None, None, "no env named 'CartpoleBalanc'.*CartpoleBalance"),
  ("CartpoleBalance", {"impl": "warp"}, None, "impl='warp' cannot be honoured"),
  ("CartpoleBalance", {"vision": True}, None, "vision"),
  ("CartpoleBalance", {"reward_config.nope": 1}, None, "'reward_config.nope'"),
  ("CartpoleBalance", {"ctrl_dt": 0.02, "no_such_key": 1}, None, "'no_such_key'"),
])
def test_bad_inputs_raise_before_any_custom_call(name, overrides, config, match):
  before = calls()
  with pytest.raises(ValueError, match=match):
    playground.load(name, config=config, config_overrides=overrides)
  assert calls() == before


def test_bad_envs_and_paths_raise():
  with pytest.raises(ValueError, match="MjxEnv"):
    playground.wrap(object())
  base = playground.load_mjx("CartpoleBalance")
  with pytest.raises(ValueError, match="unwrapped"):
    playground.wrap(pg_wrapper.Wrapper(base))
  with pytest.raises(ValueError, match="already runs on mjbatch_jax"):
    playground.wrap(playground.wrap(base))
  with pytest.raises(ValueError, match="menagerie must be a MuJoCo Menagerie folder"):
    playground.load("Go1JoystickFlatTerrain", menagerie="/no/such/folder")


def test_a_config_override_is_honoured():
  env = playground.load("CartpoleBalance", config_overrides={"ctrl_dt": 0.02, "sim_dt": 0.01})
  assert env.n_substeps == 2 and env.mjbatch_jax_sim.model.opt.timestep == 0.01


def test_brax_ppo_trains_a_playground_env_on_our_physics():
  """Brax's PPO through Playground's own training wrappers (auto-reset of our data included),
  tiny sizes; benchmarks/playground_ppo.py runs the real thing."""
  ppo = pytest.importorskip("brax.training.agents.ppo.train", reason=PLAYGROUND_MISSING)
  playground.brax_jax_compat()
  progress = []
  with jax.enable_x64(False):  # Brax trains in float32, as its networks do
    env = playground.load("CartpoleBalance", num_threads=1)
    ppo.train(
      environment=env, num_timesteps=80, episode_length=20, num_envs=8, batch_size=8,
      num_minibatches=1, unroll_length=5, num_updates_per_batch=1, num_evals=3, num_eval_envs=4,
      wrap_env_fn=pg_wrapper.wrap_for_brax_training, seed=0,
      progress_fn=lambda step, metrics: progress.append((step, metrics)),
    )
  assert [step for step, _ in progress] == [0, 40, 80]
  for _, metrics in progress:  # cart-pole balance: reward in [0, 1] per step
    assert 0 < float(metrics["eval/episode_reward"]) <= 20
