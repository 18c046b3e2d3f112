"""Swing up a double pole on a cart by iLQR, linearised by one batched transition_fd per iteration.

  python examples/cartpole_swingup.py [--out plan.npz] [--iterations 150]

Both poles start hanging; the plan is T = 100 knots of 4 physics steps (4 s), the force is boxed
to the actuator's ctrlrange. Each iLQR iteration is one jitted function:

- linearise: the T states of the current trajectory are the N rows of a single
  `mjbatch_jax.transition_fd` call, so all T pairs (A_t, B_t) come from one custom call;
- backward pass: a lax.scan of the Riccati recursion. The box is handled by the projection
  trick: where the feedforward would leave the box it is clipped to the bound and that row of
  the feedback gain is zeroed (with one control this is the exact local solution of the boxed
  QP), and the value function is updated with the clipped terms;
- forward pass: a lax.scan of `mjbatch_jax.step` over the knots, with 8 line-search step sizes
  as the 8 rows of each call, so the line search costs no more calls than one rollout.

It prints the cost per iteration and the final tilt of each pole from upright, and saves the plan
(controls, states, gains) to the .npz given by --out (default: cartpole_swingup.npz in the
system's temporary directory).
"""

import argparse
import os
import tempfile
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import mjbatch_jax  # noqa: E402

# Poles point up at qpos = 0; the second hinge is relative to the first pole.
DOUBLE_CARTPOLE = """
<mujoco>
  <option timestep="0.01" integrator="implicitfast"/>
  <worldbody>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0" damping="0.1"/>
      <geom type="box" size=".2 .1 .05" mass="1" contype="0" conaffinity="0"/>
      <body name="pole1">
        <joint name="hinge1" axis="0 1 0" damping="0.002"/>
        <geom type="capsule" fromto="0 0 0 0 0 .5" size=".03" mass=".2"
              contype="0" conaffinity="0"/>
        <body name="pole2" pos="0 0 .5">
          <joint name="hinge2" axis="0 1 0" damping="0.002"/>
          <geom type="capsule" fromto="0 0 0 0 0 .5" size=".03" mass=".2"
                contype="0" conaffinity="0"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slider" gear="20" ctrlrange="-1 1" ctrllimited="true"/></actuator>
</mujoco>
"""

NUM_KNOTS = 100
SUBSTEPS = 4
ALPHAS = 0.5 ** np.arange(8)  # line-search step sizes, one row each
# Costs on x = (cart, hinge1, hinge2, and their velocities) - goal, and on u.
Q_RUN = np.diag([0.1, 0.0, 0.0, 0.01, 0.01, 0.01])
Q_FINAL = np.diag([10.0, 1000.0, 1000.0, 10.0, 20.0, 20.0])
R_RUN = 0.03


def tilts(qpos: np.ndarray) -> np.ndarray:
  """Angle of each pole from upright, in [0, pi]: pole 1 at hinge1, pole 2 at hinge1 + hinge2."""
  absolute = np.stack([qpos[..., 1], qpos[..., 1] + qpos[..., 2]], axis=-1)
  return np.abs(np.mod(absolute + np.pi, 2 * np.pi) - np.pi)


