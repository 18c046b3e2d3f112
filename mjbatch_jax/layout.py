"""Named slices of a state row, so that `state[:, sim.layout.qpos]` reads positions."""

import dataclasses
import math

import mujoco
import numpy as np

# mjtState components of a row, in mj_getState order (increasing bit), with MjData's names.
_COMPONENTS = (
  ("time", mujoco.mjtState.mjSTATE_TIME),
  ("qpos", mujoco.mjtState.mjSTATE_QPOS),
  ("qvel", mujoco.mjtState.mjSTATE_QVEL),
  ("act", mujoco.mjtState.mjSTATE_ACT),
  ("history", mujoco.mjtState.mjSTATE_HISTORY),
  ("qacc_warmstart", mujoco.mjtState.mjSTATE_WARMSTART),
  ("ctrl", mujoco.mjtState.mjSTATE_CTRL),
  ("qfrc_applied", mujoco.mjtState.mjSTATE_QFRC_APPLIED),
  ("xfrc_applied", mujoco.mjtState.mjSTATE_XFRC_APPLIED),
  ("eq_active", mujoco.mjtState.mjSTATE_EQ_ACTIVE),
  ("mocap_pos", mujoco.mjtState.mjSTATE_MOCAP_POS),
  ("mocap_quat", mujoco.mjtState.mjSTATE_MOCAP_QUAT),
  ("userdata", mujoco.mjtState.mjSTATE_USERDATA),
  ("plugin_state", mujoco.mjtState.mjSTATE_PLUGIN),
  ("plastic", mujoco.mjtState.mjSTATE_PLASTIC),
)


@dataclasses.dataclass(frozen=True)
class StateLayout:
  """Where each MjData field lies in an mjSTATE_INTEGRATION row.

  Each attribute is a slice into the row's last axis; `size` is the row's length; `shapes`
  holds the shape MjData gives each component (mocap_pos (nmocap, 3)), or its length where the
  row stores it otherwise. Hashable and compared by value (a pytree's static part can hold it).

    layout = StateLayout.of(model)
    qpos = state[..., layout.qpos]              # (N, nq)
    state = state.at[..., layout.ctrl].set(u)   # jnp
    start, stop, shape = layout.entry("mocap_pos")

  Attributes:
    size: the row's length, mj_stateSize(model, mjSTATE_INTEGRATION).
    time: the simulation time, 1 column.
    qpos: the joint positions, nq columns.
    qvel: the joint velocities, nv columns.
    act: the actuator activations, na columns.
    history: the history buffers of delayed controls and sensors, nhistory columns.
    qacc_warmstart: the accelerations that warm-start the constraint solver, nv columns.
    ctrl: the controls, nu columns.
    qfrc_applied: the applied generalized forces, nv columns.
    xfrc_applied: the applied Cartesian forces and torques, nbody x 6 columns.
    eq_active: whether each equality constraint is active (1.0 or 0.0), neq columns.
    mocap_pos: the mocap bodies' positions, nmocap x 3 columns.
    mocap_quat: the mocap bodies' quaternions, nmocap x 4 columns.
    userdata: the user data, nuserdata columns.
    plugin_state: the plugins' state, npluginstate columns.
    plastic: the plastic state, nplastic columns.
    shapes: by component, in names() order, the shape MjData gives it (or its length where the
      row stores it otherwise).
  """

  size: int
  time: slice
  qpos: slice
  qvel: slice
  act: slice
  history: slice
  qacc_warmstart: slice
  ctrl: slice
  qfrc_applied: slice
  xfrc_applied: slice
  eq_active: slice
  mocap_pos: slice
  mocap_quat: slice
  userdata: slice
  plugin_state: slice
  plastic: slice
  shapes: tuple[tuple[int, ...], ...] = ()  # by component, in names() order

  @classmethod
  def of(cls, model: mujoco.MjModel) -> "StateLayout":
    """The layout of model's mjSTATE_INTEGRATION rows.

    Example:
      layout = StateLayout.of(mujoco.MjModel.from_xml_path("scene.xml"))
    """
    slices = {}
    offset = 0
    for name, bit in _COMPONENTS:
      size = mujoco.mj_stateSize(model, int(bit))
      slices[name] = slice(offset, offset + size)
      offset += size
    assert offset == mujoco.mj_stateSize(model, int(mujoco.mjtState.mjSTATE_INTEGRATION))
    data = mujoco.MjData(model)
    shapes = []
    for name, _ in _COMPONENTS:
      length = slices[name].stop - slices[name].start
      shape = tuple(np.shape(getattr(data, name))) if hasattr(data, name) else (length,)
      # A row stores some fields MjData keeps elsewhere or in another size; those read flat.
      shapes.append(shape if math.prod(shape) == length else (length,))
    return cls(size=offset, **slices, shapes=tuple(shapes))

  def names(self) -> tuple[str, ...]:
    """The components' names, in the order of the row (and of `shapes`)."""
    return tuple(name for name, _ in _COMPONENTS)

  def entry(self, name: str) -> tuple[int, int, tuple[int, ...]]:
    """(start, stop, shape) of component name; KeyError for a name the row does not hold."""
    names = self.names()
    if name not in names:
      raise KeyError(name)
    part = getattr(self, name)
    return part.start, part.stop, self.shapes[names.index(name)]

  def _key(self) -> tuple:
    return (self.size, self.shapes,
            tuple((getattr(self, n).start, getattr(self, n).stop) for n in self.names()))

  def __eq__(self, other: object) -> bool:
    return isinstance(other, StateLayout) and self._key() == other._key()

  def __hash__(self) -> int:
    # Slices are unhashable before Python 3.12; the layout hashes by their bounds.
    return hash(self._key())
