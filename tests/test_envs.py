"""The RL env layer: MJX-like data views, one custom call per batched physics call, exact
auto-resets, domain randomisation, bad actions, and Brax's PPO on the cart-pole (with Brax)."""

import subprocess
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import envs  # noqa: E402
from mjbatch_jax._extension import ext  # noqa: E402
from tests.models import CARTPOLE_XML  # noqa: E402

N = 6
BRAX_MISSING = "Brax is not installed: `pip install -e '.[rl]'` (brax 0.14) runs Brax's PPO here"


def calls() -> int:
  """Custom calls run so far in this process, all handlers together."""
  return sum(ext.handler_calls().values())


def same(a, b) -> bool:
  """Whether two pytrees have the same structure and bit-identical leaves."""
  if jax.tree.structure(a) != jax.tree.structure(b):
    return False
  return all(
    np.array_equal(np.asarray(x), np.asarray(y), equal_nan=np.asarray(x).dtype.kind == "f")
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
  )


def row_of(tree, i: int):
  return jax.tree.map(lambda x: x[i], tree)


FLOOR = 0  # geom ids of the cart-pole env: the floor plane, the cart, the pole
POLE = 2  # body ids: world, cart, pole


def randomize(params, rng):
  """Floor friction in [0.4, 1.0] and the pole's mass within 20%, for one env."""
  friction_key, mass_key = jax.random.split(rng)
  dtype = params["geom_friction"].dtype
  friction = jax.random.uniform(friction_key, (), dtype, minval=0.4, maxval=1.0)
  scale = jax.random.uniform(mass_key, (), dtype, minval=0.8, maxval=1.2)
  return params.replace({
    "geom_friction": params["geom_friction"].at[FLOOR, 0].set(friction),
    "body_mass": params["body_mass"].at[POLE].multiply(scale),
  })


@pytest.fixture(scope="module")
def cartpole_env():
  env = envs.CartPoleBalance(num_threads=1, param_fields=("geom_friction", "body_mass"))
  yield env
  env.close()


class Probe(envs.Env):
  """Holds the tests' cart-pole (mocap body, sites, sensors) still: for the data views."""

  observe = ("sensordata", "xpos", "site_xpos")

  def reset(self, rng):
    qpos = jax.random.uniform(rng, (self.mj_model.nq,), minval=-0.1, maxval=0.1)
    data = self.make_data(qpos=qpos)
    zero = jnp.zeros((), data.row.dtype)
    return envs.State(data, data.qpos, zero, zero)

  def step(self, state, action):
    data = self.pipeline_step(state.data, action)
    return state.replace(data=data, obs=data.qpos)


def test_data_views_are_row_slices_and_replace_round_trips():
  model = mujoco.MjModel.from_xml_string(CARTPOLE_XML)
  env = Probe(model, n_substeps=3, num_threads=1)
  layout = env.sim.layout
  state = env.reset(jax.random.PRNGKey(3))
  state = env.step(state, jnp.array([0.3, -0.2]))
  data, row = state.data, np.asarray(state.data.row)
  for name in layout.names():
    part = row[getattr(layout, name)]
    view = np.asarray(getattr(data, name))
    if name == "time":
      assert view.shape == () and view == part[0] == pytest.approx(3 * model.opt.timestep)
    else:
      np.testing.assert_array_equal(view.ravel(), part, err_msg=name)
  assert data.xfrc_applied.shape == (model.nbody, 6)
  assert data.mocap_pos.shape == (1, 3) and data.mocap_quat.shape == (1, 4)

  # The stored fields are mj_forward's at the new row, as plain MuJoCo gives them.
  mj = mujoco.MjData(model)
  mujoco.mj_setState(model, mj, row, mujoco.mjtState.mjSTATE_INTEGRATION)
  mujoco.mj_forward(model, mj)
  np.testing.assert_array_equal(np.asarray(data.xpos), mj.xpos)
  np.testing.assert_array_equal(np.asarray(data.site_xpos), mj.site_xpos)
  np.testing.assert_array_equal(np.asarray(data.sensordata), mj.sensordata)

  qpos = jnp.array([0.5, -0.25, 0.125])
  mocap = jnp.array([[1.0, 2.0, 3.0]])
  new = data.replace(qpos=qpos, mocap_pos=mocap, time=7.0)
  np.testing.assert_array_equal(new.qpos, qpos)
  np.testing.assert_array_equal(new.mocap_pos, mocap)
  assert float(new.time) == 7.0
  np.testing.assert_array_equal(new.row[layout.qvel], row[layout.qvel])  # the rest untouched
  np.testing.assert_array_equal(new.row[layout.ctrl], row[layout.ctrl])
  assert same(new.replace(qpos=data.qpos, mocap_pos=data.mocap_pos, time=data.time), data)
  with pytest.raises(ValueError, match="no field 'qpos_typo'"):
    data.replace(qpos_typo=qpos)
  with pytest.raises(AttributeError, match="observe"):
    _ = data.cvel
  # forward recomputes the fields after a replace.
  moved = env.forward(new)
  mujoco.mj_setState(model, mj, np.asarray(new.row), mujoco.mjtState.mjSTATE_INTEGRATION)
  mujoco.mj_forward(model, mj)
  np.testing.assert_array_equal(np.asarray(moved.xpos), mj.xpos)

  # Batched data (vmapped reset) reads the same way, with the batch axis in front.
  batch = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 4)).data
  assert batch.qpos.shape == (4, 3) and batch.time.shape == (4,)
  assert batch.xpos.shape == (4, model.nbody, 3)
  np.testing.assert_array_equal(batch.qvel, np.asarray(batch.row)[:, layout.qvel])
  env.close()


