"""Params that fit real use: shared leaves, selected rows, randomisation and nested replace."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mjbatch_jax
from tests import models
from tests.models import FREEBALL_XML

jax.config.update("jax_enable_x64", True)

N = 4


@pytest.fixture
def sim():
  with mjbatch_jax.Simulator(models.load(FREEBALL_XML), num_threads=1) as sim:
    yield sim


def inputs(sim):
  state = sim.init_state(N, keyframe=0).at[:, sim.layout.qvel].add(0.1)
  ctrl = jnp.tile(jnp.asarray([0.3, -0.2]), (N, 1))
  return state, ctrl


def fd_shapes(fn, *args):
  """Shapes of the jx results (N, k, nstate) of fn's finite_difference custom calls."""
  found = []

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      if eqn.params.get("target_name") == "mjbatch_jax_finite_difference":
        found.append(tuple(eqn.outvars[2].aval.shape))
      for value in eqn.params.values():
        for sub in value if isinstance(value, (tuple, list)) else (value,):
          inner = getattr(sub, "jaxpr", sub)
          if hasattr(inner, "eqns"):
            walk(inner)

  walk(jax.make_jaxpr(fn)(*args).jaxpr)
  return found


def test_shared_leaf_equals_per_simulation_form(sim):
  state, ctrl = inputs(sim)
  shared = sim.params(N, ("opt.gravity", "body_mass"), shared=("opt.gravity",))
  full = sim.params(N, ("opt.gravity", "body_mass"))
  assert shared["opt.gravity"].shape == (3,) and full["opt.gravity"].shape == (N, 3)
  g = jnp.asarray([0.5, 0.0, -7.0])
  shared = shared.replace({"opt.gravity": g})
  full = full.replace({"opt.gravity": jnp.broadcast_to(g, (N, 3))})
  np.testing.assert_array_equal(mjbatch_jax.step(state, ctrl, shared, nstep=5),
                                mjbatch_jax.step(state, ctrl, full, nstep=5))

  def loss(p):
    return mjbatch_jax.rollout(state, jnp.repeat(ctrl[:, None], 3, 1), p)[0][..., 1:4].sum()

  g_shared, g_full = jax.grad(loss)(shared), jax.grad(loss)(full)
  # The gradient of a shared leaf is the sum of the per-simulation gradients, as JAX's own.
  np.testing.assert_allclose(g_shared["opt.gravity"], g_full["opt.gravity"].sum(0), rtol=1e-10)
  np.testing.assert_allclose(g_shared["body_mass"], g_full["body_mass"], rtol=1e-10)
  assert np.abs(np.asarray(g_shared["opt.gravity"])).max() > 0


def test_selected_rows_equal_the_full_field_and_pay_one_column(sim):
  state, ctrl = inputs(sim)
  ball = sim.names.body("ball")
  one = sim.params(N, ("body_mass",), select={"body_mass": ["ball"]})
  full = sim.params(N, ("body_mass",))
  assert one["body_mass"].shape == (N, 1)
  heavier = jnp.linspace(0.3, 0.6, N)[:, None]
  one = one.replace({"body_mass": heavier})
  full = full.replace({"body_mass": full["body_mass"].at[:, ball].set(heavier[:, 0])})
  np.testing.assert_array_equal(mjbatch_jax.step(state, ctrl, one, nstep=3),
                                mjbatch_jax.step(state, ctrl, full, nstep=3))

  def loss(p):
    return mjbatch_jax.step(state, ctrl, p, nstep=3)[:, sim.layout.qvel].sum()

  g_one, g_full = jax.grad(loss)(one), jax.grad(loss)(full)
  np.testing.assert_allclose(g_one["body_mass"][:, 0], g_full["body_mass"][:, ball], rtol=1e-9)
  # One column per simulation for the selected mass, against nbody for the whole field.
  assert fd_shapes(jax.grad(loss), one) == [(N, 1, sim.nstate)]
  assert fd_shapes(jax.grad(loss), full) == [(N, sim.model.nbody, sim.nstate)]
  jac = mjbatch_jax.param_fd(state, ctrl, one)["body_mass"]
  assert jac.shape == (N, sim.nstate, 1)


