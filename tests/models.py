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


# A planar two-legged runner with the body plan and numbers of dm_control's cheetah (a 1 m torso,
# three-link legs with stiff, damped, limited hinges, geared motors, 14 kg in all, 10 ms steps):
# feet that touch down carry the whole load at tiny depths, the case of the derivative tests.
CHEETAH_XML = """
<mujoco model="planar runner">
  <option timestep="0.01"/>
  <default>
    <geom density="660.885"/>  <!-- 14 kg in all -->
    <default class="leg">
      <joint type="hinge" axis="0 1 0" limited="true" armature=".1" damping=".01" stiffness="8"/>
      <geom type="capsule" size=".046" condim="3" friction=".4 .1 .1"/>
    </default>
    <motor ctrllimited="true" ctrlrange="-1 1"/>
  </default>
  <worldbody>
    <geom name="ground" type="plane" size="100 .8 .5" pos="98 0 0"/>
    <body name="torso" pos="0 0 .7" childclass="leg">
      <joint name="rootx" type="slide" axis="1 0 0" limited="false" armature="0" damping="0"
             stiffness="0"/>
      <joint name="rootz" type="slide" axis="0 0 1" limited="false" armature="0" damping="0"
             stiffness="0"/>
      <joint name="rooty" type="hinge" axis="0 1 0" limited="false" armature="0" damping="0"
             stiffness="0"/>
      <geom name="torso" fromto="-.5 0 0 .5 0 0"/>
      <geom name="head" pos=".6 0 .1" euler="0 50 0" size=".046 .15"/>
      <body name="bthigh" pos="-.5 0 0">
        <joint name="bthigh" range="-30 60" stiffness="240" damping="6"/>
        <geom name="bthigh" pos=".1 0 -.13" euler="0 -218 0" size=".046 .145"/>
        <body name="bshin" pos=".16 0 -.25">
          <joint name="bshin" range="-50 50" stiffness="180" damping="4.5"/>
          <geom name="bshin" pos="-.14 0 -.07" euler="0 -116 0" size=".046 .15"/>
          <body name="bfoot" pos="-.28 0 -.14">
            <joint name="bfoot" range="-230 50" stiffness="120" damping="3"/>
            <geom name="bfoot" pos=".03 0 -.097" euler="0 -15 0" size=".046 .094"/>
          </body>
        </body>
      </body>
      <body name="fthigh" pos=".5 0 0">
        <joint name="fthigh" range="-57 .4" stiffness="180" damping="4.5"/>
        <geom name="fthigh" pos="-.07 0 -.12" euler="0 30 0" size=".046 .133"/>
        <body name="fshin" pos="-.14 0 -.24">
          <joint name="fshin" range="-70 50" stiffness="120" damping="3"/>
          <geom name="fshin" pos=".065 0 -.09" euler="0 -34 0" size=".046 .106"/>
          <body name="ffoot" pos=".13 0 -.18">
            <joint name="ffoot" range="-28 28" stiffness="60" damping="1.5"/>
            <geom name="ffoot" pos=".045 0 -.07" euler="0 -34 0" size=".046 .07"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="bthigh" joint="bthigh" gear="120"/>
    <motor name="bshin" joint="bshin" gear="90"/>
    <motor name="bfoot" joint="bfoot" gear="60"/>
    <motor name="fthigh" joint="fthigh" gear="90"/>
    <motor name="fshin" joint="fshin" gear="60"/>
    <motor name="ffoot" joint="ffoot" gear="30"/>
  </actuator>
  <sensor><subtreelinvel name="torso_velocity" body="torso"/></sensor>
</mujoco>
"""

