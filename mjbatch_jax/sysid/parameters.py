"""Parameter maps: one vector theta of unknowns turned into params leaves (inertias in a
physically consistent form, any params field, each optionally in log form)."""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax import rotations
from mjbatch_jax.params import Params
from mjbatch_jax.simulator import Simulator
from mjbatch_jax.sysid.programs import _Programs

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

  Attributes:
    bodies: names or ids of the bodies (not the world body); theta holds their numbers body by
      body.
    form: how the numbers describe each body's inertia: "principal" (the default),
      "log_cholesky", "mass" or "mass_com", as above. It decides which fields the map writes:
      body_mass and body_inertia, with "mass_com" body_ipos too, with "principal" and
      "log_cholesky" body_ipos and body_iquat as well.

  Raises:
    ValueError: bodies is empty or not names or ids, or form is not one of the four.

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

  Attributes:
    name: the params field, as Simulator.params names it ("dof_damping", "geom_friction",
      "opt.gravity", ...).
    rows: names or ids of the field's objects, None for all (an option such as "opt.gravity"
      has no rows: all its entries). Rows of dof_* fields (dof_damping, dof_armature,
      dof_frictionloss) are chosen by joint names (a joint's dofs) or dof ids.
    log: if True, theta holds the log of each entry, so that the value exp(theta) stays
      positive for any theta (the model's values must then be positive); default False.

  Raises:
    ValueError: name is not a string, rows is empty or not names or ids, or log not a bool.

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
      ...; it costs one mj_setConst per simulation and call: docs/sysid.md gives its price).

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
