"""Co-design of a two-motor throwing arm: morphology and control searched together, no recompile.

  python examples/arm_throw.py [--population 256] [--iterations 60] [--restarts 4] [--threads 2]
                               [--out FILE]
  python examples/arm_throw.py --play [FILE]
  python examples/arm_throw.py --play examples/results/arm_throw.npz   # the committed full run

(--out defaults to arm_throw.npz in the system's temporary directory, and --play to that file.)

The arm (inline below) hangs from a shoulder 1.5 m above the floor and swings in the x-z plane:
an upper link, an elbow motor at its end, a forearm and a hand, 1 m of reach in all, holding a
ball of radius 0.045 m by a weld equality. MuJoCo settings: implicitfast, 2 ms steps, 40 solver
iterations; only the ball and the floor collide (contype/conaffinity), so the links may pass
through each other.

Motors. Each joint has a DC motor behind a gearbox, modelled by MuJoCo's `general` actuator:
ctrl in [-1, 1] is the motor voltage over its rated voltage, and the motor-side torque is

  force = stall * (ctrl - gear * qvel / free_speed),   clamped to [-stall, stall] (forcerange)

(gainprm = stall, biasprm = (0, 0, -stall / free_speed): the actuator's velocity is already the
motor's speed gear * qvel), so at full voltage the torque falls linearly from stall at rest to 0
at the free speed, 24 rad/s, and the clamp is the stall-current limit. The joint gets gear times
that. Stall torques: 6 N m (shoulder), 3 N m (elbow). The rotors (0.0006 kg m^2 each) appear at
the joints as armature gear^2 * 0.0006, so the gear is a real trade-off: torque against speed and
reflected inertia.

Design (12 numbers, searched in [0, 1]^12 and mapped to):
- morphology: the upper link's share of the reach (0.15-0.85 m; the forearm has the rest) and
  both gear ratios (0.5-8, log scale). The link masses follow from the lengths (aluminium tube
  0.5 kg/m; the elbow motor 0.35 kg sits at the elbow, the hand 0.1 kg at the tip): lighter is
  always better for a throw, so a free link mass would only run to its bound.
- control: 4 knots per motor over the 0.65 s deadline, linearly interpolated and clipped to the
  ctrlrange (knots in [-1.5, 1.5], so full voltage for a while is reachable), and the release
  time (0.1-0.65 s, on the 2 ms grid).

A candidate is a row of per-simulation params (`Simulator.params(..., set_const=True)`): body_pos
of the elbow motor, forearm and hand, body_mass / body_ipos / body_inertia of both links,
geom_pos / geom_size of the link capsules, actuator_gear and dof_armature. Masses, lengths and
armature feed MuJoCo's derived constants, so set_const recomputes them per simulation in every
call; a candidate then equals an MjModel compiled with its values (checked below to 1e-12, and
shown to differ without set_const). Its cost is measured and printed.

Evaluation of a population is two `mjbatch_jax.rollout` calls over all candidates: the throw
(0.65 s, every 2 ms state recorded), then, from each candidate's state at its release step with
the weld switched off in the row's `eq_active`, the ball's flight (3 s in 10 ms knots). The
distance is where the ball's centre comes down to one radius above the floor (interpolated
between knots), measured along +x from the shoulder. The optimiser is a jitted cross-entropy
method (one jitted function an iteration: sample, evaluate, move the sampling mean and spread
halfway to the best tenth's, keep the best-so-far in each population), started from the best
hand design with a spread of 0.3 of the box; --restarts independent searches (own keys, own
elites) run side by side, their candidates rows of the same two calls, and the best is kept:
single searches from the same start end in different local optima (8.8-9.5 m measured), so a
few in parallel cost one wider call rather than a gamble. The start is the best of a grid of 81
sensible designs (3 splits, 3 x 3 gears, full-voltage swings with or without a back-swing or a
delayed elbow) released at the step whose ball speed is highest among those leaving at 35-55
degrees upward. (Starts from the best
design of the other two swing families or from the box's centre ended lower, 5.6-7.5 m.)

It prints the best hand design's and the optimised design's distances, the set_const cost, wall
times and the physics' share of them, and saves everything to --out (.npz). `--play FILE`
replays a saved result: it re-simulates both designs, prints their metrics, checks them against
the saved distances, draws a plot next to the file and, where `mujoco.Renderer` works
(MUJOCO_GL=egl), renders a video.
"""

import argparse
import copy
import hashlib
import os
import tempfile
import time
from pathlib import Path

# Headless rendering for --play's video, chosen before mujoco picks its GL backend on import.
os.environ.setdefault("MUJOCO_GL", "egl")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402

SHOULDER_HEIGHT = 1.5
REACH = 1.0
BALL_RADIUS = 0.045
BALL_MASS = 0.15
HOLD_OFFSET = 0.055  # ball centre beyond the hand, along the forearm
TUBE_DENSITY = 0.5  # kg per m of link
TUBE_RADIUS = 0.02
ELBOW_MOTOR_MASS = 0.35
HAND_MASS = 0.1
STALL = (6.0, 3.0)  # N m at the motor
FREE_SPEED = 24.0  # rad/s at the motor
ROTOR_INERTIA = 6e-4  # kg m^2

