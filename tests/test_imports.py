"""The house of imports: layers import only layers below them, and no module imports itself back.

Read from the source (ast), so it holds for every module whether or not a test imports it.
Imports under `if TYPE_CHECKING:` are annotations, not arrows, and are left out.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mjbatch_jax"

# The layers above the core, each with the layers it may import besides the core. The core is
# every module outside these packages (the engine, the pure functions, the numpy Batch, the
# helpers of rotations and tangents).
UPPER = {
  "control": set(),
  "sysid": {"control"},
  "distributed": set(),
  "envs": set(),
  "agents": {"envs"},
  "motion": {"control"},
}


def _module_name(path: Path) -> str:
  parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
  return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
  test = node.test
  return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
  """The package's modules that path imports when it runs (module level and in functions)."""
  tree = ast.parse(path.read_text())
  skipped: set[int] = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.If) and _is_type_checking(node):
      skipped.update(id(inner) for inner in ast.walk(node))
  found = set()
  for node in ast.walk(tree):
    if id(node) in skipped:
      continue
    if isinstance(node, ast.Import):
      found.update(a.name for a in node.names if a.name.startswith("mjbatch_jax"))
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      if not node.module.startswith("mjbatch_jax"):
        continue
      for alias in node.names:  # `from pkg import submodule` is an arrow to the submodule
        child = f"{node.module}.{alias.name}"
        folder = PACKAGE.parent.joinpath(*node.module.split("."))
        if child not in modules and any(folder.glob(f"{alias.name}.*")):
          continue  # the compiled extension: a leaf that imports nothing of ours
        found.add(child if child in modules else node.module)
  return {m for m in found if m in modules}


def _graph() -> dict[str, set[str]]:
  modules = _modules()
  return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _layer(module: str) -> str:
  parts = module.split(".")
  return parts[1] if len(parts) > 1 and parts[1] in UPPER else "core"


def test_no_arrow_from_a_lower_layer_up():
  wrong = []
  for module, targets in _graph().items():
    mine = _layer(module)
    for target in targets:
      theirs = _layer(target)
      if theirs == mine or theirs == "core":
        continue
      if mine == "core" and module == "mjbatch_jax":
        continue  # the package's __init__ reaches every layer (lazily, by attribute)
      if theirs not in UPPER.get(mine, set()):
        wrong.append(f"{module} ({mine}) imports {target} ({theirs})")
  assert not wrong, "\n".join(wrong)


def test_no_cycle():
  graph = _graph()
  # A package's __init__ re-exports its submodules: an arrow into the package from one of its own
  # submodules would be a cycle through __init__, which the walk below finds like any other.
  state: dict[str, int] = {}
  stack: list[str] = []
  cycles = []

  def visit(node: str) -> None:
    state[node] = 1
    stack.append(node)
    for nxt in sorted(graph.get(node, ())):
      if state.get(nxt) == 1:
        cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
      elif nxt not in state:
        visit(nxt)
    stack.pop()
    state[node] = 2

  for node in sorted(graph):
    if node not in state:
      visit(node)
  assert not cycles, "\n".join(cycles)


def test_the_walk_sees_real_arrows():
  # The checks above pass vacuously on an empty graph: the walk must find known arrows.
  graph = _graph()
  assert "mjbatch_jax.functions" in graph["mjbatch_jax.control._plumbing"]
  assert "mjbatch_jax.envs" in graph["mjbatch_jax.agents.ppo"] or any(
    t.startswith("mjbatch_jax.envs") for t in graph["mjbatch_jax.agents.ppo"])
