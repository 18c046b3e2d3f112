"""Several processes as one JAX multi-controller job: mjbatch_jax.distributed and the launcher.

Each multi-process test runs 2 processes on this machine with `python -m mjbatch_jax.launch`,
under time limits (the launcher's --timeout and subprocess's), so that nothing hangs. They share
a persistent compilation cache, so that a program compiles once per session.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import jax
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import distributed, launch, params

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pg_distributed.py"
LIMIT = 120  # seconds for any one launcher run, in the worst case


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
  cache = tmp_path_factory.mktemp("jax_cache")
  return {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    "JAX_COMPILATION_CACHE_DIR": str(cache),
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
  }


def run_launcher(args: list[str], env: dict[str, str], cwd: Path,
                 limit: float = LIMIT) -> subprocess.CompletedProcess[str]:
  command = [sys.executable, "-m", "mjbatch_jax.launch", "--timeout", str(limit), *args]
  return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                        timeout=limit + 30)


def lines_of(out: str, rank: int) -> list[str]:
  return [line[len(f"[{rank}] "):] for line in out.splitlines() if line.startswith(f"[{rank}] ")]


# -- one process: what needs no peers ------------------------------------------------------------


class _FakeGpu:
  platform, process_index, id = "gpu", 0, 0


@pytest.fixture
def alone(monkeypatch: pytest.MonkeyPatch) -> None:
  """No variable that would make setup look for other processes (say, pytest under srun)."""
  for name in ("MJBATCH_JAX_COORDINATOR", "MJBATCH_JAX_NUM_PROCESSES", "MJBATCH_JAX_PROCESS_ID",
               "JAX_COORDINATOR_ADDRESS", "SLURM_NTASKS", "OMPI_MCA_orte_hnp_uri"):
    monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("alone")
def test_setup_alone_is_the_plain_functions(cartpole):
  with distributed.setup(cartpole, 4, num_threads=1, fields=("body_mass",), keyframe=0) as dist:
    assert (dist.process_count, dist.rows, dist.num_local) == (1, slice(0, 4), 4)
    ctrl = dist.from_rows(lambda rows: 0.1 * np.stack([rows, -rows], axis=1).astype(float))
    mapped = np.asarray(dist.map(mjbatch_jax.step)(dist.state, ctrl, dist.params))
    plain = np.asarray(mjbatch_jax.step(dist.sim.init_state(4, 0), ctrl, dist.sim.params(4, (
      "body_mass",))))
    assert np.array_equal(mapped, plain)
    assert np.array_equal(dist.local(ctrl), np.asarray(ctrl))
    # A replicated value comes back whole, a scalar too (a cost from out_specs=P()).
    assert dist.local(dist.replicate(np.float64(2.5))) == 2.5
    assert np.array_equal(dist.local(dist.replicate(np.eye(3))), np.eye(3))
    assert dist.records[0]["model"] == distributed.model_digest(cartpole)


def test_model_digest_is_the_models_fields_wherever_its_files_are(tmp_path: Path):
  """Hosts (or checkouts) that keep the same robot in other folders hold the same model: the
  digest leaves out the assets' paths, which a compiled model keeps; a renamed body, a changed
  mass or a changed mesh file is another model. A field of an unknown type, or no model, is
  refused."""
  scene = """<mujoco><asset><mesh file="wedge.obj"/></asset><worldbody><body name="{}">
    <freejoint/><geom type="mesh" mesh="wedge"/></body></worldbody></mujoco>"""
  wedge = "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 {}\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n"
  models = []
  for folder, body, tip in (("here", "box", 1), ("there/deeper", "box", 1), ("renamed", "crate", 1),
                            ("taller", "box", 2)):
    (tmp_path / folder).mkdir(parents=True)
    (tmp_path / folder / "wedge.obj").write_text(wedge.format(tip))
    (tmp_path / folder / "scene.xml").write_text(scene.format(body))
    models.append(mujoco.MjModel.from_xml_path(str(tmp_path / folder / "scene.xml")))
  here, there, renamed, taller = models
  assert here.paths != there.paths  # what the digest must not see
  digest = distributed.model_digest(here)
  assert distributed.model_digest(there) == digest and len(digest) == 64
  assert distributed.model_digest(renamed) != digest and distributed.model_digest(taller) != digest
  there.body_mass[1] *= 2
  assert distributed.model_digest(there) != digest

  class Newer:  # a model of a MuJoCo whose bindings have a field of another kind
    nq = 7
    layers = [1, 2]

  with pytest.raises(TypeError, match="cannot hash the model's layers"):
    params._hash_fields(hashlib.sha256(), Newer())
  for wrong in (None, "scene.xml", Newer(), mujoco.MjData(here)):
    with pytest.raises(ValueError, match="model must be a mujoco.MjModel, got"):
      distributed.model_digest(wrong)  # pyright: ignore[reportArgumentType]


def test_local_gives_rows_or_refuses_another_split():
  """On two devices of one process: rows split along axis 0 come back in order, an array split
  along another axis is refused (it came back scrambled), as is a value that is no array."""
  script = textwrap.dedent("""
    import mujoco, numpy as np, jax
    from jax.sharding import NamedSharding, PartitionSpec as P
    from mjbatch_jax import distributed
    model = mujoco.MjModel.from_xml_string(
      '<mujoco><worldbody><body><joint/><geom size=".1"/></body></worldbody></mujoco>')
    with distributed.setup(model, 2, num_threads=1) as d:
      x = np.arange(8.0).reshape(2, 4)
      assert np.array_equal(d.local(jax.device_put(x, NamedSharding(d.mesh, P("sims")))), x)
      for bad in (jax.device_put(x, NamedSharding(d.mesh, P(None, "sims"))), x):
        try:
          d.local(bad)
        except ValueError as e:
          print("refused:", e)
  """)
  environment = {key: value for key, value in os.environ.items()
                 if not key.startswith(("MJBATCH_JAX_", "SLURM_", "OMPI_"))}
  environment["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
  done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                        timeout=LIMIT, env=environment, cwd=ROOT)
  assert done.returncode == 0, done.stderr[-3000:]
  refused = [line for line in done.stdout.splitlines() if line.startswith("refused:")]
  assert len(refused) == 2, done.stdout
  assert "split along its first axis only" in refused[0]
  assert "must be a global jax.Array, got ndarray" in refused[1]


def test_settings_compared_across_processes_by_value(cartpole):
  """What setup's check compares: a long selection differing in its middle differs (numpy's repr
  elides the middle), a tuple or numpy int equals the list or int it holds."""
  from jax.sharding import Mesh

  from mjbatch_jax.distributed import handle

  mesh = Mesh(np.array(jax.devices("cpu")[:1]), ("sims",))

  def settings(select, keyframe: Any = 0):
    return handle._record(cartpole, None, 4, "sims", mesh, ("geom_friction",), (), select,
                          keyframe, None)["settings"]

  rows = np.arange(1100)
  swapped = rows.copy()
  swapped[[500, 501]] = swapped[[501, 500]]
  assert settings({"geom_friction": rows}) != settings({"geom_friction": swapped})
  assert settings({"geom_friction": (0, 1)}) == settings({"geom_friction": np.array([0, 1])})
  assert settings({"geom_friction": [0, 1]}, np.int64(0)) == settings({"geom_friction": [0, 1]})


@pytest.mark.usefixtures("alone")
def test_setup_refuses_bad_inputs(cartpole):
  from jax.sharding import Mesh

  with pytest.raises(ValueError, match="num_sims_global must be an int >= 1"):
    distributed.setup(cartpole, 0)
  with pytest.raises(ValueError, match="runs on CPU devices"):
    distributed.setup(cartpole, 4, mesh=Mesh(np.array([_FakeGpu()]), ("sims",)))
  with pytest.raises(ValueError, match="1-D with the axis 'sims'"):
    distributed.setup(cartpole, 4, mesh=Mesh(np.array(jax.devices("cpu")), ("rows",)))
  with pytest.raises(ValueError, match="coordinator, num_processes and process_id"):
    distributed.initialize(coordinator="127.0.0.1:1234")
  with pytest.raises(ValueError, match="timeout"):
    distributed.initialize(timeout=0)


@pytest.mark.slow
def test_launcher_names_the_failed_rank_and_stops_the_others(tmp_path, env):
  script = tmp_path / "fail.py"
  script.write_text(textwrap.dedent("""
    import os, sys, time
    if os.environ["MJBATCH_JAX_PROCESS_ID"] == "1":
      print("rank one fails"); sys.exit(3)
    time.sleep(60)
  """))
  begin = time.monotonic()
  out = run_launcher(["-n", "2", str(script)], env, tmp_path)
  assert out.returncode == 3, out.stderr
  assert time.monotonic() - begin < 20
  assert "[1] rank one fails" in out.stdout
  assert "[launch] rank 1 (pid" in out.stderr and "exited with code 3" in out.stderr
  assert "stopping rank(s) 0" in out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("hangs", [True, False])
def test_launcher_names_a_rank_that_ended_early_when_the_others_hang(tmp_path, env, hangs):
  # Rank 1 ends its script at once with status 0. Rank 0 then waits for it (the stand-in for a
  # collective it can never finish) past the launcher's --timeout; or finishes on its own, which
  # is a job like any other (process 0 evaluating alone): nothing is said of rank 1 then.
  script = tmp_path / "early.py"
  script.write_text(textwrap.dedent("""
    import os, sys, time
    if os.environ["MJBATCH_JAX_PROCESS_ID"] == "0":
      time.sleep(float(sys.argv[1]))
  """))
  out = run_launcher(["-n", "2", str(script), "60" if hangs else "1"], env, tmp_path, limit=4)
  blamed = "rank 1 at " in out.stderr and "exited with status 0 while the others ran" in out.stderr
  if hangs:
    assert out.returncode == 124 and "time limit of 4 s reached" in out.stderr, out.stderr
    assert blamed, out.stderr
  else:
    assert out.returncode == 0 and not blamed and "[launch]" not in out.stderr, out.stderr


# -- two processes ---------------------------------------------------------------------------------

CHECKS = """
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, PartitionSpec as P