def test_single_env_params_have_the_fields_own_shapes(cartpole_env):
  params = cartpole_env.default_params
  assert params["geom_friction"].shape == cartpole_env.mj_model.geom_friction.shape
  # An unbatched row steps with them directly: no leading 1 anywhere.
  state = cartpole_env.reset(jax.random.PRNGKey(0))
  assert state.data.row.shape == (cartpole_env.sim.nstate,)
  state = cartpole_env.step(state, jnp.array([0.5]))
  assert state.obs.shape == (4,) and state.reward.shape == ()
  assert cartpole_env.observation_size == 4 and cartpole_env.action_size == 1
  assert cartpole_env.dt == pytest.approx(2 * 0.01)


def test_vmapped_step_is_one_custom_call(cartpole_env):
  env = envs.VmapWrapper(cartpole_env)
  keys = jax.random.split(jax.random.PRNGKey(1), N)
  reset = jax.jit(lambda keys: env.reset(keys))
  step = jax.jit(lambda state, action: env.step(state, action))
  before = calls()
  state = jax.block_until_ready(reset(keys))
  assert calls() - before == 1  # mj_forward for the first observed fields
  action = jnp.linspace(-1, 1, N)[:, None]
  before = calls()
  new = jax.block_until_ready(step(state, action))
  assert calls() - before == 1  # the step and its observed fields, in one call
  # The same as each env stepped alone.
  alone = cartpole_env.step(row_of(state, 2), action[2])
  assert same(row_of(new, 2), alone)


class InStep(envs.CartPoleBalance):
  observe_at = "step"


def test_fields_as_mj_step_leaves_them():
  env = InStep(num_threads=1)
  state = env.reset(jax.random.PRNGKey(9))
  before = calls()
  new = env.step(state, jnp.array([0.7]))
  assert calls() - before == 1
  model = env.mj_model
  mj = mujoco.MjData(model)
  mujoco.mj_setState(model, mj, np.asarray(state.data.row), mujoco.mjtState.mjSTATE_INTEGRATION)
  mj.ctrl[:] = 0.7
  for _ in range(env.n_substeps):
    mujoco.mj_step(model, mj)
  np.testing.assert_array_equal(np.asarray(new.data.site_xpos), mj.site_xpos)  # MJX's values
  row = np.empty(env.sim.nstate)
  mujoco.mj_getState(model, mj, row, mujoco.mjtState.mjSTATE_INTEGRATION)
  np.testing.assert_array_equal(np.asarray(new.data.row), row)
  env.close()


def test_wrapped_step_is_one_call_per_physics_call(cartpole_env):
  env = envs.wrap_for_brax_training(cartpole_env, episode_length=10, action_repeat=3,
                                    randomization_fn=randomize, randomization_period=2)
  state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(2), N))
  step = jax.jit(env.step)
  jax.block_until_ready(step(state, jnp.zeros((N, 1))))  # compile
  before = calls()
  jax.block_until_ready(step(state, jnp.zeros((N, 1))))
  assert calls() - before == 3  # one per repeated action, for all N envs


