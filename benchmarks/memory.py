"""Peak resident memory against the number of simulations N, for each way of holding them.

  python benchmarks/memory.py unitree_g1 --num-sims 16,256,1024,4096,16384 --threads 2

Each measurement runs in a fresh subprocess that loads the model, builds N simulations one way,
steps them once, and reports its peak RSS (resource.getrusage ru_maxrss), so that no allocation
of one measurement can hide in another's peak. Ways: mjbatch_jax.Batch; the JAX path
(Simulator + init_state + params + a jitted step); one MjData per simulation; MJX (make_data
vmapped over N, jitted step) when mujoco.mjx is importable, in this interpreter or in
--mjx-python. Each is reported with a baseline (the same process, N simulations not built) taken
away too, and for the largest model the growth RSS(N=4096) - RSS(N=16) is printed, which the
project wants under 32 MB for the G1.

MODEL is resolved as by scaling.py. Writes benchmarks/results/memory-<model>-<date>.json and,
when matplotlib is installed, a .png plot beside it (or under --out).
"""

import argparse
import datetime
import importlib.util
import json
import resource
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
  RESULTS,
  int_list,
  machine_info,
  model_label,
  pyplot,
  resolve_model,
  save_figure,
  write_result,
)

WAYS = ("baseline", "mjbatch_jax.Batch", "jax", "mjdata_per_sim", "mjx")
GROWTH_BUDGET_MB = 32.0


def _peak_mb() -> float:
  # ru_maxrss is in kilobytes on Linux (bytes on macOS).
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def child(way: str, xml: str, num_sims: int, threads: int) -> dict[str, Any]:
  """Run in the subprocess: build num_sims simulations one way, step once, report peak RSS."""
  import mujoco
  import numpy as np

  model = mujoco.MjModel.from_xml_path(xml)
  keep: list[Any] = []
  if way == "baseline":
    # What every way pays before it holds a simulation: the interpreter, MuJoCo, JAX, a model.
    import jax

    import mjbatch_jax  # noqa: F401

    jax.numpy.zeros(1).block_until_ready()
  elif way == "mjbatch_jax.Batch":
    import mjbatch_jax

    batch = mjbatch_jax.Batch(model, num_sims, threads)
    batch.step()
    keep.append(batch)
  elif way == "jax":
    import jax

    import mjbatch_jax

    jax.config.update("jax_enable_x64", True)
    sim = mjbatch_jax.Simulator(model, num_threads=threads)
    state = sim.init_state(num_sims)
    params = sim.params(num_sims)
    ctrl = jax.numpy.zeros((num_sims, model.nu))
    state = jax.jit(mjbatch_jax.step)(state, ctrl, params)
    keep += [sim, jax.block_until_ready(state)]
  elif way == "mjdata_per_sim":
    datas = [mujoco.MjData(model) for _ in range(num_sims)]
    for data in datas:
      mujoco.mj_step(model, data)
    keep.append(datas)
  elif way == "mjx":
    import jax
    from mujoco import mjx  # pyright: ignore[reportAttributeAccessIssue]

    mx = mjx.put_model(model)
    data = jax.vmap(lambda _: mjx.make_data(mx))(np.arange(num_sims))
    data = jax.jit(jax.vmap(mjx.step, (None, 0)))(mx, data)
    keep.append(jax.block_until_ready(data))
  else:
    raise ValueError(f"unknown way {way!r}")
  return {"peak_mb": _peak_mb()}