import mjbatch_jax
from mjbatch_jax import distributed
from tests.models import CARTPOLE_XML, FREEBALL_XML, PENDULUM_XML

N, T = 8, 6
model = mujoco.MjModel.from_xml_string(FREEBALL_XML)
dist = distributed.setup(model, N, num_threads=1, fields=("body_mass", "geom_friction"),
                         keyframe=0)
me = dist.process_index
assert dist.process_count == 2 and dist.num_local == N // 2, (dist.process_count, dist.rows)
assert dist.rows == slice(me * N // 2, (me + 1) * N // 2)
assert [r["engine"] for r in dist.records] == [dist.sim.spec.engine] * 2, dist.records

# Inputs that depend on the global row only, so that one process can build them all.
def controls(rows):
  return np.stack([np.random.default_rng(r).uniform(-1, 1, (T, model.nu)) for r in rows])

def masses(rows):
  return model.body_mass * (1 + 0.05 * rows[:, None])

ctrls = dist.from_rows(controls)
ctrl = dist.from_rows(lambda rows: controls(rows)[:, 0])
params = dist.params.replace({"body_mass": dist.from_rows(masses)})

# The same computations on one device of this process, on the whole batch.
every = np.arange(N)
state1 = dist.sim.init_state(N, 0)
ctrls1, ctrl1 = jnp.asarray(controls(every)), jnp.asarray(controls(every)[:, 0])
params1 = dist.sim.params(N, ("body_mass", "geom_friction"))
params1 = params1.replace({"body_mass": jnp.asarray(masses(every))})
calls = mjbatch_jax._extension.ext.handler_calls

def steps(s, c, p):
  return jax.lax.fori_loop(0, 10, lambda _, s: mjbatch_jax.step(s, c, p), s)

before = calls()["mjbatch_jax_step"]
two = dist.gather(dist.map(steps)(dist.state, ctrl, params))
assert calls()["mjbatch_jax_step"] - before == 10, "each process runs its rows' calls only"
one = np.asarray(jax.jit(steps)(state1, ctrl1, params1))
assert np.array_equal(two, one), "step"

two = dist.gather(dist.map(mjbatch_jax.rollout)(dist.state, ctrls, params))
one = jax.jit(mjbatch_jax.rollout)(state1, ctrls1, params1)
assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(two, one, strict=True)), "rollout"

