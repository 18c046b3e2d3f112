"""What the examples share: paths, command-line flags, saved results, timing, plots and videos.

An example holds its task (model, cost or reward, what it prints); this module holds the rest, once.
Examples run as scripts from this folder, so they import it as `import common`:

  parser = common.example_parser("my_task", "What it does.")   # --threads, --seed, --play, ...
  args = common.parse(parser, argv)               # args.out defaults to results/my_task.npz
  common.save_result(args.out, "my_task", {"ctrl": ctrl}, {"cost": cost}, version=VERSION)
  arrays, meta = common.load_result(args.out, "my_task", version=VERSION)
  print(common.render(model, rows, args.out.with_suffix(".gif")))
  with common.progress(iterations, "search", args) as bar:   # a bar or plain lines on stderr
    for i in range(iterations):
      bar.update(postfix=f"best {best:.3f}")      # bar.write(line): a log line, above the bar
"""

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO, cast

# Videos render headless; the GL backend is chosen when mujoco is first imported.
os.environ.setdefault("MUJOCO_GL", "egl")

import jax  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from mjbatch_jax import archive, ensemble, motion, randomize  # noqa: E402
from mjbatch_jax.distributed import model_digest  # noqa: E402
from mjbatch_jax.motion.sensors import PREFIX as FLOOR_CONTACT  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent
RESULTS = EXAMPLES / "results"
# MuJoCo Menagerie's robots, in the folder ../shared/models beside the checkout.
MODELS = EXAMPLES.parents[1] / "shared" / "models"
G1_SCENE = MODELS / "unitree_g1" / "scene.xml"
GO1_SCENE = MODELS / "unitree_go1" / "scene.xml"

# The G1 whole-body trackers' cost (g1_tracking, g1_backflip: motion.tracking_cost's arguments):
# twelve bodies, the pelvis first; weights per m^2 and rad^2 (the pelvis loose on the floor,
# tight in height), and where each body's cost turns from quadratic to linear (the root's in
# weighted z-metres).
G1_TRACKED = ("pelvis", "torso_link", "left_knee_link", "right_knee_link", "left_ankle_roll_link",
              "right_ankle_roll_link", "left_shoulder_roll_link", "right_shoulder_roll_link",
              "left_elbow_link", "right_elbow_link", "left_wrist_yaw_link", "right_wrist_yaw_link")
G1_TRACKING = {"pos_weight": np.array([[1.0, 1.0, 1000.0]] + [[100.0] * 3] * 11),
               "rot_weight": 10.0, "ctrl_weight": 0.01, "pos_threshold": 0.05,
               "rot_threshold": 0.25}


def g1_tracking_parts() -> tuple:
  """G1_TRACKING's values in the order the saved plans' fingerprints have always listed them."""
  c = G1_TRACKING
  return (c["pos_weight"].tolist(), c["rot_weight"], c["ctrl_weight"], c["pos_threshold"],
          c["rot_threshold"])


def g1_robots(sim: Any, seeds: dict[str, int] | None = None) -> ensemble.Ensemble:
  """The G1 examples' randomised robots: link masses x[0.9, 1.1] and the floor's sliding friction
  in [0.6, 1.0] (the feet's own friction is the contacts' when it is higher); seeds per purpose
  as ensemble.Ensemble takes them (None: its defaults)."""
  friction = sim.model.geom_friction[sim.model.geom("floor").id]
  draw = functools.partial(randomize, scale={"body_mass": (0.9, 1.1)}, uniform={
    "geom_friction": (np.r_[0.6, friction[1:]], np.r_[1.0, friction[1:]])})
  return ensemble.Ensemble(sim, ("body_mass", "geom_friction"), draw,
                           select={"geom_friction": ["floor"]}, set_const=True, seeds=seeds)


def g1_at_rest(sim: Any, qpos: Any) -> Any:
  """A state row at rest in the G1's pose qpos (nq,), its servos holding the pose's angles."""
  return sim.init_state(1)[0].at[sim.layout.qpos].set(qpos).at[sim.layout.ctrl].set(qpos[7:])


def g1_ik_posture(model: mujoco.MjModel) -> np.ndarray:
  """The G1's standing keyframe with the legs bent (hip pitch -0.3, knee 0.6, ankle pitch -0.3
  rad): its straight knees are singular for an IK, whose posture task pulls away from them."""
  posture = model.key_qpos[0].copy()
  for side in ("left", "right"):
    for joint, angle in (("hip_pitch", -0.3), ("knee", 0.6), ("ankle_pitch", -0.3)):
      posture[model.joint(f"{side}_{joint}_joint").qposadr[0]] = angle
  return posture


G1_FEET = {"left foot": "left_ankle_roll_link", "right foot": "right_ankle_roll_link"}


def g1_scene(path: "str | Path | None", bodies: Sequence[str] = ()) -> mujoco.MjModel:
  """The G1's scene (path, or the shared models') with floor-contact sensors on G1_FEET and the
  whole robot (motion.floor_contact_sensors; g1_floor_columns). SystemExit saying what is wrong
  when the model lacks the feet, bodies, a floor, a free root, one position servo per hinge or
  gravity along -z."""
  path = robot_scene(path, "unitree_g1")
  try:
    spec = mujoco.MjSpec.from_file(str(path))
  except ValueError as e:
    raise SystemExit(f"{path}: MuJoCo cannot load it: {_first_line(e)}") from None
  missing = sorted(set(bodies).union(G1_FEET.values()) - {b.name for b in spec.bodies})
  if missing:
    raise SystemExit(f"{path} has no bodies named {missing}: the task names the Unitree G1's "
                     "bodies")
  try:
    motion.floor_contact_sensors(spec, G1_FEET, robot="pelvis")
  except ValueError as e:
    raise SystemExit(f"{path}: {e} (the G1's scene.xml has a floor)") from None
  try:
    model = spec.compile()
  except ValueError as e:
    raise SystemExit(f"{path}: MuJoCo cannot compile it: {_first_line(e)}") from None
  servo = (model.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT) & np.isclose(
    model.actuator_gainprm[:, 0], -model.actuator_biasprm[:, 1])
  free = model.jnt_type == mujoco.mjtJoint.mjJNT_FREE
  if not free[0] or free[1:].any() or model.nu != model.nv - 6 or not servo.all():
    raise SystemExit(f"{path}: expected a free root and one position servo per hinge (the G1)")
  if np.any(model.opt.gravity[:2] != 0) or model.opt.gravity[2] >= 0:
    raise SystemExit(f"{path}: expected gravity along -z, got {model.opt.gravity.tolist()}")
  return model


