"""Robustness as an object: a nominal robot and randomised copies of it, drawn per purpose.

A plan or a policy is robust when it still works on robots that differ from the model it was made
for. An `Ensemble` names what differs (model fields, as `Simulator.params` takes them) and how
(a draw, such as a partial of `mjbatch_jax.randomize`), and hands out Params whose row 0 is the
nominal robot and whose other rows are randomised robots. Each purpose has its own seed, so the
robots a search improves on are never the ones a validation chooses with or an evaluation
reports on; robots of one purpose, seed and iteration are the same in every call and process.

`evaluate` turns per-robot metrics and a pass rule into an `EnsembleResult`: which robots pass,
whether the nominal one does, and the share of randomised robots that do ("lands on 13 of 16
randomised robots": `result.share >= 0.8`).

Example:
  draw = functools.partial(mjbatch_jax.randomize, scale={"body_mass": (0.9, 1.1)},
                           uniform={"geom_friction": (0.6, 1.0)})
  robots = Ensemble(sim, ("body_mass", "geom_friction"), draw,
                    select={"geom_friction": ["floor"]}, set_const=True)
  params = robots.params("evaluation", 16)           # 17 rows: nominal, then 16 randomised
  states, sensordata = mjbatch_jax.rollout(starts, ctrls, params)
  result = evaluate([metrics_of(states[i]) for i in range(17)], lambda m: m["landed"])
  print(result)              # the nominal robot passes; 13 of 16 randomised robots pass (81%)
  result.meets(0.8)                                   # True
"""

import dataclasses
import types
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.core import Tracer

from mjbatch_jax import _validate
from mjbatch_jax.params import Params
from mjbatch_jax.simulator import Simulator

DEFAULT_SEEDS = {"search": 0, "validation": 1, "evaluation": 2}
"""An Ensemble's seeds unless given: purpose -> seed for the purposes a robustness study
usually keeps apart: robots a search optimises on ("search"), robots a choice (of gains, of a
checkpoint) is made on ("validation"), and robots the result is reported on ("evaluation")."""

# Seeds are jax.random.key's: non-negative and within 32 bits, the same on every platform.
_MAX_SEED = 2**32 - 1
# Iterations are folded into the key as int32 (jax.random.fold_in without x64).
_MAX_ITERATION = 2**31 - 1


