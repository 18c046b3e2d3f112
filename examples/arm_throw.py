"""Co-design of a two-motor throwing arm: morphology and control searched together by CEM.

  python examples/arm_throw.py [--population 256] [--iterations 60] [--restarts 4] [--play]

The arm (1 m of reach, a ball held by a weld) swings in the x-z plane from a shoulder 1.5 m up;
each joint has a DC motor behind a gearbox (`general` actuator: torque = stall (ctrl - gear qvel /
free speed), clamped; rotor inertia as armature gear^2 J), so the gear trades torque for speed.
A design is 12 numbers in [0, 1]: the upper link's share of the reach, both gears, 4 voltage
knots per motor over 0.65 s, the release time. A candidate is a row of params with set_const=True
(lengths, masses, inertias, gears, armature), never a recompile: it equals its compiled MjModel
bit for bit (tests/test_examples.py checks). A population is two rollout calls (the throw; the
ball's flight from each release); --restarts CEM searches (control.cem_search) run side by side in
those calls.
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # --play renders headless

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import common  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import control  # noqa: E402

SHOULDER_HEIGHT, REACH, BALL_RADIUS, BALL_MASS, HOLD_OFFSET = 1.5, 1.0, 0.045, 0.15, 0.055
TUBE_DENSITY, TUBE_RADIUS, ELBOW_MOTOR_MASS, HAND_MASS = 0.5, 0.02, 0.35, 0.1  # kg/m, m, kg, kg
STALL, FREE_SPEED, ROTOR_INERTIA = (6.0, 3.0), 24.0, 6e-4  # N m, rad/s at the motor, kg m^2
TIMESTEP, DEADLINE, KNOTS = 0.002, 0.65, 4
THROW_STEPS = round(DEADLINE / TIMESTEP)
FLIGHT_SUBSTEPS, FLIGHT_KNOTS = 5, 300  # 3 s of flight
UPPER_RANGE, GEAR_RANGE, KNOT_RANGE, RELEASE_RANGE = (0.15, 0.85), (0.5, 8.0), (-1.5, 1.5), \
  (0.1, DEADLINE)
DIM = 3 + 2 * KNOTS + 1
FLOOR = '<geom name="floor" type="plane" size="20 3 0.1" rgba=".75 .8 .75 1" contype="1" conaffinity="2"/>'  # noqa: E501
SMOOTHING, SPREAD = 0.5, 0.3  # CEM: weight of the old statistics; initial spread in the box


def tube_inertia(length):
  mass = TUBE_DENSITY * length
  across = mass * length**2 / 12 + mass * TUBE_RADIUS**2 / 2
  return mass, [across, across, mass * TUBE_RADIUS**2]


def arm_xml(upper: float = 0.5, gears: tuple[float, float] = (1.0, 1.0)) -> str:
  fore = REACH - upper
  (m1, i1), (m2, i2) = tube_inertia(upper), tube_inertia(fore)
  motor = ELBOW_MOTOR_MASS * np.array([(3 * 0.035**2 + 0.05**2) / 12, 0.035**2 / 2, 0])
  motor[2] = motor[0]

  def vec(values) -> str:
    return " ".join(repr(float(v)) for v in values)

  actuators = "".join(f"""
    <general name="{name}" joint="{name}" gear="{gear!r}" ctrlrange="-1 1" ctrllimited="true"
             gainprm="{stall!r}" biastype="affine" biasprm="0 0 {-stall / FREE_SPEED!r}"
             forcerange="{-stall!r} {stall!r}" forcelimited="true"/>"""
                      for name, stall, gear in zip(("shoulder", "elbow"), STALL, gears,
                                                   strict=True))
  return f"""
