"""The package's layout: no import cycles, and the C++ and Python tables of handlers agree."""

import ast
import subprocess
import sys
from pathlib import Path

from mjbatch_jax import _ffi
from mjbatch_jax._extension import ext

PACKAGE = Path(__file__).resolve().parents[1] / "mjbatch_jax"


def test_every_module_imports_alone():
  for module in ("derivatives", "functions", "_rules", "_checks", "simulator", "params", "batch",
                 "names", "randomize", "sysid"):
    out = subprocess.run([sys.executable, "-c", f"import mjbatch_jax.{module}"],
                         capture_output=True, text=True)
    assert out.returncode == 0, (module, out.stderr[-2000:])


def test_no_imports_inside_functions_of_the_package():
  # Imports inside functions hide cycles; the package keeps them at module level. Exceptions:
  # jax, imported lazily by Batch.to_jax and __init__'s __getattr__ so that Batch needs no jax,
  # and JAX's private distributed state, imported where it is used so that a JAX without it
  # fails only there; and Brax, an optional extra, imported by agents.ppo where it is used so that
  # the module imports (and says how to install Brax) without it.
  allowed = {("batch.py", "jax.numpy"), ("__init__.py", None), ("watchdog.py", "jax._src"),
             *(("ppo.py", f"brax.training{sub}") for sub in ("", ".acme", ".agents.ppo"))}
  for path in PACKAGE.rglob("*.py"):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
      if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        continue
      for inner in ast.walk(node):
        if isinstance(inner, ast.Import | ast.ImportFrom):
          name = inner.module if isinstance(inner, ast.ImportFrom) else inner.names[0].name
          assert (path.name, name) in allowed or (path.name, None) in allowed, (
            f"{path.name}: import of {name} inside {node.name}"
          )


def test_python_wrappers_pair_the_cpp_handlers():
  assert set(_ffi.TARGETS) == set(ext.handlers())
  for name, module in _ffi.TARGETS.items():
    assert callable(module.call), name
    assert f'"{name}"' in Path(str(module.__file__)).read_text(), name