fd = lambda s, c, p: mjbatch_jax.transition_fd(s, c, p, sensors=True)
two = dist.gather(dist.map(fd)(dist.state, ctrl, params))
one = jax.jit(fd)(state1, ctrl1, params1)
assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(two, one, strict=True)), "transition_fd"

# Data-parallel gradient: each process differentiates the mean cost of its rows w.r.t. shared
# controls (T, nu) added to every row's, and pmean averages: the gradient of the global mean.
def cost(shift, s, c, p):
  _, sensordata = mjbatch_jax.rollout(s, c + shift, p)
  return jnp.mean(jnp.sum(sensordata ** 2, axis=(1, 2)))

def local_grad(shift, s, c, p):
  g = jax.grad(cost)(jax.lax.pcast(shift, "sims", to="varying"), s, c, p)
  return jax.lax.pmean(g, "sims")

shift = 0.1 * np.ones((T, model.nu))
two = dist.gather(dist.map(local_grad, out_specs=P())(dist.replicate(shift), dist.state, ctrls,
                                                      params))
one = np.asarray(jax.jit(jax.grad(cost))(jnp.asarray(shift), state1, ctrls1, params1))
# Relative to the gradient's largest entry (the accelerometer makes it large): the sums differ in
# order only.
scale = float(np.max(np.abs(one)))
gradient_error = float(np.max(np.abs(two - one))) / scale
assert 0 < scale and gradient_error <= 1e-12, (gradient_error, scale)

