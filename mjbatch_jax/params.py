"""Per-simulation model values as a JAX pytree that also names its simulator."""

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class SimSpec:
  """What the pure functions need to know of a simulator, fixed at trace time.

  Hashable, so it is the static part of a Params pytree and jit retraces only when it changes.
  """

  engine: int  # the C++ engine's registry id
  nstate: int
  nu: int
  nsensordata: int
  fields: tuple[str, ...] = ()
  shapes: tuple[tuple[int, ...], ...] = ()  # of one simulation's values of each field

  def with_fields(self, fields: tuple[str, ...], shapes: tuple[tuple[int, ...], ...]) -> "SimSpec":
    return dataclasses.replace(self, fields=fields, shapes=shapes)

  @property
  def attribute(self) -> str:
    """The fields as the FFI handlers take them: "name:size,name:size"."""
    return ",".join(f"{n}:{int(np.prod(s))}" for n, s in zip(self.fields, self.shapes, strict=True))


@jax.tree_util.register_pytree_node_class
class Params(Mapping):
  """Per-simulation values of model fields, a pytree whose leaves are (N, ...) arrays.

  Made by `Simulator.params`. Its leaves are what jax.grad and friends differentiate; its static
  part names the simulator, so `step(state, ctrl, params)` needs nothing else.

    params = sim.params(256, fields=("body_mass", "opt.gravity"))
    heavier = params.replace({"body_mass": params["body_mass"] * 1.1})
  """

  def __init__(self, spec: SimSpec, values: tuple[Any, ...]):
    self._spec = spec
    self._values = tuple(values)

  @property
  def spec(self) -> SimSpec:
    return self._spec

  def __getitem__(self, name: str) -> Any:
    try:
      return self._values[self._spec.fields.index(name)]
    except ValueError:
      raise KeyError(f"{name!r} is not among these params' fields {self._spec.fields}") from None

  def __iter__(self) -> Iterator[str]:
    return iter(self._spec.fields)

  def __len__(self) -> int:
    return len(self._values)

  def replace(self, values: Mapping[str, Any]) -> "Params":
    """A copy with the given fields' values replaced; names must be among the fields."""
    new = list(self._values)
    for name, value in values.items():
      if name not in self._spec.fields:
        raise KeyError(f"{name!r} is not among these params' fields {self._spec.fields}")
      new[self._spec.fields.index(name)] = value
    return Params(self._spec, tuple(new))

  def __repr__(self) -> str:
    shapes = dict(zip(self._spec.fields, (getattr(v, "shape", None) for v in self._values),
                      strict=True))
    return f"Params(engine={self._spec.engine}, {shapes})"

  def tree_flatten(self) -> tuple[tuple[Any, ...], SimSpec]:
    return self._values, self._spec

  @classmethod
  def tree_unflatten(cls, spec: SimSpec, values: Any) -> "Params":
    return cls(spec, tuple(values))
