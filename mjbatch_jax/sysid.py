"""System identification: Levenberg-Marquardt over params, with multiple shooting.

The unknowns are one vector theta that parameter maps turn into params leaves (inertias, damping,
friction, armature, any params field). The data are shooting windows of a recording, each a
simulation of its own from its recorded start, all of them rows of one `rollout` call. Each
window's start is fitted with the parameters (its record is its prior) and eliminated from the
normal equations window by window (the Schur complement), so only an n x n system is solved.
The Jacobian is `jax.jacfwd` through `rollout`: its rule makes every finite-difference column
of every window a simulation row of one custom call per knot. The damped steps are simulated
together as rows of one more call, and the best one is kept if it lowers the cost.

  parameters = sysid.Parameters(sim, [sysid.Inertia(["link1", "link2"]),
                                      sysid.Field("dof_damping", ["joint1", "joint2"], log=True)])
  data = sysid.windows(states, ctrls, measured, length=50)
  problem = sysid.Problem(parameters, residual, prior_width=..., start_width=...)
  fit = sysid.fit(problem, data, theta0)
  print(sysid.report(problem, data, fit).summary())

With a `mjbatch_jax.distributed.Distributed` (`dist=`) the windows are rows of a global batch
over every process's devices: each device simulates and eliminates its own windows, and what
crosses processes is `psum` of the n x n system, of every damping's reduced system and of the
trial costs: three all-reduces an iteration. docs/sysid.md has the method and a comparison with
`mujoco.sysid`.
"""

import collections
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.sharding import PartitionSpec

from mjbatch_jax import _validate as v
from mjbatch_jax import rotations
from mjbatch_jax.distributed import Distributed
from mjbatch_jax.functions import rollout
from mjbatch_jax.params import Params
from mjbatch_jax.simulator import Simulator
from mjbatch_jax.tangent import Joints, integrate_pos

# -- parameter maps -----------------------------------------------------------------------------

_NUMBERS = {
  "principal": ("log_mass", "com_x", "com_y", "com_z", "log_gyration_1", "log_gyration_2",
                "log_gyration_3", "frame_x", "frame_y", "frame_z"),
  # Rucker and Wensing's log-Cholesky numbers, in mujoco.sysid's order.
  "log_cholesky": ("alpha", "d1", "d2", "d3", "s12", "s23", "s13", "t1", "t2", "t3"),
  "mass": ("log_mass",),
  "mass_com": ("log_mass", "com_x", "com_y", "com_z"),
}
_FIELDS = {
  "principal": ("body_mass", "body_ipos", "body_inertia", "body_iquat"),
  "log_cholesky": ("body_mass", "body_ipos", "body_inertia", "body_iquat"),
  "mass": ("body_mass", "body_inertia"),
  "mass_com": ("body_mass", "body_ipos", "body_inertia"),
}
# The objects whose names choose the rows of a field, by the field's prefix.
_KIND_OF_PREFIX = {
  "body": mujoco.mjtObj.mjOBJ_BODY, "jnt": mujoco.mjtObj.mjOBJ_JOINT,
  "geom": mujoco.mjtObj.mjOBJ_GEOM, "site": mujoco.mjtObj.mjOBJ_SITE,
  "actuator": mujoco.mjtObj.mjOBJ_ACTUATOR, "tendon": mujoco.mjtObj.mjOBJ_TENDON,
  "cam": mujoco.mjtObj.mjOBJ_CAMERA, "light": mujoco.mjtObj.mjOBJ_LIGHT,
  "sensor": mujoco.mjtObj.mjOBJ_SENSOR, "eq": mujoco.mjtObj.mjOBJ_EQUALITY,
  "pair": mujoco.mjtObj.mjOBJ_PAIR, "mat": mujoco.mjtObj.mjOBJ_MATERIAL,
}

_EVERY_ROW = " (None takes every row)"


def _rows(what: str, given: Any, hint: str = "") -> list[str | int]:
  """Names or ids as a non-empty list (numpy integers as ints); one name or id is a list of one."""
  if isinstance(given, str | int | np.integer) and not isinstance(given, bool | np.bool_):
    given = [given]
  if not isinstance(given, Sequence | np.ndarray) or isinstance(given, str):
    raise ValueError(f"{what} must be names or ids (a list of str or int), got {v.shown(given)}")
  out: list[str | int] = []
  for entry in list(given):
    if isinstance(entry, bool | np.bool_) or not isinstance(entry, str | int | np.integer):
      raise ValueError(f"{what} must be names or ids (str or int), got {v.shown(entry)} in "
                       f"{v.shown(given)}")
    out.append(entry if isinstance(entry, str) else int(entry))
  if not out:
    raise ValueError(f"{what} is empty: name at least one{hint}")
  return out


@dataclasses.dataclass(frozen=True)
class Inertia:
  """The inertial parameters of bodies, physically consistent for every theta.

  Forms, and their numbers per body:
    "principal" (10): log m; the centre of mass c (3, in the body frame); log radii of gyration
      l (3) along the principal axes, so that the principal second moments are S_k =
      m exp(2 l_k); the principal frame's rotation vector (3). MuJoCo's principal moments
      I_x = S_y + S_z, ... are then positive and strictly within the triangle inequalities (the
      pseudo-inertia is positive definite) for any theta, and every rigid body has such
      numbers. It writes MuJoCo's fields directly.
    "log_cholesky" (10): the pseudo-inertia J = U U', U upper triangular, U = exp(alpha)
      [[exp(d1), s12, s13, t1], [0, exp(d2), s23, t2], [0, 0, exp(d3), t3], [0, 0, 0, 1]]
      (Rucker and Wensing 2022; mujoco.sysid's InertiaType.Pseudo, in its order). Consistent
      for any theta. MuJoCo's principal frame comes from a 3 x 3 eigensolver, whose derivative
      leaves out the shear within two equal principal moments (a symmetric body), where the
      frame is undefined.
    "mass" (1): log m, the rotational inertia scaled with the mass (radii of gyration kept).
    "mass_com" (4): log m and c, the rotational inertia scaled with the mass.

  Example:
    sysid.Inertia(["upper_arm", "forearm"])              # 20 numbers
  """

  bodies: Sequence[str | int]
  form: str = "principal"

  def __post_init__(self) -> None:
    _rows("Inertia bodies", self.bodies)
    v.one_of("Inertia form", self.form, tuple(_NUMBERS))


@dataclasses.dataclass(frozen=True)
class Field:
  """Every entry of some rows of a params field, one number each, or its log (log=True).

  rows: names or ids of the field's objects, None for all (an option such as "opt.gravity" has
  no rows: all its entries). Rows of dof_* fields (dof_damping, dof_armature, dof_frictionloss)
  are chosen by joint names (a joint's dofs) or dof ids.

  Example:
    sysid.Field("dof_damping", ["shoulder", "elbow"], log=True)   # positive for any theta
    sysid.Field("geom_friction", ["foot"])                          # 3 numbers a geom
  """

  name: str
  rows: Sequence[str | int] | None = None
  log: bool = False

  def __post_init__(self) -> None:
    if not isinstance(self.name, str):
      raise ValueError(f"Field name must be a params field's name, got {v.shown(self.name)}")
    if self.rows is not None:
      _rows(f"Field {self.name!r} rows", self.rows, _EVERY_ROW)
    v.flag("Field log", self.log)


@dataclasses.dataclass(frozen=True)
class _Resolved:
  """A map bound to a model: its numbers' names, the rows of each field it writes (None: the
  whole field) and its function from numbers (..., k) to values (..., rows, ...)."""

  names: tuple[str, ...]
  rows: dict[str, tuple[int, ...] | None]
  initial: np.ndarray
  values: Callable[[jax.Array], dict[str, jax.Array]]


