"""mjbatch_jax.Batch on real robots: bit-exact against mj_step, and memory that follows threads."""

import subprocess
import sys
import textwrap

import mujoco
import numpy as np
import pytest

from mjbatch_jax import Batch
from tests.models import G1, GO1, requires_models

pytestmark = requires_models
NSIM, NSTEP = 3, 200


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("robot", ["g1", "go1"])
def test_robot_matches_mj_step_for_200_steps(robot, num_threads):
  model = mujoco.MjModel.from_xml_path(str(G1 if robot == "g1" else GO1))
  key = model.key("home").id if robot == "go1" else -1
  batch = Batch(model, NSIM, num_threads=num_threads)
  batch.reset(keyframe=key)
  ctrl, state = batch.bind("ctrl"), batch.bind("state")
  sensordata = batch.bind("sensordata")
  datas = [mujoco.MjData(model) for _ in range(NSIM)]
  for d in datas:
    if key >= 0:
      mujoco.mj_resetDataKeyframe(model, d, key)
    mujoco.mj_forward(model, d)
  lo, hi = model.actuator_ctrlrange.T
  rng = np.random.default_rng(1)
  row = np.empty(batch.nstate)
  for _ in range(NSTEP):
    u = rng.uniform(lo, hi, (NSIM, model.nu))
    ctrl[:] = u
    batch.step()
    for i, d in enumerate(datas):
      d.ctrl[:] = u[i]
      mujoco.mj_step(model, d)
  for i, d in enumerate(datas):
    mujoco.mj_getState(model, d, row, mujoco.mjtState.mjSTATE_INTEGRATION)
    np.testing.assert_array_equal(state[i], row)
    np.testing.assert_array_equal(sensordata[i], d.sensordata)
  assert np.all(batch.bind("time") == datas[0].time)


_PEAK_RSS = """
import resource, sys
import mujoco
from mjbatch_jax import Batch
model = mujoco.MjModel.from_xml_path(sys.argv[1])
batch = Batch(model, int(sys.argv[2]), num_threads=2)
batch.step()
# ru_maxrss would be this process's peak, but Linux carries the parent's (pytest's, often far
# larger) into a child across fork and exec; VmHWM is the same peak, counted from exec
hwm = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, hwm)  # KiB
"""


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_memory_follows_threads_not_sims():
  def peak_kib(nsim):
    out = subprocess.run(
      [sys.executable, "-c", textwrap.dedent(_PEAK_RSS), str(G1), str(nsim)],
      capture_output=True,
      text=True,
      check=False,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[1])

  small, large = peak_kib(16), peak_kib(4096)
  grew_mb = (large - small) / 1024
  sizes = f"16 G1 sims {small / 1024:.1f} MB, 4096 {large / 1024:.1f} MB"
  print(f"\npeak RSS: {sizes} (+{grew_mb:.1f})")
  assert grew_mb < 32, f"4096 G1 sims take {grew_mb:.1f} MB more than 16"