def g1_floor_columns(model: mujoco.MjModel) -> np.ndarray:
  """The sensordata columns of g1_scene's floor contacts: left foot, right foot, the robot."""
  return np.array([model.sensor(f"{FLOOR_CONTACT} {label}").adr[0]
                   for label in (*G1_FEET, "robot")])


def g1_synergies(model: mujoco.MjModel, joints: Sequence[str]) -> np.ndarray:
  """(len(joints), nu) 0 or 1: each synergy's position servos, both sides alike ("knee": the
  left and right knees; a waist joint: itself). SystemExit naming the servos the model lacks."""
  index = {model.actuator(i).name: i for i in range(model.nu)}
  out = np.zeros((len(joints), model.nu))
  for row, joint in zip(out, joints, strict=True):
    names = [f"{joint}_joint"] if joint.startswith("waist") else [
      f"{side}_{joint}_joint" for side in ("left", "right")]
    if missing := [n for n in names if n not in index]:
      raise SystemExit(f"the model has no actuators {missing}: the task names the G1's servos")
    row[[index[n] for n in names]] = 1.0
  return out


def g1_labels(bodies: Sequence[str]) -> tuple[str, ...]:
  """Short names of G1 bodies for tables: "left ankle", "right hand"."""
  return tuple(n.replace("_link", "").replace("_roll", "").replace("wrist_yaw", "hand")
               .replace("_", " ") for n in bodies)


def robot_scene(path: "str | Path | None", name: str) -> Path:
  """path, or the shared models' <name>/scene.xml; SystemExit saying where to get it if absent."""
  scene = Path(path) if path is not None else MODELS / name / "scene.xml"
  if not scene.is_file():
    raise SystemExit(f"no model at {scene}: pass --model PATH to {name}'s scene.xml (MuJoCo "
                     f"Menagerie's {name}, expected in {MODELS})")
  return scene


def load_scene(path: "str | Path | None", name: str, bodies: Sequence[str] = ()
               ) -> mujoco.MjModel:
  """robot_scene(path, name) compiled, with a keyframe to start from and the bodies the task
  names; SystemExit saying what is wrong otherwise (not MuJoCo's XML, another robot)."""
  scene = robot_scene(path, name)
  try:
    model = mujoco.MjModel.from_xml_path(str(scene))
  except ValueError as e:
    raise SystemExit(f"{scene}: MuJoCo cannot load it: {_first_line(e)}") from None
  missing = [b for b in bodies if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, b) < 0]
  if missing:
    raise SystemExit(f"{scene} has no bodies named {missing}: the task names the {name}'s "
                     f"bodies")
  if model.nkey == 0:
    raise SystemExit(f"{scene} has no keyframe: the task starts from the {name}'s first one")
  return model


# -- the command line ----------------------------------------------------------------------------


def int_in(lo: int, hi: int, what: str) -> Callable[[str], int]:
  """An argparse type: an integer in [lo, hi], refused with a message naming what it is."""

  def parse(text: str) -> int:
    try:
      value = int(text)
    except ValueError:
      value = None
    if value is None or not lo <= value <= hi:
      raise argparse.ArgumentTypeError(f"must be an integer in [{lo}, {hi}] ({what}), got "
                                       f"{text!r}")
    return value

  return parse


def positive_float(what: str) -> Callable[[str], float]:
  """An argparse type: a finite number > 0."""

  def parse(text: str) -> float:
    try:
      value = float(text)
    except ValueError:
      value = float("nan")
    if not (np.isfinite(value) and value > 0):
      raise argparse.ArgumentTypeError(f"must be a finite number > 0 ({what}), got {text!r}")
    return value

  return parse


def available_memory() -> int | None:
  """Bytes this machine can still give a process (Linux's MemAvailable), None where unknown."""
  try:
    with open("/proc/meminfo") as meminfo:
      for line in meminfo:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    pass
  return None


def check_memory(need: float, what: str) -> None:
  """SystemExit when `what` needs more bytes than the machine has available: before a run that
  XLA would stop midway (RESOURCE_EXHAUSTED) or the kernel would end (the OOM killer).

    common.check_memory(per_design * designs, f"--population {n} x --restarts {r}")
  """
  have = available_memory()
  if have is not None and need > have:
    raise SystemExit(f"{what} needs about {need / 1e9:.3g} GB at once, more than the "
                     f"{have / 1e9:.3g} GB this machine has available: ask for fewer")