class Parameters:
  """The unknowns: parameter maps side by side as one vector theta, and the params it makes.

  Args:
    sim: the Simulator (for a distributed fit, the Distributed's `sim`).
    maps: `Inertia` and `Field` maps; no two may write the same row of a field.
    set_const: recompute the derived constants from the params in every call, so that each
      simulation equals a model compiled with its values (needed for inertias, body positions,
      ...; one mj_setConst per simulation and call: +48% on a derivative call of the arm of
      examples/sysid.py, per examples/results/sysid.log at commit d7f560b).

  Attributes:
    size: how many numbers theta has.
    names: each number's name: "link1.log_mass", "log dof_damping[elbow]", ...
    initial: theta of the model's own values.

  Example:
    parameters = sysid.Parameters(sim, [sysid.Inertia(["link1"]), sysid.Field("dof_armature")])
    params = parameters.params(parameters.initial, 16)   # 16 rows of the model's values
  """

  def __init__(self, sim: Simulator, maps: Sequence[Inertia | Field], set_const: bool = True):
    if not isinstance(sim, Simulator):
      raise ValueError(f"sim must be a mjbatch_jax.Simulator, got {type(sim).__name__}")
    if isinstance(maps, Inertia | Field | str) or not isinstance(maps, Sequence) or not maps:
      raise ValueError(f"maps must be a non-empty list of Inertia and Field, got {v.shown(maps)}")
    set_const = v.flag("set_const", set_const)
    if sim.closed:
      raise ValueError("sim is closed: make the Parameters with an open Simulator")
    self.sim = sim
    self._maps = [_resolve(sim, m) for m in maps]
    rows: dict[str, list[int] | None] = {}
    for resolved in self._maps:
      for name, taken in resolved.rows.items():
        if name in rows and (taken is None or rows[name] is None
                             or set(rows[name] or ()) & set(taken)):
          raise ValueError(f"two maps write the same rows of {name!r}: give each one map")
        rows[name] = None if taken is None else [*(rows.get(name) or []), *taken]
    self._rows = {name: None if r is None else tuple(r) for name, r in rows.items()}
    select = {name: list(r) for name, r in self._rows.items() if r is not None}
    self._base = sim.params(1, tuple(rows), select=select, set_const=set_const)
    self._model_values = {name: np.asarray(self._base[name][0]) for name in rows}
    self.names = tuple(n for m in self._maps for n in m.names)
    self.initial = np.concatenate([m.initial for m in self._maps])
    self.size = int(self.initial.size)
    ends = np.cumsum([0] + [len(m.names) for m in self._maps])
    self._parts = [slice(int(a), int(b)) for a, b in zip(ends[:-1], ends[1:], strict=True)]
    self._programs = _Programs(sim)  # the fits' compiled functions (see _Runner)

  @property
  def fields(self) -> tuple[str, ...]:
    """The params fields that theta writes."""
    return tuple(self._rows)

  def values(self, theta: Any) -> dict[str, jax.Array]:
    """Each field's leaf of theta (..., size): (..., rows, ...), the rows no map writes at the
    model's values."""
    theta = v.array("theta", theta, finite=True)
    if theta.shape[-1:] != (self.size,):
      raise ValueError(f"theta must be (..., {self.size}) (numbers {', '.join(self.names[:3])}"
                       f", ...), got shape {theta.shape}")
    lead = theta.shape[:-1]
    out = {name: jnp.broadcast_to(jnp.asarray(model, theta.dtype), (*lead, *model.shape))
           for name, model in self._model_values.items()}
    for resolved, part in zip(self._maps, self._parts, strict=True):
      for name, value in resolved.values(theta[..., part]).items():
        taken = resolved.rows[name]
        if taken is None:
          out[name] = value.astype(theta.dtype)
          continue
        at = np.asarray([self._rows[name].index(r) for r in taken])  # type: ignore[union-attr]
        if np.array_equal(at, np.arange(out[name].shape[len(lead)])):  # the whole leaf
          out[name] = jnp.broadcast_to(value, out[name].shape).astype(theta.dtype)
          continue
        inner = (slice(None),) * (out[name].ndim - len(lead) - 1)
        out[name] = out[name].at[(Ellipsis, at, *inner)].set(value)
    return out

  def params(self, theta: Any, num: int | np.integer | None = None) -> Params:
    """Params of theta (num, size), or of theta (size,) broadcast to num rows.

    Example:
      states, _ = mjbatch_jax.rollout(state, ctrls, parameters.params(fit.theta, len(state)))
    """
    theta = v.array("theta", theta, finite=True)
    if num is not None:
      num = v.integer("num", num, low=0)
      if theta.shape not in ((self.size,), (1, self.size), (num, self.size)):
        raise ValueError(f"theta must be ({self.size},) or ({num}, {self.size}) with num={num}, "
                         f"got shape {theta.shape}")
      theta = jnp.broadcast_to(theta, (num, self.size))
    if theta.ndim != 2:
      raise ValueError(f"theta must be (num, {self.size}), or ({self.size},) with num, got "
                       f"shape {theta.shape}")
    return self._base.replace(self.values(theta))

  def __repr__(self) -> str:
    return f"Parameters({self.size} numbers: {', '.join(self.names[:4])}, ...)"


def _resolve(sim: Simulator, given: Any) -> _Resolved:
  if isinstance(given, Inertia):
    return _resolve_inertia(sim, given)
  if isinstance(given, Field):
    return _resolve_field(sim, given)
  raise ValueError(f"maps are sysid.Inertia or sysid.Field, got {type(given).__name__}")


def _labels(model: mujoco.MjModel, field: str, ids: Sequence[int]) -> list[str]:
  """Names of a field's rows (ids where unnamed); a dof's is its joint's."""
  if field.startswith("dof_"):
    out = []
    for i in ids:
      joint = int(model.dof_jntid[i])
      name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, joint) or f"joint{joint}"
      width = int(np.sum(model.dof_jntid == joint))
      out.append(name if width == 1 else f"{name}:{i - int(model.jnt_dofadr[joint])}")
    return out
  kind = _KIND_OF_PREFIX.get(field.split("_")[0])
  return [(mujoco.mj_id2name(model, kind, int(i)) if kind is not None else None) or str(int(i))
          for i in ids]


def _resolve_inertia(sim: Simulator, given: Inertia) -> _Resolved:
  form = v.one_of("Inertia form", given.form, tuple(_NUMBERS))
  bodies = _rows("Inertia bodies", given.bodies)
  ids = sim.params(1, ("body_mass",), select={"body_mass": bodies}).spec.selection(0)
  assert ids is not None
  model = sim.model
  labels = _labels(model, "body_mass", ids)
  if 0 in ids:
    raise ValueError("Inertia: the world body (id 0) has no inertia to identify")
  rows = np.asarray(ids)
  mass, ipos = model.body_mass[rows].copy(), model.body_ipos[rows].copy()
  inertia, iquat = model.body_inertia[rows].copy(), model.body_iquat[rows].copy()
  if np.any(mass <= 0):
    raise ValueError(f"Inertia: bodies {[labels[i] for i in np.flatnonzero(mass <= 0)]} have no "
                     "mass in the model: give them a positive mass first")
  second = 0.5 * inertia.sum(axis=-1, keepdims=True) - inertia  # S_k: >= 0 in a valid model
  edge = np.any(second <= 0, axis=-1)
  if form in ("principal", "log_cholesky") and np.any(edge):
    raise ValueError(f"Inertia form {form!r}: bodies {[labels[i] for i in np.flatnonzero(edge)]} "
                     "have principal moments on the edge of the triangle inequality (a point, "
                     "rod or plate), which no finite numbers describe: use form 'mass_com'")
  if form == "principal":
    radii = 0.5 * np.log(second / mass[:, None])
    frame = np.asarray(rotations.log(jnp.asarray(iquat)))
    initial = np.concatenate([np.log(mass)[:, None], ipos, radii, frame], axis=-1)
    values = _principal_values
  elif form == "log_cholesky":
    initial = np.stack([_log_cholesky_of(*body) for body in zip(mass, ipos, second, iquat,
                                                                strict=True)])
    values = _log_cholesky_values
  else:
    initial = np.concatenate([np.log(mass)[:, None], ipos], axis=-1)[:, :len(_NUMBERS[form])]
    values = _scaled_mass(mass, inertia)

  def of(theta: jax.Array) -> dict[str, jax.Array]:
    return values(theta.reshape(*theta.shape[:-1], len(ids), -1))

  names = tuple(f"{label}.{n}" for label in labels for n in _NUMBERS[form])
  return _Resolved(names, {f: tuple(ids) for f in _FIELDS[form]}, initial.ravel(), of)