# The programs are the same in every process (map checked them; here the digest once more).
digest = dist.check_program(jax.jit(steps), dist.state, ctrl, params)
digests = multihost_utils.process_allgather(np.frombuffer(bytes.fromhex(digest), np.uint8))
assert (np.asarray(digests) == np.asarray(digests)[0]).all()

# Bad setups raise in every process, and the processes stay in step afterwards.
def raises(kind, match, fn):
  try:
    fn()
  except kind as error:
    assert match in str(error), str(error)
    return str(error)
  raise AssertionError(f"no {kind.__name__} ({match})")

raises(ValueError, "multiple of the mesh's 2 CPU devices", lambda: distributed.setup(model, 7))
local_mesh = Mesh(np.array(jax.local_devices()), ("sims",))
raises(ValueError, "has no device of process(es)",
       lambda: distributed.setup(model, 8, mesh=local_mesh))
other = mujoco.MjModel.from_xml_string(CARTPOLE_XML)
if me == 1:
  other.body_mass[1] *= 2
message = raises(distributed.DistributedError, "model (sha256", lambda: distributed.setup(other, 8))
assert "process 1 (" in message
if me == 1:
  extra = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(PENDULUM_XML))
raises(distributed.DistributedError, "engine id", lambda: distributed.setup(
  mujoco.MjModel.from_xml_string(CARTPOLE_XML.replace('mass="1"', 'mass="3"')), 8))
assert float(np.asarray(multihost_utils.process_allgather(np.float64(me))).sum()) == 1
print("RESULT " + json.dumps({"process": me, "gradient_error": gradient_error, "scale": scale}))
"""


@pytest.mark.slow
def test_two_processes_equal_one_bit_for_bit(tmp_path, env):
  script = tmp_path / "checks.py"
  script.write_text(CHECKS)
  out = run_launcher(["-n", "2", str(script)], env, tmp_path)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
  results = [json.loads(line.split("RESULT ", 1)[1]) for rank in (0, 1)
             for line in lines_of(out.stdout, rank) if line.startswith("RESULT ")]
  assert sorted(r["process"] for r in results) == [0, 1], out.stdout
  assert all(r["gradient_error"] <= 1e-12 for r in results), results


# Two processes in a loop of collective calls; each script goes on with the loop's body.
COLLECTIVE_LOOP = """
import os, sys, time
import jax
import mujoco
from jax.sharding import PartitionSpec as P
import mjbatch_jax
from mjbatch_jax import distributed
from tests.models import CARTPOLE_XML

model = mujoco.MjModel.from_xml_string(CARTPOLE_XML)
dist = distributed.setup(model, 4, num_threads=1)
total = dist.map(lambda s, c, p: jax.lax.psum(mjbatch_jax.step(s, c, p)[:, 0].sum(), "sims"),
                 out_specs=P())
ctrl = dist.zeros(model.nu)
for i in range(100000):
  total(dist.state, ctrl, dist.params).block_until_ready()
"""

VICTIM = COLLECTIVE_LOOP + """
  if i == 20:
    with open(sys.argv[1] + f".{dist.process_index}", "w") as f:
      f.write(str(os.getpid()))
  if i == 30 and sys.argv[2:] == ["raise"] and dist.process_index == 1:
    raise ValueError("process 1 gives up")
  time.sleep(0.01)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_lost_peer_stops_the_survivor_naming_it(tmp_path, env, how):
  """SIGKILL: the survivor's collective fails at once; SIGSTOP: it blocks. Either way the
  survivor's watchdog (peer timeout 5 s) stops it, naming process 1, well within 60 s."""
  script, ready = tmp_path / "victim.py", tmp_path / "ready"
  script.write_text(VICTIM)
  # With SIGKILL the launcher waits (--grace) for the survivor to stop on its own; with SIGSTOP
  # it kills the stopped one once the survivor has stopped.
  grace = "30" if how == "kill" else "0"
  command = [sys.executable, "-m", "mjbatch_jax.launch", "--timeout", str(LIMIT), "--grace", grace,
             "--peer-timeout", "5", "-n", "2", str(script), str(ready)]
  proc = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.monotonic() + LIMIT
    while not (ready.with_suffix(".0").exists() and ready.with_suffix(".1").exists()):
      assert proc.poll() is None, proc.communicate()
      assert time.monotonic() < deadline, "the processes never got going"
      time.sleep(0.1)
    time.sleep(0.2)
    victim = int(ready.with_suffix(".1").read_text())
    os.kill(victim, signal.SIGKILL if how == "kill" else signal.SIGSTOP)
    lost = time.monotonic()
    _, err = proc.communicate(timeout=90)
    elapsed = time.monotonic() - lost
  finally:
    if proc.poll() is None:
      proc.kill()
  print(f"{how}: the job ended {elapsed:.1f} s after the signal")  # shown with pytest -s
  assert proc.returncode != 0
  assert elapsed < 60, elapsed
  survivor = "\n".join(lines_of(err, 0))
  if "mjbatch_jax.distributed: process 0 of 2" in survivor:
    assert "lost process 1 of 2" in survivor, err[-4000:]
    assert "[launch] rank 0 (pid" in err and "exited with code 75 (it lost a peer)" in err
  else:
    # JAX 0.12's coordination service can notice the silence first and abort the survivor
    # itself (SIGABRT), before our watchdog speaks; its message names the lost task too.
    assert "Task 1 heartbeat timeout" in survivor, err[-4000:]
    assert "[launch] rank 0 (pid" in err and "was killed by SIGABRT" in err
  if how == "kill":
    assert "rank 1 (pid" in err and "was killed by SIGKILL" in err
    assert proc.returncode == 128 + signal.SIGKILL  # the cause, not the survivor's 75