def process_seconds() -> float:
  """Wall seconds since this process started, interpreter start-up and imports included.

  Linux's /proc gives the start (to 10 ms); elsewhere, since this module was imported.
  """
  try:
    start_ticks = float(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
  except (OSError, ValueError, IndexError):
    return time.perf_counter() - _IMPORTED


_IMPORTED = time.perf_counter()


def add_standard_args(parser: argparse.ArgumentParser, name: str, threads: int = 0) -> None:
  """--threads, --seed, --results, --out and --play, the flags every solver example has.

  parse() fills args.out with RESULTS/<name>.npz (under --results) when it is not given.
  """
  cpus = os.cpu_count() or 1
  parser.add_argument("--threads", type=int_in(0, 4 * cpus, "physics threads, 0: one per CPU"),
                      default=threads, help=f"physics threads (default {threads}; 0: one per CPU)")
  parser.add_argument("--seed", type=int_in(0, 2**32 - 1, "random seed"), default=0,
                      help="random seed (default 0)")
  parser.add_argument("--results", type=Path, default=RESULTS,
                      help="folder for the result, its plot and video (default examples/results)")
  parser.add_argument("--out", type=Path, default=None,
                      help=f"the result file to write, or with --play to replay (default "
                           f"RESULTS/{name}.npz)")
  parser.add_argument("--play", action="store_true",
                      help="replay the saved result headless: metrics, plot and video")
  add_progress_args(parser)
  parser.set_defaults(result_name=name)


def add_progress_args(parser: argparse.ArgumentParser) -> None:
  """--quiet: no progress (bar or lines) and no per-iteration lines; results and the summary
  stay. add_standard_args adds it; scripts with parsers of their own (benchmarks) call this."""
  parser.add_argument("--quiet", action="store_true",
                      help="no progress bar or progress lines and no per-iteration lines (the "
                           "results and the last JSON line stay)")


def add_mpc_args(parser: argparse.ArgumentParser, steps: int, method: str = "predictive"
                 ) -> None:
  """--steps (control steps) and --method (control.sampling's) of a receding-horizon example."""
  parser.add_argument("--steps", type=int_in(1, 10**6, "control steps"), default=steps,
                      help=f"control steps (default {steps})")
  parser.add_argument("--method", choices=("predictive", "mppi", "cem"), default=method,
                      help=f"the sampling planner (default {method})")


def example_parser(name: str, description: str | None, threads: int = 0,
                   mpc_steps: int | None = None, robot: str | None = None
                   ) -> argparse.ArgumentParser:
  """An ArgumentParser with add_standard_args' flags and, given mpc_steps, add_mpc_args' ones;
  given robot (a folder of the shared models), --model: its scene.xml, default None (the shared
  one; robot_scene finds it).

    args = common.parse(common.example_parser("my_mpc", __doc__, mpc_steps=150), argv)
  """
  parser = argparse.ArgumentParser(description=description)
  add_standard_args(parser, name, threads)
  if robot is not None:
    parser.add_argument("--model", type=Path, default=None,
                        help=f"the robot's scene.xml (default: {robot}/scene.xml of the shared "
                             f"models, {MODELS})")
  if mpc_steps is not None:
    add_mpc_args(parser, mpc_steps)
  return parser


def config_flags(parser: argparse.ArgumentParser, config: Any,
                 flags: dict[str, tuple[int, int, str]]) -> None:
  """An integer flag per named field of a frozen config dataclass: {field: (lo, hi, what)} gives
  --field-name in [lo, hi], defaulting to config's value; config_from reads them back.

  Raises:
    ValueError: config lacks a field, or its value is no integer in [lo, hi] (argparse does not
      check defaults: the run would use a value its flag refuses).
  """
  for field, (lo, hi, what) in flags.items():
    flag = f"--{field.replace('_', '-')}"
    if not hasattr(config, field):
      raise ValueError(f"config_flags: {type(config).__name__} has no field {field!r} for {flag}")
    default = getattr(config, field)
    if (isinstance(default, bool) or not isinstance(default, int | np.integer)
        or not lo <= default <= hi):
      raise ValueError(f"config_flags: {type(config).__name__}.{field} must be an integer in "
                       f"[{lo}, {hi}] ({what}), the range of {flag}, got {default!r}")
    parser.add_argument(flag, dest=field, type=int_in(lo, hi, what),
                        default=default, help=f"{what} (default {default})")


def config_from(args: argparse.Namespace, config: Any, flags: Iterable[str]) -> Any:
  """config with the fields config_flags added as flags set from args."""
  return dataclasses.replace(config, **{field: getattr(args, field) for field in flags})


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, *,
          replaceable: Callable[[Path], bool] | None = None) -> argparse.Namespace:
  """parser.parse_args, with args.out defaulting to RESULTS/<name>.npz; progress() without args
  follows its --quiet.

  --out is checked before any work: an .npz name (its JSON, plot and video go beside it under
  other suffixes, so no output can overwrite the result) and, unless --play, a place a file can
  be written that holds nothing else: an existing file there is overwritten only if
  replaceable(path) (default: it is a result this example saved).
  """
  global _QUIET
  args = parser.parse_args(argv)
  _QUIET = bool(getattr(args, "quiet", False))
  if hasattr(args, "result_name"):
    if args.out is None:
      args.out = args.results / f"{args.result_name}.npz"
    _check_out(parser, args, replaceable or functools.partial(_is_result, args.result_name))
  return args


def _is_result(kind: str, path: Path) -> bool:
  try:
    return archive.read(path)[1].get("kind") == kind
  except ValueError:
    return False


def _check_out(parser: argparse.ArgumentParser, args: argparse.Namespace,
               replaceable: Callable[[Path], bool]) -> None:
  out = args.out
  if out.suffix != ".npz":
    parser.error(f"--out must name an .npz file (the result; its JSON, plot and video are "
                 f"written beside it), got {out}")
  if getattr(args, "play", False):
    return  # load_result says what is wrong with it
  try:
    archive.check_writable(out, "--out")
  except ValueError as e:
    parser.error(str(e))
  if out.exists() and not replaceable(out):
    parser.error(f"--out {out} exists and is not a {args.result_name} result: not overwriting "
                 f"it (remove it or give another --out)")


# -- saved results -------------------------------------------------------------------------------


def fingerprint(*parts: Any) -> str:
  """A short hash of what a result depends on (model XML, constants), to refuse stale results."""
  return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def model_fingerprint(model: mujoco.MjModel, *parts: Any) -> str:
  """fingerprint() of a compiled model (mjbatch_jax's model_digest: every field, not where its
  files were loaded from) and of parts."""
  return fingerprint(model_digest(model), *parts)


def save_result(path: Path, kind: str, arrays: dict[str, Any], meta: dict[str, Any] | None = None,
                version: str = "") -> Path:
  """Write arrays and JSON metadata to path (.npz) atomically: never a half-written file."""
  header = {"kind": kind, "version": version, "meta": archive.plain(meta or {})}
  return archive.write(path, arrays, header, compress=True)


