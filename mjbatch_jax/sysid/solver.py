"""The solver: Levenberg-Marquardt over theta and the windows' starts, the starts eliminated
window by window (the Schur complement), on one process or a Distributed's mesh."""

import math
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.sharding import PartitionSpec

from mjbatch_jax import _validate as v
from mjbatch_jax.control import qp
from mjbatch_jax.functions import rollout
from mjbatch_jax.sysid.data import Windows, _finite
from mjbatch_jax.sysid.problem import Fit, Problem, _check, _Checked, _offsets, _options
from mjbatch_jax.tangent import StateTangent


def _box_solve(h: jax.Array, g: jax.Array, low: jax.Array, high: jax.Array,
               iterations: int) -> jax.Array:
  """argmin 0.5 d'hd + g'd over low <= d <= high (a box around 0): the library's box QP
  (control.qp) where numbers are bounded, else the Newton step itself."""
  if not iterations:
    return jnp.clip(jnp.linalg.solve(h, -g), low, high)
  return qp._box_qp(h, g, jnp.zeros((g.shape[0], 0), h.dtype), low, high, iterations)[0]


class _Program:
  """The jitted pieces of a fit over windows (sharded over a mesh axis when axis is given).

  Each method takes c, the checked problem's arrays (_Checked.arrays), first.
  """

  def __init__(self, problem: Problem, fit_starts: bool, bounded: bool, axis: str | None):
    self.problem, self.fit_starts, self.axis = problem, fit_starts, axis
    self.options = _options(problem)
    self.passes = 8 if bounded else 0  # Newton iterations of the box QP
    parameters = problem.parameters
    model = parameters.sim.model
    self.parameters = parameters
    self.nv, self.nx = model.nv, 2 * model.nv + model.na
    self.layout = parameters.sim.layout
    self.tangent = StateTangent.of(model)

  def total(self, x: jax.Array) -> jax.Array:
    """Summed over every device's windows: what crosses processes."""
    return x if self.axis is None else jax.lax.psum(x, self.axis)

  def moved(self, starts: jax.Array, offsets: jax.Array) -> jax.Array:
    """Start rows (..., nstate) moved by tangent offsets (..., nx)."""
    return self.tangent.retract(starts, offsets)

  def residuals(self, thetas: jax.Array, rows: jax.Array, ctrls: jax.Array,
                measured: Any) -> jax.Array:
    """(M, R): each row's residual, thetas (M, size), rows (M, nstate), ctrls (M, T, nu)."""
    states, sensordata = rollout(rows, ctrls, self.parameters.params(thetas),
                                 nstep=self.options.nstep, eps=self.options.eps,
                                 centered=self.options.centered)
    r = jax.vmap(self.problem.residual)(states, sensordata, measured)
    return r.reshape(r.shape[0], -1)

  def linearize(self, c: dict, theta: jax.Array, offsets: jax.Array, data: Windows) -> tuple:
    """The residuals (W, R), and d r / d theta (W, R, size) and each window's d r / d its own
    start (W, R, nx), in scale units."""
    count = data.starts.shape[0]

    # A window is a simulation of its own: moving every window's start along one direction
    # at once gives each window's own block in its rows, so nx columns stand for all W x nx.
    def of(t: jax.Array, shift: jax.Array) -> tuple[jax.Array, jax.Array]:
      rows = self.moved(data.starts, offsets + shift) if self.fit_starts else data.starts
      r = self.residuals(jnp.broadcast_to(t, (count, t.size)), rows, data.ctrls, data.measured)
      return r, r

    shift = jnp.zeros(self.nx, theta.dtype)
    if self.fit_starts:
      (jac, jac_start), r = jax.jacfwd(of, argnums=(0, 1), has_aux=True)(theta, shift)
      jac_start = jac_start * c["start_width"]
    else:
      jac, r = jax.jacfwd(of, has_aux=True)(theta, shift)
      jac_start = jnp.zeros((*r.shape, 0), r.dtype)
    return r, jac * c["scale"], jac_start

  def information(self, c: dict, theta: jax.Array, offsets: jax.Array,
                  data: Windows) -> tuple[jax.Array, jax.Array, jax.Array]:
    """J'J of theta after eliminating the starts (their priors included), summed; the
    residuals' sum of squares, the starts' Jacobian's (to tell whether they are finite) and the
    starts' prior terms; and each window's cost (W,)."""
    r, a, b = self.linearize(c, theta, offsets, data)
    window = 0.5 * jnp.sum(r**2, axis=1)
    if self.fit_starts:
      window = window + 0.5 * jnp.sum((offsets / c["start_width"]) ** 2, axis=1)
    start_part = 2.0 * jnp.sum(window) - jnp.sum(r**2)
    squares = self.total(jnp.stack([jnp.sum(r**2), jnp.sum(b**2), start_part]))
    weight = jnp.ones_like(window)
    if self.options.loss != "squared":  # each window weighed as the fit's last step weighs it
      weight = self.weights(self.bend(c, window, r.shape[1]), window)
      a, b = a * jnp.sqrt(weight)[:, None, None], b * jnp.sqrt(weight)[:, None, None]
    info = jnp.einsum("wpi,wpj->ij", a, a)
    if self.fit_starts:
      cross = jnp.einsum("wpi,wpj->wij", a, b)
      blocks = jnp.einsum("wpi,wpj->wij", b, b) + weight[:, None, None] * jnp.eye(self.nx)
      info = info - jnp.einsum("wij,wkj->ik", cross, jnp.linalg.solve(
        blocks, jnp.swapaxes(cross, 1, 2)).swapaxes(1, 2))
    return self.total(info), squares, window

  def bend(self, c: dict, window: jax.Array, size: int) -> jax.Array:
    """The robust loss's bend: c["tau"], or where that is 0 (automatic) ROBUST_BEND times the
    larger of the median window cost and the noise's share of a window (size / 2)."""
    auto = ROBUST_BEND * jnp.maximum(jnp.median(window), 0.5 * size)
    return jnp.where(c["tau"] > 0, c["tau"], auto)

  def weights(self, tau: jax.Array, window: jax.Array) -> jax.Array:
    """(W,) the robust loss's derivative at each window's cost: each window's weight."""
    if self.options.loss == "huber":
      return jnp.where(window <= tau, 1.0, jnp.sqrt(tau / jnp.maximum(window, tau)))
    return 1.0 / (1.0 + window / tau)  # cauchy

  def robust(self, tau: jax.Array, window: jax.Array) -> jax.Array:
    """The robust loss of each window's cost."""
    if self.options.loss == "huber":
      return jnp.where(window <= tau, window, 2.0 * jnp.sqrt(tau * jnp.maximum(window, tau)) - tau)
    return tau * jnp.log1p(window / tau)  # cauchy

  def window_costs(self, c: dict, theta: jax.Array, offsets: jax.Array,
                   data: Windows) -> tuple[jax.Array, jax.Array]:
    """(W,) each window's cost (half its residuals' sum of squares and its start's prior term),
    and twice their sum over every process (the chi-square)."""
    count = data.starts.shape[0]
    rows = self.moved(data.starts, offsets) if self.fit_starts else data.starts
    r = self.residuals(jnp.broadcast_to(theta, (count, theta.size)), rows, data.ctrls,
                       data.measured)
    part = jnp.sum(r**2, axis=1)
    if self.fit_starts:
      part = part + jnp.sum((offsets / c["start_width"]) ** 2, axis=1)
    return 0.5 * part, self.total(jnp.sum(part))

  def costs(self, c: dict, thetas: jax.Array, offsets: jax.Array, data: Windows,
            tau: jax.Array | None = None) -> jax.Array:
    """(K,) the costs of K candidates: thetas (K, size), offsets (K, W, nx), all K x W
    simulations rows of one call; tau: the robust loss's bend."""
    k, count = thetas.shape[0], data.starts.shape[0]
    rows = (self.moved(data.starts, offsets) if self.fit_starts
            else jnp.broadcast_to(data.starts, (k, *data.starts.shape)))
    tile = lambda x: jnp.broadcast_to(x, (k, *x.shape)).reshape(k * x.shape[0], *x.shape[1:])  # noqa: E731
    r = self.residuals(jnp.repeat(thetas, count, axis=0), rows.reshape(k * count, -1),
                       tile(data.ctrls), jax.tree.map(tile, data.measured))
    prior = (thetas - c["mean"]) / c["scale"]
    if self.options.loss != "squared":
      window = jnp.sum(r.reshape(k, count, -1) ** 2, axis=2)
      if self.fit_starts:
        window = window + jnp.sum((offsets / c["start_width"]) ** 2, axis=2)
      data_part = jnp.sum(self.robust(jnp.asarray(tau), 0.5 * window), axis=1)
      return self.total(data_part) + 0.5 * jnp.sum(c["precision"] * prior**2, axis=1)
    data_part = jnp.sum(r.reshape(k, -1) ** 2, axis=1)
    if self.fit_starts:
      data_part = data_part + jnp.sum((offsets / c["start_width"]) ** 2, axis=(1, 2))
    return 0.5 * (self.total(data_part) + jnp.sum(c["precision"] * prior**2, axis=1))

  def most(self, x: jax.Array) -> jax.Array:
    """The largest over every device's windows."""
    return x if self.axis is None else jax.lax.pmax(x, self.axis)

  def step(self, c: dict, theta: jax.Array, offsets: jax.Array, data: Windows) -> tuple:
    """One Levenberg-Marquardt iteration: (theta, offsets, cost before, cost after, whether
    the normal equations are finite, and STEP_STATS: the candidate taken (-1 for none), the
    gain the Gauss-Newton model predicted for it, the gain it predicts for a nearly undamped
    step (PROBE_DAMPING) and that step's largest move in scales or start widths, the smallest
    move of the candidates tried, and the robust loss's bend (0 for the squared loss))."""
    scale, precision = c["scale"], c["precision"]
    n, nx = theta.size, self.nx
    r, a, b = self.linearize(c, theta, offsets, data)
    prior = (theta - c["mean"]) / scale
    robust = self.options.loss != "squared"
    if self.fit_starts:
      start_prior = offsets / c["start_width"]
    if robust:
      # Iteratively reweighted: each window's residuals, Jacobian rows and start prior weighed
      # by the robust loss's derivative at its cost (Ceres' first-order correction).
      window = 0.5 * jnp.sum(r**2, axis=1)
      if self.fit_starts:
        window = window + 0.5 * jnp.sum(start_prior**2, axis=1)
      tau = self.bend(c, window, r.shape[1])
      weight = self.weights(tau, window)
      root = jnp.sqrt(weight)
      r, a, b = r * root[:, None], a * root[:, None, None], b * root[:, None, None]
      robust_sum = jnp.sum(self.robust(tau, window))
    else:
      weight, robust_sum = jnp.ones(r.shape[0], theta.dtype), jnp.zeros((), theta.dtype)
      tau = jnp.zeros((), theta.dtype)
    # Normal equations in scale units, where each prior's curvature is its precision, so that
    # Levenberg's damping means the same for every number. A window's start enters only its own
    # residuals: its nx x nx block is eliminated where the window is simulated (the Schur
    # complement), and what crosses processes is the n x n system.
    eye = jnp.eye(nx, dtype=theta.dtype)
    if self.fit_starts:
      cross = jnp.einsum("wpi,wpj->wij", a, b)  # (W, n, nx)
      if robust:  # (the squared loss's formulas kept as they were: its results do not move)
        blocks = jnp.einsum("wpi,wpj->wij", b, b) + weight[:, None, None] * eye
        grad_starts = jnp.einsum("wpj,wp->wj", b, r) + weight[:, None] * start_prior
      else:
        blocks = jnp.einsum("wpi,wpj->wij", b, b) + eye  # (W, nx, nx)
        grad_starts = jnp.einsum("wpj,wp->wj", b, r) + start_prior
      start_terms = jnp.stack([jnp.sum(jnp.trace(blocks, axis1=1, axis2=2)),
                               jnp.sum(start_prior**2)])
    else:
      start_terms = jnp.zeros(2, theta.dtype)
    count = self.total(jnp.asarray(data.starts.shape[0], theta.dtype)) if self.fit_starts else 0
    sums = self.total(jnp.concatenate([jnp.einsum("wpi,wpj->ij", a, a).ravel(),
                                       jnp.einsum("wpi,wp->i", a, r),
                                       jnp.sum(r**2)[None], start_terms, robust_sum[None]]))
    hessian = sums[: n * n].reshape(n, n) + jnp.diag(precision)
    grad = sums[n * n: n * n + n] + precision * prior
    if robust:
      before = sums[-1] + 0.5 * jnp.sum(precision * prior**2)
    else:
      before = 0.5 * (sums[n * n + n] + sums[-2] + jnp.sum(precision * prior**2))
    mean = (jnp.trace(hessian) + sums[-3]) / (n + count * nx)
    low, high = (c["low"] - theta) / scale, (c["high"] - theta) / scale
    if self.fit_starts:
      right = jnp.concatenate([jnp.swapaxes(cross, 1, 2), grad_starts[..., None]], axis=-1)

    def damped(damping: jax.Array, clamp: bool = True) -> tuple[jax.Array, jax.Array]:
      """The step of a damping, in scale units and start widths."""
      shift = damping * mean
      if self.fit_starts:
        solved = jnp.linalg.solve(blocks + shift * eye, right)  # (W, nx, n + 1)
        # C B^-1 [C' g]: the starts' share of the n x n system and of its right-hand side.
        eliminated = self.total(jnp.einsum("wij,wjk->ik", cross, solved))
        reduced = hessian + shift * jnp.eye(n) - eliminated[:, :n]
        direction = _box_solve(reduced, grad - eliminated[:, n], low, high, self.passes)
        starts = -(solved[..., n] + jnp.einsum("wji,i->wj", solved[..., :n], direction))
      else:
        direction = _box_solve(hessian + shift * jnp.eye(n), grad, low, high, self.passes)
        starts = jnp.zeros_like(offsets)
      if not clamp:
        return direction, starts
      # At most max_step scales a number and step: beyond it the linearisation means little.
      # (A box around 0 keeps the shortened step inside the bounds.)
      factor = jnp.minimum(1.0, self.options.max_step / jnp.max(jnp.abs(direction)))
      return direction * factor, starts * factor

    def model(directions: jax.Array, starts: jax.Array) -> tuple[jax.Array, jax.Array]:
      """(K,) the gain the Gauss-Newton model predicts for K steps, and their largest moves."""
      gain = directions @ grad + 0.5 * jnp.einsum("ki,ij,kj->k", directions, hessian, directions)
      size = jnp.max(jnp.abs(directions), axis=1)
      if self.fit_starts:
        gain = gain + self.total(
          jnp.einsum("kwj,wj->k", starts, grad_starts)
          + jnp.einsum("ki,wij,kwj->k", directions, cross, starts)
          + 0.5 * jnp.einsum("kwi,wij,kwj->k", starts, blocks, starts))
        size = jnp.maximum(size, self.most(jnp.max(jnp.abs(starts), axis=(1, 2))))
      return -gain, size

    # Every damping's step is tried as rows of one rollout call; the best is taken if it helps.
    # The fixed dampings first, then the adaptive ladder (c["ladder"], tried where on).
    dampings = jnp.concatenate([jnp.asarray(self.options.dampings, theta.dtype), c["ladder"]])
    directions, starts = jax.vmap(damped)(dampings)
    start_unit = c["start_width"] if self.fit_starts else 1.0
    thetas = jnp.clip(theta + directions * scale, c["low"], c["high"])
    moved = offsets + starts * start_unit
    fixed = len(self.options.dampings)
    # The ladder's candidates are simulated only while it is on (most iterations it is off):
    # a call of their own, so that the fixed dampings' rows cost what they cost without it.
    ladder = jax.lax.cond(c["ladder_on"] > 0,
                          lambda: self.costs(c, thetas[fixed:], moved[fixed:], data, tau),
                          lambda: jnp.full(LADDER, jnp.inf, theta.dtype))
    tried = jnp.concatenate([self.costs(c, thetas[:fixed], moved[:fixed], data, tau), ladder])
    tried = jnp.nan_to_num(tried, nan=jnp.inf)
    on = jnp.arange(dampings.size) < fixed + c["ladder_on"] * LADDER
    tried = jnp.where(on, tried, jnp.inf)
    best = jnp.argmin(tried)
    better = tried[best] < before
    theta = jnp.where(better, thetas[best], theta)
    offsets = jnp.where(better, moved[best], offsets)
    gains, sizes = model(directions, starts)
    probe = jax.tree.map(lambda x: x[None], damped(jnp.asarray(PROBE_DAMPING, theta.dtype),
                                                   clamp=False))
    probe_gain, probe_size = model(*probe)
    # A non-finite Jacobian makes every step NaN, which no damping helps: said, not converged.
    finite = jnp.all(jnp.isfinite(sums))
    stats = jnp.stack([jnp.where(better, best, -1).astype(theta.dtype), gains[best],
                       probe_gain[0], probe_size[0], jnp.min(jnp.where(on, sizes, jnp.inf)),
                       tau])
    return theta, offsets, before, jnp.where(better, tried[best], before), finite, stats


