"""Derivatives through contact rollouts: their error against the loss's own secants, and cost.

  python benchmarks/derivative_accuracy.py --models cheetah,gripper,unitree_go1,unitree_g1 \
      --lengths 1,10,50 --points 24
  python benchmarks/derivative_accuracy.py --adam 300 --models ''   # the cheetah fitted by Adam

For each model, a recording with plain MuJoCo (a running planar cheetah, a gripper grasping and
lifting a box, the Go1 trotting in place, the G1 standing and swaying) is cut into windows of
L knots, and a multiple-shooting loss (the squared error of rollout from each window's recorded
start, with its recorded controls, against the recording) is differentiated with jax.jvp at
random points (params -30..+30% off the truth, controls jittered) along random directions over
params and controls together. Each variant of the derivative rules is compared with the loss's
central secant at h = 1e-7 (float64), where forward and backward secants agree to 1e-3 (the loss
is smooth at the secant's scale; other points are counted, not judged):

  old default:      forward differences at 1e-6, whatever a copy crosses (the rules before
                    issue 18)
  eps 1e-8:         the same at 1e-8 (the workaround users had)
  forward checked:  regime-checked forward differences at 1e-6 (controls 1e-7), the solver's
                    warm start among the state's columns
  default:          the new default: the same with the positions centred and checked for kinks
  no warm start:    the default without the solver's warm start among the state's columns

and timed by CPU seconds of the jvp (all threads), relative to the first variant (the old
default unless --variants says otherwise). With --dtype
float32 the arrays are float32 (the secants stay float64, of the same problem: the recording's
rows and the params fields' model values rounded to float32). --adam N identifies the cheetah's 4
masses and 6 dampings from 59 windows of 10 knots with optax's Adam, N iterations, from the new
default and from the old one.

Writes benchmarks/results/derivative_accuracy-<date>.json and a plot beside it.
"""

import argparse
import copy
import dataclasses
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import _rules  # noqa: E402
from mjbatch_jax._extension import ext  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (  # noqa: E402
  RESULTS,
  machine_info,
  pyplot,
  resolve_model,
  run_timed,
  save_figure,
  write_result,
)

from tests.models import CHEETAH_XML, GRIPPER_XML  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import common  # noqa: E402  # pyright: ignore[reportMissingImports]  (progress, --quiet)

# name: (eps, centered, regime_checked, warm start among the state's columns)
VARIANTS: dict[str, tuple[float, bool | None, bool, bool]] = {
  "old default": (1e-6, False, False, False),
  "eps 1e-8": (1e-8, False, False, False),
  "forward checked": (1e-6, False, True, True),
  "default": (1e-6, None, True, True),
  "no warm start": (1e-6, None, True, False),
}
SECANT_STEP = 1e-7
SMOOTH = 1e-3


@dataclasses.dataclass
class Task:
  """A model, how to drive it for the recording, and the params a loss varies."""

  model: mujoco.MjModel
  ctrl: Callable[[float, np.random.Generator], np.ndarray]  # controls at time t
  fields: tuple[str, ...]
  select: dict[str, list[Any]]
  keyframe: int | None = None
  settle: int = 20  # substeps before the first window


def cheetah() -> Task:
  model = mujoco.MjModel.from_xml_string(CHEETAH_XML)
  knots = np.random.default_rng(7).uniform(-1, 1, (200, model.nu))
  legs = {"body_mass": ["torso", "bthigh", "bshin", "bfoot"], "dof_damping": list(range(3, 9))}
  return Task(model, lambda t, rng: knots[int(t / 0.2) % len(knots)],
              ("body_mass", "dof_damping"), legs)


