"""Hypothesis strategies for the property-based tests of public functions' arguments.

Shared by the tests/test_properties*.py files, so that the next audit's classes of bad input
(a wrong last dimension, a NaN count, a bool for a number, a string for an array) are drawn
from one place rather than listed per test:

  @given(shape=strategies.wrong_shapes((4,)))
  def test_rotate_names_q(shape):
    with pytest.raises(ValueError, match="q must have shape"):
      rotations.rotate(np.zeros(shape), np.zeros(3))

Shapes are kept small (few leading dimensions of few entries): the properties are about how an
argument is checked, which does not grow with its size, and small arrays keep examples cheap.
"""

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

# Values that are not a count, a size or a tolerance, each for its own reason: NaN and inf,
# negative and zero, a bool (an int to Python, never a number to a user), a string of a number,
# None, and the same as NumPy scalars (which must be judged as the Python numbers they hold).
BAD_NUMBERS: tuple[Any, ...] = (
  math.nan, math.inf, -math.inf, -1, -1.0, 0, 0.0, True, False, "3", None,
  np.float64(math.nan), np.float32(math.inf), np.int64(-1), np.bool_(True), np.float32(0.0),
)

# Values that are not arrays of numbers at all.
NOT_ARRAYS: tuple[Any, ...] = ("3", "abc", None, b"12", {"a": 1}, object())

NUMPY_NUMBER_TYPES = (np.float32, np.float64, np.int32, np.int64)


def bad_numbers(*, positive: bool = True) -> st.SearchStrategy[Any]:
  """A value that a number argument must refuse.

  positive: the argument must be > 0 (a tolerance, a step, a count), so that -1 and 0 are bad;
  with positive=False only the values that are never numbers (NaN, inf, bools, strings, None).
  """
  if positive:
    return st.sampled_from(BAD_NUMBERS)
  return st.sampled_from([x for x in BAD_NUMBERS if _never_a_number(x)])


def _never_a_number(x: Any) -> bool:
  if isinstance(x, (bool, np.bool_)) or x is None or isinstance(x, str):
    return True
  return not math.isfinite(float(x))


def numpy_scalars(values: st.SearchStrategy[float], types: tuple[type, ...] = NUMPY_NUMBER_TYPES
                  ) -> st.SearchStrategy[Any]:
  """values as NumPy scalars of the types given (float32, int64, ...), drawn per example.

  Integer types take the value rounded; callers that need exact equality with the Python number
  compare against float(the scalar).
  """
  def convert(pair: tuple[float, type]) -> Any:
    value, kind = pair
    if np.issubdtype(kind, np.integer):
      return kind(round(value))
    return kind(value)

  return st.tuples(values, st.sampled_from(types)).map(convert)


def leading_shapes(max_dims: int = 2, max_side: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
  """Leading (batch) dimensions: () up to max_dims dimensions of 1 to max_side entries."""
  return hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=1, max_side=max_side)


def wrong_shapes(trailing: tuple[int, ...], max_dims: int = 2, max_side: int = 3
                 ) -> st.SearchStrategy[tuple[int, ...]]:
  """Shapes that do NOT end in trailing: random leading dimensions, then a wrong ending.

  The wrong ending is trailing with one dimension changed (a (..., 3) quaternion, a (..., 3, 4)
  matrix), or too few dimensions to hold trailing at all (a scalar, a bare (4,) for (..., 3, 3)).
  """
  def changed(args: tuple[tuple[int, ...], int, int]) -> tuple[int, ...]:
    lead, index, size = args
    tail = list(trailing)
    tail[index] = size
    return (*lead, *tail)

  one_changed = st.tuples(
    leading_shapes(max_dims, max_side),
    st.integers(0, len(trailing) - 1),
    st.integers(0, max(trailing) + 3),
  ).filter(lambda args: args[2] != trailing[args[1]]).map(changed)
  # Fewer dimensions than trailing has: no such shape can end in it.
  too_few = st.integers(0, len(trailing) - 1).flatmap(
    lambda n: hnp.array_shapes(min_dims=n, max_dims=n, min_side=1, max_side=max_side)
    if n else st.just(()))
  return st.one_of(one_changed, too_few)


def clashing_leads(max_side: int = 4) -> st.SearchStrategy[tuple[tuple[int, ...], tuple[int, ...]]]:
  """Two leading shapes that do not broadcast against each other: some dimension is n in one and
  m in the other, both > 1 and different."""
  def build(args: tuple[tuple[int, ...], int, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    rest, n, m = args
    return (n, *rest), (m, *rest)

  return st.tuples(leading_shapes(1, max_side), st.integers(2, max_side),
                   st.integers(2, max_side)).filter(lambda args: args[1] != args[2]).map(build)


def finite_arrays(shape: tuple[int, ...] | st.SearchStrategy[tuple[int, ...]],
                  dtype: Any = np.float64, bound: float = 10.0
                  ) -> st.SearchStrategy[np.ndarray]:
  """Arrays of finite floats in [-bound, bound] of the shape (or shapes) given."""
  width = 32 if np.dtype(dtype) == np.float32 else 64
  elements = st.floats(-bound, bound, allow_nan=False, allow_infinity=False, width=width)
  return hnp.arrays(dtype, shape, elements=elements)


def unit_quaternions(shape: tuple[int, ...] = ()) -> st.SearchStrategy[np.ndarray]:
  """(*shape, 4) float64 unit quaternions, w of either sign, none near the zero vector."""
  raw = finite_arrays((*shape, 4), bound=1.0).filter(
    lambda q: bool(np.all(np.linalg.norm(q, axis=-1) > 0.1)))
  return raw.map(lambda q: q / np.linalg.norm(q, axis=-1, keepdims=True))


def rotation_vectors(shape: tuple[int, ...] = (), max_angle: float = math.pi - 1e-3
                     ) -> st.SearchStrategy[np.ndarray]:
  """(*shape, 3) float64 rotation vectors of angle at most max_angle (below pi, where the log
  map is the exponential's inverse), the zero rotation among them."""
  def scaled(args: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    direction, angle = args
    norm = np.linalg.norm(direction, axis=-1, keepdims=True)
    unit = np.where(norm > 1e-3, direction / np.maximum(norm, 1e-300), [1.0, 0.0, 0.0])
    return unit * angle[..., None]

  angles = hnp.arrays(np.float64, shape, elements=st.one_of(
    st.just(0.0), st.floats(0.0, max_angle, allow_nan=False)))
  return st.tuples(finite_arrays((*shape, 3), bound=1.0), angles).map(scaled)
