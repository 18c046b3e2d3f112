"""iLQR over a batch of knots: one transition_fd call linearises the whole plan.

Each iteration:

1. linearise: the T states of the current trajectory are the rows of one `transition_fd` call
   (A_t, B_t for every knot); the cost's Gauss-Newton model comes from the residual's Jacobians
   (w.r.t. the state's tangent and the control) and the norms' gradients and Hessians. A cost
   that observes mjData fields gets its state Jacobians from one `forward` call on every state
   and its nx tangent perturbations (finite differences, float64 rows); one that reads only the
   state row is differentiated by JAX.
2. backward pass: a lax.scan of the Riccati recursion, the control box by a projected-Newton
   box QP at every knot (MuJoCo MPC's boxQP: Newton steps on the free controls, a projected
   line search), clamped controls getting no feedback; Q_uu + mu I regularised.
3. forward pass: a lax.scan of `step` over the knots with every line-search step size a row of
   each call, the feedback gains closing the loop around the nominal trajectory; the cheapest
   row is the candidate. A row that fails (a MuJoCo error, or MuJoCo reset it) costs infinity.

If no step size improves the cost (or the caller's `accept` refuses the cheapest plan), mu grows
(times mu_fail_factor) and the backward pass and line search run again on the same
linearisation, up to max_retries times; an accepted step changes mu by its size (a full step
trusts the model more, a short one less). The solve stops after `iterations`, when an
iteration improves the cost by less than `tolerance` (relative), or when no step improves even
after the retries; ILQRResult.stop says which (ILQR_STOPS), and a solve that found no better
step where the cost had flattened (ILQRSettings.plateau) has converged.
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjbatch_jax import _programs, derivatives
from mjbatch_jax import _validate as v
from mjbatch_jax import functions as fn
from mjbatch_jax.control import _plumbing as pl
from mjbatch_jax.control import cost as cost_lib
from mjbatch_jax.control.backward import LocalModel, backward_pass
from mjbatch_jax.control.line_search import line_search
from mjbatch_jax.control.qp import box_qp
from mjbatch_jax.params import Params
from mjbatch_jax.tangent import StateTangent

ILQR_STOPS = ("iterations", "tolerance", "plateau", "mu_max", "not_finite")
"""Why an iLQR solve stopped, by name: ILQRResult.stop is an index into this tuple, and
ILQRResult.stopped the name it picks (ILQRResult says what each one means)."""
_ITERATIONS, _TOLERANCE, _PLATEAU, _MU_MAX, _NOT_FINITE = range(len(ILQR_STOPS))


class ILQRSettings(NamedTuple):
  """iLQR's options; all static (a change compiles again).

  Attributes:
    step_sizes: the line search's step sizes, each a row of the forward pass's calls.
    mu_init: the regularisation Q_uu + mu I to start from.
    mu_min, mu_max: its range; no improvement at mu_max ends the solve.
    mu_factor: an accepted step of size >= trust_step divides mu by this, one smaller than
      distrust_step multiplies it (contacts make the linearisation good only near the
      trajectory: a short best step says the model overreached).
    trust_step, distrust_step: those step sizes (0 and 0: every accepted step divides mu).
    mu_fail_factor: mu grows by this when no step size improves (or Q_uu + mu I is not
      positive definite) before the backward pass runs again on the same linearisation.
    max_retries: such retries per iteration.
    tolerance: stop when an iteration improves the cost by less than this, relative.
    eps: the finite-difference step of the dynamics (transition_fd) and of the observed
      fields' state Jacobians.
    boxqp_iterations: projected-Newton iterations of each knot's box QP.
    final_gains: linearise once more at the solution so that the returned gains and
      feedforward are about the returned trajectory (else: those of the last backward pass,
      about the trajectory before the last step; cheaper for receding horizon).
    linearization: "knot" (the default): transition_fd's kink-safe rows of each knot's nstep
      physics steps, every perturbed copy a row stepped nstep times, centred differences for
      the positions; a copy that crosses a contact onset, a limit or a cone switch is replaced
      by one on the nominal side. "substeps": MuJoCo's own mjd_transitionFD of every physics
      step (transition_fd's native method: forward differences at eps, whatever they cross,
      skipping the pipeline stages a column leaves alone), chained in JAX into each knot's A
      and B when nstep > 1; at nstep == 1 it is one mjd_transitionFD per knot, MuJoCo MPC's
      linearisation at MuJoCo MPC's cost (until this release nstep == 1 fell back to "knot").
      The planning option: cheaper, not kink-safe through contact, as accurate as forward
      differences are (docs/control.md measures both on the hopper). Not for the RK4
      integrator.
    plateau: when no step improves even after the retries, the solve has converged (stop
      "plateau") if the cost has flattened: the last accepted iteration gained at most
      plateau x |cost|, or the backward pass at mu_min about the final plan (the model's least
      regularised, so its most hopeful, step; kept in the control box) predicts a decrease of
      at most plateau x |cost|. Else the cost was still falling where the model stopped
      helping (stop "mu_max", not converged): the plan returned is still the best found.
  """

  step_sizes: tuple[float, ...] = tuple(0.5**k for k in range(8))
  mu_init: float = 1e-3
  mu_min: float = 1e-6
  mu_max: float = 1e8
  mu_factor: float = 4.0
  trust_step: float = 0.5
  distrust_step: float = 0.125
  mu_fail_factor: float = 10.0
  max_retries: int = 8
  tolerance: float = 1e-6
  eps: float = 1e-6
  boxqp_iterations: int = 10
  final_gains: bool = True
  linearization: str = "knot"
  plateau: float = 1e-3


class ILQRResult(NamedTuple):
  """What ilqr returns.

  Attributes:
    ctrls: (T, nu) the optimised plan.
    states: (T + 1, nstate) its trajectory from start.
    cost: its cost.
    costs: (iterations + 1,) the cost before the first iteration and after each; NaN after the
      solve stopped.
    feedforward: (T, nu) the last backward pass's control changes k_t.
    gains: (T, nu, nx) feedback gains K_t: u_t = ctrls[t] + K_t (x_t - states[t]) (tangent
      difference, as transition_fd's x) tracks the plan.
    iterations: how many iterations ran.
    mu: the regularisation at the end (to warm-start the next solve).
    converged: whether it stopped at a minimum: on `tolerance` or at a plateau (see stop).
    stop: int32, why it stopped, an index into ILQR_STOPS (`stopped` gives the name):
      0 "iterations": it ran all of them; 1 "tolerance": an accepted iteration gained less
      than settings.tolerance (relative); 2 "plateau": no step improved, even after the
      retries of mu, where the cost had flattened (settings.plateau); 3 "mu_max": no step
      improved while the cost was still falling (not converged, but no failure either: the
      plan is the best found, e.g. where contacts make the model mislead; the next solve
      from it may go on); 4 "not_finite": the initial cost was not finite (under jit; outside
      jit ilqr refuses such a plan).
  """

  ctrls: jax.Array
  states: jax.Array
  cost: jax.Array
  costs: jax.Array
  feedforward: jax.Array
  gains: jax.Array
  iterations: jax.Array
  mu: jax.Array
  converged: jax.Array
  stop: jax.Array

  @property
  def stopped(self) -> str:
    """Why the solve stopped, by name (ILQR_STOPS[stop]), of a concrete result of one solve."""
    code = np.asarray(self.stop)
    if code.ndim:
      raise ValueError(f"stopped names one solve's stop, got stop of shape {code.shape}: index "
                       "the result first (ILQR_STOPS[int(result.stop[i])])")
    return ILQR_STOPS[int(code)]


def ilqr(
  cost: cost_lib.Cost,
  params: Params,
  start: Any,
  ctrls: Any,
  *,
  nstep: int = 1,
  iterations: int = 50,
  bounds: Any = None,
  mu: Any = None,
  settings: ILQRSettings | None = None,
  verbose: bool = False,
  accept: Callable[[jax.Array, jax.Array], Any] | None = None,
) -> ILQRResult:
  """Optimise the plan ctrls from state start by iLQR (see the module docstring).

  Knot t applies ctrls[t] for nstep physics steps; the cost (residual form, see control.Cost) is
  summed over the T + 1 states of the trajectory. Pure and jit-able; outside jit it checks its
  inputs first and refuses a cost that is not finite on the initial plan.

  Args:
    cost: a control.Cost.
    params: Params of one simulation (sim.params(1, ...)): the model the plan is for.
    start: (nstate,) the state row the plan starts from.
    ctrls: (T, nu) the initial plan (warm start: control.shift(previous.ctrls)).
    nstep: physics steps per knot.
    iterations: most iterations.
    bounds: (lower, upper) of the controls, numbers or (nu,) arrays; default: the model's
      ctrlrange where it is limited.
    mu: the regularisation to start from, a finite number >= 0 (default settings.mu_init); a
      previous result's mu warm-starts a receding-horizon solve (a traced one is checked by its
      shape only).
    settings: ILQRSettings (default: ILQRSettings()).
    verbose: print one line per iteration (jax.debug.print).
    accept: a guard the cost cannot express, or None: accept(states (T + 1, nstate), ctrls
      (T, nu)) -> a boolean scalar, traced (JAX operations, or jax.pure_callback for host
      code). It is asked only about a step's cheapest plan; one it refuses counts as no
      improvement (mu grows, the backward pass and line search run again on the same
      linearisation), so a guarded solve pays no linearisation for a refused step. A static
      argument: pass the same function object to reuse the compilation.

  Returns:
    ILQRResult.

  Example:
    cost = control.Cost(lambda x, u, obs, t: jnp.concatenate([x[qpos] - goal, u]),
                        (control.Term(nq, weight=1.0), control.Term(nu, weight=0.01)))
    result = control.ilqr(cost, sim.params(1), start, jnp.zeros((100, nu)), nstep=4)
    result.ctrls, result.states, result.costs, result.gains
  """
  cost, w, start, ctrls, lo, hi, nstep, settings = _prepare(cost, params, start, ctrls, nstep,
                                                            bounds, settings)
  iterations = pl.check_count("iterations", iterations, low=0)
  verbose = v.flag("verbose", verbose)
  mu = settings.mu_init if mu is None else pl.check_scalar("mu", mu, low=0.0)
  mu0 = jnp.asarray(mu, start.dtype)
  if accept is not None:
    _check_accept(accept, start, ctrls)
  if pl.is_concrete(start, ctrls, params, w):
    _check_initial(cost, w, params, start, ctrls, nstep)
  return _solve(cost, w, params, start, ctrls, lo, hi, mu0, nstep, iterations, settings,
                verbose, accept, None)


def ilqr_gains(
  cost: cost_lib.Cost,
  params: Params,
  start: Any,
  ctrls: Any,
  mu: Any,
  *,
  nstep: int = 1,
  bounds: Any = None,
  settings: ILQRSettings | None = None,
) -> tuple[jax.Array, jax.Array]:
  """The feedback about the plan ctrls at several regularisations, from one linearisation.

  Row m is what ilqr(cost, params, start, ctrls, iterations=0, mu=mu[m]) returns as feedforward
  and gains (with settings.final_gains, the default; here they are computed either way), but the
  plan is simulated and linearised (transition_fd, the cost's Jacobians) once and only the
  backward pass runs per mu: choosing a tracking controller's mu by how its closed loop behaves
  costs one linearisation, not one per candidate. Each mu is clipped to [settings.mu_min,
  settings.mu_max], as ilqr does. Pure and jit-able; outside jit it checks its inputs first, as
  ilqr does.

  Args:
    cost, params, start, ctrls, nstep, bounds, settings: as ilqr's.
    mu: (M,) the regularisations (Q_uu + mu I), each finite and >= 0.

  Returns:
    feedforward (M, T, nu) and gains (M, T, nu, nx): u_t = ctrls[t] + gains[m, t] (x_t - x*_t)
    (tangent difference) tracks the plan's trajectory x* with row m's regularisation.

  Example:
    ks, gains = control.ilqr_gains(cost, sim.params(1), start, result.ctrls, [1.0, 1e2, 1e4],
                                   nstep=4)
  """
  cost, w, start, ctrls, lo, hi, nstep, settings = _prepare(cost, params, start, ctrls, nstep,
                                                            bounds, settings)
  want = "mu must be a non-empty 1-D sequence of numbers"
  try:
    mus = v.array("mu", mu)
  except ValueError:
    raise ValueError(f"{want}, got {v.shown(mu)}") from None
  if mus.ndim != 1 or mus.shape[0] == 0:
    raise ValueError(f"{want}, got shape {tuple(mus.shape)}")
  mus = mus.astype(start.dtype)
  if pl.is_concrete(mus) and not bool(jnp.all(jnp.isfinite(mus) & (mus >= 0))):
    raise ValueError(f"mu must be finite and >= 0, got {np.asarray(mus)}")
  if pl.is_concrete(start, ctrls, params, w):
    _check_initial(cost, w, params, start, ctrls, nstep)
  mus = jnp.clip(mus, settings.mu_min, settings.mu_max)
  result = _solve(cost, w, params, start, ctrls, lo, hi, mus[0], nstep, 0, settings, False, None,
                  mus)
  return result.feedforward, result.gains


def _prepare(cost, params, start, ctrls, nstep, bounds, settings):
  """ilqr's and ilqr_gains' checks of their shared arguments, in their types for _solve."""
  cost = pl.check_cost(cost)
  spec = pl.check_params_rows(params, (1,))
  nstep = pl.check_count("nstep", nstep)
  # A NaN or inf start or plan has no trajectory to improve: refused by name where known.
  start = pl.check_start(start, spec, finite=True)
  ctrls = pl.check_plan("ctrls", ctrls, spec.nu, finite=True).astype(start.dtype)
  lo, hi = pl.check_bounds(bounds, spec)
  settings = _check_settings(ILQRSettings() if settings is None else settings)
  if settings.linearization == "substeps" and spec.model_info.integrator == int(
      mujoco.mjtIntegrator.mjINT_RK4):
    raise ValueError("settings.linearization='substeps' runs mjd_transitionFD, which does not "
                     "support the RK4 integrator: use 'knot'")
  pl.check_residual(cost, spec, start.dtype)
  w = cost_lib.weights(cost.terms, ctrls.shape[0])
  return (cost_lib.static(cost), w, start, ctrls, lo.astype(start.dtype), hi.astype(start.dtype),
          nstep, settings)


def shift(ctrls: Any, knots: int = 1) -> jax.Array:
  """ctrls (..., T, nu) moved `knots` (an int >= 0) earlier, the last control held: a
  receding-horizon warm start. Beyond the horizon every control is the last one."""
  ctrls = v.array("ctrls", ctrls, shape=(..., None, None))
  knots = v.integer("knots", knots, low=0)
  horizon = ctrls.shape[-2]
  if horizon < 1:
    raise ValueError(f"ctrls must hold T >= 1 controls (..., T, nu), got shape {ctrls.shape}")
  if knots == 0:
    return ctrls
  knots = min(knots, horizon)  # more is the same plan: the last control throughout
  tail = jnp.repeat(ctrls[..., -1:, :], knots, axis=-2)
  return jnp.concatenate([ctrls[..., knots:, :], tail], axis=-2)


def _check_settings(settings: Any) -> ILQRSettings:
  if not isinstance(settings, ILQRSettings):
    raise ValueError(f"settings must be control.ILQRSettings, got {type(settings).__name__}")
  for name in ILQRSettings._fields:
    v.static(f"settings.{name}", getattr(settings, name))  # static: hashed by jit
  steps = settings.step_sizes
  if (isinstance(steps, str) or not isinstance(steps, Sequence | np.ndarray)
      or np.ndim(steps) != 1 or not len(steps)):  # a 0-d array has no len()
    raise ValueError("settings.step_sizes must be a non-empty sequence of finite numbers > 0, "
                     f"got {v.shown(steps)}")
  steps = tuple(v.number(f"settings.step_sizes[{i}]", a, low=0.0, low_open=True)
                for i, a in enumerate(steps))
  mu_init = v.number("settings.mu_init", settings.mu_init)
  mu_min = v.number("settings.mu_min", settings.mu_min)
  mu_max = v.number("settings.mu_max", settings.mu_max, allow_inf=True)
  if not 0 <= mu_min <= mu_init <= mu_max:
    raise ValueError(f"settings need 0 <= mu_min <= mu_init <= mu_max, got {mu_min}, "
                     f"{mu_init}, {mu_max}")
  return settings._replace(
    step_sizes=steps, mu_init=mu_init, mu_min=mu_min, mu_max=mu_max,
    mu_factor=v.number("settings.mu_factor", settings.mu_factor, low=1.0),
    trust_step=v.number("settings.trust_step", settings.trust_step, low=0.0),
    distrust_step=v.number("settings.distrust_step", settings.distrust_step, low=0.0),
    mu_fail_factor=v.number("settings.mu_fail_factor", settings.mu_fail_factor, low=1.0,
                            low_open=True),
    max_retries=v.integer("settings.max_retries", settings.max_retries, low=0),
    tolerance=v.number("settings.tolerance", settings.tolerance, low=0.0),
    eps=v.number("settings.eps", settings.eps, low=0.0, low_open=True),
    boxqp_iterations=v.integer("settings.boxqp_iterations", settings.boxqp_iterations, low=1),
    final_gains=v.flag("settings.final_gains", settings.final_gains),
    linearization=v.one_of("settings.linearization", settings.linearization,
                           ("knot", "substeps")),
    plateau=v.number("settings.plateau", settings.plateau, low=0.0),
  )


def _check_accept(accept: Any, start: jax.Array, ctrls: jax.Array) -> None:
  """accept is a function of (states, ctrls) that returns one boolean (traced, not run)."""
  if not callable(accept):
    raise ValueError(f"accept must be a function (states, ctrls) -> bool, got {v.shown(accept)}")
  states = jax.ShapeDtypeStruct((ctrls.shape[0] + 1, start.shape[0]), start.dtype)
  try:
    out = jax.eval_shape(accept, states, jax.ShapeDtypeStruct(ctrls.shape, ctrls.dtype))
  except Exception as e:
    raise ValueError(f"accept(states {states.shape}, ctrls {ctrls.shape}) failed: "
                     f"{type(e).__name__}: {e}") from e
  if not (isinstance(out, jax.ShapeDtypeStruct) and out.shape == () and out.dtype == jnp.bool_):
    raise ValueError("accept(states, ctrls) must return one boolean (a scalar of dtype bool), "
                     f"got {out}")


def _check_initial(cost, w, params, start, ctrls, nstep) -> None:
  """ValueError if the initial plan diverges or its cost is not finite (eager calls only)."""
  one = pl.rows(params, 1)
  states, obs, bad = _simulate(cost, one, start, ctrls, nstep)
  if bool(bad):
    raise ValueError("the initial plan fails (a MuJoCo error, or MuJoCo reset the simulation): "
                     "ilqr needs an initial plan whose trajectory is finite; try smaller controls")
  r = pl.plan_residuals(cost, states, ctrls, obs)
  where = pl.first_bad_knot(cost, w, r)
  if where is not None:
    raise ValueError(f"the cost of the initial plan is not finite: {where}; Cost.residual must "
                     "be finite on every state of the initial plan")


# ------------------------------------------------------------------------------------- solve


def _dynamics(params: Params, tangent: StateTangent, states: jax.Array, us: jax.Array,
              nstep: int, settings: ILQRSettings) -> tuple[jax.Array, jax.Array]:
  """A_t (T, nx, nx), B_t (T, nx, nu) of every knot of the trajectory states, us."""
  horizon, nx = us.shape[0], tangent.nx
  if settings.linearization == "knot":
    a, b = derivatives.transition_fd(states[:-1], us, pl.rows(params, horizon), eps=settings.eps,
                                     nstep=nstep)
    return a, b
  if nstep == 1:  # a knot is one physics step: its own mjd_transitionFD, nothing to chain
    a, b = derivatives.transition_fd(states[:-1], us, pl.rows(params, horizon), eps=settings.eps,
                                     method="native")
    return a, b
  # Every physics step's Jacobians (one rollout call records the substeps), chained.
  held = jnp.repeat(us, nstep, axis=0)
  subs, _ = fn.rollout(states[:1], held[None], pl.rows(params, 1))
  before = jnp.concatenate([states[:1], subs[0, :-1]])
  a, b = derivatives.transition_fd(before, held, pl.rows(params, horizon * nstep),
                                   eps=settings.eps, method="native")
  a = a.reshape(horizon, nstep, nx, nx).swapaxes(0, 1)
  b = b.reshape(horizon, nstep, nx, us.shape[1]).swapaxes(0, 1)

  def chain(carry, step):
    a_knot, b_knot = carry
    a_s, b_s = step
    return (a_s @ a_knot, a_s @ b_knot + b_s), None

  start = (jnp.broadcast_to(jnp.eye(nx, dtype=a.dtype), a.shape[1:]), jnp.zeros_like(b[0]))
  return jax.lax.scan(chain, start, (a, b))[0]


def _linearize(cost: cost_lib.Cost, w: jax.Array, params: Params, tangent: StateTangent,
               states: jax.Array, us: jax.Array, nstep: int, settings: ILQRSettings
               ) -> LocalModel:
  """The local model of the trajectory states (T + 1, nstate) of the controls us (T, nu)."""
  a, b = _dynamics(params, tangent, states, us, nstep, settings)
  horizon, nx, nstate, nu = us.shape[0], tangent.nx, states.shape[-1], us.shape[-1]
  knots = jnp.arange(horizon + 1)
  held = jnp.concatenate([us, us[-1:]])
  if cost.observe:
    # Every state and its nx tangent perturbations: one forward call observes them all.
    moved = tangent.retract(states[:, None], settings.eps * jnp.eye(nx, dtype=states.dtype))
    rows = jnp.concatenate([states[:, None], moved], axis=1)  # (T + 1, 1 + nx, nstate)
    obs = fn.forward(rows.reshape(-1, nstate), pl.rows(params, (horizon + 1) * (1 + nx)),
                     cost.observe)
    obs = {k: v.reshape(horizon + 1, 1 + nx, *v.shape[1:]) for k, v in obs.items()}
    r = pl.residuals(cost, rows, jnp.broadcast_to(held[:, None], (horizon + 1, 1 + nx, nu)),
                     obs, knots[:, None])
    r0 = r[:, 0]
    j_x = ((r[:, 1:] - r[:, :1]) / settings.eps).swapaxes(1, 2)  # (T + 1, nr, nx)
    obs0 = {k: v[:, 0] for k, v in obs.items()}
    j_u = jax.vmap(jax.jacfwd(cost.residual, argnums=1))(states, held, obs0, knots)
  else:
    def local(x, u, t):
      return lambda dx, du: cost.residual(tangent.retract(x, dx), u + du, {}, t)

    def jacobians(x, u, t):
      f = local(x, u, t)
      zero_x, zero_u = jnp.zeros(nx, x.dtype), jnp.zeros_like(u)
      return (f(zero_x, zero_u), *jax.jacfwd(f, argnums=(0, 1))(zero_x, zero_u))

    r0, j_x, j_u = jax.vmap(jacobians)(states, held, knots)

  def knot_cost(r, w_t):
    return cost_lib.knot_cost(cost.terms, r, w_t)

  g_r = jax.vmap(jax.grad(knot_cost))(r0, w)
  h_r = jax.vmap(jax.hessian(knot_cost))(r0, w)
  return LocalModel(
    a, b,
    l_x=jnp.einsum("tri,tr->ti", j_x, g_r), l_u=jnp.einsum("tri,tr->ti", j_u, g_r),
    l_xx=jnp.einsum("tri,trs,tsj->tij", j_x, h_r, j_x),
    l_ux=jnp.einsum("tri,trs,tsj->tij", j_u, h_r, j_x),
    l_uu=jnp.einsum("tri,trs,tsj->tij", j_u, h_r, j_u),
  )


class _Carry(NamedTuple):
  """The solve's state between iterations."""

  states: jax.Array
  us: jax.Array
  value: jax.Array
  mu: jax.Array
  i: jax.Array
  done: jax.Array
  converged: jax.Array
  history: jax.Array
  ks: jax.Array
  gains: jax.Array
  stop: jax.Array


class _Try(NamedTuple):
  """One backward pass and line search of an iteration, and whether its step was accepted."""

  mu: jax.Array
  tries: jax.Array
  accepted: jax.Array
  states: jax.Array
  us: jax.Array
  value: jax.Array
  alpha: jax.Array
  ks: jax.Array
  gains: jax.Array


def _solve_impl(cost, w, params, start, ctrls, lo, hi, mu0, nstep, iterations, settings, verbose,
                accept=None, gains_mu=None):
  """The solve; with gains_mu (M,), the final feedforward and gains are (M, ...): a backward
  pass at each of those mu about the one final linearisation."""
  horizon, nu = ctrls.shape
  tangent = StateTangent.of(params.spec.model_info.model)
  alphas = jnp.asarray(settings.step_sizes, start.dtype)
  p_one = pl.rows(params, 1)

  def linearize(states, us) -> LocalModel:
    return _linearize(cost, w, params, tangent, states, us, nstep, settings)

  def backward(model: LocalModel, us, mu):
    return backward_pass(model, us, mu, lo, hi, settings.boxqp_iterations)

  states, obs, bad = pl.simulate(cost, p_one, start, ctrls, nstep)
  obs0 = {k: v[0] for k, v in obs.items()}  # of the start, which every trajectory shares
  value = pl.plan_costs(cost, w, states, ctrls, obs)
  value = jnp.where(bad, jnp.inf, value)
  history = jnp.full(iterations + 1, jnp.nan, start.dtype).at[0].set(value)

  def iteration(c: _Carry) -> _Carry:
    model = linearize(c.states, c.us)

    def attempt(t: _Try) -> _Try:
      ks, gains, _, ok = backward(model, c.us, t.mu)
      xs, us, value, best = line_search(cost, w, params, tangent, c.states, c.us, ks, gains,
                                        obs0, step_sizes=settings.step_sizes, lower=lo, upper=hi,
                                        nstep=nstep)
      accepted = ok & (value < c.value)
      if accept is not None:  # asked only about a cheaper plan
        guard = accept
        accepted = jax.lax.cond(accepted, lambda: jnp.asarray(guard(xs, us), bool),
                                lambda: jnp.asarray(False))
      mu = jnp.where(accepted, t.mu, t.mu * settings.mu_fail_factor)
      return _Try(mu, t.tries + 1, accepted, xs, us, value, alphas[best], ks, gains)

    def again(t: _Try) -> jax.Array:
      return ~t.accepted & (t.tries <= settings.max_retries) & (t.mu <= settings.mu_max)

    t = jax.lax.while_loop(again, attempt, _Try(c.mu, jnp.asarray(0), jnp.asarray(False),
                                                c.states, c.us, c.value,
                                                jnp.asarray(0.0, start.dtype), c.ks, c.gains))
    improvement = c.value - t.value
    converged = t.accepted & (improvement <= settings.tolerance * jnp.abs(t.value))

    def flattened() -> jax.Array:
      # No step improved: a plateau if the last accepted iteration gained little, or if the
      # model's least regularised step (the most it promises) gains little.
      small = settings.plateau * jnp.abs(c.value)
      gained = jnp.where(c.i >= 1, c.history[jnp.maximum(c.i - 1, 0)] - c.value, jnp.inf)
      _, _, dv, ok = backward(model, c.us, jnp.asarray(settings.mu_min, start.dtype))
      promised = jnp.where(ok, -(dv[0] + dv[1]), jnp.inf)
      return (gained <= small) | (promised <= small)

    plateau = jax.lax.cond(t.accepted, lambda: jnp.asarray(False), flattened)
    stop = jnp.where(converged, _TOLERANCE,
                     jnp.where(t.accepted, _ITERATIONS, jnp.where(plateau, _PLATEAU, _MU_MAX)))
    mu = jnp.where(t.alpha >= settings.trust_step, t.mu / settings.mu_factor,
                   jnp.where(t.alpha < settings.distrust_step, t.mu * settings.mu_factor, t.mu))
    mu = jnp.clip(jnp.where(t.accepted, mu, t.mu), settings.mu_min, settings.mu_max)
    states = jnp.where(t.accepted, t.states, c.states)
    us = jnp.where(t.accepted, t.us, c.us)
    value = jnp.where(t.accepted, t.value, c.value)
    if verbose:
      jax.debug.print("iLQR iteration {i}: cost {v:.6g}  step {a:.3g}  mu {m:.2g}  "
                      "(accepted {acc})", i=c.i + 1, v=value, a=t.alpha, m=mu, acc=t.accepted)
    return _Carry(states, us, value, mu, c.i + 1, ~t.accepted | converged, converged | plateau,
                  c.history.at[c.i + 1].set(value), t.ks, t.gains,
                  jnp.asarray(stop, jnp.int32))

  def running(c: _Carry) -> jax.Array:
    return ~c.done & (c.i < iterations)

  c = _Carry(states, ctrls, value, jnp.clip(mu0, settings.mu_min, settings.mu_max),
             jnp.asarray(0), ~jnp.isfinite(value), jnp.asarray(False), history,
             jnp.zeros((horizon, nu), start.dtype), jnp.zeros((horizon, nu, tangent.nx),
                                                              start.dtype),
             jnp.where(jnp.isfinite(value), _ITERATIONS, _NOT_FINITE).astype(jnp.int32))
  c = jax.lax.while_loop(running, iteration, c)
  ks, gains = c.ks, c.gains
  if gains_mu is not None:
    model = linearize(c.states, c.us)
    # One backward pass per mu, unrolled rather than vmapped: each is then the computation
    # ilqr(..., iterations=0, mu=m) runs, to the bit (a vmapped pass sums in another order).
    each = [backward(model, c.us, gains_mu[m])[:2] for m in range(gains_mu.shape[0])]
    ks, gains = jnp.stack([k for k, _ in each]), jnp.stack([gain for _, gain in each])
  elif settings.final_gains:
    ks, gains, _, _ = backward(linearize(c.states, c.us), c.us, c.mu)
  return ILQRResult(c.us, c.states, c.value, c.history, ks, gains, c.i, c.mu, c.converged,
                    c.stop)


# The programs of the solve and of the initial plan's check, per cost (a user's function) and
# static settings: bounded, so that a loop of solves with fresh costs does not grow.
_solve = _programs.BoundedJit(_solve_impl, static_argnums=(0, 8, 9, 10, 11, 12))
_simulate = _programs.BoundedJit(pl.simulate, static_argnums=(0, 4))


__all__ = ["ILQR_STOPS", "ILQRResult", "ILQRSettings", "box_qp", "ilqr", "ilqr_gains", "shift"]
