"""A benchmark worker for peers that must run in another interpreter (mjbatch 0.1.4, MJX, Warp).

mjbatch 0.1.4 pins MuJoCo 3.14, MJX 3.17 needs MuJoCo 3.17 and brings its own JAX set-up, and
MuJoCo Warp brings Warp, so none can share a process with mjbatch_jax. scaling.py starts this
file with the peer's interpreter and talks to it over stdin/stdout, one JSON object a line, so
that the peer's measurements interleave with the others' within each repeat instead of running
as one block. Only mujoco and numpy are needed here, and _common.py beside it (standard library
at import) for the model variant's conversion and the clocks; nothing is imported from the
mjbatch_jax package.

  echo '{"op": "hello"}' | /tmp/venvmjb/bin/python benchmarks/_peer.py MODEL.xml INPUTS.npz 2 \
      [mjx-compatible]

The optional fourth argument names a model variant (see _common.load_variant): the worker
converts MODEL.xml itself with its own MuJoCo, and its hello reply reports the model's sizes and
the changes so that scaling.py can check they are the ones its own model has.

Requests: {"op": "hello"}; {"op": "setup", "row": R, "num_sims": N, "nstep": K, "calls": C}
(builds and warms up; reports compile time); {"op": "time", ...same keys} (one timed
measurement); {"op": "serial", "warmup": W, "steps": S}. Replies: {"ok": true, ...} or
{"ok": false, "error": "..."}.
"""

import json
import os
import sys
import traceback
from typing import Any

# MJX has no thread-count knob of its own: pinning the process to T cores is what bounds the
# threads XLA's CPU backend can use, so do it before JAX is imported.
if __name__ == "__main__" and len(sys.argv) > 3:
  _threads = int(sys.argv[3])
  if hasattr(os, "sched_setaffinity"):
    _cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, set(_cpus[: max(1, _threads)]))

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from _common import Stopwatch, load_variant, timed  # noqa: E402