def test_selected_rows_of_a_matrix_field_by_name(sim):
  state, ctrl = inputs(sim)
  floor = 0  # the plane, unnamed: chosen by id
  params = sim.params(N, ("geom_friction",), select={"geom_friction": [floor]})
  assert params["geom_friction"].shape == (N, 1, 3)
  full = sim.params(N, ("geom_friction",))
  value = params["geom_friction"] * 0.5
  full = full.replace({"geom_friction": full["geom_friction"].at[:, floor].set(value[:, 0])})
  np.testing.assert_array_equal(
    mjbatch_jax.step(state, ctrl, params.replace({"geom_friction": value}), nstep=3),
    mjbatch_jax.step(state, ctrl, full, nstep=3))


def test_randomize(sim):
  params = sim.params(N, ("geom_friction", "body_mass", "opt.timestep"),
                      shared=("opt.timestep",), select={"geom_friction": [0]})
  key = jax.random.key(0)
  out = mjbatch_jax.randomize(key, params, uniform={"geom_friction": (0.4, 1.0)},
                              scale={"body_mass": (0.8, 1.2)},
                              log_uniform={"opt.timestep": (1e-3, 4e-3)})
  f = np.asarray(out["geom_friction"])
  assert f.shape == (N, 1, 3) and (f >= 0.4).all() and (f < 1.0).all()
  assert len(np.unique(f)) == f.size  # independent draws per simulation and component
  ratio = np.asarray(out["body_mass"])[:, 1:] / np.asarray(params["body_mass"])[:, 1:]
  assert (ratio >= 0.8).all() and (ratio < 1.2).all()
  assert out["opt.timestep"].shape == () and 1e-3 <= float(out["opt.timestep"]) < 4e-3
  again = mjbatch_jax.randomize(key, params, uniform={"geom_friction": (0.4, 1.0)},
                                scale={"body_mass": (0.8, 1.2)},
                                log_uniform={"opt.timestep": (1e-3, 4e-3)})
  np.testing.assert_array_equal(out["geom_friction"], again["geom_friction"])
  jitted = jax.jit(lambda k, p: mjbatch_jax.randomize(k, p, uniform={"body_mass": (1, 2)}))
  assert jitted(key, params)["body_mass"].shape == (N, sim.model.nbody)
  with pytest.raises(ValueError, match="dof_damping"):
    mjbatch_jax.randomize(key, params, uniform={"dof_damping": (0, 1)})


def test_tree_replace(sim):
  params = sim.params(N, ("opt.gravity",), shared=("opt.gravity",))
  tree = {"params": params, "info": {"steps": 3}}
  out = mjbatch_jax.tree_replace(tree, {"params.opt.gravity": jnp.zeros(3), "info.steps": 0})
  assert out["info"]["steps"] == 0 and float(jnp.abs(out["params"]["opt.gravity"]).max()) == 0
  assert tree["info"]["steps"] == 3  # a new tree; the old one is unchanged
  with pytest.raises(ValueError, match="nope"):
    mjbatch_jax.tree_replace(tree, {"info.nope.x": 1})


def test_bad_selections(sim):
  with pytest.raises(ValueError, match="not among fields"):
    sim.params(N, ("body_mass",), shared=("geom_friction",))
  with pytest.raises(ValueError, match="bal"):
    sim.params(N, ("body_mass",), select={"body_mass": ["bal"]})
  with pytest.raises(ValueError, match="rows 0"):
    sim.params(N, ("body_mass",), select={"body_mass": [99]})
  with pytest.raises(ValueError, match="per-object"):
    sim.params(N, ("opt.gravity",), select={"opt.gravity": [0]})
  with pytest.raises(ValueError, match="twice"):
    sim.params(N, ("body_mass",), select={"body_mass": [1, 1]})
  state, ctrl = inputs(sim)
  shared = sim.params(N, ("opt.gravity",), shared=("opt.gravity",))
  with pytest.raises(ValueError, match="shared by all simulations"):
    mjbatch_jax.step(state, ctrl, shared.replace({"opt.gravity": jnp.zeros((N, 3))}))


