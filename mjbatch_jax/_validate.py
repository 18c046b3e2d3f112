"""Checks of arguments by value, shared by the public functions above the core.

Each check returns the value in the form its caller computes with (a Python int or float, a
JAX array) or raises ValueError that names the argument, says what was expected and shows what
was given. The rules are the same everywhere, so that a user meets one convention:

- numpy scalars (np.int64(5), np.float32(0.1)) are the Python numbers they hold, and are shown
  as such in messages ("got 5", never "got np.int64(5)");
- bool is not a number (True is an int to Python, never a count or a gain to a user);
- a value that must be known at trace time (a count, a size, a static setting) refuses a
  traced one, naming it; an array may be traced, and then only its shape is checked, since its
  values are not known yet;
- NaN is refused wherever it is checked; inf only where a limit may be absent (allow_inf).

  from mjbatch_jax import _validate as v
  n = v.integer("num_samples", num_samples, low=1)
  mu = v.number("mu", mu, low=0.0, low_open=True)
  q = v.array("q", q, shape=(..., 4))

The core's own arguments (state, ctrl, params, nstep) are checked in `_checks`, which keeps the
engine's messages; this module serves control, sysid, agents, envs, rotations and tangent.
"""

import math
from collections.abc import Sequence
from typing import Any, TypeGuard

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

# A shape pattern: ints are exact sizes, None any size, and a leading Ellipsis any number of
# leading dimensions, as in (..., 4) for quaternions or (None, nu) for a plan.
Shape = tuple[Any, ...]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def shown(value: Any) -> str:
  """value as a message shows it: numpy scalars as Python numbers, arrays by shape and dtype."""
  if isinstance(value, Tracer):
    return f"a traced {value.dtype} array of shape {tuple(value.shape)}"
  if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
    return f"PRNG keys of shape {tuple(value.shape)}"  # their values cannot be read as numbers
  if isinstance(value, np.generic):
    value = value.item()
  if isinstance(value, (np.ndarray, jax.Array)):
    if value.size <= 8:
      return f"{np.asarray(value).tolist()!r} (shape {tuple(value.shape)})"
    return f"a {value.dtype} array of shape {tuple(value.shape)}"
  text = repr(value)
  return text if len(text) <= 80 else text[:77] + "..."


def static(name: str, value: Any) -> None:
  """ValueError if value is traced: it must be known when the function is traced."""
  if isinstance(value, Tracer):
    raise ValueError(
      f"{name} must be a Python value known at trace time, got {shown(value)}: pass it as a"
      " static argument (jax.jit(f, static_argnames=...)) or outside the jitted function"
    )


