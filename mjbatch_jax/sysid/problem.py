"""What to fit (Problem), what a fit returns (Fit), and the checks of both against the windows,
all before anything runs."""

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax.sysid.data import Windows, _finite
from mjbatch_jax.sysid.parameters import Parameters


@dataclasses.dataclass(frozen=True)
class Problem:
  """What to fit: the unknowns, the residual, the priors and the bounds.

  The cost is half the sum of the squared residuals of every window, plus the priors' terms:
  with residuals in units of their noise, a chi-square over 2. Checked where it is made (its
  settings and arrays, against parameters.size); numpy scalars stand for Python numbers.

  Attributes:
    parameters: the unknowns (`Parameters`).
    residual: fn(states (T, nstate), sensordata (T, nsensordata), measured) -> array, of one
      window (vmapped over windows); states and sensordata as `rollout` returns them.
    nstep: substeps per control.
    prior_width: (size,) Gaussian priors' widths about the prior mean (the fit's theta0 unless
      prior_mean); inf for no prior on a number; None for none at all.
    prior_mean: (size,) their means.
    bounds: (low, high), each (size,), -inf / inf where unbounded: steps stay inside (a boxed
      Gauss-Newton step by active sets).
    scale: (size,) each number's typical change, the unit of the damping and of max_step
      (default: its prior width, 1 where it has none).
    start_width: (2 nv + na,) widths of the starts' priors about their records, in the tangent
      space (qpos as qvel, then qvel, then act); None: starts fixed at their records.
    dampings: Levenberg's dampings tried each iteration (as rows of one call), relative to the
      normal equations' mean curvature in scale units. When none of them lowers the cost, an
      adaptive damping (Nielsen's update) is tried beside them from then on: see `fit`.
    max_step: the most any number moves in a step, in scale units.
    eps, centered: the finite differences of the Jacobian, as `rollout` takes them (None: its
      defaults).
    loss: "squared" (the default: the cost above), or "huber" or "cauchy": a robust loss of each
      window's cost c (its residuals' half sum of squares and its start's prior term), so that a
      window far off the others (a bad measurement burst, a start record across a contact
      switch) weighs less: huber c -> 2 sqrt(s c) - s beyond s, cauchy c -> s log(1 + c / s).
    loss_scale: s, the window cost where the robust loss bends (in cost units); None: 4 times
      the larger of the median window cost and half a window's residual count (the noise's
      share), re-estimated at every iteration (see `Fit.loss_scale`); give it with dist.

  Example:
    qpos = sim.layout.qpos
    problem = sysid.Problem(parameters, lambda s, y, q: (s[:, qpos] - q) / 1e-4, nstep=5,
                            prior_width=np.full(parameters.size, 0.5))
  """

  parameters: Parameters
  residual: Callable[..., Any]
  nstep: int = 1
  prior_width: Any = None
  prior_mean: Any = None
  bounds: tuple[Any, Any] | None = None
  scale: Any = None
  start_width: Any = None
  dampings: tuple[float, ...] = (0.0, 1e-8, 1e-6, 1e-4, 1e-2)
  max_step: float = 2.0
  eps: float | None = None
  centered: bool | None = None
  loss: str = "squared"
  loss_scale: float | None = None

  def __post_init__(self) -> None:
    # Checked where it is made (and again by fit and report, for a changed parameters).
    _options(self)
    _priors(self)


