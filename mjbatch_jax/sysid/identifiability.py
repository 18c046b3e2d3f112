"""What the data say of each number at a fit: information, spreads, unidentifiable directions."""

import dataclasses
import math
from typing import Any

import numpy as np
from jax.sharding import PartitionSpec

from mjbatch_jax import _validate as v
from mjbatch_jax.sysid import solver
from mjbatch_jax.sysid.data import Windows
from mjbatch_jax.sysid.problem import Fit, Problem, _check, _offsets, _options

# Report.outliers' default: a window this many times the median cost (or the noise's share).
OUTLIER_FACTOR = 10.0
# Above this chi2/dof, Report.summary says that the model does not fit the data.
MISFIT = 4.0


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
    window_costs: (W,) each window's cost at theta (half its residuals' sum of squares plus its
      start's prior term; this process's windows), to find the windows that fit worst.
    residual_count: the data residuals in all (every window's, every process's).
    chi2: the windows' sum of squared residuals and start prior terms (twice the sum of their
      costs, every process's; without theta's prior or a robust loss).
    loss_scale: the robust loss's bend the information was weighed with (None: squared loss).
  """

  names: tuple[str, ...]
  information: np.ndarray
  singular: np.ndarray
  directions: np.ndarray
  rank: int
  std: np.ndarray
  prior_width: np.ndarray
  unseen: np.ndarray
  window_costs: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  residual_count: int = 0
  chi2: float = math.nan
  loss_scale: float | None = None

  @property
  def chi2_dof(self) -> float:
    """chi2 / (residual count - size): chi-square per degree of freedom. With residuals in
    units of their noise, about 1 (within a few sqrt(2 / dof)) when the model explains the data
    down to the noise; far above 1 when it does not: a parameter or effect missing from the
    model, a noise level set too low, or outlier windows (see `outliers`). NaN without degrees
    of freedom."""
    dof = self.residual_count - len(self.names)
    return self.chi2 / dof if dof > 0 else math.nan

  def outliers(self, factor: float | np.floating = OUTLIER_FACTOR) -> np.ndarray:
    """The windows (indices into this process's, worst first) whose cost is above factor times
    the larger of the median window cost and the noise's share of a window (half its residual
    count): windows the model explains far worse than the others, such as a burst of bad
    measurements or a start record across a contact switch."""
    factor = v.number("factor", factor, low=1.0)
    costs = np.asarray(self.window_costs)
    if costs.size == 0:
      return np.zeros(0, int)
    per_window = self.residual_count / max(len(costs), 1)
    floor = max(float(np.median(costs)), 0.5 * per_window)
    found = np.flatnonzero(costs > factor * floor)
    return found[np.argsort(-costs[found])]

  def _misfit(self) -> list[str]:
    """The summary's lines on the fit: chi2/dof in words, and the outlier windows."""
    chi2_dof = self.chi2_dof
    if not math.isfinite(chi2_dof):
      return []
    dof = self.residual_count - len(self.names)
    if chi2_dof <= 1.0 + 3.0 * math.sqrt(2.0 / dof):
      lines = [f"the model fits the data to their noise: chi2/dof = {chi2_dof:.3g}"]
    elif chi2_dof <= MISFIT:
      lines = [f"the model fits the data a little worse than their noise: chi2/dof = "
               f"{chi2_dof:.3g} (a noise level set a little low, or a small model error)"]
    else:
      lines = [f"the model does not fit the data: chi2/dof = {chi2_dof:.3g} (residuals about "
               f"{math.sqrt(chi2_dof):.3g}x their noise): a parameter or effect missing from the "
               "model, a noise level set too low, or outlier windows; what follows holds at "
               "this misfit"]
    found = self.outliers()
    if found.size:
      costs = np.asarray(self.window_costs)
      share = 100.0 * costs[found] / max(float(np.sum(costs)), 1e-300)
      listed = ", ".join(f"{w} ({costs[w]:.3g}, {p:.0f}% of the cost)"
                         for w, p in zip(found[:5].tolist(), share[:5], strict=True))
      more = f" and {found.size - 5} more" if found.size > 5 else ""
      lines.append(f"  outlier windows (cost over {OUTLIER_FACTOR:g}x the median "
                   f"{float(np.median(costs)):.3g}): {listed}{more}; a robust loss "
                   "(Problem(loss='huber')) weighs them less")
    return lines

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
    """A few lines: whether the model fits the data (chi2_dof, in words) and its outlier
    windows, the rank, and the unidentifiable directions (at most `most`) by the numbers they
    move."""
    threshold = v.number("threshold", threshold, low=0.0, high=1.0)
    most = None if most is None else v.integer("most", most, low=0)
    size = len(self.names)
    lines = [*self._misfit(),
             f"identifiable: {self.rank} of {size} directions (square roots of the information "
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
  """The identifiability of the numbers at a fit (or at any theta), and how well the model fits
  the data there (chi-square per degree of freedom, outlier windows): see Report.

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
  options = _options(problem)
  tau = result.loss_scale if isinstance(result, Fit) else options.loss_scale
  if options.loss != "squared" and tau is None and dist is not None:
    raise ValueError(f"problem.loss_scale must be given with dist and loss {options.loss!r} "
                     "(its default, from the median window cost, is one process's)")
  shard = PartitionSpec() if dist is None else PartitionSpec(dist.axis)
  runner = solver._Runner(problem, checked, data, dist, "information",
                          (PartitionSpec(), PartitionSpec(), shard))
  info, squares, window = runner.fn(runner.theta(checked.theta0), runner.offsets(offsets),
                                    tau=0.0 if tau is None else tau)
  info, squares, window = runner.read(info), runner.read(squares), runner.read(window)
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
  count = int(checked.residual_size * (len(data.starts) if dist is None else dist.num_sims))
  return Report(problem.parameters.names, info, singular, directions, rank,
                checked.scale * np.sqrt(variance), checked.prior_width, unseen, window, count,
                float(squares[0] + squares[2]), None if options.loss == "squared" else tau)
