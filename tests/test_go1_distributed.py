"""Brax's PPO on the Go1 task trains data-parallel over processes, through the library's layer.

examples/go1_joystick.py trains with `mjbatch_jax.agents.ppo` (Brax's ppo.train, a pmap whose
gradients and observation statistics are pmean-ed over its axis); under `python -m
mjbatch_jax.launch -n 2` that axis spans both processes, with gloo collectives between them.
Each process steps its own half of the envs on its own draws, so the processes' networks can
only agree if every update was averaged over both: the test asserts they agree bit for bit, and
that the observation statistics counted every process's observations.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.models import GO1, MODELS_MISSING

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "go1_joystick.py"
LIMIT = 600  # seconds for any one run, in the worst case (a busy 2-CPU machine)
NUM_ENVS, UNROLL, ITERATIONS = 8, 4, 2
ARGS = ["--num-envs", str(NUM_ENVS), "--unroll", str(UNROLL), "--iterations", str(ITERATIONS),
        "--eval-every", "1", "--episode-length", "20", "--minibatches", "2", "--threads", "1"]

pytestmark = pytest.mark.skipif(not GO1.exists(), reason=MODELS_MISSING)

# The example's training call (go1.training + agents.ppo.train, after distributed.setup as its
# main does), each process saving the networks it ends with.
TRAIN = f"""
import sys
import numpy as np
sys.path.insert(0, "examples")
import common
import go1_joystick as go1
from mjbatch_jax import distributed
dist = distributed.setup(go1.go1_model(common.GO1_SCENE, go1.default_config()), {NUM_ENVS}, 1)
import jax
from mjbatch_jax.agents import ppo
env = go1.Joystick(common.GO1_SCENE, num_threads=1)
kwargs = go1.training(env, num_envs={NUM_ENVS}, unroll={UNROLL}, iterations={ITERATIONS},
                      episode_length=20, minibatches=2)
trained = ppo.train(env, **kwargs, iterations_per_eval=1)
leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(trained.params)]
np.savez(f"{{sys.argv[1]}}_{{jax.process_index()}}.npz", *leaves,
         count=np.asarray(trained.params[0].count.lo), local_envs=jax.local_device_count())
"""


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


def test_two_processes_average_every_update(tmp_path):
  pytest.importorskip("brax.training.agents.ppo.train", reason="Brax is not installed")
  launcher = ["-m", "mjbatch_jax.launch", "--timeout", str(LIMIT), "-n", "2"]
  checkpoint, script = tmp_path / "cli.npz", tmp_path / "train.py"
  script.write_text(TRAIN)
  runs = {  # both at once: most of each is compiling
    "the training call in 2 processes": start(
      [*launcher, str(script), str(tmp_path / "params")], environment()),
    "the example in 2 processes": start(
      [*launcher, str(EXAMPLE), *ARGS, "--out", str(checkpoint)], environment()),
  }
  outs = {what: finish(proc, what) for what, proc in runs.items()}

  first, second = (np.load(tmp_path / f"params_{rank}.npz") for rank in (0, 1))
  assert int(first["local_envs"]) == 1 and first.files == second.files
  differ = [k for k in first.files if not np.array_equal(first[k], second[k])]
  assert not differ, differ  # the same networks: every gradient averaged over both processes
  # The normaliser counted both processes' observations: all the envs' steps.
  assert int(first["count"]) == NUM_ENVS * UNROLL * ITERATIONS
  assert all(np.all(np.isfinite(first[k])) for k in first.files)

  cli = outs["the example in 2 processes"]
  assert "[0] Go1 joystick (full collisions), Brax's PPO" in cli, cli
  assert "2 process(es), 2 device(s)" in cli, cli
  # Gloo's own connection log comes from every rank; the example's lines from process 0 alone.
  ours = [line for line in cli.splitlines() if "[Gloo]" not in line]
  assert not [line for line in ours if line.startswith("[1] ")], cli
  assert f"[0] iter    {ITERATIONS}:" in cli, cli
  summary = json.loads((tmp_path / "cli.json").read_text())
  assert summary["processes"] == 2 and summary["env_steps"] == NUM_ENVS * UNROLL * ITERATIONS
  saved = np.load(checkpoint)
  meta = json.loads(str(saved["__meta__"]))
  assert [row["iteration"] for row in meta["curve"]] == list(range(1, ITERATIONS + 1))
  counts = [k for k in saved.files if k.endswith(".count.lo")]
  assert counts and int(saved[counts[0]]) == NUM_ENVS * UNROLL * ITERATIONS, saved.files


def test_refusals(tmp_path):
  # --num-envs must split evenly over every process's devices: each process says so and stops.
  done = subprocess.run(
    [sys.executable, str(EXAMPLE), "--processes", "2", *ARGS, "--num-envs", "3",
     "--minibatches", "1", "--out", str(tmp_path / "unused.npz")],
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