@dataclasses.dataclass(frozen=True, eq=False)
class Ensemble:
  """A nominal robot and randomised ones, as Params rows drawn per purpose.

  Attributes:
    sim: the Simulator of the nominal model (made from an MjModel if one is given).
    fields: the model fields that differ between robots (as Simulator.params takes them).
    draw: (key, params) -> params: new values for some leaves of params (count rows of the
      nominal robot), e.g. functools.partial(mjbatch_jax.randomize, scale=...). It must return
      Params of the same fields, shapes and dtypes.
    select: for some fields, the rows the leaves hold (as Simulator.params takes it).
    set_const: recompute each robot's derived constants (Simulator.params' set_const): needed
      when a field feeds them (body_mass, body_inertia, geom sizes, actuator_gear, ...).
    seeds: purpose -> seed (default DEFAULT_SEEDS). A purpose's name is folded into its key
      too, so purposes never share robots even under one seed (dict.fromkeys(purposes, seed)).

  Equal arguments give equal robots: two Ensembles with the same model, fields, draw and seeds
  hand out the same rows, bit for bit in eager calls. Inside jax.jit (a traced iteration) XLA
  may fuse the draw's arithmetic, and a value can differ in its last bit.
  """

  sim: Simulator
  fields: tuple[str, ...]
  draw: Callable[[jax.Array, Params], Params]
  select: Mapping[str, Sequence[int | str]] | None
  set_const: bool
  seeds: Mapping[str, int]
  _nominal: Params = dataclasses.field(repr=False)  # one row of the nominal robot

  def __init__(
    self,
    sim: Simulator | mujoco.MjModel,
    fields: Sequence[str],
    draw: Callable[[jax.Array, Params], Params],
    *,
    select: Mapping[str, Sequence[int | str]] | None = None,
    set_const: bool = False,
    seeds: Mapping[str, int] | None = None,
  ):
    if isinstance(sim, mujoco.MjModel):
      sim = Simulator(sim)
    if not isinstance(sim, Simulator):
      raise ValueError(f"sim must be a mjbatch_jax.Simulator or a mujoco.MjModel, got "
                       f"{_validate.shown(sim)}")
    if isinstance(fields, str):
      fields = (fields,)
    if not isinstance(fields, Sequence) or not fields:
      raise ValueError(f"fields must name at least one model field (the ones that differ between "
                       f"robots), got {_validate.shown(fields)}")
    if not callable(draw):
      raise ValueError(f"draw must be a function (key, params) -> params, got "
                       f"{_validate.shown(draw)}")
    set_const = _validate.flag("set_const", set_const)
    seeds = _check_seeds(DEFAULT_SEEDS if seeds is None else seeds)
    # Read-only views: the robots of a purpose must not change under a caller's later edit.
    seeds = types.MappingProxyType(seeds)
    if select is not None and not isinstance(select, Mapping):
      raise ValueError(f"select must be a mapping {{field: rows (indices or names)}}, as "
                       f"Simulator.params takes it (e.g. {{'body_mass': ['torso']}}), or None, got "
                       f"{_validate.shown(select)}")
    select = None if select is None else types.MappingProxyType(dict(select))
    # The nominal row now: Simulator.params checks the fields and select before any draw.
    nominal = sim.params(1, tuple(fields), select=None if select is None else dict(select),
                         set_const=set_const)
    for name, value in (("sim", sim), ("fields", tuple(fields)), ("draw", draw),
                        ("select", select), ("set_const", set_const), ("seeds", seeds)):
      object.__setattr__(self, name, value)
    object.__setattr__(self, "_nominal", nominal)

  @property
  def purposes(self) -> tuple[str, ...]:
    """The purposes robots are drawn for: the keys of seeds."""
    return tuple(self.seeds)

  def nominal(self, count: int) -> Params:
    """count rows of the nominal robot, with the fields of params(): the two concatenate."""
    count = _validate.integer("count", count, low=1)
    return jax.tree.map(lambda leaf: jnp.repeat(leaf, count, axis=0), self._nominal)

  def key(self, purpose: str, iteration: Any = 0) -> jax.Array:
    """The key the robots of (purpose, iteration) are drawn from: the purpose's seed, then the
    purpose's name and the iteration folded in (a traced iteration is allowed)."""
    purpose = _validate.one_of("purpose", purpose, self.purposes)
    iteration = _check_iteration(iteration)
    key = jax.random.key(self.seeds[purpose])
    key = jax.random.fold_in(key, zlib.crc32(purpose.encode()) & 0x7FFFFFFF)
    return jax.random.fold_in(key, iteration)

  def params(self, purpose: str, count: int, *, nominal: bool = True, iteration: Any = 0
             ) -> Params:
    """Params of count randomised robots, after the nominal one as row 0 when nominal.

    Args:
      purpose: one of purposes ("search", "validation", "evaluation" by default): whose seed
        the robots are drawn with.
      count: randomised robots, >= 1.
      nominal: put the nominal robot first (count + 1 rows), as `evaluate` and
        control.ensemble_guard expect by default.
      iteration: an int >= 0 (may be traced): fresh robots for each iteration of a search, the
        same ones for the same iteration.

    Returns:
      Params with (count + 1, ...) leaves (count without nominal).

    Raises:
      ValueError: on an unknown purpose, a count below 1, or a draw that returns anything but
        Params of the same fields, shapes and dtypes, or (outside jit) values that are not
        finite; before any physics runs.
    """
    purpose = _validate.one_of("purpose", purpose, self.purposes)
    count = _validate.integer("count", count, low=1)
    nominal = _validate.flag("nominal", nominal)
    template = self.nominal(count)
    drawn = self.draw(self.key(purpose, iteration), template)
    _check_drawn(drawn, template)
    if not nominal:
      return drawn
    return jax.tree.map(lambda a, b: jnp.concatenate([a, b]), self._nominal, drawn)


def _check_seeds(seeds: Any) -> dict[str, int]:
  if not isinstance(seeds, Mapping) or not seeds:
    raise ValueError(f"seeds must be a dict of purpose -> seed with at least one purpose, got "
                     f"{_validate.shown(seeds)}")
  checked = {}
  for purpose, seed in seeds.items():
    if not isinstance(purpose, str) or not purpose:
      raise ValueError(f"seeds' keys must be purposes' names (strings), got "
                       f"{_validate.shown(purpose)}")
    checked[purpose] = _validate.integer(f"seeds[{purpose!r}]", seed, low=0, high=_MAX_SEED)
  return checked


def _check_iteration(iteration: Any) -> Any:
  if isinstance(iteration, Tracer):
    if iteration.shape != () or not jnp.issubdtype(iteration.dtype, jnp.integer):
      raise ValueError(f"iteration must be an int in [0, {_MAX_ITERATION}], got "
                       f"{_validate.shown(iteration)}")
    return iteration
  if isinstance(iteration, jax.Array) and iteration.shape == () and jnp.issubdtype(
      iteration.dtype, jnp.integer):  # a concrete JAX scalar, as numpy's are taken
    iteration = int(iteration)
  return _validate.integer("iteration", iteration, low=0, high=_MAX_ITERATION)


