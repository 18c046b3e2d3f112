"""MuJoCo Playground's own envs on mjbatch_jax against the same envs on MJX: parity and speed.

For each env (default: one per dm_control model and task kind, 15, and locomotion envs whose
robots are found, see docs/playground.md), in a fresh process with float64: N envs reset with the
same keys and stepped --steps control steps with the same random actions in one jitted
lax.scan, on mjbatch_jax (`envs.playground.wrap`) and on MJX (`load_mjx`, impl "jax").
  speed: env steps/s of each side (median of interleaved repeats; CPU time too) and its
    compile time (trace + compile of reset and the scan); for --float32-envs, again in float32.
  parity at the env's own solver settings: observation and reward differences, and each side's
    qpos and qvel against MuJoCo C (mj_step on one MjData per env from our reset rows).
  parity with a converged solver (iterations 100, ls_iterations 50, tolerance 1e-12 on the
    env's mj_model before either physics is made), where the two differ at the env's own
    settings by more than 1e-10: on --parity-envs envs.

  python benchmarks/playground.py                      # the default envs, N=256
  python benchmarks/playground.py --envs CartpoleBalance,Go1JoystickFlatTerrain --num-envs 1024
  python benchmarks/playground.py --merge benchmarks/results/playground-*.json   # one table
"""

import argparse
import functools
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
  RESULTS,
  SHARED_MODELS,
  Stopwatch,
  cpu_times,
  interleaved,
  machine_info,
  median,
  pyplot,
  save_figure,
  wall_times,
  write_result,
)

# Playground's locomotion envs read Menagerie's robots: the shared models stand in for a checkout.
if SHARED_MODELS.is_dir():
  os.environ.setdefault("MJBATCH_JAX_MENAGERIE", str(SHARED_MODELS))

LOCOMOTION = ("Go1JoystickFlatTerrain", "Go1JoystickRoughTerrain", "Go1Getup", "Go1Handstand",
              "G1JoystickFlatTerrain")
CONVERGED = {"iterations": 100, "ls_iterations": 50, "tolerance": 1e-12}
# Differences up to this count as equal (float64 summation order differs between the two).
TOLERANCE = 1e-10


def _max_diff(a: Any, b: Any) -> float:
  import jax
  import numpy as np

  diffs = jax.tree.leaves(jax.tree.map(
    lambda x, y: float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)),
                              initial=0.0)), a, b))
  return max(diffs, default=0.0)


def _scan(env: Any) -> Any:
  """(state, actions (T, N, nu)) -> (state after T steps, per-step (obs, reward, done, q, ctrl)),
  q being qpos and qvel, ctrl the controls the env gave its physics (its action, mapped)."""
  import jax
  import jax.numpy as jnp

  def one(state, action):
    state = jax.vmap(env.step)(state, action)
    q = jnp.concatenate([state.data.qpos, state.data.qvel], axis=-1)
    return state, (state.obs, state.reward, state.done, q, state.data.ctrl)

  return lambda state, actions: jax.lax.scan(one, state, actions)


def _compiled(env: Any, keys: Any, actions: Any) -> tuple[Any, Any, float]:
  """(first state, compiled scan, seconds to trace and compile reset and the scan)."""
  import jax

  clock = Stopwatch()
  reset = jax.jit(jax.vmap(env.reset)).lower(keys).compile()
  state = reset(keys)
  scan = jax.jit(_scan(env)).lower(state, actions).compile()
  return state, scan, clock.wall_s


