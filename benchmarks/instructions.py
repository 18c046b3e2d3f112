"""Instructions per call of each stepping path, counted by valgrind: a noise-free comparison.

  python benchmarks/instructions.py unitree_go1 --num-sims 64

On a shared machine, wall-clock ratios between paths wander by +-15%. Instruction counts do not:
for each path this runs the same script under `valgrind --tool=callgrind` twice, with 1 and with
3 calls of one substep on N simulations (one thread), and takes the difference, so that start-up
(imports, model loading, JIT compilation) cancels and what remains is the cost of 2 calls.
Paths: c_loop (ext.step_loop: mj_step on one MjData, the limit), mujoco.batch (MuJoCo's own
Batch.step), batch (mjbatch_jax.Batch.step), jax (a jitted mjbatch_jax.step called from Python).
Instructions are not time (memory stalls differ), but equal work shows as equal counts, and an
overhead shows as extra instructions. Takes about 10 minutes (2 runs at a time).
Writes benchmarks/results/instructions-<model>-<date>.json.
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, machine_info, model_label, resolve_model, write_result  # noqa: E402

# One substep per call on N simulations, from the first keyframe (or the defaults) with its ctrl.
SCRIPT = """
import sys
path, variant, n, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
import mujoco
import numpy as np
m = mujoco.MjModel.from_xml_path(path)
key = 0 if m.nkey else -1
ctrl = m.key_ctrl[0] if m.nkey else np.zeros(m.nu)
if variant == "c_loop":
  from mjbatch_jax._extension import ext
  d = mujoco.MjData(m)
  if key >= 0:
    mujoco.mj_resetDataKeyframe(m, d, key)
  d.ctrl[:] = ctrl
  row = np.empty(mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_INTEGRATION))
  mujoco.mj_getState(m, d, row, mujoco.mjtState.mjSTATE_INTEGRATION)
  ext.step_loop(m._address, np.ascontiguousarray(np.tile(row, (n, 1))), 1, calls)
elif variant in ("mujoco.batch", "batch"):
  if variant == "batch":
    from mjbatch_jax import Batch
  else:
    from mujoco.batch import Batch
  b = Batch(m, n, 1)
  b.reset(keyframe=key)
  b.bind("ctrl")[:] = ctrl
  for _ in range(calls):
    b.step()
elif variant == "jax":
  import jax
  jax.config.update("jax_enable_x64", True)
  import jax.numpy as jnp
  import mjbatch_jax
  sim = mjbatch_jax.Simulator(m, num_threads=1)
  state = sim.init_state(n, keyframe=None if key < 0 else key)
  params = sim.params(n)
  u = jnp.tile(jnp.asarray(ctrl), (n, 1))
  f = jax.jit(lambda s: mjbatch_jax.step(s, u, params))
  state = f(state)
  for _ in range(calls - 1):
    state = f(state)
  state.block_until_ready()
"""
VARIANTS = ("c_loop", "mujoco.batch", "batch", "jax")


def count(path: Path, variant: str, n: int, calls: int, workdir: Path) -> int:
  script = workdir / "run.py"
  out = workdir / f"callgrind.{variant}.{calls}.out"
  # A fixed hash seed makes Python's own work (dict probes, collections) repeat exactly, so that
  # the two runs of a path differ by the calls alone.
  env = {**os.environ, "PYTHONHASHSEED": "0"}
  subprocess.run(
    ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, str(script),
     str(path), variant, str(n), str(calls)],
    check=True, capture_output=True, text=True, env=env,
  )
  summary = re.search(r"^summary:\s+(\d+)", out.read_text(), re.MULTILINE)
  if summary is None:
    raise RuntimeError(f"no summary in {out}")
  return int(summary.group(1))


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("model")
  parser.add_argument("--num-sims", type=int, default=64)
  parser.add_argument("--variants", default=",".join(VARIANTS))
  parser.add_argument("--out", type=Path, default=RESULTS)
  parser.add_argument("--quiet", action="store_true", help="no progress bar or progress lines")
  args = parser.parse_args(argv)
  variants = [v for v in args.variants.split(",") if v]
  unknown = set(variants) - set(VARIANTS)
  if unknown:
    raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {VARIANTS}")
  if shutil.which("valgrind") is None:
    raise SystemExit("valgrind is not installed (apt-get install valgrind)")
  path, _ = resolve_model(args.model)
  if path is None:
    raise SystemExit("instructions.py needs a model file")
  with tempfile.TemporaryDirectory() as tmp:
    workdir = Path(tmp)
    (workdir / "run.py").write_text(SCRIPT)
    jobs = [(v, c) for v in variants for c in (1, 3)]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import common  # pyright: ignore[reportMissingImports]  (here: the counted runs never load it)

    counts = {}
    with (concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool,
          common.Progress(len(jobs), "valgrind runs", quiet=args.quiet, unit="run") as bar):
      running = {pool.submit(count, path, v, args.num_sims, c, workdir): (v, c) for v, c in jobs}
      for done in concurrent.futures.as_completed(running):
        counts[running[done]] = done.result()
        bar.update(postfix=f"{running[done][0]} x{running[done][1]}")
  per_call = {v: (counts[(v, 3)] - counts[(v, 1)]) / 2 for v in variants}
  label = model_label(args.model, path)
  result = {"model": label, "num_sims": args.num_sims, "instructions_per_call": per_call,
            "raw": {f"{v}:{c}": counts[(v, c)] for v, c in jobs},
            "machine": machine_info(sys.argv)}
  base = per_call.get("mujoco.batch")
  print(f"{label}, N={args.num_sims}, one thread: instructions per call of one substep")
  for v, value in per_call.items():
    ratio = f"  ({value / base:.3f}x mujoco.batch)" if base else ""
    print(f"  {v:13s} {value / 1e6:9.2f} M{ratio}")
  write_result(args.out, f"instructions-{label}", result)
  return result


if __name__ == "__main__":
  main()