TIMESTEP = 0.002
DEADLINE = 0.65
THROW_STEPS = round(DEADLINE / TIMESTEP)
KNOTS = 4
FLIGHT_SUBSTEPS = 5
FLIGHT_KNOTS = 300  # 3 s

# The design box: upper link length, log gears, 2 x 4 knots, release time.
UPPER_RANGE = (0.15, 0.85)
GEAR_RANGE = (0.5, 8.0)
KNOT_RANGE = (-1.5, 1.5)
RELEASE_RANGE = (0.1, DEADLINE)
DIM = 3 + 2 * KNOTS + 1

RESULT_KEYS = ("model_version", "design", "hand_design", "distance", "hand_distance",
               "best_per_iteration", "mean_per_iteration")
# Not examples/results/ (where the committed full-size result is): a test run must not touch it.
DEFAULT_OUT = Path(tempfile.gettempdir()) / "arm_throw.npz"


def tube_inertia(length: float) -> tuple[float, list[float]]:
  """Mass and principal moments about the centre of a thin-walled tube link along z."""
  mass = TUBE_DENSITY * length
  across = mass * length**2 / 12 + mass * TUBE_RADIUS**2 / 2
  return mass, [across, across, mass * TUBE_RADIUS**2]


def arm_xml(upper: float = 0.5, gears: tuple[float, float] = (1.0, 1.0)) -> str:
  """The arm with a given upper-link length and gears; the base model uses the defaults."""
  fore = REACH - upper
  m1, i1 = tube_inertia(upper)
  m2, i2 = tube_inertia(fore)
  ball_z = SHOULDER_HEIGHT - REACH - HOLD_OFFSET
  motor = ELBOW_MOTOR_MASS * np.array([(3 * 0.035**2 + 0.05**2) / 12, 0.035**2 / 2, 0])
  motor[2] = motor[0]

  def vec(values) -> str:
    return " ".join(repr(float(v)) for v in values)

  actuators = ""
  for name, stall, gear in zip(("shoulder", "elbow"), STALL, gears, strict=True):
    actuators += f"""
    <general name="{name}" joint="{name}" gear="{gear!r}" ctrlrange="-1 1" ctrllimited="true"
             gainprm="{stall!r}" biastype="affine" biasprm="0 0 {-stall / FREE_SPEED!r}"
             forcerange="{-stall!r} {stall!r}" forcelimited="true"/>"""
  return f"""
<mujoco model="arm_throw">
  <option timestep="{TIMESTEP}" integrator="implicitfast" iterations="40"/>
  <visual>
    <global offwidth="640" offheight="368"/>
    <headlight ambient=".5 .5 .5" diffuse=".5 .5 .5"/>
  </visual>
  <worldbody>
    <light pos="2 -4 6" dir="0 1 -1.5"/>
    <camera name="side" pos="3.8 -7.5 2.2" xyaxes="1 0 0 0 0.15 1"/>
    <geom name="floor" type="plane" size="20 3 0.1" rgba=".75 .8 .75 1" contype="1"
          conaffinity="2"/>
    <geom name="pedestal" type="box" pos="-0.05 0.1 {SHOULDER_HEIGHT / 2}"
          size="0.04 0.04 {SHOULDER_HEIGHT / 2}" contype="0" conaffinity="0" rgba=".4 .4 .4 1"/>
    <body name="link1" pos="0 0 {SHOULDER_HEIGHT}">
      <joint name="shoulder" axis="0 1 0" armature="{ROTOR_INERTIA * gears[0] ** 2!r}"/>
      <inertial pos="0 0 {-upper / 2!r}" mass="{m1!r}" diaginertia="{vec(i1)}"/>
      <geom name="upper" type="capsule" pos="0 0 {-upper / 2!r}" size="{TUBE_RADIUS} {upper / 2!r}"
            contype="0" conaffinity="0" rgba=".3 .4 .8 1"/>
      <body name="elbow_motor" pos="0 0 {-upper!r}">
        <inertial pos="0 0 0" mass="{ELBOW_MOTOR_MASS}" diaginertia="{vec(motor)}"/>
        <geom type="cylinder" size="0.035 0.025" zaxis="0 1 0" contype="0" conaffinity="0"
              rgba=".2 .2 .2 1"/>
      </body>
      <body name="link2" pos="0 0 {-upper!r}">
        <joint name="elbow" axis="0 1 0" range="-150 150" limited="true"
               armature="{ROTOR_INERTIA * gears[1] ** 2!r}"/>
        <inertial pos="0 0 {-fore / 2!r}" mass="{m2!r}" diaginertia="{vec(i2)}"/>
        <geom name="fore" type="capsule" pos="0 0 {-fore / 2!r}" size="{TUBE_RADIUS} {fore / 2!r}"
              contype="0" conaffinity="0" rgba=".3 .6 .9 1"/>
        <body name="hand" pos="0 0 {-fore!r}">
          <inertial pos="0 0 0" mass="{HAND_MASS}" diaginertia="1e-4 1e-4 1e-4"/>
          <geom type="box" size="0.03 0.03 0.01" contype="0" conaffinity="0" rgba=".2 .2 .2 1"/>
        </body>
      </body>
    </body>
    <body name="ball" pos="0 0 {ball_z!r}">
      <freejoint name="ball"/>
      <geom name="ball" type="sphere" size="{BALL_RADIUS}" mass="{BALL_MASS}" contype="2"
            conaffinity="1" rgba=".9 .3 .2 1"/>
    </body>
  </worldbody>
  <equality>
    <weld name="grip" body1="hand" body2="ball" relpose="0 0 {-HOLD_OFFSET} 1 0 0 0"
          solref="0.004 1"/>
  </equality>
  <actuator>{actuators}
  </actuator>
</mujoco>
"""


