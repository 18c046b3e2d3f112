"""Properties of sysid's argument checks and of `windows`, over drawn arguments (Hypothesis).

Every count and tolerance of sysid is drawn from bad values (wrong type, bool, NaN, inf, out of
range; as Python and numpy scalars) and good ones (in range, as Python and numpy scalars): a bad
one is a ValueError naming the argument, a good one is taken. fit and report run with their
compiled step replaced by a stub, so that nothing is simulated or compiled: reaching the stub is
the proof that every check passed, and that the checks come before anything runs.
"""

from collections.abc import Callable
from typing import Any

import jax
import mujoco
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mjbatch_jax
from mjbatch_jax import sysid
from mjbatch_jax.sysid import solver

PENDULUM_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body name="link">
      <joint name="hinge" axis="0 1 0" damping="0.2"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge"/></actuator>
</mujoco>
"""


class Reached(Exception):
  """Raised by the stub of the compiled programs: every check before them passed."""


class Prepared:
  """One small problem, shared by the module: nothing here compiles."""

  def __init__(self, sim: mjbatch_jax.Simulator):
    self.sim = sim
    self.parameters = sysid.Parameters(sim, [sysid.Field("dof_damping", ["hinge"], log=True)])
    qpos = sim.layout.qpos
    self.residual = lambda s, y, q: (s[:, qpos] - q) / 1e-3
    self.problem = sysid.Problem(self.parameters, self.residual)
    self.states = np.repeat(np.asarray(sim.init_state(1)), 40, axis=0)
    self.ctrls, self.measured = np.zeros((40, 1)), np.zeros((40, 1))
    self.data = sysid.windows(self.states, self.ctrls, self.measured, 10)
    self.report = sysid.Report(("a", "b"), np.diag([4.0, 0.0]), np.array([2.0, 0.0]), np.eye(2),
                               1, np.array([0.5, np.inf]), np.full(2, np.inf), np.array([0, 1.0]))


@pytest.fixture(scope="module")
def prepared():
  jax.config.update("jax_enable_x64", True)
  with pytest.MonkeyPatch.context() as patch:
    def stub(*args: Any, **kwargs: Any) -> None:
      raise Reached

    patch.setattr(solver, "_Runner", stub)
    sim = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(PENDULUM_XML), num_threads=1)
    yield Prepared(sim)
    sim.close()


def taken(call: Callable[[], Any]) -> None:
  """call runs, or reaches the stubbed programs; a ValueError fails."""
  try:
    call()
  except Reached:
    pass


def numpy_forms(values: st.SearchStrategy, kinds: tuple) -> st.SearchStrategy:
  """Each value as a Python number or as one of the numpy scalar types (a float too large for
  float32 becomes inf, which is as bad)."""
  def cast(pair: tuple) -> Any:
    with np.errstate(over="ignore"):
      return pair[1](pair[0])

  return st.tuples(values, st.sampled_from(kinds)).map(cast)


def not_numbers() -> st.SearchStrategy:
  # (None is left out: it is the default of eps, most and num.)
  return st.one_of(st.booleans(), st.just(np.bool_(True)), st.text(max_size=3), st.just([1]),
                   st.just(np.ones(2)))


INTS = (int, np.int64, np.int32, np.uint16)
FLOATS = (float, np.float64, np.float32)


def good_integers(low: int, high: int) -> st.SearchStrategy:
  return numpy_forms(st.integers(low, high), INTS)


def bad_integers(low: int) -> st.SearchStrategy:
  """Values an int >= low refuses: below it, fractional or not numbers at all."""
  return st.one_of(numpy_forms(st.integers(low - 1000, low - 1), (int, np.int64)),
                   numpy_forms(st.floats(allow_nan=True, allow_infinity=True), FLOATS),
                   not_numbers())


def bad_numbers(low: float, high: float | None = None, open_ends: bool = False
                ) -> st.SearchStrategy:
  """Values a finite number in [low, high] (or (low, high)) refuses."""
  # (Filtered as well: -0.0 is not below 0.0.)
  outside = [st.floats(max_value=low, allow_nan=False).filter(
    lambda x: x < low or (open_ends and x == low))]
  if high is not None:
    outside.append(st.floats(min_value=high, allow_nan=False).filter(
      lambda x: x > high or (open_ends and x == high)))
  else:
    outside.append(st.just(np.inf))
  return st.one_of(numpy_forms(st.one_of(*outside, st.just(np.nan)), (float, np.float64)),
                   not_numbers())


def good_numbers(low: float, high: float) -> st.SearchStrategy:
  return numpy_forms(st.floats(low, high), FLOATS).filter(lambda x: low <= float(x) <= high)


# name in the message, the call with the value, bad values, good values.
COUNTS = {
  "iterations": (lambda p, x: sysid.fit(p.problem, p.data, iterations=x), 1),
  "problem.nstep": (lambda p, x: sysid.Problem(p.parameters, p.residual, nstep=x), 1),
  "length": (lambda p, x: sysid.windows(p.states, p.ctrls, p.measured, x), 1),
  "num": (lambda p, x: p.parameters.params(p.parameters.initial, x), 0),
  "most": (lambda p, x: p.report.summary(most=x), 0),
}
TOLERANCES = {
  "tolerance": (lambda p, x: sysid.fit(p.problem, p.data, tolerance=x), (0.0, None, False)),
  "rtol": (lambda p, x: sysid.report(p.problem, p.data, p.parameters.initial, rtol=x),
           (0.0, 1.0, True)),
  "problem.max_step": (lambda p, x: sysid.Problem(p.parameters, p.residual, max_step=x),
                       (0.0, None, True)),
  "problem.eps": (lambda p, x: sysid.Problem(p.parameters, p.residual, eps=x), (0.0, None, True)),
  r"problem.dampings\[1\]": (
    lambda p, x: sysid.Problem(p.parameters, p.residual, dampings=(0.0, x)), (0.0, None, False)),
  "threshold": (lambda p, x: p.report.unidentifiable(x), (0.0, 1.0, False)),
}


@pytest.mark.parametrize("name", list(COUNTS))
@given(data=st.data())
def test_a_bad_count_is_refused_by_name_and_a_numpy_one_taken(prepared, name, data):
  call, low = COUNTS[name]
  bad = data.draw(bad_integers(low), label="bad")
  with pytest.raises(ValueError, match=f"^{name} must be an int"):
    call(prepared, bad)
  good = data.draw(good_integers(low, 40), label="good")  # 40: the recording's length
  taken(lambda: call(prepared, good))


@pytest.mark.parametrize("name", list(TOLERANCES))
@given(data=st.data())
def test_a_bad_tolerance_is_refused_by_name_and_a_numpy_one_taken(prepared, name, data):
  call, (low, high, open_ends) = TOLERANCES[name]
  bad = data.draw(bad_numbers(low, high, open_ends), label="bad")
  with pytest.raises(ValueError, match=f"^{name} must be a finite number"):
    call(prepared, bad)
  top = 0.999 if high is not None else 1e6
  good = data.draw(good_numbers(1e-9 if open_ends else low, top), label="good")
  taken(lambda: call(prepared, good))


VECTORS = ("prior_width", "prior_mean", "scale", "start_width", "bounds low", "bounds high")


def problem_with(prepared: Prepared, name: str, value: Any) -> sysid.Problem:
  if name.startswith("bounds"):
    bounds = (value, np.inf) if name == "bounds low" else (-np.inf, value)
    return sysid.Problem(prepared.parameters, prepared.residual, bounds=bounds)
  return sysid.Problem(prepared.parameters, prepared.residual, **{name: value})


@pytest.mark.parametrize("name", VECTORS)
@given(size=st.integers(0, 4).filter(lambda k: k != 1), nan_at=st.integers(0, 1))
def test_a_vector_of_the_wrong_length_or_with_nan_is_refused_by_name(prepared, name, size,
                                                                     nan_at):
  wanted = 2 if name == "start_width" else 1  # (qpos, qvel) of the hinge; one number of theta
  if size == wanted:
    size = wanted + 1
  with pytest.raises(ValueError, match=f"^{name} must have shape \\({wanted},\\)"):
    problem_with(prepared, name, np.ones(size))
  value = np.ones(wanted)
  value[min(nan_at, wanted - 1)] = np.nan
  with pytest.raises(ValueError, match=f"^{name}\\[{min(nan_at, wanted - 1)}\\] .* got nan"):
    problem_with(prepared, name, value)


@given(samples=st.integers(1, 60), nu=st.integers(0, 3), tail=st.lists(st.integers(1, 3),
                                                                      max_size=2),
       data=st.data())
def test_windows_cut_the_recording_into_whole_windows(samples, nu, tail, data):
  length = data.draw(st.integers(1, samples), label="length")
  nstate = 3
  states = np.arange(samples * nstate, dtype=float).reshape(samples, nstate)
  ctrls = -np.arange(samples * nu, dtype=float).reshape(samples, nu)
  leaf = np.arange(samples * int(np.prod(tail)), dtype=float).reshape(samples, *tail)
  cut = sysid.windows(states, ctrls, {"y": leaf, "z": [leaf[:, None]]}, np.int64(length))
  count = samples // length
  assert cut.starts.shape == (count, nstate)
  assert cut.ctrls.shape == (count, length, nu)
  assert cut.measured["y"].shape == (count, length, *tail)
  assert cut.measured["z"][0].shape == (count, length, 1, *tail)
  for w in range(count):  # window w starts at row w * length and holds the next length rows
    np.testing.assert_array_equal(cut.starts[w], states[w * length])
    np.testing.assert_array_equal(cut.ctrls[w], ctrls[w * length:(w + 1) * length])
    np.testing.assert_array_equal(cut.measured["y"][w], leaf[w * length:(w + 1) * length])


@given(longer=st.integers(1, 20))
def test_windows_longer_than_the_recording_are_refused(longer):
  states, ctrls = np.zeros((10, 3)), np.zeros((10, 1))
  with pytest.raises(ValueError, match=f"windows of {10 + longer} controls are longer"):
    sysid.windows(states, ctrls, np.zeros(10), 10 + longer)