<mujoco model="arm_throw">
  <option timestep="{TIMESTEP}" integrator="implicitfast" iterations="40"/>
  <visual><global offwidth="640" offheight="368"/><headlight ambient=".5 .5 .5"/></visual>
  <default><geom contype="0" conaffinity="0" rgba=".2 .2 .2 1"/></default>
  <worldbody>
    <light pos="2 -4 6" dir="0 1 -1.5"/>
    <camera name="side" pos="3.8 -7.5 2.2" xyaxes="1 0 0 0 0.15 1"/>
    {FLOOR}
    <geom type="box" pos="-0.05 0.1 {SHOULDER_HEIGHT / 2}" size="0.04 0.04 {SHOULDER_HEIGHT / 2}"/>
    <body name="link1" pos="0 0 {SHOULDER_HEIGHT}">
      <joint name="shoulder" axis="0 1 0" armature="{ROTOR_INERTIA * gears[0] ** 2!r}"/>
      <inertial pos="0 0 {-upper / 2!r}" mass="{m1!r}" diaginertia="{vec(i1)}"/>
      <geom name="upper" type="capsule" pos="0 0 {-upper / 2!r}" size="{TUBE_RADIUS} {upper / 2!r}"
            rgba=".3 .4 .8 1"/>
      <body name="elbow_motor" pos="0 0 {-upper!r}">
        <inertial pos="0 0 0" mass="{ELBOW_MOTOR_MASS}" diaginertia="{vec(motor)}"/>
        <geom type="cylinder" size="0.035 0.025" zaxis="0 1 0"/>
      </body>
      <body name="link2" pos="0 0 {-upper!r}">
        <joint name="elbow" axis="0 1 0" range="-150 150" limited="true"
               armature="{ROTOR_INERTIA * gears[1] ** 2!r}"/>
        <inertial pos="0 0 {-fore / 2!r}" mass="{m2!r}" diaginertia="{vec(i2)}"/>
        <geom name="fore" type="capsule" pos="0 0 {-fore / 2!r}" size="{TUBE_RADIUS} {fore / 2!r}"
              rgba=".3 .6 .9 1"/>
        <body name="hand" pos="0 0 {-fore!r}">
          <inertial pos="0 0 0" mass="{HAND_MASS}" diaginertia="1e-4 1e-4 1e-4"/>
          <geom type="box" size="0.03 0.03 0.01"/>
        </body>
      </body>
    </body>
    <body name="ball" pos="0 0 {SHOULDER_HEIGHT - REACH - HOLD_OFFSET!r}">
      <freejoint name="ball"/>
      <geom name="ball" type="sphere" size="{BALL_RADIUS}" mass="{BALL_MASS}" contype="2"
            conaffinity="1" rgba=".9 .3 .2 1"/>
    </body>
  </worldbody>
  <equality><weld name="grip" body1="hand" body2="ball" relpose="0 0 {-HOLD_OFFSET} 1 0 0 0"
                  solref="0.004 1"/></equality>
  <actuator>{actuators}</actuator>
</mujoco>
"""


# -- the design: [0, 1]^12 -> physical values -> params and controls -----------------------------


def decode(u):
  """upper (...), gears (..., 2), knots (..., 2, 4), release time (...) of designs (..., 12)."""
  xp = jnp if isinstance(u, jax.Array) else np
  lo, hi = np.log(GEAR_RANGE[0]), np.log(GEAR_RANGE[1])
  knots = KNOT_RANGE[0] + (KNOT_RANGE[1] - KNOT_RANGE[0]) * u[..., 3 : 3 + 2 * KNOTS]
  return (UPPER_RANGE[0] + (UPPER_RANGE[1] - UPPER_RANGE[0]) * u[..., 0],
          xp.exp(lo + (hi - lo) * u[..., 1:3]), knots.reshape(*u.shape[:-1], 2, KNOTS),
          RELEASE_RANGE[0] + (RELEASE_RANGE[1] - RELEASE_RANGE[0]) * u[..., -1])


def encode(upper, gears, knots, release) -> np.ndarray:
  lo, hi = np.log(GEAR_RANGE[0]), np.log(GEAR_RANGE[1])
  return np.concatenate([[(upper - UPPER_RANGE[0]) / (UPPER_RANGE[1] - UPPER_RANGE[0])],
                         (np.log(gears) - lo) / (hi - lo),
                         (np.ravel(knots) - KNOT_RANGE[0]) / (KNOT_RANGE[1] - KNOT_RANGE[0]),
                         [(release - RELEASE_RANGE[0]) / (RELEASE_RANGE[1] - RELEASE_RANGE[0])]])


def controls(knots):
  """(..., THROW_STEPS, 2): the knots (..., 2, 4) spread over the deadline, linear, clipped."""
  xp = jnp if isinstance(knots, jax.Array) else np
  position = np.arange(THROW_STEPS) * TIMESTEP / DEADLINE * (KNOTS - 1)
  left = np.minimum(np.floor(position).astype(int), KNOTS - 2)
  frac = position - left
  ctrl = knots[..., left] * (1 - frac) + knots[..., left + 1] * frac
  return xp.clip(xp.swapaxes(ctrl, -1, -2), -1.0, 1.0)


def release_step(release):
  """The throw's recorded state at a release time: state k is at time (k + 1) dt."""
  xp = jnp if isinstance(release, jax.Array) else np
  return xp.clip(xp.round(release / TIMESTEP).astype(int) - 1, 0, THROW_STEPS - 1)


