"""The documentation site: every public name documented with its arguments, the getting-started
page's code runs, the links resolve, and (where mkdocs is installed) the strict build passes."""

import ast
import importlib
import inspect
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import mjbatch_jax
from tests.models import GO1, robot

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# Public modules that mjbatch_jax.__all__ does not reach but the guides tell users to import;
# the API reference has a page for each, so their names are held to the same rule.
EXTRA_MODULES = ("mjbatch_jax.agents", "mjbatch_jax.agents.ppo", "mjbatch_jax.envs.playground")

# Public names whose docstrings do not yet meet the rule below, and what each lacks: the gap the
# API reference still has, to close in the library's docstrings (a constant's docstring is a
# string literal on the line after its assignment, which the API pages show). The test fails
# for a name missing here, and for a name listed here that no longer lacks what it says, so
# that the list only shrinks.
UNDOCUMENTED: dict[str, str] = {}


def _module_public(module: ModuleType) -> list[str]:
  """A module's public names: its __all__, or else the names it defines without a leading _."""
  if hasattr(module, "__all__"):
    return list(module.__all__)
  names = []
  for node in ast.parse(Path(module.__file__ or "").read_text()).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.append(node.name)
    elif isinstance(node, ast.Assign):
      names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
      names.append(node.target.id)
  return [name for name in names if not name.startswith("_")]


@cache
def _public() -> dict[str, tuple[ModuleType, str, Any]]:
  """Every public name, qualified: (the module that lists it, its name there, the object).

  An object reached under several names (a constant that two modules export) is kept under the
  first; the walk starts at mjbatch_jax and goes into every public module it reaches."""
  found: dict[str, tuple[ModuleType, str, Any]] = {}
  seen: set[Any] = set()
  todo = [mjbatch_jax] + [importlib.import_module(name) for name in EXTRA_MODULES]
  done: set[str] = set()
  while todo:
    module = todo.pop(0)
    if module.__name__ in done:
      continue
    done.add(module.__name__)
    found.setdefault(module.__name__, (module, "", module))
    for name in _module_public(module):
      obj = getattr(module, name)
      if inspect.ismodule(obj):
        todo.append(obj)
      # The same object under a second name: a class or function by identity, a constant by
      # the assignment that made it.
      key = _constant(module, name)[:2] if _is_constant(obj) else id(obj)
      if key in seen:
        continue
      seen.add(key)
      found[f"{module.__name__}.{name}"] = (module, name, obj)
  return found


@cache
def _tree(path: str) -> ast.Module:
  return ast.parse(Path(path).read_text())


def _definition(obj: Any) -> ast.AST | None:
  """The class or def statement of a function or class, as Griffe reads it, or None."""
  obj = inspect.unwrap(obj)
  module = sys.modules.get(getattr(obj, "__module__", ""), None)
  if module is None or not getattr(module, "__file__", None):
    return None
  node: ast.AST = _tree(module.__file__ or "")
  for part in getattr(obj, "__qualname__", "").split("."):
    children = [c for c in getattr(node, "body", [])
                if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and c.name == part]
    if not children:
      return None
    node = children[-1]
  return node


def _constant(module: ModuleType, name: str) -> tuple[str, int, str]:
  """Where name is assigned (file, line), following imports from module, and the string literal
  on the statement after it (its docstring, as Griffe reads it; "" if none)."""
  path = module.__file__ or ""
  statements = list(_tree(path).body)
  for node in list(statements):  # `if TYPE_CHECKING:` imports, which the lazy names use
    if isinstance(node, ast.If):
      statements += node.body
  for i, node in enumerate(statements):
    targets = (node.targets if isinstance(node, ast.Assign)
               else [node.target] if isinstance(node, ast.AnnAssign) else [])
    if any(isinstance(t, ast.Name) and t.id == name for t in targets):
      after = statements[i + 1] if i + 1 < len(statements) else None
      doc = ""
      if (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
          and isinstance(after.value.value, str)):
        doc = after.value.value
      return path, node.lineno, doc
    if isinstance(node, ast.ImportFrom) and node.module and any(
        alias.name == name and alias.asname in (None, name) for alias in node.names):
      return _constant(importlib.import_module(node.module), name)
  raise AssertionError(f"{module.__name__}.{name}: no assignment found")


def _is_constant(obj: Any) -> bool:
  """Whether obj is data (a number, a string, a table, a type alias), not code to call."""
  return not (inspect.ismodule(obj) or inspect.isclass(obj)
              or inspect.isroutine(inspect.unwrap(obj)))


def _documentation(obj: Any) -> str:
  """The docstring text of a module, function or class (with its own __init__'s)."""
  if inspect.ismodule(obj):
    return obj.__doc__ or ""
  node = _definition(obj)
  if node is None:  # made at run time: its __doc__ is what there is
    return inspect.getdoc(obj) or ""
  text = ast.get_docstring(node) or ""  # type: ignore[arg-type]
  if isinstance(node, ast.ClassDef):
    for child in node.body:
      if isinstance(child, ast.FunctionDef) and child.name == "__init__":
        text += "\n" + (ast.get_docstring(child) or "")
  return text


def _arguments(obj: Any) -> list[str]:
  """The named parameters of a function's or class's signature (not self, *args, **kwargs)."""
  try:
    signature = inspect.signature(obj)
  except (TypeError, ValueError):
    return []
  skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
  return [p.name for p in signature.parameters.values()
          if p.kind not in skip and p.name not in ("self", "cls")]


