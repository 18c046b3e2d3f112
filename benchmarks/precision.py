"""Precision of derivatives with float32 arrays: their error against the same derivatives with
float64 arrays, on settled states of the given models.

Rows (each a relative Frobenius error over all simulations, float32 vs float64 arrays):
  jacfwd_step:          jax.jacfwd of mjbatch_jax.step w.r.t. the whole row and the controls,
                        default eps (the differences are float64 inside the engine)
  jacfwd_step_dqvel_dqpos: the d qvel' / d qpos block of that Jacobian (contacts live here)
  transition_fd_A, _B:  mjbatch_jax.transition_fd defaults (method "rows": regime-checked copies
                        in the engine, float64 inside)
  transition_fd_native_A, _B: method="native" (mjd_transitionFD in the engine, float64 inside)

The float64 reference is the same call on float64 arrays (x64 on) at the same, float32-rounded
state, so the table shows only what the arrays' dtype costs.

  python benchmarks/precision.py unitree_go1 unitree_g1 cartpole --num-sims 4
"""

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from _common import RESULTS, machine_info, model_label, resolve_model, write_result  # noqa: E402

jax.config.update("jax_enable_x64", True)

import mjbatch_jax  # noqa: E402

# A smooth cart-pole (no contacts) beside the robots: the error there is rounding alone.
CARTPOLE = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body name="cart">
      <joint name="slide" type="slide" axis="1 0 0" damping=".1"/>
      <geom type="box" size=".1 .1 .05" mass="1"/>
      <body name="pole">
        <joint name="hinge" axis="0 1 0" damping=".01"/>
        <geom type="capsule" fromto="0 0 0 0 0 .5" size=".02" mass=".1"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slide" gear="10" ctrlrange="-1 1"/></actuator>
  <sensor><jointpos joint="hinge"/></sensor>
</mujoco>
"""


def load(name: str) -> tuple[str, mujoco.MjModel]:
  if name == "cartpole":
    model = mujoco.MjModel.from_xml_string(CARTPOLE)
    return name, model
  path, model = resolve_model(name)
  return model_label(name, path), model


def settled(sim: mjbatch_jax.Simulator, model: mujoco.MjModel, n: int, substeps: int,
            seed: int) -> tuple[jax.Array, jax.Array, Any]:
  """n states after `substeps` substeps from the first keyframe (or qpos0) with its controls,
  each with its own small velocity kick, rounded to float32."""
  rng = np.random.default_rng(seed)
  key = 0 if model.nkey else None
  state = np.array(sim.init_state(n, keyframe=key))
  state[:, sim.layout.qvel] += rng.normal(0, 0.02, (n, model.nv))
  ctrl = np.tile(model.key_ctrl[0] if model.nkey else np.zeros(model.nu), (n, 1))
  ctrl += rng.uniform(-0.05, 0.05, ctrl.shape)
  params = sim.params(n)
  state = mjbatch_jax.step(jnp.asarray(state), jnp.asarray(ctrl), params, nstep=substeps)
  state32 = jnp.asarray(state, jnp.float32)
  return state32, jnp.asarray(ctrl, jnp.float32), params


def rel(a: Any, b: Any) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def measure(name: str, n: int, substeps: int, seed: int) -> dict[str, float]:
  label, model = load(name)
  out: dict[str, float] = {}
  with mjbatch_jax.Simulator(model, num_threads=0) as sim:
    state32, ctrl32, _ = settled(sim, model, n, substeps, seed)
    layout = sim.layout

    one = sim.params(1)  # no fields: the model's values, for one simulation at a time

    def jac(state: jax.Array, ctrl: jax.Array) -> tuple[np.ndarray, np.ndarray]:
      js, jc = [], []
      f = jax.jacfwd(lambda s, c: mjbatch_jax.step(s[None], c[None], one)[0], argnums=(0, 1))
      for i in range(n):
        a, b = f(state[i], ctrl[i])
        js.append(np.asarray(a, np.float64))
        jc.append(np.asarray(b, np.float64))
      return np.stack(js), np.stack(jc)

    s64, c64 = state32.astype(jnp.float64), ctrl32.astype(jnp.float64)
    js32, jc32 = jac(state32, ctrl32)
    js64, jc64 = jac(s64, c64)
    cols = np.r_[np.arange(layout.qpos.start, layout.qpos.stop),
                 np.arange(layout.qvel.start, layout.qvel.stop),
                 np.arange(layout.act.start, layout.act.stop)]
    out["jacfwd_step"] = rel(np.concatenate([js32[:, :, cols], jc32], -1),
                             np.concatenate([js64[:, :, cols], jc64], -1))
    out["jacfwd_step_dqvel_dqpos"] = rel(js32[:, layout.qvel][:, :, layout.qpos],
                                         js64[:, layout.qvel][:, :, layout.qpos])
    p32 = sim.params(n)
    for method, prefix in (("rows", "transition_fd"), ("native", "transition_fd_native")):
      a32, b32 = mjbatch_jax.transition_fd(state32, ctrl32, p32, method=method)
      a64, b64 = mjbatch_jax.transition_fd(s64, c64, p32, method=method)
      out[f"{prefix}_A"] = rel(a32, a64)
      out[f"{prefix}_B"] = rel(b32, b64)
    out["label"] = label  # type: ignore[assignment]
  return out


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("models", nargs="+",
                      help="'cartpole', an XML path, or a folder under ../shared/models")
  parser.add_argument("--num-sims", type=int, default=4)
  parser.add_argument("--settle", type=int, default=300, help="substeps before measuring")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON")
  args = parser.parse_args(argv)
  if args.num_sims < 1 or args.settle < 0:
    parser.error("--num-sims must be >= 1 and --settle >= 0")
  rows = {}
  for name in args.models:
    row = measure(name, args.num_sims, args.settle, args.seed)
    rows[str(row.pop("label"))] = row
  keys = list(next(iter(rows.values())))
  print(f"{'relative error, float32 vs float64':<34}" + "".join(f"{m:>14}" for m in rows))
  for key in keys:
    print(f"{key:<34}" + "".join(f"{rows[m][key]:>14.2e}" for m in rows))
  write_result(args.out, "precision", {
    "machine": machine_info(sys.argv), "num_sims": args.num_sims, "settle": args.settle,
    "errors": rows,
  })


if __name__ == "__main__":
  main(sys.argv[1:])