def _principal_values(theta: jax.Array) -> dict[str, jax.Array]:
  mass = jnp.exp(theta[..., 0])
  second = mass[..., None] * jnp.exp(2 * theta[..., 4:7])
  return {"body_mass": mass, "body_ipos": theta[..., 1:4],
          "body_inertia": jnp.sum(second, axis=-1, keepdims=True) - second,
          "body_iquat": rotations.exp(theta[..., 7:10])}


def _scaled_mass(mass0: np.ndarray, inertia0: np.ndarray) -> Callable:
  def values(theta: jax.Array) -> dict[str, jax.Array]:
    mass = jnp.exp(theta[..., 0])
    out = {"body_mass": mass, "body_inertia": (mass / mass0)[..., None] * inertia0}
    if theta.shape[-1] == 4:
      out["body_ipos"] = theta[..., 1:4]
    return out

  return values


def _log_cholesky_of(mass: float, ipos: np.ndarray, second: np.ndarray,
                     iquat: np.ndarray) -> np.ndarray:
  """The 10 log-Cholesky numbers of one body's MuJoCo inertial."""
  rot = np.asarray(rotations.to_matrix(jnp.asarray(iquat)))
  sigma = rot @ np.diag(second) @ rot.T + mass * np.outer(ipos, ipos)  # about the body's origin
  h = mass * ipos
  pseudo = np.block([[sigma, h[:, None]], [h[None, :], np.array([[mass]])]])
  flip = np.arange(3, -1, -1)  # J = U U' with U upper triangular: the Cholesky of J reversed
  upper = np.linalg.cholesky(pseudo[flip][:, flip])[flip][:, flip]
  u = upper / upper[3, 3]
  return np.array([np.log(upper[3, 3]), *np.log(np.diag(u)[:3]), u[0, 1], u[1, 2], u[0, 2],
                   *u[:3, 3]])


def _log_cholesky_values(theta: jax.Array) -> dict[str, jax.Array]:
  e = jnp.exp(theta[..., 1:4])
  s12, s23, s13 = theta[..., 4], theta[..., 5], theta[..., 6]
  zero = jnp.zeros_like(s12)
  # U's upper 3 x 3 block over exp(alpha); its last column over exp(alpha) is t, so m =
  # exp(2 alpha), h = m t, c = t, and the second moments about c are m block block'.
  block = jnp.stack([jnp.stack([e[..., 0], s12, s13], -1), jnp.stack([zero, e[..., 1], s23], -1),
                     jnp.stack([zero, zero, e[..., 2]], -1)], -2)
  mass = jnp.exp(2 * theta[..., 0])
  second, quat = _principal_frame(mass[..., None, None] * (block @ block.swapaxes(-1, -2)))
  return {"body_mass": mass, "body_ipos": theta[..., 7:10],
          "body_inertia": jnp.sum(second, axis=-1, keepdims=True) - second, "body_iquat": quat}


