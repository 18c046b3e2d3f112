"""Where Playground's locomotion envs find MuJoCo Menagerie's robots, and stand-ins for meshes.

Playground reads robots from a Menagerie checkout, which it would clone from GitHub. `load`
looks for one, in order, at `menagerie=`, then at $MJBATCH_JAX_MENAGERIE, then leaves it to
Playground (its own checkout). A robot there without the visual meshes Playground's XML names
(a Menagerie copy trimmed of its meshes) gets small placeholder meshes for them, with a warning:
those geoms neither collide nor carry mass (the bodies have explicit inertials), so the physics
is that of the full model.
"""

import contextlib
import functools
import importlib
import os
import re
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The environment variable naming a MuJoCo Menagerie checkout (one folder per robot).
MENAGERIE_ENV = "MJBATCH_JAX_MENAGERIE"


@contextlib.contextmanager
def menagerie_for(mjx_env: Any, menagerie: Any) -> Iterator[None]:
  """Within the block, Playground reads Menagerie's robots from the checkout found."""
  root = _find_menagerie(mjx_env, menagerie)
  if root is None:
    yield
    return
  previous = mjx_env.MENAGERIE_PATH
  with tempfile.TemporaryDirectory(prefix="mjbatch_jax_menagerie_") as overlay:
    mjx_env.MENAGERIE_PATH = type(previous)(_overlay(root, Path(overlay)))
    try:
      yield
    finally:
      mjx_env.MENAGERIE_PATH = previous


def _find_menagerie(mjx_env: Any, menagerie: Any) -> Path | None:
  if menagerie is not None:
    path = Path(menagerie)
    if not path.is_dir():
      raise ValueError(f"menagerie must be a MuJoCo Menagerie folder, got {str(path)!r}")
    return path
  if os.environ.get(MENAGERIE_ENV):
    path = Path(os.environ[MENAGERIE_ENV])
    if not path.is_dir():
      raise ValueError(f"${MENAGERIE_ENV} must name a MuJoCo Menagerie folder, got {str(path)!r}")
    return path
  return None  # Playground's own checkout (cloned by Playground where missing)


def _overlay(root: Path, overlay: Path) -> Path:
  """A Menagerie folder of links into root, with placeholders for visual meshes root lacks."""
  needed = _meshes_playground_names()
  for robot in sorted(p for p in root.iterdir() if p.is_dir()):
    target = overlay / robot.name
    target.mkdir()
    for item in robot.iterdir():
      if item.name != "assets":
        (target / item.name).symlink_to(item.resolve())
    assets = target / "assets"
    assets.mkdir()
    have = {p.name: p for p in (robot / "assets").iterdir()} if (robot / "assets").is_dir() else {}
    for file_name, path in have.items():
      (assets / file_name).symlink_to(path.resolve())
    for file_name in sorted(needed.get(robot.name, set()) - set(have)):
        (assets / file_name).write_bytes(PLACEHOLDER_STL)
  return overlay


@functools.cache
def _meshes_playground_names() -> dict[str, set[str]]:
  """Menagerie mesh files Playground's XMLs name, by robot folder."""
  mujoco_playground = importlib.import_module("mujoco_playground")
  pattern = re.compile(r'file="[^"]*mujoco_menagerie/([^/"]+)/assets/([^"/]+)"')
  out: dict[str, set[str]] = {}
  for xml in Path(str(mujoco_playground.__file__)).parent.rglob("*.xml"):
    for robot, file_name in pattern.findall(xml.read_text(errors="replace")):
      out.setdefault(robot, set()).add(file_name)
  return out


def _tetrahedron_stl(size: float = 0.01) -> bytes:
  """A binary STL of a small tetrahedron with outward faces."""
  a, b, c, d = (0, 0, 0), (size, 0, 0), (0, size, 0), (0, 0, size)
  faces = ((a, c, b), (a, b, d), (a, d, c), (b, c, d))
  out = bytearray(b"mjbatch_jax placeholder mesh".ljust(80, b" "))
  out += struct.pack("<I", len(faces))
  for face in faces:
    out += struct.pack("<3f", 0.0, 0.0, 0.0)
    for vertex in face:
      out += struct.pack("<3f", *vertex)
    out += struct.pack("<H", 0)
  return bytes(out)


PLACEHOLDER_STL = _tetrahedron_stl()