def config_meta(config: Any) -> dict[str, Any]:
  """A frozen config dataclass as a result's meta records it: its fields as JSON keeps them
  (tuples as lists) under "config", and their fingerprint under "config_fingerprint"."""
  record = json.loads(json.dumps(archive.plain(dataclasses.asdict(config))))
  return {"config": record, "config_fingerprint": fingerprint(record)}


def load_result(path: Path, kind: str, version: str | None = None,
                keys: Sequence[str] | dict[str, tuple] = (), config: Any = None
                ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """(arrays, meta) of a result saved by save_result; SystemExit saying why it cannot be used.

  Args:
    path: the .npz file.
    kind: the example that must have saved it.
    version: if given, the fingerprint it must have been saved with (model and constants).
    keys: arrays it must hold; a dict also gives each one's shape, as check_arrays takes it.
    config: if given, the config dataclass whose config_meta the result's meta must hold; the
      refusal names the fields that differ.
  """
  path = Path(path)
  if not path.is_file():
    raise SystemExit(f"no result file {path}: run the example without --play first to make it")
  try:
    arrays, header = archive.read(path, what="a result saved by an example")
  except ValueError as e:
    raise SystemExit(str(e)) from None
  if header.get("kind") != kind:
    raise SystemExit(f"{path} is a {header.get('kind')!r} result, not a {kind!r} one")
  meta = header.get("meta", {})
  if not isinstance(meta, dict):
    raise SystemExit(f"{path}: its metadata is not a JSON object; solve again")
  if config is not None:  # before the version, which may hold the config: name what differs
    want = config_meta(config)
    ours, theirs = want["config"], meta.get("config", {})
    theirs = theirs if isinstance(theirs, dict) else {}
    differ = sorted(k for k in ours.keys() | theirs.keys() if theirs.get(k) != ours.get(k))
    if differ or meta.get("config_fingerprint", want["config_fingerprint"]) != (
        want["config_fingerprint"]):
      shown = ", ".join(f"{k} (saved {theirs.get(k)!r}, here {ours.get(k)!r})" for k in differ)
      raise SystemExit(f"{path} was solved with another config: "
                       f"{shown or 'its record differs'}; give the same options or solve again")
  if version is not None and header.get("version") != version:
    raise SystemExit(f"{path} was saved for another version of the model or task "
                     f"({header.get('version')}, this script's is {version}): solve again")
  missing = [key for key in ([keys] if isinstance(keys, str) else keys) if key not in arrays]
  if missing:
    raise SystemExit(f"{path} lacks {missing}: it was saved by an older {kind}; solve again")
  if isinstance(keys, dict):
    check_arrays(path, arrays, keys)
  return arrays, meta


_SIZE = re.compile(r"([A-Za-z_]\w*)(?:\+(\d+))?")


def _size_name(want: str) -> tuple[str, int]:
  match = _SIZE.fullmatch(want)
  if match is None:
    raise ValueError(f"check_arrays: a size's name must be a name or name+k, got {want!r}")
  return match[1], int(match[2] or 0)


def check_arrays(path: Path, arrays: dict[str, np.ndarray], shapes: dict[str, tuple]) -> None:
  """SystemExit unless each array named in shapes is finite real numbers of its shape.

  The version a result is loaded with says which code and model saved it, not that its arrays
  are whole: a file edited or written by another program would fail late, deep in a replay, or
  replay into a silent wrong answer (a NaN control). A shape's entries: an int (that size), None
  (any), or a name (a size >= 1, the same wherever the name appears; "T+1" is one more):

    check_arrays(path, arrays, {"ctrl": ("T", nu), "states": ("T+1", nstate)})
  """
  sizes: dict[str, tuple[int, str]] = {}  # name -> (its size, the array it was read from)
  for key, shape in shapes.items():
    if key not in arrays:
      raise SystemExit(f"{path} lacks {key!r}: solve again")
    array, what = arrays[key], f"{path}: its {key!r}"
    if array.dtype.kind not in "biuf":
      raise SystemExit(f"{what} holds {array.dtype}, not real numbers; solve again")
    fits = array.ndim == len(shape)
    for size, want in zip(array.shape, shape, strict=False):
      if isinstance(want, str):
        name, plus = _size_name(want)
        if name not in sizes and size - plus >= 1:
          sizes[name] = (size - plus, key)
        want = sizes[name][0] + plus if name in sizes else None
        fits = fits and name in sizes
      fits = fits and want in (None, size)
    if not fits:
      named = [f"{name} = {sizes[name][0]} (from {sizes[name][1]!r})" for name in
               dict.fromkeys(_size_name(w)[0] for w in shape if isinstance(w, str))
               if name in sizes]
      raise SystemExit(f"{what} has shape {array.shape}, expected "
                       f"({', '.join('any' if w is None else str(w) for w in shape)}"
                       f"{',' if len(shape) == 1 else ''})"
                       f"{' where ' + ', '.join(named) if named else ''}; solve again")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
      raise SystemExit(f"{what} holds NaN or infinity; solve again")


def _strict(value: Any) -> Any:
  """A plain value (archive.plain's) with every non-finite float (inf, -inf, nan) made None:
  JSON's null, where Python would write Infinity or NaN, which strict JSON parsers (JavaScript's,
  jq) refuse."""
  if isinstance(value, dict):
    return {k: _strict(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_strict(v) for v in value]
  if isinstance(value, float) and not np.isfinite(value):
    return None
  return value


def _json(value: Any, indent: int | None = None) -> str:
  """value as strict JSON (see _strict); allow_nan=False: a float that slipped through fails
  here rather than in the reader."""
  return json.dumps(_strict(archive.plain(value)), indent=indent, allow_nan=False)


def write_json(path: Path, value: Any) -> Path:
  """value as indented strict JSON at path, written whole or not at all (a temporary file
  renamed over it).

  numpy and JAX values are made plain, and non-finite floats (Python's, numpy scalars, inside
  arrays) become null: strict JSON has no Infinity or NaN (g1_jump --iterations 0's best value
  is inf).
  """
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  text = _json(value, indent=2) + "\n"
  temporary = path.with_name(f".{path.name}.tmp")
  try:
    temporary.write_text(text)
    os.replace(temporary, path)
  finally:
    temporary.unlink(missing_ok=True)
  return path


def print_summary(value: dict[str, Any]) -> None:
  """value as one line of strict JSON on stdout: the last line an example prints, for scripts
  and tests. As write_json: numpy and JAX values made plain, non-finite floats null."""
  print(_json(value), flush=True)


# -- timing --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Stopwatch:
  """Wall and CPU seconds (all of the process's threads: XLA's and MuJoCo's) of a block."""

  wall: float = 0.0
  cpu: float = 0.0

  @contextlib.contextmanager
  def __call__(self) -> Iterator["Stopwatch"]:
    wall, cpu = time.perf_counter(), time.process_time()
    try:
      yield self
    finally:
      self.wall += time.perf_counter() - wall
      self.cpu += time.process_time() - cpu


def timed(*calls: tuple, repeats: int = 3) -> list[float]:
  """Least CPU seconds of each (fn, *args) call, compiled first, the calls interleaved.

  On a shared machine wall time measures the neighbours as much as the call; CPU time of all
  threads does not, and interleaving keeps slow drifts out of the ratios.
  """
  for fn, *args in calls:
    jax.block_until_ready(fn(*args))
  spent: list[list[float]] = [[] for _ in calls]
  for _ in range(repeats):
    for (fn, *args), times in zip(calls, spent, strict=True):
      begin = time.process_time()
      jax.block_until_ready(fn(*args))
      times.append(time.process_time() - begin)
  return [float(np.min(t)) for t in spent]


def _finite_number(value: Any) -> bool:
  """Whether value is one finite real number (a Python or numpy int or float, not a bool)."""
  return (isinstance(value, int | float | np.integer | np.floating)
          and not isinstance(value, bool) and bool(np.isfinite(value)))


def secant(f: Callable[[float], tuple[float, Any]], x0: float, x1: float, *,
           done: Callable[[float, Any], bool], tries: int = 12) -> tuple[float, Any, list[float]]:
  """A root of a scalar equation by secant steps from x0 and x1; (x, f's payload there, misses).

  f(x) returns (miss, payload); done(miss, payload) ends the search, as do `tries` calls. Once
  two misses differ in sign, a step is kept inside the closest such bracket (bisected when the
  secant leaves it), so that a kink in the miss cannot throw the search far away.

    x, out, misses = secant(lambda x: (x * x - 2, None), 1.0, 2.0,
                            done=lambda miss, _: abs(miss) < 1e-9)

  Raises:
    ValueError: x0 and x1 are not two different finite numbers (the first secant step divides
      by their difference), or tries is not an int >= 1.
  """
  if not (_finite_number(x0) and _finite_number(x1)) or x0 == x1:
    raise ValueError(f"secant: x0 and x1 must be two different finite numbers (the first "
                     f"secant step divides by x1 - x0), got x0={x0!r} and x1={x1!r}")
  if isinstance(tries, bool) or not isinstance(tries, int | np.integer) or tries < 1:
    raise ValueError(f"secant: tries must be an int >= 1 (calls of f at most), got {tries!r}")
  guesses, misses, bracket = [x0, x1], [], None
  while True:
    x = guesses[len(misses)]
    miss, payload = f(x)
    misses.append(miss)
    if done(miss, payload) or len(misses) == tries:
      return x, payload, misses
    for other, earlier in zip(guesses[:len(misses) - 1], misses[:-1], strict=True):
      if earlier * miss < 0 and (bracket is None or abs(other - x) < abs(bracket[1] - bracket[0])):
        bracket = (other, x)
    if len(misses) >= 2:
      slope = (misses[-1] - misses[-2]) / (guesses[len(misses) - 1] - guesses[len(misses) - 2])
      step = guesses[len(misses) - 1] - misses[-1] / slope
      if bracket is not None and not min(bracket) < step < max(bracket):
        step = 0.5 * sum(bracket)
      guesses.append(step)


# -- progress ------------------------------------------------------------------------------------

_QUIET = False  # the last parse()'s --quiet: what progress() follows without args


def duration(seconds: float) -> str:
  """Seconds as people read them: "42 s", "4 min 05 s", "1 h 02 min"."""
  s = max(0, round(seconds))
  if s < 60:
    return f"{s} s"
  if s < 3600:
    return f"{s // 60} min {s % 60:02d} s"
  return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
  """How far a long loop is and about how long it has left, on stderr (or stream).

  On a terminal (stream.isatty()) with tqdm installed: a tqdm bar with the time elapsed and left.
  Otherwise (a file, a pipe, CI): plain lines

    <desc> 12/60 (20%), elapsed 1 min 10 s, about 4 min 40 s left: <postfix>

  at most one every `interval` seconds (the gap grows to a tenth of the time elapsed, at most a
  minute), and one when it closes; plain: those lines on a terminal too (several processes
  sharing one). quiet: nothing at all. The plain lines' estimate leaves out the time up to the
  first update (where JAX compiles); tqdm's smooths it away.

  The loop's own log lines go through write(): above the bar on a terminal, else to stdout as
  print() would; quiet drops them. Nothing here touches what the loop computes.

  Attributes:
    n: the count so far.
    total: the count at the end (None: unknown, no estimate).
    bar: the tqdm bar, or None (plain lines or quiet).
  """

  def __init__(self, total: int | None, desc: str, *, quiet: bool = False,
               stream: TextIO | None = None, unit: str = "it", interval: float = 10.0,
               initial: int = 0, plain: bool = False,
               clock: Callable[[], float] = time.monotonic):
    self.total, self.desc, self.quiet, self.unit = total, desc, quiet, unit
    self.stream = sys.stderr if stream is None else stream
    self.interval, self.n, self.postfix, self._initial = interval, initial, "", initial
    self._clock = clock
    self._start = self._last = clock()
    self._first: tuple[float, int] | None = None  # (time, n) at the first update
    self._closed = False
    self.bar: Any = None
    if quiet or plain or not _isatty(self.stream):
      return
    tqdm = _tqdm()
    if tqdm is None:  # plain lines, as on a file
      return
    known = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed} elapsed, {remaining} left{postfix}]"
    # A terminal of no size (a pseudo-terminal nobody sized) would hide the bar: 100 x 20.
    sized = _columns(self.stream) > 0
    self.bar = tqdm(total=total, desc=desc, unit=unit, initial=initial, file=self.stream,
                    dynamic_ncols=sized, ncols=None if sized else 100,
                    nrows=None if sized else 20, bar_format=known if total else None)

  @property
  def total(self) -> int | None:
    """The count at the end; set it when the loop learns how long it is (bar.n + what is
    left)."""
    return self._total

  @total.setter
  def total(self, total: int | None) -> None:
    self._total = total
    if getattr(self, "bar", None) is not None:
      self.bar.total = total
      self.bar.refresh()

  def __enter__(self) -> "Progress":
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()

  def update(self, n: int = 1, postfix: str | None = None) -> None:
    """Counts n more done; postfix (if given): a short note shown after the count."""
    self.to(self.n + n, postfix)

  def to(self, n: int, postfix: str | None = None) -> None:
    """The count is now n (a log that reports every k-th iteration, a resumed run)."""
    if postfix is not None:
      self.postfix = postfix
    if self.bar is not None:
      if postfix is not None:
        self.bar.set_postfix_str(postfix, refresh=False)
      self.bar.update(n - self.n)
    self.n = n
    if self.bar is not None or self.quiet:
      return
    now = self._clock()
    if self._first is None:
      self._first = (now, n)
    gap = max(self.interval, min(60.0, (now - self._start) / 10))
    finished = self.total is not None and n >= self.total  # close() says so
    if now - self._last >= gap and not finished:
      self._last = now
      self._say(self.line(now))

  def left(self, now: float | None = None) -> float | None:
    """Seconds the rest should take at the rate since the first update (the first update's
    own rate while there is no other), or None (no total, nothing done yet)."""
    now = self._clock() if now is None else now
    if self.total is None or self._first is None:
      return None
    since, done = (now - self._first[0], self.n - self._first[1])
    if done <= 0:
      since, done = now - self._start, self.n - self._initial
    return since / done * max(self.total - self.n, 0) if done > 0 else None

  def line(self, now: float | None = None, done: bool = False) -> str:
    """The plain line of where it is now."""
    now = self._clock() if now is None else now
    elapsed = duration(now - self._start)
    if self.total is None:
      text = f"{self.desc} {self.n} {self.unit}"
    else:
      text = f"{self.desc} {self.n}/{self.total} ({100 * self.n / max(self.total, 1):.0f}%)"
    left = None if done else self.left(now)
    text += (f", done in {elapsed}" if done else f", elapsed {elapsed}"
             + ("" if left is None else f", about {duration(left)} left"))
    return text + (f": {self.postfix}" if self.postfix else "")

  def write(self, line: str, keep: bool = False, file: TextIO | None = None) -> None:
    """One of the loop's log lines: above the bar, or to file (default stdout); nothing when
    quiet unless keep (a result, not progress: printed under --quiet too)."""
    if self.quiet and not keep:
      return
    out = _real_stdout() if file is None else file
    if self.bar is not None:
      self.bar.write(line, file=out)
    else:
      out.write(line + "\n")
    out.flush()

  def close(self) -> None:
    """Ends the bar (it stays on screen), or writes the last plain line."""
    if self._closed:
      return
    self._closed = True
    if self.bar is not None:
      self.bar.close()
    elif not self.quiet:
      self._say(self.line(done=True))

  @contextlib.contextmanager
  def follow(self, pattern: str, echo: bool = True) -> Iterator["Progress"]:
    """Counts the lines printed to stdout (in any thread) that match pattern, in the block.

    For loops that print a line per iteration and take no callback (control.ilqr's verbose
    jax.debug.print, a library's optimiser): the group named n (or the first group) is the
    count, a line without one adds 1; other named groups become the postfix. Matching lines go
    through write() (echo) or nowhere; the others to stdout as before.

      with bar.follow(r"iLQR iteration (?P<n>\\d+): (?P<cost>cost \\S+)"):
        control.ilqr(..., verbose=True)
    """
    regex = re.compile(pattern)
    real = sys.stdout
    lines = _Lines(real, regex, self, echo)
    sys.stdout = cast(TextIO, lines)
    try:
      yield self
      jax.effects_barrier()  # jax.debug.print's lines of the block are all out
    finally:
      lines.flush()
      sys.stdout = real

  def _say(self, text: str) -> None:
    try:
      self.stream.write(text + "\n")
      self.stream.flush()
    except (OSError, ValueError):  # a closed stream: progress never fails the run
      pass