def integer(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
  """value as a Python int in [low, high]; numpy integers too, never bool or a float."""
  static(name, value)
  if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
    raise ValueError(f"{name} must be {_int_range(low, high)}, got {shown(value)}")
  value = int(value)
  if (low is not None and value < low) or (high is not None and value > high):
    raise ValueError(f"{name} must be {_int_range(low, high)}, got {value}")
  return value


def number(
  name: str,
  value: Any,
  low: float | None = None,
  high: float | None = None,
  *,
  low_open: bool = False,
  high_open: bool = False,
  allow_inf: bool = False,
) -> float:
  """value as a Python float in the range given; ints and numpy scalars too, never bool or NaN.

  low_open/high_open exclude the bound itself; allow_inf admits an infinite value (inside the
  range), for limits that may be absent.
  """
  static(name, value)
  want = _float_range(low, high, low_open, high_open, allow_inf)
  is_number = isinstance(value, (int, float, np.integer, np.floating))
  if not is_number or isinstance(value, (bool, np.bool_)):
    if isinstance(value, (np.ndarray, jax.Array)) and np.shape(value) == ():
      return number(name, np.asarray(value).item(), low, high, low_open=low_open,
                    high_open=high_open, allow_inf=allow_inf)
    raise ValueError(f"{name} must be {want}, got {shown(value)}")
  value = float(value)
  if math.isnan(value) or (math.isinf(value) and not allow_inf):
    raise ValueError(f"{name} must be {want}, got {value}")
  if low is not None and (value < low or (low_open and value == low)):
    raise ValueError(f"{name} must be {want}, got {value}")
  if high is not None and (value > high or (high_open and value == high)):
    raise ValueError(f"{name} must be {want}, got {value}")
  return value


def flag(name: str, value: Any) -> bool:
  """value as a Python bool; numpy's bool too, never an int."""
  static(name, value)
  if not isinstance(value, (bool, np.bool_)):
    raise ValueError(f"{name} must be True or False, got {shown(value)}")
  return bool(value)


def one_of(name: str, value: Any, options: Sequence[str]) -> str:
  """value, one of the strings in options."""
  if not isinstance(value, str) or value not in options:
    raise ValueError(f"{name} must be one of {tuple(options)}, got {shown(value)}")
  return value


def array(
  name: str,
  x: Any,
  shape: Shape | None = None,
  *,
  finite: bool = False,
  allow_inf: bool = False,
  dtype: str = "floating",
) -> jax.Array:
  """x as a JAX array of the dtype kind given, matching shape; its values checked if concrete.

  shape: a pattern (see Shape). finite: refuse NaN (and inf unless allow_inf) where the values
  are known. dtype: "floating" (float32 or float64; ints are converted to the default float
  dtype, bools refused), "integer", or "any".
  """
  if isinstance(x, str) or x is None:
    raise ValueError(f"{name} must be {_array_kind(dtype)}, got {shown(x)}")
  # Whether the values are known is decided on the input: inside a trace jnp.asarray makes even
  # a numpy constant a tracer, and its values would go unchecked.
  given = x
  concrete = not isinstance(x, Tracer)
  if isinstance(x, (np.ndarray, jax.Array, np.generic)):  # tracers too: no copy to the host
    source_kind = np.dtype(x.dtype).kind
  else:
    try:
      source_kind = np.asarray(x).dtype.kind
    except (TypeError, ValueError):
      raise ValueError(f"{name} must be {_array_kind(dtype)}, got {shown(x)}") from None
  if source_kind not in "biuf" and dtype != "any":
    raise ValueError(f"{name} must be {_array_kind(dtype)}, got {shown(x)} of dtype kind "
                     f"{source_kind!r}")
  try:
    x = jnp.asarray(x)
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be {_array_kind(dtype)}, got {shown(x)}") from None
  if dtype == "floating":
    if x.dtype == jnp.bool_:
      raise ValueError(f"{name} must be float32 or float64 numbers, got booleans")
    if jnp.issubdtype(x.dtype, jnp.integer):
      x = x.astype(jnp.result_type(float))
    elif x.dtype not in _FLOATS:
      raise ValueError(f"{name} must be float32 or float64, got {x.dtype}")
  elif dtype == "integer" and not jnp.issubdtype(x.dtype, jnp.integer):
    raise ValueError(f"{name} must be integers, got {x.dtype}")
  if shape is not None and not matches(x.shape, shape):
    raise ValueError(f"{name} must have shape {pattern(shape)}, got {tuple(x.shape)}")
  if finite and concrete and x.size:
    values = np.asarray(given, dtype=np.result_type(np.asarray(given).dtype, np.float32))
    bad = np.isnan(values) if allow_inf else ~np.isfinite(values)
    if np.any(bad):
      first = tuple(int(i) for i in np.argwhere(bad)[0])
      what = "NaN" if allow_inf else "NaN or inf"
      raise ValueError(f"{name} must not hold {what}: {values[first]} at index {first}")
  return x


def key(name: str, value: Any, batched: bool = False) -> Any:
  """value, one PRNG key (typed, jax.random.key, or raw uint32, jax.random.PRNGKey), or with
  batched a batch (N,) of them; shapes only, so that it runs at trace time."""
  static(f"whether {name} is batched", batched)
  lead = 1 if batched else 0
  dtype = getattr(value, "dtype", None)
  if isinstance(value, (jax.Array, np.ndarray)) and dtype is not None:
    shape = tuple(value.shape)
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
      if len(shape) == lead:
        return value
      got = f"keys of shape {shape}"
    elif dtype == np.uint32 and shape[lead:] == _raw_key_shape() and len(shape) == lead + 1:
      return value
    else:
      got = f"a {dtype} array of shape {shape}"
  else:
    got = shown(value)
  want = ("a batch (N,) of PRNG keys, as jax.random.split(key, N) makes" if batched else
          "one PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed))")
  raise ValueError(f"{name} must be {want}, got {got}")


def _raw_key_shape() -> tuple[int, ...]:
  """The shape of one raw key (jax.random.PRNGKey) of the configured PRNG implementation."""
  impl = str(getattr(jax.config, "jax_default_prng_impl"))  # noqa: B009
  shape = _RAW_KEY_SHAPES.get(impl)
  if shape is None:
    shape = _RAW_KEY_SHAPES[impl] = tuple(jax.eval_shape(jax.random.PRNGKey, 0).shape)
  return shape


_RAW_KEY_SHAPES: dict[str, tuple[int, ...]] = {}


def vector(name: str, x: Any, size: int, **kwargs: Any) -> jax.Array:
  """x as a (size,) array; a scalar is broadcast to it (a bound or a gain for every entry)."""
  x = array(name, x, **kwargs)
  if x.ndim == 0:
    return jnp.broadcast_to(x, (size,))
  if x.shape != (size,):
    raise ValueError(f"{name} must be a number or have shape ({size},), got {tuple(x.shape)}")
  return x


def ctrlrange(name: str, value: Any, nu: int) -> np.ndarray:
  """value as (nu, 2) float64 control limits: lower <= upper, not NaN, infinite for no limit.

  A row whose lower equals its upper is refused: MuJoCo keeps (0, 0) in actuator_ctrlrange for an
  actuator that is not ctrllimited, and a control clipped to it would silently be 0. A control
  fixed on purpose is not a range to clip to. float64 on the host whatever JAX's precision is.
  """
  array(name, value, (nu, 2), allow_inf=True)  # kinds and shape
  limits = np.asarray(value, np.float64)
  if np.any(np.isnan(limits)) or np.any(limits[:, 0] > limits[:, 1]):
    raise ValueError(f"{name} must be (nu, 2) limits, each lower <= upper and not NaN")
  fixed = np.flatnonzero(limits[:, 0] == limits[:, 1])
  if fixed.size:
    raise ValueError(f"{name} has lower == upper for controls {fixed.tolist()} (MuJoCo's (0, 0) "
                     f"of an actuator without ctrllimited?): give -inf, inf where a control is "
                     f"not limited")
  return limits


def is_vector(value: Any) -> TypeGuard[Sequence[Any]]:
  """Whether value is one-dimensional: a sequence (not a string) or a 1-D numpy or JAX array
  (typed as a Sequence: the arrays take len() and indexing alike)."""
  if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | np.ndarray | jax.Array):
    return False
  try:
    return np.ndim(value) == 1
  except ValueError:  # a ragged sequence
    return False