class Worker:
  """Holds the model, the shared inputs and the built peers, by configuration."""

  def __init__(self, xml: str, inputs: str, threads: int, variant: str | None = None):
    from pathlib import Path

    self.model, self.variant_changes = load_variant(Path(xml), variant)
    arrays = np.load(inputs)
    self.qpos0, self.qvel0, self.act0 = arrays["qpos0"], arrays["qvel0"], arrays["act0"]
    self.ctrl = arrays["ctrl"]
    self.threads = threads
    self.built: dict[tuple[Any, ...], Any] = {}

  def _reset_data(self, data: mujoco.MjData, ctrl: np.ndarray) -> None:
    mujoco.mj_resetData(self.model, data)
    data.qpos[:], data.qvel[:] = self.qpos0, self.qvel0
    if self.model.na:
      data.act[:] = self.act0
    data.ctrl[:] = ctrl

  def hello(self) -> dict[str, Any]:
    m = self.model
    reply: dict[str, Any] = {
      "mujoco": mujoco.__version__, "variant_changes": self.variant_changes,
      "sizes": {"nq": m.nq, "nv": m.nv, "nu": m.nu, "na": m.na, "ngeom": m.ngeom},
    }
    try:
      import mjbatch  # pyright: ignore[reportMissingImports]

      reply["mjbatch"] = getattr(mjbatch, "__version__", None) or _dist_version("mjbatch")
    except Exception as e:
      reply["mjbatch_error"] = f"{type(e).__name__}: {e}"
    try:
      from mujoco import mjx  # noqa: F401  # pyright: ignore[reportAttributeAccessIssue]

      reply["mjx"] = _dist_version("mujoco-mjx")
      import jax

      reply["jax"] = jax.__version__
    except Exception as e:
      reply["mjx_error"] = f"{type(e).__name__}: {e}"
    try:
      import mujoco_warp  # noqa: F401  # pyright: ignore[reportMissingImports]
      import warp  # pyright: ignore[reportMissingImports]

      reply["mjwarp"] = _dist_version("mujoco-warp")
      reply["warp"] = warp.__version__
    except Exception as e:
      reply["mjwarp_error"] = f"{type(e).__name__}: {e}"
    return reply

  def serial(self, warmup: int, steps: int) -> dict[str, Any]:
    data = mujoco.MjData(self.model)
    self._reset_data(data, self.ctrl[0])
    for _ in range(warmup):
      mujoco.mj_step(self.model, data)

    def run() -> None:
      for _ in range(steps):
        mujoco.mj_step(self.model, data)

    return {"seconds": timed(run).wall_s, "substeps": steps}

  def setup(self, row: str, num_sims: int, nstep: int, calls: int) -> dict[str, Any]:
    key = (row, num_sims, nstep, calls)
    if key in self.built:
      return {"compile_s": None}
    if row == "mjbatch":
      import mjbatch  # pyright: ignore[reportMissingImports]

      batch = mjbatch.Batch(self.model, num_sims, self.threads)
      state = batch.bind("state")
      batch.reset()
      qpos, qvel, ctrl = batch.bind("qpos"), batch.bind("qvel"), batch.bind("ctrl")
      qpos[:], qvel[:], ctrl[:] = self.qpos0, self.qvel0, self.ctrl[:num_sims]
      if self.model.na:
        batch.bind("act")[:] = self.act0
      batch.forward()
      initial = state.copy()
      self.built[key] = (batch, state, initial)
      self.time(row, num_sims, nstep, calls)  # warm-up
      return {"compile_s": None}
    if row == "mjx":
      return self._setup_mjx(key)
    if row == "mjwarp":
      return self._setup_mjwarp(key)
    raise ValueError(f"unknown row {row!r}")

  def _setup_mjx(self, key: tuple[Any, ...]) -> dict[str, Any]:
    import jax
    from mujoco import mjx  # pyright: ignore[reportAttributeAccessIssue]

    _, num_sims, nstep, calls = key
    model = mjx.put_model(self.model)
    data = mjx.make_data(model)
    n = num_sims
    qpos = jax.numpy.broadcast_to(self.qpos0, (n, self.model.nq))
    qvel = jax.numpy.broadcast_to(self.qvel0, (n, self.model.nv))
    ctrl = jax.numpy.asarray(self.ctrl[:n])
    batched = jax.vmap(lambda q, v, u: data.replace(qpos=q, qvel=v, ctrl=u))(qpos, qvel, ctrl)

    def run(d: Any) -> Any:
      def substeps(d: Any, _: Any) -> tuple[Any, None]:
        d = jax.lax.fori_loop(0, nstep, lambda _, d: jax.vmap(mjx.step, (None, 0))(model, d), d)
        return d, None

      return jax.lax.scan(substeps, d, None, length=calls)[0]

    clock = Stopwatch()
    compiled = jax.jit(run).lower(batched).compile()
    compile_s = clock.wall_s
    self.built[key] = (compiled, batched)
    self.time("mjx", num_sims, nstep, calls)  # warm-up
    return {"compile_s": compile_s}

  def _setup_mjwarp(self, key: tuple[Any, ...]) -> dict[str, Any]:
    import tempfile

    import mujoco_warp as mjw  # pyright: ignore[reportMissingImports]
    import warp as wp  # pyright: ignore[reportMissingImports]

    _, num_sims, nstep, calls = key
    if not getattr(self, "_warp_ready", False):
      import atexit
      import shutil

      # A fresh kernel cache, so that the compile time is a cold one, as MJX's always is; Warp's
      # CPU device compiles each kernel module with its bundled clang on first use.
      cache = tempfile.mkdtemp(prefix="mjbatch_bench_warp_")
      atexit.register(shutil.rmtree, cache, ignore_errors=True)
      wp.config.kernel_cache_dir = cache
      wp.config.quiet = True
      wp.init()
      self._warp_ready = True
    device = wp.get_device("cpu")
    data = mujoco.MjData(self.model)
    self._reset_data(data, self.ctrl[0])
    mujoco.mj_forward(self.model, data)
    with wp.ScopedDevice(device):
      model = mjw.put_model(self.model)
      # put_data repeats the settled state (and its solver warm start) in every world.
      batched = mjw.put_data(self.model, data, nworld=num_sims)
      batched.ctrl.assign(self.ctrl[:num_sims])
      fields = ("qpos", "qvel", "act", "qacc_warmstart", "time")
      initial = {f: wp.clone(getattr(batched, f)) for f in fields if hasattr(batched, f)}
      clock = Stopwatch()
      mjw.step(model, batched)  # compiles and loads every kernel module the step launches
      wp.synchronize_device(device)
      compile_s = clock.wall_s
      # Warp's idiomatic loop replays a captured graph of the step; where the device cannot
      # capture, it launches the step's kernels one by one.
      graph, capture_error = None, None
      try:
        with wp.ScopedCapture(device=device) as capture:
          mjw.step(model, batched)
        graph = capture.graph
      except Exception as e:
        capture_error = f"{type(e).__name__}: {e}"
    self.built[key] = (wp, mjw, device, model, batched, initial, graph)
    self.time("mjwarp", num_sims, nstep, calls)  # warm-up
    # A replayed graph must really step (time advances in every world), else the timings lie.
    # Within a quarter of a timestep: float32 time gathers rounding, a missed step is a whole one.
    elapsed = batched.time.numpy() - initial["time"].numpy()
    expected = calls * nstep * self.model.opt.timestep
    if not np.allclose(elapsed, expected, rtol=0, atol=0.25 * self.model.opt.timestep):
      raise RuntimeError(f"mjwarp stepped {elapsed[:3]} s of simulated time, not {expected} s")
    return {"compile_s": compile_s, "graph": graph is not None, "graph_error": capture_error}

  def time(self, row: str, num_sims: int, nstep: int, calls: int) -> dict[str, Any]:
    built = self.built[(row, num_sims, nstep, calls)]
    if row == "mjwarp":
      wp, mjw, device, model, batched, initial, graph = built
      for field, value in initial.items():
        wp.copy(getattr(batched, field), value)
      wp.synchronize_device(device)

      def warp_steps() -> None:
        for _ in range(calls * nstep):
          if graph is not None:
            wp.capture_launch(graph)
          else:
            mjw.step(model, batched)
        wp.synchronize_device(device)

      seconds = timed(warp_steps).wall_s
    elif row == "mjbatch":
      batch, state, initial = built
      state[:] = initial

      def batch_steps() -> None:
        for _ in range(calls):
          batch.step(nstep=nstep)

      seconds = timed(batch_steps).wall_s
    else:
      compiled, batched = built
      seconds = timed(compiled, batched).wall_s
    return {"seconds": seconds, "substeps": num_sims * nstep * calls}


def _dist_version(name: str) -> str | None:
  from importlib import metadata

  try:
    return metadata.version(name)
  except metadata.PackageNotFoundError:
    return None


def main() -> None:
  # Libraries print notices on stdout (MJX: "Failed to import warp"); keep it for the replies.
  replies, sys.stdout = sys.stdout, sys.stderr
  worker = Worker(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1,
                  sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None)
  for line in sys.stdin:
    if not line.strip():
      continue
    request = json.loads(line)
    op = request.pop("op")
    try:
      if op == "hello":
        reply = worker.hello()
      elif op == "serial":
        reply = worker.serial(request["warmup"], request["steps"])
      elif op in ("setup", "time"):
        reply = getattr(worker, op)(
          request["row"], request["num_sims"], request["nstep"], request["calls"]
        )
      else:
        raise ValueError(f"unknown op {op!r}")
      reply["ok"] = True
    except Exception as e:
      reply = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
    replies.write(json.dumps(reply) + "\n")
    replies.flush()


if __name__ == "__main__":
  main()