@jax.custom_jvp
def _principal_frame(sigma: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Principal second moments (..., 3) and the principal frame's quaternion (..., 4) of
  symmetric positive definite (..., 3, 3) second-moment matrices."""
  second, vectors = jnp.linalg.eigh(sigma)
  right_handed = vectors.at[..., :, 2].multiply(jnp.sign(jnp.linalg.det(vectors))[..., None])
  return second, rotations.from_matrix(right_handed)


@_principal_frame.defjvp
def _principal_frame_jvp(primals: tuple, tangents: tuple) -> tuple:
  (sigma,), (t_sigma,) = primals, tangents
  second, quat = _principal_frame(sigma)
  rot = rotations.to_matrix(quat)
  local = rot.swapaxes(-1, -2) @ t_sigma @ rot  # the tangent in the principal frame
  gap = second[..., None, :] - second[..., :, None]  # S_j - S_i
  # Within two equal moments the frame is undefined: no rotation there.
  apart = jnp.abs(gap) > 1e-9 * jnp.max(jnp.abs(second), axis=-1)[..., None, None]
  omega = jnp.where(apart, local / jnp.where(apart, gap, 1.0), 0.0)  # R' dR, antisymmetric
  spin = jnp.stack([omega[..., 2, 1], omega[..., 0, 2], omega[..., 1, 0]], axis=-1)
  t_quat = 0.5 * rotations.multiply(quat, jnp.concatenate([jnp.zeros_like(spin[..., :1]), spin],
                                                            axis=-1))
  return (second, quat), (jnp.diagonal(local, axis1=-2, axis2=-1), t_quat)


def _resolve_field(sim: Simulator, given: Field) -> _Resolved:
  name = given.name
  if not isinstance(name, str):
    raise ValueError(f"Field name must be a params field's name, got {v.shown(name)}")
  log = v.flag("Field log", given.log)
  rows = None if given.rows is None else _rows(f"Field {name!r} rows", given.rows, _EVERY_ROW)
  if rows is not None and name.startswith("dof_"):
    dofs: list[int] = []
    for row in rows:  # a joint's name stands for its dofs
      if isinstance(row, str):
        dofs.extend(range(*sim.names.joint(row).dof_index.indices(sim.model.nv)))
      else:
        dofs.append(row)
    rows = dofs
  base = sim.params(1, (name,), select=None if rows is None else {name: list(rows)})
  value = np.asarray(base[name][0], np.float64)
  whole = name.startswith("opt.") or value.ndim == 0
  if whole:
    ids, heads = None, [name]
  else:
    ids = base.spec.selection(0) or tuple(range(value.shape[0]))
    heads = [f"{name}[{label}]" for label in _labels(sim.model, name, ids)]
  width = value.size // len(heads)
  names = tuple(f"{'log ' if log else ''}{head}{'' if width == 1 else f'[{k}]'}"
                for head in heads for k in range(width))
  entries = value.reshape(-1)
  if log and np.any(entries <= 0):
    bad = [names[i] for i in np.flatnonzero(entries <= 0)][:4]
    raise ValueError(f"Field {name!r} with log=True needs positive model values, and {bad} are "
                     "not: set positive values in the model, or take log=False")
  shape = value.shape

  def of(theta: jax.Array) -> dict[str, jax.Array]:
    out = jnp.exp(theta) if log else theta
    return {name: out.reshape(*theta.shape[:-1], *shape)}

  initial = np.log(entries) if log else entries
  return _Resolved(names, {name: None if ids is None else tuple(ids)}, initial, of)


# -- data ---------------------------------------------------------------------------------------


class Windows(NamedTuple):
  """Shooting windows: W simulations of T controls each (a pytree, leading dimension W).

  Attributes:
    starts: (W, nstate) each window's recorded start, its prior when starts are fitted.
    ctrls: (W, T, nu) its controls.
    measured: a pytree of (W, T, ...) arrays, its measurements, as the residual reads them.
  """

  starts: Any
  ctrls: Any
  measured: Any


def windows(states: Any, ctrls: Any, measured: Any, length: int | np.integer) -> Windows:
  """A recording cut into shooting windows of `length` controls (the last T mod length left out).

  Args:
    states: (T, nstate) the recorded state before each control (row 0 the recording's start):
      window w starts from row w * length. Only those rows are read.
    ctrls: (T, nu) the controls.
    measured: a pytree of (T, ...) measurements after each control.
    length: controls per window.

  Example:
    data = sysid.windows(states, ctrls, {"q": q_measured}, length=50)
  """
  states, ctrls = _finite("states", states), _finite("ctrls", ctrls)
  if states.ndim != 2 or ctrls.ndim != 2 or len(ctrls) != len(states):
    raise ValueError(f"states must be (T, nstate) and ctrls (T, nu) with the same T, got shapes "
                     f"{states.shape} and {ctrls.shape}")
  samples = len(ctrls)
  length = v.integer("length", length, low=1)
  if length > samples:
    raise ValueError(f"windows of {length} controls are longer than the recording ({samples} "
                     "controls): take a shorter length")
  count = samples // length
  leaves, tree = jax.tree.flatten(measured)
  cut = []
  for i, leaf in enumerate(leaves):
    leaf = _finite(f"measured leaf {i}", leaf)
    if leaf.ndim < 1 or len(leaf) != samples:
      raise ValueError(f"measured leaf {i} must be (T={samples}, ...), got shape {leaf.shape}")
    cut.append(leaf[: count * length].reshape(count, length, *leaf.shape[1:]))
  return Windows(states[: count * length : length],
                 ctrls[: count * length].reshape(count, length, ctrls.shape[-1]),
                 jax.tree.unflatten(tree, cut))


# -- the problem --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Problem:
  """What to fit: the unknowns, the residual, the priors and the bounds.

  The cost is half the sum of the squared residuals of every window, plus the priors' terms:
  with residuals in units of their noise, a chi-square over 2. Checked where it is made (its
  settings and arrays, against parameters.size); numpy scalars stand for Python numbers.

  Attributes:
    parameters: the unknowns (`Parameters`).
    residual: fn(states (T, nstate), sensordata (T, nsensordata), measured) -> array, of one
      window (vmapped over windows); states and sensordata as `rollout` returns them.
    nstep: substeps per control.
    prior_width: (size,) Gaussian priors' widths about the prior mean (the fit's theta0 unless
      prior_mean); inf for no prior on a number; None for none at all.
    prior_mean: (size,) their means.
    bounds: (low, high), each (size,), -inf / inf where unbounded: steps stay inside (a boxed
      Gauss-Newton step by active sets).
    scale: (size,) each number's typical change, the unit of the damping and of max_step
      (default: its prior width, 1 where it has none).
    start_width: (2 nv + na,) widths of the starts' priors about their records, in the tangent
      space (qpos as qvel, then qvel, then act); None: starts fixed at their records.
    dampings: Levenberg's dampings tried each iteration (as rows of one call), relative to the
      normal equations' mean curvature in scale units.
    max_step: the most any number moves in a step, in scale units.
    eps, centered: the finite differences of the Jacobian, as `rollout` takes them (None: its
      defaults).

  Example:
    qpos = sim.layout.qpos
    problem = sysid.Problem(parameters, lambda s, y, q: (s[:, qpos] - q) / 1e-4, nstep=5,
                            prior_width=np.full(parameters.size, 0.5))
  """

  parameters: Parameters
  residual: Callable[..., Any]
  nstep: int = 1
  prior_width: Any = None
  prior_mean: Any = None
  bounds: tuple[Any, Any] | None = None
  scale: Any = None
  start_width: Any = None
  dampings: tuple[float, ...] = (0.0, 1e-8, 1e-6, 1e-4, 1e-2)
  max_step: float = 2.0
  eps: float | None = None
  centered: bool | None = None

  def __post_init__(self) -> None:
    # Checked where it is made (and again by fit and report, for a changed parameters).
    _options(self)
    _priors(self)


@dataclasses.dataclass(frozen=True)
class Fit:
  """A fit's result.

  Attributes:
    theta: (size,) the identified numbers.
    starts: (W, nx) the windows' starts as offsets from their records (this process's windows),
      in the tangent space; zeros when starts are fixed.
    costs: the cost at theta0, then after each iteration.
    converged: whether it stopped on `tolerance` (rather than on `iterations`).
    wall, cpu: seconds of each iteration (the first with compilation).
  """

  theta: np.ndarray
  starts: np.ndarray
  costs: np.ndarray
  converged: bool
  wall: np.ndarray
  cpu: np.ndarray

  @property
  def iterations(self) -> int:
    return len(self.wall)


@dataclasses.dataclass(frozen=True)
class Report:
  """What the data say of each number at a fit: information, spreads, unidentifiable directions.

  The information, singular values and directions are in scale units (a number over its
  scale), where a prior's curvature is (scale / prior_width)^2; std and prior_width are in the
  numbers' own units.

  Attributes:
    names: the numbers' names.
    information: (size, size) J'J of the numbers once the unknown starts are accounted for (the
      Schur complement of the starts' blocks, their priors included); no prior of theta in it.
    singular: (size,) square roots of its eigenvalues, largest first: how tightly the data pin
      each direction (in scale units: 10 pins a direction to a tenth of its scale).
    directions: (size, size) the eigenvectors, as rows, in that order.
    rank: directions the data see at all (singular above rtol times the largest): the others
      change no residual.
    std: (size,) posterior standard deviations of the numbers, priors included (inf where neither
      data nor prior constrains a number).
    prior_width: (size,) the priors' widths (inf: none), to compare std with.
    unseen: (size,) how much of each number lies in the unseen directions (the length of its
      unit vector's projection on them, whatever basis they have): 1 for a number the data say
      nothing of, 0 for one they see alone, between for one seen only in combinations.
  """

  names: tuple[str, ...]
  information: np.ndarray
  singular: np.ndarray
  directions: np.ndarray
  rank: int
  std: np.ndarray
  prior_width: np.ndarray
  unseen: np.ndarray

  def unidentifiable(self, threshold: float | np.floating = 0.2) -> list[dict[str, float]]:
    """The directions the data do not see, each as {name: weight} of its entries with
    |weight| >= threshold (a unit vector in scale units), largest first. Where several are
    unseen, any basis of them is: `unseen` says how much of each number they hold.

    Example:
      for direction in report.unidentifiable(): print(direction)   # {'link1.log_mass': 0.98}
    """
    threshold = v.number("threshold", threshold, low=0.0, high=1.0)
    out = []
    for vector in self.directions[self.rank:]:
      order = np.argsort(-np.abs(vector))
      out.append({self.names[i]: float(vector[i]) for i in order if abs(vector[i]) >= threshold})
    return out

  def summary(self, threshold: float | np.floating = 0.2, most: int | np.integer | None = None
              ) -> str:
    """A few lines: the rank, and the unidentifiable directions (at most `most`) by the numbers
    they move."""
    threshold = v.number("threshold", threshold, low=0.0, high=1.0)
    most = None if most is None else v.integer("most", most, low=0)
    size = len(self.names)
    lines = [f"identifiable: {self.rank} of {size} directions (square roots of the information "
             f"{self.singular[0]:.3g} .. {self.singular[max(self.rank - 1, 0)]:.3g} per scale)"]
    blind = [name for name, u in zip(self.names, self.unseen, strict=True) if u > 0.999]
    if blind:
      lines.append(f"  the data say nothing of {len(blind)}: {', '.join(blind)}")
    for k, direction in enumerate(self.unidentifiable(threshold)[:most]):
      terms = " ".join(f"{w:+.2f} {name}" for name, w in direction.items())
      lines.append(f"  unidentifiable {k + 1}: {terms or '(spread thin over many numbers)'}")
    return "\n".join(lines)


# -- checks -------------------------------------------------------------------------------------


def _finite(what: str, x: Any) -> np.ndarray:
  """x as a float64 array of ints or floats with no NaN or inf; ValueError otherwise."""
  if isinstance(x, str) or x is None:
    raise ValueError(f"{what} must be an array of numbers, got {v.shown(x)}")
  try:
    raw = np.asarray(x)
  except (TypeError, ValueError):
    raise ValueError(f"{what} must be an array of numbers, got {type(x).__name__}") from None
  if raw.dtype.kind not in "iuf":
    raise ValueError(f"{what} must be an array of numbers (ints or floats), got dtype "
                     f"{raw.dtype} ({v.shown(x)})")
  array = raw.astype(np.float64)
  if not np.all(np.isfinite(array)):
    bad = np.argwhere(~np.isfinite(array))[0]
    raise ValueError(f"{what} has NaN or inf (first at index {tuple(int(i) for i in bad)})")
  return array


def _vector(what: str, x: Any, size: int, names: tuple[str, ...], allow_inf: bool = False,
            positive: bool = False) -> np.ndarray:
  """x as a (size,) float64 array, a number standing for all; NaN refused, inf unless
  allow_inf, values <= 0 if positive."""
  if isinstance(x, str) or x is None:
    raise ValueError(f"{what} must be {size} numbers (one per number of theta), got "
                     f"{v.shown(x)}")
  try:
    raw = np.asarray(x)
  except (TypeError, ValueError):
    raise ValueError(f"{what} must be {size} numbers (one per number of theta), got "
                     f"{v.shown(x)}") from None
  if raw.dtype.kind not in "iuf":
    raise ValueError(f"{what} must be numbers (ints or floats), got dtype {raw.dtype} "
                     f"({v.shown(x)})")
  array = raw.astype(np.float64)
  if array.ndim == 0:
    array = np.full(size, float(array))
  if array.shape != (size,):
    raise ValueError(f"{what} must have shape ({size},) (one per number), got {array.shape}")
  bad = np.isnan(array) | ((not allow_inf) & np.isinf(array)) | (positive & ~(array > 0))
  if np.any(bad):
    i = int(np.flatnonzero(bad)[0])
    want = "a number > 0" if positive else "a finite number"
    raise ValueError(f"{what}[{i}] ({names[i]}) must be {want}{' or inf' if allow_inf else ''}, "
                     f"got {array[i]}")
  return array


@dataclasses.dataclass(frozen=True)
class _Checked:
  """A Problem's arrays, checked and resolved for one fit."""

  theta0: np.ndarray
  mean: np.ndarray
  precision: np.ndarray  # (scale / prior width)^2, 0 without a prior
  low: np.ndarray
  high: np.ndarray
  scale: np.ndarray
  start_width: np.ndarray | None
  prior_width: np.ndarray

  def arrays(self) -> dict[str, np.ndarray]:
    """What the jitted program takes as arguments (so that one compilation serves any guess,
    prior and bounds)."""
    width = np.ones(0) if self.start_width is None else self.start_width
    return {"mean": self.mean, "precision": self.precision, "low": self.low, "high": self.high,
            "scale": self.scale, "start_width": width}

  @property
  def bounded(self) -> bool:
    return bool(np.any(np.isfinite(self.low)) or np.any(np.isfinite(self.high)))


class _Options(NamedTuple):
  """A Problem's settings, checked, as Python values (what is traced into its programs)."""

  nstep: int
  dampings: tuple[float, ...]
  max_step: float
  eps: float | None
  centered: bool | None


def _options(problem: "Problem") -> _Options:
  """The problem's parameters, residual and settings checked; the settings as Python values."""
  if not isinstance(problem.parameters, Parameters):
    raise ValueError(f"problem.parameters must be sysid.Parameters, got "
                     f"{type(problem.parameters).__name__}")
  if not callable(problem.residual):
    raise ValueError(f"problem.residual must be a function (states, sensordata, measured) -> "
                     f"array, got {v.shown(problem.residual)}")
  nstep = v.integer("problem.nstep", problem.nstep, low=1, high=2**31 - 1)
  given = problem.dampings
  if isinstance(given, str) or not isinstance(given, Sequence | np.ndarray) \
      or (isinstance(given, np.ndarray) and given.ndim != 1) or len(given) < 1:
    raise ValueError(f"problem.dampings must be one or more finite numbers >= 0 (a tuple), got "
                     f"{v.shown(given)}")
  dampings = tuple(v.number(f"problem.dampings[{i}]", d, low=0.0) for i, d in enumerate(given))
  max_step = v.number("problem.max_step", problem.max_step, low=0.0, low_open=True)
  eps = None if problem.eps is None else v.number("problem.eps", problem.eps, low=0.0,
                                                  low_open=True)
  centered = None if problem.centered is None else v.flag("problem.centered", problem.centered)
  return _Options(nstep, dampings, max_step, eps, centered)


def _priors(problem: "Problem") -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray,
                                          np.ndarray, np.ndarray | None]:
  """The problem's arrays checked: prior widths, prior mean (None: theta0), scale, bounds
  (low, high) and start widths (None: starts fixed)."""
  parameters = problem.parameters
  n, names = parameters.size, parameters.names
  widths = np.full(n, np.inf) if problem.prior_width is None else _vector(
    "prior_width", problem.prior_width, n, names, allow_inf=True, positive=True)
  mean = None if problem.prior_mean is None else _vector("prior_mean", problem.prior_mean, n,
                                                         names)
  if problem.scale is None:
    scale = np.where(np.isfinite(widths), widths, 1.0)
  else:
    scale = _vector("scale", problem.scale, n, names, positive=True)
  low, high = np.full(n, -np.inf), np.full(n, np.inf)
  bounds = problem.bounds
  if bounds is not None:
    if isinstance(bounds, str) or not isinstance(bounds, Sequence | np.ndarray) \
        or len(bounds) != 2:
      raise ValueError(f"bounds must be (low, high), each ({n},) or a number, got "
                       f"{v.shown(bounds)}")
    low = _vector("bounds low", bounds[0], n, names, allow_inf=True)
    high = _vector("bounds high", bounds[1], n, names, allow_inf=True)
    if np.any(low > high):
      i = int(np.flatnonzero(low > high)[0])
      raise ValueError(f"bounds: low > high for {names[i]} (number {i}): {low[i]} > {high[i]}")
  model = parameters.sim.model
  nx = 2 * model.nv + model.na
  start_width = None
  if problem.start_width is not None:
    start_width = _vector("start_width", problem.start_width, nx,
                          tuple(f"start {i}" for i in range(nx)), positive=True)
  return widths, mean, scale, low, high, start_width


