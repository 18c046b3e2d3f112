"""iLQR's line search: the forward pass at every step size at once, each step size a row.

One `step` call per knot advances all step sizes' trajectories together; the feedback gains
close the loop around the nominal trajectory (in the state's tangent space), and the cheapest
row is the candidate. A row that fails (a MuJoCo error, or MuJoCo reset it) or whose controls
are not finite costs infinity.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from mjbatch_jax import functions as fn
from mjbatch_jax.control import _plumbing as pl
from mjbatch_jax.control import cost as cost_lib
from mjbatch_jax.params import Params
from mjbatch_jax.tangent import StateTangent


def line_search(cost: cost_lib.Cost, w: jax.Array, params: Params, tangent: StateTangent,
                states: jax.Array, us: jax.Array, ks: jax.Array, gains: jax.Array,
                obs0: dict[str, jax.Array], *, step_sizes: Sequence[float], lower: jax.Array,
                upper: jax.Array, nstep: int
                ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """The cheapest of the closed-loop trajectories u_t = us[t] + a k_t + K_t (x_t - states[t]).

  Args:
    cost, w: the (static) cost and its weights (cost.weights).
    params: Params of one simulation.
    tangent: the state's tangent space (x_t - states[t] is its difference).
    states: (T + 1, nstate) the nominal trajectory, from its start states[0].
    us: (T, nu) its controls.
    ks, gains: (T, nu) feedforward and (T, nu, nx) feedback of the backward pass.
    obs0: the observed fields of states[0] (cost.observe), which every row shares.
    step_sizes: the step sizes a, one row each.
    lower, upper: (nu,) the control box: every control is clipped to it.
    nstep: physics steps per knot.

  Returns:
    The cheapest row's states (T + 1, nstate), controls (T, nu), cost (infinite if every row
    failed) and its index in step_sizes.
  """
  alphas = jnp.asarray(step_sizes, states.dtype)
  p_lines = pl.rows(params, len(step_sizes))

  def knot(x, inputs):
    k, gain, x_nom, u_nom = inputs
    u = u_nom + alphas[:, None] * k + tangent.difference(x_nom, x) @ gain.T
    # A backward pass through a blown-up linearisation can give NaN: such a row steps the
    # nominal controls instead and counts as failed, so MuJoCo never sees (nor warns of) NaN.
    finite = jnp.all(jnp.isfinite(u), axis=-1)
    u = jnp.clip(jnp.where(finite[:, None], u, u_nom), lower, upper)
    if cost.observe:
      x, obs, warnings, errors = fn.step(x, u, p_lines, nstep=nstep, observe=cost.observe,
                                         return_warnings=True, return_errors=True)
    else:
      x, warnings, errors = fn.step(x, u, p_lines, nstep=nstep, return_warnings=True,
                                    return_errors=True)
      obs = {}
    return x, (x, u, obs, pl.failed(warnings, errors) | ~finite)

  first = jnp.broadcast_to(states[0], (len(step_sizes), states.shape[-1]))
  _, (xs, new_us, obs, bad) = jax.lax.scan(knot, first, (ks, gains, states[:-1], us))
  xs = jnp.concatenate([first[None], xs]).swapaxes(0, 1)  # (K, T + 1, nstate)
  new_us = new_us.swapaxes(0, 1)
  if cost.observe:
    obs = {k: jnp.concatenate([jnp.broadcast_to(obs0[k], (1, *v.shape[1:])), v]).swapaxes(0, 1)
           for k, v in obs.items()}
  costs = pl.plan_costs(cost, w, xs, new_us, obs)
  costs = jnp.where(jnp.any(bad, axis=0), jnp.inf, costs)
  best = jnp.argmin(costs)
  return xs[best], new_us[best], costs[best], best


__all__ = ["line_search"]
