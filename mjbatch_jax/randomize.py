"""Domain randomisation and nested replacement: small pure functions over Params and pytrees."""

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from mjbatch_jax.params import Params


def randomize(
  key: jax.Array,
  params: Params,
  uniform: Mapping[str, tuple[Any, Any]] | None = None,
  log_uniform: Mapping[str, tuple[Any, Any]] | None = None,
  scale: Mapping[str, tuple[Any, Any]] | None = None,
) -> Params:
  """New values for some leaves of params, drawn independently per entry.

  Every entry of a leaf gets its own draw: each simulation of a per-simulation leaf, each
  selected row, each component. Bounds broadcast against the leaf's entries (a scalar, or one
  value per component such as friction's three).

  Args:
    key: a JAX random key.
    params: from Simulator.params; the fields named below must be among its fields.
    uniform: field -> (low, high): values uniform in [low, high).
    log_uniform: field -> (low, high), both > 0: values whose log is uniform.
    scale: field -> (low, high): the current values times a factor uniform in [low, high).
    Bounds must be finite with low <= high (ValueError otherwise, before anything is drawn).

  Returns:
    The params with those leaves replaced (same shapes and dtypes).

  Example:
    params = sim.params(1024, ("geom_friction", "body_mass"),
                        select={"geom_friction": ["floor"]})
    params = mjbatch_jax.randomize(key, params, uniform={"geom_friction": (0.4, 1.0)},
                                   scale={"body_mass": (0.8, 1.2)})
  """
  draws = [(name, "uniform", b) for name, b in (uniform or {}).items()]
  draws += [(name, "log_uniform", b) for name, b in (log_uniform or {}).items()]
  draws += [(name, "scale", b) for name, b in (scale or {}).items()]
  names = [name for name, _, _ in draws]
  if len(set(names)) != len(names):
    raise ValueError(f"each field may be randomised one way only, got {names}")
  if not isinstance(params, Params):
    raise ValueError(f"params must come from Simulator.params, got {type(params).__name__}")
  for name, how, bounds in draws:
    if name not in params:
      raise ValueError(f"{name!r} is not among these params' fields {tuple(params)}")
    _check_bounds(name, how, bounds)
  updates = {}
  for (name, how, (low, high)), subkey in zip(draws, jax.random.split(key, max(len(draws), 1)),
                                               strict=False):
    current = jnp.asarray(params[name])
    low = jnp.asarray(low, current.dtype)
    high = jnp.asarray(high, current.dtype)
    u = jax.random.uniform(subkey, current.shape, current.dtype)
    if how == "uniform":
      value = low + (high - low) * u
    elif how == "log_uniform":
      value = jnp.exp(jnp.log(low) + (jnp.log(high) - jnp.log(low)) * u)
    else:
      value = current * (low + (high - low) * u)
    updates[name] = value
  return params.replace(updates)


def _check_bounds(name: str, how: str, bounds: Any) -> None:
  """ValueError unless bounds is a (low, high) pair, finite, low <= high, and > 0 for log_uniform.

  Bounds that are traced (drawn inside a jitted function from traced values) cannot be looked
  at here and are used as given.
  """
  if isinstance(bounds, (str, bytes)) or not hasattr(bounds, "__len__") or len(bounds) != 2:
    raise ValueError(f"{how}[{name!r}] must be a (low, high) pair, got {bounds!r}")
  low, high = bounds
  if isinstance(low, Tracer) or isinstance(high, Tracer):
    return
  try:
    lo, hi = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    lo, hi = np.broadcast_arrays(lo, hi)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{how}[{name!r}] bounds must be numbers or arrays of numbers, got "
                     f"{bounds!r}") from e
  if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
    raise ValueError(f"{how}[{name!r}] bounds must be finite, got low={low!r}, high={high!r}")
  if (lo > hi).any():
    raise ValueError(f"{how}[{name!r}] needs low <= high, got low={low!r}, high={high!r}: swap "
                     "them")
  if how == "log_uniform" and (lo <= 0).any():
    raise ValueError(f"log_uniform[{name!r}] bounds must be > 0 (their logs are drawn), got "
                     f"low={low!r}, high={high!r}; use uniform for bounds that reach 0")


def tree_replace(tree: Any, updates: Mapping[str, Any]) -> Any:
  """tree with the values at dotted paths replaced, through dataclasses, dicts and Params.

  A path walks attributes of dataclasses (and objects with a `replace` method, such as an env
  State or its data) and keys of dicts; a Params takes the rest of the path as a field name,
  since its fields have dots of their own ("opt.gravity").

  Example:
    state = mjbatch_jax.tree_replace(state, {"info.steps": 0, "params.opt.gravity": g})
  """
  for path, value in updates.items():
    tree = _replace_at(tree, path.split("."), value, path)
  return tree


def _replace_at(node: Any, parts: list[str], value: Any, path: str) -> Any:
  if isinstance(node, Params):
    return node.replace({".".join(parts): value})
  head, rest = parts[0], parts[1:]
  if isinstance(node, Mapping):
    if head not in node:
      raise KeyError(f"{path!r}: no key {head!r}")
    new = node[head] if rest else None
    inner = _replace_at(new, rest, value, path) if rest else value
    return {**node, head: inner}
  if not hasattr(node, head):
    raise KeyError(f"{path!r}: {type(node).__name__} has no field {head!r}")
  inner = _replace_at(getattr(node, head), rest, value, path) if rest else value
  if hasattr(node, "replace"):  # env States and their data, flax structs
    return node.replace(**{head: inner})
  if dataclasses.is_dataclass(node) and not isinstance(node, type):
    return dataclasses.replace(node, **{head: inner})
  raise KeyError(f"{path!r}: cannot replace a field of {type(node).__name__}")