def _check(problem: Problem, theta0: Any, windows: Windows, what: str = "theta0") -> _Checked:
  if not isinstance(problem, Problem):
    raise ValueError(f"problem must be a sysid.Problem, got {type(problem).__name__}")
  _options(problem)
  parameters = problem.parameters
  sim = parameters.sim
  if sim.closed:
    len(parameters._programs)  # releases them
    raise ValueError("the Simulator of problem.parameters is closed")
  n, names = parameters.size, parameters.names
  theta0 = _vector(what, parameters.initial if theta0 is None else theta0, n, names)
  widths, mean, scale, low, high, start_width = _priors(problem)
  mean = theta0 if mean is None else mean
  outside = (theta0 < low) | (theta0 > high)
  if np.any(outside):
    i = int(np.flatnonzero(outside)[0])
    raise ValueError(f"{what}[{i}] ({names[i]}) = {theta0[i]} is outside its bounds "
                     f"[{low[i]}, {high[i]}]: start inside them")
  if not isinstance(windows, Windows):
    raise ValueError(f"windows must be sysid.Windows (see sysid.windows), got "
                     f"{type(windows).__name__}")
  _finite("windows.starts", windows.starts)
  _finite("windows.ctrls", windows.ctrls)
  leaves = jax.tree.leaves(windows.measured)
  for i, leaf in enumerate(leaves):
    _finite(f"windows.measured leaf {i}", leaf)
  starts, ctrls = np.shape(windows.starts), np.shape(windows.ctrls)
  if len(starts) != 2 or starts[1] != sim.nstate or starts[0] < 1:
    raise ValueError(f"windows.starts must be (W >= 1, nstate={sim.nstate}), got shape {starts}")
  if len(ctrls) != 3 or ctrls[0] != starts[0] or ctrls[2] != sim.nu or ctrls[1] < 1:
    raise ValueError(f"windows.ctrls must be (W={starts[0]}, T >= 1, nu={sim.nu}), got shape "
                     f"{ctrls}")
  for i, leaf in enumerate(leaves):
    if np.shape(leaf)[:2] != ctrls[:2]:
      raise ValueError(f"windows.measured leaf {i} must be (W={ctrls[0]}, T={ctrls[1]}, ...), "
                       f"got shape {np.shape(leaf)}")
  # The residual of one window, traced only (no custom call runs): one floating-point array.
  dtype = jnp.result_type(float)
  one = (jax.ShapeDtypeStruct((ctrls[1], sim.nstate), dtype),
         jax.ShapeDtypeStruct((ctrls[1], sim.nsensordata), dtype),
         jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x)[1:], dtype), windows.measured))
  try:
    out = jax.eval_shape(problem.residual, *one)
  except Exception as e:  # noqa: BLE001  (whatever the user's function raises, said plainly)
    raise ValueError(f"problem.residual failed on one window's (states {one[0].shape}, "
                     f"sensordata {one[1].shape}, measured) : {type(e).__name__}: {e}") from e
  if not isinstance(out, jax.ShapeDtypeStruct) or not jnp.issubdtype(out.dtype, jnp.floating) \
      or out.size == 0:
    raise ValueError(f"problem.residual must return one non-empty floating-point array per "
                     f"window, got {out}")
  return _Checked(theta0, mean, np.where(np.isfinite(widths), (scale / widths) ** 2, 0.0), low,
                  high, scale, start_width, widths)


