"""Swing a cart-pole up by sampling MPC (control.sampling, --method predictive, mppi or cem): each
control step rolls out 1024 plans of 25 knots in one call. `--play` replays the saved run."""

import common
import jax
import jax.numpy as jnp
import mujoco
import numpy as np

import mjbatch_jax
from mjbatch_jax import control

jax.config.update("jax_enable_x64", True)
CARTPOLE = """<mujoco><option timestep="0.01" integrator="implicitfast"/><worldbody><body><joint
name="x" type="slide" axis="1 0 0" range="-2 2" damping="0.5"/><geom type="box" mass="1" size=".2
.1 .05" contype="0"/><body><joint axis="0 1 0" damping=".005"/><geom type="capsule" size=".03"
fromto="0 0 0 0 0 .6" mass=".2" contype="0"/></body></body></worldbody><actuator><motor joint="x"
gear="10" ctrlrange="-1 1"/></actuator></mujoco>"""
KNOTS, SUBSTEPS, SAMPLES = 25, 4, 1024


def make_planner(sim, method: str, samples: int = SAMPLES) -> control.Planner:
  def residual(x, u, obs, t):  # upright (1 - cos = 2 sin(half)^2), centred, calm, effort
    q, v = x[sim.layout.qpos], x[sim.layout.qvel]
    return jnp.concatenate([2 * jnp.sin(q[1:] / 2), 0.4**0.5 * q[:1], 0.02**0.5 * v, 0.02**0.5 * u])

  cost = control.Cost(residual, (control.Term(4), control.Term(1, np.r_[np.ones(KNOTS), 0])))
  settings = {"predictive": control.PredictiveSettings(samples, KNOTS, noise=0.5),
              "mppi": control.MPPISettings(samples, KNOTS, noise=0.5, temperature=0.1),
              "cem": control.CEMSettings(samples, KNOTS, noise=0.5)}[method]
  return control.sampling(cost, sim.params(1), horizon=KNOTS, nstep=SUBSTEPS, settings=settings)


def main(argv=None) -> dict:
  args = common.parse(common.example_parser("cartpole_mpc", __doc__, mpc_steps=150), argv)
  model = mujoco.MjModel.from_xml_string(CARTPOLE)
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    hinge = sim.layout.qpos.start + 1  # the pole's angle in a state row, 0 upright
    start, planner = sim.init_state(1)[0].at[hinge].set(jnp.pi), make_planner(sim, args.method)
    tilt = lambda s: np.abs(np.mod(np.asarray(s)[..., hinge] + np.pi, 2 * np.pi) - np.pi)  # noqa
    if args.play:
      return common.play_run(args, "cartpole_mpc", model, sim, start, SUBSTEPS, {"tilt": tilt})
    rows, timing = common.run_mpc(planner, sim.params(1), start, args.seed, args.steps,
                                  every=25, report=lambda k, s: f"tilt {tilt(s):.3f} rad")
  return common.save_run(args, "cartpole_mpc", model, rows, {
    "method": args.method, "final_tilt": float(tilt(rows[-1])), "control_period": 0.04, **timing})


if __name__ == "__main__":
  main()
