"""Static name lookups: ids, slices and index arrays for a model's named objects.

Everything here is plain Python ints, slices and numpy arrays, fixed by the model, so a lookup
runs once at trace time and indexes traced arrays inside `jax.jit` like a literal would.
"""

import dataclasses
import difflib
from collections.abc import Iterable, Iterator, Mapping

import mujoco
import numpy as np

from mjbatch_jax.layout import StateLayout

# Kinds of named objects: (kind, its mjtObj, its count in MjModel, its plural for messages).
# The kinds are MjModel's accessor names (`model.body(name)`, `model.keyframe(name)`).
_KINDS = (
  ("body", mujoco.mjtObj.mjOBJ_BODY, "nbody", "bodies"),
  ("joint", mujoco.mjtObj.mjOBJ_JOINT, "njnt", "joints"),
  ("geom", mujoco.mjtObj.mjOBJ_GEOM, "ngeom", "geoms"),
  ("site", mujoco.mjtObj.mjOBJ_SITE, "nsite", "sites"),
  ("camera", mujoco.mjtObj.mjOBJ_CAMERA, "ncam", "cameras"),
  ("light", mujoco.mjtObj.mjOBJ_LIGHT, "nlight", "lights"),
  ("flex", mujoco.mjtObj.mjOBJ_FLEX, "nflex", "flexes"),
  ("mesh", mujoco.mjtObj.mjOBJ_MESH, "nmesh", "meshes"),
  ("skin", mujoco.mjtObj.mjOBJ_SKIN, "nskin", "skins"),
  ("hfield", mujoco.mjtObj.mjOBJ_HFIELD, "nhfield", "hfields"),
  ("texture", mujoco.mjtObj.mjOBJ_TEXTURE, "ntex", "textures"),
  ("material", mujoco.mjtObj.mjOBJ_MATERIAL, "nmat", "materials"),
  ("pair", mujoco.mjtObj.mjOBJ_PAIR, "npair", "pairs"),
  ("exclude", mujoco.mjtObj.mjOBJ_EXCLUDE, "nexclude", "excludes"),
  ("equality", mujoco.mjtObj.mjOBJ_EQUALITY, "neq", "equalities"),
  ("tendon", mujoco.mjtObj.mjOBJ_TENDON, "ntendon", "tendons"),
  ("actuator", mujoco.mjtObj.mjOBJ_ACTUATOR, "nu", "actuators"),
  ("sensor", mujoco.mjtObj.mjOBJ_SENSOR, "nsensor", "sensors"),
  ("numeric", mujoco.mjtObj.mjOBJ_NUMERIC, "nnumeric", "numerics"),
  ("text", mujoco.mjtObj.mjOBJ_TEXT, "ntext", "texts"),
  ("tuple", mujoco.mjtObj.mjOBJ_TUPLE, "ntuple", "tuples"),
  ("keyframe", mujoco.mjtObj.mjOBJ_KEY, "nkey", "keyframes"),
  ("plugin", mujoco.mjtObj.mjOBJ_PLUGIN, "nplugin", "plugins"),
)
_PLURAL = {kind: plural for kind, _, _, plural in _KINDS}

# qpos and qvel widths of each mjtJoint: free, ball, slide, hinge (batch.py's accessors too).
QPOS_WIDTH = (7, 4, 1, 1)
DOF_WIDTH = (6, 3, 1, 1)

# How many names an unknown-name message lists before "...".
_LISTED = 8