def _check_drawn(drawn: Any, template: Params) -> None:
  """ValueError unless the draw returned Params like template: same spec, shapes and dtypes."""
  if not isinstance(drawn, Params):
    raise ValueError(f"draw must return the Params it was given with new values, got "
                     f"{type(drawn).__name__}")
  if drawn.spec != template.spec:
    what = (f"Params of {drawn.spec.fields}" if drawn.spec.fields != template.spec.fields else
            "Params of the same fields but of another model, select or set_const (another "
            "Simulator's?)")
    raise ValueError(f"draw must return Params of the fields {template.spec.fields} of this "
                     f"ensemble's model (same select and set_const), got {what}")
  for name in template:
    want, got = template[name], drawn[name]
    if jnp.shape(got) != jnp.shape(want) or jnp.result_type(got) != jnp.result_type(want):
      raise ValueError(f"draw changed the leaf {name!r}: it must keep shape "
                       f"{tuple(jnp.shape(want))} and dtype {jnp.result_type(want)}, got shape "
                       f"{tuple(jnp.shape(got))} and dtype {jnp.result_type(got)}")
    # Values are checked where they are known (a draw under jit gives tracers): a NaN mass
    # would run, and every robot that has it would fail for a reason no metric names.
    finite = None if isinstance(got, Tracer) else np.isfinite(np.asarray(got))
    if finite is not None and not finite.all():
      robot = int(np.argwhere(~finite)[0][0])
      raise ValueError(f"draw gave {name!r} a value that is not finite (robot {robot} of the "
                       f"draw): a robot's parameters must be finite numbers")


@dataclasses.dataclass(frozen=True, eq=False)
class EnsembleResult:
  """Which robots of an ensemble pass, from `evaluate`.

  Attributes:
    passed: (N,) bool, one per row.
    nominal: whether row 0 is the nominal robot (then the share counts the rows after it).
    metrics: the per-robot metrics evaluate was given, one per row (None where not kept).
  """

  passed: np.ndarray
  nominal: bool = True
  metrics: tuple[Any, ...] | None = None

  @property
  def nominal_passed(self) -> bool | None:
    """Whether the nominal robot passes; None without one."""
    return bool(self.passed[0]) if self.nominal else None

  @property
  def randomised(self) -> np.ndarray:
    """passed of the randomised robots (the rows after the nominal one)."""
    return self.passed[1:] if self.nominal else self.passed

  @property
  def robots(self) -> int:
    """How many randomised robots."""
    return len(self.randomised)

  @property
  def passing(self) -> int:
    """How many randomised robots pass."""
    return int(np.count_nonzero(self.randomised))

  @property
  def share(self) -> float:
    """The share of randomised robots that pass, in [0, 1]."""
    return self.passing / self.robots

  def meets(self, share: float, *, nominal: bool = True) -> bool:
    """Whether at least share of the randomised robots pass, and (with nominal, where there is
    a nominal row) the nominal robot too: the usual statement "robust share >= 0.8"."""
    share = _validate.number("share", share, low=0.0, high=1.0)
    nominal = _validate.flag("nominal", nominal)
    if nominal and self.nominal and not self.passed[0]:
      return False
    return self.share >= share

  def summary(self) -> dict[str, Any]:
    """The verdict as JSON-ready numbers: nominal_passed, passing, robots, share, passed."""
    return {"nominal_passed": self.nominal_passed, "passing": self.passing,
            "robots": self.robots, "share": self.share,
            "passed": [bool(p) for p in self.passed]}

  def __str__(self) -> str:
    lead = ""
    if self.nominal:
      lead = f"the nominal robot {'passes' if self.passed[0] else 'fails'}; "
    # Whole percents, but 199 of 200 must not read as 100% nor 1 of 200 as 0%.
    percent = round(100 * self.share)
    if self.passing < self.robots:
      percent = min(percent, 99)
    if self.passing > 0:
      percent = max(percent, 1)
    return f"{lead}{self.passing} of {self.robots} randomised robots pass ({percent}%)"


