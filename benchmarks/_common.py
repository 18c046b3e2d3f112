"""What the benchmark scripts share: model lookup, argument types, machine facts, output.

Scripts import it as `from _common import ...` after putting this folder on sys.path, since
benchmarks/ is not a package (each script runs as `python benchmarks/<script>.py`).
"""

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
SHARED_MODELS = PROJECT.parent / "shared" / "models"
RESULTS = HERE / "results"


def resolve_model(name: str) -> tuple[Path | None, Any]:
  """The XML path (None if only a model object is known) and the MjModel of MODEL.

  MODEL is an XML path, a folder under ../shared/models/ (relative to the project root), or a
  MuJoCo Menagerie name when the optional `mujoco-menagerie` package is installed.
  """
  import mujoco

  path = Path(name)
  candidates = [path, PROJECT / path, SHARED_MODELS / name]
  for candidate in candidates:
    if candidate.is_dir():
      candidate = candidate / "scene.xml" if (candidate / "scene.xml").exists() else candidate
      if candidate.is_dir():
        xmls = sorted(candidate.glob("*.xml"))
        if len(xmls) != 1:
          continue
        candidate = xmls[0]
    if candidate.is_file():
      return candidate.resolve(), mujoco.MjModel.from_xml_path(str(candidate))
  if importlib.util.find_spec("mujoco_menagerie") is not None:
    import mujoco_menagerie  # type: ignore[import-not-found]

    loaded = mujoco_menagerie.load(name)
    if isinstance(loaded, mujoco.MjModel):
      return None, loaded
    return Path(loaded).resolve(), mujoco.MjModel.from_xml_path(str(loaded))
  raise SystemExit(
    f"model {name!r} is neither an XML file, a folder under {SHARED_MODELS}, nor (without the "
    "optional mujoco-menagerie package) a Menagerie name"
  )


def model_label(name: str, path: Path | None) -> str:
  """A short name for file names and titles: the model's folder for a scene.xml, else its stem."""
  if path is None:
    return Path(name).name
  return path.parent.name if path.stem == "scene" else path.stem


def int_list(text: str) -> list[int]:
  """argparse type: a comma-separated list of ints >= 1."""
  values = [int(v) for v in text.split(",") if v.strip()]
  if not values or min(values) < 1:
    raise argparse.ArgumentTypeError(f"expected a comma-separated list of ints >= 1, got {text!r}")
  return values


def machine_info(argv: Sequence[str]) -> dict[str, Any]:
  """What a result was measured on and with, for its JSON."""
  import jax
  import mujoco
  import numpy as np

  cpu = platform.processor()
  try:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
  except OSError:
    pass
  try:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT, capture_output=True,
                            text=True, timeout=10).stdout.strip() or None
  except (OSError, subprocess.SubprocessError):
    commit = None
  return {
    "cpu": cpu,
    "logical_cpus": os.cpu_count(),
    "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    "platform": platform.platform(),
    "python": platform.python_version(),
    "jax": jax.__version__,
    "mujoco": mujoco.__version__,
    "numpy": np.__version__,
    "git_commit": commit,
    "command": " ".join([Path(sys.executable).name, *argv]),
  }


def write_result(out_dir: Path, stem: str, result: dict[str, Any]) -> Path:
  """Write result as out_dir/<stem>-<date and time>.json and say where; return the path."""
  out_dir.mkdir(parents=True, exist_ok=True)
  stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
  out = out_dir / f"{stem}-{stamp}.json"
  out.write_text(json.dumps(result, indent=2))
  print(f"wrote {out}")
  return out


def pyplot() -> Any | None:
  """matplotlib.pyplot on the file-only Agg backend, or None when matplotlib is not installed.

  matplotlib is an optional extra (`pip install -e '.[bench]'`): a plain install runs every
  script and writes its JSON, and only the plot is skipped, with one line saying so.
  """
  try:
    import matplotlib
  except ImportError:
    print("no plot: matplotlib is not installed (pip install -e '.[bench]')")
    return None
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt
