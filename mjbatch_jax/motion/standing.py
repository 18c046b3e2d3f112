"""A cost that keeps a floating-base robot standing: a landing's or a push recovery's MPC cost.

No time in it, so a receding-horizon planner can run it at any knot: per knot, the floor
contacts of bodies other than the feet, the root's height against a standing height and its z
axis's tilt, the centre of mass over the feet's mean position, the root's and the joints'
velocities, and the controls against a standing pose's.

  cost = motion.standing_cost(sim, floor_columns, ("left_foot", "right_foot"), stand_ctrl, 0.75)
  planner = control.sampling(cost, sim.params(1), horizon=20, nstep=10)
"""

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax import control
from mjbatch_jax.motion._arrays import free_root, numbers
from mjbatch_jax.simulator import Simulator


class StandingWeights(NamedTuple):
  """standing_cost's weights of its quadratic terms, in residual order.

  Attributes:
    touch: per floor contact of a body other than the feet.
    height: per m^2 of the root's height below (or above) the standing height.
    tilt: per unit^2 of the root's z axis's horizontal components (sin^2 of its tilt).
    balance: per m^2 of the centre of mass's horizontal offset from the feet's mean position.
    root_velocity: per (m/s)^2 and (rad/s)^2 of the root's six velocities.
    joint_velocity: per (rad/s)^2 of the joints' velocities.
    ctrl: per unit^2 of the controls against the standing pose's.
  """

  touch: float = 300.0
  height: float = 30.0
  tilt: float = 50.0
  balance: float = 300.0
  root_velocity: float = 0.5
  joint_velocity: float = 0.01
  ctrl: float = 0.05


def standing_cost(sim: Any, floor: Sequence[int] | np.ndarray, feet: Sequence[str], ctrl: Any,
                  height: float, weights: StandingWeights | None = None) -> control.Cost:
  """A time-free control.Cost that holds a free-rooted robot standing on its feet.

  Args:
    sim: the mjbatch_jax.Simulator of the robot (a free joint at its root body, body 1).
    floor: sensordata columns of floor-contact counts (motion.floor_contact_sensors): each
      foot's, then the whole robot's (its last). The touch term is the robot's count less the
      feet's: the contacts of any other body.
    feet: the names of the bodies whose mean horizontal position the centre of mass is kept over.
    ctrl: (nu,) the standing pose's controls (for position servos, its joint angles).
    height: the root's standing height (m).
    weights: a StandingWeights (None: its defaults).

  Returns:
    A control.Cost of seven quadratic terms (StandingWeights' order), observing sensordata,
    subtree_com and xpos.

  Raises:
    ValueError: sim is not a Simulator, its model has no free joint at body 1, floor is not at
      least two sensordata columns, a foot is not a body of the model, ctrl is not (nu,) finite,
      height not a finite number, or weights not seven numbers >= 0.

  Example:
    cost = motion.standing_cost(sim, columns, ["left_ankle_roll_link", "right_ankle_roll_link"],
                                model.key_ctrl[0], 0.75, motion.StandingWeights(touch=500.0))
  """
  if not isinstance(sim, Simulator):
    raise ValueError(f"sim must be a mjbatch_jax.Simulator, got {type(sim).__name__}")
  model = sim.model
  if not free_root(model):
    raise ValueError("the model must have a free joint at its root body (body 1): the cost holds "
                     "a floating base standing")
  if isinstance(floor, (str, bytes)) or not isinstance(floor, Sequence | np.ndarray):
    raise ValueError(f"floor must be sensordata columns (each foot's, then the robot's), got "
                     f"{v.shown(floor)}")
  columns = [v.integer(f"floor[{i}]", c, 0, model.nsensordata - 1) for i, c in enumerate(floor)]
  if len(columns) < 2:
    raise ValueError(f"floor must hold at least two columns (a foot's, then the robot's), got "
                     f"{v.shown(floor)}")
  if isinstance(feet, (str, bytes)) or not isinstance(feet, Sequence) or not feet:
    raise ValueError(f"feet must be a non-empty sequence of body names, got {v.shown(feet)}")
  foot_ids = np.asarray(sim.names.bodies(list(feet)))
  stand_ctrl = jnp.asarray(numbers("ctrl", ctrl, (model.nu,)))
  height = v.number("height", height)
  weights = StandingWeights() if weights is None else weights
  if not isinstance(weights, Sequence) or len(weights) != len(StandingWeights._fields):
    raise ValueError(f"weights must be a motion.StandingWeights (seven numbers), got "
                     f"{v.shown(weights)}")
  weights = StandingWeights(*(v.number(f"weights.{name}", w, low=0.0)
                              for name, w in zip(StandingWeights._fields, weights, strict=True)))
  lay = sim.layout
  qpos, qvel = np.arange(sim.nstate)[lay.qpos], np.arange(sim.nstate)[lay.qvel]
  robot, foot_columns = columns[-1], columns[:-1]

  def residual(x, u, obs, t):
    del t
    q, vel = x[qpos], x[qvel]
    w, qx, qy, qz = q[3], q[4], q[5], q[6]
    z_axis_xy = jnp.stack([2 * (qx * qz + w * qy), 2 * (qy * qz - w * qx)])
    s = obs["sensordata"]
    others = s[robot]
    for column in foot_columns:
      others = others - s[column]
    balance = obs["subtree_com"][1, :2] - obs["xpos"][foot_ids, :2].mean(axis=0)
    return jnp.concatenate([others[None], (q[2] - height)[None], z_axis_xy, balance, vel[:6],
                            vel[6:], u - stand_ctrl])

  sizes = (1, 1, 2, 2, 6, model.nv - 6, model.nu)
  terms = tuple(control.Term(n, w) for n, w in zip(sizes, weights, strict=True))
  return control.Cost(residual, terms, observe=("sensordata", "subtree_com", "xpos"))


__all__ = ["StandingWeights", "standing_cost"]