def _offsets(starts: Any, count: int, nx: int) -> np.ndarray:
  """The starts' offsets (count, nx) to begin with: zeros for None."""
  if starts is None:
    return np.zeros((count, nx))
  offsets = _finite("starts", starts)
  if offsets.shape != (count, nx):
    raise ValueError(f"starts must be ({count}, {nx}) (this process's windows, 2 nv + na), got "
                     f"shape {offsets.shape}")
  return offsets


# -- the solver ---------------------------------------------------------------------------------


def _box_solve(h: jax.Array, g: jax.Array, low: jax.Array, high: jax.Array,
               passes: int) -> jax.Array:
  """argmin 0.5 d'hd + g'd over low <= d <= high (a box around 0), by active sets: the numbers
  at a bound that the gradient pushes outward stay there, the others are solved for."""
  d = jnp.clip(jnp.linalg.solve(h, -g), low, high)
  for _ in range(passes):
    grad = h @ d + g
    held = ((d <= low) & (grad > 0)) | ((d >= high) & (grad < 0))
    fixed = jnp.where(held, d, 0.0)
    free = ~held
    system = jnp.where(free[:, None] & free[None, :], h, 0.0) + jnp.diag(held.astype(h.dtype))
    d = jnp.clip(jnp.linalg.solve(system, jnp.where(free, -(g + h @ fixed), fixed)), low, high)
  return d


class _Program:
  """The jitted pieces of a fit over windows (sharded over a mesh axis when axis is given).

  Each method takes c, the checked problem's arrays (_Checked.arrays), first.
  """

  def __init__(self, problem: Problem, fit_starts: bool, bounded: bool, axis: str | None):
    self.problem, self.fit_starts, self.axis = problem, fit_starts, axis
    self.options = _options(problem)
    self.passes = 8 if bounded else 0  # of the boxed solve
    parameters = problem.parameters
    model = parameters.sim.model
    self.parameters = parameters
    self.nv, self.nx = model.nv, 2 * model.nv + model.na
    self.layout = parameters.sim.layout
    self.joints = Joints.of(model)

  def total(self, x: jax.Array) -> jax.Array:
    """Summed over every device's windows: what crosses processes."""
    return x if self.axis is None else jax.lax.psum(x, self.axis)

  def moved(self, starts: jax.Array, offsets: jax.Array) -> jax.Array:
    """Start rows (..., nstate) moved by tangent offsets (..., nx)."""
    layout, nv = self.layout, self.nv
    lead = jnp.broadcast_shapes(starts.shape[:-1], offsets.shape[:-1])
    starts = jnp.broadcast_to(starts, (*lead, starts.shape[-1]))
    offsets = jnp.broadcast_to(offsets, (*lead, self.nx))
    qpos = integrate_pos(self.joints, starts[..., layout.qpos], offsets[..., :nv], 1.0)
    rows = starts.at[..., layout.qpos].set(qpos).at[..., layout.qvel].add(offsets[..., nv:2 * nv])
    return rows.at[..., layout.act].add(offsets[..., 2 * nv:])

  def residuals(self, thetas: jax.Array, rows: jax.Array, ctrls: jax.Array,
                measured: Any) -> jax.Array:
    """(M, R): each row's residual, thetas (M, size), rows (M, nstate), ctrls (M, T, nu)."""
    states, sensordata = rollout(rows, ctrls, self.parameters.params(thetas),
                                 nstep=self.options.nstep, eps=self.options.eps,
                                 centered=self.options.centered)
    r = jax.vmap(self.problem.residual)(states, sensordata, measured)
    return r.reshape(r.shape[0], -1)

  def linearize(self, c: dict, theta: jax.Array, offsets: jax.Array, data: Windows) -> tuple:
    """The residuals (W, R), and d r / d theta (W, R, size) and each window's d r / d its own
    start (W, R, nx), in scale units."""
    count = data.starts.shape[0]

    # A window is a simulation of its own: moving every window's start along one direction
    # at once gives each window's own block in its rows, so nx columns stand for all W x nx.
    def of(t: jax.Array, shift: jax.Array) -> tuple[jax.Array, jax.Array]:
      rows = self.moved(data.starts, offsets + shift) if self.fit_starts else data.starts
      r = self.residuals(jnp.broadcast_to(t, (count, t.size)), rows, data.ctrls, data.measured)
      return r, r

    shift = jnp.zeros(self.nx, theta.dtype)
    if self.fit_starts:
      (jac, jac_start), r = jax.jacfwd(of, argnums=(0, 1), has_aux=True)(theta, shift)
      jac_start = jac_start * c["start_width"]
    else:
      jac, r = jax.jacfwd(of, has_aux=True)(theta, shift)
      jac_start = jnp.zeros((*r.shape, 0), r.dtype)
    return r, jac * c["scale"], jac_start

  def information(self, c: dict, theta: jax.Array, offsets: jax.Array,
                  data: Windows) -> tuple[jax.Array, jax.Array]:
    """J'J of theta after eliminating the starts (their priors included), summed; and the
    residuals' sum of squares and the starts' Jacobian's (to tell whether they are finite)."""
    r, a, b = self.linearize(c, theta, offsets, data)
    info = jnp.einsum("wpi,wpj->ij", a, a)
    squares = self.total(jnp.stack([jnp.sum(r**2), jnp.sum(b**2)]))
    if self.fit_starts:
      cross = jnp.einsum("wpi,wpj->wij", a, b)
      blocks = jnp.einsum("wpi,wpj->wij", b, b) + jnp.eye(self.nx)
      info = info - jnp.einsum("wij,wkj->ik", cross, jnp.linalg.solve(
        blocks, jnp.swapaxes(cross, 1, 2)).swapaxes(1, 2))
    return self.total(info), squares

  def costs(self, c: dict, thetas: jax.Array, offsets: jax.Array, data: Windows) -> jax.Array:
    """(K,) the costs of K candidates: thetas (K, size), offsets (K, W, nx), all K x W
    simulations rows of one call."""
    k, count = thetas.shape[0], data.starts.shape[0]
    rows = (self.moved(data.starts, offsets) if self.fit_starts
            else jnp.broadcast_to(data.starts, (k, *data.starts.shape)))
    tile = lambda x: jnp.broadcast_to(x, (k, *x.shape)).reshape(k * x.shape[0], *x.shape[1:])  # noqa: E731
    r = self.residuals(jnp.repeat(thetas, count, axis=0), rows.reshape(k * count, -1),
                       tile(data.ctrls), jax.tree.map(tile, data.measured))
    data_part = jnp.sum(r.reshape(k, -1) ** 2, axis=1)
    if self.fit_starts:
      data_part = data_part + jnp.sum((offsets / c["start_width"]) ** 2, axis=(1, 2))
    prior = (thetas - c["mean"]) / c["scale"]
    return 0.5 * (self.total(data_part) + jnp.sum(c["precision"] * prior**2, axis=1))

  def step(self, c: dict, theta: jax.Array, offsets: jax.Array, data: Windows) -> tuple:
    """One Levenberg-Marquardt iteration: (theta, offsets, cost before, cost after, whether
    the normal equations are finite)."""
    scale, precision = c["scale"], c["precision"]
    n, nx = theta.size, self.nx
    r, a, b = self.linearize(c, theta, offsets, data)
    prior = (theta - c["mean"]) / scale
    # Normal equations in scale units, where each prior's curvature is its precision, so that
    # Levenberg's damping means the same for every number. A window's start enters only its own
    # residuals: its nx x nx block is eliminated where the window is simulated (the Schur
    # complement), and what crosses processes is the n x n system.
    eye = jnp.eye(nx, dtype=theta.dtype)
    if self.fit_starts:
      start_prior = offsets / c["start_width"]
      cross = jnp.einsum("wpi,wpj->wij", a, b)  # (W, n, nx)
      blocks = jnp.einsum("wpi,wpj->wij", b, b) + eye  # (W, nx, nx)
      grad_starts = jnp.einsum("wpj,wp->wj", b, r) + start_prior
      start_terms = jnp.stack([jnp.sum(jnp.trace(blocks, axis1=1, axis2=2)),
                               jnp.sum(start_prior**2)])
    else:
      start_terms = jnp.zeros(2, theta.dtype)
    count = self.total(jnp.asarray(data.starts.shape[0], theta.dtype)) if self.fit_starts else 0
    sums = self.total(jnp.concatenate([jnp.einsum("wpi,wpj->ij", a, a).ravel(),
                                       jnp.einsum("wpi,wp->i", a, r),
                                       jnp.sum(r**2)[None], start_terms]))
    hessian = sums[: n * n].reshape(n, n) + jnp.diag(precision)
    grad = sums[n * n: n * n + n] + precision * prior
    before = 0.5 * (sums[n * n + n] + sums[-1] + jnp.sum(precision * prior**2))
    mean = (jnp.trace(hessian) + sums[-2]) / (n + count * nx)
    low, high = (c["low"] - theta) / scale, (c["high"] - theta) / scale
    if self.fit_starts:
      right = jnp.concatenate([jnp.swapaxes(cross, 1, 2), grad_starts[..., None]], axis=-1)

    def damped(damping: jax.Array) -> tuple[jax.Array, jax.Array]:
      shift = damping * mean
      if self.fit_starts:
        solved = jnp.linalg.solve(blocks + shift * eye, right)  # (W, nx, n + 1)
        # C B^-1 [C' g]: the starts' share of the n x n system and of its right-hand side.
        eliminated = self.total(jnp.einsum("wij,wjk->ik", cross, solved))
        reduced = hessian + shift * jnp.eye(n) - eliminated[:, :n]
        direction = _box_solve(reduced, grad - eliminated[:, n], low, high, self.passes)
        starts = -(solved[..., n] + jnp.einsum("wji,i->wj", solved[..., :n], direction))
      else:
        direction = _box_solve(hessian + shift * jnp.eye(n), grad, low, high, self.passes)
        starts = jnp.zeros_like(offsets)
      # At most max_step scales a number and step: beyond it the linearisation means little.
      # (A box around 0 keeps the shortened step inside the bounds.)
      factor = jnp.minimum(1.0, self.options.max_step / jnp.max(jnp.abs(direction)))
      return direction * factor * scale, starts * factor * (
        c["start_width"] if self.fit_starts else 1.0)

    # Every damping's step is tried as rows of one rollout call; the best is taken if it helps.
    steps = jax.vmap(damped)(jnp.asarray(self.options.dampings, theta.dtype))
    thetas = jnp.clip(theta + steps[0], c["low"], c["high"])
    tried = jnp.nan_to_num(self.costs(c, thetas, offsets + steps[1], data), nan=jnp.inf)
    best = jnp.argmin(tried)
    better = tried[best] < before
    theta = jnp.where(better, thetas[best], theta)
    offsets = jnp.where(better, offsets + steps[1][best], offsets)
    # A non-finite Jacobian makes every step NaN, which no damping helps: said, not converged.
    finite = jnp.all(jnp.isfinite(sums))
    return theta, offsets, before, jnp.where(better, tried[best], before), finite


