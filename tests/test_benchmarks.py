"""The benchmark scripts still run end to end and report every row (never their speed)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
  "python_mj_step",
  "mjbatch_jax.Batch",
  "mujoco.batch",
  "mjbatch_jax.step_scan",
  "mjbatch_jax.rollout",
  "mujoco.rollout",
)
OPTIONAL_ROWS = ("mjbatch_0.1.4.Batch", "mjbatch_0.1.4.python_mj_step", "mjx")


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
  path = tmp_path / "tiny.xml"
  path.write_text(TINY_XML)
  return path


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
  proc = subprocess.run(
    [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=300
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
    "--repeats", "1", "--calls", "1", "--serial-warmup", "1", "--serial-steps", "2",
    "--peers", "python,mujoco.batch,mujoco.rollout,mjbatch", "--out", str(out),
  )
  result = _only_json(out, "tiny-*.json")
  assert list(out.glob("tiny-*.png"))
  assert set(result["rows"]) == set(REQUIRED_ROWS + OPTIONAL_ROWS)
  for name in REQUIRED_ROWS:
    row = result["rows"][name]
    assert row["available"], f"{name}: {row.get('reason')}"
    (entry,) = row["results"]
    assert (entry["num_sims"], entry["threads"], entry["nstep"]) == (4, 1, 1)
    assert entry["throughput"] > 0
    assert entry["ratio_to_c_loop"] > 0
  for name in OPTIONAL_ROWS:
    row = result["rows"][name]
    # Without --mjbatch-python and with mjx left out, these say why they did not run.
    assert row["available"] is False and row["reason"], name
  for name in ("mjbatch_jax.step_scan", "mjbatch_jax.rollout"):
    assert result["rows"][name]["results"][0]["compile_s"] >= 0
  machine = result["machine"]
  for key in ("cpu", "logical_cpus", "python", "jax", "mujoco", "command"):
    assert machine[key], key


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


def test_derivatives_benchmark_reports_every_case(tmp_path: Path) -> None:
  model = tmp_path / "tiny.xml"
  model.write_text(
    '<mujoco><worldbody><body><joint name="j"/><geom size=".1" mass="1"/></body></worldbody>'
    '<actuator><motor joint="j"/></actuator></mujoco>'
  )
  out = subprocess.run(
    [sys.executable, str(BENCHMARKS / "derivatives.py"), str(model), "--num-sims", "4",
     "--threads", "1", "--repeats", "1", "--no-plot", "--out", str(tmp_path)],
    capture_output=True, text=True, timeout=300,
  )
  assert out.returncode == 0, out.stderr[-3000:]
  (result,) = tmp_path.glob("derivatives-*.json")
  data = json.loads(result.read_text())
  assert set(data["seconds_median"]) == {"rows", "native", "steps", "python"}
  assert all(value > 0 for value in data["seconds_median"].values())
  assert set(data["ratios"]) == {"rows_over_steps", "python_over_rows", "native_over_rows"}
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
