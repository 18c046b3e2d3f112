"""examples/common.py: the flags, result files and helpers every example uses."""

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
import common  # noqa: E402  # pyright: ignore[reportMissingImports]  (as the examples do)


def test_result_round_trip_and_refusals(tmp_path):
  path = tmp_path / "x.npz"
  common.save_result(path, "task", {"ctrl": np.arange(6.0).reshape(3, 2)},
                     {"cost": np.float64(1.5), "shape": (3, 2)}, version="v1")
  arrays, meta = common.load_result(path, "task", version="v1", keys=("ctrl",))
  np.testing.assert_array_equal(arrays["ctrl"], np.arange(6.0).reshape(3, 2))
  assert meta == {"cost": 1.5, "shape": [3, 2]}
  assert not list(tmp_path.glob("*.tmp.npz"))  # written through a temporary file, then moved
  with pytest.raises(SystemExit, match="another version"):
    common.load_result(path, "task", version="v2")
  with pytest.raises(SystemExit, match="not a 'other' one"):
    common.load_result(path, "other")
  with pytest.raises(SystemExit, match="lacks"):
    common.load_result(path, "task", keys=("gains",))
  with pytest.raises(SystemExit, match="no result file"):
    common.load_result(tmp_path / "missing.npz", "task")
  (tmp_path / "bad.npz").write_bytes(b"not a zip")
  with pytest.raises(SystemExit, match="not a result saved"):
    common.load_result(tmp_path / "bad.npz", "task")


def test_standard_flags_and_defaults(tmp_path):
  parser = argparse.ArgumentParser()
  common.add_standard_args(parser, "task", threads=2)
  args = common.parse(parser, ["--results", str(tmp_path)])
  assert args.out == tmp_path / "task.npz" and args.threads == 2 and not args.play
  with pytest.raises(SystemExit):
    common.parse(parser, ["--threads", "-1"])
  assert common.int_in(1, 3, "x")("2") == 2
  with pytest.raises(argparse.ArgumentTypeError, match=r"\[1, 3\]"):
    common.int_in(1, 3, "x")("7")
  with pytest.raises(argparse.ArgumentTypeError, match="> 0"):
    common.positive_float("x")("nan")


def test_fingerprint_follows_the_model(cartpole):
  first = common.model_fingerprint(cartpole, 1)
  assert first == common.model_fingerprint(cartpole, 1) != common.model_fingerprint(cartpole, 2)
  cartpole.body_mass[1] += 1
  assert common.model_fingerprint(cartpole, 1) != first