def model_version() -> str:
  """A fingerprint of the model and the design space, stored with results to refuse stale ones."""
  text = arm_xml() + repr((UPPER_RANGE, GEAR_RANGE, KNOT_RANGE, RELEASE_RANGE, KNOTS, DEADLINE,
                           FLIGHT_SUBSTEPS, FLIGHT_KNOTS))
  return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- the design: [0, 1]^12 -> physical values -> params and controls -------------------------


def decode(u):
  """Physical values of designs u (..., 12) in [0, 1]: upper (...), gears (..., 2), knots
  (..., 2, 4), release time (...). Works on numpy and jax arrays alike."""
  xp = jnp if isinstance(u, jax.Array) else np
  upper = UPPER_RANGE[0] + (UPPER_RANGE[1] - UPPER_RANGE[0]) * u[..., 0]
  lo, hi = np.log(GEAR_RANGE[0]), np.log(GEAR_RANGE[1])
  gears = xp.exp(lo + (hi - lo) * u[..., 1:3])
  knots = KNOT_RANGE[0] + (KNOT_RANGE[1] - KNOT_RANGE[0]) * u[..., 3:3 + 2 * KNOTS]
  knots = knots.reshape(*u.shape[:-1], 2, KNOTS)
  release = RELEASE_RANGE[0] + (RELEASE_RANGE[1] - RELEASE_RANGE[0]) * u[..., -1]
  return upper, gears, knots, release


def encode(upper, gears, knots, release) -> np.ndarray:
  """The inverse of decode, for hand designs given in physical values."""
  lo, hi = np.log(GEAR_RANGE[0]), np.log(GEAR_RANGE[1])
  return np.concatenate([
    [(upper - UPPER_RANGE[0]) / (UPPER_RANGE[1] - UPPER_RANGE[0])],
    (np.log(gears) - lo) / (hi - lo),
    (np.ravel(knots) - KNOT_RANGE[0]) / (KNOT_RANGE[1] - KNOT_RANGE[0]),
    [(release - RELEASE_RANGE[0]) / (RELEASE_RANGE[1] - RELEASE_RANGE[0])],
  ])


def controls(knots):
  """(..., THROW_STEPS, 2) controls of knots (..., 2, 4): linear between them, clipped."""
  xp = jnp if isinstance(knots, jax.Array) else np
  position = np.arange(THROW_STEPS) * TIMESTEP / DEADLINE * (KNOTS - 1)
  left = np.minimum(np.floor(position).astype(int), KNOTS - 2)
  frac = position - left
  ctrl = knots[..., left] * (1 - frac) + knots[..., left + 1] * frac
  return xp.clip(xp.swapaxes(ctrl, -1, -2), -1.0, 1.0)


def release_step(release):
  """Index of the throw's recorded state at a release time: state k is at time (k + 1) dt."""
  xp = jnp if isinstance(release, jax.Array) else np
  return xp.clip(xp.round(release / TIMESTEP).astype(int) - 1, 0, THROW_STEPS - 1)


FIELDS = ("body_pos", "body_mass", "body_ipos", "body_inertia", "geom_pos", "geom_size",
          "actuator_gear", "dof_armature")
SELECT = {
  "body_pos": ["elbow_motor", "link2", "hand"],
  "body_mass": ["link1", "link2"], "body_ipos": ["link1", "link2"],
  "body_inertia": ["link1", "link2"],
  "geom_pos": ["upper", "fore"], "geom_size": ["upper", "fore"],
  "dof_armature": [0, 1],  # the shoulder's and the elbow's dofs (the ball's six follow)
}


def morphology(params: mjbatch_jax.Params, upper, gears) -> mjbatch_jax.Params:
  """params (N rows) with each row's morphology set from upper (N,) and gears (N, 2)."""
  fore = REACH - upper
  lengths = jnp.stack([upper, fore], axis=-1)  # (N, 2)
  zeros = jnp.zeros_like(lengths)
  along = jnp.stack([zeros, zeros, -lengths], axis=-1)  # (N, 2, 3): the links' ends
  mass = TUBE_DENSITY * lengths
  across = mass * lengths**2 / 12 + mass * TUBE_RADIUS**2 / 2
  inertia = jnp.stack([across, across, mass * TUBE_RADIUS**2], axis=-1)
  gear = params["actuator_gear"].at[..., 0].set(gears)
  return params.replace({
    "body_pos": jnp.stack([along[:, 0], along[:, 0], along[:, 1]], axis=1),
    "body_mass": mass, "body_ipos": along / 2, "body_inertia": inertia,
    "geom_pos": along / 2,
    "geom_size": params["geom_size"].at[..., 1].set(lengths / 2),
    "actuator_gear": gear, "dof_armature": ROTOR_INERTIA * gears**2,
  })