def make_solver(sim: mjbatch_jax.Simulator):
  """The jitted parts of iLQR for sim's model: rollout (cost of a plan) and one iteration."""
  layout = sim.layout
  lo, hi = (jnp.asarray(b) for b in sim.model.actuator_ctrlrange.T)
  knot_params = sim.params(NUM_KNOTS)
  line_params = sim.params(len(ALPHAS))
  q_run, q_final = jnp.asarray(Q_RUN), jnp.asarray(Q_FINAL)

  def x_of(states: jax.Array) -> jax.Array:
    # Hinges and slides only: the tangent space is qpos itself, and the goal is x = 0.
    return jnp.concatenate([states[..., layout.qpos], states[..., layout.qvel]], axis=-1)

  def total_cost(xs: jax.Array, us: jax.Array) -> jax.Array:
    """xs (..., T + 1, nx) from the start, us (..., T, nu)."""
    running = jnp.einsum("...ti,ij,...tj->...", xs[..., :-1, :], q_run, xs[..., :-1, :])
    final = jnp.einsum("...i,ij,...j->...", xs[..., -1, :], q_final, xs[..., -1, :])
    return 0.5 * (running + final + R_RUN * jnp.sum(us**2, axis=(-2, -1)))

  @jax.jit
  def simulate(start: jax.Array, us: jax.Array) -> tuple[jax.Array, jax.Array]:
    states, _ = mjbatch_jax.rollout(start[None], us[None], sim.params(1), nstep=SUBSTEPS)
    states = jnp.concatenate([start[None], states[0]])
    return states, total_cost(x_of(states), us)

  @jax.jit
  def iteration(states: jax.Array, us: jax.Array, mu: jax.Array) -> tuple[jax.Array, ...]:
    """One iLQR iteration from the trajectory states (T + 1, nstate) of controls us (T, nu)."""
    # All T knots' transitions in one custom call: the knots are the batch rows.
    a, b = mjbatch_jax.transition_fd(states[:-1], us, knot_params, nstep=SUBSTEPS)
    xs = x_of(states)

    def backward(carry, knot):
      v_x, v_xx = carry
      a_t, b_t, x_t, u_t = knot
      q_x = q_run @ x_t + a_t.T @ v_x
      q_u = R_RUN * u_t + b_t.T @ v_x
      q_xx = q_run + a_t.T @ v_xx @ a_t
      q_ux = b_t.T @ v_xx @ a_t
      q_uu = R_RUN * jnp.eye(u_t.shape[0]) + b_t.T @ v_xx @ b_t + mu * jnp.eye(u_t.shape[0])
      q_uu_inv = jnp.linalg.inv(q_uu)
      k = -q_uu_inv @ q_u
      gain = -q_uu_inv @ q_ux
      # The box: clip the feedforward; a clipped control has no feedback (its gain row is zero).
      k_boxed = jnp.clip(u_t + k, lo, hi) - u_t
      gain = jnp.where((k_boxed != k)[:, None], 0.0, gain)
      k = k_boxed
      v_x = q_x + gain.T @ q_uu @ k + gain.T @ q_u + q_ux.T @ k
      v_xx = q_xx + gain.T @ q_uu @ gain + gain.T @ q_ux + q_ux.T @ gain
      return (v_x, 0.5 * (v_xx + v_xx.T)), (k, gain)

    final = (q_final @ xs[-1], q_final)
    _, (ks, gains) = jax.lax.scan(backward, final, (a, b, xs[:-1], us), reverse=True)

    # Forward pass: every step size is a row, so the line search is one rollout.
    alphas = jnp.asarray(ALPHAS)[:, None]

    def forward(state, knot):
      k, gain, x_ref, u_ref = knot
      dx = x_of(state) - x_ref
      u = jnp.clip(u_ref + alphas * k + dx @ gain.T, lo, hi)
      state = mjbatch_jax.step(state, u, line_params, nstep=SUBSTEPS)
      return state, (state, u)

    start = jnp.broadcast_to(states[0], (len(ALPHAS), sim.nstate))
    _, (new_states, new_us) = jax.lax.scan(forward, start, (ks, gains, xs[:-1], us))
    new_states = jnp.concatenate([start[None], new_states]).swapaxes(0, 1)  # (alpha, T+1, ...)
    new_us = new_us.swapaxes(0, 1)
    costs = total_cost(x_of(new_states), new_us)
    best = jnp.argmin(costs)
    return new_states[best], new_us[best], costs[best], ks, gains

  return simulate, iteration


def solve(iterations: int, out: str) -> dict[str, float]:
  model = mujoco.MjModel.from_xml_string(DOUBLE_CARTPOLE)
  with mjbatch_jax.Simulator(model) as sim:
    layout = sim.layout
    start = sim.init_state(1)[0].at[layout.qpos].set(jnp.array([0.0, jnp.pi, 0.0]))  # hanging
    simulate, iteration = make_solver(sim)
    # A small push breaks the symmetry of the hanging equilibrium.
    us = 0.2 * jnp.sin(jnp.linspace(0, 4 * jnp.pi, NUM_KNOTS))[:, None]
    states, cost = simulate(start, us)
    initial_cost = float(cost)
    print(f"iteration   0: cost {initial_cost:10.3f}")
    mu = 1e-3
    begin = time.perf_counter()
    ks = gains = None
    i = 0
    for i in range(1, iterations + 1):
      new_states, new_us, new_cost, ks, gains = iteration(states, us, jnp.asarray(mu))
      if float(new_cost) < float(cost):
        improvement = float(cost) - float(new_cost)
        states, us, cost = new_states, new_us, new_cost
        mu = max(mu / 3, 1e-6)
        if improvement < 1e-6 * float(cost):
          print(f"iteration {i:3d}: cost {float(cost):10.3f} (converged)")
          break
      else:
        mu *= 10  # no step size improved: trust the quadratic model less
      if i % 10 == 0:
        print(f"iteration {i:3d}: cost {float(cost):10.3f}")
    seconds = time.perf_counter() - begin
    final_tilts = tilts(np.asarray(states[-1, layout.qpos]))
    np.savez(
      out, ctrl=np.asarray(us), states=np.asarray(states), feedforward=np.asarray(ks),
      gains=np.asarray(gains), timestep=model.opt.timestep * SUBSTEPS,
    )
  print(f"{i} iterations in {seconds:.1f} s ({NUM_KNOTS} knots, one transition_fd call each)")
  print(f"cost: {initial_cost:.3f} -> {float(cost):.3f}")
  print(f"final tilts: pole 1 {final_tilts[0]:.4f} rad, pole 2 {final_tilts[1]:.4f} rad")
  print(f"final cart position {float(states[-1, layout.qpos][0]):+.3f} m; plan saved to {out}")
  return {"initial_cost": initial_cost, "cost": float(cost), "tilt1": float(final_tilts[0]),
          "tilt2": float(final_tilts[1])}


def main() -> None:
  parser = argparse.ArgumentParser(description="iLQR swing-up of a double cart-pole.")
  parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "cartpole_swingup.npz"),
                      help="where to save the plan (.npz)")
  parser.add_argument("--iterations", type=int, default=150, help="most iLQR iterations")
  args = parser.parse_args()
  solve(args.iterations, args.out)


if __name__ == "__main__":
  main()
