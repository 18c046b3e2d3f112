"""Properties of the low-level helpers' arguments and results, drawn by Hypothesis.

rotations, tangent, check_grads, randomize and tree_replace: an array with a wrong last dimension
(any leading dimensions, any dtype of numbers, eager or traced) is a ValueError naming the
argument, never a result and never another exception; leading dimensions that do not broadcast
name both arguments; numbers that are not numbers (NaN, bools, strings) are refused by name and
NumPy scalars are taken as the numbers they hold. Valid rotations keep their algebra: exp and
log invert each other, q q* is the identity, rotations keep norms, matrices map back.

Checks of valid values run through functions compiled once per module: examples vary values,
not shapes, so that the quick profile stays cheap.
"""

from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import mjbatch_jax
from mjbatch_jax import rotations, tangent
from tests import strategies
from tests.models import CARTPOLE_XML

jax.config.update("jax_enable_x64", True)

# One pose joint of each kind: free (7 qpos, 6 dofs), ball (4, 3), hinge (1, 1): nq 12, nv 10.
JOINTS_XML = """
<mujoco>
  <worldbody>
    <body><freejoint/><geom size=".1"/>
      <body pos="0 0 .3"><joint type="ball"/><geom size=".1"/>
        <body pos="0 0 .3"><joint type="hinge" axis="0 1 0"/><geom size=".1"/></body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""
JOINTS = tangent.Joints.of(mujoco.MjModel.from_xml_string(JOINTS_XML))
NQ, NV = JOINTS.nq, JOINTS.nv

QUAT = np.array([1.0, 0.0, 0.0, 0.0])
VEC = np.array([0.1, 0.2, 0.3])


def _call(fun, args, traced):
  return jax.jit(fun)(*args) if traced else fun(*args)


# (function, the argument with the wrong shape, what that argument's shape must end in, the
# call with that argument replaced).
SHAPED = [
  ("multiply", "a", (4,), lambda x: rotations.multiply(x, QUAT)),
  ("multiply", "b", (4,), lambda x: rotations.multiply(QUAT, x)),
  ("conjugate", "q", (4,), rotations.conjugate),
  ("rotate", "q", (4,), lambda x: rotations.rotate(x, VEC)),
  ("rotate", "v", (3,), lambda x: rotations.rotate(QUAT, x)),
  ("rotate_inverse", "q", (4,), lambda x: rotations.rotate_inverse(x, VEC)),
  ("rotate_inverse", "v", (3,), lambda x: rotations.rotate_inverse(QUAT, x)),
  ("exp", "v", (3,), rotations.exp),
  ("log", "q", (4,), rotations.log),
  ("from_axis_angle", "axis", (3,), lambda x: rotations.from_axis_angle(x, 0.5)),
  ("integrate", "q", (4,), lambda x: rotations.integrate(x, VEC, 0.1)),
  ("integrate", "omega", (3,), lambda x: rotations.integrate(QUAT, x, 0.1)),
  ("difference", "qa", (4,), lambda x: rotations.difference(x, QUAT)),
  ("difference", "qb", (4,), lambda x: rotations.difference(QUAT, x)),
  ("to_matrix", "q", (4,), rotations.to_matrix),
  ("from_matrix", "mat", (3, 3), rotations.from_matrix),
  ("integrate_pos", "qpos", (NQ,), lambda x: tangent.integrate_pos(JOINTS, x, np.zeros(NV), 1.0)),
  ("integrate_pos", "qvel", (NV,),
   lambda x: tangent.integrate_pos(JOINTS, np.zeros(NQ), x, 1.0)),
  ("differentiate_pos", "qpos1", (NQ,),
   lambda x: tangent.differentiate_pos(JOINTS, x, np.zeros(NQ), 1.0)),
  ("differentiate_pos", "qpos2", (NQ,),
   lambda x: tangent.differentiate_pos(JOINTS, np.zeros(NQ), x, 1.0)),
]


@given(case=st.sampled_from(SHAPED), data=st.data(),
       dtype=st.sampled_from([np.float32, np.float64, np.int64]), traced=st.booleans())
def test_a_wrong_last_dimension_is_a_value_error_naming_the_argument(case, data, dtype, traced):
  function, name, trailing, call = case
  shape = data.draw(strategies.wrong_shapes(trailing), label="shape")
  with pytest.raises(ValueError, match=rf"^{name} must have shape \(\.\.\., "):
    _call(call, (np.zeros(shape, dtype),), traced)


# (function, the two arguments whose leading dimensions must broadcast, their trailing shapes,
# the call).
PAIRED = [
  ("multiply", ("a", "b"), ((4,), (4,)), rotations.multiply),
  ("rotate", ("q", "v"), ((4,), (3,)), rotations.rotate),
  ("rotate_inverse", ("q", "v"), ((4,), (3,)), rotations.rotate_inverse),
  ("difference", ("qa", "qb"), ((4,), (4,)), rotations.difference),
  ("integrate", ("q", "omega"), ((4,), (3,)), rotations.integrate),
  ("from_axis_angle", ("axis", "angle"), ((3,), ()), rotations.from_axis_angle),
  ("integrate_pos", ("qpos", "qvel"), ((NQ,), (NV,)),
   lambda a, b: tangent.integrate_pos(JOINTS, a, b, 1.0)),
  ("differentiate_pos", ("qpos1", "qpos2"), ((NQ,), (NQ,)),
   lambda a, b: tangent.differentiate_pos(JOINTS, a, b, 1.0)),
]


@given(case=st.sampled_from(PAIRED), leads=strategies.clashing_leads(), traced=st.booleans())
def test_leading_dimensions_that_do_not_broadcast_name_both_arguments(case, leads, traced):
  function, (first, second), (tail1, tail2), call = case
  x = np.ones((*leads[0], *tail1))
  y = np.ones((*leads[1], *tail2))
  with pytest.raises(ValueError, match=rf"\b{first} \(.*\) and {second} \(.*\) do not broadcast"):
    _call(call, (x, y), traced)


NUMBER_ARGUMENTS = [
  ("dt", lambda x: rotations.integrate(QUAT, VEC, x)),
  ("angle", lambda x: rotations.from_axis_angle(VEC, x)),
  ("scale", lambda x: tangent.integrate_pos(JOINTS, np.zeros(NQ), np.zeros(NV), x)),
  ("dt", lambda x: tangent.differentiate_pos(JOINTS, np.zeros(NQ), np.zeros(NQ), x)),
]


@given(case=st.sampled_from(NUMBER_ARGUMENTS),
       bad=strategies.bad_numbers(positive=False) | st.sampled_from(strategies.NOT_ARRAYS))
def test_a_time_step_or_angle_that_is_no_number_is_refused_by_name(case, bad):
  name, call = case
  with pytest.raises(ValueError, match=rf"^{name} must be"):
    call(bad)


@given(value=strategies.numpy_scalars(st.floats(0.6, 3.0)))
def test_numpy_scalars_are_the_numbers_they_hold(value):
  number = float(value)
  q = rotations.exp(VEC)
  np.testing.assert_allclose(rotations.integrate(q, VEC, value),
                             rotations.integrate(q, VEC, number), rtol=1e-6)
  np.testing.assert_allclose(rotations.from_axis_angle(VEC, value),
                             rotations.from_axis_angle(VEC, number), rtol=1e-6)
  # tangent checks them the same way, as it traces: eval_shape traces without compiling.
  qpos, qvel = np.zeros(NQ), np.zeros(NV)
  moved = jax.eval_shape(lambda: tangent.integrate_pos(JOINTS, qpos, qvel, value))
  velocity = jax.eval_shape(lambda: tangent.differentiate_pos(JOINTS, qpos, qpos, value))
  assert moved.shape == (NQ,) and velocity.shape == (NV,)


# The algebra of valid rotations, for a batch of B of each, compiled once.
B = 6


@jax.jit
def _algebra(q, r, v, w):
  """Quantities that must be zero (or one) for unit quaternions q, r and rotation vector v."""
  identity = jnp.array([1.0, 0.0, 0.0, 0.0])
  turned = rotations.rotate(q, w)
  back_from_matrix = rotations.from_matrix(rotations.to_matrix(q))
  same_sign = jnp.where(q[:, :1] < 0, -q, q)
  return {
    "exp_norm": jnp.linalg.norm(rotations.exp(v), axis=-1) - 1.0,
    "log_exp": rotations.log(rotations.exp(v)) - v,
    "exp_log": rotations.multiply(rotations.exp(rotations.log(q)), rotations.conjugate(q)),
    "q_qbar": rotations.multiply(q, rotations.conjugate(q)) - identity,
    "rotate_norm": jnp.linalg.norm(turned, axis=-1) - jnp.linalg.norm(w, axis=-1),
    "rotate_back": rotations.rotate_inverse(q, turned) - w,
    "rotate_matrix": jnp.einsum("bij,bj->bi", rotations.to_matrix(q), w) - turned,
    # q and -q are the same rotation: from_matrix picks w >= 0, either sign where w == 0.
    "matrix_back": jnp.minimum(jnp.linalg.norm(back_from_matrix - same_sign, axis=-1),
                               jnp.linalg.norm(back_from_matrix + same_sign, axis=-1)),
    "difference": rotations.difference(rotations.integrate(r, v, 1.0), r) - v,
  }


@given(q=strategies.unit_quaternions((B,)), r=strategies.unit_quaternions((B,)),
       v=strategies.rotation_vectors((B,)), w=strategies.finite_arrays((B, 3)))
def test_valid_rotations_keep_their_algebra(q, r, v, w):
  out = {name: np.asarray(value) for name, value in _algebra(q, r, v, w).items()}
  assert all(np.all(np.isfinite(value)) for value in out.values())
  exp_log = out.pop("exp_log")  # exp(log q) q* is the identity, up to the sign of q
  np.testing.assert_allclose(np.abs(exp_log[:, 0]), 1.0, atol=1e-9)
  np.testing.assert_allclose(exp_log[:, 1:], 0.0, atol=1e-9)
  scale = 1.0 + np.max(np.abs(w))
  for name, value in out.items():
    np.testing.assert_allclose(value, 0.0, atol=1e-9 * scale, err_msg=name)


@jax.jit
def _round_trip(qpos, qvel):
  moved = tangent.integrate_pos(JOINTS, qpos, qvel, 0.5)
  return moved, tangent.differentiate_pos(JOINTS, qpos, moved, 0.5)


@given(quats=strategies.unit_quaternions((2,)), rest=strategies.finite_arrays((4,), bound=2.0),
       qvel=strategies.finite_arrays((NV,), bound=1.0))
def test_differentiate_pos_inverts_integrate_pos(quats, rest, qvel):
  qpos = np.r_[rest[:3], quats[0], quats[1], rest[3]]
  moved, velocity = _round_trip(qpos, qvel)
  assert np.all(np.isfinite(moved)) and np.all(np.isfinite(velocity))
  np.testing.assert_allclose(np.linalg.norm(moved[3:7]), 1.0, atol=1e-12)
  np.testing.assert_allclose(velocity, qvel, atol=1e-9)


# check_grads: every argument checked before fun is called; fun here would fail if called.
def _kwargs(name: str, value: Any) -> dict[str, Any]:
  return {name: value}


def _never_called(x):
  raise AssertionError("fun was called before its arguments were checked")


@given(case=st.sampled_from([("directions", True), ("rtol", True), ("step", True),
                             ("seed", False)]),
       bad=strategies.bad_numbers())
def test_check_grads_refuses_bad_numbers_by_name(case, bad):
  name, positive = case
  assume(positive or not (type(bad) is int and bad == 0))  # seed 0 is a seed
  assume(not (name == "step" and bad is None))  # step None is the default
  with pytest.raises(ValueError, match=rf"^{name} must be"):
    mjbatch_jax.check_grads(_never_called, (jnp.ones(2),), **_kwargs(name, bad))


@given(name=st.sampled_from(["reverse", "raise_on_failure", "jit"]),
       bad=st.sampled_from([0, 1, "yes", None, np.int64(1), 1.0]))
def test_check_grads_refuses_flags_that_are_not_bools(name, bad):
  with pytest.raises(ValueError, match=rf"^{name} must be True or False"):
    mjbatch_jax.check_grads(_never_called, (jnp.ones(2),), **_kwargs(name, bad))


@given(bad=st.sampled_from([np.nan, np.inf, -np.inf]), where=st.integers(0, 2))
def test_check_grads_names_a_nan_input(bad, where):
  x = np.ones(3)
  x[where] = bad
  with pytest.raises(ValueError, match=r"^args\[1\]\['x'\] must not hold NaN"):
    mjbatch_jax.check_grads(_never_called, (jnp.ones(2), {"x": x}))


def test_check_grads_takes_numpy_scalars_as_numbers():
  def fun(x):
    return jnp.sin(x) * x

  x = (jnp.linspace(0.5, 1.5, 3),)
  plain = mjbatch_jax.check_grads(fun, x, directions=3, step=1e-6, rtol=1e-3, seed=4, jit=False)
  scalars: dict[str, Any] = {"directions": np.int64(3), "step": np.float64(1e-6),
                             "rtol": np.float32(1e-3), "seed": np.int32(4), "jit": np.bool_(False)}
  numpy = mjbatch_jax.check_grads(fun, x, **scalars)
  assert plain.passed and numpy.passed and len(numpy.directions) == 3
  assert [d.error for d in plain.directions] == [d.error for d in numpy.directions]


# randomize and tree_replace over a small model's params.
@pytest.fixture(scope="module")
def params():
  with mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(CARTPOLE_XML), num_threads=1) as sim:
    yield sim.params(3, ("body_mass", "geom_friction"))


@given(how=st.sampled_from(["uniform", "log_uniform", "scale"]), side=st.integers(0, 1),
       bad=strategies.bad_numbers(positive=False) | st.sampled_from(strategies.NOT_ARRAYS))
def test_randomize_refuses_bounds_that_are_no_numbers(params, how, side, bad):
  bounds = [0.5, 2.0]
  bounds[side] = bad
  with pytest.raises(ValueError, match=rf"{how}\['body_mass'\]"):
    mjbatch_jax.randomize(jax.random.key(0), params, **_kwargs(how, {"body_mass": tuple(bounds)}))


@given(low=st.floats(0.1, 10.0), gap=st.floats(1e-6, 5.0))
def test_randomize_refuses_low_above_high(params, low, gap):
  with pytest.raises(ValueError, match=r"low <= high"):
    mjbatch_jax.randomize(jax.random.key(0), params, uniform={"body_mass": (low + gap, low)})


def _fits(shape, leaf):
  try:
    return np.broadcast_shapes(shape, leaf) == leaf
  except ValueError:
    return False


@given(shape=strategies.leading_shapes(3, 6).filter(lambda shape: not _fits(shape, (3, 5))))
def test_randomize_refuses_bounds_that_do_not_fit_the_leaf(params, shape):
  assert params["body_mass"].shape == (3, 5)
  with pytest.raises(ValueError, match=r"uniform\['body_mass'\] bounds .* must broadcast to the "
                     r"leaf's shape \(3, 5\)"):
    mjbatch_jax.randomize(jax.random.key(0), params, uniform={"body_mass": (np.zeros(shape), 1.0)})


@given(key=st.sampled_from([0, np.int64(3), "key", None, 1.5, np.zeros(2), np.zeros(2, np.int32),
                            np.zeros(3, np.uint32)]))
def test_randomize_refuses_what_is_no_random_key(params, key):
  with pytest.raises(ValueError, match=r"^key must be one PRNG key"):
    mjbatch_jax.randomize(key, params, uniform={"body_mass": (1.0, 2.0)})


@pytest.fixture(scope="module")
def draw(params):
  return jax.jit(lambda key, low, high: mjbatch_jax.randomize(
    key, params, uniform={"body_mass": (low, high)}, scale={"geom_friction": (low, high)}))


@given(seed=st.integers(0, 2**31 - 1), low=st.floats(0.1, 10.0), width=st.floats(0.0, 5.0))
def test_randomize_draws_within_the_bounds(params, draw, seed, low, width):
  high = low + width
  out = draw(jax.random.key(seed), low, high)
  mass = np.asarray(out["body_mass"])
  assert mass.shape == params["body_mass"].shape
  assert np.all(mass >= low * (1 - 1e-12)) and np.all(mass <= high * (1 + 1e-12))
  ratio = np.asarray(out["geom_friction"]) / np.asarray(params["geom_friction"])
  finite = np.isfinite(ratio)  # frictions of zero divide to NaN
  assert np.all(ratio[finite] >= low * (1 - 1e-12)) and np.all(ratio[finite] <= high * (1 + 1e-12))


@given(shape=strategies.wrong_shapes((5,)))
def test_tree_replace_refuses_a_params_value_of_the_wrong_shape(params, shape):
  nbody = params["body_mass"].shape[-1]
  assert nbody == 5  # the cart-pole's world, cart, pole, puck and mocap
  with pytest.raises(ValueError, match=r"^'p\.body_mass' must have shape \(\.\.\., 5\)"):
    mjbatch_jax.tree_replace({"p": params}, {"p.body_mass": np.ones(shape)})
