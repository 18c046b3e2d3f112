"""Swing up a double pole on a cart by iLQR (mjbatch_jax.control.ilqr); `--play` replays the plan.

Both poles start hanging; the plan is 100 knots of 4 physics steps (4 s), the force boxed to the
actuator's ctrlrange. The cost is quadratic: running costs on the cart, the velocities and the
force, a final cost on being upright and still.
"""

import common
import jax
import jax.numpy as jnp
import mujoco
import numpy as np

import mjbatch_jax
from mjbatch_jax import control

jax.config.update("jax_enable_x64", True)
# Poles point up at qpos = 0; the second hinge is relative to the first pole.
DOUBLE_CARTPOLE = """<mujoco><option timestep="0.01" integrator="implicitfast"/><default><geom
type="capsule" size=".03" mass=".2" contype="0" conaffinity="0"/></default><worldbody><light
pos="0 -2 3" dir="0 1 -1"/><body><joint name="slider" type="slide" axis="1 0 0" damping="0.1"/>
<geom type="box" size=".2 .1 .05" mass="1"/><body><joint axis="0 1 0" damping="0.002"/><geom
fromto="0 0 0 0 0 .5"/><body pos="0 0 .5"><joint axis="0 1 0" damping="0.002"/><geom
fromto="0 0 0 0 0 .5"/></body></body></body></worldbody><actuator><motor joint="slider" gear="20"
ctrlrange="-1 1"/></actuator></mujoco>"""
KNOTS, SUBSTEPS = 100, 4
# Weights on x = (cart, hinge1, hinge2 and their velocities), x = 0 upright, and on the force.
RUNNING = np.array([0.1, 0.0, 0.0, 0.01, 0.01, 0.01])
FINAL = np.array([10.0, 1000.0, 1000.0, 10.0, 20.0, 20.0])
EFFORT = 0.03
# Every accepted step relaxes the regularisation: the smooth dynamics linearise well.
SETTINGS = control.ILQRSettings(mu_factor=3.0, trust_step=0.0, distrust_step=0.0)


def tilts(qpos):
  """Angle of each pole from upright, in [0, pi]."""
  absolute = np.stack([qpos[..., 1], qpos[..., 1] + qpos[..., 2]], axis=-1)
  return np.abs(np.mod(absolute + np.pi, 2 * np.pi) - np.pi)


def main(argv=None) -> dict:
  parser = common.example_parser("cartpole_swingup", __doc__)
  parser.add_argument("--iterations", type=common.int_in(0, 10000, "iterations"), default=150)
  args = common.parse(parser, argv)
  model = mujoco.MjModel.from_xml_string(DOUBLE_CARTPOLE)
  version = common.model_fingerprint(model, RUNNING.tolist(), FINAL.tolist(), EFFORT, KNOTS)
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    lay = sim.layout
    start = sim.init_state(1)[0].at[lay.qpos].set(jnp.array([0.0, jnp.pi, 0.0]))  # hanging
    if args.play:
      saved, summary = common.load_result(args.out, "cartpole_swingup", version, {
        "ctrl": (KNOTS, model.nu), "states": (KNOTS + 1, lay.size)})
      rows = common.replay(sim.params(1), start, saved["ctrl"], SUBSTEPS)
      print(f"replay differs from the saved plan by {np.abs(rows - saved['states']).max():.1e}")
      t = SUBSTEPS * model.opt.timestep * np.arange(len(rows))
      tilt = tilts(rows[:, lay.qpos])
      common.plot_series(args.out.with_suffix(".png"), t, {
        "tilt from upright (rad)": {"pole 1": tilt[:, 0], "pole 2": tilt[:, 1]},
        "force (ctrl)": {"ctrl": saved["ctrl"][:, 0]}})
      print(common.render(model, rows, args.out.with_suffix(".gif"), 25, distance=3.5,
                          azimuth=90, elevation=0))
      common.print_summary(summary)
      return summary

    def residual(x, u, obs, t):
      s = jnp.concatenate([x[lay.qpos], x[lay.qvel]])
      return jnp.concatenate([np.sqrt(RUNNING) * s, np.sqrt(EFFORT) * u, np.sqrt(FINAL) * s])

    running = np.r_[np.ones(KNOTS), 0.0]  # per knot; the last is the final state's
    cost = control.Cost(residual, (control.Term(6, running), control.Term(1, running),
                                   control.Term(6, 1.0 - running)))
    push = 0.2 * jnp.sin(jnp.linspace(0, 4 * jnp.pi, KNOTS))[:, None]  # breaks the symmetry
    with (watch := common.Stopwatch())():
      plan = jax.block_until_ready(control.ilqr(cost, sim.params(1), start, push, nstep=SUBSTEPS,
                                                iterations=args.iterations, settings=SETTINGS))
  states = np.asarray(plan.states)
  final = tilts(states[-1, lay.qpos])
  summary = {"initial_cost": float(plan.costs[0]), "cost": float(plan.cost),
             "iterations": int(plan.iterations), "tilt1": float(final[0]), "tilt2": float(final[1]),
             "cart": float(states[-1, lay.qpos][0]), "seconds": watch.wall, "cpu": watch.cpu}
  print(f"{summary['iterations']} iterations in {watch.wall:.1f} s ({watch.cpu:.1f} s CPU) with "
        f"compilation; cost: {summary['initial_cost']:.3f} -> {summary['cost']:.3f}; final tilts: "
        f"pole 1 {final[0]:.4f} rad, pole 2 {final[1]:.4f} rad; cart at {summary['cart']:+.3f} m")
  common.save_result(args.out, "cartpole_swingup", {"ctrl": plan.ctrls, "states": states,
                                                    "gains": plan.gains}, summary, version)
  common.print_summary(summary)
  return summary


if __name__ == "__main__":
  main()
