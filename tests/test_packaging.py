"""What a newcomer meets first: the README's snippets, the examples' --help, the extras, an
import from an unbuilt checkout, and the wheel."""

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
