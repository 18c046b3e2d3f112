"""Throughput of every way to step many MuJoCo simulations, as ratios to two C loops of mj_step.

  python benchmarks/scaling.py unitree_go1 --num-sims 256,4096 --threads 1,2 --nstep 1,10 \
      --mjbatch-python /tmp/venvmjb/bin/python --repeats 11
  python benchmarks/scaling.py humanoid --mjx-compatible --mjx-python /tmp/venvmjx/bin/python \
      --warp-python /tmp/venvwarp/bin/python --slow-peer-configs 256:1:1

MODEL is an XML path, a folder under ../shared/models/ (relative to the project root),
`humanoid` (DeepMind's humanoid as the mujoco-warp package ships it, found in this interpreter or
in --warp-python's / --mjx-python's), or a MuJoCo Menagerie name when the optional
`mujoco-menagerie` package is installed. --mjx-compatible converts it (_common.make_mjx_compatible)
into a model MJX 3.17 can run, for every row, the peers' included.

Protocol (steady state, the same for every row): the model settles for --settle substeps from its
keyframe under the keyframe's ctrl; that state is every simulation's start row, each with its own
ctrl. One timed block of a row is `calls` calls of nstep substeps on each of N simulations from
the start rows, where `calls` is the same for every row of a configuration: chosen from a
calibration call of the C loop so that a block lasts at least --min-block seconds (or fixed by
--calls). Each repeat runs one block of every row and configuration in turn (A B C A B C ...), so
machine noise hits every row alike; --repeats of them. CPU time (of this process and of a peer
worker) and wall time are both recorded per block; the tables give the median over repeats of
each repeat's ratio to the limit, with the smallest and largest of those ratios as the spread.

The limits, at the same N, T and nstep: c_loop (each simulation's substeps back to back on T
threads that each own one MjData) and c_lockstep (one substep of every simulation in turn, each
loaded from and saved to its row with mj_setState/mj_getState, as a batch stepping one substep
per call must). Rows: see ROWS and benchmarks/README.md. A row that cannot run is kept, marked
unavailable with why.

Writes benchmarks/results/<model>-<date>.json and, when matplotlib is installed, a .png plot
beside it (or under --out).
"""

import argparse
import datetime
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
  HERE,
  MJX_COMPATIBLE,
  RESULTS,
  Stopwatch,
  int_list,
  load_variant,
  machine_info,
  model_label,
  pyplot,
  resolve_model,
  run_timed,
  save_figure,
  timed,
  write_result,
)

sys.path.insert(0, str(HERE.parent / "examples"))
import common  # noqa: E402  # pyright: ignore[reportMissingImports]  (progress, --quiet)

# (name, meaning); the order is the table's.
ROWS: tuple[tuple[str, str], ...] = (
  ("c_loop", "C loop of mj_step, T threads each on its own MjData, substeps back to back"),
  ("c_lockstep", "C loop, one substep of every sim in turn with mj_setState/mj_getState"),
  ("python_mj_step", "serial Python loop of mujoco.mj_step over the same rows (T=1 only)"),
  ("mjbatch_jax.Batch", "mjbatch_jax.Batch.step (numpy front end)"),
  ("mujoco.batch", "mujoco.batch.Batch.step (MuJoCo's own batch)"),
  ("mjbatch_jax.step_scan", "mjbatch_jax.step in a jitted lax.scan over calls"),
  ("mjbatch_jax.rollout", "mjbatch_jax.rollout, one knot per call (jitted)"),
  ("mujoco.rollout", "mujoco.rollout.Rollout(nthread=T), records every substep"),
  ("mjbatch_0.1.4.Batch", "mjbatch 0.1.4 Batch.step (MuJoCo 3.14, subprocess)"),
  ("mjbatch_0.1.4.python_mj_step", "serial mj_step loop in mjbatch's interpreter (MuJoCo 3.14)"),
  ("mjx", "MJX on CPU: jit(vmap(mjx.step)) in a scan (subprocess pinned to T cores)"),
  ("mjwarp", "MuJoCo Warp on Warp's CPU device: mjw.step over N worlds (subprocess, T cores)"),
)
ROW_NAMES = tuple(name for name, _ in ROWS)
LIMITS = ("c_loop", "c_lockstep")
# Rows that do not run the start rows of the others (one trajectory, its own length): measured
# once per repeat and reported apart, never as a ratio.
SERIAL_ROWS = ("mjbatch_0.1.4.python_mj_step",)
PEERS = ("python", "mujoco.batch", "mujoco.rollout", "mjbatch", "mjx", "mjwarp")
# Peers far slower than the rest (or slow to compile): --slow-peer-configs can limit them to a
# few configurations. Each is also reported as a multiple: how many times faster the JAX path is.
SLOW_PEERS = ("mjx", "mjwarp")
JAX_ROW = "mjbatch_jax.step_scan"


