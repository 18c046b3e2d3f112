"""Property-based checks (Hypothesis) of the env layer's and PPO checkpoints' arguments: whatever
bytes, header or size is given, the answer is the value or a ValueError, never another error
and never a silently different result."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mjbatch_jax import envs
from mjbatch_jax.agents import ppo
from mjbatch_jax.envs.env import check_key


@pytest.fixture(scope="module")
def env():
  env = envs.CartPoleBalance(num_threads=1)
  yield env
  env.close()


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
  """A valid checkpoint's bytes and what it reads back as."""
  path = tmp_path_factory.mktemp("checkpoint") / "run.npz"
  params = ({"mean": np.arange(4, dtype=np.float32), "count": np.uint32(7)},
            {"params": {"kernel": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)}})
  curve = [ppo.Progress(1, 40, 1.0, 2.0, 0.1, 0.2, {"eval/reward": 0.5})]
  ppo._save(path, params, {"activation": "tanh"}, curve, 1e-3)
  return path.read_bytes(), ppo.read_checkpoint(path)


def read(tmp_path_factory, data: bytes):
  """read_checkpoint of a file holding data: its result, or None after a ValueError naming it."""
  path = tmp_path_factory.mktemp("read") / "run.npz"
  path.write_bytes(data)
  try:
    return ppo.read_checkpoint(path)
  except ValueError as e:
    assert str(path) in str(e)
    return None


def same_checkpoint(a, b) -> bool:
  arrays_a, meta_a = a
  arrays_b, meta_b = b
  return meta_a == meta_b and arrays_a.keys() == arrays_b.keys() and all(
    arrays_a[k].dtype == arrays_b[k].dtype and np.array_equal(arrays_a[k], arrays_b[k])
    for k in arrays_a)


PREFIXES = st.sampled_from([b"", b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY\x01\x00", b"\x80\x04"])
fixtures = settings(suppress_health_check=(HealthCheck.function_scoped_fixture,))


@fixtures
@given(prefix=PREFIXES, data=st.binary(max_size=512))
def test_random_bytes_are_refused(tmp_path_factory, prefix, data):
  assert read(tmp_path_factory, prefix + data) is None


@fixtures
@given(data=st.data())
def test_a_damaged_checkpoint_is_refused_or_reads_the_same(tmp_path_factory, valid, data):
  # Flipped bytes and cuts anywhere: a ValueError, or (a byte zip does not use) the same
  # checkpoint; never other weights.
  original, expected = valid
  damaged = bytearray(original)
  for _ in range(data.draw(st.integers(1, 3))):
    where = data.draw(st.integers(0, len(damaged) - 1))
    damaged[where] ^= data.draw(st.integers(1, 255))
  cut = data.draw(st.one_of(st.none(), st.integers(0, len(damaged))))
  got = read(tmp_path_factory, bytes(damaged[:cut]))
  assert got is None or same_checkpoint(got, expected)


SCALARS = (st.none() | st.booleans() | st.integers(-10, 10) | st.floats(allow_nan=True)
           | st.text(max_size=5))
JSON = st.recursive(
  SCALARS,
  lambda children: (st.lists(children, max_size=3)
                    | st.dictionaries(st.text(max_size=8), children, max_size=3)),
  max_leaves=10)
FIELDS = st.sampled_from(["format", "network", "iteration", "learning_rate", "curve"])


@fixtures
@given(header=JSON)
def test_random_headers_are_refused(tmp_path_factory, valid, header):
  arrays, _ = valid[1]
  path = tmp_path_factory.mktemp("header") / "run.npz"
  np.savez(path, **{f"param{k}": a for k, a in arrays.items()},
           __meta__=np.array(json.dumps(header)))
  with pytest.raises(ValueError, match="not a valid checkpoint"):
    ppo.read_checkpoint(path)


@fixtures
@given(field=FIELDS, value=JSON, curve_field=st.none() | st.sampled_from(
  ["iteration", "env_steps", "wall_s", "cpu_s", "eval_wall_s", "eval_cpu_s", "metrics"]))
def test_random_header_fields_are_refused_or_valid(tmp_path_factory, valid, field, value,
                                                    curve_field):
  arrays, meta = valid[1]
  if curve_field is None:
    header = {**meta, field: value}
  else:
    header = {**meta, "curve": [{**meta["curve"][0], curve_field: value}]}
  path = tmp_path_factory.mktemp("field") / "run.npz"
  np.savez(path, **{f"param{k}": a for k, a in arrays.items()},
           __meta__=np.array(json.dumps(header)))
  try:
    _, got = ppo.read_checkpoint(path)
  except ValueError as e:
    assert "not a valid checkpoint" in str(e)
    return
  # Accepted: then the value is one _save could have written.
  assert got == json.loads(json.dumps(header))
  lr = got["learning_rate"]
  assert lr is None or (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0)
  assert type(got["iteration"]) is int and got["iteration"] == got["curve"][-1]["iteration"] >= 1
  assert [ppo.Progress(**row) for row in got["curve"]]


SIZES = st.one_of(st.integers(-3, 2**40), st.floats(allow_nan=True), st.booleans(), st.none(),
                  st.text(max_size=3), st.integers(-3, 50).map(np.int64),
                  st.integers(-3, 50).map(np.int32), st.floats(0, 10).map(np.float32))


def is_count(value) -> bool:
  return bool(isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
              and value >= 1)


@fixtures
@given(episode_length=SIZES, action_repeat=SIZES, batch_size=SIZES)
def test_wrapper_sizes_are_ints_from_one(env, episode_length, action_repeat, batch_size):
  try:
    wrapped = envs.EpisodeWrapper(envs.VmapWrapper(env), episode_length, action_repeat)
  except ValueError as e:
    assert not (is_count(episode_length) and is_count(action_repeat))
    assert "episode_length" in str(e) or "action_repeat" in str(e)
  else:
    assert is_count(episode_length) and is_count(action_repeat)
    assert wrapped.episode_length == episode_length and type(wrapped.episode_length) is int
  try:
    batched = envs.VmapWrapper(env, batch_size=batch_size)
  except ValueError as e:
    assert not is_count(batch_size) and batch_size is not None and "batch_size" in str(e)
  else:
    assert batch_size is None or batched.batch_size == batch_size


@fixtures
@given(shape=st.lists(st.integers(0, 3), max_size=3).map(tuple),
       dtype=st.sampled_from([np.float32, np.float64, np.float16, np.int32, np.bool_,
                              np.uint8, np.complex64]))
def test_check_action_takes_exactly_the_shape_and_a_float(shape, dtype):
  action = np.zeros(shape, dtype)
  ok = shape == (2, 1) and dtype in (np.float32, np.float64)
  try:
    got = envs.check_action(action, (2, 1))
  except ValueError as e:
    assert not ok and "action" in str(e)
  else:
    assert ok and got.shape == (2, 1) and jnp.issubdtype(got.dtype, jnp.floating)


@fixtures
@given(batched=st.booleans(), n=st.integers(0, 3), kind=st.sampled_from(
  ["typed", "raw", "float", "int32", "python"]))
def test_keys_are_one_or_a_batch(batched, n, kind):
  typed = jax.random.split(jax.random.key(0), n) if batched else jax.random.key(0)
  rng = {"typed": typed, "raw": jax.random.key_data(typed),
         "float": jax.random.key_data(typed).astype(jnp.float32),
         "int32": jax.random.key_data(typed).astype(jnp.int32), "python": 0}[kind]
  try:
    check_key(rng, batched=batched)
  except ValueError as e:
    assert kind not in ("typed", "raw") and "rng must be" in str(e)
  else:
    assert kind in ("typed", "raw")
