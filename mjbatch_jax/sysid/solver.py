"""The solver: Levenberg-Marquardt over theta and the windows' starts, the starts eliminated
window by window (the Schur complement), on one process or a Distributed's mesh."""

import math
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from mjbatch_jax import _validate as v
from mjbatch_jax.functions import rollout
from mjbatch_jax.sysid.data import Windows
from mjbatch_jax.sysid.problem import Fit, Problem, _check, _Checked, _offsets, _options
from mjbatch_jax.tangent import StateTangent


def _box_solve(h: jax.Array, g: jax.Array, low: jax.Array, high: jax.Array,
               passes: int) -> jax.Array:
  """argmin 0.5 d'hd + g'd over low <= d <= high (a box around 0), by active sets: the numbers
  at a bound that the gradient pushes outward stay there, the others are solved for."""
  d = jnp.clip(jnp.linalg.solve(h, -g), low, high)
  for _ in range(passes):
    grad = h @ d + g
    held = ((d <= low) & (grad > 0)) | ((d >= high) & (grad < 0))
    fixed = jnp.where(held, d, 0.0)
    free = ~held
    system = jnp.where(free[:, None] & free[None, :], h, 0.0) + jnp.diag(held.astype(h.dtype))
    d = jnp.clip(jnp.linalg.solve(system, jnp.where(free, -(g + h @ fixed), fixed)), low, high)
  return d