def gripper() -> Task:
  model = mujoco.MjModel.from_xml_string(GRIPPER_XML)

  def ctrl(t: float, rng: np.random.Generator) -> np.ndarray:
    # Down to the box, close, lift and carry it sideways, all in 3 s, then round again.
    t = t % 3.0
    z = -0.12 if t < 1.2 else -0.12 + 0.15 * min(1.0, (t - 1.2) / 0.5)
    grip = -0.01 if t < 0.6 else 0.03
    x = 0.0 if t < 1.8 else 0.15 * min(1.0, (t - 1.8) / 0.5)
    return np.array([x, z, grip, grip])

  return Task(model, ctrl, ("body_mass", "dof_damping", "geom_friction"),
              {"body_mass": ["box"], "dof_damping": list(range(4)),
               "geom_friction": ["left", "right"]}, settle=50)


def go1() -> Task:
  _, model = resolve_model("unitree_go1")
  home = model.key_ctrl[0].copy()

  def ctrl(t: float, rng: np.random.Generator) -> np.ndarray:
    # A trot in place: diagonal pairs lift their feet in turn at 2 Hz.
    phase = 2 * np.pi * 2.0 * t
    lift = np.maximum(0.0, np.array([np.sin(phase), -np.sin(phase), -np.sin(phase),
                                     np.sin(phase)]))  # FR, FL, RR, RL
    out = home.copy()
    out[1::3] += 0.4 * lift  # thighs
    out[2::3] -= 0.8 * lift  # calves
    return out

  return Task(model, ctrl, ("body_mass", "dof_damping"),
              {"body_mass": ["trunk"], "dof_damping": list(range(6, 18))}, keyframe=0, settle=200)


def g1() -> Task:
  _, model = resolve_model("unitree_g1")
  stand = model.key_ctrl[0].copy() if model.nkey else np.zeros(model.nu)

  def ctrl(t: float, rng: np.random.Generator) -> np.ndarray:
    # Standing, swaying the hips and arms a little.
    return stand + 0.1 * np.sin(2 * np.pi * 0.8 * t + np.arange(model.nu))

  return Task(model, ctrl, ("body_mass", "dof_damping"),
              {"body_mass": ["pelvis", "torso_link"], "dof_damping": list(range(6, 18))},
              keyframe=0, settle=200)


TASKS = {"cheetah": cheetah, "gripper": gripper, "unitree_go1": go1, "unitree_g1": g1}