class _Lines:
  """sys.stdout while Progress.follow counts lines; all else goes to the real stdout."""

  def __init__(self, real: TextIO, regex: re.Pattern, progress: Progress, echo: bool):
    self.real, self.regex, self.progress, self.echo = real, regex, progress, echo
    self.pending, self.lock = "", threading.Lock()

  def write(self, text: str) -> int:
    with self.lock:
      *complete, self.pending = (self.pending + text).split("\n")
      for line in complete:
        self._line(line)
    return len(text)

  def flush(self) -> None:
    with self.lock:
      if self.pending:
        self._line(self.pending)
        self.pending = ""
    self.real.flush()

  def _line(self, line: str) -> None:
    found = self.regex.search(line)
    if found is None:
      self.real.write(line + "\n")
      return
    groups = found.groupdict()
    count = groups.pop("n", None) or (found.group(1) if found.re.groups else None)
    postfix = " ".join(v for v in groups.values() if v) or None
    if count is None:
      self.progress.update(1, postfix)
    else:
      self.progress.to(int(count), postfix)
    if self.echo:
      self.progress.write(line)

  def __getattr__(self, name: str) -> Any:  # encoding, fileno, isatty, ...
    return getattr(self.real, name)


def _real_stdout() -> TextIO:
  out = sys.stdout
  return out.real if isinstance(out, _Lines) else out


