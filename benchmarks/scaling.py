"""Throughput of every way to step many MuJoCo simulations, as a ratio to a C loop of mj_step.

  python benchmarks/scaling.py unitree_go1 --num-sims 256,4096 --threads 1,2 --nstep 1,10 \
      --mjbatch-python /tmp/venvmjb/bin/python --repeats 5

MODEL is an XML path, a folder under ../shared/models/ (relative to the project root), or a
MuJoCo Menagerie name when the optional `mujoco-menagerie` package is installed. Each row is
reported in sim-substeps per second (median of --repeats) and as a ratio to the C loop at the
same thread count (the physical limit: mj_step on T threads, each on its own MjData, no copies,
no Python). Within each repeat the configurations run interleaved (A B C A B C ...), so machine
noise hits every row alike; all rows start from the same states with the same controls, and each
is warmed up (and compiled, compile time reported apart) before timing.

Rows (see benchmarks/README.md): c_loop, python_mj_step, mjbatch_jax.Batch, mujoco.batch,
mjbatch_jax.step_scan, mjbatch_jax.rollout, mujoco.rollout, mjbatch_0.1.4.Batch,
mjbatch_0.1.4.python_mj_step, mjx. A row that cannot run is kept, marked unavailable with why.

Writes benchmarks/results/<model>-<date>.json and, when matplotlib is installed, a .png plot
beside it (or under --out).
"""

import argparse
import datetime
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
  HERE,
  RESULTS,
  int_list,
  machine_info,
  model_label,
  pyplot,
  resolve_model,
  write_result,
)

# (name, meaning); the order is the table's.
ROWS: tuple[tuple[str, str], ...] = (
  ("c_loop", "C loop of mj_step, T threads each on its own MjData (the limit)"),
  ("python_mj_step", "serial Python loop of mujoco.mj_step (one thread)"),
  ("mjbatch_jax.Batch", "mjbatch_jax.Batch.step (numpy front end)"),
  ("mujoco.batch", "mujoco.batch.Batch.step (MuJoCo's own batch)"),
  ("mjbatch_jax.step_scan", "mjbatch_jax.step in a jitted lax.scan over calls"),
  ("mjbatch_jax.rollout", "mjbatch_jax.rollout, one knot per call (jitted)"),
  ("mujoco.rollout", "mujoco.rollout.Rollout(nthread=T), records every substep"),
  ("mjbatch_0.1.4.Batch", "mjbatch 0.1.4 Batch.step (MuJoCo 3.14, subprocess)"),
  ("mjbatch_0.1.4.python_mj_step", "serial mj_step loop in mjbatch's interpreter (MuJoCo 3.14)"),
  ("mjx", "MJX on CPU: jit(vmap(mjx.step)) in a scan (subprocess pinned to T cores)"),
)
ROW_NAMES = tuple(name for name, _ in ROWS)
# Rows measured once per repeat, independent of N, T and nstep.
SERIAL_ROWS = ("python_mj_step", "mjbatch_0.1.4.python_mj_step")
PEERS = ("python", "mujoco.batch", "mujoco.rollout", "mjbatch", "mjx")