class Inputs:
  """The one initial state and the per-simulation controls that every row uses."""

  def __init__(self, model: Any, max_sims: int, settle: int, seed: int = 0):
    import mujoco

    self.model = model
    data = mujoco.MjData(model)
    key = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "home")
    if key < 0 and model.nkey:
      key = 0
    if key >= 0:
      mujoco.mj_resetDataKeyframe(model, data, key)
    base = model.key_ctrl[key].copy() if key >= 0 else np.zeros(model.nu)
    # The first substeps after a keyframe (feet landing, contacts forming) cost more than the rest;
    # settling first makes every block time the steady state a long run spends its time in.
    data.ctrl[:] = base
    for _ in range(settle):
      mujoco.mj_step(model, data)
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
    self.data = data  # the settled start state, ctrl of simulation 0

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

  def __init__(self, python: str, xml: Path, inputs: Path, threads: int, variant: str | None):
    self.proc = subprocess.Popen(
      [python, str(HERE / "_peer.py"), str(xml), str(inputs), str(threads), variant or ""],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )

  def cpu_seconds(self) -> float:
    """CPU seconds the worker has used so far (user + system, from /proc; 0 where there is none)."""
    try:
      fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
      return 0.0
    # utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the ") ".
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

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


@dataclass
class Timer:
  """One row at one configuration (None for SERIAL_ROWS): run() times one block, returns substeps.

  peer is the worker whose CPU time counts too, for rows that run in another interpreter.
  """

  row: str
  config: tuple[int, int, int] | None
  run: Callable[[], int]
  peer: Peer | None = None


@dataclass
class Sample:
  substeps: int
  wall_s: float
  cpu_s: float


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawTextHelpFormatter
  )
  parser.add_argument("model", help="XML path, folder under ../shared/models, or Menagerie name")
  parser.add_argument("--num-sims", type=int_list, default=[256], help="N, e.g. 256,4096")
  parser.add_argument("--threads", type=int_list, default=[1, 2], help="T, e.g. 1,2,4")
  parser.add_argument("--nstep", type=int_list, default=[1, 10], help="substeps per call")
  parser.add_argument("--calls", type=int,
                      help="calls per timed block (scan length, rollout knots); default: the "
                           "fewest that make a C loop block last --min-block seconds")
  parser.add_argument("--min-block", type=float, default=0.3,
                      help="seconds a block lasts at least, when --calls is not given")
  parser.add_argument("--max-calls", type=int, default=1000, help="cap on calibrated calls")
  parser.add_argument("--settle", type=int, default=300,
                      help="substeps from the keyframe, under its ctrl, to the start rows")
  parser.add_argument("--repeats", type=int, default=11, help="timed blocks per configuration")
  parser.add_argument("--peers", default=",".join(PEERS),
                      help=f"comma-separated peers to compare with, of {','.join(PEERS)}")
  parser.add_argument("--mjbatch-python", help="interpreter with mjbatch 0.1.4 installed")
  parser.add_argument("--mjx-python", help="interpreter with mujoco-mjx (default: this one)")
  parser.add_argument("--warp-python",
                      help="interpreter with mujoco-warp (default: this one, if it has it)")
  parser.add_argument("--mjx-compatible", action="store_true",
                      help="convert the model into one MJX 3.17 runs, for every row (see "
                           "benchmarks/README.md); results get a -mjx-compatible suffix")
  parser.add_argument("--slow-peer-configs", type=_configs,
                      help="run the mjx and mjwarp rows only at these N:T:K configurations, "
                           "e.g. 256:1:1,256:1:10 (default: at all)")
  parser.add_argument("--serial-warmup", type=int, default=20,
                      help="mjbatch_0.1.4.python_mj_step: untimed substeps")
  parser.add_argument("--serial-steps", type=int, default=200,
                      help="mjbatch_0.1.4.python_mj_step: timed substeps")
  parser.add_argument("--out", type=Path, default=RESULTS, help="output folder")
  parser.add_argument("--no-plot", action="store_true")
  common.add_progress_args(parser)
  args = parser.parse_args(argv)
  if args.slow_peer_configs is not None:
    grid = {(n, t, k) for n in args.num_sims for t in args.threads for k in args.nstep}
    if not set(args.slow_peer_configs) <= grid:
      parser.error("--slow-peer-configs must be among --num-sims x --threads x --nstep")
  args.peers = {p.strip() for p in args.peers.split(",") if p.strip()}
  unknown = args.peers - set(PEERS)
  if unknown:
    parser.error(f"unknown peers {sorted(unknown)}; choose from {PEERS}")
  if (args.calls is not None and args.calls < 1) or args.repeats < 1 or args.max_calls < 1:
    parser.error("--calls, --repeats and --max-calls must be >= 1")
  if args.serial_steps < 1 or args.serial_warmup < 0 or args.settle < 0 or args.min_block <= 0:
    parser.error("need --serial-steps >= 1, --serial-warmup >= 0, --settle >= 0, --min-block > 0")
  return args