@dataclasses.dataclass(frozen=True)
class JointSlices:
  """Where one joint's values lie: in a state row, and in the qpos and qvel vectors.

  Widths follow the joint's type: free 7 and 6, ball 4 and 3, slide and hinge 1 and 1.

  Attributes:
    name: the joint's name.
    id: the joint's id, to index per-joint params leaves (`params["jnt_stiffness"][..., id]`).
    type: its mjtJoint, as an int.
    qpos: its positions' columns of an mjSTATE_INTEGRATION row.
    qvel: its velocities' columns of that row.
    qpos_index: its positions in a (..., nq) qpos array.
    dof_index: its dofs in a (..., nv) qvel, qacc or qfrc array, or in dof_* params leaves.

  Example:
    hip = names.joint("hip")
    angle = state[..., hip.qpos]                    # (..., 1)
    state = state.at[..., hip.qvel].set(0.0)
    damping = params["dof_damping"][..., hip.dof_index]
  """

  name: str
  id: int
  type: int
  qpos: slice
  qvel: slice
  qpos_index: slice
  dof_index: slice

  # slice is unhashable before Python 3.12; hash what the slices hold instead.
  def __hash__(self) -> int:
    bounds = [(s.start, s.stop) for s in (self.qpos, self.qvel, self.qpos_index, self.dof_index)]
    return hash((self.name, self.id, self.type, *bounds))