_TQDM: list[Any] = []


def _tqdm() -> Any:
  """tqdm's bar class without its monitor thread (a soak counts the process's threads), or None
  without tqdm."""
  if not _TQDM:
    try:
      from tqdm import tqdm
    except ImportError:
      _TQDM.append(None)
    else:
      _TQDM.append(type("Bar", (tqdm,), {"monitor_interval": 0}))
  return _TQDM[0]


def _columns(stream: Any) -> int:
  try:
    return os.get_terminal_size(stream.fileno()).columns
  except (AttributeError, OSError, ValueError):
    return 0


def _isatty(stream: Any) -> bool:
  try:
    return bool(stream.isatty())
  except (AttributeError, OSError, ValueError):
    return False


def progress(total: int | None, desc: str, args: argparse.Namespace | None = None,
             **kwargs: Any) -> Progress:
  """A Progress of total steps named desc, quiet under args.quiet (without args: under the last
  parse()'s --quiet); kwargs: Progress's (quiet=True also silences it, e.g. in a process other
  than the first).

    with common.progress(args.iterations, "CEM", args) as bar:
      for i in range(args.iterations):
        ...
        bar.update(postfix=f"best {best:.3f}")
  """
  quiet = bool(kwargs.pop("quiet", False))
  quiet |= _QUIET if args is None else bool(getattr(args, "quiet", False))
  return Progress(total, desc, quiet=quiet, **kwargs)