def _configs(text: str) -> list[tuple[int, int, int]]:
  """argparse type: comma-separated N:T:K configurations, each value >= 1."""
  try:
    configs = [tuple(int(v) for v in item.split(":")) for item in text.split(",") if item.strip()]
  except ValueError:
    configs = []
  if not configs or any(len(c) != 3 or min(c) < 1 for c in configs):
    raise argparse.ArgumentTypeError(f"expected N:T:K[,N:T:K...] with ints >= 1, got {text!r}")
  return [(c[0], c[1], c[2]) for c in configs]


class Harness:
  """Builds every row's timers, then times them interleaved."""

  def __init__(self, args: argparse.Namespace, xml: Path | None, model: Any, inputs: Inputs,
               variant: tuple[str, dict[str, Any] | None] | None = None):
    self.args, self.xml, self.model, self.inputs = args, xml, model, inputs
    # (name, changes) of the model variant every row steps; a peer must report the same.
    self.variant = variant
    self.configs = [(n, t, k) for n in args.num_sims for t in args.threads for k in args.nstep]
    self.unavailable: dict[str, str] = {}
    self.compile_s: dict[tuple[str, Any], float] = {}
    self.timers: list[Timer] = []
    self.peers: list[Peer] = []
    self.info: dict[str, Any] = {}
    self.calls: dict[tuple[int, int, int], int] = {}

  def calibrate(self) -> None:
    """Calls per block for each configuration, the same for every row so all run the same work.

    From the C loop's CPU time for one call, spread over T threads as on an idle machine: the
    fastest row, so that every block of every row lasts at least --min-block seconds.
    """
    import mujoco

    from mjbatch_jax._extension import ext

    rows = self.inputs.state_rows(mujoco.mjtState.mjSTATE_INTEGRATION, max(self.args.num_sims))
    self.info["c_rows"] = rows
    for n, t, k in self.configs:
      if self.args.calls is not None:
        self.calls[(n, t, k)] = self.args.calls
        continue
      states = np.ascontiguousarray(rows[:n])
      per_call = [timed(ext.step_loop, self.model._address, states, t, k).cpu_s / t
                  for _ in range(3)]
      calls = math.ceil(self.args.min_block / max(min(per_call), 1e-6))
      self.calls[(n, t, k)] = max(1, min(calls, self.args.max_calls))

  # Each add_* appends timers for one row, or records why the row is unavailable.
  def build(self, bar: common.Progress) -> None:
    builders: list[tuple[str, Callable[[], None]]] = [
      ("c_loop", self.add_c_loop),
      ("c_lockstep", self.add_c_lockstep),
      ("python_mj_step", self.add_python),
      ("mjbatch_jax.Batch", self.add_mjbatch_jax_batch),
      ("mujoco.batch", self.add_mujoco_batch),
      ("mjbatch_jax.step_scan", self.add_jax_scan),
      ("mjbatch_jax.rollout", self.add_jax_rollout),
      ("mujoco.rollout", self.add_mujoco_rollout),
      ("mjbatch_0.1.4.Batch", self.add_mjbatch),
      ("mjx", self.add_mjx),
      ("mjwarp", self.add_mjwarp),
    ]
    for row, builder in builders:
      try:
        builder()
      except Exception as e:  # a row that cannot run must not stop the others
        self.unavailable.setdefault(row, f"{type(e).__name__}: {e}")
        self.timers = [t for t in self.timers if t.row != row]
      bar.update(postfix=f"built {row}")

  def _skip_unless(self, peer: str, rows: Sequence[str]) -> bool:
    if peer in self.args.peers:
      return False
    for row in rows:
      self.unavailable[row] = f"not selected (--peers does not include {peer!r})"
    return True

  def _add(self, row: str, config: tuple[int, int, int] | None, run: Callable[[], int],
           peer: Peer | None = None) -> None:
    run()  # warm-up
    self.timers.append(Timer(row, config, run, peer))

  def _c_timers(self, row: str, loop: Callable[..., float]) -> None:
    for n, t, k in self.configs:
      # The same work as the batch rows: each of the N simulations from its start row (its own
      # ctrl) for calls * k substeps, on T threads that each own one MjData.
      length = k * self.calls[(n, t, k)]
      states = np.ascontiguousarray(self.info["c_rows"][:n])

      def run(t: int = t, length: int = length, states: np.ndarray = states) -> int:
        loop(self.model._address, states, t, length)
        return len(states) * length

      self._add(row, (n, t, k), run)

  def add_c_loop(self) -> None:
    from mjbatch_jax._extension import ext

    self._c_timers("c_loop", ext.step_loop)

  def add_c_lockstep(self) -> None:
    from mjbatch_jax._extension import ext

    loop = getattr(ext, "step_loop_lockstep", None)
    if loop is None:
      raise NotImplementedError("the extension has no step_loop_lockstep (rebuild it)")
    self._c_timers("c_lockstep", loop)

  def add_python(self) -> None:
    if self._skip_unless("python", ["python_mj_step"]):
      return
    import mujoco

    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    data = mujoco.MjData(self.model)
    configs = [c for c in self.configs if c[1] == 1]
    if not configs:
      raise ValueError("runs on one thread only: include 1 in --threads")
    for n, t, k in configs:
      length = k * self.calls[(n, t, k)]
      rows = self.info["c_rows"][:n]

      # The C loop's work from Python: each simulation from its start row, substeps back to back.
      def run(rows: np.ndarray = rows, length: int = length) -> int:
        for row in rows:
          mujoco.mj_setState(self.model, data, row, spec)
          for _ in range(length):
            mujoco.mj_step(self.model, data)
        return len(rows) * length

      self._add("python_mj_step", (n, t, k), run)

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
              n: int = n, calls: int = self.calls[(n, t, k)]) -> int:
        rows[:] = initial
        for _ in range(calls):
          batch.step(nstep=k)
        return n * k * calls

      self._add(row, (n, t, k), run)

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

    import mjbatch_jax

    sims = {t: mjbatch_jax.Simulator(self.model, num_threads=t) for t in self.args.threads}
    setup = {"sims": sims, "rows": self.info["c_rows"], "jax": jax, "mjbatch_jax": mjbatch_jax}
    self.info["jax"] = setup
    return setup

  def _jitted(self, row: str,
              build: Callable[[Any, int, int, int], tuple[Callable[..., Any], tuple]]) -> None:
    setup = self._jax_setup()
    jax = setup["jax"]
    for n, t, k in self.configs:
      sim, calls = setup["sims"][t], self.calls[(n, t, k)]
      fn, operands = build(sim, n, k, calls)
      clock = Stopwatch()
      compiled = jax.jit(fn).lower(*operands).compile()
      self.compile_s[(row, (n, t, k))] = clock.wall_s

      def run(compiled: Any = compiled, operands: tuple = operands, n: int = n, k: int = k,
              calls: int = calls) -> int:
        jax.block_until_ready(compiled(*operands))
        return n * k * calls

      self._add(row, (n, t, k), run)

  def add_jax_scan(self) -> None:
    setup = self._jax_setup()
    jax, mjbatch_jax = setup["jax"], setup["mjbatch_jax"]
    jnp = jax.numpy

    def build(sim: Any, n: int, k: int, calls: int) -> tuple[Callable[..., Any], tuple]:
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
    jnp = jax.numpy

    def build(sim: Any, n: int, k: int, calls: int) -> tuple[Callable[..., Any], tuple]:
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
      steps = k * self.calls[(n, t, k)]
      datas = [mujoco.MjData(self.model) for _ in range(max(t, 1))]
      control = np.repeat(self.inputs.ctrl[:n, None, :], steps, axis=1)
      initial = rows[:n].copy()
      state_out = np.empty((n, steps, nfull))
      sensor_out = np.empty((n, steps, self.model.nsensordata))

      def run(t: int = t, datas: list = datas, control: np.ndarray = control,
              initial: np.ndarray = initial, state_out: np.ndarray = state_out,
              sensor_out: np.ndarray = sensor_out, steps: int = steps, n: int = n) -> int:
        runners[t].rollout(self.model, datas, initial, control, nstep=steps, state=state_out,
                           sensordata=sensor_out)
        return n * steps

      self._add("mujoco.rollout", (n, t, k), run)

  def _peer(self, python: str, threads: int) -> Peer:
    if self.xml is None:
      raise PeerError("the model has no XML file to hand to another interpreter")
    inputs = Path(self.info["tmpdir"]) / "inputs.npz"
    if not inputs.exists():
      self.inputs.save(inputs)
    peer = Peer(python, self.xml, inputs, threads, self.variant[0] if self.variant else None)
    self.peers.append(peer)
    return peer

  def _hello(self, peer: Peer) -> dict[str, Any]:
    """The peer's hello, after checking that it steps the same model as this process."""
    hello = _ok(peer.ask(op="hello"))
    m = self.model
    ours = {"nq": m.nq, "nv": m.nv, "nu": m.nu, "na": m.na, "ngeom": m.ngeom}
    if hello.get("sizes") != ours:
      raise PeerError(f"the peer's model has sizes {hello.get('sizes')}, this one {ours}")
    changes = self.variant[1] if self.variant else None
    if hello.get("variant_changes") != changes:
      raise PeerError(f"the peer converted the model as {hello.get('variant_changes')}, this "
                      f"process as {changes}")
    return hello

  def _peer_timers(self, row: str, kind: str, python: str) -> None:
    slow = self.args.slow_peer_configs if row in SLOW_PEERS else None
    configs = [c for c in self.configs if slow is None or c in slow]
    for t in sorted({t for _, t, _ in configs}):
      peer = self._peer(python, t)
      self._hello(peer)
      for n, tt, k in configs:
        if tt != t:
          continue
        request = {"row": kind, "num_sims": n, "nstep": k, "calls": self.calls[(n, t, k)]}
        reply = _ok(peer.ask(op="setup", **request))
        if reply.get("compile_s") is not None:
          self.compile_s[(row, (n, t, k))] = reply["compile_s"]
        extra = {key: value for key, value in reply.items()
                 if key not in ("ok", "compile_s") and value is not None}
        if extra:
          self.info.setdefault("setup_notes", {})[f"{row} N={n} T={t} k={k}"] = extra

        def run(peer: Peer = peer, request: dict = request) -> int:
          return _ok(peer.ask(op="time", **request))["substeps"]

        self.timers.append(Timer(row, (n, t, k), run, peer))

  def add_mjbatch(self) -> None:
    rows = ["mjbatch_0.1.4.Batch", "mjbatch_0.1.4.python_mj_step"]
    if self._skip_unless("mjbatch", rows):
      return
    python = self.args.mjbatch_python
    if not python:
      for row in rows:
        self.unavailable[row] = "not run: pass --mjbatch-python PATH (an interpreter with mjbatch)"
      return
    hello = self._hello(self._peer(python, 1))
    if "mjbatch" not in hello:
      raise PeerError(f"{python} cannot import mjbatch: {hello.get('mjbatch_error')}")
    self.info["mjbatch_peer"] = {"mjbatch": hello["mjbatch"], "mujoco": hello["mujoco"]}
    serial_peer = self.peers[-1]
    warmup, steps = self.args.serial_warmup, self.args.serial_steps

    def serial() -> int:
      return _ok(serial_peer.ask(op="serial", warmup=warmup, steps=steps))["substeps"]

    try:
      serial()
      self.timers.append(Timer("mjbatch_0.1.4.python_mj_step", None, serial, serial_peer))
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
    hello = self._hello(self._peer(python, 1))
    if "mjx" not in hello:
      raise PeerError(f"{python} cannot import mujoco.mjx: {hello.get('mjx_error')}")
    self.info["mjx_peer"] = {"mjx": hello["mjx"], "jax": hello.get("jax"),
                             "mujoco": hello["mujoco"]}
    self._peer_timers("mjx", "mjx", python)

  def add_mjwarp(self) -> None:
    if self._skip_unless("mjwarp", ["mjwarp"]):
      return
    python = self.args.warp_python
    if not python:
      if importlib.util.find_spec("mujoco_warp") is None:
        raise PeerError("mujoco-warp is not importable in this interpreter; pass --warp-python")
      python = sys.executable
    hello = self._hello(self._peer(python, 1))
    if "mjwarp" not in hello:
      raise PeerError(f"{python} cannot import mujoco_warp: {hello.get('mjwarp_error')}")
    self.info["mjwarp_peer"] = {"mujoco_warp": hello["mjwarp"], "warp": hello.get("warp"),
                                "mujoco": hello["mujoco"]}
    self._peer_timers("mjwarp", "mjwarp", python)

  def measure(self, bar: common.Progress) -> list[dict[tuple[str, Any], Sample]]:
    """One block of every timer per repeat, in turn: a dict per repeat by (row, config)."""
    repeats: list[dict[tuple[str, Any], Sample]] = []
    for _ in range(self.args.repeats):
      samples: dict[tuple[str, Any], Sample] = {}
      for timer in self.timers:
        if timer.row in self.unavailable:
          bar.update(postfix=f"{timer.row} (failed)")
          continue
        try:
          peer_cpu = timer.peer.cpu_seconds() if timer.peer else 0.0
          (wall, cpu), substeps = run_timed(timer.run)
          if timer.peer:
            cpu += timer.peer.cpu_seconds() - peer_cpu
          samples[(timer.row, timer.config)] = Sample(substeps, wall, cpu)
        except Exception as e:
          self.unavailable[timer.row] = f"{type(e).__name__}: {e}"
        bar.update(postfix=f"{timer.row} {timer.config or ''}")
      repeats.append(samples)
    return repeats

  def close(self) -> None:
    for peer in self.peers:
      peer.close()
    for sim in self.info.get("jax", {}).get("sims", {}).values():
      sim.close()
    for runner in self.info.get("rollouts", {}).values():
      runner.close()


