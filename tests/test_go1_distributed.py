"""The Go1 PPO trainer data-parallel over processes computes what it does over devices.

examples/go1_joystick.py under `python -m mjbatch_jax.launch -n 2` (gloo collectives between
processes) against the same command in one process with 2 CPU devices (XLA's collectives within
it): the same shard_map program over 2 devices, so the saved policies must agree bit for bit.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.models import GO1, MODELS_MISSING

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "go1_joystick.py"
LIMIT = 300  # seconds for any one run, in the worst case (a busy 2-CPU machine)
# The reduced size of tests/test_examples.py::test_go1_joystick.
ARGS = ["--num-envs", "8", "--unroll", "4", "--iterations", "2", "--episode-length", "20",
        "--threads", "1"]

pytestmark = pytest.mark.skipif(not GO1.exists(), reason=MODELS_MISSING)


def environment(**extra: str) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items()
         if not k.startswith("MJBATCH_JAX_") and k != "XLA_FLAGS"}
  env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
  return {**env, **extra}


def start(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
  return subprocess.Popen([sys.executable, *command], env=env, cwd=ROOT, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen[str], what: str) -> str:
  try:
    out, err = proc.communicate(timeout=LIMIT + 30)
  except subprocess.TimeoutExpired:
    proc.kill()
    out, err = proc.communicate()
  assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{out[-3000:]}\n{err[-5000:]}"
  return out


INITIAL = """
import sys
import jax
import numpy as np
sys.path.insert(0, "examples")
import go1_joystick as go1

# As train() makes it from --seed 0: the policy before the first iteration.
k_train, _, _ = jax.random.split(jax.random.PRNGKey(0), 3)
state = go1.init_train(k_train, 12)
arrays = {"log_std": state.params["log_std"]}
for net in ("policy", "value"):
  for i, layer in enumerate(state.params[net]):
    arrays[f"{net}_w{i}"], arrays[f"{net}_b{i}"] = layer["w"], layer["b"]
np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in arrays.items()})
"""


@pytest.mark.slow
def test_two_processes_train_as_two_devices_in_one(tmp_path):
  began = time.perf_counter()
  processes, devices, initial = (tmp_path / f"{name}.npz"
                                 for name in ("processes", "devices", "initial"))
  # The three at once: most of each is compiling, in one thread.
  runs = {
    "2 processes under the launcher": start(
      ["-m", "mjbatch_jax.launch", "--timeout", str(LIMIT), "-n", "2", str(EXAMPLE), *ARGS,
       "--out", str(processes)], environment()),
    "1 process with 2 CPU devices": start(
      [str(EXAMPLE), *ARGS, "--out", str(devices)],
      environment(XLA_FLAGS="--xla_force_host_platform_device_count=2")),
    "the initial policy": start(["-c", INITIAL, str(initial)], environment()),
  }
  outs = {what: finish(proc, what) for what, proc in runs.items()}

  launched = outs["2 processes under the launcher"]
  assert "[0] Go1 joystick PPO" in launched and "data-parallel over 2 devices of 2 process(es), " \
    "4 envs here" in launched, launched
  assert "[1] Go1 joystick PPO" not in launched, "process 1 printed: process 0 alone should"
  assert "data-parallel over 2 devices of 1 process(es), 8 envs here" in outs[
    "1 process with 2 CPU devices"]

  saved, reference, before = (np.load(path) for path in (processes, devices, initial))
  names = [k for k in saved.files if k != "meta"]
  assert sorted(names) == sorted(k for k in reference.files if k != "meta")
  # The collectives across processes compute what the in-process data-parallel program does.
  differ = [k for k in names if not np.array_equal(saved[k], reference[k])]
  assert not differ, {k: float(np.max(np.abs(saved[k] - reference[k]))) for k in differ}
  assert all(np.all(np.isfinite(saved[k])) for k in names)
  assert float(saved["obs_count"]) > 1  # the normaliser saw both processes' observations
  trained = [k for k in before.files if not np.array_equal(saved[k], before[k])]
  assert "log_std" in trained and "policy_w0" in trained and "value_w0" in trained, trained
  assert all((tmp_path / f"processes_curve.{ext}").is_file() for ext in ("json", "png"))
  print(f"3 runs in {time.perf_counter() - began:.0f} s")


@pytest.mark.slow
def test_refusals(tmp_path):
  # --num-envs must split evenly over every process's devices: each process says so and stops.
  done = subprocess.run(
    [sys.executable, str(EXAMPLE), "--processes", "2", *ARGS, "--num-envs", "3",
     "--out", str(tmp_path / "unused.npz")],
    env=environment(), cwd=ROOT, capture_output=True, text=True, timeout=LIMIT,
  )
  assert done.returncode == 2, done.stdout + done.stderr
  assert "--num-envs 3: num_sims_global=3 must be a multiple of the mesh's 2 CPU devices" in (
    done.stdout + done.stderr), done.stdout + done.stderr
  # --play stays in one process.
  done = subprocess.run(
    [sys.executable, str(EXAMPLE), "--play", "--processes", "2"],
    env=environment(), cwd=ROOT, capture_output=True, text=True, timeout=LIMIT,
  )
  assert done.returncode == 2 and "--play runs in one process" in done.stderr, done.stderr
