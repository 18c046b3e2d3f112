"""Partial results: with return_errors, a MuJoCo error in one simulation is that simulation's
error code, its row stays at its input state, and the others' results stand, bit for bit what
they would be without it; without it, SimulationError names every failed simulation."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax

jax.config.update("jax_enable_x64", True)

# A slider pushed by a motor, and a pile of free spheres on the floor. A simulation whose spheres
# are jammed into one another overflows MuJoCo's small stack in every step (mj_stackAlloc), and a
# failed simulation keeps its input row: it fails again in every call.
SPHERES = 12
PILE = """
<mujoco>
  <size memory="100K"/>
  <option timestep="0.01"/>
  <worldbody>
    <geom type="plane" size="5 5 .1"/>
    <body name="cart" pos="0 -3 .1">
      <joint name="slide" type="slide" axis="1 0 0" damping="1"/>
      <geom type="box" size=".1 .1 .05" mass="1" contype="0" conaffinity="0"/>
    </body>
    {}
  </worldbody>
  <actuator><motor joint="slide" ctrlrange="-1 1"/></actuator>
</mujoco>
""".format("".join(
  f'<body pos="{i % 4} {i // 4} .1"><freejoint/><geom size=".1" mass="1"/></body>'
  for i in range(SPHERES)))


@pytest.fixture(scope="module")
def pile():
  model = mujoco.MjModel.from_xml_string(PILE)
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    yield model, sim


def jammed(model, sim, row):
  """row with its spheres pushed into one another."""
  row = np.array(row)
  qpos = row[sim.layout.qpos]
  for b in range(SPHERES):
    adr = model.jnt_qposadr[1 + b]
    qpos[adr : adr + 3] = [0.05 * b, 0, 0.1 + 0.01 * b]
  row[sim.layout.qpos] = qpos
  return row


def starts(model, sim, n, bad):
  rows = np.array(sim.init_state(n))
  for i in bad:
    rows[i] = jammed(model, sim, rows[i])
  return jnp.asarray(rows)


def test_step_with_return_errors_keeps_failed_rows_and_the_others_results(pile):
  model, sim = pile
  n, bad = 64, (3, 40, 41, 42)
  state = starts(model, sim, n, bad)
  ctrl = jnp.linspace(-1, 1, n)[:, None]
  params = sim.params(n)
  new, errors = mjbatch_jax.step(state, ctrl, params, nstep=3, return_errors=True)
  assert errors.dtype == jnp.int32 and errors.shape == (n,)
  np.testing.assert_array_equal(np.flatnonzero(errors), bad)
  # A failed simulation's row is its input row, with the call's ctrl written in.
  given = state.at[:, sim.layout.ctrl].set(ctrl)
  np.testing.assert_array_equal(new[np.asarray(bad)], given[np.asarray(bad)])
  good = np.setdiff1d(np.arange(n), bad)
  alone = mjbatch_jax.step(state[good], ctrl[good], sim.params(len(good)), nstep=3)
  np.testing.assert_array_equal(new[good], alone)
  # Without the option: an exception that names every failed simulation.
  with pytest.raises(mjbatch_jax.SimulationError, match=r"sim 3: mj_stackAlloc") as raised:
    mjbatch_jax.step(state, ctrl, params, nstep=3)
  assert raised.value.ids == bad
  assert "4 simulations failed: 3, 40-42" in str(raised.value)


def test_rollout_with_return_errors_under_jit_and_vmap(pile):
  model, sim = pile
  n, knots, bad = 12, 5, (7,)
  state = starts(model, sim, n, bad)
  ctrls = jnp.broadcast_to(jnp.linspace(-1, 1, knots)[None, :, None], (n, knots, 1))
  params = sim.params(n)

  @jax.jit
  def run(state, ctrls, params):
    return mjbatch_jax.rollout(state, ctrls, params, observe=("xpos",), return_warnings=True,
                               return_errors=True)

  states, sensordata, obs, warnings, errors = run(state, ctrls, params)
  assert warnings.shape == (n, mjbatch_jax.NWARNING)
  np.testing.assert_array_equal(errors, np.isin(np.arange(n), bad))
  np.testing.assert_array_equal(states[7], jnp.broadcast_to(state[7], (knots, sim.nstate)))
  assert not np.asarray(obs["xpos"][7]).any()  # a failed simulation's records are zeros
  good = np.setdiff1d(np.arange(n), bad)
  alone_states, _, alone_obs = mjbatch_jax.rollout(state[good], ctrls[good],
                                                   sim.params(len(good)), observe=("xpos",))
  np.testing.assert_array_equal(states[good], alone_states)
  np.testing.assert_array_equal(obs["xpos"][good], alone_obs["xpos"])
  # vmap: the errors take the leading dimensions, as every other result does.
  split = jax.vmap(lambda s, c, p: mjbatch_jax.step(s, c, p, return_errors=True))
  params2 = params.replace({})
  _, errors2 = split(state.reshape(3, 4, -1), ctrls[:, 0].reshape(3, 4, 1),
                     jax.tree.map(lambda x: x.reshape(3, 4, *x.shape[1:]), params2))
  np.testing.assert_array_equal(errors2.reshape(-1), errors)
  with pytest.raises(mjbatch_jax.SimulationError, match="sim 7") as raised:
    with mjbatch_jax.simulation_errors():
      jax.jit(mjbatch_jax.rollout)(state, ctrls, params)[0].block_until_ready()
  assert raised.value.ids == bad


def test_a_sampling_run_goes_on_when_one_of_1024_candidates_fails_every_call(pile):
  model, sim = pile
  n, knots, calls, bad = 1024, 8, 5, 17
  params = sim.params(n)
  start = np.asarray(sim.init_state(1))[0]

  @jax.jit
  def plan(starts, key):
    candidates = jax.random.uniform(key, (n, knots, 1), minval=-1, maxval=1)
    states, _, errors = mjbatch_jax.rollout(starts, candidates, params, return_errors=True)
    slide = states[:, -1, sim.layout.qpos][:, 0]
    costs = jnp.where(errors == 0, (slide - 1.0) ** 2, jnp.inf)  # a failed one is never best
    return jnp.argmin(costs), costs, errors, states

  key = jax.random.key(0)
  row = start
  for _ in range(calls):
    key, sub = jax.random.split(key)
    # Every candidate starts from the current state, but candidate 17 from a broken one.
    rows = np.broadcast_to(row, (n, sim.nstate)).copy()
    rows[bad] = jammed(model, sim, row)
    best, costs, errors, states = plan(jnp.asarray(rows), sub)
    assert np.flatnonzero(errors).tolist() == [bad]
    assert np.isinf(costs[bad]) and np.isfinite(np.delete(np.asarray(costs), bad)).all()
    assert int(best) != bad
    row = np.asarray(states[int(best), 0])  # apply the best candidate's first knot
  assert row[sim.layout.qpos][0] != start[sim.layout.qpos][0]  # the cart moved
  # Without return_errors the same call raises, naming the candidate.
  with pytest.raises(mjbatch_jax.SimulationError) as raised:
    mjbatch_jax.rollout(jnp.asarray(rows), jnp.zeros((n, knots, 1)), params)
  assert raised.value.ids == (bad,)


def test_return_errors_is_checked_and_not_differentiable(pile):
  model, sim = pile
  state, params = sim.init_state(2), sim.params(2)
  ctrl = jnp.zeros((2, 1))
  with pytest.raises(ValueError, match="return_errors must be a bool"):
    mjbatch_jax.step(state, ctrl, params, return_errors="yes")  # pyright: ignore[reportArgumentType]
  with pytest.raises(ValueError, match="return_errors=True\\) is not differentiable"):
    jax.grad(lambda c: mjbatch_jax.step(state, c, params, return_errors=True)[0].sum())(ctrl)


def test_simulation_error_ids_and_pickling():
  import pickle

  error = mjbatch_jax.SimulationError("sim 2: boom (3 simulations failed: 2, 5-6)")
  assert error.ids == (2, 5, 6)
  assert mjbatch_jax.SimulationError("sim 9: boom").ids == (9,)
  assert mjbatch_jax.SimulationError("x", ids=[1, 4]).ids == (1, 4)
  again = pickle.loads(pickle.dumps(error))
  assert again.ids == error.ids and str(again) == str(error)