def _stats(values: list[float]) -> dict[str, float]:
  return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(harness: Harness, repeats: list[dict[tuple[str, Any], Sample]]) -> dict[str, Any]:
  """Per row and configuration: throughputs and, per repeat, ratios to each limit in that repeat.

  A ratio pairs a row's block with the limit's block of the same repeat, which ran moments
  apart, so the spread of the ratios is the noise the interleaving did not cancel.
  """
  rows: dict[str, Any] = {}
  for name, meaning in ROWS:
    if name in harness.unavailable:
      rows[name] = {"meaning": meaning, "available": False, "reason": harness.unavailable[name]}
      continue
    configs: list[Any] = [None] if name in SERIAL_ROWS else harness.configs
    results = []
    for config in configs:
      key = (name, config)
      blocks = [r[key] for r in repeats if key in r]
      if not blocks:
        continue
      entry: dict[str, Any] = {
        "substeps_per_block": blocks[0].substeps,
        "wall_s": [b.wall_s for b in blocks],
        "cpu_s": [b.cpu_s for b in blocks],
        "throughput_wall": _stats([b.substeps / b.wall_s for b in blocks]),
        "throughput_cpu": _stats([b.substeps / max(b.cpu_s, 1e-9) for b in blocks]),
      }
      if config is not None:
        n, t, k = config
        entry.update(num_sims=n, threads=t, nstep=k, calls=harness.calls[config],
                     compile_s=harness.compile_s.get((name, config)))
        for limit in LIMITS:
          for clock, attr in (("cpu", "cpu_s"), ("wall", "wall_s")):
            # throughput / limit's throughput over the same substeps = limit's time / row's time
            ratios = [getattr(r[(limit, config)], attr) / max(getattr(r[key], attr), 1e-9)
                      for r in repeats if key in r and (limit, config) in r]
            entry[f"ratio_to_{limit}_{clock}"] = _stats(ratios) if ratios else None
        if name in SLOW_PEERS:
          # How many times faster the JAX path is: this row's time over the JAX row's for the
          # same work in the same repeat.
          jax_key = (JAX_ROW, config)
          for clock, attr in (("cpu", "cpu_s"), ("wall", "wall_s")):
            times = [getattr(r[key], attr) / max(getattr(r[jax_key], attr), 1e-9)
                     for r in repeats if key in r and jax_key in r]
            entry[f"jax_speedup_{clock}"] = _stats(times) if times else None
      results.append(entry)
    if results:
      rows[name] = {"meaning": meaning, "available": True, "results": results}
    else:
      rows[name] = {"meaning": meaning, "available": False, "reason": "no measurement ran"}
  return rows