def measure(python: str, way: str, xml: Path, num_sims: int, threads: int) -> dict[str, Any]:
  """Peak RSS of one fresh subprocess, or the error it ended with."""
  command = [python, str(Path(__file__).resolve()), "--child", way, str(xml), str(num_sims),
             str(threads)]
  proc = subprocess.run(command, capture_output=True, text=True, timeout=1800)
  lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
  if proc.returncode != 0 or not lines:
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit {proc.returncode}: {tail}"}
  return json.loads(lines[-1])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawTextHelpFormatter
  )
  parser.add_argument("model", help="XML path, folder under ../shared/models, or Menagerie name")
  parser.add_argument("--num-sims", type=int_list, default=[16, 256, 1024, 4096, 16384])
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--ways", default=",".join(WAYS[1:]), help=f"of {','.join(WAYS[1:])}")
  parser.add_argument("--mjx-python", help="interpreter with mujoco-mjx (default: this one)")
  parser.add_argument("--out", type=Path, default=RESULTS)
  parser.add_argument("--quiet", action="store_true", help="no progress bar or progress lines")
  parser.add_argument("--no-plot", action="store_true")
  return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  argv = list(sys.argv[1:] if argv is None else argv)
  if argv and argv[0] == "--child":
    print(json.dumps(child(argv[1], argv[2], int(argv[3]), int(argv[4]))))
    return {}
  args = parse_args(argv)

  xml, _ = resolve_model(args.model)
  if xml is None:
    raise SystemExit("memory.py needs the model as an XML file, for its subprocesses")
  label = model_label(args.model, xml)
  ways = [w.strip() for w in args.ways.split(",") if w.strip()]
  unknown = set(ways) - set(WAYS[1:])
  if unknown:
    raise SystemExit(f"unknown ways {sorted(unknown)}; choose from {WAYS[1:]}")
  mjx_python = args.mjx_python
  if mjx_python is None and importlib.util.find_spec("mujoco.mjx") is not None:
    mjx_python = sys.executable

  rows: dict[str, Any] = {}
  # Imported here, not at the top: the children (this script with --child) measure their own
  # memory and must not hold what the examples' module imports.
  sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
  import common  # pyright: ignore[reportMissingImports]

  with common.progress((1 + len(ways)) * len(args.num_sims), "memory", args,
                       unit="process") as bar:
    for way in ["baseline", *ways]:
      if way == "mjx" and mjx_python is None:
        rows[way] = {"available": False,
                     "reason": "mujoco-mjx is not importable here; pass --mjx-python PATH"}
        bar.update(len(args.num_sims))
        continue
      python = mjx_python if way == "mjx" else sys.executable
      assert python is not None
      results = []
      for n in args.num_sims:
        result = measure(python, way, xml, n, args.threads)
        results.append({"num_sims": n, **result})
        bar.update(postfix=f"{way} N={n}")
      errors = [r["error"] for r in results if "error" in r]
      if len(errors) == len(results):
        rows[way] = {"available": False, "reason": errors[0]}
      else:
        rows[way] = {"available": True, "results": results}

  growth: dict[str, float | None] = {}
  lines = ["peak RSS (MB) by N; in brackets, minus the baseline at the same N",
           "way".ljust(20) + "".join(f"N={n}".rjust(16) for n in args.num_sims)]
  base = {r["num_sims"]: r.get("peak_mb") for r in rows["baseline"].get("results", [])}
  for way in ways:
    row = rows[way]
    if not row["available"]:
      lines.append(way.ljust(20) + f"unavailable: {row['reason']}"[:200])
      continue
    by_n = {r["num_sims"]: r.get("peak_mb") for r in row["results"]}
    cells = []
    for n in args.num_sims:
      peak, b = by_n.get(n), base.get(n)
      cells.append(("-" if peak is None else
                    f"{peak:.0f} ({peak - b:+.0f})" if b else f"{peak:.0f}").rjust(16))
    lines.append(way.ljust(20) + "".join(cells))
    lo, hi = by_n.get(16), by_n.get(4096)
    growth[way] = hi - lo if lo is not None and hi is not None else None
    row["growth_4096_minus_16_mb"] = growth[way]
  lines.append(f"RSS(N=4096) - RSS(N=16), MB (target for the G1 under {GROWTH_BUDGET_MB:.0f} MB):")
  for way, mb in growth.items():
    lines.append(f"  {way}: " + ("not measured (needs N=16 and N=4096)" if mb is None
                                 else f"{mb:.1f}"))
  print("\n".join(lines))

  result = {
    "model": label,
    "model_path": str(xml),
    "date": datetime.datetime.now().isoformat(timespec="seconds"),
    "machine": machine_info([sys.argv[0], *argv]),
    "settings": {"num_sims": args.num_sims, "threads": args.threads, "ways": ways},
    "rows": rows,
  }
  json_path = write_result(args.out, f"memory-{label}", result)
  if not args.no_plot and (plt := pyplot()) is not None:
    fig, ax = plt.subplots(figsize=(7, 5))
    for way in ["baseline", *ways]:
      row = rows[way]
      if row["available"]:
        points = [(r["num_sims"], r["peak_mb"]) for r in row["results"] if "peak_mb" in r]
        if points:
          xs, ys = zip(*points, strict=True)
          ax.plot(xs, ys, marker="o", label=way)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("simulations N")
    ax.set_ylabel("peak RSS (MB)")
    ax.set_title(f"{label}: peak RSS, threads={args.threads}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    save_figure(fig, json_path.with_suffix(".png"), dpi=100)
  return result


if __name__ == "__main__":
  main()
