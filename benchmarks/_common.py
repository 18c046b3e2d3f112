"""What the benchmark scripts share: models and variants, arguments, clocks, machine facts, output.

Scripts import it as `from _common import ...` after putting this folder on sys.path, since
benchmarks/ is not a package (each script runs as `python benchmarks/<script>.py`). _peer.py
imports it too, in the peers' interpreters, so it imports only the standard library at the top.
"""

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
SHARED_MODELS = PROJECT.parent / "shared" / "models"
RESULTS = HERE / "results"


# `humanoid` as a MODEL: DeepMind's MuJoCo humanoid, as the mujoco-warp package ships it (we
# copy no third-party file into the repository). It is looked up in this interpreter and then in
# the interpreters a script is given for its peers, which is where mujoco-warp is installed.
HUMANOID = ("mujoco_warp", "test_data/humanoid/humanoid.xml")
# The model variant that MJX 3.17 can run; see make_mjx_compatible.
MJX_COMPATIBLE = "mjx-compatible"
# A contype/conaffinity bit no shipped model uses: it lets a mesh collide with the world only.
_WORLD_ONLY_BIT = 1 << 30

Case = TypeVar("Case")


def package_file(package: str, relative: str, pythons: Sequence[str] = ()) -> Path | None:
  """The file `relative` inside an installed `package`, in this interpreter or one of `pythons`.

  Another interpreter is asked where the package lives (importlib.util.find_spec, which does not
  import it), so a file that only a peer's venv has can still be read from here.
  """
  locations: list[str] = []
  spec = importlib.util.find_spec(package)
  if spec is not None:
    locations += list(spec.submodule_search_locations or [])
  for python in pythons:
    script = ("import importlib.util, sys; s = importlib.util.find_spec(sys.argv[1]); "
              "print(*((s and s.submodule_search_locations) or []), sep='\\n')")
    try:
      found = subprocess.run([python, "-c", script, package], capture_output=True, text=True,
                             timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
      continue
    locations += [line for line in found.splitlines() if line.strip()]
  for location in locations:
    candidate = Path(location) / relative
    if candidate.is_file():
      return candidate.resolve()
  return None


def resolve_model(name: str, pythons: Sequence[str] = ()) -> tuple[Path | None, Any]:
  """The XML path (None if only a model object is known) and the MjModel of MODEL.

  MODEL is an XML path, a folder under ../shared/models/ (relative to the project root),
  `humanoid` (HUMANOID, found in this interpreter or one of `pythons`), or a MuJoCo Menagerie
  name when the optional `mujoco-menagerie` package is installed.
  """
  import mujoco

  path = Path(name)
  if name == "humanoid" and not path.exists():
    found = package_file(*HUMANOID, pythons=pythons)
    if found is None:
      raise SystemExit(
        f"model 'humanoid' is {HUMANOID[1]} of the {HUMANOID[0]} package, installed neither in "
        "this interpreter nor in the peer interpreters given (pip install mujoco-warp, or pass "
        "--warp-python PATH)"
      )
    return found, mujoco.MjModel.from_xml_path(str(found))
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


class Timing(NamedTuple):
  """Wall and CPU seconds of a timed block; CPU seconds are this process's, all its threads."""

  wall_s: float
  cpu_s: float


def ready(value: Any) -> Any:
  """value once the JAX arrays in it are computed: a jitted call returns before its work ends.

  jax is looked up, not imported: a JAX array exists only once jax is imported, and the peers'
  interpreters (see _peer.py) may not have it at all.
  """
  jax = sys.modules.get("jax")
  return value if jax is None else jax.block_until_ready(value)


class Stopwatch:
  """Wall (perf_counter) and CPU (process_time) seconds since it was made."""

  def __init__(self) -> None:
    self._wall, self._cpu = time.perf_counter(), time.process_time()

  @property
  def wall_s(self) -> float:
    return time.perf_counter() - self._wall

  @property
  def cpu_s(self) -> float:
    return time.process_time() - self._cpu

  def lap(self) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    return Timing(wall - self._wall, cpu - self._cpu)


def run_timed(fn: Callable[..., Any], *args: Any, calls: int = 1) -> tuple[Timing, Any]:
  """The time of `calls` calls of fn(*args), each waited for (see ready), and the last result."""
  clock = Stopwatch()
  value = None
  for _ in range(calls):
    value = ready(fn(*args))
  return clock.lap(), value


def timed(fn: Callable[..., Any], *args: Any, calls: int = 1) -> Timing:
  """The time of `calls` calls of fn(*args), each waited for (see ready)."""
  return run_timed(fn, *args, calls=calls)[0]


def interleaved(cases: Mapping[Case, Callable[[], Any]], repeats: int, calls: int = 1,
                warmup: bool = True, progress: Any = False) -> dict[Case, list[Timing]]:
  """Each case's timings over `repeats` rounds, one block of `calls` calls of every case a round.

  Side by side (A B C A B C ...), so that a change in the machine's load falls on every case
  alike. With warmup each case is called once first (compiled and warm). progress: True, the
  rounds on stderr between the blocks (examples/common.progress: a bar with the time left on a
  terminal, else lines; silent after common.parse of --quiet); or a common.Progress to count
  them on.
  """
  if warmup:
    for run in cases.values():
      ready(run())
  bar = rounds(repeats) if progress is True else progress or None
  timings: dict[Case, list[Timing]] = {name: [] for name in cases}
  try:
    for _ in range(repeats):
      for name, run in cases.items():
        timings[name].append(timed(run, calls=calls))
      if bar is not None:
        bar.update()
  finally:
    if progress is True and bar is not None:
      bar.close()
  return timings


def rounds(repeats: int) -> Any:
  """examples/common.progress of `repeats` rounds (imported here: this module stays standard
  library at import, for the peers' interpreters)."""
  if str(PROJECT / "examples") not in sys.path:
    sys.path.insert(0, str(PROJECT / "examples"))
  import common  # pyright: ignore[reportMissingImports]

  return common.progress(repeats, "repeats", unit="round")


def wall_times(timings: Sequence[Timing]) -> list[float]:
  return [t.wall_s for t in timings]


def cpu_times(timings: Sequence[Timing]) -> list[float]:
  return [t.cpu_s for t in timings]


def median(timings: Sequence[Timing]) -> Timing:
  """The median wall and the median CPU seconds (each of its own, maybe of different blocks)."""
  return Timing(statistics.median(wall_times(timings)), statistics.median(cpu_times(timings)))


def least(timings: Sequence[Timing]) -> Timing:
  """The least wall and the least CPU seconds (each of its own, maybe of different blocks)."""
  return Timing(min(wall_times(timings)), min(cpu_times(timings)))


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


def save_figure(fig: Any, path: Path, dpi: int = 110) -> Path:
  """Lay out fig, write it to path, close it (pyplot keeps every open figure) and say where."""
  import matplotlib.pyplot as plt

  fig.tight_layout()
  fig.savefig(path, dpi=dpi)
  plt.close(fig)
  print(f"wrote {path}")
  return path


def make_mjx_compatible(spec: Any) -> dict[str, Any]:
  """Edits an MjSpec in place into a model that MJX 3.17 steps on CPU; returns what changed.

  Each change answers something MJX 3.17 refused, or could not compile, on the Unitree robots;
  models without those features come through unchanged, and every row of a run then steps the
  same converted model, so that the comparison stays like for like:
  - pyramidal friction cones and condim 3 on every geom and contact pair: MJX raises
    NotImplementedError for condim 1 with elliptic cones (the Go1's); pyramidal cones with
    condim 3 are what MJX's own models use.
  - collidable meshes of the robot collide with the world's geoms (the floor) only: MJX has no
    cylinder-mesh collision (NotImplementedError on the G1's shoulder cylinders against its
    meshes), and without a broadphase it tests every candidate pair in every step: with
    capsules for the cylinders instead, the G1's 24 collision meshes against each other made
    1544 contact slots, whose XLA compile ran out of memory after 4 minutes.
  mujoco is imported by the caller's interpreter, so _peer.py repeats the same conversion with
  its own MuJoCo version.
  """
  import mujoco

  changes: dict[str, Any] = {"cone": None, "condim_to_3": 0,
                             "meshes_colliding_with_world_only": 0}
  if spec.option.cone != mujoco.mjtCone.mjCONE_PYRAMIDAL:
    changes["cone"] = "elliptic -> pyramidal"
    spec.option.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
  world = spec.worldbody.name
  world_geoms, meshes = [], []
  for geom in spec.geoms:
    if geom.condim != 3:
      geom.condim = 3
      changes["condim_to_3"] += 1
    if not (geom.contype or geom.conaffinity):
      continue  # visual only: never collides, MJX never sees it in a pair
    if geom.parent.name == world:
      world_geoms.append(geom)
      continue
    if geom.type == mujoco.mjtGeom.mjGEOM_MESH:
      meshes.append(geom)
  if meshes:
    # Contact needs (contype1 & conaffinity2) or (contype2 & conaffinity1): a mesh with no
    # contype and only the spare bit as conaffinity meets world geoms, which get the bit as
    # contype, and nothing else; the other geoms' bits are left as they were.
    for geom in world_geoms:
      geom.contype |= _WORLD_ONLY_BIT
      geom.conaffinity |= _WORLD_ONLY_BIT
    for geom in meshes:
      geom.contype, geom.conaffinity = 0, _WORLD_ONLY_BIT
    changes["meshes_colliding_with_world_only"] = len(meshes)
  for pair in spec.pairs:
    if pair.condim != 3:
      pair.condim = 3
      changes["condim_to_3"] += 1
  return changes


def load_variant(xml: Path, variant: str | None) -> tuple[Any, dict[str, Any] | None]:
  """The MjModel of `xml` as is (variant None) or converted (MJX_COMPATIBLE), and the changes."""
  import mujoco

  if variant is None:
    return mujoco.MjModel.from_xml_path(str(xml)), None
  if variant != MJX_COMPATIBLE:
    raise ValueError(f"unknown model variant {variant!r}")
  spec = mujoco.MjSpec.from_file(str(xml))
  changes = make_mjx_compatible(spec)
  return spec.compile(), changes