def _cell(stats: dict[str, float] | None) -> str:
  if stats is None:
    return "-"
  return f"{stats['median']:.2f} ({stats['min']:.2f}-{stats['max']:.2f})"


def format_table(rows: dict[str, Any], configs: Sequence[tuple[int, int, int]]) -> str:
  headers = [f"N={n} T={t} k={k}" for n, t, k in configs]
  width = max(max(len(h) for h in headers), len("0.00 (0.00-0.00)")) + 2
  name_width = max(len(n) for n in ROW_NAMES) + 2
  lines = []

  def by_config(name: str) -> dict[tuple[int, int, int], dict[str, Any]]:
    return {(r["num_sims"], r["threads"], r["nstep"]): r for r in rows[name]["results"]}

  limit = rows["c_loop"]
  if limit["available"]:
    lines.append("c_loop sim-substeps per CPU second (per wall second), k/s")
    found = [by_config("c_loop").get(c) for c in configs]
    cells = [f"{r['throughput_cpu']['median'] / 1e3:.1f} "
             f"({r['throughput_wall']['median'] / 1e3:.1f})" if r else "-" for r in found]
    lines.append("c_loop".ljust(name_width) + "".join(c.rjust(width) for c in cells))
  for limit_name, clock in (("c_loop", "cpu"), ("c_lockstep", "cpu"), ("c_loop", "wall")):
    lines += ["", f"ratio to {limit_name} by {clock.upper()} time: median over repeats "
              "(smallest-largest)", "row".ljust(name_width) + "".join(h.rjust(width)
                                                                     for h in headers)]
    if not rows[limit_name]["available"]:
      lines.append(f"  {limit_name} unavailable: {rows[limit_name]['reason']}"[:200])
      continue
    for name in ROW_NAMES:
      if name in SERIAL_ROWS:
        continue
      row = rows[name]
      if not row["available"]:
        lines.append(name.ljust(name_width) + f"unavailable: {row['reason']}"[:200])
        continue
      found = by_config(name)
      cells = [_cell(found[c].get(f"ratio_to_{limit_name}_{clock}")) if c in found else "-"
               for c in configs]
      lines.append(name.ljust(name_width) + "".join(c.rjust(width) for c in cells))
  apart = [name for name in SERIAL_ROWS if rows[name]["available"]]
  if apart:
    lines += ["", "reported apart (one trajectory from the start state, not the same rows):"]
    for name in apart:
      r = rows[name]["results"][0]
      lines.append(f"  {name}: {r['throughput_cpu']['median'] / 1e3:.1f} k substeps per CPU s, "
                   f"{r['throughput_wall']['median'] / 1e3:.1f} k per wall s")
  multiples = []
  for name in SLOW_PEERS:
    if not rows[name]["available"]:
      continue
    for r in rows[name]["results"]:
      config = f"N={r['num_sims']} T={r['threads']} k={r['nstep']}"
      multiples.append(f"  {name} {config}: {_cell(r.get('jax_speedup_cpu'))} by CPU time, "
                       f"{_cell(r.get('jax_speedup_wall'))} by wall time")
  if multiples:
    lines += ["", f"how many times faster {JAX_ROW} is than (median, smallest-largest):",
              *multiples]
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
  fig, axes = plt.subplots(3, len(ks), figsize=(6 * len(ks), 13), squeeze=False)
  max_n, max_t = max(args.num_sims), max(args.threads)
  for col, k in enumerate(ks):
    for ax, x_name, fixed_name, fixed in (
      (axes[0][col], "threads", "num_sims", max_n),
      (axes[1][col], "num_sims", "threads", max_t),
    ):
      for name in ROW_NAMES:
        row = rows[name]
        if not row["available"] or name in SERIAL_ROWS:
          continue
        points = sorted(
          (r[x_name], r["throughput_wall"]["median"]) for r in row["results"]
          if r["nstep"] == k and r[fixed_name] == fixed
        )
        if points:
          xs, ys = zip(*points, strict=True)
          ax.plot(xs, ys, marker="o", label=name)
      ax.set_xlabel("threads T" if x_name == "threads" else "simulations N")
      ax.set_ylabel("sim-substeps / wall s")
      ax.set_yscale("log")
      if x_name == "num_sims":
        ax.set_xscale("log", base=2)
      ax.set_title(f"{title}: nstep={k}, {fixed_name}={fixed}")
      ax.grid(True, which="both", alpha=0.3)
  axes[0][0].legend(fontsize=8)
  # Every configuration as a ratio to the C loop by CPU time: the only panel that shows rows
  # measured at a few configurations (--slow-peer-configs), where the panels above, at the
  # largest N and T, have no point of theirs.
  for ax in axes[2]:
    ax.remove()
  wide = fig.add_subplot(axes[2][0].get_gridspec()[2, :])
  configs = [(n, t, k) for n in args.num_sims for t in args.threads for k in ks]
  for name in ROW_NAMES:
    row = rows[name]
    if not row["available"] or name in SERIAL_ROWS:
      continue
    found = {(r["num_sims"], r["threads"], r["nstep"]): r for r in row["results"]}
    points = [(i, found[c]["ratio_to_c_loop_cpu"]["median"]) for i, c in enumerate(configs)
              if c in found and found[c].get("ratio_to_c_loop_cpu")]
    if points:
      xs, ys = zip(*points, strict=True)
      wide.plot(xs, ys, marker="o", linestyle=":", label=name)
  wide.set_xticks(range(len(configs)), [f"N={n} T={t} k={k}" for n, t, k in configs],
                  fontsize=8)
  wide.set_yscale("log")
  wide.set_ylabel("ratio to c_loop by CPU time (median)")
  wide.set_title(f"{title}: every configuration")
  wide.grid(True, which="both", alpha=0.3)
  wide.legend(fontsize=8)
  save_figure(fig, path, dpi=100)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parse_args(argv)
  import jax

  jax.config.update("jax_enable_x64", True)
  xml, model = resolve_model(args.model, [p for p in (args.warp_python, args.mjx_python) if p])
  label = model_label(args.model, xml)
  variant = None
  if args.mjx_compatible:
    if xml is None:
      raise SystemExit("--mjx-compatible needs the model as an XML file")
    model, changes = load_variant(xml, MJX_COMPATIBLE)
    variant = (MJX_COMPATIBLE, changes)
    label = f"{label}-{MJX_COMPATIBLE}"
    print(f"model variant {MJX_COMPATIBLE}: {changes}")
  inputs = Inputs(model, max(args.num_sims), args.settle)
  harness = Harness(args, xml, model, inputs, variant)
  # Between timed blocks, never in one: a bar with the time left on a terminal, else lines.
  bar = common.progress(len(ROW_NAMES) - 1 + args.repeats * len(harness.configs) * len(ROW_NAMES),
                        "scaling", args, unit="block")
  with tempfile.TemporaryDirectory() as tmp:
    harness.info["tmpdir"] = tmp
    try:
      harness.calibrate()
      harness.build(bar)
      bar.total = bar.n + args.repeats * len(harness.timers)
      repeats = harness.measure(bar)
    finally:
      bar.close()
      harness.close()
  rows = summarize(harness, repeats)
  result = {
    "model": label,
    "model_path": str(xml) if xml else None,
    "model_variant": {"name": variant[0], "changes": variant[1]} if variant else None,
    "date": datetime.datetime.now().isoformat(timespec="seconds"),
    "machine": machine_info([sys.argv[0], *argv]),
    "settings": {
      "num_sims": args.num_sims, "threads": args.threads, "nstep": args.nstep,
      "calls": {f"N={n} T={t} k={k}": c for (n, t, k), c in harness.calls.items()},
      "min_block_s": args.min_block, "settle": args.settle, "repeats": args.repeats,
      "serial_warmup": args.serial_warmup, "serial_steps": args.serial_steps,
      "peers": sorted(args.peers),
      "slow_peer_configs": args.slow_peer_configs,
    },
    "peers": {k: v for k, v in harness.info.items() if k.endswith("_peer")},
    "peer_setup_notes": harness.info.get("setup_notes", {}),
    "rows": rows,
  }
  table = format_table(rows, harness.configs)
  print(table)
  json_path = write_result(args.out, label, result)
  if not args.no_plot and (plt := pyplot()) is not None:
    plot(plt, rows, args, json_path.with_suffix(".png"), label)
  return result


if __name__ == "__main__":
  main()
