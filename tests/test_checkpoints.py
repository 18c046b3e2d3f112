"""PPO checkpoints read back and checked as a whole: every defect of the file a ValueError that
names it and says what is wrong. Reading needs no Brax; the checks against an env's networks
(and training's) are in tests/test_agents.py."""

import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mjbatch_jax.agents import ppo

RESULTS = Path(__file__).resolve().parents[1] / "examples" / "results"


def rows(iterations: int = 2) -> list[ppo.Progress]:
  return [ppo.Progress(i, 40 * i, 1.0 * i, 2.0 * i, 0.1, 0.2, {"eval/reward": 0.5 * i})
          for i in range(1, iterations + 1)]


def params() -> tuple:
  """A checkpoint's params as Brax's are laid out: normaliser, policy, value."""
  normaliser = {"mean": np.zeros(4, np.float32), "count": np.zeros((), np.uint32)}
  policy = {"params": {"hidden_0": {"kernel": np.ones((4, 8), np.float32),
                                    "bias": np.zeros(8, np.float32)}}}
  value = {"params": {"hidden_0": {"bias": np.zeros(1, np.float32)}}}
  return normaliser, policy, value


@pytest.fixture
def valid(tmp_path) -> Path:
  path = tmp_path / "run.npz"
  ppo._save(path, params(), {"activation": "tanh"}, rows(), 3e-4)
  return path


def contents(path: Path) -> tuple[dict[str, np.ndarray], dict]:
  with np.load(path) as saved:
    arrays = {k: saved[k] for k in saved.files}
  return arrays, json.loads(str(arrays.pop("__meta__")))


def rewrite(path: Path, arrays: dict[str, Any], meta) -> Path:
  members: dict[str, Any] = {**arrays, "__meta__": np.array(json.dumps(meta))}
  np.savez(path, **members)
  return path


def refused(path: Path, message: str) -> None:
  with pytest.raises(ValueError, match=message) as caught:
    ppo.read_checkpoint(path)
  assert str(path) in str(caught.value)


def test_a_saved_checkpoint_reads_back(valid):
  arrays, meta = ppo.read_checkpoint(valid)
  assert meta["iteration"] == 2 and meta["network"] == {"activation": "tanh"}
  assert [ppo.Progress(**row) for row in meta["curve"]] == rows()
  assert arrays["[1]['params']['hidden_0']['kernel']"].shape == (4, 8)
  assert arrays["[0]['count']"].dtype == np.uint32
  # str paths too, and the temporary file of the save is gone.
  assert ppo.read_checkpoint(str(valid))[1] == meta
  assert sorted(p.name for p in valid.parent.iterdir()) == ["run.npz"]


def test_the_task_reads_back_and_defaults_to_none(tmp_path, valid):
  assert ppo.read_checkpoint(valid)[1]["task"] == {}  # saved without a task
  tasked = tmp_path / "tasked.npz"
  ppo._save(tasked, params(), {}, rows(), None, {"collisions": "feet", "sizes": [1, 2]})
  assert ppo.read_checkpoint(tasked)[1]["task"] == {"collisions": "feet", "sizes": [1, 2]}
  arrays, meta = contents(valid)
  del meta["task"]  # a checkpoint from before the field
  assert ppo.read_checkpoint(rewrite(tmp_path / "old.npz", arrays, meta))[1]["task"] == {}
  assert ppo.task_differences({"collisions": "feet"}, {"collisions": "feet"}) == ""
  assert ppo.task_differences({}, {"collisions": "feet"}) == "collisions: None, not 'feet'"


def test_the_examples_checkpoint_still_reads():
  path = RESULTS / "go1_joystick.npz"
  if not path.is_file():
    pytest.skip(f"no checkpoint at {path}")
  arrays, meta = ppo.read_checkpoint(path)
  assert meta["format"] == ppo.CHECKPOINT_FORMAT and meta["iteration"] == 600
  assert len(meta["curve"]) == 60 and meta["curve"][-1]["iteration"] == 600
  assert arrays["[0].mean"].shape == (50,)


