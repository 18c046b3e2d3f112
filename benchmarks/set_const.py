"""Cost of recomputing derived constants per simulation and call (`params(..., set_const=True)`).

Times a jitted `mjbatch_jax.step` on settled rows with per-simulation body masses, with and
without set_const, interleaved, CPU time, and reports the ratio per nstep.

  python benchmarks/set_const.py unitree_go1 --num-sims 256 --nstep 1,10 --repeats 7
"""

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import (  # noqa: E402
  RESULTS,
  int_list,
  interleaved,
  machine_info,
  median,
  model_label,
  resolve_model,
  write_result,
)

jax.config.update("jax_enable_x64", True)

import mjbatch_jax  # noqa: E402


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("model", help="an XML path or a folder under ../shared/models")
  parser.add_argument("--num-sims", type=int, default=256)
  parser.add_argument("--nstep", type=int_list, default=[1, 10])
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--calls", type=int, default=5, help="calls per timed block")
  parser.add_argument("--threads", type=int, default=1)
  parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON")
  args = parser.parse_args(argv)
  if min(args.num_sims, args.repeats, args.calls) < 1 or args.threads < 0:
    parser.error("sizes must be >= 1 (threads >= 0)")
  path, model = resolve_model(args.model)
  n = args.num_sims
  rows = []
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    key = 0 if model.nkey else None
    ctrl = jnp.tile(jnp.asarray(model.key_ctrl[0] if model.nkey else np.zeros(model.nu)), (n, 1))
    state = mjbatch_jax.step(sim.init_state(n, keyframe=key), ctrl, sim.params(n), nstep=100)
    scale = jnp.linspace(0.9, 1.1, n)[:, None]
    variants = {}
    for flag in (False, True):
      p = sim.params(n, ("body_mass",), set_const=flag)
      variants[flag] = p.replace({"body_mass": p["body_mass"] * scale})
    for nstep in args.nstep:
      fns = {flag: jax.jit(lambda s, p, k=nstep: mjbatch_jax.step(s, ctrl, p, nstep=k))
             for flag in variants}
      times = interleaved({flag: functools.partial(fn, state, variants[flag])
                           for flag, fn in fns.items()}, args.repeats, calls=args.calls)
      plain, const = (median(times[flag]).cpu_s for flag in (False, True))
      row = {"nstep": nstep, "cpu_s_plain": plain, "cpu_s_set_const": const,
             "ratio": const / plain,
             "set_const_us_per_sim": (const - plain) / (args.calls * n) * 1e6}
      rows.append(row)
      print(f"nstep {nstep:3d}: set_const costs {row['ratio']:.2f}x the call "
            f"({row['set_const_us_per_sim']:.1f} us per simulation and call)")
  write_result(args.out, f"set_const-{model_label(args.model, path)}", {
    "machine": machine_info(sys.argv), "num_sims": n, "threads": args.threads, "rows": rows,
  })


if __name__ == "__main__":
  main(sys.argv[1:])