def ilqr_with_progress(*args: Any, iterations: int, cli: argparse.Namespace | None = None,
                       **kwargs: Any) -> Any:
  """control.ilqr(*args, iterations=, **kwargs), computed, under a progress bar that counts its
  verbose line per iteration (it may stop before the most); cli: the parsed flags (--quiet)."""
  from mjbatch_jax import control

  with progress(iterations, "iLQR", cli) as bar, bar.follow(
      r"iLQR iteration (?P<n>\d+): (?P<cost>cost \S+)"):
    return jax.block_until_ready(control.ilqr(*args, iterations=iterations, verbose=True,
                                              **kwargs))


def cem_with_progress(objective: Callable[..., Any], mean: Any, std: Any, *, label: str,
                      iterations: int, cli: argparse.Namespace | None = None,
                      **settings: Any) -> Any:
  """control.cem_search(objective, mean, std, iterations=, **settings) under a progress bar
  named label, with a line "<label> <iteration from 1>: best <value>" per iteration."""
  from mjbatch_jax import control

  with progress(iterations, label, cli) as bar:
    def log(it: Any) -> None:
      bar.write(f"{label} {it.iteration + 1:2d}: best {it.best_value:.3f}")
      bar.update(postfix=f"best {it.best_value:.3f}")

    return control.cem_search(objective, mean, std, iterations=iterations, log=log, **settings)


# -- receding horizon and replays ---------------------------------------------------------------


def run_mpc(planner: Any, params: Any, state: Any, seed: int, steps: int, plan: Any = None,
            every: int = 0, report: Callable[[int, Any], str] | None = None,
            step: Callable[..., Any] | None = None, bar: "Progress | None" = None
            ) -> tuple[np.ndarray, dict[str, float]]:
  """Runs control.receding_horizon(planner, params)'s control step `steps` times from state.

  plan: the first plan (default planner.init()). Every `every` steps it prints report(k, state)
  (through progress(): a bar with the time left on a terminal, and --quiet silences both).
  step: that control step if the caller made it already (episodes from several starts then
  compile it once).
  bar: a Progress the steps count on (one over several episodes; the caller closes it); default:
  progress() of its own for this run.
  Returns the real system's states (steps + 1, nstate) and the steady-state median wall and CPU
  seconds (all threads) of a control step, "seconds_per_step" and "cpu_per_step": the first
  step compiles, so it counts only when it is the only one.
  """
  from mjbatch_jax import control

  step = control.receding_horizon(planner, params) if step is None else step
  plan = planner.init() if plan is None else plan
  rows, wall, cpu = [np.asarray(state)], [], []
  key = jax.random.PRNGKey(seed)
  own = bar is None
  bar = progress(steps, "MPC", unit="step") if bar is None else bar
  with bar if own else contextlib.nullcontext(bar):
    for k in range(steps):
      begin, begin_cpu = time.perf_counter(), time.process_time()
      state, plan, _ = jax.block_until_ready(step(state, plan, jax.random.fold_in(key, k)))
      wall.append(time.perf_counter() - begin)
      cpu.append(time.process_time() - begin_cpu)
      rows.append(np.asarray(state))
      if every and report is not None and (k % every == 0 or k == steps - 1):
        bar.write(f"step {k:4d}: {report(k, state)}")
      bar.update()
  steady = slice(1, None) if steps > 1 else slice(None)
  return np.array(rows), {"seconds_per_step": float(np.median(wall[steady])),
                          "cpu_per_step": float(np.median(cpu[steady]))}


def replay(params: Any, start: Any, ctrls: Any, nstep: int) -> np.ndarray:
  """(T + 1, nstate) states of controls (T, nu) applied from the row start: one rollout call."""
  from mjbatch_jax import functions

  states, _ = functions.rollout(jax.numpy.asarray(start)[None], jax.numpy.asarray(ctrls)[None],
                                params, nstep=nstep)
  return np.concatenate([np.asarray(start)[None], np.asarray(states[0])])


def save_run(args: argparse.Namespace, kind: str, model: mujoco.MjModel, rows: np.ndarray,
             summary: dict[str, Any]) -> dict[str, Any]:
  """Saves a receding-horizon run's states (the applied controls are in their ctrl) at args.out,
  prints the summary as the last line and returns it."""
  save_result(args.out, kind, {"states": rows}, summary, model_fingerprint(model))
  print(f"saved to {args.out}")
  print_summary(summary)
  return summary