def matches(shape: tuple[int, ...], want: Shape) -> bool:
  """Whether shape fits the pattern want."""
  shape = tuple(shape)
  if want and want[0] is Ellipsis:
    tail = want[1:]
    if len(shape) < len(tail):
      return False
    shape = shape[len(shape) - len(tail):]
    want = tail
  if len(shape) != len(want):
    return False
  return all(w is None or w == s for s, w in zip(shape, want, strict=True))


def pattern(want: Shape) -> str:
  """The pattern as text: (..., 4), (T, 3) with None shown as a dimension of any size."""
  parts = ["..." if w is Ellipsis else ("any" if w is None else str(w)) for w in want]
  return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _int_range(low: int | None, high: int | None) -> str:
  if low is not None and high is not None:
    return f"an int in [{low}, {high}]"
  if low is not None:
    return f"an int >= {low}"
  if high is not None:
    return f"an int <= {high}"
  return "an int"


def _float_range(low: float | None, high: float | None, low_open: bool, high_open: bool,
                 allow_inf: bool) -> str:
  kind = "a number" if allow_inf else "a finite number"
  if low is not None and high is not None:
    return f"{kind} in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
  if low is not None:
    return f"{kind} {'>' if low_open else '>='} {low}"
  if high is not None:
    return f"{kind} {'<' if high_open else '<='} {high}"
  return kind


def _array_kind(dtype: str) -> str:
  return {"floating": "an array of numbers", "integer": "an array of integers"}.get(
    dtype, "an array")
