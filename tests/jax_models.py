"""Models and plain-MuJoCo references shared by the JAX tests."""

import copy
from pathlib import Path

import mujoco
import numpy as np

SHARED_MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"
G1 = SHARED_MODELS / "unitree_g1" / "scene.xml"
GO1 = SHARED_MODELS / "unitree_go1" / "scene.xml"

# Smooth (no contacts) with sensors: the float32 comparison and rollout's sensordata.
CARTPOLE = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body name="cart">
      <joint name="slide" type="slide" axis="1 0 0" damping="0.1"/>
      <geom type="box" size=".2 .1 .05" mass="1" contype="0" conaffinity="0"/>
      <body name="pole">
        <joint name="hinge" axis="0 1 0" damping="0.01"/>
        <geom type="capsule" fromto="0 0 0 0 0 .6" size=".03" mass=".2"
              contype="0" conaffinity="0"/>
        <site name="tip" pos="0 0 .6"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slide" gear="5" ctrlrange="-1 1" ctrllimited="true"/></actuator>
  <sensor>
    <jointpos joint="hinge"/>
    <jointvel joint="slide"/>
    <framepos objtype="site" objname="tip"/>
  </sensor>
</mujoco>
"""

# Contacts, a free body, a mocap weld, activation dynamics and an accelerometer: most of what a
# state row holds.
TOY = """
<mujoco>
  <option timestep="0.004"/>
  <worldbody>
    <geom type="plane" size="3 3 .1"/>
    <body name="cart" pos="0 0 .1">
      <joint name="slide" type="slide" axis="1 0 0"/>
      <geom type="box" size=".1 .1 .05" mass="1"/>
      <body name="pole" pos="0 0 .05">
        <joint name="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 .5" size=".02" mass=".1"/>
        <site name="tip" pos="0 0 .5"/>
      </body>
    </body>
    <body name="ball" pos="0 1 .3">
      <freejoint/>
      <geom type="sphere" size=".1" mass=".3"/>
    </body>
    <body name="mocap" mocap="true" pos="0 1 .5">
      <geom type="sphere" size=".02" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <equality><weld body1="mocap" body2="ball" solref=".05 1"/></equality>
  <actuator>
    <motor joint="slide" gear="5"/>
    <general joint="hinge" dyntype="filter" dynprm="0.02" gainprm="5" biastype="affine"
             biasprm="0 -5 0"/>
  </actuator>
  <sensor>
    <jointpos joint="hinge"/>
    <accelerometer site="tip"/>
  </sensor>
</mujoco>
"""


def load(model: str | Path) -> mujoco.MjModel:
  if isinstance(model, Path):
    return mujoco.MjModel.from_xml_path(str(model))
  return mujoco.MjModel.from_xml_string(model)


def row(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
  out = np.empty(mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION))
  mujoco.mj_getState(model, data, out, mujoco.mjtState.mjSTATE_INTEGRATION)
  return out


def with_params(model: mujoco.MjModel, values: dict[str, np.ndarray]) -> mujoco.MjModel:
  """A copy of model with one simulation's params written into it."""
  m = copy.copy(model)
  for name, value in values.items():
    if name.startswith("opt."):
      current = getattr(m.opt, name[4:])
      if np.ndim(current):
        current[...] = value
      else:
        setattr(m.opt, name[4:], float(value))
    else:
      getattr(m, name)[...] = value
  return m


def reference_steps(
  model: mujoco.MjModel, start: np.ndarray, ctrls: np.ndarray, nstep: int
) -> np.ndarray:
  """Rows after each call of nstep mj_step calls on a fresh MjData, ctrls (T, nu)."""
  data = mujoco.MjData(model)
  mujoco.mj_setState(model, data, start, mujoco.mjtState.mjSTATE_INTEGRATION)
  rows = []
  for ctrl in ctrls:
    data.ctrl[:] = ctrl
    for _ in range(nstep):
      mujoco.mj_step(model, data)
    rows.append(row(model, data))
  return np.stack(rows)
