"""os.fork(): a child has none of its parent's worker threads. A Batch or Simulator made before
the fork raises a clear error in the child (instead of waiting forever for those threads), the
child exits without waiting for them either, and what it makes itself works. Each case runs in a
child process of its own, with a timeout, since the failure this guards against is a hang."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The parent makes its objects, then forks one child per snippet, in turn: each child runs its
# snippet and reports how it went through a pipe; the parent then checks that its own objects
# still work and prints every child's report and exit status.
PARENT = textwrap.dedent("""
  import json, os, sys
  import mujoco, numpy as np
  from tests.models import CARTPOLE_XML
  model = mujoco.MjModel.from_xml_string(CARTPOLE_XML)
  {setup}
  reports = []
  for snippet in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
      os.close(read)
      try:
        exec(snippet)
        result = {{"outcome": "ok"}}
      except Exception as e:
        result = {{"outcome": type(e).__name__, "message": str(e)}}
      os.write(write, json.dumps(result).encode())
      os.close(write)
      {exit}
    os.close(write)
    with os.fdopen(read) as f:
      result = json.loads(f.read() or "null")
    _, status = os.waitpid(pid, 0)
    reports.append({{"child": result, "status": status}})
    {after}
  print(json.dumps(reports))
""")

BATCH = """
from mjbatch_jax import Batch
batch = Batch(model, 8, num_threads=2)
batch.step()
"""

SIMULATOR = """
import jax, jax.numpy as jnp
import mjbatch_jax
jax.config.update("jax_enable_x64", True)
sim = mjbatch_jax.Simulator(model, num_threads=2)
state, params = sim.init_state(4), sim.params(4)
ctrl, ctrls = jnp.zeros((4, model.nu)), jnp.zeros((4, 2, model.nu))
jitted = jax.jit(mjbatch_jax.step)
jitted(state, ctrl, params).block_until_ready()
from mjbatch_jax._extension import ext
"""


def run(setup: str, snippets: list[str], after: str = "", exit: str = "sys.exit(0)") -> list:
  code = PARENT.format(setup=setup.strip(), exit=exit,
                       after=after or "pass")
  done = subprocess.run([sys.executable, "-c", code, json.dumps(snippets)], capture_output=True,
                        text=True, cwd=ROOT, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.strip().splitlines()[-1])


FORKED = "made in process .* before it forked this one.*'spawn' or 'forkserver'"


def test_a_batch_of_the_parent_raises_in_the_child_which_exits_and_makes_its_own():
  calls = ["batch.step()", "batch.forward()", "batch.bind('qpos')"]
  own = textwrap.dedent("""
    from mjbatch_jax import Batch
    with Batch(model, 4, num_threads=2) as own:
      own.step(nstep=3)
      assert own.bind("time")[0] > 0
    """)
  # The parent steps its batch after each child, so it still works.
  reports = run(BATCH, [*calls, "batch.close()", own], after="batch.step()")
  for call, report in zip(calls, reports, strict=False):
    assert report["child"]["outcome"] == "ValueError", (call, report)
    assert re.search(FORKED, report["child"]["message"]), (call, report)
  # Every child exited (status 0), freeing nothing it cannot free; close() too, and a child's
  # own Batch runs.
  assert all(r["status"] == 0 for r in reports), reports
  assert reports[3]["child"]["outcome"] == "ok" and reports[4]["child"]["outcome"] == "ok"


# JAX itself is not fork-safe: its runtime's threads are not in the child either, so a child
# that runs a JAX computation (even jnp.zeros) hangs, and one that imported JAX may crash on its
# way out. The checks run before any JAX computation; these children leave with os._exit.
def test_a_simulator_of_the_parent_raises_in_the_child():
  calls = [
    "mjbatch_jax.step(state, ctrl, params)",
    "mjbatch_jax.rollout(state, ctrls, params)",
    "mjbatch_jax.transition_fd(state, ctrl, params)",
    "sim.init_state(2)",
    "sim.params(2)",
    # What a function compiled in the parent meets in its handler (which JAX cannot run in the
    # child anyway): the C++ layer refuses the parent's engine with the same message.
    "assert ext.forked_from(sim.spec.engine) == os.getppid()\n"
    "ext.param_size(sim.spec.engine, 'body_mass')",
  ]
  reports = run(SIMULATOR, calls, exit="os._exit(0)",
                after="jitted(state, ctrl, params).block_until_ready()")
  for call, report in zip(calls, reports, strict=True):
    assert report["child"]["outcome"] == "ValueError", (call, report)
    assert re.search(FORKED, report["child"]["message"]), (call, report)