BOX_ON_FLOOR = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body name="box" pos="0 0 .2">
      <freejoint/>
      <geom type="box" size=".1 .05 .03" mass="1"/>
    </body>
    <body name="arm" pos="0 .5 .3">
      <joint name="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 .3 0 0" size=".03" mass=".5"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" gear="2"/></actuator>
</mujoco>
"""


@pytest.mark.parametrize("set_const", [True, False])
def test_set_const_equals_a_model_compiled_with_the_params(set_const):
  import copy

  import mujoco

  model = mujoco.MjModel.from_xml_string(BOX_ON_FLOOR)
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    params = sim.params(N, ("body_mass", "body_inertia"), set_const=set_const)
    scale = jnp.asarray([0.5, 1.0, 2.0, 4.0])[:, None]
    params = params.replace({"body_mass": params["body_mass"] * scale,
                             "body_inertia": params["body_inertia"] * scale[..., None]})
    state = sim.init_state(N)
    ctrl = jnp.full((N, model.nu), 0.3)
    got = np.asarray(mjbatch_jax.step(state, ctrl, params, nstep=200))
    for i in range(N):
      m = copy.copy(model)
      m.body_mass[:] = np.asarray(params["body_mass"][i])
      m.body_inertia[:] = np.asarray(params["body_inertia"][i])
      if set_const:
        mujoco.mj_setConst(m, mujoco.MjData(m))
      d = mujoco.MjData(m)
      d.ctrl[:] = 0.3
      for _ in range(200):
        mujoco.mj_step(m, d)
      row = np.empty(sim.nstate)
      mujoco.mj_getState(m, d, row, mujoco.mjtState.mjSTATE_INTEGRATION)
      np.testing.assert_array_equal(got[i], row, err_msg=f"sim {i}")
    # The derived constants matter here: with and without them the trajectories differ.
    other = mjbatch_jax.step(state, ctrl, sim.params(N, ("body_mass", "body_inertia"),
                                                     set_const=not set_const).replace(
      {"body_mass": params["body_mass"], "body_inertia": params["body_inertia"]}), nstep=200)
    assert not np.array_equal(np.asarray(other)[0], got[0])


# ---------------------------------------------------------------------------------------------
# Checkpoints: params and env states pickle, and load where a Simulator of the same model is.

_LOAD = """
import pickle, sys
import jax, jax.numpy as jnp, mujoco, numpy as np
jax.config.update("jax_enable_x64", True)
import mjbatch_jax
from mjbatch_jax import envs
from tests import models
from tests.models import FREEBALL_XML
# Another Simulator first, so that this process's engine ids differ from the saving one's.
other = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(models.CARTPOLE_XML))
with open(sys.argv[1], "rb") as f:
  saved = f.read()
try:
  pickle.loads(saved)
except ValueError as e:
  assert "no open Simulator" in str(e), e
else:
  raise AssertionError("loaded without a Simulator of the model")
