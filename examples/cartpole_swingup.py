"""Swing up a double pole on a cart by iLQR (mjbatch_jax.control.ilqr).

  python examples/cartpole_swingup.py [--iterations 150]
  python examples/cartpole_swingup.py --play     # replay the saved plan: metrics, plot, GIF

Both poles start hanging; the plan is 100 knots of 4 physics steps (4 s), the force boxed to the
actuator's ctrlrange. The cost is quadratic: running costs on the cart and the velocities and on
the force, a final cost on being upright and still.
"""

import argparse

import jax

jax.config.update("jax_enable_x64", True)

import common  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import control  # noqa: E402

# Poles point up at qpos = 0; the second hinge is relative to the first pole.
DOUBLE_CARTPOLE = """
<mujoco>
  <option timestep="0.01" integrator="implicitfast"/>
  <worldbody>
    <light pos="0 -2 3" dir="0 1 -1"/>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0" damping="0.1"/>
      <geom type="box" size=".2 .1 .05" mass="1" contype="0" conaffinity="0"/>
      <body name="pole1">
        <joint name="hinge1" axis="0 1 0" damping="0.002"/>
        <geom type="capsule" fromto="0 0 0 0 0 .5" size=".03" mass=".2" contype="0"
              conaffinity="0"/>
        <body name="pole2" pos="0 0 .5">
          <joint name="hinge2" axis="0 1 0" damping="0.002"/>
          <geom type="capsule" fromto="0 0 0 0 0 .5" size=".03" mass=".2" contype="0"
                conaffinity="0"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slider" gear="20" ctrlrange="-1 1" ctrllimited="true"/></actuator>
</mujoco>
"""
KNOTS, SUBSTEPS = 100, 4
# Weights on x = (cart, hinge1, hinge2 and their velocities), x = 0 upright, and on the force.
RUNNING = np.array([0.1, 0.0, 0.0, 0.01, 0.01, 0.01])
FINAL = np.array([10.0, 1000.0, 1000.0, 10.0, 20.0, 20.0])
EFFORT = 0.03
# Every accepted step relaxes the regularisation: the smooth dynamics linearise well.
SETTINGS = control.ILQRSettings(mu_factor=3.0, trust_step=0.0, distrust_step=0.0)


def swing_up(sim: mjbatch_jax.Simulator, iterations: int) -> control.ILQRResult:
  layout = sim.layout

  def residual(x, u, obs, t):
    s = jnp.concatenate([x[layout.qpos], x[layout.qvel]])
    return jnp.concatenate([np.sqrt(RUNNING) * s, np.sqrt(EFFORT) * u, np.sqrt(FINAL) * s])

  running = np.r_[np.ones(KNOTS), 0.0]  # per knot; the last is the final state's
  cost = control.Cost(residual, (control.Term(6, running), control.Term(1, running),
                                 control.Term(6, 1.0 - running)))
  push = 0.2 * jnp.sin(jnp.linspace(0, 4 * jnp.pi, KNOTS))[:, None]  # breaks the symmetry
  return control.ilqr(cost, sim.params(1), start_state(sim), push, nstep=SUBSTEPS,
                      iterations=iterations, settings=SETTINGS)


def start_state(sim: mjbatch_jax.Simulator) -> jax.Array:
  return sim.init_state(1)[0].at[sim.layout.qpos].set(jnp.array([0.0, jnp.pi, 0.0]))  # hanging


def tilts(qpos: np.ndarray) -> np.ndarray:
  """Angle of each pole from upright, in [0, pi]."""
  absolute = np.stack([qpos[..., 1], qpos[..., 1] + qpos[..., 2]], axis=-1)
  return np.abs(np.mod(absolute + np.pi, 2 * np.pi) - np.pi)


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description="iLQR swing-up of a double cart-pole.")
  common.add_standard_args(parser, "cartpole_swingup")
  parser.add_argument("--iterations", type=common.int_in(0, 10000, "iterations"), default=150,
                      help="most iLQR iterations")
  args = common.parse(parser, argv)
  model = mujoco.MjModel.from_xml_string(DOUBLE_CARTPOLE)
  version = common.model_fingerprint(model, RUNNING.tolist(), FINAL.tolist(), EFFORT, KNOTS)
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    if args.play:
      saved, summary = common.load_result(args.out, "cartpole_swingup", version, keys=("ctrl",))
      states, _ = mjbatch_jax.rollout(start_state(sim)[None], jnp.asarray(saved["ctrl"])[None],
                                      sim.params(1), nstep=SUBSTEPS)
      states = np.concatenate([np.asarray(start_state(sim))[None], np.asarray(states[0])])
      print(f"replay differs from the saved plan by {np.abs(states - saved['states']).max():.1e}")
      plt = common.pyplot()
      if plt is not None:
        fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
        t = SUBSTEPS * model.opt.timestep * np.arange(len(states))
        axes[0].plot(t, tilts(states[:, sim.layout.qpos]), label=["pole 1", "pole 2"])
        axes[0].set(ylabel="tilt from upright (rad)")
        axes[0].legend()
        axes[1].step(t[:-1], saved["ctrl"][:, 0], where="post")
        axes[1].set(xlabel="time (s)", ylabel="force (ctrl)")
        common.save_figure(fig, args.out.with_suffix(".png"))
      print(common.render(model, states, args.out.with_suffix(".gif"), fps=25, distance=3.5,
                          azimuth=90, elevation=0))
    else:
      watch = common.Stopwatch()
      with watch():
        plan = jax.block_until_ready(swing_up(sim, args.iterations))
      states = np.asarray(plan.states)
      final = tilts(states[-1, sim.layout.qpos])
      summary = {"initial_cost": float(plan.costs[0]), "cost": float(plan.cost),
                 "iterations": int(plan.iterations), "tilt1": float(final[0]),
                 "tilt2": float(final[1]), "cart": float(states[-1, sim.layout.qpos][0]),
                 "seconds": watch.wall}
      print(f"{summary['iterations']} iterations in {watch.wall:.1f} s with compilation ({KNOTS} "
            f"knots, one transition_fd call each)")
      print(f"cost: {summary['initial_cost']:.3f} -> {summary['cost']:.3f}")
      print(f"final tilts: pole 1 {final[0]:.4f} rad, pole 2 {final[1]:.4f} rad; cart at "
            f"{summary['cart']:+.3f} m")
      common.save_result(args.out, "cartpole_swingup", {
        "ctrl": plan.ctrls, "states": states, "gains": plan.gains, "costs": plan.costs},
        summary, version)
      print(f"plan saved to {args.out}")
  common.print_summary(summary)
  return summary


if __name__ == "__main__":
  main()
