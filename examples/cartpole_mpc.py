"""Swing a cart-pole up by sampling MPC: each control step rolls out 1024 plans of 25 knots (1 s)
in one call, moves the plan (predictive sampling, MPPI or CEM: --method), applies its first
control and shifts it, all one jitted function. `--play` replays the saved run."""

import argparse

import common
import jax
import jax.numpy as jnp
import mujoco
import numpy as np

import mjbatch_jax
from mjbatch_jax import control

jax.config.update("jax_enable_x64", True)
CARTPOLE = """<mujoco><option timestep="0.01" integrator="implicitfast"/><worldbody><body>
<joint name="x" type="slide" axis="1 0 0" range="-2 2" damping="0.5"/><geom type="box" mass="1"
size=".2 .1 .05" contype="0"/><body><joint axis="0 1 0" damping=".005"/><geom type="capsule"
fromto="0 0 0 0 0 .6" size=".03" mass=".2" contype="0"/></body></body></worldbody><actuator>
<motor joint="x" gear="10" ctrlrange="-1 1"/></actuator></mujoco>"""
KNOTS, SUBSTEPS, SAMPLES = 25, 4, 1024


def tilt(states, layout):
  return np.abs(np.mod(np.asarray(states)[..., layout.qpos][..., 1] + np.pi, 2 * np.pi) - np.pi)


def make_planner(sim, method: str, samples: int = SAMPLES) -> control.Planner:
  def residual(x, u, obs, t):  # upright (1 - cos = 2 sin(half)^2), centred, calm, effort
    q, v = x[sim.layout.qpos], x[sim.layout.qvel]
    return jnp.concatenate([2 * jnp.sin(q[1:] / 2), 0.4**0.5 * q[:1], 0.02**0.5 * v,
                            0.02**0.5 * u])

  cost = control.Cost(residual, (control.Term(4), control.Term(1, np.r_[np.ones(KNOTS), 0])))
  settings = control.SamplingSettings(method, samples, KNOTS, noise=0.5, temperature=0.1,
                                      num_elites=64)
  return control.sampling(cost, sim.params(1), horizon=KNOTS, nstep=SUBSTEPS, settings=settings)


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__)
  common.add_standard_args(parser, "cartpole_mpc")
  parser.add_argument("--method", choices=control.METHODS, default="predictive")
  parser.add_argument("--steps", type=common.int_in(1, 10**5, "control steps"), default=150)
  args = common.parse(parser, argv)
  model = mujoco.MjModel.from_xml_string(CARTPOLE)
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    lay = sim.layout
    start = sim.init_state(1)[0].at[lay.qpos].set(jnp.array([0.0, jnp.pi]))  # hanging
    if args.play:
      saved, summary = common.load_result(args.out, "cartpole_mpc", common.model_fingerprint(model))
      rows = common.replay(sim.params(1), start, saved["states"][1:, lay.ctrl], SUBSTEPS)
      print(f"replay differs from the saved run by {np.abs(rows - saved['states']).max():.1e}")
      common.plot_series(args.out.with_suffix(".png"), SUBSTEPS * 0.01 * np.arange(len(rows)), {
        "tilt (rad)": {"pole": tilt(rows, lay)}, "force": {"ctrl": rows[1:, lay.ctrl][:, 0]}})
      print(common.render(model, rows, args.out.with_suffix(".gif"), 25, azimuth=90, elevation=0))
      return summary

    planner = make_planner(sim, args.method)
    step = control.receding_horizon(planner, sim.params(1))
    rows, seconds, _ = common.run_mpc(step, start, planner.init(), args.seed, args.steps, 25,
                                   lambda k, s: f"tilt {tilt(s, lay):.3f} rad")
  summary = {"method": args.method, "final_tilt": float(tilt(rows[-1], lay)),
             "seconds_per_step": float(np.median(seconds[1:])), "control_period": 0.04}
  print(f"{args.steps} control steps, {summary['seconds_per_step'] * 1e3:.1f} ms each ("
        f"{SAMPLES} x {KNOTS} x {SUBSTEPS} steps; the control period is 40 ms); final tilt "
        f"{summary['final_tilt']:.3f} rad")
  common.save_result(args.out, "cartpole_mpc", {"states": rows}, summary,
                     common.model_fingerprint(model))
  common.print_summary(summary)
  return summary


if __name__ == "__main__":
  main()