def evaluate(metrics: Any, predicate: Callable[[Any], Any] | None = None, *,
             nominal: bool = True) -> EnsembleResult:
  """Which robots pass, from their metrics and a pass rule (host code: not traceable).

  Args:
    metrics: one entry per robot, row 0 the nominal one (with nominal): a list of per-robot
      metrics (dicts, arrays, anything predicate takes), a dict of metric -> (N, ...) arrays
      (predicate gets each robot's dict), or an (N, ...) array (predicate gets each row).
    predicate: robot's metrics -> True or False. None: the metrics are the verdicts themselves
      (booleans).
    nominal: whether row 0 is the nominal robot (the share then counts the rows after it).

  Returns:
    EnsembleResult.

  Raises:
    ValueError: no robots (or no randomised ones), arrays of different lengths, or a predicate
      that returns anything but True or False.

  Example:
    result = evaluate({"error": errors, "fell": fell}, lambda m: m["error"] <= 0.05 and
                      not m["fell"], nominal=False)
    result.share, result.meets(0.8), result.summary()
  """
  nominal = _validate.flag("nominal", nominal)
  if predicate is not None and not callable(predicate):
    raise ValueError(f"predicate must be a function (a robot's metrics) -> bool, or None, got "
                     f"{_validate.shown(predicate)}")
  rows = _rows(metrics)
  if len(rows) < 1 + nominal:
    raise ValueError(f"metrics must hold {'the nominal robot and ' if nominal else ''}at least "
                     f"one randomised robot, got {len(rows)} row(s)")
  passed = np.empty(len(rows), dtype=bool)
  for i, row in enumerate(rows):
    verdict = row if predicate is None else predicate(row)
    if isinstance(verdict, (np.ndarray, jax.Array)) and verdict.shape == ():
      verdict = verdict.item() if verdict.dtype == np.bool_ else verdict
    if not isinstance(verdict, (bool, np.bool_)):
      what = "the metrics (no predicate)" if predicate is None else "predicate"
      raise ValueError(f"{what} must give True or False for each robot, got "
                       f"{_validate.shown(verdict)} for row {i}")
    passed[i] = bool(verdict)
  return EnsembleResult(passed, nominal, tuple(rows))


def _rows(metrics: Any) -> list[Any]:
  """metrics as one entry per robot."""
  if isinstance(metrics, Mapping):
    if not metrics:
      raise ValueError("metrics must hold at least one metric, got an empty dict")
    try:
      arrays = {name: np.asarray(value) for name, value in metrics.items()}
    except ValueError:  # a ragged list: numpy's "inhomogeneous shape"
      raise ValueError(f"metrics' values must be arrays with one entry per robot, got "
                       f"{_validate.shown(metrics)}") from None
    lengths = {name: (a.shape[0] if a.ndim else "a scalar") for name, a in arrays.items()}
    count = next(iter(lengths.values()))
    if not isinstance(count, int) or len(set(lengths.values())) != 1:
      raise ValueError(f"metrics' arrays must have one entry per robot (the same first "
                       f"dimension), got lengths {lengths}")
    return [{name: a[i] for name, a in arrays.items()} for i in range(count)]
  if isinstance(metrics, (np.ndarray, jax.Array)):
    if metrics.ndim == 0:
      raise ValueError(f"metrics must have one entry per robot, got {_validate.shown(metrics)}")
    return list(np.asarray(metrics))
  if isinstance(metrics, (list, tuple)):
    return list(metrics)
  raise ValueError(f"metrics must be a list of per-robot metrics, a dict of (N, ...) arrays or "
                   f"an (N, ...) array, got {_validate.shown(metrics)}")


def per_robot(outputs: Any, name: str = "outputs") -> list[Any]:
  """outputs, a pytree of (N, ...) arrays (a replay's states and sensordata, say), as N pytrees
  of numpy arrays, one per robot: the list evaluate takes.

  Args:
    outputs: a pytree (an array, a tuple, a dict, ...) of arrays that share their first
      dimension N, one row per robot.
    name: what to call outputs in the error message (default "outputs").

  Returns:
    A list of N pytrees of outputs' structure, row i of every leaf in the i-th, as numpy
    arrays.

  Raises:
    ValueError: outputs has no leaves, a scalar leaf, or leaves whose first dimensions differ.

  Example:
    states, sensordata = control.open_loop(params, start, ctrls, nstep)
    result = evaluate(per_robot((states, sensordata)), lambda row: lands(*row))
  """
  leaves, tree = jax.tree.flatten(outputs)
  shapes = [tuple(np.shape(leaf)) for leaf in leaves]
  if not leaves or any(len(s) == 0 for s in shapes) or len({s[0] for s in shapes}) != 1:
    raise ValueError(f"{name} must be arrays with one row per robot (a common first dimension), "
                     f"got shapes {shapes}")
  arrays = [np.asarray(leaf) for leaf in leaves]
  return [jax.tree.unflatten(tree, [a[i] for a in arrays]) for i in range(shapes[0][0])]
