"""Domain randomisation and nested replacement: small pure functions over Params and pytrees."""

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from mjbatch_jax import _validate
from mjbatch_jax.params import Params
from mjbatch_jax.rotations import _checked


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
    Bounds must be finite with low <= high, and broadcast to the leaf's shape (ValueError
    otherwise, before anything is drawn); traced bounds are checked on their shapes only.

  Returns:
    The params with those leaves replaced (same shapes and dtypes).

  Example:
    params = sim.params(1024, ("geom_friction", "body_mass"),
                        select={"geom_friction": ["floor"]})
    params = mjbatch_jax.randomize(key, params, uniform={"geom_friction": (0.4, 1.0)},
                                   scale={"body_mass": (0.8, 1.2)})
  """
  _check_key(key)
  draws = []
  for how, table in (("uniform", uniform), ("log_uniform", log_uniform), ("scale", scale)):
    if table is None:
      continue
    if not isinstance(table, Mapping):
      raise ValueError(f"{how} must be a dict of field name -> (low, high), got "
                       f"{_validate.shown(table)}")
    for name, bounds in table.items():
      if not isinstance(name, str):
        raise ValueError(f"{how}'s keys must be field names (strings), got {_validate.shown(name)}")
      draws.append((name, how, bounds))
  names = [name for name, _, _ in draws]
  if len(set(names)) != len(names):
    raise ValueError(f"each field may be randomised one way only, got {names}")
  if not isinstance(params, Params):
    raise ValueError(f"params must come from Simulator.params, got {type(params).__name__}")
  for name, how, bounds in draws:
    if name not in params:
      raise ValueError(f"{name!r} is not among these params' fields {tuple(params)}")
    _check_bounds(name, how, bounds, tuple(jnp.shape(params[name])))
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


def _check_key(key: Any) -> None:
  """ValueError unless key is one JAX random key: randomize draws every entry from one key."""
  _validate.key("key", key)


def _check_bounds(name: str, how: str, bounds: Any, leaf: tuple[int, ...]) -> None:
  """ValueError unless bounds is a (low, high) pair of numbers or arrays that broadcast to the
  leaf's shape, finite, low <= high, and > 0 for log_uniform.

  Bounds that are traced (drawn inside a jitted function from traced values) are checked on
  their shapes; their values cannot be looked at here and are used as given.
  """
  where = f"{how}[{name!r}]"
  if isinstance(bounds, (str, bytes)) or not hasattr(bounds, "__len__") or len(bounds) != 2:
    raise ValueError(f"{where} must be a (low, high) pair, got {_validate.shown(bounds)}")
  low, high = bounds
  shapes = []
  for side, value in (("low", low), ("high", high)):
    shapes.append(tuple(_validate.array(f"{where} {side}", value).shape))
  try:
    fits = np.broadcast_shapes(*shapes, leaf) == leaf
  except ValueError:
    fits = False
  if not fits:
    raise ValueError(f"{where} bounds of shapes {shapes[0]} and {shapes[1]} must broadcast to "
                     f"the leaf's shape {leaf}")
  if isinstance(low, Tracer) or isinstance(high, Tracer):
    return
  lo, hi = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
  lo, hi = np.broadcast_arrays(lo, hi)
  if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
    raise ValueError(f"{where} bounds must be finite, got low={_validate.shown(low)}, "
                     f"high={_validate.shown(high)}")
  if (lo > hi).any():
    raise ValueError(f"{where} needs low <= high, got low={_validate.shown(low)}, "
                     f"high={_validate.shown(high)}: swap them")
  if how == "log_uniform" and (lo <= 0).any():
    raise ValueError(f"log_uniform[{name!r}] bounds must be > 0 (their logs are drawn), got "
                     f"low={_validate.shown(low)}, high={_validate.shown(high)}; use uniform for "
                     "bounds that reach 0")


def tree_replace(tree: Any, updates: Mapping[str, Any]) -> Any:
  """tree with the values at dotted paths replaced, through dataclasses, dicts and Params.

  A path walks attributes of dataclasses (and objects with a `replace` method, such as an env
  State or its data) and keys of dicts; a Params takes the rest of the path as a field name,
  since its fields have dots of their own ("opt.gravity"). Nothing is changed in place: the
  nodes along each path are new, the rest of the tree is shared.

  Args:
    tree: the pytree to update: a dataclass, a dict, a Params, or an object with a `replace`
      method (an env State), nested in any mix.
    updates: dotted path -> new value, applied in order. A value for a Params field is an array
      of numbers of that field's entry shape, after any leading simulation dimensions (exactly
      the entry shape for a shared field).

  Returns:
    A tree of the same structure with the values replaced.

  Raises:
    ValueError: updates is not a mapping of dotted paths, a path leads nowhere (named), a node
      on a path cannot be replaced, or a value for a Params field has the wrong shape or is not
      numbers.

  Example:
    state = mjbatch_jax.tree_replace(state, {"info.steps": 0, "params.opt.gravity": g})
  """
  if not isinstance(updates, Mapping):
    raise ValueError(f"updates must be a dict of dotted path -> value, got "
                     f"{_validate.shown(updates)}")
  for path in updates:
    if not isinstance(path, str) or not all(path.split(".")):
      raise ValueError(f"updates' keys must be dotted paths such as 'info.steps', got "
                       f"{_validate.shown(path)}")
  for path, value in updates.items():
    tree = _replace_at(tree, path.split("."), value, path)
  return tree


def _replace_at(node: Any, parts: list[str], value: Any, path: str) -> Any:
  if isinstance(node, Params):
    field = ".".join(parts)
    if field not in node:
      raise ValueError(f"{path!r}: {field!r} is not among these params' fields {tuple(node)}")
    spec = node.spec
    i = spec.fields.index(field)
    entry = tuple(spec.leaf_shape(i))
    # Leading dimensions are the simulations' (and vmap may have taken them): the core checks
    # them against the state; the entry's own shape is the field's.
    _checked(repr(path), value, entry if spec.is_shared(i) else (..., *entry))
    return node.replace({field: value})
  head, rest = parts[0], parts[1:]
  if isinstance(node, Mapping):
    if head not in node:
      raise ValueError(f"{path!r}: no key {head!r}")
    new = node[head] if rest else None
    inner = _replace_at(new, rest, value, path) if rest else value
    return {**node, head: inner}
  if not hasattr(node, head):
    raise ValueError(f"{path!r}: {type(node).__name__} has no field {head!r}")
  inner = _replace_at(getattr(node, head), rest, value, path) if rest else value
  if hasattr(node, "replace"):  # env States and their data, flax structs
    return node.replace(**{head: inner})
  if dataclasses.is_dataclass(node) and not isinstance(node, type):
    return dataclasses.replace(node, **{head: inner})
  raise ValueError(f"{path!r}: cannot replace a field of {type(node).__name__}")