class Inputs:
  """The one initial state and the per-simulation controls that every row uses."""

  def __init__(self, model: Any, max_sims: int, seed: int = 0):
    import mujoco

    self.model = model
    data = mujoco.MjData(model)
    key = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "home")
    if key < 0 and model.nkey:
      key = 0
    if key >= 0:
      mujoco.mj_resetDataKeyframe(model, data, key)
    base = model.key_ctrl[key].copy() if key >= 0 else np.zeros(model.nu)
    # Distinct controls per simulation so that no row can benefit from identical sims.
    rng = np.random.default_rng(seed)
    lo, hi = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
    width = np.where(model.actuator_ctrllimited.astype(bool), hi - lo, 1.0)
    ctrl = base + 0.05 * width * rng.uniform(-1, 1, (max_sims, model.nu))
    limited = model.actuator_ctrllimited.astype(bool)
    ctrl[:, limited] = np.clip(ctrl[:, limited], lo[limited], hi[limited])
    self.ctrl = ctrl
    self.qpos0, self.qvel0, self.act0 = data.qpos.copy(), data.qvel.copy(), data.act.copy()
    data.ctrl[:] = ctrl[0]
    mujoco.mj_forward(model, data)
    self.data = data  # the initial state, ctrl of simulation 0

  def state_rows(self, spec: Any, num_sims: int) -> np.ndarray:
    """(num_sims, nstate) rows of the initial state with each simulation's ctrl."""
    import mujoco

    row = np.empty(mujoco.mj_stateSize(self.model, spec))
    mujoco.mj_getState(self.model, self.data, row, spec)
    rows = np.tile(row, (num_sims, 1))
    if spec & mujoco.mjtState.mjSTATE_CTRL:
      data = mujoco.MjData(self.model)
      for i in range(num_sims):
        mujoco.mj_setState(self.model, data, rows[i], spec)
        data.ctrl[:] = self.ctrl[i]
        mujoco.mj_getState(self.model, data, rows[i], spec)
    return rows

  def save(self, path: Path) -> None:
    np.savez(path, qpos0=self.qpos0, qvel0=self.qvel0, act0=self.act0, ctrl=self.ctrl)


class Peer:
  """A _peer.py worker in another interpreter, for one thread count."""

  def __init__(self, python: str, xml: Path, inputs: Path, threads: int):
    self.proc = subprocess.Popen(
      [python, str(HERE / "_peer.py"), str(xml), str(inputs), str(threads)],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )

  def ask(self, **request: Any) -> dict[str, Any]:
    assert self.proc.stdin is not None and self.proc.stdout is not None
    self.proc.stdin.write(json.dumps(request) + "\n")
    self.proc.stdin.flush()
    while True:
      line = self.proc.stdout.readline()
      if not line:
        return {"ok": False, "error": f"worker exited with code {self.proc.wait()}"}
      if line.startswith("{"):
        return json.loads(line)

  def close(self) -> None:
    if self.proc.poll() is None:
      assert self.proc.stdin is not None
      self.proc.stdin.close()
      try:
        self.proc.wait(timeout=30)
      except subprocess.TimeoutExpired:
        self.proc.kill()


class PeerError(RuntimeError):
  pass


def _ok(reply: dict[str, Any]) -> dict[str, Any]:
  if not reply.get("ok"):
    raise PeerError(reply.get("error", "no reply"))
  return reply


# A measurement: row, config key (num_sims, threads, nstep; None for the serial rows) and a
# function returning (seconds, substeps) for one timed run from the initial state.
Timer = Callable[[], tuple[float, int]]


class Bar:
  """A text progress bar on stderr; no dependency."""

  def __init__(self, total: int, width: int = 30):
    self.total, self.done, self.width = max(total, 1), 0, width
    self.start = time.perf_counter()

  def tick(self, label: str) -> None:
    self.done += 1
    filled = self.width * self.done // self.total
    elapsed = time.perf_counter() - self.start
    sys.stderr.write(
      f"\r[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
      f"{elapsed:5.0f}s {label[:40]:<40}"
    )
    sys.stderr.flush()

  def close(self) -> None:
    sys.stderr.write("\n")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawTextHelpFormatter
  )
  parser.add_argument("model", help="XML path, folder under ../shared/models, or Menagerie name")
  parser.add_argument("--num-sims", type=int_list, default=[256], help="N, e.g. 256,4096")
  parser.add_argument("--threads", type=int_list, default=[1, 2], help="T, e.g. 1,2,4")
  parser.add_argument("--nstep", type=int_list, default=[1, 10], help="substeps per call")
  parser.add_argument("--calls", type=int, default=10,
                      help="calls per timed run (scan length, rollout knots)")
  parser.add_argument("--repeats", type=int, default=5, help="timed runs per configuration")
  parser.add_argument("--peers", default=",".join(PEERS),
                      help=f"comma-separated peers to compare with, of {','.join(PEERS)}")
  parser.add_argument("--mjbatch-python", help="interpreter with mjbatch 0.1.4 installed")
  parser.add_argument("--mjx-python", help="interpreter with mujoco-mjx (default: this one)")
  parser.add_argument("--serial-warmup", type=int, default=20)
  parser.add_argument("--serial-steps", type=int, default=200)
  parser.add_argument("--out", type=Path, default=RESULTS, help="output folder")
  parser.add_argument("--no-plot", action="store_true")
  args = parser.parse_args(argv)
  args.peers = {p.strip() for p in args.peers.split(",") if p.strip()}
  unknown = args.peers - set(PEERS)
  if unknown:
    parser.error(f"unknown peers {sorted(unknown)}; choose from {PEERS}")
  if args.calls < 1 or args.repeats < 1 or args.serial_steps < 1 or args.serial_warmup < 0:
    parser.error("--calls, --repeats and --serial-steps must be >= 1, --serial-warmup >= 0")
  return args