sim = mjbatch_jax.Simulator(models.load(FREEBALL_XML), num_threads=2)
env = envs.CartPoleBalance()
params, state, ctrl, env_state, action, want, want_env = pickle.loads(saved)
assert params.spec.engine == sim.spec.engine != other.spec.engine
np.testing.assert_array_equal(mjbatch_jax.step(state, ctrl, params), want)
np.testing.assert_array_equal(jax.jit(env.step)(env_state, action).obs, want_env)
print("loaded")
"""


def test_params_and_env_states_pickle_and_load_in_a_new_process(sim, tmp_path):
  import pickle
  import subprocess
  import sys

  from mjbatch_jax import envs

  state, ctrl = inputs(sim)
  params = sim.params(N, ("body_mass", "opt.gravity"), shared=("opt.gravity",),
                      select={"body_mass": [1]}, set_const=True)
  params = params.replace({"body_mass": params["body_mass"] * 1.5})
  want = mjbatch_jax.step(state, ctrl, params)
  # In this process: a round trip gives the same params, bound to the same engine.
  again = pickle.loads(pickle.dumps(params))
  assert again.spec == params.spec and again.spec.set_const
  np.testing.assert_array_equal(mjbatch_jax.step(state, ctrl, again), want)
  env = envs.CartPoleBalance()
  env_state = jax.jit(env.reset)(jax.random.key(3))
  action = jnp.asarray([0.5])
  want_env = jax.jit(env.step)(env_state, action).obs
  path = tmp_path / "checkpoint.pkl"
  path.write_bytes(pickle.dumps((params, state, ctrl, env_state, action, want, want_env)))
  root = Path(__file__).resolve().parents[1]
  done = subprocess.run([sys.executable, "-c", _LOAD, str(path)], capture_output=True,
                        text=True, timeout=300, cwd=root)
  assert done.returncode == 0 and "loaded" in done.stdout, done.stderr[-3000:]


def test_params_copy_and_deepcopy_and_simulators_refuse(sim):
  import copy
  import pickle

  from mjbatch_jax import envs

  params = sim.params(N, ("body_mass",))
  for copied in (copy.copy(params), copy.deepcopy(params)):
    assert copied.spec == params.spec
    np.testing.assert_array_equal(copied["body_mass"], params["body_mass"])
  env_state = jax.jit(envs.CartPoleBalance().reset)(jax.random.key(0))
  assert copy.deepcopy(env_state).data.params.spec == env_state.data.params.spec
  for how in (pickle.dumps, copy.copy, copy.deepcopy):
    with pytest.raises(TypeError, match="Simulator cannot be pickled.*pickle its params"):
      how(sim)


# Three bodies (one with two geoms), no limits, friction loss or equalities: contacts alone
# decide whether a step can have constraint rows.
THREE_BODIES_XML = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 .1"/>
    <body><freejoint/><geom size=".1"/><geom size=".1" pos=".3 0 0"/></body>
    <body pos="1 0 0"><freejoint/><geom size=".1"/></body>
  </worldbody>
</mujoco>
"""


def test_may_have_constraints_per_bit_is_the_pairwise_test():
  from mjbatch_jax.simulator import _may_have_constraints

  def every_pair(model):
    contype, conaffinity = model.geom_contype, model.geom_conaffinity
    collide = (contype[:, None] & conaffinity[None, :]) | (contype[None, :] & conaffinity[:, None])
    other_body = model.geom_bodyid[:, None] != model.geom_bodyid[None, :]
    return bool(np.any((collide != 0) & other_body))

  model = models.load(THREE_BODIES_XML)
  rng = np.random.default_rng(0)
  seen = set()
  for _ in range(300):
    model.geom_contype[:] = rng.integers(0, 8, model.ngeom) * rng.integers(0, 2, model.ngeom)
    model.geom_conaffinity[:] = rng.integers(0, 8, model.ngeom) * rng.integers(0, 2, model.ngeom)
    expected = every_pair(model)
    seen.add(expected)
    assert _may_have_constraints(model) == expected, (model.geom_contype, model.geom_conaffinity)
  assert seen == {True, False}
  # Only the two geoms of one body can collide: no pair of different bodies, no constraint rows.
  model.geom_contype[:] = [0, 1, 1, 0]
  model.geom_conaffinity[:] = [0, 1, 1, 0]
  assert not _may_have_constraints(model)
  # The top bit (a negative int32) counts as any other.
  model.geom_contype[:] = [0, -(2**31), 0, 0]
  model.geom_conaffinity[:] = [0, 0, 0, -(2**31)]
  assert _may_have_constraints(model) and every_pair(model)