# The adaptive dampings tried beside the fixed ones once those fail: Nielsen's next LADDER
# values. PROBE_DAMPING: the nearly undamped step that tells convergence (damped enough that a
# direction the data do not see, whose gradient is finite-difference noise, stays put).
LADDER = 4
PROBE_DAMPING = 1e-6
# The robust loss's automatic bend, in median window costs (or noise shares of a window).
ROBUST_BEND = 4.0


def _ladder(mu: float, nu: float) -> tuple[np.ndarray, float, float]:
  """Nielsen's next LADDER dampings from (mu, nu) after as many failures, and (mu, nu) after
  them all failing: mu *= nu, nu *= 2 at each."""
  values = []
  for _ in range(LADDER):
    values.append(mu)
    mu, nu = mu * nu, 2.0 * nu
  return np.array(values), mu, nu


def _local_windows(data: Windows, dist: Any) -> Windows:
  """This process's windows of a global set (or its own already), as numpy."""
  count = len(data.starts)
  if count == dist.num_sims:
    return jax.tree.map(lambda x: np.asarray(x)[dist.rows], data)
  if count == dist.num_local:
    return jax.tree.map(np.asarray, data)
  raise ValueError(f"with dist, the windows must be all {dist.num_sims} (the Distributed's "
                   f"num_sims_global) or this process's {dist.num_local}, got {count}")


