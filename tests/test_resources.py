"""Resources over many Simulators: one compile serves every Simulator of a model, and closing
them frees their engines, so memory and XLA's executables stay flat in a create-close loop."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LOOP = textwrap.dedent("""
  import gc, json
  import jax, jax.extend, jax.numpy as jnp, mujoco, numpy as np
  jax.config.update("jax_enable_x64", True)
  import mjbatch_jax
  from mjbatch_jax._extension import ext
  from tests.models import SMOOTH_CARTPOLE

  model = mujoco.MjModel.from_xml_string(SMOOTH_CARTPOLE)
  backend = jax.extend.backend.get_backend()
  jitted = jax.jit(mjbatch_jax.step)

  def rss_mb():
    with open("/proc/self/status") as f:
      return int(next(l for l in f if l.startswith("VmRSS:")).split()[1]) / 1024

  def once():
    sim = mjbatch_jax.Simulator(model, num_threads=1)
    state, params = sim.init_state(4), sim.params(4, ("body_mass",))
    ctrl = jnp.full((4, model.nu), 0.1)
    eager = mjbatch_jax.step(state, ctrl, params)
    np.testing.assert_array_equal(eager, jitted(state, ctrl, params))
    sim.close()

  for _ in range(50):  # warm-up: JAX's and the allocator's caches fill once
    once()
  gc.collect()
  before = rss_mb(), len(backend.live_executables()), jitted._cache_size(), ext.open_engines()
  for _ in range(1000):
    once()
  gc.collect()
  after = rss_mb(), len(backend.live_executables()), jitted._cache_size(), ext.open_engines()
  print(json.dumps({"before": before, "after": after}))
""")


@pytest.mark.slow
def test_a_thousand_simulators_of_one_model_compile_once_and_free_everything():
  out = subprocess.run([sys.executable, "-c", LOOP], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  result = json.loads(out.stdout.strip().splitlines()[-1])
  (rss0, exe0, cache0, open0), (rss1, exe1, cache1, open1) = result["before"], result["after"]
  assert rss1 - rss0 < 20, result  # MB over 1000 Simulators, each stepped eagerly and jitted
  assert exe1 == exe0, result  # no new XLA executable
  assert cache1 == cache0 == 1, result  # the jitted step traced once
  assert open1 == open0 == 0, result  # every engine freed by close()


DISTINCT = textwrap.dedent("""
  import gc, json
  import jax, jax.extend, jax.numpy as jnp, mujoco, numpy as np
  jax.config.update("jax_enable_x64", True)
  import mjbatch_jax
  from mjbatch_jax import _programs
  from mjbatch_jax._extension import ext
  from tests.models import SMOOTH_CARTPOLE

  backend = jax.extend.backend.get_backend()
  jitted = jax.jit(mjbatch_jax.step)

  def once(model):
    with mjbatch_jax.Simulator(model, num_threads=1) as sim:
      state, params = sim.init_state(2), sim.params(2, ("body_mass",))
      ctrl = jnp.full((2, model.nu), 0.1)
      np.testing.assert_array_equal(mjbatch_jax.step(state, ctrl, params),
                                    jitted(state, ctrl, params))

  same = mujoco.MjModel.from_xml_string(SMOOTH_CARTPOLE)
  for _ in range(30):  # one model again and again: its programs serve every Simulator
    once(same)
  same_model = _programs.clearings(), jitted._cache_size()
  counts = []
  for i in range(3 * _programs.RETIRED_LIMIT):  # a new model each time, as a co-design search
    model = mujoco.MjModel.from_xml_string(SMOOTH_CARTPOLE)
    model.body_mass[1] += 1e-3 * (i + 1)  # other bytes: another engine, other programs
    once(model)
    gc.collect()
    counts.append(len(backend.live_executables()))
  print(json.dumps({"same_model": same_model, "clearings": _programs.clearings(),
                    "executables": counts, "open": ext.open_engines()}))
""")


def test_programs_of_models_closed_for_good_are_released():
  out = subprocess.run([sys.executable, "-c", DISTINCT], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert result["same_model"] == [0, 1], result  # never released, traced once
  # 24 distinct models closed: their programs were released every 8 of them, so that XLA holds
  # a bounded number of executables, not two more per model.
  assert result["clearings"] == 3, result
  executables = result["executables"]
  assert max(executables) <= min(executables) + 2 * 8 + 4, executables
  assert executables[-1] < executables[0] + 2 * 8, executables
  assert result["open"] == 0, result