class Harness:
  """Builds every row's measurements, then times them interleaved."""

  def __init__(self, args: argparse.Namespace, xml: Path | None, model: Any, inputs: Inputs):
    self.args, self.xml, self.model, self.inputs = args, xml, model, inputs
    self.configs = [(n, t, k) for n in args.num_sims for t in args.threads for k in args.nstep]
    self.unavailable: dict[str, str] = {}
    self.compile_s: dict[tuple[str, Any], float] = {}
    self.timers: list[tuple[str, Any, Timer]] = []
    self.peers: list[Peer] = []
    self.info: dict[str, Any] = {}

  # Each add_* appends timers for one row, or records why the row is unavailable.
  def build(self, bar: Bar) -> None:
    builders: list[tuple[str, Callable[[], None]]] = [
      ("c_loop", self.add_c_loop),
      ("python_mj_step", self.add_python),
      ("mjbatch_jax.Batch", self.add_mjbatch_jax_batch),
      ("mujoco.batch", self.add_mujoco_batch),
      ("mjbatch_jax.step_scan", self.add_jax_scan),
      ("mjbatch_jax.rollout", self.add_jax_rollout),
      ("mujoco.rollout", self.add_mujoco_rollout),
      ("mjbatch_0.1.4.Batch", self.add_mjbatch),
      ("mjx", self.add_mjx),
    ]
    for row, builder in builders:
      try:
        builder()
      except Exception as e:  # a row that cannot run must not stop the others
        self.unavailable.setdefault(row, f"{type(e).__name__}: {e}")
        self.timers = [t for t in self.timers if t[0] != row]
      bar.tick(f"built {row}")

  def _skip_unless(self, peer: str, rows: Sequence[str]) -> bool:
    if peer in self.args.peers:
      return False
    for row in rows:
      self.unavailable[row] = f"not selected (--peers does not include {peer!r})"
    return True

  def add_c_loop(self) -> None:
    import mujoco

    from mjbatch_jax._extension import ext

    rows = self.inputs.state_rows(mujoco.mjtState.mjSTATE_INTEGRATION, max(self.args.num_sims))
    for n, t, k in self.configs:
      # The same work as the batch rows: each of the N simulations from its initial row (its own
      # ctrl) for calls * k substeps, on T threads that each own one MjData.
      length = k * self.args.calls
      states = np.ascontiguousarray(rows[:n])

      def run(t: int = t, length: int = length, states: np.ndarray = states) -> tuple[float, int]:
        return ext.step_loop(self.model._address, states, t, length), len(states) * length

      run()  # warm-up
      self.timers.append(("c_loop", (n, t, k), run))

  def add_python(self) -> None:
    if self._skip_unless("python", ["python_mj_step"]):
      return
    import mujoco

    data = mujoco.MjData(self.model)
    warmup, steps = self.args.serial_warmup, self.args.serial_steps

    def run() -> tuple[float, int]:
      mujoco.mj_copyData(data, self.model, self.inputs.data)
      for _ in range(warmup):
        mujoco.mj_step(self.model, data)
      start = time.perf_counter()
      for _ in range(steps):
        mujoco.mj_step(self.model, data)
      return time.perf_counter() - start, steps

    run()
    self.timers.append(("python_mj_step", None, run))

  def _batch_timers(self, row: str, make: Callable[[int, int], Any], rows_of: Callable[[Any], Any]):
    """Timers for a stateful batch with the mjbatch-style API (bind, reset, forward, step)."""
    batches: dict[tuple[int, int], tuple[Any, Any, np.ndarray]] = {}
    for n, t, k in self.configs:
      if (n, t) not in batches:
        batch = make(n, t)
        batch.reset()
        batch.bind("qpos")[:] = self.inputs.qpos0
        batch.bind("qvel")[:] = self.inputs.qvel0
        batch.bind("ctrl")[:] = self.inputs.ctrl[:n]
        if self.model.na:
          batch.bind("act")[:] = self.inputs.act0
        batch.forward()
        rows = rows_of(batch)
        batches[(n, t)] = (batch, rows, np.array(rows, copy=True))
      batch, rows, initial = batches[(n, t)]

      def run(batch: Any = batch, rows: Any = rows, initial: np.ndarray = initial, k: int = k,
              n: int = n) -> tuple[float, int]:
        rows[:] = initial
        start = time.perf_counter()
        for _ in range(self.args.calls):
          batch.step(nstep=k)
        return time.perf_counter() - start, n * k * self.args.calls

      run()
      self.timers.append((row, (n, t, k), run))

  def add_mjbatch_jax_batch(self) -> None:
    import mjbatch_jax

    if not hasattr(mjbatch_jax.Batch, "step"):
      raise NotImplementedError("mjbatch_jax.Batch has no step() yet (placeholder class)")
    self._batch_timers(
      "mjbatch_jax.Batch", lambda n, t: mjbatch_jax.Batch(self.model, n, t),
      lambda b: b.bind("state"),
    )

  def add_mujoco_batch(self) -> None:
    if self._skip_unless("mujoco.batch", ["mujoco.batch"]):
      return
    from mujoco import batch as mjb  # pyright: ignore[reportAttributeAccessIssue]

    self._batch_timers("mujoco.batch", lambda n, t: mjb.Batch(self.model, n, t), lambda b: b.state)

  def _jax_setup(self) -> dict[str, Any]:
    if "jax" in self.info:
      return self.info["jax"]
    import jax
    import mujoco

    import mjbatch_jax

    sims = {t: mjbatch_jax.Simulator(self.model, num_threads=t) for t in self.args.threads}
    max_n = max(self.args.num_sims)
    rows = self.inputs.state_rows(mujoco.mjtState.mjSTATE_INTEGRATION, max_n)
    setup = {"sims": sims, "rows": rows, "jax": jax, "mjbatch_jax": mjbatch_jax}
    self.info["jax"] = setup
    return setup

  def _jitted(self, row: str, build: Callable[[Any, int, int], tuple[Callable[..., Any], tuple]]):
    setup = self._jax_setup()
    jax = setup["jax"]
    for n, t, k in self.configs:
      sim = setup["sims"][t]
      fn, operands = build(sim, n, k)
      start = time.perf_counter()
      compiled = jax.jit(fn).lower(*operands).compile()
      self.compile_s[(row, (n, t, k))] = time.perf_counter() - start

      def run(compiled: Any = compiled, operands: tuple = operands, n: int = n,
              k: int = k) -> tuple[float, int]:
        start = time.perf_counter()
        jax.block_until_ready(compiled(*operands))
        return time.perf_counter() - start, n * k * self.args.calls

      run()
      self.timers.append((row, (n, t, k), run))

  def add_jax_scan(self) -> None:
    setup = self._jax_setup()
    jax, mjbatch_jax = setup["jax"], setup["mjbatch_jax"]
    jnp, calls = jax.numpy, self.args.calls

    def build(sim: Any, n: int, k: int) -> tuple[Callable[..., Any], tuple]:
      def loop(state: Any, ctrl: Any, params: Any) -> Any:
        def body(s: Any, _: Any) -> tuple[Any, None]:
          return mjbatch_jax.step(s, ctrl, params, nstep=k), None

        return jax.lax.scan(body, state, None, length=calls)[0]

      operands = (jnp.asarray(setup["rows"][:n]), jnp.asarray(self.inputs.ctrl[:n]),
                  sim.params(n))
      return loop, operands

    self._jitted("mjbatch_jax.step_scan", build)

  def add_jax_rollout(self) -> None:
    setup = self._jax_setup()
    jax, mjbatch_jax = setup["jax"], setup["mjbatch_jax"]
    jnp, calls = jax.numpy, self.args.calls

    def build(sim: Any, n: int, k: int) -> tuple[Callable[..., Any], tuple]:
      def roll(state: Any, ctrls: Any, params: Any) -> Any:
        return mjbatch_jax.rollout(state, ctrls, params, nstep=k)

      ctrls = np.repeat(self.inputs.ctrl[:n, None, :], calls, axis=1)
      operands = (jnp.asarray(setup["rows"][:n]), jnp.asarray(ctrls), sim.params(n))
      return roll, operands

    self._jitted("mjbatch_jax.rollout", build)

  def add_mujoco_rollout(self) -> None:
    if self._skip_unless("mujoco.rollout", ["mujoco.rollout"]):
      return
    import mujoco
    from mujoco import rollout  # pyright: ignore[reportAttributeAccessIssue]

    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    nfull = mujoco.mj_stateSize(self.model, spec)
    rows = self.inputs.state_rows(spec, max(self.args.num_sims))
    runners = {t: rollout.Rollout(nthread=t if t > 1 else 0) for t in self.args.threads}
    self.info["rollouts"] = runners
    for n, t, k in self.configs:
      steps = k * self.args.calls
      datas = [mujoco.MjData(self.model) for _ in range(max(t, 1))]
      control = np.repeat(self.inputs.ctrl[:n, None, :], steps, axis=1)
      initial = rows[:n].copy()
      state_out = np.empty((n, steps, nfull))
      sensor_out = np.empty((n, steps, self.model.nsensordata))

      def run(t: int = t, datas: list = datas, control: np.ndarray = control,
              initial: np.ndarray = initial, state_out: np.ndarray = state_out,
              sensor_out: np.ndarray = sensor_out, steps: int = steps,
              n: int = n) -> tuple[float, int]:
        start = time.perf_counter()
        runners[t].rollout(self.model, datas, initial, control, nstep=steps, state=state_out,
                           sensordata=sensor_out)
        return time.perf_counter() - start, n * steps

      run()
      self.timers.append(("mujoco.rollout", (n, t, k), run))

  def _peer(self, python: str, threads: int) -> Peer:
    if self.xml is None:
      raise PeerError("the model has no XML file to hand to another interpreter")
    inputs = Path(self.info["tmpdir"]) / "inputs.npz"
    if not inputs.exists():
      self.inputs.save(inputs)
    peer = Peer(python, self.xml, inputs, threads)
    self.peers.append(peer)
    return peer

  def _peer_timers(self, row: str, kind: str, python: str) -> None:
    for t in self.args.threads:
      peer = self._peer(python, t)
      for n, tt, k in self.configs:
        if tt != t:
          continue
        request = {"row": kind, "num_sims": n, "nstep": k, "calls": self.args.calls}
        reply = _ok(peer.ask(op="setup", **request))
        if reply.get("compile_s") is not None:
          self.compile_s[(row, (n, t, k))] = reply["compile_s"]

        def run(peer: Peer = peer, request: dict = request) -> tuple[float, int]:
          reply = _ok(peer.ask(op="time", **request))
          return reply["seconds"], reply["substeps"]

        self.timers.append((row, (n, t, k), run))

  def add_mjbatch(self) -> None:
    rows = ["mjbatch_0.1.4.Batch", "mjbatch_0.1.4.python_mj_step"]
    if self._skip_unless("mjbatch", rows):
      return
    python = self.args.mjbatch_python
    if not python:
      for row in rows:
        self.unavailable[row] = "not run: pass --mjbatch-python PATH (an interpreter with mjbatch)"
      return
    hello = _ok(self._peer(python, 1).ask(op="hello"))
    if "mjbatch" not in hello:
      raise PeerError(f"{python} cannot import mjbatch: {hello.get('mjbatch_error')}")
    self.info["mjbatch_peer"] = {"mjbatch": hello["mjbatch"], "mujoco": hello["mujoco"]}
    serial_peer = self.peers[-1]
    warmup, steps = self.args.serial_warmup, self.args.serial_steps

    def serial() -> tuple[float, int]:
      reply = _ok(serial_peer.ask(op="serial", warmup=warmup, steps=steps))
      return reply["seconds"], reply["substeps"]

    try:
      serial()
      self.timers.append(("mjbatch_0.1.4.python_mj_step", None, serial))
    except PeerError as e:
      self.unavailable["mjbatch_0.1.4.python_mj_step"] = str(e)
    self._peer_timers("mjbatch_0.1.4.Batch", "mjbatch", python)

  def add_mjx(self) -> None:
    if self._skip_unless("mjx", ["mjx"]):
      return
    python = self.args.mjx_python
    if not python:
      if importlib.util.find_spec("mujoco.mjx") is None:
        raise PeerError(
          "mujoco-mjx is not importable in this interpreter; pass --mjx-python PATH"
        )
      python = sys.executable
    hello = _ok(self._peer(python, 1).ask(op="hello"))
    if "mjx" not in hello:
      raise PeerError(f"{python} cannot import mujoco.mjx: {hello.get('mjx_error')}")
    self.info["mjx_peer"] = {"mjx": hello["mjx"], "jax": hello.get("jax"),
                             "mujoco": hello["mujoco"]}
    self._peer_timers("mjx", "mjx", python)

  def measure(self, bar: Bar) -> dict[tuple[str, Any], list[float]]:
    """Throughput samples by (row, config); every repeat runs every timer once, in turn."""
    samples: dict[tuple[str, Any], list[float]] = {}
    for _ in range(self.args.repeats):
      for row, config, run in self.timers:
        if row in self.unavailable:
          bar.tick(f"{row} (failed)")
          continue
        try:
          seconds, substeps = run()
          samples.setdefault((row, config), []).append(substeps / seconds)
        except Exception as e:
          self.unavailable[row] = f"{type(e).__name__}: {e}"
        bar.tick(f"{row} {config or ''}")
    return samples

  def close(self) -> None:
    for peer in self.peers:
      peer.close()
    for sim in self.info.get("jax", {}).get("sims", {}).values():
      sim.close()
    for runner in self.info.get("rollouts", {}).values():
      runner.close()