FIELDS = ("body_pos", "body_mass", "body_ipos", "body_inertia", "geom_pos", "geom_size",
          "actuator_gear", "dof_armature")
SELECT = {"body_pos": ["elbow_motor", "link2", "hand"], "body_mass": ["link1", "link2"],
          "body_ipos": ["link1", "link2"], "body_inertia": ["link1", "link2"],
          "geom_pos": ["upper", "fore"], "geom_size": ["upper", "fore"],
          "dof_armature": [0, 1]}  # the shoulder's and elbow's dofs (the ball's six follow)


def morphology(params, upper, gears):
  """params (N rows) with each row's links and gears set from upper (N,) and gears (N, 2)."""
  lengths = jnp.stack([upper, REACH - upper], axis=-1)
  zeros = jnp.zeros_like(lengths)
  along = jnp.stack([zeros, zeros, -lengths], axis=-1)  # (N, 2, 3): the links' ends
  mass, inertia = tube_inertia(lengths)
  return params.replace({
    "body_pos": jnp.stack([along[:, 0], along[:, 0], along[:, 1]], axis=1),
    "body_mass": mass, "body_ipos": along / 2, "body_inertia": jnp.stack(inertia, axis=-1),
    "geom_pos": along / 2, "geom_size": params["geom_size"].at[..., 1].set(lengths / 2),
    "actuator_gear": params["actuator_gear"].at[..., 0].set(gears),
    "dof_armature": ROTOR_INERTIA * gears**2})


class Thrower:
  """The arm's simulator and the jitted evaluation of any number of designs."""

  def __init__(self, num_threads: int):
    self.model = mujoco.MjModel.from_xml_string(arm_xml())
    self.sim = mjbatch_jax.Simulator(self.model, num_threads=num_threads)
    ball = self.sim.names.joint("ball")
    self.ball_qpos = np.arange(ball.qpos.start, ball.qpos.start + 3)
    self.ball_qvel = np.arange(ball.qvel.start, ball.qvel.start + 3)
    self.grip = self.sim.layout.eq_active.start + self.sim.names.id("equality", "grip")
    self.start = self.sim.init_state(1)[0]
    self.evaluate = jax.jit(self._evaluate, static_argnames=("set_const", "hand_release"))

  def bytes_per_design(self) -> float:
    """Memory an evaluation takes per design, from XLA's analysis of one of 256 designs (its
    buffers grow with the designs); 0 where XLA does not say."""
    shape = jax.ShapeDtypeStruct((256, DIM), jnp.asarray(0.0).dtype)
    stats = self.evaluate.lower(shape).compile().memory_analysis()
    if stats is None:
      return 0.0
    return (stats.temp_size_in_bytes + stats.argument_size_in_bytes
            + stats.output_size_in_bytes) / 256

  def inputs(self, u, set_const: bool = True):
    """The throw rollout's rows, controls and params for designs u (N, 12)."""
    upper, gears, knots, _ = decode(u)
    with jax.ensure_compile_time_eval():
      params = self.sim.params(u.shape[0], FIELDS, select=SELECT, set_const=set_const)
    rows = jnp.broadcast_to(self.start, (u.shape[0], self.sim.nstate))
    return rows, controls(knots), morphology(params, upper, gears)

  def flights(self, u, set_const: bool = True, hand_release: bool = False):
    """Throws (N, steps, nstate), release steps, flights from them (N, knots, nstate)."""
    rows, ctrls, params = self.inputs(u, set_const)
    throw, _ = mjbatch_jax.rollout(rows, ctrls, params)
    steps = hand_rule(throw[..., self.ball_qvel]) if hand_release else release_step(decode(u)[3])
    start = jnp.take_along_axis(throw, steps[:, None, None], axis=1)[:, 0].at[:, self.grip].set(0)
    flight, _ = mjbatch_jax.rollout(start, jnp.zeros((u.shape[0], FLIGHT_KNOTS, 2)), params,
                                    nstep=FLIGHT_SUBSTEPS)
    return throw, steps, flight

  def _evaluate(self, u, set_const: bool = True, hand_release: bool = False):
    """Distances (N,) of designs u (N, 12) and the release steps used."""
    throw, steps, flight = self.flights(u, set_const, hand_release)
    released = jnp.take_along_axis(throw, steps[:, None, None], axis=1)
    return landing(jnp.concatenate([released, flight], axis=1)[..., self.ball_qpos]), steps


