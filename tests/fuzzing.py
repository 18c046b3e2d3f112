"""The harness of the hostile-input tables (tests/test_fuzz*.py): each case in a child process.

A table is a list of (name, snippet, expectation), the expectation ("raises", exception type
name, regex) or ("ok",). The snippets run in child processes, in order, one result line each;
when a child dies (a signal, an exit) or hangs, the case it was running is marked with how it
died and a new child goes on with the next case.
"""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What the control tables' preludes start with: the point mass of tests/models.py in a one-thread
# Simulator, a start state off the origin, and a cost on its position and control.
POINT_MASS = r'''
import math
import numpy as np, jax, jax.numpy as jnp, mujoco
jax.config.update("jax_enable_x64", True)
import mjbatch_jax
from mjbatch_jax import control

from tests.models import POINT_XML as XML
m = mujoco.MjModel.from_xml_string(XML)
sim = mjbatch_jax.Simulator(m, num_threads=1)
lay = sim.layout
start = sim.init_state(1)[0].at[lay.qpos].set(jnp.array([0.5, -0.3]))

def cost(*terms):
  return control.Cost(lambda x, u, obs, t: jnp.concatenate([x[lay.qpos], u]),
                      terms or (control.Term(2, 1.0), control.Term(2, 0.1)))
'''

CHILD = r'''
import json, sys, traceback
cases = json.loads(sys.stdin.read())
prelude = cases.pop(0)
for name, code in cases:
  print(json.dumps({"case": name, "start": True}), flush=True)
  scope = {}
  try:
    exec(prelude, scope)
    exec(code, scope)
  except BaseException as e:
    text = str(e) or traceback.format_exc()
    result = {"case": name, "outcome": "raised", "type": type(e).__name__, "message": text[-2000:]}
  else:
    result = {"case": name, "outcome": "ok"}
  print(json.dumps(result), flush=True)
'''


def _describe(returncode: int) -> str:
  if returncode < 0:
    try:
      return f"killed by signal {signal.Signals(-returncode).name}"
    except ValueError:
      return f"killed by signal {-returncode}"
  return f"the process exited with status {returncode}"


def run_cases(prelude: str, cases: list[tuple[str, str]], timeout: float = 300
              ) -> dict[str, dict]:
  """Results by case name; a child that dies is replaced and the dead case says how it died.

  Every case runs after a fresh exec of prelude, in a child process of this Python.
  """
  results: dict[str, dict] = {}
  pending = list(cases)
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  while pending:
    payload = json.dumps([prelude, *pending])
    try:
      proc = subprocess.run([sys.executable, "-c", CHILD], input=payload, capture_output=True,
                            text=True, timeout=timeout, env=env, cwd=ROOT)
      stdout, death = proc.stdout, (_describe(proc.returncode) if proc.returncode else None)
    except subprocess.TimeoutExpired as e:
      out = e.stdout or ""
      stdout = out.decode() if isinstance(out, bytes) else out
      death = f"hung for {timeout} s"
    started = None
    for line in stdout.splitlines():
      if not line.startswith("{"):
        continue
      record = json.loads(line)
      if record.get("start"):
        started = record["case"]
      else:
        results[record["case"]] = record
    if started is not None and started not in results:
      results[started] = {"case": started, "outcome": "crashed", "message": death or "?"}
    done = set(results)
    rest = [c for c in pending if c[0] not in done]
    if len(rest) == len(pending):  # nothing ran: report everything rather than loop forever
      for name, _ in rest:
        results[name] = {"case": name, "outcome": "crashed", "message": death or "no output"}
      break
    pending = rest
  return results


def check_case(results: dict[str, dict], name: str, expect: tuple) -> None:
  """AssertionError unless case name did what expect says."""
  got = results[name]
  assert got["outcome"] != "crashed", f"{name}: {got['message']}"
  if expect[0] == "ok":
    assert got["outcome"] == "ok", f"{name} raised {got.get('type')}: {got.get('message')}"
    return
  _, kind, pattern = expect
  assert got["outcome"] == "raised", f"{name} raised nothing"
  assert got["type"] == kind, f"{name} raised {got['type']}: {got['message']}"
  assert re.search(pattern, got["message"]), f"{name}: {got['message']!r} !~ {pattern!r}"


def table_tests(prelude: str, cases: list[tuple[str, str, tuple]]) -> tuple[Any, Any, Any]:
  """A table's tests, to bind at a test module's top level:

    results, test_names_are_unique, test_case = table_tests(PRELUDE, CASES)

  results runs every case once per module (in child processes); test_case checks one each.
  """
  def results() -> dict[str, dict]:
    return run_cases(prelude, [(name, code) for name, code, _ in cases])

  def test_names_are_unique() -> None:
    names = [name for name, _, _ in cases]
    assert len(names) == len(set(names))

  @pytest.mark.parametrize(("name", "expect"), [(name, expect) for name, _, expect in cases],
                           ids=[name for name, _, _ in cases])
  def test_case(results: dict[str, dict], name: str, expect: tuple) -> None:
    check_case(results, name, expect)

  return pytest.fixture(scope="module")(results), test_names_are_unique, test_case