def summarize(harness: Harness, samples: dict[tuple[str, Any], list[float]]) -> dict[str, Any]:
  medians = {key: statistics.median(values) for key, values in samples.items()}
  rows: dict[str, Any] = {}
  for name, meaning in ROWS:
    if name in harness.unavailable:
      rows[name] = {"meaning": meaning, "available": False, "reason": harness.unavailable[name]}
      continue
    results = []
    for config in harness.configs:
      n, t, k = config
      key = (name, None if name in SERIAL_ROWS else config)
      if key not in medians:
        continue
      limit = medians.get(("c_loop", config))
      results.append({
        "num_sims": n, "threads": t, "nstep": k,
        "throughput": medians[key],
        "samples": samples[key],
        "ratio_to_c_loop": medians[key] / limit if limit else None,
        "compile_s": harness.compile_s.get((name, config)),
      })
    if results:
      rows[name] = {"meaning": meaning, "available": True, "results": results}
    else:
      rows[name] = {"meaning": meaning, "available": False, "reason": "no measurement ran"}
  return rows


def format_table(rows: dict[str, Any], configs: Sequence[tuple[int, int, int]]) -> str:
  headers = [f"N={n} T={t} k={k}" for n, t, k in configs]
  width = max(len(h) for h in headers) + 2
  name_width = max(len(n) for n in ROW_NAMES) + 2
  lines = ["ratio to the C loop at the same thread count (sim-substeps/s in brackets, k/s)",
           "row".ljust(name_width) + "".join(h.rjust(width) for h in headers)]
  for name in ROW_NAMES:
    row = rows[name]
    if not row["available"]:
      lines.append(name.ljust(name_width) + f"unavailable: {row['reason']}"[:200])
      continue
    by_config = {(r["num_sims"], r["threads"], r["nstep"]): r for r in row["results"]}
    cells = []
    for config in configs:
      r = by_config.get(config)
      if r is None or r["ratio_to_c_loop"] is None:
        cells.append("-".rjust(width))
      else:
        cells.append(f"{r['ratio_to_c_loop']:.3f} ({r['throughput'] / 1e3:.0f})".rjust(width))
    lines.append(name.ljust(name_width) + "".join(cells))
  compile_lines = []
  for name in ROW_NAMES:
    row = rows[name]
    times = [r["compile_s"] for r in row.get("results", []) if r.get("compile_s") is not None]
    if times:
      compile_lines.append(f"  {name}: {min(times):.2f}..{max(times):.2f} s")
  if compile_lines:
    lines += ["compile time (outside the timings):", *compile_lines]
  return "\n".join(lines)