@dataclasses.dataclass(frozen=True)
class Fit:
  """A fit's result.

  Attributes:
    theta: (size,) the identified numbers.
    starts: (W, nx) the windows' starts as offsets from their records (this process's windows),
      in the tangent space; zeros when starts are fixed. `fitted_starts` turns them into rows.
    costs: the cost at theta0, then after each iteration (with a robust loss, the robust cost,
      each iteration's with its own bend when loss_scale is None).
    converged: whether the fit reached a minimum: the Gauss-Newton step from where it stopped
      would lower the cost by at most `tolerance` (or by at most ftol of the cost), or would move
      no number by more than xtol of its scale and no start by more than xtol of its width, or
      a near Gauss-Newton step gained at most that (see `fit`); never because no damping
      lowered the cost. Not whether the model fits the data: see `chi2_dof`.
    wall, cpu: seconds of each iteration (the first with compilation).
    stopped: why the fit stopped: "converged", "iterations" (the limit), or "stalled" (no
      damping, however large, lowered the cost while the Gauss-Newton model said it could
      fall: a point where the model's derivative misleads, such as a contact switch).
    dampings: (iterations,) the damping of the step taken each iteration (relative to the mean
      curvature, as Problem.dampings), NaN where none was taken.
    window_costs: (W,) each window's cost at theta and starts: half its residuals' sum of squares
      plus its start's prior term (this process's windows; not the robust loss).
    window_weights: (W,) each window's weight at theta and starts: 1 with the squared loss, the
      robust loss's derivative at its cost otherwise (small: a window taken as an outlier).
    residual_count: the data residuals in all (every window's residual's size, every process).
    loss_scale: the robust loss's bend (Problem.loss_scale or its default); None for "squared".
    chi2: the windows' sum of squared residuals and start prior terms (twice their costs, every
      process's), without the robust loss or theta's prior.
  """

  theta: np.ndarray
  starts: np.ndarray
  costs: np.ndarray
  converged: bool
  wall: np.ndarray
  cpu: np.ndarray
  stopped: str = "converged"
  dampings: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  window_costs: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  window_weights: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  residual_count: int = 0
  loss_scale: float | None = None
  chi2: float = math.nan

  @property
  def iterations(self) -> int:
    return len(self.wall)

  @property
  def chi2_dof(self) -> float:
    """chi2 / (residual count - size), chi-square per degree of freedom: with residuals in units
    of their noise about 1 when the model explains the data down to the noise, far above 1 when
    it does not (a missing parameter, a noise level set too low, outlier windows). NaN without
    degrees of freedom."""
    dof = self.residual_count - self.theta.size
    return self.chi2 / dof if dof > 0 else math.nan


def _vector(what: str, x: Any, size: int, names: tuple[str, ...], allow_inf: bool = False,
            positive: bool = False) -> np.ndarray:
  """x as a (size,) float64 array, a number standing for all; NaN refused, inf unless
  allow_inf, values <= 0 if positive."""
  if isinstance(x, str) or x is None:
    raise ValueError(f"{what} must be {size} numbers (one per number of theta), got "
                     f"{v.shown(x)}")
  try:
    raw = np.asarray(x)
  except (TypeError, ValueError):
    raise ValueError(f"{what} must be {size} numbers (one per number of theta), got "
                     f"{v.shown(x)}") from None
  if raw.dtype.kind not in "iuf":
    raise ValueError(f"{what} must be numbers (ints or floats), got dtype {raw.dtype} "
                     f"({v.shown(x)})")
  array = raw.astype(np.float64)
  if array.ndim == 0:
    array = np.full(size, float(array))
  if array.shape != (size,):
    raise ValueError(f"{what} must have shape ({size},) (one per number), got {array.shape}")
  bad = np.isnan(array) | ((not allow_inf) & np.isinf(array)) | (positive & ~(array > 0))
  if np.any(bad):
    i = int(np.flatnonzero(bad)[0])
    want = "a number > 0" if positive else "a finite number"
    raise ValueError(f"{what}[{i}] ({names[i]}) must be {want}{' or inf' if allow_inf else ''}, "
                     f"got {array[i]}")
  return array


@dataclasses.dataclass(frozen=True)
class _Checked:
  """A Problem's arrays, checked and resolved for one fit."""

  theta0: np.ndarray
  mean: np.ndarray
  precision: np.ndarray  # (scale / prior width)^2, 0 without a prior
  low: np.ndarray
  high: np.ndarray
  scale: np.ndarray
  start_width: np.ndarray | None
  prior_width: np.ndarray
  residual_size: int  # of one window

  def arrays(self) -> dict[str, np.ndarray]:
    """What the jitted program takes as arguments (so that one compilation serves any guess,
    prior and bounds)."""
    width = np.ones(0) if self.start_width is None else self.start_width
    return {"mean": self.mean, "precision": self.precision, "low": self.low, "high": self.high,
            "scale": self.scale, "start_width": width}

  @property
  def bounded(self) -> bool:
    return bool(np.any(np.isfinite(self.low)) or np.any(np.isfinite(self.high)))