class _Program:
  """The jitted pieces of a fit over windows (sharded over a mesh axis when axis is given).

  Each method takes c, the checked problem's arrays (_Checked.arrays), first.
  """

  def __init__(self, problem: Problem, fit_starts: bool, bounded: bool, axis: str | None):
    self.problem, self.fit_starts, self.axis = problem, fit_starts, axis
    self.options = _options(problem)
    self.passes = 8 if bounded else 0  # of the boxed solve
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
                  data: Windows) -> tuple[jax.Array, jax.Array]:
    """J'J of theta after eliminating the starts (their priors included), summed; and the
    residuals' sum of squares and the starts' Jacobian's (to tell whether they are finite)."""
    r, a, b = self.linearize(c, theta, offsets, data)
    info = jnp.einsum("wpi,wpj->ij", a, a)
    squares = self.total(jnp.stack([jnp.sum(r**2), jnp.sum(b**2)]))
    if self.fit_starts:
      cross = jnp.einsum("wpi,wpj->wij", a, b)
      blocks = jnp.einsum("wpi,wpj->wij", b, b) + jnp.eye(self.nx)
      info = info - jnp.einsum("wij,wkj->ik", cross, jnp.linalg.solve(
        blocks, jnp.swapaxes(cross, 1, 2)).swapaxes(1, 2))
    return self.total(info), squares

  def costs(self, c: dict, thetas: jax.Array, offsets: jax.Array, data: Windows) -> jax.Array:
    """(K,) the costs of K candidates: thetas (K, size), offsets (K, W, nx), all K x W
    simulations rows of one call."""
    k, count = thetas.shape[0], data.starts.shape[0]
    rows = (self.moved(data.starts, offsets) if self.fit_starts
            else jnp.broadcast_to(data.starts, (k, *data.starts.shape)))
    tile = lambda x: jnp.broadcast_to(x, (k, *x.shape)).reshape(k * x.shape[0], *x.shape[1:])  # noqa: E731
    r = self.residuals(jnp.repeat(thetas, count, axis=0), rows.reshape(k * count, -1),
                       tile(data.ctrls), jax.tree.map(tile, data.measured))
    data_part = jnp.sum(r.reshape(k, -1) ** 2, axis=1)
    if self.fit_starts:
      data_part = data_part + jnp.sum((offsets / c["start_width"]) ** 2, axis=(1, 2))
    prior = (thetas - c["mean"]) / c["scale"]
    return 0.5 * (self.total(data_part) + jnp.sum(c["precision"] * prior**2, axis=1))

  def step(self, c: dict, theta: jax.Array, offsets: jax.Array, data: Windows) -> tuple:
    """One Levenberg-Marquardt iteration: (theta, offsets, cost before, cost after, whether
    the normal equations are finite)."""
    scale, precision = c["scale"], c["precision"]
    n, nx = theta.size, self.nx
    r, a, b = self.linearize(c, theta, offsets, data)
    prior = (theta - c["mean"]) / scale
    # Normal equations in scale units, where each prior's curvature is its precision, so that
    # Levenberg's damping means the same for every number. A window's start enters only its own
    # residuals: its nx x nx block is eliminated where the window is simulated (the Schur
    # complement), and what crosses processes is the n x n system.
    eye = jnp.eye(nx, dtype=theta.dtype)
    if self.fit_starts:
      start_prior = offsets / c["start_width"]
      cross = jnp.einsum("wpi,wpj->wij", a, b)  # (W, n, nx)
      blocks = jnp.einsum("wpi,wpj->wij", b, b) + eye  # (W, nx, nx)
      grad_starts = jnp.einsum("wpj,wp->wj", b, r) + start_prior
      start_terms = jnp.stack([jnp.sum(jnp.trace(blocks, axis1=1, axis2=2)),
                               jnp.sum(start_prior**2)])
    else:
      start_terms = jnp.zeros(2, theta.dtype)
    count = self.total(jnp.asarray(data.starts.shape[0], theta.dtype)) if self.fit_starts else 0
    sums = self.total(jnp.concatenate([jnp.einsum("wpi,wpj->ij", a, a).ravel(),
                                       jnp.einsum("wpi,wp->i", a, r),
                                       jnp.sum(r**2)[None], start_terms]))
    hessian = sums[: n * n].reshape(n, n) + jnp.diag(precision)
    grad = sums[n * n: n * n + n] + precision * prior
    before = 0.5 * (sums[n * n + n] + sums[-1] + jnp.sum(precision * prior**2))
    mean = (jnp.trace(hessian) + sums[-2]) / (n + count * nx)
    low, high = (c["low"] - theta) / scale, (c["high"] - theta) / scale
    if self.fit_starts:
      right = jnp.concatenate([jnp.swapaxes(cross, 1, 2), grad_starts[..., None]], axis=-1)

    def damped(damping: jax.Array) -> tuple[jax.Array, jax.Array]:
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
      # At most max_step scales a number and step: beyond it the linearisation means little.
      # (A box around 0 keeps the shortened step inside the bounds.)
      factor = jnp.minimum(1.0, self.options.max_step / jnp.max(jnp.abs(direction)))
      return direction * factor * scale, starts * factor * (
        c["start_width"] if self.fit_starts else 1.0)

    # Every damping's step is tried as rows of one rollout call; the best is taken if it helps.
    steps = jax.vmap(damped)(jnp.asarray(self.options.dampings, theta.dtype))
    thetas = jnp.clip(theta + steps[0], c["low"], c["high"])
    tried = jnp.nan_to_num(self.costs(c, thetas, offsets + steps[1], data), nan=jnp.inf)
    best = jnp.argmin(tried)
    better = tried[best] < before
    theta = jnp.where(better, thetas[best], theta)
    offsets = jnp.where(better, offsets + steps[1][best], offsets)
    # A non-finite Jacobian makes every step NaN, which no damping helps: said, not converged.
    finite = jnp.all(jnp.isfinite(sums))
    return theta, offsets, before, jnp.where(better, tried[best], before), finite


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
    self.consts = {k: jnp.asarray(x) for k, x in checked.arrays().items()}
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

  def fn(self, theta: Any, offsets: Any) -> Any:
    return self.compiled(self.consts, theta, offsets, self.data)

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
        tolerance: float | np.floating = 1.0, starts: Any = None, dist: Any = None) -> Fit:
  """Levenberg-Marquardt from theta0 on the windows; the fit, its costs and its timings.

  Each iteration is one jitted function: the Jacobian (one custom call per knot, every column
  of every window a row), the normal equations with the starts eliminated, the steps of every
  damping and their costs (one more call). It stops when a step lowers the cost by at most
  `tolerance` (none of the dampings' steps lowering it counts), or after `iterations`.

  Args:
    problem: what to fit.
    data: the windows (with dist: all windows, or this process's).
    theta0: (size,) the starting guess; None: the model's values (parameters.initial).
    iterations: the most iterations.
    tolerance: with residuals in units of their noise the cost is a chi-square over 2, and a
      gain below 1 is evidence of nothing.
    starts: (W, nx) the starts' offsets to begin with (a previous Fit's); None: the records.
    dist: a `mjbatch_jax.distributed.Distributed` whose batch is the windows (set up with
      num_sims_global = W): the windows are sharded over its mesh and the sums psum-ed.

  Returns:
    A Fit; its theta is the same in every process.

  Raises:
    ValueError: a bad argument, before anything is simulated; a residual that is not finite at
      theta0, or a Jacobian that is not finite where the residual is (no step could be taken:
      never reported as convergence).

  Example:
    result = sysid.fit(problem, data, theta0)
    params = problem.parameters.params(result.theta, 1)
  """
  checked = _check(problem, theta0, data)
  iterations = v.integer("iterations", iterations, low=1)
  tolerance = v.number("tolerance", tolerance, low=0.0)
  _check_dist(dist)
  model = problem.parameters.sim.model
  offsets0 = _offsets(starts, len(data.starts) if dist is None else dist.num_local,
                      2 * model.nv + model.na)
  shard = PartitionSpec() if dist is None else PartitionSpec(dist.axis)
  whole = PartitionSpec()
  runner = _Runner(problem, checked, data, dist, "step", (whole, shard, whole, whole, whole))
  theta, offsets = runner.theta(checked.theta0), runner.offsets(offsets0)
  costs, wall, cpu, converged = [], [], [], False
  for k in range(iterations):
    begin, begin_cpu = time.perf_counter(), time.process_time()
    at = theta
    theta, offsets, before, after, finite = runner.fn(theta, offsets)
    before, after = float(runner.read(before)), float(runner.read(after))
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
    if before - after <= tolerance:
      converged = True
      break
  return Fit(runner.read(theta), runner.read(offsets), np.array(costs), converged,
             np.array(wall), np.array(cpu))