def test_auto_reset_restores_exactly_the_first_state(cartpole_env):
  env = envs.wrap_for_brax_training(cartpole_env, episode_length=1000,
                                    randomization_fn=randomize, randomization_period=1)
  first = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(4), N))
  step = jax.jit(env.step)
  state = first
  for _ in range(3):
    state = step(state, jnp.full((N, 1), 0.2))
  assert not np.any(state.done)
  # NaN actions end envs 1 and 4 (MuJoCo's bad-ctrl warning); the others step on.
  ended = np.array([False, True, False, False, True, False])
  action = jnp.where(ended[:, None], jnp.nan, 0.2)
  new = step(state, action)
  np.testing.assert_array_equal(np.asarray(new.done, bool), ended)
  reference = jax.jit(env.env.step)(state, action)  # the same step without the auto-reset
  for i in range(N):
    if ended[i]:
      assert same(row_of(new.data, i), row_of(first.data, i))  # rows, params, fields
      assert same(row_of(new.obs, i), row_of(first.obs, i))
    else:
      assert same(row_of(new.data, i), row_of(reference.data, i))
      assert same(row_of(new.obs, i), row_of(reference.obs, i))
      # Redrawn every step (period 1): the check above does tell params apart.
      assert not same(row_of(new.data.params, i), row_of(first.data.params, i))
  # The next step counts the reset envs' steps afresh (Brax's convention).
  again = step(new, jnp.full((N, 1), 0.2))
  np.testing.assert_array_equal(np.asarray(again.info["steps"]), np.where(ended, 1, 5))
  assert np.all(np.isfinite(np.asarray(again.obs)))


def test_randomization_per_env_seeded_and_periodic(cartpole_env):
  env = envs.wrap_for_brax_training(cartpole_env, episode_length=1000,
                                    randomization_fn=randomize, randomization_period=2)
  keys = jax.random.split(jax.random.PRNGKey(5), N)
  state = jax.jit(env.reset)(keys)
  friction = np.asarray(state.data.params["geom_friction"])
  assert friction.shape == (N, *cartpole_env.mj_model.geom_friction.shape)
  floor = friction[:, FLOOR, 0]
  assert np.all((floor >= 0.4) & (floor <= 1.0)) and len(set(floor.tolist())) == N
  np.testing.assert_array_equal(friction[:, 1:], np.broadcast_to(
    cartpole_env.mj_model.geom_friction[1:], (N, 2, 3)))  # other geoms keep the model's
  assert same(jax.jit(env.reset)(keys).data.params, state.data.params)  # seeded
  step = jax.jit(env.step)
  one = step(state, jnp.zeros((N, 1)))
  two = step(one, jnp.zeros((N, 1)))
  assert same(one.data.params, state.data.params)
  changed = np.asarray(two.data.params["geom_friction"])[:, FLOOR, 0] != floor
  assert np.all(changed)


def test_episode_wrapper_truncates_and_counts(cartpole_env):
  env = envs.wrap_for_brax_training(cartpole_env, episode_length=4, action_repeat=2)
  state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(6), 3))
  step = jax.jit(env.step)
  state = step(state, jnp.zeros((3, 1)))
  np.testing.assert_array_equal(state.info["steps"], 2)
  assert not np.any(state.done)
  state = step(state, jnp.zeros((3, 1)))
  np.testing.assert_array_equal(state.done, 1)
  np.testing.assert_array_equal(state.info["truncation"], 1)
  np.testing.assert_array_equal(state.info["episode_metrics"]["length"], 4)
  state = step(state, jnp.zeros((3, 1)))
  np.testing.assert_array_equal(state.info["steps"], 2)  # a new episode
  np.testing.assert_array_equal(state.info["episode_metrics"]["length"], 2)


def test_bad_actions_raise_before_any_call(cartpole_env):
  env = envs.wrap_for_brax_training(cartpole_env, episode_length=10)
  state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(7), N))
  single = cartpole_env.reset(jax.random.PRNGKey(7))
  bad = [
    (env.step, state, jnp.zeros((N, 2)), "shape"),
    (env.step, state, jnp.zeros((N + 1, 1)), "shape"),
    (env.step, state, jnp.zeros(1), "shape"),
    (env.step, state, jnp.zeros((N, 1), jnp.int32), "float32 or float64"),
    (env.step, state, jnp.zeros((N, 1), jnp.float16), "float32 or float64"),
    (cartpole_env.step, single, jnp.zeros(2), "shape"),
    (cartpole_env.step, single, jnp.zeros((1, 1)), "shape"),
    (cartpole_env.step, single, jnp.array([True]), "float32 or float64"),
  ]
  before = calls()
  for step, s, action, message in bad:
    with pytest.raises(ValueError, match=message):
      step(s, action)
    with pytest.raises(ValueError, match=message):
      jax.jit(step)(s, action)
  with pytest.raises(ValueError, match="float"):
    cartpole_env.step(single, "push")
  assert calls() == before


