"""The examples run as a user runs them, and meet what they claim in what they print."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"


def run(script: str, *args: str, timeout: float = 300) -> str:
  """Run an example in a fresh interpreter; return its stdout, failing with its stderr."""
  done = subprocess.run(
    [sys.executable, str(EXAMPLES / script), *args],
    capture_output=True, text=True, timeout=timeout, cwd=EXAMPLES.parent,
  )
  assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
  return done.stdout


def number(pattern: str, text: str) -> float:
  found = re.search(pattern, text)
  assert found, f"no match for {pattern!r} in:\n{text}"
  return float(found.group(1))


def test_hello():
  out = run("hello.py")
  assert number(r"([\d,]+) sim-steps/s", out.replace(",", "")) > 0
  assert number(r"threads: (\d+)", out) >= 1


def test_hello_jax():
  out = run("hello_jax.py")
  assert number(r"([\d,]+) sim-steps/s", out.replace(",", "")) > 0
  assert number(r"time ([\d.]+) s", out) == pytest.approx(2.0)


def test_cartpole_mpc():
  out = run("cartpole_mpc.py")
  assert number(r"final tilt: ([\d.]+) rad", out) < 0.2


def test_cartpole_swingup(tmp_path):
  plan = tmp_path / "plan.npz"
  out = run("cartpole_swingup.py", "--out", str(plan))
  initial = number(r"cost: ([\d.]+) ->", out)
  final = number(r"cost: [\d.]+ -> ([\d.]+)", out)
  assert final < 0.01 * initial
  assert number(r"pole 1 ([\d.]+) rad", out) < 0.1
  assert number(r"pole 2 ([\d.]+) rad", out) < 0.1
  saved = np.load(plan)
  assert saved["ctrl"].shape == (100, 1)
  assert np.all(np.abs(saved["ctrl"]) <= 1.0)  # the box
  assert saved["states"].shape[0] == 101
  assert saved["gains"].shape == (100, 1, 6)


def test_sysid():
  # The comparison with mujoco.sysid is the slow half and asserts nothing of ours: skipped.
  out = run("sysid.py", "--skip-mujoco-sysid")
  before = number(r"error before: ([\d.]+) rad", out)
  after = number(r"error after: +([\d.]+) rad", out)
  assert after * 10 <= before