class _Options(NamedTuple):
  """A Problem's settings, checked, as Python values (what is traced into its programs)."""

  nstep: int
  dampings: tuple[float, ...]
  max_step: float
  eps: float | None
  centered: bool | None
  loss: str
  loss_scale: float | None


LOSSES = ("squared", "huber", "cauchy")


def _options(problem: "Problem") -> _Options:
  """The problem's parameters, residual and settings checked; the settings as Python values."""
  if not isinstance(problem.parameters, Parameters):
    raise ValueError(f"problem.parameters must be sysid.Parameters, got "
                     f"{type(problem.parameters).__name__}")
  if not callable(problem.residual):
    raise ValueError(f"problem.residual must be a function (states, sensordata, measured) -> "
                     f"array, got {v.shown(problem.residual)}")
  nstep = v.integer("problem.nstep", problem.nstep, low=1, high=2**31 - 1)
  given = problem.dampings
  if isinstance(given, str) or not isinstance(given, Sequence | np.ndarray) \
      or (isinstance(given, np.ndarray) and given.ndim != 1) or len(given) < 1:
    raise ValueError(f"problem.dampings must be one or more finite numbers >= 0 (a tuple), got "
                     f"{v.shown(given)}")
  dampings = tuple(v.number(f"problem.dampings[{i}]", d, low=0.0) for i, d in enumerate(given))
  max_step = v.number("problem.max_step", problem.max_step, low=0.0, low_open=True)
  eps = None if problem.eps is None else v.number("problem.eps", problem.eps, low=0.0,
                                                  low_open=True)
  centered = None if problem.centered is None else v.flag("problem.centered", problem.centered)
  loss = v.one_of("problem.loss", problem.loss, LOSSES)
  loss_scale = None if problem.loss_scale is None else v.number(
    "problem.loss_scale", problem.loss_scale, low=0.0, low_open=True)
  return _Options(nstep, dampings, max_step, eps, centered, loss, loss_scale)


def _priors(problem: "Problem") -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray,
                                          np.ndarray, np.ndarray | None]:
  """The problem's arrays checked: prior widths, prior mean (None: theta0), scale, bounds
  (low, high) and start widths (None: starts fixed)."""
  parameters = problem.parameters
  n, names = parameters.size, parameters.names
  widths = np.full(n, np.inf) if problem.prior_width is None else _vector(
    "prior_width", problem.prior_width, n, names, allow_inf=True, positive=True)
  mean = None if problem.prior_mean is None else _vector("prior_mean", problem.prior_mean, n,
                                                         names)
  if problem.scale is None:
    scale = np.where(np.isfinite(widths), widths, 1.0)
  else:
    scale = _vector("scale", problem.scale, n, names, positive=True)
  low, high = np.full(n, -np.inf), np.full(n, np.inf)
  bounds = problem.bounds
  if bounds is not None:
    if isinstance(bounds, str) or not isinstance(bounds, Sequence | np.ndarray) \
        or len(bounds) != 2:
      raise ValueError(f"bounds must be (low, high), each ({n},) or a number, got "
                       f"{v.shown(bounds)}")
    low = _vector("bounds low", bounds[0], n, names, allow_inf=True)
    high = _vector("bounds high", bounds[1], n, names, allow_inf=True)
    if np.any(low > high):
      i = int(np.flatnonzero(low > high)[0])
      raise ValueError(f"bounds: low > high for {names[i]} (number {i}): {low[i]} > {high[i]}")
  model = parameters.sim.model
  nx = 2 * model.nv + model.na
  start_width = None
  if problem.start_width is not None:
    start_width = _vector("start_width", problem.start_width, nx,
                          tuple(f"start {i}" for i in range(nx)), positive=True)
  return widths, mean, scale, low, high, start_width