@dataclasses.dataclass(frozen=True)
class Names:
  """A model's object names as static lookups: ids, slices and index arrays for `jax.jit`.

  Made by `Names.of(model)` (or `Simulator.names`). Frozen and hashable: close over it in a
  jitted function or pass it as a static argument. Lookups return Python ints, slices and numpy
  int arrays fixed by the model, so they index traced state rows, `forward` outputs and params
  leaves like literals. An unknown name raises ValueError with the closest names of its kind.

  Kinds are MjModel's accessor names: body, joint, geom, site, camera, light, flex, mesh, skin,
  hfield, texture, material, pair, exclude, equality, tendon, actuator, sensor, numeric, text,
  tuple, keyframe, plugin.

    names = Names.of(model)

    @jax.jit
    def observe(state, params):
      out = mjbatch_jax.forward(state, params, ("sensordata", "site_xpos"))
      return jnp.concatenate([
        state[..., names.joint("hip").qpos],
        out["sensordata"][..., names.sensors("gyro", "accel")],
        out["site_xpos"][..., names.site("foot"), :],
      ], axis=-1)

    heavier = params["body_mass"].at[..., names.body("torso")].mul(1.1)
    floor = params["geom_friction"][..., names.geoms("floor", "ramp"), 0]

  Attributes:
    objects: per kind, in the order of kinds(), its objects' names by id ("" for an unnamed
      one).
    joint_types: per joint, its mjtJoint as an int (MjModel.jnt_type).
    joint_qposadr: per joint, where its positions start in qpos (MjModel.jnt_qposadr).
    joint_dofadr: per joint, where its dofs start in qvel (MjModel.jnt_dofadr).
    sensor_adr: per sensor, where its values start in sensordata (MjModel.sensor_adr).
    sensor_dim: per sensor, how many values it has in sensordata (MjModel.sensor_dim).
    row_qpos: the column where qpos starts in a state row (StateLayout.qpos.start).
    row_qvel: the column where qvel starts in a state row (StateLayout.qvel.start).
    row_ctrl: the column where ctrl starts in a state row (StateLayout.ctrl.start).

  These fields are what `Names.of` reads from the model; build a Names with it rather than by
  hand.
  """

  # Per kind, in _KINDS order: its objects' names by id, "" for an unnamed one.
  objects: tuple[tuple[str, ...], ...] = dataclasses.field(repr=False)
  # Per joint: mjtJoint, qpos address, dof address.
  joint_types: tuple[int, ...] = dataclasses.field(repr=False)
  joint_qposadr: tuple[int, ...] = dataclasses.field(repr=False)
  joint_dofadr: tuple[int, ...] = dataclasses.field(repr=False)
  # Per sensor: address and size in sensordata.
  sensor_adr: tuple[int, ...] = dataclasses.field(repr=False)
  sensor_dim: tuple[int, ...] = dataclasses.field(repr=False)
  # Where qpos, qvel and ctrl start in a state row (StateLayout's slices, unhashable before 3.12).
  row_qpos: int = dataclasses.field(repr=False)
  row_qvel: int = dataclasses.field(repr=False)
  row_ctrl: int = dataclasses.field(repr=False)
  # Per kind, name -> id: derived from objects, so left out of equality and hashing.
  _ids: Mapping[str, Mapping[str, int]] = dataclasses.field(
    init=False, repr=False, compare=False, hash=False
  )

  def __post_init__(self) -> None:
    if len(self.objects) != len(_KINDS):
      raise ValueError(f"objects must hold {len(_KINDS)} kinds' names, got {len(self.objects)}")
    ids = {
      kind: {name: i for i, name in enumerate(names) if name}
      for (kind, *_), names in zip(_KINDS, self.objects, strict=True)
    }
    object.__setattr__(self, "_ids", ids)

  @classmethod
  def of(cls, model: mujoco.MjModel) -> "Names":
    """The names of a model's objects, with the addresses that the lookups need.

    Example:
      names = Names.of(mujoco.MjModel.from_xml_path("scene.xml"))
    """
    if not isinstance(model, mujoco.MjModel):
      raise ValueError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
    objects = tuple(
      tuple(mujoco.mj_id2name(model, obj, i) or "" for i in range(int(getattr(model, count))))
      for _, obj, count, _ in _KINDS
    )
    layout = StateLayout.of(model)
    return cls(
      objects=objects,
      joint_types=tuple(int(t) for t in model.jnt_type),
      joint_qposadr=tuple(int(a) for a in model.jnt_qposadr),
      joint_dofadr=tuple(int(a) for a in model.jnt_dofadr),
      sensor_adr=tuple(int(a) for a in model.sensor_adr),
      sensor_dim=tuple(int(d) for d in model.sensor_dim),
      row_qpos=int(layout.qpos.start),
      row_qvel=int(layout.qvel.start),
      row_ctrl=int(layout.ctrl.start),
    )

  def __repr__(self) -> str:
    counts = ", ".join(f"{kind}={len(table)}" for kind, table in self._ids.items() if table)
    return f"Names({counts})"  # of named objects: the full lists would swamp a traceback

  # ------------------------------------------------------------------------------ any kind

  def kinds(self) -> tuple[str, ...]:
    """The kinds of objects that can be looked up, whether or not the model has any.

    Example:
      assert "sensor" in names.kinds()
    """
    return tuple(kind for kind, *_ in _KINDS)

  def named(self, kind: str) -> tuple[str, ...]:
    """The names of a kind's named objects, in id order (unnamed ones are left out).

    Example:
      names.named("sensor")  # ('gyro', 'accel', ...)
    """
    return tuple(self._table(kind))

  def has(self, kind: str, name: str) -> bool:
    """Whether the model has an object of this kind with this name.

    Example:
      if names.has("site", "imu"): ...
    """
    return isinstance(name, str) and name in self._table(kind)

  def id(self, kind: str, name: str) -> int:
    """The id of the named object of a kind: `names.id("light", "top")`.

    Example:
      tip = out["site_xpos"][..., names.id("site", "tip"), :]
    """
    table = self._table(kind)
    if not isinstance(name, str):
      raise ValueError(f"{kind} names are strings, got {name!r}")
    found = table.get(name)
    if found is None:
      raise ValueError(self._unknown(kind, name, table))
    return found

  def ids(self, kind: str, *names: str | Iterable[str]) -> np.ndarray:
    """The ids of named objects of a kind, in the order given, as an int array.

    Names may come as separate arguments or as one list.

    Example:
      floor = names.ids("geom", "floor", "ramp")
      mu = params["geom_friction"][..., floor, 0]
    """
    return np.array([self.id(kind, n) for n in _flat(names)], dtype=np.intp)

  # -------------------------------------------------------------------------- joints, dofs

  def joint(self, name: str) -> JointSlices:
    """A joint's id and its slices of a state row and of the qpos and qvel vectors.

    Example:
      hip = names.joint("hip")
      angle, speed = state[..., hip.qpos], state[..., hip.qvel]
    """
    i = self.id("joint", name)
    kind, qadr, dadr = self.joint_types[i], self.joint_qposadr[i], self.joint_dofadr[i]
    nq, nv = QPOS_WIDTH[kind], DOF_WIDTH[kind]
    return JointSlices(
      name=name,
      id=i,
      type=kind,
      qpos=slice(self.row_qpos + qadr, self.row_qpos + qadr + nq),
      qvel=slice(self.row_qvel + dadr, self.row_qvel + dadr + nv),
      qpos_index=slice(qadr, qadr + nq),
      dof_index=slice(dadr, dadr + nv),
    )

  def joints(self, *names: str | Iterable[str]) -> np.ndarray:
    """Joint ids, in the order given.

    Example:
      stiffness = params["jnt_stiffness"][..., names.joints("hip", "knee")]
    """
    return self.ids("joint", *names)

  def qpos_columns(self, *joints: str | Iterable[str]) -> np.ndarray:
    """The state-row columns of joints' positions, joint after joint, as an int array.

    Example:
      legs = state[..., names.qpos_columns("hip", "knee")]
    """
    return _concat(self.joint(n).qpos for n in _flat(joints))

  def qvel_columns(self, *joints: str | Iterable[str]) -> np.ndarray:
    """The state-row columns of joints' velocities, joint after joint, as an int array.

    Example:
      state = state.at[..., names.qvel_columns("hip", "knee")].set(0.0)
    """
    return _concat(self.joint(n).qvel for n in _flat(joints))

  # ---------------------------------------------------------------------------- actuators

  def actuator(self, name: str) -> int:
    """An actuator's id: its index in a (..., nu) ctrl array and in actuator_* fields.

    Example:
      ctrl = ctrl.at[..., names.actuator("servo")].set(0.5)
    """
    return self.id("actuator", name)

  def actuators(self, *names: str | Iterable[str]) -> np.ndarray:
    """Actuator ids, in the order given: indices into ctrl and actuator_* arrays.

    Example:
      ctrl = jnp.zeros((n, sim.nu)).at[..., names.actuators("hip", "knee")].set(action)
    """
    return self.ids("actuator", *names)

  def actuator_column(self, name: str) -> int:
    """The state-row column of an actuator's ctrl.

    Example:
      state = state.at[..., names.actuator_column("servo")].set(0.5)
    """
    return self.row_ctrl + self.actuator(name)

  def actuator_columns(self, *names: str | Iterable[str]) -> np.ndarray:
    """The state-row columns of actuators' ctrl, in the order given.

    Example:
      last_action = state[..., names.actuator_columns("hip", "knee")]
    """
    return self.row_ctrl + self.actuators(*names)

  # ------------------------------------------------------------------------------ sensors

  def sensor(self, name: str) -> slice:
    """A sensor's slice of sensordata, of its dimension's width.

    Example:
      gyro = out["sensordata"][..., names.sensor("gyro")]  # (..., 3)
    """
    i = self.id("sensor", name)
    adr = self.sensor_adr[i]
    return slice(adr, adr + self.sensor_dim[i])

  def sensors(self, *names: str | Iterable[str]) -> np.ndarray:
    """Sensors' sensordata indices, sensor after sensor, as an int array: an observation.

    Example:
      obs = sensordata[..., names.sensors("gyro", "accel", "angle")]  # (..., 7)
    """
    return _concat(self.sensor(n) for n in _flat(names))

  # ------------------------------------------------------------------- ids of other kinds

  def body(self, name: str) -> int:
    """A body's id: indexes xpos, xquat, cvel, ... and body_* params leaves.

    Example:
      height = out["xpos"][..., names.body("torso"), 2]
    """
    return self.id("body", name)

  def bodies(self, *names: str | Iterable[str]) -> np.ndarray:
    """Body ids, in the order given.

    Example:
      feet = out["xpos"][..., names.bodies("FL", "FR", "RL", "RR"), :]  # (..., 4, 3)
    """
    return self.ids("body", *names)

  def geom(self, name: str) -> int:
    """A geom's id: indexes geom_xpos, geom_xmat and geom_* params leaves.

    Example:
      mu = params["geom_friction"][..., names.geom("floor"), 0]
    """
    return self.id("geom", name)

  def geoms(self, *names: str | Iterable[str]) -> np.ndarray:
    """Geom ids, in the order given.

    Example:
      floor = names.geoms("floor", "ramp")
    """
    return self.ids("geom", *names)

  def site(self, name: str) -> int:
    """A site's id: indexes site_xpos, site_xmat and site_* params leaves.

    Example:
      tip = out["site_xpos"][..., names.site("tip"), :]
    """
    return self.id("site", name)

  def sites(self, *names: str | Iterable[str]) -> np.ndarray:
    """Site ids, in the order given.

    Example:
      feet = out["site_xpos"][..., names.sites("FL", "FR"), :]
    """
    return self.ids("site", *names)

  def tendon(self, name: str) -> int:
    """A tendon's id: indexes ten_length, ten_velocity and tendon_* params leaves.

    Example:
      length = out["ten_length"][..., names.tendon("cable")]
    """
    return self.id("tendon", name)

  def tendons(self, *names: str | Iterable[str]) -> np.ndarray:
    """Tendon ids, in the order given.

    Example:
      lengths = out["ten_length"][..., names.tendons("left", "right")]
    """
    return self.ids("tendon", *names)

  def camera(self, name: str) -> int:
    """A camera's id: indexes cam_xpos, cam_xmat and cam_* params leaves.

    Example:
      eye = out["cam_xpos"][..., names.camera("head"), :]
    """
    return self.id("camera", name)

  def cameras(self, *names: str | Iterable[str]) -> np.ndarray:
    """Camera ids, in the order given.

    Example:
      eyes = out["cam_xpos"][..., names.cameras("left", "right"), :]
    """
    return self.ids("camera", *names)

  def keyframe(self, name: str) -> int:
    """A keyframe's id, as `Simulator.init_state(n, keyframe=...)` takes it.

    Example:
      state = sim.init_state(64, keyframe=names.keyframe("home"))
    """
    return self.id("keyframe", name)

  # ------------------------------------------------------------------------------ helpers

  def _table(self, kind: str) -> Mapping[str, int]:
    table = self._ids.get(kind) if isinstance(kind, str) else None
    if table is None:
      hint = did_you_mean(kind, self.kinds()) if isinstance(kind, str) else ""
      raise ValueError(f"unknown kind {kind!r}{hint}; kinds: {', '.join(self.kinds())}")
    return table

  def _unknown(self, kind: str, name: str, table: Mapping[str, int]) -> str:
    plural = _PLURAL[kind]
    if not name:
      return (
        f"unnamed {plural} cannot be looked up by name: give the {kind} a name in the model, "
        f"or index it by id"
      )
    if not table:
      return f"no {kind} named {name!r}: the model has no named {plural}"
    listed = list(table)[:_LISTED]
    more = f", ... ({len(table)} in all)" if len(table) > _LISTED else ""
    return (
      f"no {kind} named {name!r}{did_you_mean(name, table)}; "
      f"{plural}: {', '.join(map(repr, listed))}{more}"
    )


def _flat(names: Iterable[str | Iterable[str]]) -> Iterator[str]:
  """names with any collection among them spread out, so both f("a", "b") and f([...]) work."""
  for item in names:
    if isinstance(item, str) or not isinstance(item, Iterable):
      yield item  # pyright: ignore[reportReturnType]  (the lookup refuses a non-string)
    else:
      yield from item


def _concat(slices: Iterable[slice]) -> np.ndarray:
  parts = [np.arange(s.start, s.stop, dtype=np.intp) for s in slices]
  return np.concatenate(parts) if parts else np.zeros(0, dtype=np.intp)


def did_you_mean(name: str, names: Iterable[str]) -> str:
  """' (did you mean ...?)' listing close matches of name among names, or ''."""
  close = difflib.get_close_matches(name, sorted(names), n=3)
  return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