def hand_rule(velocity):
  """The hand designer's release: the fastest ball leaving forward 35-55 degrees upward."""
  angle = jnp.degrees(jnp.arctan2(velocity[..., 2], velocity[..., 0]))
  ok = (velocity[..., 0] > 0) & (angle >= 35) & (angle <= 55)
  best = jnp.argmax(jnp.where(ok, jnp.linalg.norm(velocity, axis=-1), -1.0), axis=-1)
  return jnp.where(ok.any(axis=-1), best, THROW_STEPS - 1)


def landing(path):
  """x where the ball (N, K, 3) first comes down to one radius above the floor (interpolated)."""
  z = path[..., 2] - BALL_RADIUS
  down = z <= 0
  first = jnp.argmax(down, axis=-1)[:, None]
  before = jnp.maximum(first - 1, 0)
  x0, x1 = (jnp.take_along_axis(path[..., 0], i, axis=1)[:, 0] for i in (before, first))
  z0, z1 = (jnp.take_along_axis(z, i, axis=1)[:, 0] for i in (before, first))
  frac = jnp.where(z0 > z1, z0 / jnp.where(z0 > z1, z0 - z1, 1.0), 0.0)
  return jnp.where(down.any(axis=-1), x0 + jnp.clip(frac, 0.0, 1.0) * (x1 - x0), path[:, -1, 0])


def hand_designs() -> np.ndarray:
  """(81, 12): 3 splits x 3 x 3 gears x 3 full-voltage swings (forward, back-swing, delayed
  elbow); negative ctrl swings the hand forward (+x). The hand rule picks the release."""
  swings = (([-1.5] * 4, [-1.5] * 4), ([1.5, -1.5, -1.5, -1.5], [1.5, -1.5, -1.5, -1.5]),
            ([-1.5] * 4, [1.5, 1.5, -1.5, -1.5]))
  return np.clip([encode(upper, np.array([g1, g2]), np.array(swing), DEADLINE)
                  for upper in (0.4, 0.5, 0.6) for g1 in (1.0, 2.0, 3.0) for g2 in (1.0, 2.0, 3.0)
                  for swing in swings], 0.0, 1.0)


