"""The env state: a Playground-style `State` whose `data` reads like MJX's `Data`.

`Data` holds a simulation's state row, its params and the mjData fields its env observes; MJX's
names (`data.qpos`, `data.ctrl`, `data.site_xpos`, ...) read slices of the row or those fields.
Both classes are pytrees without flax, so they pass through jit, vmap, scan and Brax's wrappers.
"""

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from mjbatch_jax._validate import shown
from mjbatch_jax.layout import StateLayout
from mjbatch_jax.params import Params


@jax.tree_util.register_pytree_node_class
class Data:
  """A simulation as MJX's `Data` reads: the row's parts and the observed mjData fields.

  Holds `row` ((..., nstate): one env's row, or a batch's), `params` (the env's model values,
  which the physics of this simulation uses), `warnings` ((..., mjNWARNING) int32 counts of the
  MuJoCo warnings of the last physics call) and `fields` (the mjData fields its env observes,
  computed after each physics call). Attributes read either: `data.qpos`, `data.time` and the
  other parts of a row are views of `row`; `data.site_xpos` and the like are stored arrays.
  `replace` writes parts back into the row. As in MJX, replacing qpos leaves the stored fields
  as they were until the env's `forward` or next step recomputes them.

    data = env.make_data(qpos=qpos)
    data.qpos, data.site_xpos                 # (nq,), (nsite, 3)
    data = data.replace(qvel=jnp.zeros(nv))   # a new row with those qvel
  """

  __slots__ = ("_fields", "_layout", "params", "row", "warnings")

  def __init__(
    self,
    row: Any,
    params: Params,
    warnings: Any,
    fields: Mapping[str, Any],
    layout: StateLayout,
  ):
    """Wraps a row and its fields; envs make Data with `Env.make_data` and `pipeline_step`.

    Args:
      row: (..., nstate) mjSTATE_INTEGRATION rows: one env's row, or a batch's.
      params: the env's Params, which the physics of this simulation uses.
      warnings: (..., mjNWARNING) int32 counts of the MuJoCo warnings of the last physics call.
      fields: the observed mjData fields by name, as the last physics call computed them.
      layout: the StateLayout of the rows, which names their parts (`data.qpos`, ...).
    """
    self.row = row
    self.params = params
    self.warnings = warnings
    self._fields = dict(fields)
    self._layout = layout

  @property
  def layout(self) -> StateLayout:
    """Where each part (qpos, qvel, ctrl, ...) lies in the row."""
    return self._layout

  @property
  def fields(self) -> dict[str, Any]:
    """The stored mjData fields by name (a copy of the dict)."""
    return dict(self._fields)

  def __getattr__(self, name: str) -> Any:
    # Only reached when ordinary lookup fails; private names (copy, pickle) must not recurse.
    if name.startswith("_"):
      raise AttributeError(name)
    fields = self._fields
    if name in fields:
      return fields[name]
    layout = self._layout
    if name in layout.names():
      start, stop, shape = layout.entry(name)
      lead = self.row.shape[:-1]
      if name == "time":
        return self.row[..., start]
      return self.row[..., start:stop].reshape(*lead, *shape)
    raise AttributeError(
      f"Data has no field {name!r}: the row holds {layout.names()} and the env observes"
      f" {tuple(fields)}; add it to the env's `observe` to compute it after each step"
    )

  def replace(self, **changes: Any) -> "Data":
    """A copy with the given parts of the row, stored fields, row, params or warnings replaced.

    Example:
      data = data.replace(qpos=qpos, qvel=jnp.zeros_like(data.qvel))
    """
    row, params, warnings = self.row, self.params, self.warnings
    fields = dict(self._fields)
    lead = self.row.shape[:-1]
    names = self._layout.names()
    for name, value in changes.items():
      if name == "row":
        row = value
      elif name == "params":
        params = value
      elif name == "warnings":
        warnings = value
      elif name in fields:
        fields[name] = value
      elif name in names:
        start, stop, shape = self._layout.entry(name)
        try:
          value = jnp.broadcast_to(jnp.asarray(value, dtype=row.dtype), (*lead, *shape))
        except (TypeError, ValueError):
          got = tuple(value.shape) if hasattr(value, "shape") else shown(value)
          raise ValueError(f"{name} must be numbers of shape {(*lead, *shape)} (or broadcast to"
                           f" it), got {got}") from None
        row = row.at[..., start:stop].set(value.reshape(*lead, stop - start))
      else:
        raise ValueError(
          f"Data has no field {name!r} to replace: the row holds {names}, the stored fields are"
          f" {tuple(fields)}, and row, params and warnings"
        )
    return Data(row, params, warnings, fields, self._layout)

  def __repr__(self) -> str:
    shapes = {name: getattr(value, "shape", None) for name, value in self._fields.items()}
    return f"Data(row={getattr(self.row, 'shape', None)}, fields={shapes}, params={self.params})"

  def tree_flatten(self) -> tuple[tuple[Any, ...], tuple[StateLayout, tuple[str, ...]]]:
    names = tuple(self._fields)
    children = (self.row, self.params, self.warnings, *(self._fields[n] for n in names))
    return children, (self._layout, names)

  @classmethod
  def tree_unflatten(cls, aux: tuple[StateLayout, tuple[str, ...]], children: Any) -> "Data":
    layout, names = aux
    row, params, warnings, *values = children
    return cls(row, params, warnings, dict(zip(names, values, strict=True)), layout)


@dataclasses.dataclass(frozen=True)
class State:
  """An env's state, with MuJoCo Playground's fields; a pytree.

  `metrics` and `info` are plain dicts that wrappers (ours and Brax's) update in place.

    state = env.reset(jax.random.key(0))
    state = state.replace(reward=jnp.zeros(()))

  Attributes:
    data: the simulation, a Data (its row, params, warnings and observed fields).
    obs: the observation the policy sees: an array, or a dict of them.
    reward: the reward of the last step, a scalar per env (zero after reset).
    done: whether the episode ended at the last step, a float scalar per env (1.0 or 0.0).
    metrics: per-env values to log, by name.
    info: what the env and wrappers carry between steps (step counts, truncation, ...).
  """

  data: Data
  obs: Any
  reward: Any
  done: Any
  metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
  info: dict[str, Any] = dataclasses.field(default_factory=dict)

  def replace(self, **changes: Any) -> "State":
    return dataclasses.replace(self, **changes)

  def tree_replace(self, changes: Mapping[str, Any]) -> "State":
    """Replace by dotted paths, as Playground's State does.

    Example:
      state = state.tree_replace({"data.qvel": jnp.zeros(nv), "reward": jnp.zeros(())})
    """
    new = self
    for path, value in changes.items():
      new = _tree_replace(new, path.split("."), value)
    return new


def _tree_replace(base: Any, path: list[str], value: Any) -> Any:
  if len(path) == 1:
    return base.replace(**{path[0]: value})
  return base.replace(**{path[0]: _tree_replace(getattr(base, path[0]), path[1:], value)})


jax.tree_util.register_dataclass(
  State,
  data_fields=["data", "obs", "reward", "done", "metrics", "info"],
  meta_fields=[],
)


def __getattr__(name: str) -> Any:
  if name == "RowLayout":  # StateLayout is hashable now; RowLayout was its twin
    warnings.warn("mjbatch_jax.envs.RowLayout is mjbatch_jax.StateLayout now; RowLayout will be "
                  "removed in the next release", DeprecationWarning, stacklevel=2)
    return StateLayout
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