def play_run(args: argparse.Namespace, kind: str, model: mujoco.MjModel, sim: Any, start: Any,
             nstep: int, series: dict[str, Callable[[np.ndarray], np.ndarray]],
             every: int = 1, **render_args: Any) -> dict[str, Any]:
  """Replays a run saved by save_run from start: the gap to the saved states, a plot of each
  series (a function of state rows) and of the controls, a GIF of every `every`-th state;
  returns its summary."""
  saved, summary = load_result(args.out, kind, model_fingerprint(model),
                               {"states": ("T+1", sim.layout.size)})
  layout = sim.layout
  rows = replay(sim.params(1), start, saved["states"][1:, layout.ctrl], nstep)
  print(f"replay differs from the saved run by {np.abs(rows - saved['states']).max():.1e}")
  t = nstep * model.opt.timestep * np.arange(len(rows))
  panels = {name: {name: f(rows)} for name, f in series.items()}
  panels["controls"] = {f"ctrl {i}": rows[1:, layout.ctrl][:, i] for i in range(model.nu)}
  plot_series(args.out.with_suffix(".png"), t, panels)
  print(render(model, rows[::every], args.out.with_suffix(".gif"),
               1 / (every * nstep * model.opt.timestep), **render_args))
  print_summary(summary)
  return summary


def plot_series(path: Path, t: np.ndarray, panels: dict[str, dict[str, np.ndarray]],
                title: str = "", xlabel: str = "time (s)") -> None:
  """One panel per ylabel, each with its labelled lines over t; skipped without matplotlib."""
  plt = pyplot()
  if plt is None:
    return
  fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels)), sharex=True,
                           squeeze=False)
  for ax, (ylabel, lines) in zip(axes[:, 0], panels.items(), strict=True):
    for label, y in lines.items():
      ax.plot(t[: len(y)], y, label=label)
    ax.set_ylabel(ylabel)
    if len(lines) > 1:
      ax.legend(fontsize=8)
  axes[-1, 0].set_xlabel(xlabel)
  if title:
    fig.suptitle(title)
  save_figure(fig, path)


# -- plots and videos ----------------------------------------------------------------------------


def pyplot() -> Any:
  """matplotlib.pyplot on the file-only Agg backend, or None (with a line saying so)."""
  try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    print("plot: skipped (matplotlib is not installed; pip install matplotlib)")
    return None
  return plt


def save_figure(fig: Any, path: Path, dpi: int = 100) -> Path:
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.tight_layout()
  fig.savefig(path, dpi=dpi)
  import matplotlib.pyplot as plt

  plt.close(fig)
  print(f"plot: {path}")
  return path


def _first_line(e: BaseException) -> str:
  text = str(e)
  return text.splitlines()[0] if text else ""


def render(model: mujoco.MjModel, rows: np.ndarray, path: Path, fps: float, *,
           camera: str | int | mujoco.MjvCamera = -1, track_body: str | None = None,
           distance: float = 3.0, azimuth: float = 140.0, elevation: float = -15.0,
           height: int = 240, width: int = 320, geomgroups: Sequence[int] = (0, 1, 2),
           qpos_only: bool = False) -> str:
  """A GIF (or MP4 with imageio) of states at fps frames per second; returns what it did.

  Rows are mjSTATE_INTEGRATION rows (or qpos with qpos_only). Rendering needs an offscreen GL
  (MUJOCO_GL=egl and pyopengl here); without one it says why and writes nothing.

  Args:
    model: the model the rows belong to.
    rows: (T, nstate) rows, or (T, nq) positions with qpos_only, one per frame.
    path: .gif (PIL) or .mp4 (imageio).
    fps: frames per second of the file.
    camera: a camera of the model (name or id), or an MjvCamera; -1: a free camera that follows
      track_body (or looks at the origin) from distance, azimuth and elevation.
    track_body: the body a free camera follows.
    geomgroups: geom groups to show (robots often put collision geoms in group 3).

  Raises:
    ValueError: fps is not a finite number > 0 (before anything renders).
  """
  if not (_finite_number(fps) and fps > 0):
    raise ValueError(f"render: fps must be a finite number > 0 (frames per second of the file), "
                     f"got {fps!r}")
  path = Path(path)
  try:
    renderer = mujoco.Renderer(model, height, width)
  except Exception as e:  # noqa: BLE001  (a missing or broken GL stack fails in many ways)
    return (f"video: skipped (mujoco.Renderer with MUJOCO_GL={os.environ.get('MUJOCO_GL')} "
            f"failed: {type(e).__name__}: {_first_line(e)}; MUJOCO_GL=egl and pyopengl render "
            "headless)")
  shown = mujoco.MjvOption()
  shown.geomgroup[:] = 0
  for group in geomgroups:
    shown.geomgroup[group] = 1
  free = None
  if not isinstance(camera, str | mujoco.MjvCamera) and camera == -1:
    free = mujoco.MjvCamera()
    free.distance, free.azimuth, free.elevation = distance, azimuth, elevation
  track = None
  if track_body is not None:
    track = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, track_body)
    if track < 0:
      raise ValueError(f"render: the model has no body named {track_body!r}")
  data = mujoco.MjData(model)
  frames = []
  with renderer:
    for row in np.asarray(rows, np.float64):
      if qpos_only:
        data.qpos[:] = row
      else:
        mujoco.mj_setState(model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
      mujoco.mj_forward(model, data)
      if free is not None:
        free.lookat[:] = data.xpos[track] if track is not None else 0.0
      renderer.update_scene(data, camera=free if free is not None else camera, scene_option=shown)
      frames.append(renderer.render())
  if not frames:
    return "video: skipped (no frames)"
  path.parent.mkdir(parents=True, exist_ok=True)
  if path.suffix == ".mp4":
    try:
      import imageio.v3 as iio  # pyright: ignore[reportMissingImports]
    except ImportError as e:
      return f"video: skipped ({len(frames)} frames rendered, no MP4 writer: {_first_line(e)})"
    try:
      iio.imwrite(path, np.stack(frames), fps=fps)
    except (OSError, ValueError) as e:  # imageio without an MP4 backend (imageio[ffmpeg])
      return f"video: skipped ({len(frames)} frames rendered, no MP4 writer: {_first_line(e)})"
  else:
    from PIL import Image

    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:],
                   duration=round(1000 / fps), loop=0)
  return f"video: {path} ({len(frames)} frames)"