def _local_windows(data: Windows, dist: Any) -> Windows:
  """This process's windows of a global set (or its own already), as numpy."""
  count = len(data.starts)
  if count == dist.num_sims:
    return jax.tree.map(lambda x: np.asarray(x)[dist.rows], data)
  if count == dist.num_local:
    return jax.tree.map(np.asarray, data)
  raise ValueError(f"with dist, the windows must be all {dist.num_sims} (the Distributed's "
                   f"num_sims_global) or this process's {dist.num_local}, got {count}")


# Compiled fit programs a Parameters keeps. A fit whose residual is a new function object (a
# lambda made in a loop of fits) compiles its own, a few MB each: the least recently used beyond
# this many are dropped, and JAX frees a program with its last reference.
PROGRAMS_LIMIT = 8


class _Programs:
  """A Parameters' compiled programs by key: the PROGRAMS_LIMIT most recently used, all of them
  released once the Simulator is closed (they call its engine, which is gone)."""

  def __init__(self, sim: Simulator):
    self._sim = sim
    self._held: collections.OrderedDict[Any, Callable] = collections.OrderedDict()

  def __len__(self) -> int:
    self._release_if_closed()
    return len(self._held)

  def get(self, key: Any) -> Callable | None:
    """The program of key, now the most recently used; None if not held (TypeError if key
    cannot be hashed)."""
    self._release_if_closed()
    program = self._held.get(key)
    if program is not None:
      self._held.move_to_end(key)
    return program

  def put(self, key: Any, program: Callable) -> None:
    self._held[key] = program
    self._held.move_to_end(key)
    while len(self._held) > max(PROGRAMS_LIMIT, 1):
      self._held.popitem(last=False)
    self._release_if_closed()

  def _release_if_closed(self) -> None:
    if self._sim.closed:
      self._held.clear()


class _Runner:
  """A _Program method jitted over the windows, on one process's devices or a dist's mesh.

  The compiled functions live on the Parameters (see _Programs), keyed by what is traced into
  them (the residual function, the options, whether starts are fitted or numbers bounded, the
  dist), so fits that differ only in their guess, priors or bounds compile once.
  """

  def __init__(self, problem: Problem, checked: _Checked, data: Windows, dist: Any, method: str,
               out_specs: Any):
    self.dist = dist
    fit_starts = checked.start_width is not None
    key = (method, problem.residual, _options(problem), fit_starts, checked.bounded, dist)
    try:
      cached = problem.parameters._programs.get(key)
    except TypeError:  # a residual that cannot be hashed: compiled for this fit alone
      key, cached = None, None
    program = _Program(problem, fit_starts, checked.bounded, None if dist is None else dist.axis)
    self.consts = {k: jnp.asarray(x) for k, x in checked.arrays().items()}
    if dist is None:
      self.data = jax.tree.map(jnp.asarray, data)
      self.compiled = cached or jax.jit(getattr(program, method))
    else:
      self.data = dist.shard(_local_windows(data, dist))
      self.consts = dist.replicate(self.consts)
      # Given, not read from the arguments: on a one-device mesh JAX hands the offsets back
      # replicated, which would compile the step again for the second iteration.
      rows, whole = PartitionSpec(dist.axis), PartitionSpec()
      in_specs = (jax.tree.map(lambda _: whole, self.consts), whole, rows,
                  jax.tree.map(lambda _: rows, self.data))
      self.compiled = cached or dist.map(getattr(program, method), out_specs=out_specs,
                                         in_specs=in_specs)
    if key is not None:
      problem.parameters._programs.put(key, self.compiled)
    self.count = self.data.starts.shape[0] if dist is None else dist.num_local
    model = problem.parameters.sim.model
    self.nx = 2 * model.nv + model.na

  def fn(self, theta: Any, offsets: Any) -> Any:
    return self.compiled(self.consts, theta, offsets, self.data)

  def offsets(self, offsets: np.ndarray) -> Any:
    return jnp.asarray(offsets) if self.dist is None else self.dist.shard(offsets)

  def theta(self, theta: np.ndarray) -> Any:
    return jnp.asarray(theta) if self.dist is None else self.dist.replicate(theta)

  def read(self, x: Any) -> np.ndarray:
    return np.asarray(x) if self.dist is None else self.dist.local(x)