class Thrower:
  """The arm's simulator and the jitted evaluation of designs, for any population size."""

  def __init__(self, num_threads: int):
    self.model = mujoco.MjModel.from_xml_string(arm_xml())
    self.sim = mjbatch_jax.Simulator(self.model, num_threads=num_threads)
    names = self.sim.names
    ball = names.joint("ball")
    self.ball_qpos = np.arange(ball.qpos.start, ball.qpos.start + 3)  # columns of x, y, z
    self.ball_qvel = np.arange(ball.qvel.start, ball.qvel.start + 3)
    self.grip = self.sim.layout.eq_active.start + names.id("equality", "grip")
    self.start = self.sim.init_state(1)[0]
    self._params: dict[tuple[int, bool], mjbatch_jax.Params] = {}
    self.evaluate = jax.jit(self._evaluate, static_argnames=("set_const", "hand_release"))

  def params(self, num: int, set_const: bool = True) -> mjbatch_jax.Params:
    key = (num, set_const)
    if key not in self._params:
      # Made concrete even when first asked for inside a trace, since they are cached.
      with jax.ensure_compile_time_eval():
        self._params[key] = self.sim.params(num, FIELDS, select=SELECT, set_const=set_const)
    return self._params[key]

  def inputs(self, u: jax.Array, set_const: bool = True):
    """The throw rollout's inputs for designs u (N, 12): rows, controls, params."""
    upper, gears, knots, _ = decode(u)
    params = morphology(self.params(u.shape[0], set_const), upper, gears)
    rows = jnp.broadcast_to(self.start, (u.shape[0], self.sim.nstate))
    return rows, controls(knots), params

  def flight_rows(self, throw: jax.Array, steps) -> jax.Array:
    """Each candidate's throw state at its release step, with the weld switched off."""
    rows = jnp.take_along_axis(throw, steps[:, None, None], axis=1)[:, 0]
    return rows.at[:, self.grip].set(0.0)

  def _evaluate(self, u: jax.Array, set_const: bool = True, hand_release: bool = False):
    """Distances (N,) of designs u (N, 12) and the release steps used.

    With hand_release the designs' own release times are ignored for the hand rule's.
    """
    rows, ctrls, params = self.inputs(u, set_const)
    throw, _ = mjbatch_jax.rollout(rows, ctrls, params)
    if hand_release:
      steps = hand_rule(throw[..., self.ball_qvel])
    else:
      steps = release_step(decode(u)[3])
    flight, _ = mjbatch_jax.rollout(
      self.flight_rows(throw, steps), jnp.zeros((u.shape[0], FLIGHT_KNOTS, self.sim.nu)), params,
      nstep=FLIGHT_SUBSTEPS)
    released = jnp.take_along_axis(throw, steps[:, None, None], axis=1)
    path = jnp.concatenate([released, flight], axis=1)[..., self.ball_qpos]
    return landing(path), steps


def hand_rule(velocity: jax.Array) -> jax.Array:
  """The hand designer's release step: the fastest ball leaving 35-55 degrees upward, forward;
  the deadline if there is none."""
  angle = jnp.degrees(jnp.arctan2(velocity[..., 2], velocity[..., 0]))
  speed = jnp.linalg.norm(velocity, axis=-1)
  ok = (velocity[..., 0] > 0) & (angle >= 35) & (angle <= 55)
  best = jnp.argmax(jnp.where(ok, speed, -1.0), axis=-1)
  return jnp.where(ok.any(axis=-1), best, THROW_STEPS - 1)


def landing(path: jax.Array) -> jax.Array:
  """x where the ball centre first comes down to one radius above the floor, path (N, K, 3);
  interpolated between knots; the last x if it never does."""
  z = path[..., 2] - BALL_RADIUS
  down = z <= 0
  first = jnp.argmax(down, axis=-1)
  before = jnp.maximum(first - 1, 0)
  x0 = jnp.take_along_axis(path[..., 0], before[:, None], axis=1)[:, 0]
  x1 = jnp.take_along_axis(path[..., 0], first[:, None], axis=1)[:, 0]
  z0 = jnp.take_along_axis(z, before[:, None], axis=1)[:, 0]
  z1 = jnp.take_along_axis(z, first[:, None], axis=1)[:, 0]
  frac = jnp.where(z0 > z1, z0 / jnp.where(z0 > z1, z0 - z1, 1.0), 0.0)
  x = x0 + jnp.clip(frac, 0.0, 1.0) * (x1 - x0)
  return jnp.where(down.any(axis=-1), x, path[:, -1, 0])


# -- hand designs and the cross-entropy method ---------------------------------------------------


def hand_designs() -> np.ndarray:
  """(81, 12) designs an engineer would try: 3 splits x 3 x 3 gears x 3 full-voltage swings.

  Negative ctrl swings the hand forward (+x) from hanging. The release time is a placeholder;
  the hand rule picks it from the simulated swing.
  """
  swings = {
    "forward": ([-1.5] * 4, [-1.5] * 4),
    "back-swing": ([1.5, -1.5, -1.5, -1.5], [1.5, -1.5, -1.5, -1.5]),
    "delayed elbow": ([-1.5] * 4, [1.5, 1.5, -1.5, -1.5]),
  }
  out = []
  for upper in (0.4, 0.5, 0.6):
    for g1 in (1.0, 2.0, 3.0):
      for g2 in (1.0, 2.0, 3.0):
        for shoulder, elbow in swings.values():
          out.append(encode(upper, np.array([g1, g2]), np.array([shoulder, elbow]), DEADLINE))
  return np.clip(np.array(out), 0.0, 1.0)