def search(thrower, start, population, iterations, seed, restarts, bar=None):
  """`restarts` CEM searches from start, side by side in the same calls (control.cem_search);
  each keeps its own key, elite and best-so-far (row 0 of its population: evaluations are
  deterministic). The longest throw is sought: a NaN distance counts as the shortest. bar: the
  common.Progress the iterations go to (default: one of its own)."""
  if bar is None:
    with common.progress(iterations, "CEM") as bar:
      return search(thrower, start, population, iterations, seed, restarts, bar)

  def log(step):
    if (step.iteration + 1) % 5 == 0 or step.iteration + 1 == iterations:
      bar.write(f"iteration {step.iteration + 1:3d}: best {step.best_value:.3f} m, population "
                f"mean {step.mean_value:.3f} m; best of each search "
                f"{' '.join(f'{v:.3f}' for v in step.best_values)}")
    bar.update(postfix=f"best {step.best_value:.3f} m")

  return control.cem_search(
    lambda u, _: thrower._evaluate(u)[0], start, SPREAD, key=jax.random.PRNGKey(seed),
    iterations=iterations, num_samples=population, num_elites=max(2, population // 10),
    restarts=restarts, lower=0.0, upper=1.0, smoothing=SMOOTHING, std_min=1e-3, maximize=True,
    log=log)


# -- solve and play -------------------------------------------------------------------------------


def describe(u: np.ndarray) -> str:
  upper, gears, knots, release = decode(np.asarray(u))
  return (f"upper {upper:.3f} m / forearm {REACH - upper:.3f} m, gears {gears[0]:.2f} "
          f"{gears[1]:.2f}, release {(int(release_step(release)) + 1) * TIMESTEP:.3f} s, knots "
          f"shoulder {np.round(np.clip(knots[0], -1, 1), 2).tolist()} elbow "
          f"{np.round(np.clip(knots[1], -1, 1), 2).tolist()}")


def solve(args, version: str) -> dict:
  thrower = Thrower(args.threads)
  # Every search's population is evaluated in one call: refuse sizes that cannot fit up front.
  common.check_memory(thrower.bytes_per_design() * args.population * args.restarts,
                      f"--population {args.population} x --restarts {args.restarts}")
  print(f"{DIM} design numbers; {args.restarts} searches of population {args.population} x "
        f"{args.iterations} iterations; {thrower.sim.num_threads} threads")
  watch = common.Stopwatch()
  with watch():
    hands = jnp.asarray(hand_designs())
    distance, steps = thrower.evaluate(hands, hand_release=True)
    best = int(np.argmax(np.asarray(distance)))
    hand = np.asarray(hands[best]).copy()  # with the release the hand rule chose
    hand[-1] = np.clip(((int(steps[best]) + 1) * TIMESTEP - RELEASE_RANGE[0])
                       / (RELEASE_RANGE[1] - RELEASE_RANGE[0]), 0.0, 1.0)
    hand_distance = float(thrower.evaluate(jnp.asarray(hand)[None])[0][0])
    print(f"best of {len(hands)} hand designs: {hand_distance:.3f} m ({describe(hand)})")
    search_watch = common.Stopwatch()
    with search_watch(), common.progress(args.iterations, "CEM", args) as bar:
      result = search(thrower, hand, args.population, args.iterations, args.seed, args.restarts,
                      bar)
  searches, design = np.asarray(result.best_value_per_restart), np.asarray(result.best)
  best = float(searches.max())
  print(f"the {args.restarts} searches ended at {', '.join(f'{v:.3f}' for v in searches)} m: "
        f"the best is kept\noptimised design: {best:.3f} m ({describe(design)})\nthrow distance: "
        f"best hand design {hand_distance:.2f} m -> optimised {best:.2f} m "
        f"({100 * (best / hand_distance - 1):+.0f}%)")
  print(f"wall time {watch.wall:.1f} s in all, of which the search {search_watch.wall:.1f} s "
        "(its first iteration compiles)")
  summary = {"hand_distance": hand_distance, "distance": best, "searches": searches,
             "population": args.population, "iterations": args.iterations,
             "restarts": args.restarts, "seconds": watch.wall}
  history = {"best_per_iteration": np.asarray(result.best_value_per_iteration),
             "mean_per_iteration": np.asarray(result.mean_value_per_iteration)}
  common.save_result(args.out, "arm_throw", {"design": design, "hand_design": hand, **history},
                     summary, version)
  print(f"saved to {args.out}")
  thrower.sim.close()
  return summary


def play(args, version: str) -> dict:
  saved, meta = common.load_result(args.out, "arm_throw", version, {
    "design": (DIM,), "hand_design": (DIM,), "best_per_iteration": ("I",),
    "mean_per_iteration": ("I",)})
  thrower = Thrower(args.threads)
  designs = np.stack([saved["hand_design"], saved["design"]])
  throw, steps, flight = (np.asarray(a) for a in thrower.flights(jnp.asarray(designs)))
  distances = np.asarray(thrower.evaluate(jnp.asarray(designs))[0])
  summary = {}
  for i, label in enumerate(("hand design", "optimised")):
    speed = float(np.linalg.norm(throw[i, steps[i], thrower.ball_qvel]))
    print(f"{label:11s}: {distances[i]:.3f} m, released at {speed:.2f} m/s; {describe(designs[i])}")
    summary[label] = {"distance": float(distances[i]), "speed": speed}
  saved_distances = [meta["hand_distance"], meta["distance"]]
  if not np.allclose(distances, saved_distances, rtol=0, atol=1e-9):
    raise SystemExit(f"replayed distances {distances} differ from the saved {saved_distances}")
  common.plot_series(args.out.with_suffix(".png"), np.arange(len(saved["best_per_iteration"])), {
    "distance (m)": {"best": saved["best_per_iteration"], "mean": saved["mean_per_iteration"]}},
    xlabel="CEM iteration")
  rows = np.concatenate([throw[1, : steps[1] + 1 : 8], flight[1, ::2]])
  upper, gears, _, _ = decode(designs[1])  # the optimised arm, compiled to be shown
  model = mujoco.MjModel.from_xml_string(arm_xml(float(upper), (float(gears[0]), float(gears[1]))))
  print(common.render(model, rows, args.out.with_suffix(".mp4"), 50, camera="side", height=368,
                      width=640))
  thrower.sim.close()
  return summary


def main(argv=None) -> dict:
  parser = common.example_parser("arm_throw", "Co-design of a throwing arm by CEM.", threads=2)
  parser.add_argument("--population", type=common.int_in(8, 10**6, "candidates per search; the "
                      "elite is a tenth"), default=256)
  parser.add_argument("--iterations", type=common.int_in(1, 10**5, "CEM iterations"), default=60)
  parser.add_argument("--restarts", type=common.int_in(1, 1000, "searches side by side"),
                      default=4)
  args = common.parse(parser, argv)
  version = common.fingerprint(arm_xml(), UPPER_RANGE, GEAR_RANGE, KNOT_RANGE, RELEASE_RANGE,
                               KNOTS, DEADLINE, FLIGHT_SUBSTEPS, FLIGHT_KNOTS)
  summary = play(args, version) if args.play else solve(args, version)
  common.print_summary(summary)
  return summary


if __name__ == "__main__":
  main()