def _mujoco_c(env: Any, rows: Any, ctrls: Any) -> Any:
  """qpos and qvel after each control step of mj_step on one MjData per env, (T, N, nq + nv),
  from the envs' first rows with the controls the env gave its physics. (An env that also
  changes qpos or qvel between steps, a push say, is not followed: none does within these
  steps.)"""
  import mujoco
  import numpy as np

  model = env.mj_model
  data = mujoco.MjData(model)
  ctrls = np.asarray(ctrls, np.float64)
  out = np.zeros((ctrls.shape[0], ctrls.shape[1], model.nq + model.nv))
  for i, row in enumerate(np.asarray(rows, np.float64)):
    mujoco.mj_setState(model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
    for t in range(ctrls.shape[0]):
      data.ctrl[:] = ctrls[t, i]
      for _ in range(env.n_substeps):
        mujoco.mj_step(model, data)
      out[t, i, : model.nq], out[t, i, model.nq :] = data.qpos, data.qvel
  return out


def measure(name: str, num_envs: int, steps: int, repeats: int, parity_envs: int, seed: int,
            x64: bool, parity: bool = True) -> dict[str, Any]:
  """Speed of both sides on num_envs envs, and (with x64) parity from the same runs."""
  import jax

  jax.config.update("jax_enable_x64", x64)
  import importlib

  import jax.numpy as jnp
  import numpy as np

  from mjbatch_jax.envs import playground

  mjx = importlib.import_module("mujoco.mjx")  # by name: the playground extra is optional

  keys = jax.random.split(jax.random.PRNGKey(seed), num_envs)
  reference = playground.load_mjx(name)
  sides = {"ours": playground.wrap(reference), "mjx": reference}
  ours_env = sides["ours"]
  actions = jnp.asarray(np.random.default_rng(seed).uniform(
    -1, 1, (steps, num_envs, ours_env.action_size)), jnp.float64 if x64 else jnp.float32)
  out: dict[str, Any] = {"num_envs": num_envs, "steps": steps, "x64": x64,
                         "n_substeps": ours_env.n_substeps,
                         "observed_fields": list(ours_env.observed_fields),
                         "solver": _solver(reference.mj_model)}
  first, scans, results = {}, {}, {}
  for side, env in sides.items():
    first[side], scans[side], compile_s = _compiled(env, keys, actions)
    results[side] = jax.block_until_ready(scans[side](first[side], actions))[1]
    out[side] = {"compile_s": compile_s}
  # Interleaved, so that both sides see the same machine; the runs above warmed them up.
  timings = interleaved({side: functools.partial(scans[side], first[side], actions)
                         for side in sides}, repeats, warmup=False)
  for side, timing in timings.items():
    typical = median(timing)
    out[side].update(wall_s=wall_times(timing), cpu_s=cpu_times(timing),
                     env_steps_per_s=num_envs * steps / typical.wall_s,
                     env_steps_per_cpu_s=num_envs * steps / typical.cpu_s)
  if not x64 or not parity:
    return out

  # The env's own settings: ours and MJX against each other and against MuJoCo C.
  (obs, reward, done, q, ctrl), (mjx_obs, mjx_reward, mjx_done, mjx_q, _) = (
    results["ours"], results["mjx"])
  c = _mujoco_c(ours_env, first["ours"].data.row, ctrl)
  out["default"] = {
    "obs": _max_diff(obs, mjx_obs), "reward": _max_diff(reward, mjx_reward),
    "qpos_qvel": _max_diff(q, mjx_q), "ours_vs_mujoco_c": _max_diff(q, c),
    "mjx_vs_mujoco_c": _max_diff(mjx_q, c), "reset_obs": _max_diff(first["ours"].obs,
                                                                   first["mjx"].obs),
    "done_differs": int(np.sum(np.asarray(done) != np.asarray(mjx_done))),
  }
  if max(out["default"]["obs"], out["default"]["reward"]) <= TOLERANCE:
    out["converged"] = None  # equal already: MJX's solver converges at the env's settings
    return out

  # A converged solver on both sides, on parity_envs envs.
  converged = playground.load_mjx(name)
  for field, value in CONVERGED.items():
    current = getattr(converged.mj_model.opt, field)
    setattr(converged.mj_model.opt, field, value if field == "tolerance" else max(value, current))
  converged._mjx_model = mjx.put_model(converged.mj_model, impl="jax")
  sides = {"ours": playground.wrap(converged), "mjx": converged}
  keys, actions = keys[:parity_envs], actions[:, :parity_envs]
  got = {}
  for side, env in sides.items():
    state, scan, _ = _compiled(env, keys, actions)
    got[side] = (state, scan(state, actions)[1])
  (obs, reward, done, q, _), (mjx_obs, mjx_reward, mjx_done, mjx_q, _) = (
    got["ours"][1], got["mjx"][1])
  out["converged"] = {
    "solver": _solver(converged.mj_model), "num_envs": parity_envs,
    "obs": _max_diff(obs, mjx_obs), "reward": _max_diff(reward, mjx_reward),
    "qpos_qvel": _max_diff(q, mjx_q), "reset_obs": _max_diff(got["ours"][0].obs,
                                                             got["mjx"][0].obs),
    "done_differs": int(np.sum(np.asarray(done) != np.asarray(mjx_done))),
  }
  return out


def _solver(model: Any) -> dict[str, Any]:
  return {"iterations": int(model.opt.iterations), "ls_iterations": int(model.opt.ls_iterations),
          "tolerance": float(model.opt.tolerance)}


def available_envs(which: str) -> list[str]:
  """The envs of a run: a comma-separated list, "all", or (default) one env per dm_control
  model and task kind (15) and the locomotion envs, the must-show pair first."""
  from mujoco_playground import registry  # pyright: ignore[reportMissingImports]

  if which == "all":
    return [*registry.dm_control_suite.ALL_ENVS, *LOCOMOTION]
  if which:
    return [name for name in which.split(",") if name]
  return ["CartpoleBalance", "Go1JoystickFlatTerrain", *DEFAULT_SUITE, *LOCOMOTION_DEFAULT]


DEFAULT_SUITE = ("AcrobotSwingup", "BallInCup", "CartpoleSwingup", "CheetahRun", "FingerSpin",
                 "FingerTurnEasy", "FishSwim", "HopperHop", "HumanoidWalk", "PendulumSwingup",
                 "PointMass", "ReacherEasy", "SwimmerSwimmer6", "WalkerWalk")
LOCOMOTION_DEFAULT = ("G1JoystickFlatTerrain",)


def run_child(args: argparse.Namespace, name: str, x64: bool, bar: Any = None) -> dict[str, Any]:
  """One env measured in a fresh process (--one); bar: the common.Progress of the children."""
  command = [sys.executable, __file__, "--one", "--envs", name, "--num-envs", str(args.num_envs),
             "--parity-envs", str(args.parity_envs), "--steps", str(args.steps),
             "--repeats", str(args.repeats), "--seed", str(args.seed)]
  command += ([] if x64 else ["--float32"]) + (["--speed-only"] if args.speed_only else [])
  env = dict(os.environ, PYTHONWARNINGS="ignore")
  out = subprocess.run(command, capture_output=True, text=True, env=env)
  lines = [line for line in (out.stdout or "").splitlines() if line.startswith("RESULT ")]
  if bar is not None:
    bar.update(postfix=f"{name}{'' if x64 else ' float32'}")
  if out.returncode != 0 or not lines:
    error = ((out.stderr or "").strip().splitlines() or ["no output"])[-1]
    (print if bar is None else functools.partial(bar.write, keep=True))(
      f"  {name} failed: {error}")
    return {"error": error}
  return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--envs", default="", help='comma-separated, "all", or default: see above')
  parser.add_argument("--num-envs", type=int, default=256)
  parser.add_argument("--steps", type=int, default=20, help="control steps per call")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--parity-envs", type=int, default=4, help="envs of the converged rows")
  parser.add_argument("--float32-envs", default="CartpoleBalance,Go1JoystickFlatTerrain",
                      help="envs whose speed is also measured in float32")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--one", action="store_true", help="internal: one env, result to stdout")
  parser.add_argument("--float32", action="store_true", help="internal: with --one, float32")
  parser.add_argument("--speed-only", action="store_true", help="no parity columns")
  parser.add_argument("--merge", type=Path, nargs="+",
                      help="print the table of these results files' rows and plot them as one")
  parser.add_argument("--out", type=Path, default=RESULTS)
  parser.add_argument("--quiet", action="store_true", help="no progress bar or progress lines")
  args = parser.parse_args()
  if args.merge:
    merge(args.merge, args.out)
    return
  if args.one:
    warnings.simplefilter("ignore")
    result = measure(args.envs, args.num_envs, args.steps, args.repeats, args.parity_envs,
                     args.seed, x64=not args.float32, parity=not args.speed_only)
    print("RESULT " + json.dumps(result))
    return
  names = available_envs(args.envs)
  float32 = {name for name in args.float32_envs.split(",") if name}
  rows: list[dict[str, Any]] = []
  result = {"machine": machine_info(sys.argv), "converged_solver": CONVERGED,
            "tolerance": TOLERANCE, "rows": rows,
            "args": {k: v for k, v in vars(args).items() if k != "out"} | {"out": str(args.out)}}
  path = write_result(args.out, "playground", result)
  # Here, not at the top: the children (--one) never load it.
  sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
  import common  # pyright: ignore[reportMissingImports]

  bar = common.Progress(len(names) + len(float32.intersection(names)), "children",
                        quiet=args.quiet, unit="process")
  with bar:
    for name in names:
      clock = Stopwatch()
      row = {"env": name, "x64": run_child(args, name, True, bar)}
      if name in float32:
        row["float32"] = run_child(args, name, False, bar)
      rows.append(row)
      path.write_text(json.dumps(result, indent=2))  # each row as it comes: a long run keeps them
      bar.write(f"{table_line(row)} ({clock.wall_s:.0f} s)", keep=True)
  print(TABLE_HEADER)
  for row in rows:
    print(table_line(row))
  plot(rows, path.with_suffix(".png"))


def merge(paths: list[Path], out: Path) -> None:
  """The rows of several runs (the same env's last row wins) as one table, JSON and plot."""
  rows: dict[str, dict[str, Any]] = {}
  sources = []
  for path in paths:
    result = json.loads(path.read_text())
    sources.append({"file": path.name, "machine": result["machine"], "args": result["args"]})
    for row in result["rows"]:
      if row["env"] in rows and "float32" in rows[row["env"]] and "float32" not in row:
        row = {**row, "float32": rows[row["env"]]["float32"]}
      rows[row["env"]] = row
  merged = {"sources": sources, "converged_solver": CONVERGED, "tolerance": TOLERANCE,
            "rows": list(rows.values())}
  path = write_result(out, "playground-merged", merged)
  print(TABLE_HEADER)
  for row in merged["rows"]:
    print(table_line(row))
  plot(merged["rows"], path.with_suffix(".png"))


TABLE_HEADER = (
  "| env | solver | obs diff | reward diff | ours env steps/s | MJX env steps/s | ours / MJX"
  " | per CPU-s | compile ours / MJX (s) | own settings: ours vs C, MJX vs C |\n"
  "|---|---|---|---|---|---|---|---|---|---|"
)


def table_line(row: dict[str, Any]) -> str:
  r = row["x64"]
  if "error" in r:
    return f"| {row['env']} | failed: {r['error']} |"
  if "default" not in r:  # --speed-only
    ours, mjx = r["ours"], r["mjx"]
    ratio = ours["env_steps_per_s"] / mjx["env_steps_per_s"]
    return (f"| {row['env']} | - | - | - | {ours['env_steps_per_s']:,.0f}"
            f" | {mjx['env_steps_per_s']:,.0f} | {ratio:.2f} | - "
            f" | {ours['compile_s']:.1f} / {mjx['compile_s']:.1f} | - |")
  d, c = r["default"], r["converged"]
  parity = c if c is not None else d
  solver = "converged" if c is not None else f"own ({r['solver']['iterations']} it.)"
  ours, mjx = r["ours"], r["mjx"]
  speed = (f"{ours['env_steps_per_s']:,.0f} | {mjx['env_steps_per_s']:,.0f}"
           f" | {ours['env_steps_per_s'] / mjx['env_steps_per_s']:.2f}")
  if "float32" in row and "error" not in row["float32"]:
    o32, m32 = row["float32"]["ours"], row["float32"]["mjx"]
    speed = (f"{ours['env_steps_per_s']:,.0f} (f32 {o32['env_steps_per_s']:,.0f})"
             f" | {mjx['env_steps_per_s']:,.0f} (f32 {m32['env_steps_per_s']:,.0f})"
             f" | {ours['env_steps_per_s'] / mjx['env_steps_per_s']:.2f}"
             f" (f32 {o32['env_steps_per_s'] / m32['env_steps_per_s']:.2f})")
  per_cpu = ours["env_steps_per_cpu_s"] / mjx["env_steps_per_cpu_s"]
  return (f"| {row['env']} | {solver} | {parity['obs']:.0e} | {parity['reward']:.0e} | {speed}"
          f" | {per_cpu:.2f} | {ours['compile_s']:.1f} / {mjx['compile_s']:.1f}"
          f" | {d['ours_vs_mujoco_c']:.0e}, {d['mjx_vs_mujoco_c']:.0e} |")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
  plt = pyplot()
  if plt is None:
    return
  good = [r for r in rows if "error" not in r["x64"]]
  names = [r["env"] for r in good]
  ours = [r["x64"]["ours"]["env_steps_per_s"] for r in good]
  mjx = [r["x64"]["mjx"]["env_steps_per_s"] for r in good]
  fig, ax = plt.subplots(figsize=(12, 4.5))
  x = range(len(names))
  ax.bar([i - 0.2 for i in x], ours, 0.4, label="mjbatch_jax")
  ax.bar([i + 0.2 for i in x], mjx, 0.4, label="MJX (impl jax)")
  ax.set_yscale("log")
  ax.set_xticks(list(x), names, rotation=60, ha="right", fontsize=8)
  ax.set_ylabel("env steps/s (float64)")
  n = good[0]["x64"]["num_envs"] if good else 0
  ax.set_title(f"MuJoCo Playground envs, {n} envs each, this machine's CPUs")
  ax.legend()
  save_figure(fig, path)


if __name__ == "__main__":
  main()