def cem(thrower: Thrower, start: np.ndarray, population: int, iterations: int, seed: int,
        restarts: int = 1, log_every: int = 5, smoothing: float = 0.5, spread: float = 0.3
        ) -> tuple[np.ndarray, float, list[float], list[float], float, np.ndarray]:
  """Cross-entropy searches from start (12,) with an initial spread (in the unit box), restarts
  of them side by side: each has its own key and elite, and all their candidates are rows of
  the same calls. Returns the best design, its distance, the best and the populations' mean
  distance per iteration, seconds per iteration after the first, and each search's best."""
  num_elite = max(2, population // 10)

  def one(mean, std, best, best_value, distance, u):
    value, top = jax.lax.top_k(distance, num_elite)
    elites = u[top]
    mean = smoothing * elites.mean(axis=0) + (1 - smoothing) * mean
    std = smoothing * elites.std(axis=0) + (1 - smoothing) * std
    better = value[0] > best_value
    best = jnp.where(better, elites[0], best)
    best_value = jnp.where(better, value[0], best_value)
    return mean, jnp.maximum(std, 1e-3), best, best_value

  @jax.jit
  def iteration(mean, std, key, best, best_value):
    keys = jax.vmap(jax.random.split)(key)  # (restarts, 2, key)
    key, sub = keys[:, 0], keys[:, 1]
    noise = jax.vmap(lambda k: jax.random.normal(k, (population, DIM)))(sub)
    u = jnp.clip(mean[:, None] + std[:, None] * noise, 0.0, 1.0)
    # The incumbent: evaluations are deterministic, so it keeps its value.
    u = u.at[:, 0].set(best)
    distance, _ = thrower._evaluate(u.reshape(restarts * population, DIM))
    distance = jnp.nan_to_num(distance, nan=-jnp.inf).reshape(restarts, population)
    mean, std, best, best_value = jax.vmap(one)(mean, std, best, best_value, distance, u)
    return mean, std, key, best, best_value, jnp.mean(distance)

  # Strongly typed float64 from the start, so the second call does not trace again.
  mean = jnp.asarray(np.tile(start, (restarts, 1)), dtype=np.float64)
  std = jnp.asarray(np.full((restarts, DIM), spread))
  key = jax.random.split(jax.random.PRNGKey(seed), restarts)
  best, best_value = mean, jnp.full(restarts, -jnp.inf, dtype=np.float64)
  bests, means, times = [], [], []
  for i in range(iterations):
    begin = time.perf_counter()
    mean, std, key, best, best_value, avg = iteration(mean, std, key, best, best_value)
    bests.append(float(jnp.max(best_value)))
    means.append(float(avg))
    times.append(time.perf_counter() - begin)
    if (i + 1) % log_every == 0 or i + 1 == iterations:
      each = " ".join(f"{v:.3f}" for v in np.asarray(best_value)) if restarts > 1 else ""
      print(f"iteration {i + 1:3d}: best {bests[-1]:.3f} m, population mean {means[-1]:.3f} m"
            + (f"; best of each search {each}" if each else ""))
  per_iteration = float(np.median(times[1:])) if iterations > 1 else times[0]
  winner = int(jnp.argmax(best_value))
  return (np.asarray(best[winner]), float(best_value[winner]), bests, means, per_iteration,
          np.asarray(best_value))


# -- checks against compiled models and timing ---------------------------------------------------


def compiled_model(thrower: "Thrower", u: np.ndarray) -> mujoco.MjModel:
  """Design u as its own MjModel: the base MjSpec edited to the values of its params row (the
  same numbers the batch simulates) and compiled."""
  _, _, params = thrower.inputs(jnp.asarray(u)[None])
  value = {name: np.asarray(params[name][0], dtype=float) for name in FIELDS}
  spec = mujoco.MjSpec.from_string(arm_xml())
  for i, body in enumerate(SELECT["body_pos"]):
    spec.body(body).pos = value["body_pos"][i]
  for i, body in enumerate(SELECT["body_mass"]):
    spec.body(body).mass = float(value["body_mass"][i])
    spec.body(body).ipos = value["body_ipos"][i]
    spec.body(body).inertia = value["body_inertia"][i]
  for i, geom in enumerate(SELECT["geom_pos"]):
    spec.geom(geom).pos = value["geom_pos"][i]
    spec.geom(geom).size = value["geom_size"][i]
  for i, name in enumerate(("shoulder", "elbow")):
    spec.actuator(name).gear = value["actuator_gear"][i]
    spec.joint(name).armature = float(value["dof_armature"][i])
  return spec.compile()


def check_compiled(thrower: Thrower, u: np.ndarray) -> tuple[float, float]:
  """Max |difference| of the batched throw and flight of design u from mj_step on its compiled
  model, with set_const and without it."""
  model = compiled_model(thrower, u)
  data = mujoco.MjData(model)
  integration = mujoco.mjtState.mjSTATE_INTEGRATION
  _, _, knots, release = decode(u)
  ctrls, step = controls(knots), int(release_step(release))
  row = np.empty(thrower.sim.nstate)
  mujoco.mj_setState(model, data, np.asarray(thrower.start), integration)
  reference, released = [], data
  for k in range(THROW_STEPS):
    data.ctrl[:] = ctrls[k]
    mujoco.mj_step(model, data)
    mujoco.mj_getState(model, data, row, integration)
    reference.append(row.copy())
    if k == step:
      released = copy.copy(data)
  # The flight: from the release step, the weld off, the motors idle.
  released.eq_active[0] = 0
  released.ctrl[:] = 0.0
  for _ in range(FLIGHT_KNOTS):
    mujoco.mj_step(model, released, FLIGHT_SUBSTEPS)
    mujoco.mj_getState(model, released, row, integration)
    reference.append(row.copy())
  reference = np.array(reference)
  errors = []
  for set_const in (True, False):
    rows, ctrl, params = thrower.inputs(jnp.asarray(u)[None], set_const)
    throw, _ = mjbatch_jax.rollout(rows, ctrl, params)
    start = thrower.flight_rows(throw, jnp.asarray([step]))
    flight, _ = mjbatch_jax.rollout(start, jnp.zeros((1, FLIGHT_KNOTS, 2)), params,
                                    nstep=FLIGHT_SUBSTEPS)
    ours = np.concatenate([np.asarray(throw[0]), np.asarray(flight[0])])
    errors.append(float(np.max(np.abs(ours - reference))))
  return errors[0], errors[1]


def timed(*calls, repeats: int = 3) -> list[float]:
  """Least CPU seconds (all threads) of each (fn, *args) call (compiled first), the calls
  interleaved: on a shared machine wall time measures the neighbours as much as the call."""
  for fn, *args in calls:
    jax.block_until_ready(fn(*args))
  times = [[] for _ in calls]
  for _ in range(repeats):
    for (fn, *args), spent in zip(calls, times, strict=True):
      begin = time.process_time()
      jax.block_until_ready(fn(*args))
      spent.append(time.process_time() - begin)
  return [float(np.min(t)) for t in times]


def physics_time(thrower: Thrower, u: jax.Array) -> tuple[float, float, float]:
  """CPU seconds of one population's evaluation: the jitted whole, the two rollout calls alone
  on the same inputs, and the whole without set_const."""
  rows, ctrls, params = thrower.inputs(u)
  throw, _ = jax.jit(mjbatch_jax.rollout)(rows, ctrls, params)
  _, steps = thrower.evaluate(u)
  start = thrower.flight_rows(throw, steps)
  zeros = jnp.zeros((u.shape[0], FLIGHT_KNOTS, thrower.sim.nu))
  calls = jax.jit(lambda r, c, p, s: (mjbatch_jax.rollout(r, c, p),
                                      mjbatch_jax.rollout(s, zeros, p, nstep=FLIGHT_SUBSTEPS)))
  whole, physics, plain = timed((thrower.evaluate, u), (calls, rows, ctrls, params, start),
                                 (lambda v: thrower.evaluate(v, set_const=False), u))
  return whole, physics, plain


# -- solve and play -----------------------------------------------------------------------------


def solve(population: int, iterations: int, threads: int, out: Path, seed: int,
          restarts: int) -> dict:
  thrower = Thrower(threads)
  print(f"arm: reach {REACH} m, ball radius {BALL_RADIUS} m; {DIM} design numbers; "
        f"{restarts} searches of population {population} x {iterations} iterations; "
        f"{thrower.sim.num_threads} threads")
  begin = time.perf_counter()
  hands = jnp.asarray(hand_designs())
  distance, steps = thrower.evaluate(hands, hand_release=True)
  distance = np.asarray(distance)
  best_hand = int(np.argmax(distance))
  hand = np.asarray(hands[best_hand]).copy()
  hand[-1] = np.clip(((int(steps[best_hand]) + 1) * TIMESTEP - RELEASE_RANGE[0])
                     / (RELEASE_RANGE[1] - RELEASE_RANGE[0]), 0.0, 1.0)
  hand_distance = float(thrower.evaluate(jnp.asarray(hand)[None])[0][0])
  print(f"best of {len(hands)} hand designs: {hand_distance:.3f} m ({describe(hand)})")

  design, best, bests, means, per_iteration, searches = cem(thrower, hand, population,
                                                            iterations, seed, restarts)
  seconds = time.perf_counter() - begin
  if restarts > 1:
    print(f"the {restarts} searches ended at " + ", ".join(f"{v:.3f}" for v in searches)
          + " m: the best is kept")
  print(f"optimised design: {best:.3f} m ({describe(design)})")
  print(f"throw distance: best hand design {hand_distance:.2f} m -> optimised {best:.2f} m "
        f"({100 * (best / hand_distance - 1):+.0f}%)")

  with_const, without_const = check_compiled(thrower, design)
  print(f"optimised design vs its compiled MjModel (mj_step): max |difference| {with_const:.1e} "
        f"with set_const, {without_const:.1e} without")

  u = jnp.clip(jnp.asarray(design) + 0.05 * jax.random.normal(jax.random.PRNGKey(1),
                                                              (population, DIM)), 0, 1)
  whole, physics, plain = physics_time(thrower, u)
  print(f"one population evaluation: {whole * 1e3:.1f} ms CPU, of which the two rollout calls "
        f"alone {physics * 1e3:.1f} ms ({100 * physics / whole:.0f}% physics); without set_const "
        f"{plain * 1e3:.1f} ms (set_const: {(whole - plain) / population * 1e6:+.1f} us per "
        f"candidate and evaluation, {100 * (whole / plain - 1):+.1f}%)")
  print(f"wall time {seconds:.1f} s in all; {per_iteration * 1e3:.1f} ms per CEM iteration")
  out.parent.mkdir(parents=True, exist_ok=True)
  np.savez(out, model_version=model_version(), design=design, hand_design=hand,
           distance=best, hand_distance=hand_distance, best_per_iteration=np.array(bests),
           mean_per_iteration=np.array(means), population=population, iterations=iterations,
           restarts=restarts, search_distances=searches,
           threads=thrower.sim.num_threads, seconds=seconds, seconds_per_iteration=per_iteration,
           evaluation_seconds=whole, physics_seconds=physics, plain_seconds=plain,
           compiled_error=with_const, compiled_error_without_set_const=without_const)
  print(f"saved to {out}")
  thrower.sim.close()
  return {"hand": hand_distance, "best": best, "compiled_error": with_const,
          "compiled_error_without_set_const": without_const}


def describe(u: np.ndarray) -> str:
  upper, gears, knots, release = decode(np.asarray(u))
  return (f"upper {upper:.3f} m / forearm {REACH - upper:.3f} m, gears {gears[0]:.2f} "
          f"{gears[1]:.2f}, release {(int(release_step(release)) + 1) * TIMESTEP:.3f} s, knots "
          f"shoulder {np.round(np.clip(knots[0], -1, 1), 2).tolist()} elbow "
          f"{np.round(np.clip(knots[1], -1, 1), 2).tolist()}")


def load_result(path: Path) -> dict:
  """A saved result, refused with a clear message if missing, malformed or of another model."""
  if not path.is_file():
    raise SystemExit(f"--play: no result file {path} (run without --play first to make it)")
  try:
    with np.load(path) as saved:
      result = {key: saved[key] for key in saved.files}
  except (OSError, ValueError) as e:
    raise SystemExit(f"--play: {path} is not a saved result (.npz): {e}") from None
  missing = [key for key in RESULT_KEYS if key not in result]
  if missing:
    raise SystemExit(f"--play: {path} is not an arm_throw result (missing {missing})")
  if str(result["model_version"]) != model_version():
    raise SystemExit(f"--play: {path} was saved for another version of the arm model or design "
                     f"space ({result['model_version']}, this script's is {model_version()}); "
                     "solve again")
  return result


def play(path: Path, threads: int) -> dict:
  """Re-simulate a saved result's designs; print metrics, plot, and render where possible."""
  result = load_result(path)
  thrower = Thrower(threads)
  designs = jnp.asarray(np.stack([result["hand_design"], result["design"]]))
  rows, ctrls, params = thrower.inputs(designs)
  throw, _ = mjbatch_jax.rollout(rows, ctrls, params)
  steps = release_step(decode(designs)[3])
  flight, _ = mjbatch_jax.rollout(thrower.flight_rows(throw, steps),
                                  jnp.zeros((2, FLIGHT_KNOTS, thrower.sim.nu)), params,
                                  nstep=FLIGHT_SUBSTEPS)
  throw, flight, steps = np.asarray(throw), np.asarray(flight), np.asarray(steps)
  distances = np.asarray(thrower.evaluate(designs)[0])
  saved = np.array([float(result["hand_distance"]), float(result["distance"])])
  metrics = {}
  for i, label in enumerate(("hand design", "optimised")):
    velocity = throw[i, steps[i], thrower.ball_qvel]
    position = throw[i, steps[i], thrower.ball_qpos]
    speed = float(np.linalg.norm(velocity))
    angle = float(np.degrees(np.arctan2(velocity[2], velocity[0])))
    print(f"{label:11s}: {distances[i]:.3f} m (saved {saved[i]:.3f} m); released at "
          f"{(steps[i] + 1) * TIMESTEP:.3f} s from x {position[0]:+.3f} m, z {position[2]:.3f} m "
          f"at {speed:.2f} m/s, {angle:.1f} deg; {describe(np.asarray(designs[i]))}")
    metrics[label] = {"distance": float(distances[i]), "speed": speed, "angle": angle}
  if not np.allclose(distances, saved, rtol=0, atol=1e-9):
    raise SystemExit(f"--play: replayed distances {distances} differ from the saved {saved}")
  print(f"gain: {100 * (distances[1] / distances[0] - 1):+.0f}%")
  plot_path = path.with_suffix(".png")
  plot(result, thrower, throw, flight, steps, distances, plot_path)
  print(f"plot saved to {plot_path}")
  video = render(thrower, designs, throw, flight, steps, path.with_suffix(".mp4"))
  print(video)
  thrower.sim.close()
  return metrics


def plot(result, thrower, throw, flight, steps, distances, path: Path) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), gridspec_kw={"width_ratios": [2.2, 1, 1]})
  colors = ("tab:gray", "tab:red")
  labels = ("best hand design", "optimised")
  for i in range(2):
    path_xz = np.concatenate([throw[i, : steps[i] + 1], flight[i]])[:, thrower.ball_qpos]
    down = np.flatnonzero(path_xz[:, 2] <= BALL_RADIUS)
    path_xz = path_xz[: down[0] + 1] if down.size else path_xz  # up to the landing
    axes[0].plot(path_xz[:, 0], path_xz[:, 2], color=colors[i],
                 label=f"{labels[i]}: {distances[i]:.2f} m")
    upper = decode(np.asarray(result["hand_design" if i == 0 else "design"]))[0]
    for k in range(0, steps[i] + 1, max(1, (steps[i] + 1) // 6)):
      q1, q2 = throw[i, k, thrower.sim.layout.qpos][:2]
      elbow = np.array([-upper * np.sin(q1), SHOULDER_HEIGHT - upper * np.cos(q1)])
      tip = elbow + (REACH - upper) * np.array([-np.sin(q1 + q2), -np.cos(q1 + q2)])
      axes[0].plot([0, elbow[0], tip[0]], [SHOULDER_HEIGHT, elbow[1], tip[1]], color=colors[i],
                   alpha=0.3 + 0.7 * k / max(steps[i], 1), lw=1.5)
  axes[0].axhline(0, color="k", lw=0.8)
  axes[0].set(xlabel="x (m)", ylabel="z (m)", title="arm and ball", aspect="equal")
  axes[0].legend(loc="upper right")
  t = np.arange(THROW_STEPS) * TIMESTEP
  for i in range(2):
    ctrl = throw[i, :, thrower.sim.layout.ctrl]
    axes[1].plot(t, ctrl[:, 0], color=colors[i], label=f"{labels[i]} shoulder")
    axes[1].plot(t, ctrl[:, 1], color=colors[i], ls="--", label=f"{labels[i]} elbow")
    axes[1].axvline((steps[i] + 1) * TIMESTEP, color=colors[i], lw=0.8, ls=":")
  axes[1].set(xlabel="t (s)", ylabel="ctrl (voltage / rated)", title="controls (release dotted)")
  axes[1].legend(fontsize=7)
  axes[2].plot(result["best_per_iteration"], label="best")
  axes[2].plot(result["mean_per_iteration"], label="population mean")
  axes[2].set(xlabel="CEM iteration", ylabel="distance (m)", title="search")
  axes[2].legend()
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  plt.close(fig)


def render(thrower, designs, throw, flight, steps, path: Path) -> str:
  """An mp4 of both throws, where mujoco.Renderer works (MUJOCO_GL=egl) and imageio is there."""
  frames = []
  try:
    for i in range(2):
      model = compiled_model(thrower, np.asarray(designs[i]))
      data = mujoco.MjData(model)
      with mujoco.Renderer(model, 368, 640) as renderer:
        rows = np.concatenate([throw[i, : steps[i] + 1 : 8], flight[i, ::2]])
        for row in rows:
          mujoco.mj_setState(model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
          mujoco.mj_forward(model, data)
          renderer.update_scene(data, camera="side")
          frames.append(renderer.render())
  except Exception as e:  # no GL context or no PyOpenGL: say which
    return f"video skipped: mujoco.Renderer failed ({type(e).__name__}: {_first_line(e)})"
  try:
    import imageio.v3 as iio  # pyright: ignore[reportMissingImports]
  except ImportError as e:
    return f"video skipped: {len(frames)} frames rendered but no writer ({_first_line(e)})"
  iio.imwrite(path, np.stack(frames), fps=50)
  return f"video saved to {path}"


def _first_line(e: Exception) -> str:
  return str(e).splitlines()[0] if str(e) else ""


def main() -> None:
  parser = argparse.ArgumentParser(description="Co-design of a two-motor throwing arm by CEM.")
  parser.add_argument("--population", type=int, default=256, help="candidates per iteration")
  parser.add_argument("--iterations", type=int, default=60, help="CEM iterations")
  parser.add_argument("--threads", type=int, default=2, help="simulation threads (0: all CPUs)")
  parser.add_argument("--restarts", type=int, default=4,
                      help="independent searches, side by side in the same calls (best kept)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to save the result")
  parser.add_argument("--play", nargs="?", const=DEFAULT_OUT, type=Path, metavar="FILE",
                      help="replay a saved result instead of solving (default: --out's default)")
  args = parser.parse_args()
  if args.population < 8:
    parser.error(f"--population must be at least 8 (the elite is a tenth of it), got "
                 f"{args.population}")
  if args.iterations < 1:
    parser.error(f"--iterations must be at least 1, got {args.iterations}")
  if args.restarts < 1:
    parser.error(f"--restarts must be at least 1, got {args.restarts}")
  if not 0 <= args.threads <= 4 * (os.cpu_count() or 1):
    parser.error(f"--threads must be in [0, {4 * (os.cpu_count() or 1)}], got {args.threads}")
  if args.play is not None:
    play(args.play, args.threads)
  else:
    solve(args.population, args.iterations, args.threads, args.out, args.seed, args.restarts)


if __name__ == "__main__":
  main()