def _check(problem: Problem, theta0: Any, windows: Windows, what: str = "theta0") -> _Checked:
  if not isinstance(problem, Problem):
    raise ValueError(f"problem must be a sysid.Problem, got {type(problem).__name__}")
  _options(problem)
  parameters = problem.parameters
  sim = parameters.sim
  if sim.closed:
    len(parameters._programs)  # releases them
    raise ValueError("the Simulator of problem.parameters is closed")
  n, names = parameters.size, parameters.names
  theta0 = _vector(what, parameters.initial if theta0 is None else theta0, n, names)
  widths, mean, scale, low, high, start_width = _priors(problem)
  mean = theta0 if mean is None else mean
  outside = (theta0 < low) | (theta0 > high)
  if np.any(outside):
    i = int(np.flatnonzero(outside)[0])
    raise ValueError(f"{what}[{i}] ({names[i]}) = {theta0[i]} is outside its bounds "
                     f"[{low[i]}, {high[i]}]: start inside them")
  if not isinstance(windows, Windows):
    raise ValueError(f"windows must be sysid.Windows (see sysid.windows), got "
                     f"{type(windows).__name__}")
  _finite("windows.starts", windows.starts)
  _finite("windows.ctrls", windows.ctrls)
  leaves = jax.tree.leaves(windows.measured)
  for i, leaf in enumerate(leaves):
    _finite(f"windows.measured leaf {i}", leaf)
  starts, ctrls = np.shape(windows.starts), np.shape(windows.ctrls)
  if len(starts) != 2 or starts[1] != sim.nstate or starts[0] < 1:
    raise ValueError(f"windows.starts must be (W >= 1, nstate={sim.nstate}), got shape {starts}")
  if len(ctrls) != 3 or ctrls[0] != starts[0] or ctrls[2] != sim.nu or ctrls[1] < 1:
    raise ValueError(f"windows.ctrls must be (W={starts[0]}, T >= 1, nu={sim.nu}), got shape "
                     f"{ctrls}")
  for i, leaf in enumerate(leaves):
    if np.shape(leaf)[:2] != ctrls[:2]:
      raise ValueError(f"windows.measured leaf {i} must be (W={ctrls[0]}, T={ctrls[1]}, ...), "
                       f"got shape {np.shape(leaf)}")
  # The residual of one window, traced only (no custom call runs): one floating-point array.
  dtype = jnp.result_type(float)
  one = (jax.ShapeDtypeStruct((ctrls[1], sim.nstate), dtype),
         jax.ShapeDtypeStruct((ctrls[1], sim.nsensordata), dtype),
         jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x)[1:], dtype), windows.measured))
  try:
    out = jax.eval_shape(problem.residual, *one)
  except Exception as e:  # noqa: BLE001  (whatever the user's function raises, said plainly)
    raise ValueError(f"problem.residual failed on one window's (states {one[0].shape}, "
                     f"sensordata {one[1].shape}, measured) : {type(e).__name__}: {e}") from e
  if not isinstance(out, jax.ShapeDtypeStruct) or not jnp.issubdtype(out.dtype, jnp.floating) \
      or out.size == 0:
    raise ValueError(f"problem.residual must return one non-empty floating-point array per "
                     f"window, got {out}")
  return _Checked(theta0, mean, np.where(np.isfinite(widths), (scale / widths) ** 2, 0.0), low,
                  high, scale, start_width, widths, int(out.size))


def _offsets(starts: Any, count: int, nx: int) -> np.ndarray:
  """The starts' offsets (count, nx) to begin with: zeros for None."""
  if starts is None:
    return np.zeros((count, nx))
  offsets = _finite("starts", starts)
  if offsets.shape != (count, nx):
    raise ValueError(f"starts must be ({count}, {nx}) (this process's windows, 2 nv + na), got "
                     f"shape {offsets.shape}")
  return offsets
