"""A jump's flight and landing, read from each physics step's floor contacts.

Counting what touches the floor is exact where positions are not: a body is on the floor when
the step found a contact, and a rollout reports that in its sensordata (floor_contact_sensors).
A jump's flight is then the longest stretch of steps with nothing on the floor, and its landing
is good when from touchdown on only the feet touch the floor and all of them do at some step.

  floor = sensordata[:, columns]          # (S, feet + 1): each foot's contacts, the robot's
  done = motion.landing(floor, qpos[:, 2], dt=model.opt.timestep, min_flight=0.1,
                        upright_height=0.6)
  done.landed, done.flight_s, done.upright_s

first_touchdown reads the same counts inside a traced search or choice, for many runs at once
that start in the air.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from mjbatch_jax import _validate as v
from mjbatch_jax.motion._arrays import numbers


@dataclasses.dataclass(frozen=True)
class Landing:
  """landing's reading of one run.

  Attributes:
    takeoff: the first step of the flight (0 without one).
    touchdown: the first step back on the floor after it (the number of steps if it never
      comes down; equal to takeoff without a flight).
    flight_s: the flight's length in seconds.
    landed: a flight (of at least min_flight), then only the feet on the floor, all of them at
      some step.
    upright_s: seconds from the last step at or below upright_height after touchdown to the end
      (0 unless landed): how long the robot stood at the end.
    dt: seconds per step.
  """

  takeoff: int
  touchdown: int
  flight_s: float
  landed: bool
  upright_s: float
  dt: float

  @property
  def takeoff_s(self) -> float:
    return self.takeoff * self.dt

  @property
  def touchdown_s(self) -> float:
    return self.touchdown * self.dt


def _counts(floor: Any, shape: tuple[Any, ...]) -> np.ndarray:
  """floor (shape: a pattern as in _validate) checked as floor_contact_sensors' counts."""
  floor = numbers("floor", floor, shape)
  if floor.shape[-1] < 2:
    raise ValueError(f"floor must have a column per foot and one for the robot (at least 2), got "
                     f"shape {floor.shape}")
  bad = (floor < 0) | (floor != np.round(floor))
  if np.any(bad):
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    raise ValueError(f"floor must hold contact counts (whole numbers >= 0), got {floor[first]} at "
                     f"index {first}")
  return floor


def landing(floor: Any, height: Any, dt: float, *, min_flight: float,
            upright_height: float) -> Landing:
  """The longest flight of a run and whether the robot landed on its feet and stood.

  Args:
    floor: (S, F + 1) per physics step the number of floor contacts of each of F feet, then of
      the whole robot (its feet included), as floor_contact_sensors' sensors report them.
    height: (S,) the height of the body that says whether the robot stands (e.g. the pelvis).
    dt: seconds per step (the model's timestep), > 0.
    min_flight: seconds; a shorter stretch off the floor is a stumble, not a landing.
    upright_height: standing means height above this.

  Returns:
    Landing. Among flights of equal length, the first.

  Raises:
    ValueError: arrays of other shapes or with NaN, fewer than 2 columns of floor, a count in
      floor that is negative or not whole, a dt that is not > 0, a negative min_flight or a
      non-finite upright_height.

  Example:
    done = landing(sensordata[:, [left, right, robot]], qpos[:, 2], 0.002, min_flight=0.1,
                   upright_height=0.6)
  """
  floor = _counts(floor, (None, None))
  height = numbers("height", height, (floor.shape[0],))
  dt = v.number("dt", dt, low=0.0, low_open=True)
  min_flight = v.number("min_flight", min_flight, low=0.0)
  upright_height = v.number("upright_height", upright_height)
  robot, feet = floor[:, -1], floor[:, :-1]
  edges = np.diff(np.r_[0, robot == 0, 0].astype(int))
  offs, downs = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
  off, down = (int(i) for i in max(zip(offs, downs, strict=True), key=lambda r: r[1] - r[0],
                                   default=(0, 0)))
  after = slice(down, None)
  landed = bool(down > off and (down - off) * dt >= min_flight and down < len(floor)
                and np.all(robot[after] == feet[after].sum(axis=1))
                and np.any(np.all(feet[after] > 0, axis=1)))
  low = np.flatnonzero(height[after] <= upright_height)
  first_up = down + (int(low[-1]) + 1 if len(low) else 0)
  return Landing(off, down, (down - off) * dt, landed,
                 (len(floor) - first_up) * dt if landed else 0.0, dt)


def first_touchdown(floor: Any, early: int) -> tuple[jax.Array, jax.Array]:
  """Each run's first step with the robot on the floor, and whether that touchdown is a fall.

  Pure JAX, for runs started in the air inside a search's objective or a choice's score: a
  touchdown is bad when a body other than the feet touches the floor within `early` steps of it
  (the knees or hands come down with the feet), or when the run never comes down.

  Args:
    floor: (..., S, F + 1) as landing's: per physics step each foot's floor contacts, then the
      whole robot's.
    early: steps from touchdown in which another body down makes it a fall; >= 0.

  Returns:
    (first, bad): (...) int the first step with a contact (0 for a run that never comes down)
    and (...) bool.

  Raises:
    ValueError: floor of fewer than 2 dimensions, 2 columns or one step, or not numbers; a
      concrete floor with NaN or counts that are negative or not whole (as landing's); early not
      an integer >= 0.

  Example:
    first, bad = motion.first_touchdown(sensordata[..., columns], early=3 * nstep)
    pitch_at_touchdown = jnp.take_along_axis(pitch, first[..., None], axis=-1)[..., 0]
  """
  if isinstance(floor, Tracer):  # its shape and type only: the values exist at run time
    if floor.ndim < 2 or floor.shape[-1] < 2:
      raise ValueError(f"floor must have a column per foot and one for the robot (at least 2), "
                       f"got shape {floor.shape}")
    if floor.dtype.kind not in "iuf":
      raise ValueError(f"floor must be an array of numbers, got {floor.dtype}")
  else:
    floor = jnp.asarray(_counts(floor, (..., None, None)))
  if floor.shape[-2] == 0:
    raise ValueError(f"floor must hold at least one step (S >= 1), got shape {floor.shape}")
  early = v.integer("early", early, 0)
  robot, feet = floor[..., -1], floor[..., :-1].sum(axis=-1)
  down = robot > 0
  first = jnp.argmax(down, axis=-1)
  steps = jnp.arange(floor.shape[-2])
  soon = (steps >= first[..., None]) & (steps < first[..., None] + early)
  return first, jnp.any(soon & (robot > feet), axis=-1) | ~jnp.any(down, axis=-1)
