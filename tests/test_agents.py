"""mjbatch_jax.agents.ppo: Brax's PPO on an mjbatch_jax env, evaluated, checkpointed, resumed.

Needs Brax (`pip install -e '.[rl]'`); runs in the `rl` leg of .ci/run.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mjbatch_jax import envs

pytest.importorskip("brax.training.agents.ppo.train",
                    reason="Brax is not installed: `pip install -e '.[rl]'` (brax 0.14)")

from mjbatch_jax.agents import ppo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# 8 envs x 5 steps per iteration, one minibatch.
SIZE = {"num_envs": 8, "unroll_length": 5, "batch_size": 8, "num_minibatches": 1,
        "episode_length": 20, "num_updates_per_batch": 1, "normalize_observations": True}
PER_ITERATION = 8 * 5
NETWORK = {"policy_hidden_layer_sizes": (16,), "value_hidden_layer_sizes": (16,),
           "activation": "tanh"}


@pytest.fixture(autouse=True)
def float32():
  # Brax trains in float32; other test files switch x64 on for the whole session when imported.
  with jax.enable_x64(False):
    yield


@pytest.fixture(scope="module")
def env():
  with jax.enable_x64(False):
    env = envs.CartPoleBalance(num_threads=1)
  yield env
  env.close()


def test_train_evaluates_checkpoints_resumes_and_stops(env, tmp_path):
  checkpoint = tmp_path / "run.npz"
  calls = []

  def evaluate(make_policy, params):
    calls.append(params)
    action, _ = make_policy(params, deterministic=True)(jnp.zeros(4), jax.random.PRNGKey(0))
    return {"action": float(action[0])}

  trained = ppo.train(env, 3 * PER_ITERATION, **SIZE, network=NETWORK, evaluate=evaluate,
                      checkpoint=checkpoint)
  assert [p.iteration for p in trained.curve] == [1, 2, 3] and not trained.stopped
  assert [p.env_steps for p in trained.curve] == [40, 80, 120] and len(calls) == 3
  walls = [p.wall_s for p in trained.curve]
  assert 0 < walls[0] < walls[1] < walls[2] and trained.curve[-1].cpu_s > 0
  assert trained.curve[-1].eval_wall_s > 0  # the evaluations, kept out of the training time
  assert {"eval/action", "training/policy_loss"} <= set(trained.metrics)
  # The checkpoint is the last networks: the same deterministic actions as the trained policy.
  policy, meta = ppo.load_policy(checkpoint, env)
  obs = jax.random.normal(jax.random.PRNGKey(1), (6, 4))
  mine = trained.make_policy(trained.params, deterministic=True)(obs, jax.random.PRNGKey(2))[0]
  np.testing.assert_array_equal(np.asarray(policy(obs, jax.random.PRNGKey(2))[0]),
                                np.asarray(mine))
  assert meta["iteration"] == 3 and meta["network"]["activation"] == "tanh"

  # network=None resumes with the checkpoint's networks.
  resumed = ppo.train(env, 5 * PER_ITERATION, **SIZE, checkpoint=checkpoint, resume=True)
  assert [p.iteration for p in resumed.curve] == [1, 2, 3, 4, 5]
  assert [p.row() for p in resumed.curve[:3]] == [p.row() for p in trained.curve]
  assert resumed.curve[3].wall_s > trained.curve[2].wall_s  # the clock goes on
  saved = json.loads(str(np.load(checkpoint)["__meta__"]))
  assert saved["iteration"] == 5
  before = jax.tree.leaves(trained.params[1])
  assert any(not np.array_equal(a, b) for a, b in zip(before, jax.tree.leaves(
    resumed.params[1]), strict=True))  # the resumed run trained on from there

  stopped = ppo.train(env, 5 * PER_ITERATION, **SIZE, network=NETWORK,
                      stop=lambda p: p.iteration >= 2)
  assert stopped.stopped and [p.iteration for p in stopped.curve] == [1, 2]


def test_refusals(env, tmp_path):
  bad = [
    ({"num_envs": 6}, "batch_size \\* num_minibatches = 8 must be a multiple of num_envs=6"),
    ({"unroll_length": 0}, "unroll_length must be an int >= 1"),
    ({"iterations_per_eval": 1.5}, "iterations_per_eval must be an int"),
    ({"wrap_env_fn": envs.wrap_for_brax_training}, "wrap_env_fn is train's to set"),
    ({"resume": True}, "resume needs the checkpoint"),
    ({"checkpoint": tmp_path / "run.ckpt"}, "checkpoint must be an .npz path"),
    ({"network": {"activation": "nope"}}, "network activation must be one of"),
    ({"network": {"mean_kernel_init_fn": "nope"}}, "mean_kernel_init_fn must be one of"),
    ({"checkpoint": tmp_path / "none.npz", "resume": True}, "no checkpoint at"),
    # Sizes, counts and hyperparameters: each refused before training, by name.
    ({"action_repeat": 0}, "action_repeat must be an int >= 1, got 0"),
    ({"episode_length": 0}, "episode_length must be an int >= 1"),
    ({"num_envs": 8.0}, "num_envs must be an int >= 1, got 8.0"),
    ({"batch_size": True}, "batch_size must be an int >= 1, got True"),
    ({"num_updates_per_batch": 0}, "num_updates_per_batch must be an int >= 1"),
    ({"num_resets_per_eval": -1}, "num_resets_per_eval must be an int >= 0"),
    ({"seed": 1.5}, "seed must be an int"),
    ({"learning_rate": float("nan")}, "learning_rate must be a finite number > 0.0, got nan"),
    ({"learning_rate": 0.0}, "learning_rate must be a finite number > 0.0, got 0.0"),
    ({"learning_rate": np.float32(np.inf)}, "learning_rate must be a finite number > 0.0"),
    ({"entropy_cost": -0.1}, "entropy_cost must be a finite number >= 0.0"),
    ({"discounting": 1.5}, "discounting must be a finite number in \\(0.0, 1.0\\]"),
    ({"discounting": 0}, "discounting must be"),
    ({"gae_lambda": float("nan")}, "gae_lambda must be"),
    ({"clipping_epsilon": 0.0}, "clipping_epsilon must be a finite number > 0.0"),
    ({"max_grad_norm": -1.0}, "max_grad_norm must be a finite number > 0.0"),
    ({"reward_scaling": "1"}, "reward_scaling must be a finite number > 0.0, got '1'"),
    ({"normalize_observations": 1}, "normalize_observations must be True or False"),
    ({"learning_rate_schedule": "COSINE"}, "learning_rate_schedule must be one of"),
    ({"learning_rate_schedule_min_lr": 0.1}, "must not exceed learning_rate_schedule_max_lr"),
    ({"use_distributional_critic": True}, "needs clipping_epsilon_value"),
    ({"learning_rat": 1e-3}, "learning_rat is not an argument of Brax's ppo.train; did you mean"
                              " learning_rate"),
    ({"randomization_period": 10}, "randomization_period needs randomization_fn"),
    ({"randomization_fn": 3}, "randomization_fn must be a function"),
    ({"evaluate": "yes"}, "evaluate must be a function or None"),
    ({"network": {"policy_hidden_layers": (16,)}}, "network has 'policy_hidden_layers'"),
    ({"network": ["tanh"]}, "network must be a dict"),
    ({"checkpoint": 3}, "checkpoint must be a path"),
    ({"resume": 1, "checkpoint": tmp_path / "none.npz"}, "resume must be True or False"),
    ({"task": ["feet"]}, "task must be a mapping of names to JSON values or None"),
    ({"task": {1: "feet"}}, "task must be a mapping of names to JSON values or None"),
    ({"task": {"friction": float("nan")}}, "task must hold JSON values"),
    ({"task": {"model": object()}}, "task must hold JSON values"),
  ]
  for change, message in bad:
    with pytest.raises(ValueError, match=message):
      ppo.train(env, PER_ITERATION, **{**SIZE, **change})
  with jax.enable_x64(True), pytest.raises(ValueError, match="float32"):
    ppo.train(env, PER_ITERATION, **SIZE)
  with pytest.raises(ValueError, match="environment must be an mjbatch_jax.envs.Env"):
    ppo.train("cartpole", PER_ITERATION, **SIZE)

  # A checkpoint of another env's networks (another observation size) is refused by name.
  other = tmp_path / "other.npz"
  ppo.train(env, PER_ITERATION, **SIZE, network=NETWORK, checkpoint=other)
  probe = envs.CartPoleBalance(num_threads=1)
  probe.observation_size  # noqa: B018  (4: the same env loads)
  ppo.load_policy(other, probe)

  class Wider(envs.CartPoleBalance):
    def _obs(self, data):
      return jnp.concatenate([data.qpos, data.qvel, data.qvel])

  wider = Wider(num_threads=1)
  with pytest.raises(ValueError, match="another observation or action size"):
    ppo.load_policy(other, wider)
  with pytest.raises(ValueError, match="holds networks"):
    ppo.train(env, 2 * PER_ITERATION, **SIZE, network={"activation": "elu"}, checkpoint=other,
              resume=True)
  for e in (probe, wider):
    e.close()


def test_envs_must_split_over_the_devices():
  # Two CPU devices in a child process: Brax gives each as many envs.
  code = ("from mjbatch_jax import envs\nfrom mjbatch_jax.agents import ppo\n"
          "try:\n  ppo.train(envs.CartPoleBalance(num_threads=1), 15, num_envs=3, "
          "unroll_length=5, batch_size=3, num_minibatches=1, episode_length=10)\n"
          "except ValueError as e:\n  print(e)\n")
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                        cwd=ROOT, timeout=300)
  assert "num_envs=3 must be a multiple of the 2 devices" in done.stdout, done.stderr[-2000:]


def test_checkpoints_checked_before_training(env, tmp_path):
  # Each refusal comes before the first iteration: evaluate, called after each, never is.
  calls = []

  def evaluate(make_policy, params):
    calls.append(1)
    return {}

  unwritable = Path(__file__) / "run.npz"  # a file where its folder would be
  with pytest.raises(ValueError, match=f"checkpoint {unwritable} cannot be written"):
    ppo.train(env, PER_ITERATION, **SIZE, network=NETWORK, evaluate=evaluate,
              checkpoint=unwritable)
  made = tmp_path / "new" / "folder" / "run.npz"  # a missing folder is made, as each save does
  # Sizes, seed and hyperparameters as numpy scalars train as Python's do.
  numpy_int: Any = np.int64
  sizes: dict[str, Any] = {
    k: numpy_int(value) if isinstance(value, int) and not isinstance(value, bool) else value
    for k, value in SIZE.items()}
  trained = ppo.train(env, numpy_int(PER_ITERATION), **sizes, network=NETWORK,
                      evaluate=evaluate, checkpoint=made, learning_rate=np.float32(3e-4),
                      seed=numpy_int(1))
  assert made.is_file() and len(calls) == 1 and trained.curve[-1].iteration == 1
  assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(trained.params))
  assert sorted(p.name for p in made.parent.iterdir()) == ["run.npz"]  # the probe is gone

  # A finished run has nothing left to train: not a duplicate row of the curve.
  with pytest.raises(ValueError, match="has trained 1 iterations.*nothing is left to train"):
    ppo.train(env, PER_ITERATION, **SIZE, network=NETWORK, checkpoint=made, resume=True)

  with np.load(made) as saved:
    arrays = {k: saved[k] for k in saved.files}
  meta = json.loads(str(arrays.pop("__meta__")))
  kernel = next(k for k in arrays if k.endswith("['kernel']") and k.startswith("param[1]"))

  def variant(name, change=None, **header):
    path = tmp_path / f"{name}.npz"
    members = {**arrays, **(change or {}), "__meta__": np.array(json.dumps({**meta, **header}))}
    np.savez(path, **members)
    return path

  cases = [
    (variant("negative", iteration=-1), "iteration must be an int >= 0, got -1"),
    (variant("string", iteration="1"), "iteration must be an int >= 0, got '1'"),
    (variant("nan", {kernel: np.full_like(arrays[kernel], np.nan)}), "NaN or inf in"),
    (variant("dtype", {kernel: arrays[kernel].astype(np.int32)}),
     "has dtype int32, this env's networks float32"),
    (variant("count", {"param[0].count.hi": np.zeros((), np.int32)}),
     "count.hi has dtype int32, this env's networks uint32"),
    (variant("shape", {kernel: arrays[kernel][:1]}), "another observation or action size"),
    (variant("names", {"param[9]": arrays[kernel]}), "other networks than this env's.*param\\[9\\]|"
     "unexpected \\['\\[9\\]'\\]"),
    (variant("network", network={**meta["network"], "activation": "nope"}),
     "network activation must be one of"),
  ]
  for path, message in cases:
    with pytest.raises(ValueError, match=message):
      ppo.train(env, 2 * PER_ITERATION, **SIZE, evaluate=evaluate, checkpoint=path, resume=True)
    with pytest.raises(ValueError, match=message):
      ppo.load_policy(path, env)
  # A checkpoint of another task (train's task=): resume names the fields that differ.
  tasked = variant("task", task={"collisions": "feet", "terrain": "flat"})
  with pytest.raises(ValueError, match="trained on another task: collisions: 'feet', not "
                     "'full'; terrain: 'flat', not None"):
    ppo.train(env, 2 * PER_ITERATION, **SIZE, evaluate=evaluate, checkpoint=tasked, resume=True,
              task={"collisions": "full"})
  with pytest.raises(ValueError, match="task must hold JSON values"):
    ppo.train(env, 2 * PER_ITERATION, **SIZE, checkpoint=tasked, resume=True,
              task={"friction": float("nan")})
  assert len(calls) == 1