@pytest.mark.parametrize(("data", "message"), [
  (b"", "not an .npz archive \\(a zip file\\): an empty file"),
  (b'{"kind": "json"}', "not an .npz archive \\(a zip file\\): it starts with b'{\"ki'"),
  (b"\x80\x04garbage bytes", "not an .npz archive"),
  (b"PK\x03\x04" + bytes(60), "not an .npz archive \\(BadZipFile"),
  (b"\x93NUMPY\x01", "not an .npz archive"),
])
def test_files_that_are_not_archives(tmp_path, data, message):
  path = tmp_path / "bad.npz"
  path.write_bytes(data)
  refused(path, message)


def test_truncated_and_corrupted_archives(tmp_path, valid):
  data = valid.read_bytes()
  for cut in (10, len(data) // 2, len(data) - 5):
    path = tmp_path / f"cut{cut}.npz"
    path.write_bytes(data[:cut])
    refused(path, "not a valid checkpoint")
  # A flipped byte in the kernel's ones, which NumPy alone would read as another weight.
  corrupt = bytearray(data)
  corrupt[data.index(np.ones(8, np.float32).tobytes()) + 1] ^= 0x01
  path = tmp_path / "corrupt.npz"
  path.write_bytes(bytes(corrupt))
  refused(path, "corrupted .npz archive: .*kernel.* fails its CRC check")


def test_archives_of_something_else(tmp_path):
  np.save(tmp_path / "array.npy", np.zeros(3))
  (tmp_path / "array.npy").rename(tmp_path / "array.npz")
  refused(tmp_path / "array.npz", "a single .npy array")
  np.savez(tmp_path / "plain.npz", weights=np.zeros(3))
  refused(tmp_path / "plain.npz", "no __meta__ header")
  with zipfile.ZipFile(tmp_path / "text.npz", "w") as archive:
    archive.writestr("__meta__.npy", "not an npy member")
  refused(tmp_path / "text.npz", "its member '__meta__' is not a .npy array")
  np.savez(tmp_path / "numbers.npz", __meta__=np.arange(3))
  refused(tmp_path / "numbers.npz", "__meta__ header must be a JSON string")
  np.savez(tmp_path / "text.npz", __meta__=np.array("{not json"))
  refused(tmp_path / "text.npz", "header is not JSON")
  np.savez(tmp_path / "deep.npz", __meta__=np.array("[" * 100_000))
  refused(tmp_path / "deep.npz", "header is not JSON")


def test_no_file(tmp_path):
  with pytest.raises(ValueError, match="no checkpoint at"):
    ppo.read_checkpoint(tmp_path / "none.npz")
  with pytest.raises(ValueError, match="no checkpoint at"):
    ppo.read_checkpoint(tmp_path)  # a folder
  for path in (None, 3, b"run.npz", ""):
    with pytest.raises(ValueError, match="path must be a path"):
      ppo.read_checkpoint(path)  # pyright: ignore[reportArgumentType]


def changed(meta: dict, **changes) -> dict:
  out = {**meta, **changes}
  return {k: value for k, value in out.items() if value is not DROP}


DROP = object()


@pytest.mark.parametrize(("header", "message"), [
  ([1, 2], "must be a JSON object, got \\[1, 2\\]"),
  ("a string", "must be a JSON object"),
  (None, "must be a JSON object"),
  (7, "must be a JSON object"),
])
def test_headers_of_the_wrong_type(tmp_path, valid, header, message):
  arrays, _ = contents(valid)
  refused(rewrite(tmp_path / "bad.npz", arrays, header), message)


@pytest.mark.parametrize(("changes", "message"), [
  ({"format": DROP}, "format None"),
  ({"format": "mjbatch_jax.agents.ppo/0"}, "format 'mjbatch_jax.agents.ppo/0'"),
  ({"format": 1}, "format 1"),
  ({"iteration": DROP}, "no iteration"),
  ({"iteration": -5}, "iteration must be an int >= 0, got -5"),
  ({"iteration": "2"}, "iteration must be an int >= 0, got '2'"),
  ({"iteration": 2.0}, "iteration must be an int >= 0, got 2.0"),
  ({"iteration": True}, "iteration must be an int >= 0, got True"),
  ({"iteration": None}, "iteration must be an int >= 0"),
  ({"iteration": 0}, "iteration must be >= 1"),
  ({"iteration": 3}, "iteration 3 is not its curve's last \\(2\\)"),
  ({"network": DROP}, "network must be a JSON object"),
  ({"network": ["tanh"]}, "network must be a JSON object"),
  ({"task": ["feet"]}, "task must be a JSON object"),
  ({"learning_rate": "3e-4"}, "learning_rate must be a finite number > 0 or null"),
  ({"learning_rate": float("nan")}, "learning_rate must be a finite number > 0 or null"),
  ({"learning_rate": -1.0}, "learning_rate must be"),
  ({"learning_rate": 0}, "learning_rate must be"),
  ({"curve": DROP}, "curve must be a non-empty list"),
  ({"curve": []}, "curve must be a non-empty list"),
  ({"curve": {"iteration": 2}}, "curve must be a non-empty list"),
])
def test_header_fields_of_the_wrong_type_or_range(tmp_path, valid, changes, message):
  arrays, meta = contents(valid)
  refused(rewrite(tmp_path / "bad.npz", arrays, changed(meta, **changes)), message)


@pytest.mark.parametrize(("update", "message"), [
  ({"iteration": 1}, "curve\\[1\\] iteration 1 does not follow 1"),
  ({"iteration": -2}, "curve\\[1\\] iteration must be an int >= 0"),
  ({"env_steps": 1.5}, "curve\\[1\\] env_steps must be an int >= 0"),
  ({"wall_s": float("inf")}, "curve\\[1\\] wall_s must be a finite number >= 0"),
  ({"cpu_s": -1.0}, "curve\\[1\\] cpu_s must be a finite number >= 0"),
  ({"eval_wall_s": "1"}, "curve\\[1\\] eval_wall_s must be"),
  ({"metrics": {"reward": "high"}}, "curve\\[1\\] metrics must map names to numbers"),
  ({"metrics": [1.0]}, "curve\\[1\\] metrics must map names to numbers"),
  ({"extra": 1}, "curve\\[1\\] must be a row with keys"),
])
def test_curve_rows_of_the_wrong_type_or_range(tmp_path, valid, update, message):
  arrays, meta = contents(valid)
  curve = [meta["curve"][0], {**meta["curve"][1], **update}]
  refused(rewrite(tmp_path / "bad.npz", arrays, {**meta, "curve": curve}), message)


def test_curve_rows_that_are_not_rows(tmp_path, valid):
  arrays, meta = contents(valid)
  for row in ("row", None, [2], {"iteration": 2}):
    curve = [meta["curve"][0], row]
    refused(rewrite(tmp_path / "bad.npz", arrays, {**meta, "curve": curve}),
            "curve\\[1\\] must be a row with keys")


def test_arrays_of_the_wrong_name_dtype_or_values(tmp_path, valid):
  arrays, meta = contents(valid)
  kernel = "param[1]['params']['hidden_0']['kernel']"
  cases = [
    ({"optimizer_state": np.zeros(3, np.float32)}, "an array 'optimizer_state'"),
    ({kernel: np.ones((4, 8), np.complex64)}, f"{re.escape(kernel)} has dtype complex64"),
    ({kernel: np.ones((4, 8), bool)}, "has dtype bool"),
    ({kernel: np.array(["a", "b"])}, "has dtype <U1"),
    ({kernel: np.ones((4, 8), np.float16)}, "has dtype float16"),
    ({kernel: np.full((4, 8), np.nan, np.float32)}, "NaN or inf in .*kernel.*nan at index"),
    ({kernel: np.full((4, 8), np.inf, np.float32)}, "NaN or inf in .*kernel.*inf at index"),
  ]
  for change, message in cases:
    refused(rewrite(tmp_path / "bad.npz", {**arrays, **change}, meta), message)
  refused(rewrite(tmp_path / "bad.npz", {}, meta), "holds no network arrays")


def test_unwritable_checkpoint_paths_are_named():
  # The check train makes before training starts (tests/test_agents.py runs it through train).
  with pytest.raises(ValueError, match="checkpoint .*run.npz cannot be written"):
    ppo._check_writable(Path(__file__) / "run.npz")  # a file where its folder would be
  with pytest.raises(ValueError, match="is a folder"):
    ppo._check_writable(Path(__file__).parent)