@pytest.mark.slow
def test_an_uncaught_exception_stops_the_others_naming_it(tmp_path, env):
  script = tmp_path / "victim.py"
  script.write_text(VICTIM)
  begin = time.monotonic()
  out = run_launcher(["--grace", "30", "--peer-timeout", "5", "-n", "2", str(script),
                      str(tmp_path / "ready"), "raise"], env, tmp_path)
  assert out.returncode != 0
  survivor = "\n".join(lines_of(out.stderr, 0))
  assert "stops: process 1 of 2" in survivor and "failed: ValueError: process 1 gives up" in (
    survivor), out.stderr[-4000:]
  assert "exited with code 75 (it lost a peer)" in out.stderr
  assert time.monotonic() - begin < 60


LEAVER = """
import sys
import jax
import mujoco
from jax.sharding import PartitionSpec as P
import mjbatch_jax
from mjbatch_jax import distributed
from tests.models import CARTPOLE_XML

model = mujoco.MjModel.from_xml_string(CARTPOLE_XML)
with distributed.setup(model, 4, num_threads=1) as dist:
  total = dist.map(lambda s, c, p: jax.lax.psum(mjbatch_jax.step(s, c, p)[:, 0].sum(), "sims"),
                   out_specs=P())
  ctrl = dist.zeros(model.nu)
  for i in range(100000):
    total(dist.state, ctrl, dist.params).block_until_ready()
    if i == 30 and dist.process_index == 1:
      sys.exit(int(sys.argv[1]) if sys.argv[1].isdigit() else sys.argv[1])
"""