class _Runner:
  """A _Program method jitted over the windows, on one process's devices or a dist's mesh.

  The compiled functions live on the Parameters (see _Programs), keyed by what is traced into
  them (the residual function, the options, whether starts are fitted or numbers bounded, the
  dist), so fits that differ only in their guess, priors or bounds compile once.
  """

  def __init__(self, problem: Problem, checked: _Checked, data: Windows, dist: Any, method: str,
               out_specs: Any):
    self.dist = dist
    fit_starts = checked.start_width is not None
    key = (method, problem.residual, _options(problem), fit_starts, checked.bounded, dist)
    try:
      cached = problem.parameters._programs.get(key)
    except TypeError:  # a residual that cannot be hashed: compiled for this fit alone
      key, cached = None, None
    program = _Program(problem, fit_starts, checked.bounded, None if dist is None else dist.axis)
    # Per call (see fn): the adaptive dampings, whether they are tried, the robust loss's bend.
    arrays = {**checked.arrays(), "ladder": np.ones(LADDER), "ladder_on": np.zeros(()),
              "tau": np.zeros(())}
    self.consts = {k: jnp.asarray(x) for k, x in arrays.items()}
    if dist is None:
      self.data = jax.tree.map(jnp.asarray, data)
      self.compiled = cached or jax.jit(getattr(program, method))
    else:
      self.data = dist.shard(_local_windows(data, dist))
      self.consts = dist.replicate(self.consts)
      # Given, not read from the arguments: on a one-device mesh JAX hands the offsets back
      # replicated, which would compile the step again for the second iteration.
      rows, whole = PartitionSpec(dist.axis), PartitionSpec()
      in_specs = (jax.tree.map(lambda _: whole, self.consts), whole, rows,
                  jax.tree.map(lambda _: rows, self.data))
      self.compiled = cached or dist.map(getattr(program, method), out_specs=out_specs,
                                         in_specs=in_specs)
    if key is not None:
      problem.parameters._programs.put(key, self.compiled)
    self.count = self.data.starts.shape[0] if dist is None else dist.num_local
    model = problem.parameters.sim.model
    self.nx = 2 * model.nv + model.na

  def fn(self, theta: Any, offsets: Any, **updates: Any) -> Any:
    """The program at theta and offsets, with updates of the per-call constants."""
    consts = self.consts
    if updates:
      given = {k: jnp.asarray(np.asarray(x, np.float64)) for k, x in updates.items()}
      consts = {**consts, **(given if self.dist is None else self.dist.replicate(given))}
    return self.compiled(consts, theta, offsets, self.data)

  def offsets(self, offsets: np.ndarray) -> Any:
    return jnp.asarray(offsets) if self.dist is None else self.dist.shard(offsets)

  def theta(self, theta: np.ndarray) -> Any:
    return jnp.asarray(theta) if self.dist is None else self.dist.replicate(theta)

  def read(self, x: Any) -> np.ndarray:
    return np.asarray(x) if self.dist is None else self.dist.local(x)


