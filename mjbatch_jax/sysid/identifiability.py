"""What the data say of each number at a fit: information, spreads, unidentifiable directions."""

import dataclasses
import math
from typing import Any

import numpy as np
from jax.sharding import PartitionSpec

from mjbatch_jax import _validate as v
from mjbatch_jax.sysid import solver
from mjbatch_jax.sysid.data import Windows
from mjbatch_jax.sysid.problem import Fit, Problem, _check, _offsets


@dataclasses.dataclass(frozen=True)
class Report:
  """What the data say of each number at a fit: information, spreads, unidentifiable directions.

  The information, singular values and directions are in scale units (a number over its
  scale), where a prior's curvature is (scale / prior_width)^2; std and prior_width are in the
  numbers' own units.

  Attributes:
    names: the numbers' names.
    information: (size, size) J'J of the numbers once the unknown starts are accounted for (the
      Schur complement of the starts' blocks, their priors included); no prior of theta in it.
    singular: (size,) square roots of its eigenvalues, largest first: how tightly the data pin
      each direction (in scale units: 10 pins a direction to a tenth of its scale).
    directions: (size, size) the eigenvectors, as rows, in that order.
    rank: directions the data see at all (singular above rtol times the largest): the others
      change no residual.
    std: (size,) posterior standard deviations of the numbers, priors included (inf where neither
      data nor prior constrains a number).
    prior_width: (size,) the priors' widths (inf: none), to compare std with.
    unseen: (size,) how much of each number lies in the unseen directions (the length of its
      unit vector's projection on them, whatever basis they have): 1 for a number the data say
      nothing of, 0 for one they see alone, between for one seen only in combinations.
  """

  names: tuple[str, ...]
  information: np.ndarray
  singular: np.ndarray
  directions: np.ndarray
  rank: int
  std: np.ndarray
  prior_width: np.ndarray
  unseen: np.ndarray

  def unidentifiable(self, threshold: float | np.floating = 0.2) -> list[dict[str, float]]:
    """The directions the data do not see, each as {name: weight} of its entries with
    |weight| >= threshold (a unit vector in scale units), largest first. Where several are
    unseen, any basis of them is: `unseen` says how much of each number they hold.

    Example:
      for direction in report.unidentifiable(): print(direction)   # {'link1.log_mass': 0.98}
    """
    threshold = v.number("threshold", threshold, low=0.0, high=1.0)
    out = []
    for vector in self.directions[self.rank:]:
      order = np.argsort(-np.abs(vector))
      out.append({self.names[i]: float(vector[i]) for i in order if abs(vector[i]) >= threshold})
    return out

  def summary(self, threshold: float | np.floating = 0.2, most: int | np.integer | None = None
              ) -> str:
    """A few lines: the rank, and the unidentifiable directions (at most `most`) by the numbers
    they move."""
    threshold = v.number("threshold", threshold, low=0.0, high=1.0)
    most = None if most is None else v.integer("most", most, low=0)
    size = len(self.names)
    lines = [f"identifiable: {self.rank} of {size} directions (square roots of the information "
             f"{self.singular[0]:.3g} .. {self.singular[max(self.rank - 1, 0)]:.3g} per scale)"]
    blind = [name for name, u in zip(self.names, self.unseen, strict=True) if u > 0.999]
    if blind:
      lines.append(f"  the data say nothing of {len(blind)}: {', '.join(blind)}")
    for k, direction in enumerate(self.unidentifiable(threshold)[:most]):
      terms = " ".join(f"{w:+.2f} {name}" for name, w in direction.items())
      lines.append(f"  unidentifiable {k + 1}: {terms or '(spread thin over many numbers)'}")
    return "\n".join(lines)


def report(problem: Problem, data: Windows, result: Any, starts: Any = None, dist: Any = None,
           rtol: float | np.floating = 1e-6) -> Report:
  """The identifiability of the numbers at a fit (or at any theta): see Report.

  Args:
    problem, data, dist: as for `fit`.
    result: a Fit, or a theta (size,) (with starts: their offsets, None for the records).
    rtol: singular values at most rtol times the largest count as unseen: finite differences
      leave about 1e-6 of the largest on directions that change nothing.

  Raises:
    ValueError: as fit does, for bad arguments and for a residual or Jacobian that is not
      finite at theta (whose spreads would say nothing).

  Example:
    print(sysid.report(problem, data, result).summary())
  """
  if isinstance(result, Fit):
    if starts is not None:
      raise ValueError("starts: a Fit carries its own starts; give starts with a theta only")
    theta, starts, what = result.theta, result.starts, "result.theta"
  elif result is None or isinstance(result, (str, bytes)):
    raise ValueError(f"result must be a sysid.Fit or a theta (one value per number), got "
                     f"{v.shown(result)}")
  else:
    theta, what = result, "theta"
  checked = _check(problem, theta, data, what)
  rtol = v.number("rtol", rtol, low=0.0, high=1.0, low_open=True, high_open=True)
  solver._check_dist(dist)
  model = problem.parameters.sim.model
  offsets = _offsets(starts, len(data.starts) if dist is None else dist.num_local,
                     2 * model.nv + model.na)
  runner = solver._Runner(problem, checked, data, dist, "information",
                   (PartitionSpec(), PartitionSpec()))
  info, squares = runner.fn(runner.theta(checked.theta0), runner.offsets(offsets))
  info, squares = runner.read(info), runner.read(squares)
  # As fit: what is not finite at theta is refused, never reported as certainty.
  if not math.isfinite(float(squares[0])):
    raise ValueError(f"the cost at {what} is {float(squares[0])}: the residual is not finite "
                     "there (check the residual function and the measurements)")
  if not (np.all(np.isfinite(info)) and math.isfinite(float(squares[1]))):
    raise ValueError(f"the residual's Jacobian is not finite at {what}, where the residual is "
                     "(check the residual function's derivative, e.g. a sqrt or norm at 0)")
  info = 0.5 * (info + info.T)
  values, vectors = np.linalg.eigh(info)
  order = np.argsort(values)[::-1]
  singular = np.sqrt(np.maximum(values[order], 0.0))
  rank = int(np.sum(singular > rtol * singular[0])) if singular[0] > 0 else 0
  # Posterior variances in scale units, the prior included: a direction that neither the data
  # nor a prior constrain (its curvature at most rtol^2 of the largest, as for the rank) makes
  # every number it moves infinitely uncertain.
  post_values, post_vectors = np.linalg.eigh(info + np.diag(checked.precision))
  seen = post_values > rtol**2 * max(float(post_values.max()), 1e-300)
  unseen = (np.abs(post_vectors[:, ~seen]) > 1e-8).any(axis=1)
  variance = np.where(unseen, np.inf, (post_vectors[:, seen] ** 2 / post_values[seen]).sum(1))
  directions = vectors[:, order].T
  unseen = np.sqrt(np.sum(directions[rank:] ** 2, axis=0))
  return Report(problem.parameters.names, info, singular, directions, rank,
                checked.scale * np.sqrt(variance), checked.prior_width, unseen)