def plot(plt: Any, rows: dict[str, Any], args: argparse.Namespace, path: Path, title: str) -> None:
  ks = args.nstep
  fig, axes = plt.subplots(2, len(ks), figsize=(6 * len(ks), 9), squeeze=False)
  max_n, max_t = max(args.num_sims), max(args.threads)
  for col, k in enumerate(ks):
    for ax, x_name, fixed_name, fixed in (
      (axes[0][col], "threads", "num_sims", max_n),
      (axes[1][col], "num_sims", "threads", max_t),
    ):
      for name in ROW_NAMES:
        row = rows[name]
        if not row["available"]:
          continue
        points = sorted(
          (r[x_name], r["throughput"]) for r in row["results"]
          if r["nstep"] == k and r[fixed_name] == fixed
        )
        if points:
          xs, ys = zip(*points, strict=True)
          ax.plot(xs, ys, marker="o", label=name)
      ax.set_xlabel("threads T" if x_name == "threads" else "simulations N")
      ax.set_ylabel("sim-substeps / s")
      ax.set_yscale("log")
      if x_name == "num_sims":
        ax.set_xscale("log", base=2)
      ax.set_title(f"{title}: nstep={k}, {fixed_name}={fixed}")
      ax.grid(True, which="both", alpha=0.3)
  axes[0][0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parse_args(argv)
  import jax

  jax.config.update("jax_enable_x64", True)
  xml, model = resolve_model(args.model)
  label = model_label(args.model, xml)
  inputs = Inputs(model, max(args.num_sims))
  harness = Harness(args, xml, model, inputs)
  per_repeat = len(harness.configs) * (len(ROW_NAMES) - len(SERIAL_ROWS)) + len(SERIAL_ROWS)
  bar = Bar(len(ROW_NAMES) - 1 + args.repeats * per_repeat)
  with tempfile.TemporaryDirectory() as tmp:
    harness.info["tmpdir"] = tmp
    try:
      harness.build(bar)
      bar.total = bar.done + args.repeats * len(harness.timers)
      samples = harness.measure(bar)
    finally:
      bar.close()
      harness.close()
  rows = summarize(harness, samples)
  result = {
    "model": label,
    "model_path": str(xml) if xml else None,
    "date": datetime.datetime.now().isoformat(timespec="seconds"),
    "machine": machine_info([sys.argv[0], *argv]),
    "settings": {
      "num_sims": args.num_sims, "threads": args.threads, "nstep": args.nstep,
      "calls": args.calls, "repeats": args.repeats, "serial_warmup": args.serial_warmup,
      "serial_steps": args.serial_steps, "peers": sorted(args.peers),
    },
    "peers": {k: v for k, v in harness.info.items() if k.endswith("_peer")},
    "rows": rows,
  }
  table = format_table(rows, harness.configs)
  print(table)
  json_path = write_result(args.out, label, result)
  if not args.no_plot and (plt := pyplot()) is not None:
    png_path = json_path.with_suffix(".png")
    plot(plt, rows, args, png_path, label)
    print(f"wrote {png_path}")
  return result


if __name__ == "__main__":
  main()