def _check_dist(dist: Any) -> None:
  # A Distributed exists only once mjbatch_jax.distributed is imported: sysid does not import it.
  module = sys.modules.get("mjbatch_jax.distributed")
  if dist is not None and (module is None or not isinstance(dist, module.Distributed)):
    raise ValueError(f"dist must be a mjbatch_jax.distributed.Distributed (from "
                     f"distributed.setup), got {type(dist).__name__}")


def fit(problem: Problem, data: Windows, theta0: Any = None, iterations: int | np.integer = 30,
        tolerance: float | np.floating = 1.0, starts: Any = None, dist: Any = None,
        xtol: float | np.floating = 1e-6, ftol: float | np.floating = 1e-10) -> Fit:
  """Levenberg-Marquardt from theta0 on the windows; the fit, its costs and its timings.

  Each iteration is one jitted function: the Jacobian (one custom call per knot, every column
  of every window a row), the normal equations with the starts eliminated, the steps of every
  damping and their costs (one more call); the step of lowest cost is taken if it lowers the
  cost. When none of Problem.dampings lowers it, adaptive dampings (Nielsen's update: after a
  failure mu *= nu, nu *= 2; after a success of gain ratio rho, mu *= max(1/3,
  1 - (2 rho - 1)^3), nu = 2) are tried beside them, LADDER of them an iteration (the next
  values after as many failures), until the fixed ones succeed again with a smaller damping.

  It stops converged when, at the start of an iteration, the Gauss-Newton model says the cost
  cannot fall much: its nearly undamped step would lower the cost by at most max(tolerance,
  ftol x the cost) (the gradient is small in the metric of the curvature), or would move no
  number by more than xtol of its scale and no start by more than xtol of its start width (the
  step is small); or when a step of the fixed dampings (near Gauss-Newton's step, the adaptive
  ones not in use) lowered the cost by at most max(tolerance, ftol x the cost) (at a minimum up
  to the finite differences' noise in the gradient). It stops "stalled", not converged, when no
  damping lowers the cost although the model says it could fall, and even the most damped step
  moves nothing by more than xtol; and after `iterations`, not converged.

  Args:
    problem: what to fit.
    data: the windows (with dist: all windows, or this process's).
    theta0: (size,) the starting guess; None: the model's values (parameters.initial).
    iterations: the most iterations.
    tolerance: the gain (in cost units) below which the fit has converged: with residuals in
      units of their noise the cost is a chi-square over 2, and a gain below 1 is evidence of
      nothing.
    starts: (W, nx) the starts' offsets to begin with (a previous Fit's, to continue it); None:
      the records.
    dist: a `mjbatch_jax.distributed.Distributed` whose batch is the windows (set up with
      num_sims_global = W): the windows are sharded over its mesh and the sums psum-ed.
    xtol: the step below which the fit has converged, relative to each number's scale and each
      start's width.
    ftol: the gain below which the fit has converged, relative to the cost.

  Returns:
    A Fit; its theta is the same in every process.

  Raises:
    ValueError: a bad argument, before anything is simulated; a residual that is not finite at
      theta0, or a Jacobian that is not finite where the residual is (no step could be taken:
      never reported as convergence).

  Example:
    result = sysid.fit(problem, data, theta0)
    params = problem.parameters.params(result.theta, 1)
    again = sysid.fit(problem, data, result.theta, starts=result.starts)   # continues it
  """
  checked = _check(problem, theta0, data)
  iterations = v.integer("iterations", iterations, low=1)
  tolerance = v.number("tolerance", tolerance, low=0.0)
  xtol = v.number("xtol", xtol, low=0.0)
  ftol = v.number("ftol", ftol, low=0.0)
  _check_dist(dist)
  options = _options(problem)
  if dist is not None and options.loss != "squared" and options.loss_scale is None:
    raise ValueError(f"problem.loss_scale must be given with dist and loss {options.loss!r} "
                     "(its default, the median window cost, is one process's)")
  model = problem.parameters.sim.model
  offsets0 = _offsets(starts, len(data.starts) if dist is None else dist.num_local,
                      2 * model.nv + model.na)
  shard = PartitionSpec() if dist is None else PartitionSpec(dist.axis)
  whole = PartitionSpec()
  runner = _Runner(problem, checked, data, dist, "step",
                   (whole, shard, whole, whole, whole, whole))
  measure = _Runner(problem, checked, data, dist, "window_costs", (shard, whole))
  theta, offsets = runner.theta(checked.theta0), runner.offsets(offsets0)
  # The robust loss's bend, or 0: re-estimated each iteration from the median window cost.
  tau = 0.0 if options.loss_scale is None else options.loss_scale
  fixed = options.dampings
  ladder_on, mu, nu = False, 0.0, 2.0
  costs, wall, cpu, taken, stopped = [], [], [], [], "iterations"
  for k in range(iterations):
    begin, begin_cpu = time.perf_counter(), time.process_time()
    at = theta
    ladder = _ladder(mu, nu)[0] if ladder_on else np.ones(LADDER)
    theta, offsets, before, after, finite, stats = runner.fn(
      theta, offsets, ladder=ladder, ladder_on=float(ladder_on), tau=tau)
    before, after = float(runner.read(before)), float(runner.read(after))
    best, predicted, probe_gain, probe_size, least, _ = (float(x)
                                                           for x in runner.read(stats))
    wall.append(time.perf_counter() - begin)
    cpu.append(time.process_time() - begin_cpu)
    if not costs:
      if not math.isfinite(before):
        raise ValueError(f"the cost at theta0 is {before}: the residual is not finite there "
                         "(check the residual function and the measurements)")
      costs.append(before)
    if not bool(runner.read(finite)):
      where = "theta0" if k == 0 else f"theta {runner.read(at).tolist()} (iteration {k + 1})"
      raise ValueError(f"the residual's Jacobian is not finite at {where}, where the residual "
                       "is: no step can be taken (check the residual function's derivative, "
                       "e.g. a sqrt or norm at 0)")
    costs.append(after)
    # A step of the fixed dampings (near Gauss-Newton's) that gains this little: at a minimum,
    # up to the finite differences' noise in the gradient.
    small_gain = best >= 0 and not ladder_on and before - after <= max(tolerance, ftol * before)
    if best >= 0:
      index = int(best)
      damping = fixed[index] if index < len(fixed) else float(ladder[index - len(fixed)])
      taken.append(damping)
      if ladder_on:
        rho = (before - after) / predicted if predicted > 0 else 0.0
        mu, nu = damping * max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3), 2.0
        # Back to the fixed set alone once a damping as small as its smallest positive one works.
        ladder_on = mu >= min([d for d in fixed if d > 0], default=0.0) and mu > 0
    else:
      taken.append(math.nan)
      if ladder_on:
        mu, nu = _ladder(mu, nu)[1:]
      else:
        ladder_on, mu, nu = True, 2.0 * max(*fixed, 1e-6), 4.0
    if small_gain or probe_gain <= max(tolerance, ftol * before) or probe_size <= xtol:
      stopped = "converged"
      break
    if best < 0 and least <= xtol:
      stopped = "stalled"
      break
  window, chi2 = measure.fn(theta, offsets)
  window = runner.read(window)
  count = int(checked.residual_size * (len(data.starts) if dist is None else dist.num_sims))
  if options.loss == "squared":
    loss_scale = None
  elif options.loss_scale is None:  # the automatic bend at the fit's theta and starts
    loss_scale = ROBUST_BEND * max(float(np.median(window)), 0.5 * checked.residual_size)
  else:
    loss_scale = options.loss_scale
  return Fit(runner.read(theta), runner.read(offsets), np.array(costs), stopped == "converged",
             np.array(wall), np.array(cpu), stopped, np.array(taken), window,
             _weights(options.loss, window, loss_scale), count, loss_scale,
             float(runner.read(chi2)))


