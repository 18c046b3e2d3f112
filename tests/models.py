"""Models shared by the tests, and plain-MuJoCo references to compare with."""

import copy
from pathlib import Path

import mujoco
import numpy as np
import pytest

MODELS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "models"
G1 = MODELS_DIR / "unitree_g1" / "scene.xml"
GO1 = MODELS_DIR / "unitree_go1" / "scene.xml"

MODELS_MISSING = (
  f"robot models not found: the G1 and Go1 tests read MuJoCo Menagerie's unitree_g1 and "
  f"unitree_go1 from {MODELS_DIR}, the folder ../shared/models beside the checkout (see the "
  f"README.md there)"
)
# Skips a test, or with `pytestmark = requires_models` a file, when the robot models are absent.
requires_models = pytest.mark.skipif(not (G1.exists() and GO1.exists()), reason=MODELS_MISSING)


def robot(path: Path) -> Path:
  """path; skips the calling test if it is a robot model under MODELS_DIR that is absent.

  Example:
    model = mujoco.MjModel.from_xml_path(str(robot(G1)))
  """
  if not path.exists() and MODELS_DIR in path.parents:
    pytest.skip(MODELS_MISSING)
  return path


# A cart-pole, a vertical slider and a mocap body: actuators, sensors, sites, a tendon, an
# inactive weld and a keyframe, all cheap to step.
CARTPOLE_XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <light pos="0 0 3"/>
    <geom type="plane" size="2 2 .1"/>
    <body name="cart" pos="0 0 .1">
      <joint name="slide" type="slide" axis="1 0 0"/>
      <geom type="box" size=".1 .1 .05" mass="1"/>
      <site name="base"/>
      <body name="pole" pos="0 0 .05">
        <joint name="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 .5" size=".02" mass=".1"/>
        <site name="tip" pos="0 0 .5"/>
      </body>
    </body>
    <body name="puck" pos="0 1 .5">
      <joint name="lift" type="slide" axis="0 0 1"/>
      <geom type="sphere" size=".05" mass="1" contype="0" conaffinity="0"/>
    </body>
    <body name="mocap" mocap="true" pos="1 0 1">
      <geom type="sphere" size=".02" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <tendon><spatial name="t"><site site="base"/><site site="tip"/></spatial></tendon>
  <equality><weld body1="mocap" body2="cart" active="false"/></equality>
  <actuator>
    <motor name="push" joint="slide" gear="10"/>
    <position name="servo" joint="hinge" kp="1"/>
  </actuator>
  <sensor>
    <jointpos name="angle" joint="hinge"/>
    <framepos name="tip_pos" objtype="site" objname="tip"/>
  </sensor>
  <keyframe><key qpos="0.5 0.2 0"/></keyframe>
</mujoco>
"""

# A free ball welded to a mocap body, a filtered actuator (act), contacts, and sensors that
# depend on accelerations: every part of the state row matters.
FREEBALL_XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body name="cart" pos="0 0 .1">
      <joint name="slide" type="slide" axis="1 0 0"/>
      <geom type="box" size=".1 .1 .05" mass="1"/>
      <body name="pole" pos="0 0 .05">
        <joint name="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 .5" size=".02" mass=".1"/>
        <site name="tip" pos="0 0 .5"/>
      </body>
    </body>
    <body name="ball" pos="0 1 .5">
      <freejoint name="ball"/>
      <geom type="sphere" size=".05" mass=".2"/>
    </body>
    <body name="mocap" mocap="true" pos="0 1 .5">
      <geom type="sphere" size=".02" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <equality><weld body1="mocap" body2="ball"/></equality>
  <actuator>
    <motor joint="slide" gear="5"/>
    <general joint="hinge" dyntype="filter" dynprm="0.02" gainprm="5"
             biastype="affine" biasprm="0 -5 0"/>
  </actuator>
  <sensor>
    <jointpos joint="hinge"/>
    <accelerometer site="tip"/>
    <subtreelinvel body="cart"/>
  </sensor>
  <keyframe>
    <key qpos="0.3 0.5 0 1 .5 1 0 0 0" ctrl="0.1 0.2" act="0.2" mpos="0 1 .5"/>
  </keyframe>
</mujoco>
"""

PENDULUM_XML = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <body name="pole">
      <joint name="hinge" axis="0 1 0" damping=".01"/>
      <geom type="capsule" fromto="0 0 0 0 0 -.5" size=".02" mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""

# Smooth (no contacts) with sensors: the float32 comparison and rollout's sensordata.
SMOOTH_CARTPOLE = """
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


def load(model: str | Path) -> mujoco.MjModel:
  """An inline model's XML or a model file; a robot model that is absent skips the test."""
  if isinstance(model, Path):
    return mujoco.MjModel.from_xml_path(str(robot(model)))
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