def _lacks(module: ModuleType, name: str, obj: Any) -> str:
  """What name's documentation lacks: "docstring", the arguments it never names, or ""."""
  if _is_constant(obj):
    return "" if _constant(module, name)[2].strip() else "docstring"
  text = _documentation(obj)
  if not text.strip():
    return "docstring"
  if inspect.ismodule(obj):
    return ""
  # The rule: each argument's name appears in the docstring as a word (in an Args: section, or
  # in the text, as `name` or name).
  missing = [a for a in _arguments(obj) if not re.search(rf"\b{re.escape(a)}\b", text)]
  return ", ".join(missing)


def test_the_walk_finds_the_public_names():
  public = _public()
  assert len(public) > 150, len(public)
  for name in ("mjbatch_jax.step", "mjbatch_jax.Batch", "mjbatch_jax.control.ilqr",
               "mjbatch_jax.control.splines.matrix", "mjbatch_jax.ensemble.Ensemble",
               "mjbatch_jax.launch.launch", "mjbatch_jax.envs.playground.load",
               "mjbatch_jax.agents.ppo.train", "mjbatch_jax.NWARNING"):
    assert name in public, name


def test_every_public_name_has_a_docstring_that_names_its_arguments():
  lacking = {}
  for qualified, (module, name, obj) in _public().items():
    lacks = _lacks(module, name, obj)
    if lacks:
      lacking[qualified] = lacks
  new = {k: v for k, v in lacking.items() if k not in UNDOCUMENTED}
  assert not new, ("public names without a docstring, or whose docstring does not name these "
                   f"arguments: {new}")
  stale = {k: v for k, v in UNDOCUMENTED.items() if lacking.get(k) != v}
  assert not stale, ("UNDOCUMENTED says these lack what they no longer lack (now: "
                     f"{ {k: lacking.get(k, '') for k in stale} }): update the list")


def test_every_public_module_has_a_page_in_the_api_reference():
  pages = "\n".join(p.read_text() for p in (DOCS / "api").glob("*.md"))
  targets = set(re.findall(r"^::: ([\w.]+)\s*$", pages, flags=re.M))
  modules = {"mjbatch_jax"} | {
    obj.__name__ for _, _, obj in _public().values() if inspect.ismodule(obj)}
  modules |= {name for name in EXTRA_MODULES}
  assert modules <= targets, f"API pages miss {sorted(modules - targets)}"
  for target in targets:
    importlib.import_module(target)  # each page documents a module that exists


def _python_blocks(text: str) -> list[str]:
  return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def test_getting_started_code_runs_as_written():
  blocks = _python_blocks((DOCS / "getting-started.md").read_text())
  assert len(blocks) >= 4  # the first simulation, rollout, plan and the numpy Batch
  done = subprocess.run([sys.executable, "-c", "\n".join(blocks)], capture_output=True,
                        text=True, timeout=600, cwd=ROOT)
  assert done.returncode == 0, f"getting-started.md failed:\n{done.stderr[-3000:]}"
  assert "pole at the end: 0.99" in done.stdout, done.stdout  # the plan swings the pole up


def test_tour_runs_on_the_go1():
  robot(GO1)  # skips without MuJoCo Menagerie's Go1 in ../shared/models
  blocks = _python_blocks((DOCS / "tour.md").read_text())
  assert len(blocks) >= 5  # JAX functions, observations, derivatives, planners, sysid
  # The code as written, on fewer simulations: each name, field and call must exist.
  code = "\n".join(blocks).replace("1024", "8")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=600, cwd=ROOT)
  assert done.returncode == 0, f"tour.md failed:\n{done.stderr[-3000:]}"


def test_readme_and_docs_links_resolve():
  # Relative links of the README (to docs/ and results) and of the docs' pages, which mkdocs
  # checks only where it is installed.
  pages = [ROOT / "README.md", *DOCS.rglob("*.md")]
  for page in pages:
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
      if "://" in target or target.startswith(("#", "mailto:")):
        continue
      path = (page.parent / target.split("#", 1)[0]).resolve()
      assert path.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"


def test_every_code_fence_of_the_docs_is_closed():
  # An unclosed fence turns the rest of a page into code, which no link check sees.
  for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
    fences = re.findall(r"^ *```", page.read_text(), flags=re.M)
    assert len(fences) % 2 == 0, f"{page.relative_to(ROOT)} has an unclosed code fence"


def test_the_gallery_shows_every_example():
  gallery = (DOCS / "examples.md").read_text()
  for script in sorted((ROOT / "examples").glob("*.py")):
    if script.name != "common.py" and not script.name.startswith("_"):  # helpers, not examples
      assert f"examples/{script.name}" in gallery, f"docs/examples.md misses {script.name}"


def test_mkdocs_build_strict(tmp_path):
  for module in ("mkdocs", "mkdocstrings", "material", "mkdocstrings_handlers.python"):
    pytest.importorskip(module, reason="the docs extra: pip install -e '.[docs]'")
  done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                         str(tmp_path / "site")], capture_output=True, text=True, timeout=600,
                        cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
  assert done.returncode == 0, done.stderr[-4000:]
  for page in ("index.html", "getting-started.html", "examples.html", "api/mjbatch_jax.html"):
    assert (tmp_path / "site" / page).is_file(), page