def _weights(loss: str, window: np.ndarray, tau: float | None) -> np.ndarray:
  """Each window's weight: the robust loss's derivative at its cost (1 for "squared")."""
  if loss == "huber" and tau is not None:
    return np.where(window <= tau, 1.0, np.sqrt(tau / np.maximum(window, tau)))
  if loss == "cauchy" and tau is not None:
    return 1.0 / (1.0 + window / tau)
  return np.ones_like(window)


def fitted_starts(problem: Any, data: Windows, result: Any) -> np.ndarray:
  """(W, nstate) the windows' start rows moved by a fit's start offsets: the fitted starts.

  Offsets move positions in the tangent space (free and ball joints through their
  quaternions), velocities and activations by addition: `tangent.StateTangent.retract`.

  Args:
    problem: a Problem, Parameters or Simulator (of the windows' model).
    data: the windows the fit ran on (with dist: this process's).
    result: a Fit, or its starts (W, 2 nv + na).

  Example:
    rows = sysid.fitted_starts(problem, data, result)   # e.g. to simulate a window again
  """
  sim = problem
  if isinstance(sim, Problem):
    sim = sim.parameters
  sim = getattr(sim, "sim", sim)
  model = getattr(sim, "model", None)
  if not isinstance(model, mujoco.MjModel):
    raise ValueError(f"problem must be a sysid.Problem, sysid.Parameters or Simulator, got "
                     f"{type(problem).__name__}")
  if not isinstance(data, Windows):
    raise ValueError(f"data must be sysid.Windows (see sysid.windows), got {type(data).__name__}")
  rows = _finite("data.starts", data.starts)
  tangent = StateTangent.of(model)
  if rows.ndim != 2 or rows.shape[1] != tangent.layout.size:
    raise ValueError(f"data.starts must be (W, nstate={tangent.layout.size}), got shape "
                     f"{rows.shape}")
  offsets = _offsets(result.starts if isinstance(result, Fit) else result, len(rows), tangent.nx)
  return np.asarray(tangent.retract(rows, offsets))