def record(task: Task, substeps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """(T + 1, nstate) rows and (T, nu) controls of plain MuJoCo, after settle substeps."""
  model, rng = task.model, np.random.default_rng(seed)
  data = mujoco.MjData(model)
  if task.keyframe is not None:
    mujoco.mj_resetDataKeyframe(model, data, task.keyframe)
  size = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION)
  rows, ctrls = [], []
  for t in range(task.settle + substeps):
    if t >= task.settle:
      row = np.empty(size)
      mujoco.mj_getState(model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
      rows.append(row)
    data.ctrl[:] = task.ctrl(data.time, rng)
    if t >= task.settle:
      ctrls.append(data.ctrl.copy())
    mujoco.mj_step(model, data)
  row = np.empty(size)
  mujoco.mj_getState(model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
  rows.append(row)
  return np.array(rows), np.array(ctrls)


class Problem:
  """The multiple-shooting loss of a task's recording in windows of `length` knots."""

  def __init__(self, task: Task, windows: int, length: int, threads: int, dtype: Any,
               seed: int = 0):
    if dtype != jnp.float64:
      # The problem a float32 user has: params arrays (and with them the rows of each field
      # that are not selected, which keep the model's values) and rows in float32. The secants,
      # in float64, are then of the same problem. Rounded in a copy: the caller's task keeps its
      # model.
      task = dataclasses.replace(task, model=copy.deepcopy(task.model))
      for name in task.fields:
        field = getattr(task.model, name)
        field[:] = field.astype(dtype).astype(np.float64)
    self.task, self.length, self.dtype = task, length, dtype
    rows, ctrls = record(task, windows * length, seed)
    rows = np.asarray(rows, dtype).astype(np.float64)
    self.sim = mjbatch_jax.Simulator(task.model, num_threads=threads)
    layout = self.sim.layout
    starts = np.arange(windows) * length
    self.starts = rows[starts]
    self.ctrls = np.stack([ctrls[s : s + length] for s in starts])
    self.targets = np.stack([rows[s + 1 : s + length + 1] for s in starts])
    self.columns = np.r_[np.arange(layout.qpos.start, layout.qpos.stop),
                         np.arange(layout.qvel.start, layout.qvel.stop)]
    self.params = self.sim.params(windows, task.fields, select=task.select, shared=task.fields,
                                  set_const=True)
    self.truth = {name: np.asarray(self.params[name]) for name in task.fields}

  def loss(self, theta: dict[str, jax.Array], ctrls: jax.Array, eps: float | None = None,
           centered: bool | None = None) -> jax.Array:
    params = mjbatch_jax.tree_replace(self.params, theta)
    states, _ = mjbatch_jax.rollout(jnp.asarray(self.starts, ctrls.dtype), ctrls, params,
                                    eps=eps, centered=centered)
    r = states[..., self.columns] - jnp.asarray(self.targets[..., self.columns], ctrls.dtype)
    return jnp.sum(r * r)

  def point(self, rng: np.random.Generator) -> tuple[dict, jax.Array, dict, jax.Array]:
    """A random point (params off by up to 30%, controls jittered) and a random direction."""
    theta = {k: jnp.asarray(v * (1 + 0.3 * rng.uniform(-1, 1, v.shape)), self.dtype)
             for k, v in self.truth.items()}
    span = np.ptp(self.task.model.actuator_ctrlrange, axis=-1)
    span = np.where(np.isfinite(span) & (span > 0), span, 1.0)
    ctrls = jnp.asarray(self.ctrls + 0.02 * span * rng.normal(size=self.ctrls.shape), self.dtype)
    d_theta = {k: jnp.asarray(v * rng.normal(size=v.shape), self.dtype)
               for k, v in self.truth.items()}
    d_ctrls = jnp.asarray(0.1 * span * rng.normal(size=self.ctrls.shape), self.dtype)
    return theta, ctrls, d_theta, d_ctrls


def measure(name: str, args: argparse.Namespace, bar: Any = None) -> dict[str, Any]:
  """Each length's accuracy and cost of every variant on the model; bar: a common.Progress the
  points count on, between the timed calls."""
  task = TASKS[name]()
  dtype = jnp.float32 if args.dtype == "float32" else jnp.float64
  out: dict[str, Any] = {}
  for length in args.lengths:
    windows = max(2, args.knots // length) if args.windows is None else args.windows
    problem = Problem(task, windows, length, args.threads, dtype)
    secant_loss = jax.jit(lambda th, u, p=problem: p.loss(th, u))
    jvps = {}
    for variant, (eps, centered, checked, warm) in args.variants.items():
      # Read when the rule is traced, below.
      _rules.REGIME_CHECKED, _rules.WARMSTART_COLUMNS = checked, warm

      def jvp(th, u, dth, du, eps=eps, centered=centered, p=problem):
        return jax.jvp(lambda a, b: p.loss(a, b, eps, centered), (th, u), (dth, du))[1]

      jvps[variant] = jax.jit(jvp)
      jax.block_until_ready(jvps[variant](*problem.point(np.random.default_rng(99))))
    _rules.REGIME_CHECKED, _rules.WARMSTART_COLUMNS = True, True
    rng = np.random.default_rng(args.seed)
    errors = {v: [] for v in args.variants}
    cpu = {v: [] for v in args.variants}
    smooth, switched, extra, columns = [], 0, 0, 0
    for _ in range(args.points):
      theta, ctrls, d_theta, d_ctrls = problem.point(rng)
      wide = ({k: jnp.asarray(v, jnp.float64) for k, v in theta.items()},
              jnp.asarray(ctrls, jnp.float64))
      step = {k: jnp.asarray(v, jnp.float64) * SECANT_STEP for k, v in d_theta.items()}
      du = jnp.asarray(d_ctrls, jnp.float64) * SECANT_STEP
      f0 = float(secant_loss(*wide))
      fp = float(secant_loss({k: wide[0][k] + step[k] for k in step}, wide[1] + du))
      fm = float(secant_loss({k: wide[0][k] - step[k] for k in step}, wide[1] - du))
      secant = (fp - fm) / (2 * SECANT_STEP)
      one_sided = ((fp - f0) - (f0 - fm)) / SECANT_STEP
      smooth.append(bool(abs(one_sided) <= SMOOTH * abs(secant)))
      for variant, fn in jvps.items():
        before = ext.finite_difference_totals()
        timing, value = run_timed(fn, theta, ctrls, d_theta, d_ctrls)
        cpu[variant].append(timing.cpu_s)
        errors[variant].append(abs(float(value) - secant) / abs(secant))
        if variant == "default":
          after = ext.finite_difference_totals()
          switched += after["switched"] - before["switched"]
          extra += after["extra_rows"] - before["extra_rows"]
          columns += after["columns"] - before["columns"]
      if bar is not None:
        bar.update(postfix=f"{name} L={length}")
    problem.sim.close()
    mask = np.array(smooth)
    row = {"windows": windows, "points": args.points, "smooth_points": int(mask.sum()),
           "default_switched_columns": switched, "default_columns": columns,
           "default_extra_rows": extra, "variants": {}}
    base_cpu = float(np.median(next(iter(cpu.values()))))
    for variant in args.variants:
      e = np.array(errors[variant])[mask]
      row["variants"][variant] = {
        "worst": float(e.max()) if e.size else float("nan"),
        "median": float(np.median(e)) if e.size else float("nan"),
        "over_1_percent": int((e > 0.01).sum()),
        "cpu_ratio": float(np.median(cpu[variant])) / base_cpu,
        "errors": errors[variant],
      }
    out[str(length)] = row
    say = print if bar is None else functools.partial(bar.write, keep=True)
    say(f"{name} L={length} ({windows} windows, {int(mask.sum())}/{args.points} smooth; "
        f"default: {switched} of {columns} columns switched, {extra} extra rows)")
    for variant, v in row["variants"].items():
      say(f"  {variant:12s} worst {v['worst']:9.2e}  median {v['median']:9.2e}  "
          f">1%: {v['over_1_percent']:2d}  cpu x{v['cpu_ratio']:.2f}")
  return out


def adam(iterations: int, args: argparse.Namespace) -> dict[str, Any]:
  """Identify the cheetah's params by Adam on log-params, default and old derivatives."""
  import optax

  problem = Problem(cheetah(), 59, 10, args.threads, jnp.float64)
  truth = {k: jnp.asarray(v) for k, v in problem.truth.items()}
  ctrls = jnp.asarray(problem.ctrls)
  rng = np.random.default_rng(args.seed)
  start = {k: jnp.log(v * (1 + 0.3 * jnp.asarray(rng.choice([-1, 1], v.shape))))
           for k, v in truth.items()}
  curves = {}
  for variant in ("default", "old default"):
    eps, centered, checked, warm = VARIANTS[variant]
    _rules.REGIME_CHECKED, _rules.WARMSTART_COLUMNS = checked, warm
    optimizer = optax.adam(optax.exponential_decay(0.02, iterations, 0.05))

    @jax.jit
    def update(log_theta, opt_state, eps=eps, centered=centered, optimizer=optimizer):
      loss, grad = jax.value_and_grad(
        lambda lt: problem.loss({k: jnp.exp(v) for k, v in lt.items()}, ctrls, eps, centered)
      )(log_theta)
      updates, opt_state = optimizer.update(grad, opt_state)
      return optax.apply_updates(log_theta, updates), opt_state, loss

    log_theta, opt_state = dict(start), optimizer.init(start)
    errors, losses = [], []
    for i in range(iterations):
      log_theta, opt_state, loss = update(log_theta, opt_state)
      theta = np.concatenate([np.exp(np.asarray(log_theta[k])) for k in truth])
      true = np.concatenate([np.asarray(truth[k]) for k in truth])
      errors.append(float(np.max(np.abs(theta / true - 1))))
      losses.append(float(loss))
      if i % 100 == 0 or i == iterations - 1:
        print(f"adam {variant}: iteration {i}: loss {losses[-1]:.3e}, worst relative parameter "
              f"error {errors[-1]:.2e}", flush=True)
    curves[variant] = {"max_relative_error": errors, "loss": losses}
  _rules.REGIME_CHECKED, _rules.WARMSTART_COLUMNS = True, True
  problem.sim.close()
  return curves


def plot(result: dict[str, Any], path: Path) -> None:
  plt = pyplot()
  if plt is None:
    return
  models = list(result["accuracy"])
  panels = len(models) + (1 if "adam" in result else 0)
  fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.6), squeeze=False)
  for ax, name in zip(axes[0], models, strict=False):
    lengths = list(result["accuracy"][name])
    for variant in result["variants"]:
      worst = [result["accuracy"][name][L]["variants"][variant]["worst"] for L in lengths]
      ax.plot([int(L) for L in lengths], worst, "o-", label=variant)
    ax.axhline(0.01, color="k", lw=0.8, ls=":")
    ax.set(xscale="log", yscale="log", title=name, xlabel="knots per window",
           ylabel="worst relative error (smooth points)")
  axes[0][0].legend(fontsize=7)
  if "adam" in result:
    ax = axes[0][-1]
    for variant, curve in result["adam"].items():
      ax.plot(curve["max_relative_error"], label=variant)
    ax.set(yscale="log", xlabel="Adam iteration", ylabel="worst relative parameter error",
           title="cheetah identification")
    ax.legend(fontsize=7)
  save_figure(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--models", default="cheetah,gripper,unitree_go1,unitree_g1",
                      help=f"comma-separated, of {', '.join(TASKS)}")
  parser.add_argument("--lengths", default="1,10,50", help="knots per window, comma-separated")
  parser.add_argument("--knots", type=int, default=400, help="knots per recording (windows = "
                      "knots / length, at least 2)")
  parser.add_argument("--windows", type=int, default=None, help="windows, whatever the length")
  parser.add_argument("--points", type=int, default=24)
  parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--variants", default="old default,eps 1e-8,default",
                      help="comma-separated, of the variants above (the first is the cost's unit)")
  parser.add_argument("--adam", type=int, default=0, help="Adam iterations (0: skip)")
  parser.add_argument("--out", type=Path, default=RESULTS)
  parser.add_argument("--no-plot", action="store_true")
  common.add_progress_args(parser)
  args = parser.parse_args(argv)
  models = [m for m in args.models.split(",") if m]
  unknown = [m for m in models if m not in TASKS]
  if unknown:
    parser.error(f"unknown models {unknown}; known: {list(TASKS)}")
  args.lengths = [int(v) for v in args.lengths.split(",") if v]
  chosen = [v for v in args.variants.split(",") if v]
  if not chosen or any(v not in VARIANTS for v in chosen) or "default" not in chosen:
    parser.error(f"--variants must name some of {list(VARIANTS)}, 'default' among them")
  args.variants = {name: VARIANTS[name] for name in chosen}
  result: dict[str, Any] = {"dtype": args.dtype, "secant_step": SECANT_STEP,
                            "variants": {k: list(v) for k, v in args.variants.items()},
                            "accuracy": {}, "machine": machine_info(sys.argv)}
  with common.progress(len(models) * len(args.lengths) * args.points, "points", args,
                       unit="point") as bar:
    for name in models:
      result["accuracy"][name] = measure(name, args, bar)
  if args.adam:
    result["adam"] = adam(args.adam, args)
  out = write_result(args.out, f"derivative_accuracy-{args.dtype}", result)
  if not args.no_plot:
    plot(result, out.with_suffix(".png"))
  return result


if __name__ == "__main__":
  main()
