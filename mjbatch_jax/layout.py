"""Named slices of a state row, so that `state[:, sim.layout.qpos]` reads positions."""

import dataclasses

import mujoco

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

  Each attribute is a slice into the row's last axis; `size` is the row's length.

    layout = StateLayout.of(model)
    qpos = state[..., layout.qpos]              # (N, nq)
    state = state.at[..., layout.ctrl].set(u)   # jnp
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

  @classmethod
  def of(cls, model: mujoco.MjModel) -> "StateLayout":
    slices = {}
    offset = 0
    for name, bit in _COMPONENTS:
      size = mujoco.mj_stateSize(model, int(bit))
      slices[name] = slice(offset, offset + size)
      offset += size
    assert offset == mujoco.mj_stateSize(model, int(mujoco.mjtState.mjSTATE_INTEGRATION))
    return cls(size=offset, **slices)

  def names(self) -> tuple[str, ...]:
    return tuple(name for name, _ in _COMPONENTS)