def test_nan_action_warns_and_ends_only_that_env(cartpole_env):
  single = cartpole_env.reset(jax.random.PRNGKey(8))
  after = cartpole_env.step(single, jnp.array([jnp.nan]))  # no exception: a MuJoCo warning
  bad_ctrl = int(mujoco.mjtWarning.mjWARN_BADCTRL)
  assert int(after.data.warnings[bad_ctrl]) > 0
  assert bool(cartpole_env.bad(after.data))
  assert np.all(np.isfinite(np.asarray(after.obs))) and np.isfinite(float(after.reward))
  flagged = envs.WarningWrapper(cartpole_env).step(single, jnp.array([jnp.nan]))
  assert float(flagged.done) == 1.0
  assert float(envs.WarningWrapper(cartpole_env).step(single, jnp.array([0.1])).done) == 0.0
  # The same counts as mjbatch_jax.step(..., return_warnings=True) reports.
  _, counts = mjbatch_jax.step(single.data.row, jnp.array([jnp.nan]), single.data.params,
                               nstep=cartpole_env.n_substeps, return_warnings=True)
  assert int(counts[bad_ctrl]) > 0


def test_brax_is_not_imported_by_the_package():
  code = "import sys, mjbatch_jax.envs; print('brax' in sys.modules, 'flax' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.split() == ["False", "False"]


def test_brax_compat_puts_back_device_put_replicated(monkeypatch):
  # As JAX 0.9 had it: the value stacked once per device, shard i on device i.
  monkeypatch.delattr(jax, "device_put_replicated", raising=False)
  envs.install_brax_compat()
  devices = jax.local_devices()
  tree = {"a": jnp.arange(3.0), "b": 7}
  out = jax.device_put_replicated(tree, devices)  # pyright: ignore[reportAttributeAccessIssue]
  assert out["a"].shape == (len(devices), 3) and out["b"].shape == (len(devices),)
  for shard, device in zip(out["a"].addressable_shards, devices, strict=True):
    assert shard.device == device
    np.testing.assert_array_equal(np.asarray(shard.data), [[0.0, 1.0, 2.0]])
  with pytest.raises(ValueError, match="at least one device"):
    jax.device_put_replicated(tree, [])  # pyright: ignore[reportAttributeAccessIssue]
  # A JAX that has its own keeps it.
  own = object()
  monkeypatch.setattr(jax, "device_put_replicated", own, raising=False)
  envs.install_brax_compat()
  assert jax.device_put_replicated is own  # pyright: ignore[reportAttributeAccessIssue]


def test_brax_ppo_trains_on_the_cartpole():
  # Brax's own ppo.train, given wrap_for_brax_training, as a user calls it: the wrapper supplies
  # what Brax 0.14.2 needs of JAX (install_brax_compat).
  ppo = pytest.importorskip("brax.training.agents.ppo.train", reason=BRAX_MISSING)

  progress = []
  # Brax trains in float32, as its networks do.
  with jax.enable_x64(False):
    env = envs.CartPoleBalance(num_threads=1, param_fields=("geom_friction", "body_mass"))
    ppo.train(
      environment=env,
      num_timesteps=80,
      episode_length=20,
      num_envs=8,
      batch_size=8,
      num_minibatches=1,
      unroll_length=5,
      num_updates_per_batch=1,
      num_evals=3,  # the initial eval and two iterations
      num_eval_envs=4,
      wrap_env_fn=envs.wrap_for_brax_training,
      randomization_fn=randomize,
      progress_fn=lambda step, metrics: progress.append((step, metrics)),
      seed=0,
    )
    env.close()
  assert [step for step, _ in progress] == [0, 40, 80]
  for _, metrics in progress:
    assert np.isfinite(metrics["eval/episode_reward"])
    assert 0 < metrics["eval/episode_reward"] <= 20


def test_example_runs():
  example = Path(__file__).parents[1] / "examples" / "envs_cartpole.py"
  done = subprocess.run([sys.executable, str(example), "--num-envs", "64", "--steps", "50"],
                        capture_output=True, text=True, timeout=300, cwd=example.parents[1])
  assert done.returncode == 0, done.stderr
  assert "env-steps/s" in done.stdout