# A manipulation scene: a two-finger planar gripper on a slide-and-lift base that grasps a
# free box resting on a table: contacts between the fingers and the box (pinching with
# friction), the box and the table, and the fingers' joint limits.
GRIPPER_XML = """
<mujoco model="gripper and box">
  <option timestep="0.004" cone="elliptic" impratio="10"/>
  <default>
    <geom condim="4" friction="1 .02 .002"/>
    <joint damping="2" armature=".01"/>
  </default>
  <worldbody>
    <geom name="table" type="box" size=".4 .4 .02" pos="0 0 -.02"/>
    <body name="base" pos="0 0 .25">
      <joint name="x" type="slide" axis="1 0 0" range="-.3 .3" limited="true"/>
      <joint name="z" type="slide" axis="0 0 1" range="-.2 .2" limited="true"/>
      <geom name="palm" type="box" size=".06 .02 .01" mass=".5"/>
      <body name="left" pos="-.05 0 -.02">
        <joint name="left" type="slide" axis="1 0 0" range="-.01 .04" limited="true"/>
        <geom name="left" type="box" size=".008 .02 .06" pos="0 0 -.06" mass=".1"/>
        <site name="left_pad" type="box" size=".01 .022 .062" pos="0 0 -.06"/>
      </body>
      <body name="right" pos=".05 0 -.02">
        <joint name="right" type="slide" axis="-1 0 0" range="-.01 .04" limited="true"/>
        <geom name="right" type="box" size=".008 .02 .06" pos="0 0 -.06" mass=".1"/>
      </body>
    </body>
    <body name="box" pos="0 0 .03">
      <freejoint name="box"/>
      <geom name="box" type="box" size=".025 .025 .03" mass=".2"/>
    </body>
  </worldbody>
  <actuator>
    <position name="x" joint="x" kp="200" ctrlrange="-.3 .3"/>
    <position name="z" joint="z" kp="400" ctrlrange="-.2 .2"/>
    <position name="left" joint="left" kp="300" ctrlrange="-.01 .04"/>
    <position name="right" joint="right" kp="300" ctrlrange="-.01 .04"/>
  </actuator>
  <sensor>
    <framepos objtype="body" objname="box"/>
    <touch site="left_pad"/>
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

# A point mass on two slides, controls in [-1, 1]: no gravity, no contact, Euler steps (the
# planners' hostile and property tests).
POINT_XML = """
<mujoco>
  <option timestep="0.05" integrator="Euler" gravity="0 0 0"><flag contact="disable"/></option>
  <worldbody>
    <body>
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="y" type="slide" axis="0 1 0"/>
      <geom type="sphere" size=".1" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="x" ctrlrange="-1 1"/><motor joint="y" ctrlrange="-1 1"/></actuator>
</mujoco>
"""

# A fixed-base arm: a shoulder (yaw, pitch), an elbow and a wrist, all limited; the hand is
# redundant for a position target (four joints, three coordinates).
ARM_XML = """
<mujoco>
  <compiler angle="radian"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="upper" pos="0 0 0.5">
      <joint name="yaw" axis="0 0 1" range="-2 2"/>
      <joint name="pitch" axis="0 1 0" range="-2 2"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <body name="fore" pos="0.3 0 0">
        <joint name="elbow" axis="0 1 0" range="-2.5 0.1"/>
        <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.025"/>
        <body name="hand" pos="0.25 0 0">
          <joint name="wrist" axis="0 1 0" range="-1 1"/>
          <geom type="box" size="0.05 0.02 0.01" pos="0.05 0 0"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""

# A floating two-body robot with two feet, for sensors and the clip's other-model refusal
# (tests/test_motion.py and the hostile-input table tests/test_fuzz_motion.py).
BIPED_XML = """
<mujoco>
  <compiler angle="radian"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="torso" pos="0 0 0.3">
      <freejoint name="root"/>
      <geom type="box" size="0.1 0.1 0.05" mass="2"/>
      <body name="left_foot" pos="0 0.08 -0.2">
        <joint name="left_hip" pos="0 0 0.2" axis="0 1 0" range="-1 1"/>
        <geom type="box" size="0.06 0.03 0.01" mass="0.2"/>
      </body>
      <body name="right_foot" pos="0 -0.08 -0.2">
        <joint name="right_hip" pos="0 0 0.2" axis="0 1 0" range="-1 1"/>
        <geom type="box" size="0.06 0.03 0.01" mass="0.2"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position joint="left_hip" kp="50" ctrlrange="-1 1"/>
    <position joint="right_hip" kp="50" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""
