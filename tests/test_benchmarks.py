"""The benchmark scripts still run end to end and report every row (never their speed)."""

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

# Reduced runs of the benchmark scripts, 1-30 s each and about 100 s together: behind the slow
# marker, which .ci/run runs, so that the README's test command stays within its budget.
pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

TINY_XML = """
<mujoco>
  <worldbody>
    <geom type="plane" size="1 1 0.1"/>
    <body pos="0 0 0.2">
      <freejoint/>
      <geom type="sphere" size="0.05"/>
    </body>
    <body pos="0.3 0 0.2">
      <joint name="hinge" type="hinge" axis="0 1 0"/>
      <geom type="capsule" size="0.02" fromto="0 0 0 0.1 0 0"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" ctrlrange="-1 1"/></actuator>
  <sensor><jointpos joint="hinge"/></sensor>
</mujoco>
"""

# Rows of this project and of peers every install has; they must measure, never be skipped.
REQUIRED_ROWS = (
  "c_loop",
  "c_lockstep",
  "python_mj_step",
  "mjbatch_jax.Batch",
  "mujoco.batch",
  "mjbatch_jax.step_scan",
  "mjbatch_jax.rollout",
  "mujoco.rollout",
)
OPTIONAL_ROWS = ("mjbatch_0.1.4.Batch", "mjbatch_0.1.4.python_mj_step", "mjx", "mjwarp")

# What MJX 3.17 refuses or cannot compile, in small: an elliptic cone, condim 1 and 6 geoms, and
# two collision meshes that overlap each other and the floor.
MJX_UNFRIENDLY_XML = """
<mujoco>
  <option cone="elliptic"/>
  <asset>
    <mesh name="cube" vertex="-.05 -.05 -.05  .05 -.05 -.05  -.05 .05 -.05  .05 .05 -.05
                              -.05 -.05 .05  .05 -.05 .05  -.05 .05 .05  .05 .05 .05"/>
  </asset>
  <default><geom condim="1"/></default>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 0.1"/>
    <body pos="0 0 0.04"><freejoint/><geom name="mesh_a" type="mesh" mesh="cube"/></body>
    <body pos="0.05 0 0.04"><freejoint/><geom name="mesh_b" type="mesh" mesh="cube"/></body>
    <body pos="0.3 0 0.2">
      <joint name="hinge" type="hinge" axis="0 1 0"/>
      <geom name="arm" type="capsule" size="0.02" fromto="0 0 0 0.1 0 0" condim="6"/>
      <geom name="visual" type="sphere" size=".01" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" ctrlrange="-1 1"/></actuator>
</mujoco>
"""


@pytest.fixture(scope="module")
def common() -> ModuleType:
  """benchmarks/_common.py as a module (benchmarks/ is a folder of scripts, not a package)."""
  spec = importlib.util.spec_from_file_location("_common", BENCHMARKS / "_common.py")
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _has_lockstep_loop() -> bool:
  # An extension built before step_loop_lockstep existed reports that row unavailable instead.
  from mjbatch_jax._extension import ext

  return hasattr(ext, "step_loop_lockstep")


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
  path = tmp_path / "tiny.xml"
  path.write_text(TINY_XML)
  return path