@pytest.mark.slow
@pytest.mark.parametrize("code", ["3", "no data for this rank"])
def test_a_sys_exit_in_the_with_block_stops_the_others_without_the_launcher(tmp_path, env, code):
  """Process 1 leaves with sys.exit(3) (or a message: status 1) while process 0 waits on it in
  a collective. Python's exit handlers never see a SystemExit; the handle's `with` block does,
  and tells process 0's watchdog, which stops it naming process 1, where it waited until JAX's
  shutdown and heartbeat timeouts. Started by hand, as a cluster's scheduler would: no launcher
  to stop the others."""
  script = tmp_path / "leaver.py"
  script.write_text(LEAVER)
  job = {**env, "MJBATCH_JAX_COORDINATOR": f"127.0.0.1:{launch.free_port()}",
         "MJBATCH_JAX_NUM_PROCESSES": "2", "MJBATCH_JAX_PEER_TIMEOUT": "5"}
  begin = time.monotonic()
  procs = [subprocess.Popen([sys.executable, str(script), code], cwd=tmp_path, text=True,
                            env={**job, "MJBATCH_JAX_PROCESS_ID": str(rank)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE) for rank in (0, 1)]
  try:
    errs = [proc.communicate(timeout=90)[1] for proc in procs]
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
  elapsed = time.monotonic() - begin
  assert procs[1].returncode == (3 if code == "3" else 1), errs[1][-3000:]
  assert procs[0].returncode == distributed.EXIT_PEER_LOST, errs[0][-3000:]
  said = "SystemExit: 3" if code == "3" else "SystemExit: no data for this rank"
  assert "stops: process 1 of 2" in errs[0] and f"failed: {said}" in errs[0], errs[0][-3000:]
  assert elapsed < 60, elapsed


TWICE = """
import jax
import mujoco
from jax.sharding import PartitionSpec as P
import mjbatch_jax
from mjbatch_jax import distributed
from tests.models import CARTPOLE_XML

model = mujoco.MjModel.from_xml_string(CARTPOLE_XML)
with distributed.setup(model, 4, num_threads=1) as dist:
  total = dist.map(lambda s, c, p: jax.lax.psum(mjbatch_jax.step(s, c, p)[:, 0].sum(), "sims"),
                   out_specs=P())
  print("total", float(total(dist.state, dist.zeros(model.nu), dist.params)), flush=True)
"""


@pytest.mark.slow
def test_a_job_run_twice_with_a_compilation_cache_finishes_both_times(tmp_path, env):
  """JAX 0.12.1 hangs a multi-process CPU program loaded from its persistent compilation cache
  in its first collective: the second run of the same job waited forever. initialize turns the
  cache off there, saying so."""
  script = tmp_path / "twice.py"
  script.write_text(TWICE)
  cached = {**env, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache")}
  runs = [run_launcher(["--peer-timeout", "5", "-n", "2", str(script)], cached, tmp_path, 60)
          for _ in range(2)]
  for out in runs:
    assert out.returncode == 0, out.stderr[-3000:]
    totals = [[line for line in lines_of(out.stdout, rank) if line.startswith("total")]
              for rank in (0, 1)]
    assert totals[0] == totals[1] and len(totals[0]) == 1, out.stdout
  version = tuple(int(p) for p in jax.__version__.split(".")[:2])
  assert ("persistent compilation cache is off" in runs[1].stderr) == (version >= (0, 11))


EARLY_LEAVER = """
import sys, time
import jax
import mujoco
from mjbatch_jax import distributed
model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><body><joint/><geom size='.1'/>"
                                       "</body></worldbody></mujoco>")
distributed.initialize()
dist = distributed.setup(model, 2 * len(jax.local_devices()), num_threads=1)
if dist.process_index == 0:
  time.sleep(float(sys.argv[1]))  # process 1 has long left, and waits in JAX's shutdown
print("done", flush=True)
"""


@pytest.mark.slow
def test_a_peer_that_left_cleanly_is_not_lost(tmp_path, env):
  """Process 1 ends its script three peer timeouts before process 0: it says so as it leaves,
  and process 0's watchdog does not take its silence for a loss."""
  script = tmp_path / "early.py"
  script.write_text(EARLY_LEAVER)
  out = run_launcher(["--peer-timeout", "2", "-n", "2", str(script), "6"], env, tmp_path)
  assert out.returncode == 0, out.stderr[-4000:]
  assert "done" in lines_of(out.stdout, 0) and "done" in lines_of(out.stdout, 1), out.stdout
  said = [line for line in out.stderr.splitlines() if "mjbatch_jax.distributed:" in line
          and "persistent compilation cache is off" not in line]  # the fixture's cache, below
  assert not said, out.stderr[-4000:]


ENDS_EARLY = COLLECTIVE_LOOP + """
  if i == 30 and dist.process_index == int(sys.argv[1]):
    sys.exit(0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("leaver", [0, 1])
def test_a_process_that_ends_early_stops_the_one_waiting_on_it(tmp_path, env, leaver):
  """Process `leaver` ends its script with status 0 in a loop of collective calls (outside a
  `with` block: no failure to report). It waits in JAX's shutdown for the other, which waits for
  it in its next call: both waited forever. The other's watchdog now stops it after the peer
  timeout, naming the one that left, and meets it in JAX's shutdown first, so that it exits
  cleanly (the coordinator's exit would abort it)."""
  script = tmp_path / "ends_early.py"
  script.write_text(ENDS_EARLY)
  begin = time.monotonic()
  out = run_launcher(["--peer-timeout", "5", "-n", "2", str(script), str(leaver)], env, tmp_path,
                     60)
  assert out.returncode == distributed.EXIT_PEER_LOST, out.stderr[-3000:]
  said = "\n".join(lines_of(out.stderr, 1 - leaver))
  assert f"stops: process {leaver} of 2" in said and "ended its script" in said, out.stderr[-3000:]
  assert f"failed: rank {1 - leaver} exited with code 75" in out.stderr, out.stderr[-3000:]
  assert time.monotonic() - begin < 45


@pytest.mark.slow
def test_resumed_training_equals_uninterrupted(tmp_path, env):
  common = [str(EXAMPLE), "--iterations", "6", "--checkpoint-every", "2",
            "--sims", "8", "--horizon", "20", "--hidden", "4"]
  whole = run_launcher(["-n", "2", *common, "--checkpoint", str(tmp_path / "a.npz"),
                        "--out", str(tmp_path / "whole.npz")], env, ROOT)
  assert whole.returncode == 0, whole.stderr[-4000:]
  crashed = run_launcher(["-n", "2", *common, "--checkpoint", str(tmp_path / "b.npz"),
                          "--crash-after", "4"], env, ROOT)
  assert crashed.returncode != 0 and "rank 1 (pid" in crashed.stderr, crashed.stderr[-4000:]
  with np.load(tmp_path / "b.npz") as checkpoint:
    assert int(checkpoint["iteration"]) == 4
  resumed = run_launcher(["-n", "2", *common, "--checkpoint", str(tmp_path / "b.npz"), "--resume",
                          "--out", str(tmp_path / "resumed.npz")], env, ROOT)
  assert resumed.returncode == 0, resumed.stderr[-4000:]
  assert "resumed from" in resumed.stdout and "iteration    5" in resumed.stdout
  with np.load(tmp_path / "whole.npz") as a, np.load(tmp_path / "resumed.npz") as b:
    assert sorted(a) == sorted(b) == ["b1", "b2", "w1", "w2"]
    for name in a:
      assert np.array_equal(a[name], b[name]), name
  # The costs printed after the resume are those of the uninterrupted run's iterations 5, 6.
  def costs(out: str) -> list[str]:
    return [line.split()[3] for line in lines_of(out, 0)
            if line.split()[:2] in (["iteration", "5"], ["iteration", "6"])]

  assert costs(whole.stdout) == costs(resumed.stdout) and len(costs(whole.stdout)) == 2


@pytest.mark.usefixtures("alone")
@pytest.mark.parametrize(("kwargs", "message"), [
  ({"num_processes": 0}, r"-n must be an int in \[1, 1024\], got 0"),
  ({"num_processes": True}, r"-n must be an int"),
  ({"num_processes": 5000}, r"-n must be an int in \[1, 1024\]"),
  ({"command": "script.py"}, r"the command must be a non-empty list of strings"),
  ({"command": []}, r"the command must be a non-empty list"),
  ({"port": 70000}, r"--port must be an int in \[1, 65535\]"),
  ({"port": "abc"}, r"--port must be an int"),
  ({"grace": float("nan")}, r"--grace must be a finite number of seconds >= 0, got nan"),
  ({"grace": "x"}, r"--grace must be"),
  ({"timeout": float("nan")}, r"--timeout must be a number of seconds in \(0, 86400\]"),
  ({"timeout": [5]}, r"--timeout must be"),
  ({"peer_timeout": 0}, r"--peer-timeout must be"),
  ({"peer_timeout": float("inf")}, r"--peer-timeout must be"),
])
def test_launch_refuses_bad_arguments_before_starting_a_rank(monkeypatch, kwargs, message):
  def no_rank(*args, **kw):
    raise AssertionError("a rank was started")

  monkeypatch.setattr(launch.subprocess, "Popen", no_rank)
  args = {"num_processes": 2, "command": ["script.py"], **kwargs}
  with pytest.raises(ValueError, match=message):
    launch.launch(args.pop("num_processes"), args.pop("command"), **args)


@pytest.mark.usefixtures("alone")
@pytest.mark.parametrize(("variables", "message"), [
  ({"MJBATCH_JAX_COORDINATOR": "127.0.0.1:99999"}, r"port in \[1, 65535\], got '127.0.0.1:99999'"),
  ({"MJBATCH_JAX_COORDINATOR": "127.0.0.1:"}, r"must be 'host:port' with a port"),
  ({"MJBATCH_JAX_COORDINATOR": "127.0.0.1:abc"}, r"must be 'host:port' with a port"),
  ({"MJBATCH_JAX_COORDINATOR": ":1234"}, r"must be 'host:port' with a port"),
  ({"MJBATCH_JAX_NUM_PROCESSES": "1_0"}, r"must be ints, got '1_0'"),
  ({"MJBATCH_JAX_PEER_TIMEOUT": "inf"}, r"MJBATCH_JAX_PEER_TIMEOUT must be a number of seconds "
                                        r"in \(0, 86400\]"),
  ({"MJBATCH_JAX_PEER_TIMEOUT": "1e300"}, r"MJBATCH_JAX_PEER_TIMEOUT must be"),
  ({"MJBATCH_JAX_START_TIMEOUT": "inf"}, r"MJBATCH_JAX_START_TIMEOUT must be a number of "
                                         r"seconds in \(0, 86400\]"),
])
def test_initialize_refuses_bad_variables_at_once(monkeypatch, variables, message):
  base = {"MJBATCH_JAX_COORDINATOR": "127.0.0.1:1234", "MJBATCH_JAX_NUM_PROCESSES": "2",
          "MJBATCH_JAX_PROCESS_ID": "1"}
  for name, value in {**base, **variables}.items():
    monkeypatch.setenv(name, value)
  with pytest.raises(ValueError, match=message):
    distributed.initialize()


def test_launcher_splits_its_options_from_the_command():
  assert launch._split(["-n", "2", "--grace", "1", "-m", "pkg.mod", "-n", "3"]) == (
    ["-n", "2", "--grace", "1"], ["-m", "pkg.mod", "-n", "3"])
  assert launch._split(["-n", "2", "run.py", "--timeout", "4"]) == (
    ["-n", "2"], ["run.py", "--timeout", "4"])


def test_exit_status_constants_agree():
  assert distributed.EXIT_PEER_LOST == launch.EXIT_PEER_LOST == 75
  assert launch.describe(-9) == "was killed by SIGKILL"
  assert launch.describe(2) == "exited with code 2"


# -- processes that never arrive ----------------------------------------------------------------

SETUP_ONLY = textwrap.dedent("""
  import os, sys
  import mujoco
  from mjbatch_jax import distributed
  from tests.models import CARTPOLE_XML
  if sys.argv[1:] == ["leave"] and os.environ.get("MJBATCH_JAX_PROCESS_ID") == "1":
    sys.exit(0)  # leaves before setup, cleanly
  distributed.setup(mujoco.MjModel.from_xml_string(CARTPOLE_XML), 4, num_threads=1)
  print("set up")
""")


def test_a_process_that_never_arrives_is_named_with_status_75(env):
  """Process 1 of a job never starts, and (another job) process 0 never does: the one that
  started stops within MJBATCH_JAX_START_TIMEOUT with PeerLostError naming the missing one and
  status 75, where JAX alone aborts it after a minute with a C++ "Check failure"."""
  runs = {}
  for me in (0, 1):
    job = {**env, "MJBATCH_JAX_START_TIMEOUT": "3", "MJBATCH_JAX_NUM_PROCESSES": "2",
           "MJBATCH_JAX_PROCESS_ID": str(me),
           "MJBATCH_JAX_COORDINATOR": f"127.0.0.1:{launch.free_port()}"}
    runs[me] = subprocess.Popen([sys.executable, "-c", SETUP_ONLY], env=job, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  outs = {me: proc.communicate(timeout=90) for me, proc in runs.items()}
  for me, proc in runs.items():
    assert proc.returncode == distributed.EXIT_PEER_LOST, outs[me][1][-3000:]
    assert "PeerLostError" in outs[me][1] and "Check failure" not in outs[me][1]
  assert "process 1 of 2 never arrived at the coordinator" in outs[0][1], outs[0][1][-2000:]
  assert "process 0 never answered at the coordinator" in outs[1][1], outs[1][1][-2000:]


def test_a_coordinator_host_that_does_not_resolve_is_named_at_once(env):
  """A 1-process job (no handshake) whose coordinator's host does not resolve: a ValueError
  naming the host before JAX's runtime starts, where JAX retried the name until the start
  timeout and the process then blamed a missing process."""
  code = textwrap.dedent("""
    import time
    from mjbatch_jax import distributed
    begin = time.monotonic()
    try:
      distributed.initialize()
    except ValueError as e:
      print(f"{time.monotonic() - begin:.3f} {e}")
  """)
  job = {**env, "MJBATCH_JAX_START_TIMEOUT": "10", "MJBATCH_JAX_NUM_PROCESSES": "1",
         "MJBATCH_JAX_PROCESS_ID": "0", "MJBATCH_JAX_COORDINATOR": "no-such-host.invalid:1234"}
  done = subprocess.run([sys.executable, "-c", code], env=job, cwd=ROOT, capture_output=True,
                        text=True, timeout=90)
  assert done.returncode == 0, done.stderr[-3000:]
  seconds, message = done.stdout.split(" ", 1)
  assert "the coordinator's host 'no-such-host.invalid'" in message, message
  assert "does not resolve" in message and float(seconds) < 5  # the start timeout: 10 s


@pytest.mark.slow
def test_a_process_that_leaves_before_setup_is_named(tmp_path, env):
  script = tmp_path / "leave.py"
  script.write_text(SETUP_ONLY)
  out = run_launcher(["-n", "2", str(script), "leave"],
                     {**env, "MJBATCH_JAX_START_TIMEOUT": "5"}, tmp_path)
  survivor = "\n".join(lines_of(out.stderr, 0))
  assert "PeerLostError" in survivor and "process 1 of 2 never arrived" in survivor, out.stderr
  assert "exited with code 75" in out.stderr, out.stderr[-3000:]
