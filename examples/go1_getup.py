"""The Unitree Go1 gets up from lying on its side, by receding-horizon sampling on the full model.

  python examples/go1_getup.py [--steps 150] [--samples 128] [--method predictive]
  python examples/go1_getup.py --play     # replay the saved run: metrics, plot, GIF

The robot starts on its side, the servos holding the standing pose's joint angles. Every control
step (0.02 s) a sampling planner (control.sampling: 128 candidate plans of 5 cubic knots over a
0.5 s horizon, one rollout call) moves the plan of joint targets, the first target is applied to
the real simulation for 10 physics steps and the plan is shifted: control.receding_horizon, one
jitted function. The cost asks for the trunk upright and at standing height, the joints near the
standing pose, and calm motion. It prints the planning time per control step against the control
period (the real-time factor on this machine), when the robot got up and how much of the time
after that it stayed upright.
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # --play renders headless

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import common  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import control, rotations  # noqa: E402

NSTEP, HORIZON, KNOTS = 10, 25, 5  # 0.02 s control period, 0.5 s horizon
HEIGHT = 0.27  # m: the trunk's height standing
UPRIGHT_TILT = 0.3  # rad: upright means the trunk's z axis within this of vertical...
UP_HEIGHT = 0.22  # m: ...and the trunk above this


def tilt_and_height(rows: np.ndarray, layout) -> tuple[np.ndarray, np.ndarray]:
  qpos = np.asarray(rows)[..., layout.qpos]
  up = np.asarray(rotations.rotate(qpos[..., 3:7], jnp.array([0.0, 0.0, 1.0])))
  return np.arccos(np.clip(up[..., 2], -1, 1)), qpos[..., 2]


def lying_state(sim: mjbatch_jax.Simulator, home: np.ndarray) -> jax.Array:
  """On its right side at rest: the standing pose turned 90 degrees about x, dropped, settled."""
  qpos = home.copy()
  qpos[2] = 0.2
  qpos[3:7] = np.asarray(rotations.from_axis_angle(np.array([1.0, 0, 0]), np.pi / 2))
  row = sim.init_state(1)[0].at[sim.layout.qpos].set(qpos).at[sim.layout.ctrl].set(home[7:])
  states, _ = mjbatch_jax.rollout(row[None], jnp.broadcast_to(home[7:], (1, 100, sim.nu)),
                                  sim.params(1), nstep=NSTEP)  # 2 s
  return states[0, -1]


def getup_cost(sim: mjbatch_jax.Simulator, home: np.ndarray) -> control.Cost:
  lay = sim.layout

  def residual(x, u, obs, t):
    qpos, qvel = x[lay.qpos], x[lay.qvel]
    up = rotations.rotate(qpos[3:7], jnp.array([0.0, 0.0, 1.0]))
    return jnp.concatenate([up - jnp.array([0.0, 0.0, 1.0]), qpos[2:3] - HEIGHT,
                            qpos[7:] - home[7:], qvel[:6], u - home[7:]])

  return control.Cost(residual, (
    control.Term(3, 10.0), control.Term(1, 100.0), control.Term(sim.nu, 0.3),
    control.Term(6, 0.01), control.Term(sim.nu, 0.05, "smooth_abs", 0.1)))


def main(argv=None) -> dict:
  parser = common.example_parser("go1_getup", "Go1 getting up by sampling MPC.", mpc_steps=150,
                                 robot="unitree_go1")
  parser.add_argument("--samples", type=common.int_in(2, 10**6, "candidates"), default=128)
  args = common.parse(parser, argv)
  model = common.load_scene(args.model, "unitree_go1", bodies=("trunk",))
  home, period = model.key_qpos[0].copy(), NSTEP * model.opt.timestep
  with mjbatch_jax.Simulator(model, num_threads=args.threads) as sim:
    start = lying_state(sim, home)
    if args.play:
      return common.play_run(args, "go1_getup", model, sim, start, NSTEP, {
        "trunk tilt (rad)": lambda r: tilt_and_height(r, sim.layout)[0],
        "trunk height (m)": lambda r: tilt_and_height(r, sim.layout)[1]},
        every=3, track_body="trunk", distance=1.2)
    common_settings = {"num_samples": args.samples, "num_knots": KNOTS,
                       "interpolation": "cubic", "noise": 0.15}
    settings = {"predictive": control.PredictiveSettings(**common_settings),
                "mppi": control.MPPISettings(**common_settings, temperature=0.5),
                "cem": control.CEMSettings(**common_settings,
                                           num_elites=max(2, args.samples // 16))}[args.method]
    planner = control.sampling(getup_cost(sim, home), sim.params(1), horizon=HORIZON,
                               nstep=NSTEP, settings=settings)

    def report(k, state):
      tilt, height = tilt_and_height(state, sim.layout)
      return f"tilt {float(tilt):.2f} rad, height {float(height):.3f} m"

    rows, timing = common.run_mpc(planner, sim.params(1), start, args.seed, args.steps,
                                  planner.init(jnp.broadcast_to(home[7:], (HORIZON, sim.nu))),
                                  every=10, report=report)
  tilt, height = tilt_and_height(rows, sim.layout)
  up = (tilt < UPRIGHT_TILT) & (height > UP_HEIGHT)
  planning, planning_cpu = timing["seconds_per_step"], timing["cpu_per_step"]
  first = int(np.argmax(up)) if up.any() else len(up)
  share = float(up[first:].mean()) if up.any() else 0.0  # of the time after it first got up
  summary = {"got_up": bool(up.any()), "time_to_get_up": period * first if up.any() else None,
             "upright_share_after": share, "final_tilt": float(tilt[-1]),
             "final_height": float(height[-1]), "planning_seconds": planning,
             "planning_cpu_seconds": planning_cpu, "control_period": period,
             "real_time_factor": period / planning, "samples": args.samples,
             "sim_steps_per_control_step": args.samples * HORIZON * NSTEP,
             "threads": sim.num_threads, "method": args.method}
  print((f"got up after {period * first:.2f} s, then upright {100 * share:.0f}% of the time"
         if up.any() else "did NOT get up") + f"; final tilt {tilt[-1]:.2f} rad, height "
        f"{height[-1]:.3f} m")
  print(f"planning: {planning * 1e3:.0f} ms per control step ({planning_cpu * 1e3:.0f} ms CPU; "
        f"{args.samples} x {HORIZON} x {NSTEP} physics steps) against a control period of "
        f"{period * 1e3:.0f} ms: real-time factor {period / planning:.3f} on "
        f"{sim.num_threads} threads")
  return common.save_run(args, "go1_getup", model, rows, summary)


if __name__ == "__main__":
  main()