@pytest.fixture
def without_matplotlib(tmp_path: Path) -> dict[str, str]:
  """An environment in which `import matplotlib` fails, as after a plain `pip install -e .`."""
  blocker = tmp_path / "no_matplotlib"
  blocker.mkdir()
  (blocker / "matplotlib.py").write_text("raise ImportError('no matplotlib in this test')\n")
  path = [str(blocker), *filter(None, [os.environ.get("PYTHONPATH")])]
  return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def _run(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
  proc = subprocess.run(
    [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=300,
    env=env,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def _only_json(out: Path, pattern: str) -> dict:
  files = sorted(out.glob(pattern))
  assert len(files) == 1, files
  return json.loads(files[0].read_text())


def test_scaling_reports_every_row(tiny_model: Path, tmp_path: Path):
  out = tmp_path / "results"
  _run(
    "scaling.py", str(tiny_model), "--num-sims", "4", "--threads", "1", "--nstep", "1",
    "--repeats", "2", "--calls", "1", "--settle", "5",
    "--peers", "python,mujoco.batch,mujoco.rollout,mjbatch", "--out", str(out),
  )
  result = _only_json(out, "tiny-*.json")
  assert list(out.glob("tiny-*.png"))
  assert set(result["rows"]) == set(REQUIRED_ROWS + OPTIONAL_ROWS)
  required = [r for r in REQUIRED_ROWS if r != "c_lockstep" or _has_lockstep_loop()]
  for name in required:
    row = result["rows"][name]
    assert row["available"], f"{name}: {row.get('reason')}"
    (entry,) = row["results"]
    assert (entry["num_sims"], entry["threads"], entry["nstep"], entry["calls"]) == (4, 1, 1, 1)
    # Every row runs the same work: N simulations for calls * nstep substeps, once per repeat.
    assert entry["substeps_per_block"] == 4
    assert len(entry["wall_s"]) == len(entry["cpu_s"]) == 2
    for clock in ("wall", "cpu"):
      stats = entry[f"throughput_{clock}"]
      assert 0 < stats["min"] <= stats["median"] <= stats["max"]
      ratio = entry[f"ratio_to_c_loop_{clock}"]
      assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
  for name in OPTIONAL_ROWS:
    row = result["rows"][name]
    # Without --mjbatch-python and with mjx left out, these say why they did not run.
    assert row["available"] is False and row["reason"], name
  for name in ("mjbatch_jax.step_scan", "mjbatch_jax.rollout"):
    assert result["rows"][name]["results"][0]["compile_s"] >= 0
  settings = result["settings"]
  assert settings["settle"] == 5 and settings["calls"] == {"N=4 T=1 k=1": 1}
  machine = result["machine"]
  for key in ("cpu", "logical_cpus", "python", "jax", "mujoco", "command"):
    assert machine[key], key


def test_scaling_calibrates_calls_per_configuration(tiny_model: Path, tmp_path: Path):
  # Without --calls, each configuration's block is sized from a C loop call; the serial Python
  # row only runs where T=1, on the same rows as the others.
  out = tmp_path / "results"
  _run(
    "scaling.py", str(tiny_model), "--num-sims", "2", "--threads", "1,2", "--nstep", "1",
    "--repeats", "1", "--min-block", "0.001", "--max-calls", "50", "--settle", "0",
    "--peers", "python", "--no-plot", "--out", str(out),
  )
  result = _only_json(out, "tiny-*.json")
  calls = result["settings"]["calls"]
  assert set(calls) == {"N=2 T=1 k=1", "N=2 T=2 k=1"}
  assert all(1 <= c <= 50 for c in calls.values())
  python = result["rows"]["python_mj_step"]
  assert [r["threads"] for r in python["results"]] == [1]
  batch = {r["threads"]: r for r in result["rows"]["mjbatch_jax.Batch"]["results"]}
  for t, entry in batch.items():
    assert entry["substeps_per_block"] == 2 * calls[f"N=2 T={t} k=1"]


def test_scaling_rejects_an_unknown_model(tmp_path: Path):
  proc = subprocess.run(
    [sys.executable, str(BENCHMARKS / "scaling.py"), str(tmp_path / "missing.xml"),
     "--out", str(tmp_path)],
    capture_output=True, text=True, timeout=120,
  )
  assert proc.returncode != 0
  assert "missing.xml" in proc.stderr


def test_memory_reports_every_way(tiny_model: Path, tmp_path: Path):
  out = tmp_path / "results"
  _run(
    "memory.py", str(tiny_model), "--num-sims", "4", "--threads", "1",
    "--ways", "mjbatch_jax.Batch,jax,mjdata_per_sim", "--no-plot", "--out", str(out),
  )
  result = _only_json(out, "memory-tiny-*.json")
  for name in ("baseline", "mjbatch_jax.Batch", "jax", "mjdata_per_sim"):
    row = result["rows"][name]
    assert row["available"], f"{name}: {row.get('reason')}"
    assert row["results"][0]["peak_mb"] > 0


def test_derivatives_benchmark_reports_every_case(
  tmp_path: Path, without_matplotlib: dict[str, str]
) -> None:
  model = tmp_path / "tiny.xml"
  model.write_text(
    '<mujoco><worldbody><body><joint name="j"/><geom size=".1" mass="1"/></body></worldbody>'
    '<actuator><motor joint="j"/></actuator></mujoco>'
  )
  # Without matplotlib (a plain install), as every script: the plot is skipped, the JSON written.
  out = _run(
    "derivatives.py", str(model), "--num-sims", "4", "--threads", "1", "--repeats", "1",
    "--out", str(tmp_path), env=without_matplotlib,
  )
  assert "no plot: matplotlib is not installed" in out.stdout
  assert not list(tmp_path.glob("derivatives-*.png"))
  (result,) = tmp_path.glob("derivatives-*.json")
  data = json.loads(result.read_text())
  cases = {"rows", "rows_forward", "native", "steps", "python", "jvp_default", "jvp_forward",
           "jvp_old"}
  assert set(data["seconds_median"]) == set(data["cpu_seconds_median"]) == cases
  assert all(value > 0 for value in data["seconds_median"].values())
  assert set(data["ratios"]) == {"rows_over_steps", "python_over_rows", "native_over_rows",
                                 "rows_default_over_forward", "jvp_default_over_old",
                                 "jvp_forward_over_old"}
  assert data["max_abs_A_rows_vs_native"] < 1e-6


def test_overhead_benchmark_reports_every_case(tmp_path: Path) -> None:
  out = subprocess.run(
    [sys.executable, str(BENCHMARKS / "overhead.py"), "--calls", "50", "--repeats", "1",
     "--out", str(tmp_path)],
    capture_output=True, text=True, timeout=300,
  )
  assert out.returncode == 0, out.stderr[-3000:]
  (result,) = tmp_path.glob("overhead-*.json")
  data = json.loads(result.read_text())
  assert set(data["us_per_call"]) == {"c_loop", "step_fori", "mujoco.batch"}
  assert all(value > 0 for value in data["us_per_call"].values())
  assert "custom_call_overhead_us" in data


def test_instructions_benchmark_rejects_unknown_paths(tmp_path: Path) -> None:
  # The full run takes minutes under valgrind; this keeps its script importable and its
  # arguments checked.
  out = subprocess.run(
    [sys.executable, str(BENCHMARKS / "instructions.py"), "unitree_go1", "--variants", "warp",
     "--out", str(tmp_path)],
    capture_output=True, text=True, timeout=120,
  )
  assert out.returncode != 0
  assert "unknown variants ['warp']" in out.stderr


def test_soak_reports_every_phase(tmp_path: Path) -> None:
  _run("soak.py", "--calls", "200", "--cycles", "20", "--errors", "20", "--models", "20",
       "--checkpoints", "5", "--out", str(tmp_path))
  data = _only_json(tmp_path, "soak-*.json")
  assert list(tmp_path.glob("soak-*.png"))
  phases = data["phases"]
  # Iterations of each phase: 200 calls make 2 scans of 100 steps.
  planned = {"step_loop": 200, "step_scan": 2, "simulator_cycles": 20, "batch_cycles": 20,
             "distinct_models": 20, "simulation_errors": 20, "argument_errors": 20}
  assert set(phases) == set(planned)
  for name, phase in phases.items():
    assert phase["iterations"] == planned[name] and phase["stopped_early"] is None, name
    assert len(phase["checkpoints"]) == (2 if name == "step_scan" else 5), name
    for point in [phase["start"], *phase["checkpoints"]]:
      assert point["rss_mb"] > 0 and point["fds"] > 0 and point["threads"] > 0, name
    assert set(phase["growth_after_warmup"]) == {"rss_mb", "fds", "threads"}
  assert phases["simulation_errors"]["caught"] == {"SimulationError": 20}
  # 20 models closed for good release their programs twice (8 at a time).
  assert phases["distinct_models"]["program_releases"] == 2
  assert phases["argument_errors"]["caught"] == {"ValueError": 20}


def test_precision_benchmark_reports_every_derivative(tmp_path: Path) -> None:
  out = tmp_path / "results"
  _run("precision.py", "cartpole", "--num-sims", "2", "--settle", "10", "--out", str(out))
  errors = _only_json(out, "precision-*.json")["errors"]["cartpole"]
  for key in ("jacfwd_step", "jacfwd_step_dqvel_dqpos", "transition_fd_A", "transition_fd_B",
              "transition_fd_native_A", "transition_fd_native_B"):
    assert errors[key] >= 0, key


def test_set_const_benchmark_reports_each_nstep(tiny_model: Path, tmp_path: Path) -> None:
  out = tmp_path / "results"
  _run("set_const.py", str(tiny_model), "--num-sims", "4", "--nstep", "1,2", "--repeats", "1",
       "--calls", "1", "--out", str(out))
  rows = _only_json(out, "set_const-tiny-*.json")["rows"]
  assert [row["nstep"] for row in rows] == [1, 2]
  assert all(row["cpu_s_set_const"] > 0 and row["cpu_s_plain"] > 0 for row in rows)


def test_rl_benchmark_reports_both_rollouts(
  tiny_model: Path, tmp_path: Path, without_matplotlib: dict[str, str]
) -> None:
  out = tmp_path / "results"
  proc = _run("rl.py", str(tiny_model), "--num-envs", "4", "--unroll", "2", "--substeps", "2",
              "--threads", "1", "--repeats", "1", "--settle", "1", "--observe", "new",
              "--out", str(out),
              env=without_matplotlib)
  assert "no plot" in proc.stdout
  result = _only_json(out, "rl-tiny-*.json")
  for name in ("physics", "env"):
    assert result["rows"][name]["env_steps_per_s_wall"] > 0
  assert result["env_over_physics_wall"] > 0


def test_rl_time_to_walk_reports_its_row(tmp_path: Path) -> None:
  # Two iterations of the held-out cheetah (its check cannot pass so soon), then the timed
  # iterations with the physics replayed between them: the row's plumbing, not its numbers.
  pytest.importorskip("brax.training.agents.ppo.train",
                      reason="Brax is not installed: `pip install -e '.[rl]'` (brax 0.14)")
  out = tmp_path / "results"
  proc = subprocess.run(
    [sys.executable, str(BENCHMARKS / "rl.py"), "--time-to-walk", "--tasks", "cheetah_run",
     "--max-iterations", "2", "--eval-every", "1", "--pairs", "3", "--threads", "1",
     "--out", str(out)], capture_output=True, text=True, timeout=1200)
  assert proc.returncode == 0, proc.stderr[-3000:]
  row = _only_json(out, "rl-time-to-walk-*.json")["rows"]["cheetah_run"]
  assert not row["passed"] and row["time_to_walk_s"] is None and row["iterations_run"] == 2
  assert [p["iteration"] for p in row["curve"]] == [1, 2]
  assert "eval/episode_reward" in row["curve"][0]["metrics"]
  assert row["env_steps_per_iteration"] == 512 * 20 * 4 and row["unrolls_per_iteration"] == 4
  assert row["iteration_cpu_s"] > 0 and row["physics_cpu_s"] > 0
  assert 0 < row["physics_share_cpu"] < 1 and row["env_steps_per_cpu_s"] > 0
  assert "time to walk not reached" in proc.stdout
  shares = row["profile_cpu_share"]
  assert set(shares) == {"physics", "env_and_policy", "sgd_and_host"}
  assert shares["physics"] == row["physics_share_cpu"] and shares["env_and_policy"] > 0
  bad = subprocess.run([sys.executable, str(BENCHMARKS / "rl.py"), "--time-to-walk", "--seeds",
                        "0,one"], capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2 and "--seeds '0,one': expected comma-separated" in bad.stderr
  bad = subprocess.run([sys.executable, str(BENCHMARKS / "rl.py"), "--time-to-walk", "--run",
                        "go1_joystick=/nonexistent.npz"], capture_output=True, text=True,
                       timeout=300)
  assert bad.returncode == 2 and "expected TASK=CHECKPOINT" in bad.stderr, bad.stderr


def test_ppo_sizes_reports_each_size_and_seed(tmp_path: Path) -> None:
  # Two tiny sizes of the Go1 joystick, two iterations each (the check cannot pass so soon): the
  # rows' plumbing, not their numbers; a size that does not divide is refused.
  pytest.importorskip("brax.training.agents.ppo.train",
                      reason="Brax is not installed: `pip install -e '.[rl]'` (brax 0.14)")
  from tests.models import GO1, MODELS_MISSING

  if not GO1.exists():
    pytest.skip(MODELS_MISSING)
  out = tmp_path / "results"
  proc = subprocess.run(
    [sys.executable, str(BENCHMARKS / "ppo_sizes.py"), "--sizes", "8x4x2x1,4x2x2x1",
     "--max-iterations", "2", "--eval-every", "1", "--threads", "1", "--out", str(out)],
    capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = _only_json(out, "ppo-sizes-*.json")["rows"]
  assert [(r["size"], r["seed"], r["walked"]) for r in rows] == [("8x4x2x1", 0, False),
                                                                  ("4x2x2x1", 0, False)]
  assert "8x4x2x1 seed 0: did not walk" in proc.stdout
  bad = subprocess.run([sys.executable, str(BENCHMARKS / "ppo_sizes.py"), "--sizes", "8x4x3x1"],
                       capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2 and "ENVS a multiple of MINIBATCHES" in bad.stderr, bad.stderr


def _contact_pairs(model) -> set[tuple[str, str]]:
  import mujoco

  data = mujoco.MjData(model)
  mujoco.mj_forward(model, data)
  names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in range(model.ngeom)]
  return {tuple(sorted((names[a], names[b]))) for a, b in data.contact.geom[: data.ncon]}


def test_mjx_compatible_conversion(common: ModuleType, tmp_path: Path) -> None:
  import mujoco

  xml = tmp_path / "unfriendly.xml"
  xml.write_text(MJX_UNFRIENDLY_XML)
  original, none = common.load_variant(xml, None)
  converted, changes = common.load_variant(xml, common.MJX_COMPATIBLE)
  assert none is None
  # 5 geoms: the 4 with the default condim 1 (the visual sphere's too) and the arm's 6.
  assert changes == {"cone": "elliptic -> pyramidal", "condim_to_3": 5,
                     "meshes_colliding_with_world_only": 2}
  assert converted.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL
  assert set(converted.geom_condim) == {3}
  assert (converted.nq, converted.nv, converted.nu) == (original.nq, original.nv, original.nu)
  # The meshes touch each other and the floor: afterwards they meet the floor only.
  assert ("mesh_a", "mesh_b") in _contact_pairs(original)
  assert _contact_pairs(converted) == {("floor", "mesh_a"), ("floor", "mesh_b")}
  with pytest.raises(ValueError, match="unknown model variant"):
    common.load_variant(xml, "mjx")


def test_interleaved_alternates_the_cases(common: ModuleType) -> None:
  # The scripts' side-by-side timing: one warm-up call each, then a block of every case a round.
  order: list[str] = []
  cases = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
  timings = common.interleaved(cases, repeats=3, calls=2)
  assert order == ["a", "b"] + ["a", "a", "b", "b"] * 3
  assert {name: len(t) for name, t in timings.items()} == {"a": 3, "b": 3}
  order.clear()
  common.interleaved(cases, repeats=1, warmup=False)
  assert order == ["a", "b"]
  spread = [common.Timing(3.0, 1.0), common.Timing(1.0, 2.0), common.Timing(2.0, 3.0)]
  assert common.median(spread) == (2.0, 2.0) and common.least(spread) == (1.0, 1.0)


def test_timed_reads_wall_and_cpu_clocks(common: ModuleType) -> None:
  import jax.numpy as jnp

  # Sleeping takes wall time and (almost) no CPU time: the two clocks are not confused.
  sleep = common.timed(time.sleep, 0.05)
  assert sleep.wall_s >= 0.05 and sleep.cpu_s < 0.04
  timing, value = common.run_timed(jnp.add, 1, 2, calls=3)
  assert int(value) == 3 and timing.wall_s > 0


def test_package_file_asks_other_interpreters(
  common: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
  # How `humanoid` is found when only a peer's venv has mujoco-warp: a package that this
  # process cannot import, which another interpreter (here one with a PYTHONPATH) can.
  data = tmp_path / "root" / "bench_fake_pkg" / "data"
  data.mkdir(parents=True)
  (data.parent / "__init__.py").write_text("")
  (data / "model.xml").write_text("<mujoco/>")
  monkeypatch.setenv("PYTHONPATH", str(tmp_path / "root"))
  assert common.package_file("bench_fake_pkg", "data/model.xml") is None
  found = common.package_file("bench_fake_pkg", "data/model.xml", [sys.executable])
  assert found == (data / "model.xml").resolve()
  assert common.package_file("bench_fake_pkg", "data/other.xml", [sys.executable]) is None


def test_scaling_runs_the_mjx_compatible_variant(tmp_path: Path) -> None:
  model = tmp_path / "unfriendly.xml"
  model.write_text(MJX_UNFRIENDLY_XML)
  out = tmp_path / "results"
  # This interpreter as the MJX and Warp peers: the worker converts the model itself and must
  # report the same changes and sizes (else the row names the mismatch); without mujoco-mjx or
  # mujoco-warp installed the rows then say they cannot import them.
  proc = _run(
    "scaling.py", str(model), "--mjx-compatible", "--num-sims", "2", "--threads", "1",
    "--nstep", "1", "--repeats", "1", "--calls", "1", "--settle", "2", "--peers", "mjx,mjwarp",
    "--mjx-python", sys.executable, "--warp-python", sys.executable,
    "--slow-peer-configs", "2:1:1", "--no-plot", "--out", str(out),
  )
  assert "model variant mjx-compatible" in proc.stdout
  result = _only_json(out, "unfriendly-mjx-compatible-*.json")
  assert result["model_variant"]["changes"]["meshes_colliding_with_world_only"] == 2
  assert result["settings"]["slow_peer_configs"] == [[2, 1, 1]]
  for name in ("c_loop", "mjbatch_jax.Batch", "mjbatch_jax.step_scan", "mjbatch_jax.rollout"):
    assert result["rows"][name]["available"], result["rows"][name].get("reason")
  for name, module in (("mjx", "mujoco.mjx"), ("mjwarp", "mujoco_warp")):
    row = result["rows"][name]
    if not row["available"]:
      assert f"cannot import {module}" in row["reason"], row["reason"]
    else:  # where this interpreter has it: measured, and as a multiple of the JAX path
      assert row["results"][0]["jax_speedup_cpu"]["median"] > 0
  for name in ("python_mj_step", "mujoco.batch", "mujoco.rollout"):
    assert "not selected" in result["rows"][name]["reason"]


def test_scaling_rejects_slow_peer_configs_outside_the_grid(tmp_path: Path) -> None:
  proc = subprocess.run(
    [sys.executable, str(BENCHMARKS / "scaling.py"), "unused.xml", "--num-sims", "4",
     "--slow-peer-configs", "256:1:1"],
    capture_output=True, text=True, timeout=120,
  )
  assert proc.returncode != 0
  assert "--slow-peer-configs must be among" in proc.stderr


def test_control_benchmark_reports_both_planners(tmp_path: Path) -> None:
  model = tmp_path / "arm.xml"
  model.write_text(
    '<mujoco><worldbody><body><joint name="a" axis="0 1 0"/><geom type="capsule" size=".05"'
    ' fromto="0 0 0 0 0 -.5" mass="1"/><body pos="0 0 -.5"><joint name="b" axis="0 1 0"/>'
    '<geom type="capsule" size=".05" fromto="0 0 0 0 0 -.5" mass="1"/></body></body>'
    '</worldbody><actuator><motor joint="a" ctrlrange="-1 1"/><motor joint="b" ctrlrange="-1 1"/>'
    '</actuator></mujoco>'
  )
  _run("control.py", "--model", str(model), "--knots", "3", "--samples", "16", "--threads", "1",
       "--repeats", "1", "--out", str(tmp_path), "--no-plot")
  data = _only_json(tmp_path, "control-*.json")
  assert set(data["ilqr"]["seconds"]) == {"iteration", "nominal rollout", "transition_fd",
                                          "forward", "line-search steps", "python loop",
                                          "iteration, substeps"}
  assert set(data["sampling"]["seconds"]) == {"control step", "rollout calls",
                                              "python + mujoco.rollout"}
  for part in ("ilqr", "sampling"):
    # A ratio of CPU times of a 3-knot solve measured once: positive and finite, but no bound
    # above (the parts timed apart each pay their own dispatch; under load it was 4.0).
    assert 0 < data[part]["custom_call_share"] < math.inf
    assert all(v["cpu"] >= 0 and v["wall"] > 0 for v in data[part]["seconds"].values())
  assert data["ilqr"]["knots"] == 3 and data["sampling"]["samples"] == 16


def test_sysid_benchmark_reports_every_variant(tmp_path: Path) -> None:
  out = tmp_path / "results"
  _run("sysid.py", "--samples", "100", "--iterations", "2", "--skip-mujoco-sysid", "--out",
       str(out))
  rows = _only_json(out, "sysid-*.json")["rows"]
  assert [row["variant"] for row in rows] == [
    "starts fitted, prior (the example)", "starts fixed, prior", "starts fitted, bounds",
    "starts fixed, bounds"]
  for row in rows:
    assert row["cpu_s"] > 0 and 1 <= row["iterations"] <= 2
    assert 0 < row["heldout_rad"] < 0.01 and row["mass_error_percent"] >= 0


def test_ilqr_linearization_benchmark_reports_every_case(tmp_path: Path) -> None:
  from tests.models import CHEETAH_XML  # a contact model: the hopper's stand-in

  model = tmp_path / "runner.xml"
  model.write_text(CHEETAH_XML)
  _run("ilqr_linearization.py", "--quick", "--model", str(model), "--nstep", "1", "--threads",
       "1", "--out", str(tmp_path), "--no-plot")
  data = _only_json(tmp_path, "ilqr_linearization-*.json")
  (row,) = data["rows"]
  assert row["knots"] == 8 and row["nstep"] == 1
  assert set(row["seconds"]) == {
    "linearisation, substeps", "python mjd_transitionFD loop", "linearisation, knot",
    "iLQR iterations=1, substeps", "iLQR iterations=0, substeps", "iLQR iterations=1, knot",
    "iLQR iterations=0, knot", "backward pass", "numpy backward pass", "python line search"}
  assert all(v["cpu"] >= 0 and v["wall"] > 0 for v in row["seconds"].values())
  assert 0 < row["ratios"]["cpu"]["substeps_linearisation_over_loop"] < math.inf
  for option in ("substeps", "knot"):
    # Both against centred differences: small, and the forward-difference option's not zero.
    assert 0 <= row["accuracy"][option]["A"]["median"] < 0.1
    solve = row["solves"][option]
    assert solve["final_cost"] <= solve["initial_cost"] and solve["iterations"] <= 2
  assert row["accuracy"]["substeps"]["A"]["max"] > 0