def _check_dist(dist: Any) -> None:
  if dist is not None and not isinstance(dist, Distributed):
    raise ValueError(f"dist must be a mjbatch_jax.distributed.Distributed (from "
                     f"distributed.setup), got {type(dist).__name__}")


def fit(problem: Problem, data: Windows, theta0: Any = None, iterations: int | np.integer = 30,
        tolerance: float | np.floating = 1.0, starts: Any = None, dist: Any = None) -> Fit:
  """Levenberg-Marquardt from theta0 on the windows; the fit, its costs and its timings.

  Each iteration is one jitted function: the Jacobian (one custom call per knot, every column
  of every window a row), the normal equations with the starts eliminated, the steps of every
  damping and their costs (one more call). It stops when a step lowers the cost by at most
  `tolerance` (none of the dampings' steps lowering it counts), or after `iterations`.

  Args:
    problem: what to fit.
    data: the windows (with dist: all windows, or this process's).
    theta0: (size,) the starting guess; None: the model's values (parameters.initial).
    iterations: the most iterations.
    tolerance: with residuals in units of their noise the cost is a chi-square over 2, and a
      gain below 1 is evidence of nothing.
    starts: (W, nx) the starts' offsets to begin with (a previous Fit's); None: the records.
    dist: a `mjbatch_jax.distributed.Distributed` whose batch is the windows (set up with
      num_sims_global = W): the windows are sharded over its mesh and the sums psum-ed.

  Returns:
    A Fit; its theta is the same in every process.

  Raises:
    ValueError: a bad argument, before anything is simulated; a residual that is not finite at
      theta0, or a Jacobian that is not finite where the residual is (no step could be taken:
      never reported as convergence).

  Example:
    result = sysid.fit(problem, data, theta0)
    params = problem.parameters.params(result.theta, 1)
  """
  checked = _check(problem, theta0, data)
  iterations = v.integer("iterations", iterations, low=1)
  tolerance = v.number("tolerance", tolerance, low=0.0)
  _check_dist(dist)
  model = problem.parameters.sim.model
  offsets0 = _offsets(starts, len(data.starts) if dist is None else dist.num_local,
                      2 * model.nv + model.na)
  shard = PartitionSpec() if dist is None else PartitionSpec(dist.axis)
  whole = PartitionSpec()
  runner = _Runner(problem, checked, data, dist, "step", (whole, shard, whole, whole, whole))
  theta, offsets = runner.theta(checked.theta0), runner.offsets(offsets0)
  costs, wall, cpu, converged = [], [], [], False
  for k in range(iterations):
    begin, begin_cpu = time.perf_counter(), time.process_time()
    at = theta
    theta, offsets, before, after, finite = runner.fn(theta, offsets)
    before, after = float(runner.read(before)), float(runner.read(after))
    wall.append(time.perf_counter() - begin)
    cpu.append(time.process_time() - begin_cpu)
    if not costs:
      if not math.isfinite(before):
        raise ValueError(f"the cost at theta0 is {before}: the residual is not finite there "
                         "(check the residual function and the measurements)")
      costs.append(before)
    if not bool(runner.read(finite)):
      where = "theta0" if k == 0 else f"theta {runner.read(at).tolist()} (iteration {k + 1})"
      raise ValueError(f"the residual's Jacobian is not finite at {where}, where the residual "
                       "is: no step can be taken (check the residual function's derivative, "
                       "e.g. a sqrt or norm at 0)")
    costs.append(after)
    if before - after <= tolerance:
      converged = True
      break
  return Fit(runner.read(theta), runner.read(offsets), np.array(costs), converged,
             np.array(wall), np.array(cpu))


def report(problem: Problem, data: Windows, result: Any, starts: Any = None, dist: Any = None,
           rtol: float | np.floating = 1e-6) -> Report:
  """The identifiability of the numbers at a fit (or at any theta): see Report.

  Args:
    problem, data, dist: as for `fit`.
    result: a Fit, or a theta (size,) (with starts: their offsets, None for the records).
    rtol: singular values at most rtol times the largest count as unseen: finite differences
      leave about 1e-6 of the largest on directions that change nothing.

  Raises:
    ValueError: as fit does, for bad arguments and for a residual or Jacobian that is not
      finite at theta (whose spreads would say nothing).

  Example:
    print(sysid.report(problem, data, result).summary())
  """
  if isinstance(result, Fit):
    if starts is not None:
      raise ValueError("starts: a Fit carries its own starts; give starts with a theta only")
    theta, starts, what = result.theta, result.starts, "result.theta"
  elif result is None:
    raise ValueError("result must be a sysid.Fit or a theta (one value per number), got None")
  else:
    theta, what = result, "theta"
  checked = _check(problem, theta, data, what)
  rtol = v.number("rtol", rtol, low=0.0, high=1.0, low_open=True, high_open=True)
  _check_dist(dist)
  model = problem.parameters.sim.model
  offsets = _offsets(starts, len(data.starts) if dist is None else dist.num_local,
                     2 * model.nv + model.na)
  runner = _Runner(problem, checked, data, dist, "information",
                   (PartitionSpec(), PartitionSpec()))
  info, squares = runner.fn(runner.theta(checked.theta0), runner.offsets(offsets))
  info, squares = runner.read(info), runner.read(squares)
  # As fit: what is not finite at theta is refused, never reported as certainty.
  if not math.isfinite(float(squares[0])):
    raise ValueError(f"the cost at {what} is {float(squares[0])}: the residual is not finite "
                     "there (check the residual function and the measurements)")
  if not (np.all(np.isfinite(info)) and math.isfinite(float(squares[1]))):
    raise ValueError(f"the residual's Jacobian is not finite at {what}, where the residual is "
                     "(check the residual function's derivative, e.g. a sqrt or norm at 0)")
  info = 0.5 * (info + info.T)
  values, vectors = np.linalg.eigh(info)
  order = np.argsort(values)[::-1]
  singular = np.sqrt(np.maximum(values[order], 0.0))
  rank = int(np.sum(singular > rtol * singular[0])) if singular[0] > 0 else 0
  # Posterior variances in scale units, the prior included: a direction that neither the data
  # nor a prior constrain (its curvature at most rtol^2 of the largest, as for the rank) makes
  # every number it moves infinitely uncertain.
  post_values, post_vectors = np.linalg.eigh(info + np.diag(checked.precision))
  seen = post_values > rtol**2 * max(float(post_values.max()), 1e-300)
  unseen = (np.abs(post_vectors[:, ~seen]) > 1e-8).any(axis=1)
  variance = np.where(unseen, np.inf, (post_vectors[:, seen] ** 2 / post_values[seen]).sum(1))
  directions = vectors[:, order].T
  unseen = np.sqrt(np.sum(directions[rank:] ** 2, axis=0))
  return Report(problem.parameters.names, info, singular, directions, rank,
                checked.scale * np.sqrt(variance), checked.prior_width, unseen)


__all__ = [
  "Field",
  "Fit",
  "Inertia",
  "Parameters",
  "Problem",
  "Report",
  "Windows",
  "fit",
  "report",
  "windows",
]
