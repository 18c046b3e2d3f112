"""The pure JAX functions against plain MuJoCo: step, rollout, forward under jit, scan and vmap."""

import subprocess
import sys
import textwrap
import threading

import jax
import jax.numpy as jnp
import mujoco
import mujoco.rollout
import numpy as np
import pytest
from mujoco import batch as mujoco_batch

import mjbatch_jax
from mjbatch_jax._extension import ext
from tests import models
from tests.models import FREEBALL_XML as TOY
from tests.models import G1, GO1, requires_models
from tests.models import SMOOTH_CARTPOLE as CARTPOLE

jax.config.update("jax_enable_x64", True)

N = 4
NCALL = 100


def perturbed_params(sim, rng):
  """Per-simulation mass, friction, gravity and timestep, all different."""
  params = sim.params(N, ("body_mass", "geom_friction", "opt.gravity", "opt.timestep"))
  scale = rng.uniform(0.8, 1.2, (N, 1))
  return params.replace({
    "body_mass": params["body_mass"] * scale,
    "geom_friction": params["geom_friction"] * rng.uniform(0.5, 1.5, (N, 1, 1)),
    "opt.gravity": params["opt.gravity"] * rng.uniform(0.9, 1.1, (N, 1)),
    "opt.timestep": params["opt.timestep"] * rng.uniform(0.8, 1.0, N),
  })


def start_state(sim, model, rng):
  key = 0 if model.nkey else None
  state = np.array(sim.init_state(N, keyframe=key))
  state[:, sim.layout.qvel] += rng.normal(0, 0.05, (N, model.nv))
  return jnp.asarray(state)


@pytest.mark.parametrize("nstep", [1, 4])
@pytest.mark.parametrize("which", ["g1", "go1", "cartpole", "toy"])
def test_jit_scan_is_bit_exact_with_mj_step(which, nstep):
  source = {"g1": G1, "go1": GO1, "cartpole": CARTPOLE, "toy": TOY}[which]
  model = models.load(source)
  rng = np.random.default_rng(0)
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    state = start_state(sim, model, rng)
    params = perturbed_params(sim, rng)
    base = model.key_ctrl[0] if model.nkey else np.zeros(model.nu)
    ctrls = jnp.asarray(base + rng.uniform(-0.3, 0.3, (NCALL, N, model.nu)))

    @jax.jit
    def run(state, ctrls, params):
      def body(state, ctrl):
        state = mjbatch_jax.step(state, ctrl, params, nstep=nstep)
        return state, state

      return jax.lax.scan(body, state, ctrls)[1]

    rows = np.asarray(run(state, ctrls, params))  # (NCALL, N, nstate)
  assert rows.dtype == np.float64
  for i in range(N):
    values = {name: np.asarray(params[name][i]) for name in params}
    ref_model = models.with_params(model, values)
    start, calls = np.asarray(state[i]), np.asarray(ctrls[:, i])
    want = models.reference_steps(ref_model, start, calls, nstep)
    np.testing.assert_array_equal(rows[:, i], want, err_msg=f"sim {i}")
  # The parameters mattered: the simulations went apart.
  assert not np.array_equal(rows[-1, 0], rows[-1, 1])


@pytest.mark.parametrize("source", [CARTPOLE, GO1], ids=["cartpole", "go1"])
def test_rollout_equals_steps_and_mujoco_rollout(source):
  model = models.load(source)
  rng = np.random.default_rng(1)
  nknot = 30
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    state = start_state(sim, model, rng)
    params = sim.params(N)
    base = model.key_ctrl[0] if model.nkey else np.zeros(model.nu)
    ctrls = jnp.asarray(base + rng.uniform(-0.3, 0.3, (N, nknot, model.nu)))
    states, sensordata = jax.jit(mjbatch_jax.rollout)(state, ctrls, params)
    assert states.shape == (N, nknot, sim.nstate)
    assert sensordata.shape == (N, nknot, model.nsensordata)

    stepped = state
    for t in range(nknot):
      stepped = mjbatch_jax.step(stepped, ctrls[:, t], params)
      np.testing.assert_array_equal(states[:, t], stepped, err_msg=f"knot {t}")

    # MuJoCo's own rollout records mjSTATE_FULLPHYSICS and takes the warm start apart.
    layout = sim.layout
    physics = ["time", "qpos", "qvel", "act", "history", "plugin_state", "plastic"]
    full = mujoco.mjtState.mjSTATE_FULLPHYSICS
    initial = np.concatenate([np.asarray(state[:, getattr(layout, c)]) for c in physics], axis=1)
    assert initial.shape[1] == mujoco.mj_stateSize(model, full)
    ref_states, ref_sensordata = mujoco.rollout.rollout(
      model, mujoco.MjData(model), initial, np.asarray(ctrls),
      initial_warmstart=np.asarray(state[:, layout.qacc_warmstart]),
    )
    ours = np.concatenate([np.asarray(states[..., getattr(layout, c)]) for c in physics], axis=2)
    np.testing.assert_array_equal(ours, ref_states)
    np.testing.assert_array_equal(sensordata, ref_sensordata)


def test_design_card_call_and_vmap_make_one_handler_call():
  model = models.load(CARTPOLE)
  with mjbatch_jax.Simulator(model) as sim:
    state = sim.init_state(N)
    ctrl = jnp.ones((N, sim.nu))
    params = sim.params(N, fields=("body_mass",))
    # The call as the design card writes it.
    next_state = jax.jit(mjbatch_jax.step)(state, ctrl, params)
    assert next_state.shape == (N, sim.nstate)

    batched = jnp.stack([state, next_state, state])  # (3, N, nstate)
    stepped = jax.jit(jax.vmap(mjbatch_jax.step, in_axes=(0, None, None)))
    stepped(batched, ctrl, params).block_until_ready()  # compile outside the count
    before = ext.handler_calls()["mjbatch_jax_step"]
    out = stepped(batched, ctrl, params).block_until_ready()
    assert ext.handler_calls()["mjbatch_jax_step"] - before == 1
    for k in range(3):
      np.testing.assert_array_equal(out[k], mjbatch_jax.step(batched[k], ctrl, params))

    # Nested vmap, over params too: still one call.
    twice = jax.jit(jax.vmap(jax.vmap(mjbatch_jax.step, in_axes=(0, None, None)),
                             in_axes=(None, None, 0)))
    masses = jax.tree_util.tree_map(lambda x: jnp.stack([x, 2 * x]), params)
    twice(batched, ctrl, masses).block_until_ready()
    before = ext.handler_calls()["mjbatch_jax_step"]
    out = twice(batched, ctrl, masses).block_until_ready()
    assert ext.handler_calls()["mjbatch_jax_step"] - before == 1
    assert out.shape == (2, 3, N, sim.nstate)
    heavy = params.replace({"body_mass": 2 * params["body_mass"]})
    np.testing.assert_array_equal(out[1, 2], mjbatch_jax.step(batched[2], ctrl, heavy))


def test_forward_matches_mj_forward():
  model = models.load(TOY)
  rng = np.random.default_rng(2)
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    state = start_state(sim, model, rng)
    params = perturbed_params(sim, rng)
    fields = ("xpos", "site_xpos", "sensordata", "qacc", "actuator_force")
    out = jax.jit(mjbatch_jax.forward, static_argnums=2)(state, params, fields)
  for i in range(N):
    values = {name: np.asarray(params[name][i]) for name in params}
    m = models.with_params(model, values)
    d = mujoco.MjData(m)
    mujoco.mj_setState(m, d, np.asarray(state[i]), mujoco.mjtState.mjSTATE_INTEGRATION)
    mujoco.mj_forward(m, d)
    for name in fields:
      np.testing.assert_array_equal(out[name][i], getattr(d, name), err_msg=name)


def test_float32_without_x64_is_the_float64_path_rounded():
  model = models.load(CARTPOLE)
  rng = np.random.default_rng(3)
  with mjbatch_jax.Simulator(model) as sim:
    state64 = np.array(sim.init_state(N))
    state64[:, sim.layout.qpos] = rng.uniform(-0.5, 0.5, (N, model.nq))
    state64[:, sim.layout.qvel] = rng.uniform(-0.5, 0.5, (N, model.nv))
    # The float32 path starts from the rounded rows; so does the reference.
    state64 = state64.astype(np.float32).astype(np.float64)
    ctrl = rng.uniform(-1, 1, (N, model.nu))
    want = np.asarray(mjbatch_jax.step(jnp.asarray(state64), jnp.asarray(ctrl),
                                       sim.params(N), nstep=5))
    with jax.enable_x64(False):
      state32 = sim.init_state(N)
      assert state32.dtype == jnp.float32
      params32 = sim.params(N, ("body_mass",))
      assert params32["body_mass"].dtype == jnp.float32
      got = jax.jit(lambda s, c, p: mjbatch_jax.step(s, c, p, nstep=5))(
        jnp.asarray(state64, jnp.float32), jnp.asarray(ctrl, jnp.float32), params32
      )
      assert got.dtype == jnp.float32
      got = np.asarray(got)
  np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-5, atol=1e-6)


def test_concurrent_threads_on_one_simulator_match_serial():
  model = models.load(GO1)
  rng = np.random.default_rng(4)
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    state = sim.init_state(N, keyframe="home")
    params = sim.params(N)
    ctrls = [jnp.asarray(model.key_ctrl[0] + rng.uniform(-0.3, 0.3, (N, model.nu)))
             for _ in range(3)]
    run = jax.jit(lambda s, c, p: jax.lax.fori_loop(
      0, 20, lambda _, s: mjbatch_jax.step(s, c, p), s))
    serial = [np.asarray(run(state, c, params)) for c in ctrls]
    results = [None] * 3

    def work(k):
      for _ in range(3):
        results[k] = np.asarray(run(state, ctrls[k], params))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
  for k in range(3):
    np.testing.assert_array_equal(results[k], serial[k])


@requires_models
def test_shard_map_over_two_cpu_devices_equals_one_device():
  script = textwrap.dedent(f"""
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    import mujoco
    import mjbatch_jax
    from jax.sharding import Mesh, PartitionSpec as P
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:
      from jax.experimental.shard_map import shard_map
    assert len(jax.devices()) == 2, jax.devices()
    model = mujoco.MjModel.from_xml_path({str(GO1)!r})
    sim = mjbatch_jax.Simulator(model, num_threads=1)
    n = 8
    state = sim.init_state(n, keyframe="home")
    rng = np.random.default_rng(0)
    ctrl = jnp.asarray(model.key_ctrl[0] + rng.uniform(-0.3, 0.3, (n, model.nu)))
    params = sim.params(n, ("body_mass",))
    scale = (1 + 0.05 * jnp.arange(n))[:, None]
    params = params.replace({{"body_mass": params["body_mass"] * scale}})
    def run(s, c, p):
      return jax.lax.fori_loop(0, 10, lambda _, s: mjbatch_jax.step(s, c, p), s)
    mesh = Mesh(np.array(jax.devices()), ("sims",))
    sharded = jax.jit(shard_map(run, mesh=mesh, in_specs=(P("sims"), P("sims"), P("sims")),
                                out_specs=P("sims")))
    before = mjbatch_jax._extension.ext.handler_calls()["mjbatch_jax_step"]
    two = np.asarray(sharded(state, ctrl, params))
    calls = mjbatch_jax._extension.ext.handler_calls()["mjbatch_jax_step"] - before
    one = np.asarray(jax.jit(run)(state, ctrl, params))
    assert np.array_equal(two, one), "sharded result differs"
    assert calls == 20, calls  # 10 steps on each of the 2 devices
    print("OK")
  """)
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "OK" in out.stdout


def test_bad_inputs_raise_before_the_call():
  model = models.load(CARTPOLE)
  sim = mjbatch_jax.Simulator(model)
  state, ctrl, params = sim.init_state(N), jnp.zeros((N, model.nu)), sim.params(N)
  before = ext.handler_calls()["mjbatch_jax_step"]
  with pytest.raises(ValueError, match="nstate"):
    mjbatch_jax.step(state[:, :-1], ctrl, params)
  with pytest.raises(ValueError, match="ctrl must have shape"):
    mjbatch_jax.step(state, jnp.zeros((N, model.nu + 1)), params)
  with pytest.raises(ValueError, match="float32 or float64"):
    mjbatch_jax.step(state.astype(jnp.int32), ctrl, params)
  with pytest.raises(ValueError, match="params must come from"):
    mjbatch_jax.step(state, ctrl, {"body_mass": 1.0})  # pyright: ignore[reportArgumentType]
  with pytest.raises(ValueError, match="nstep"):
    mjbatch_jax.step(state, ctrl, params, nstep=0)
  with pytest.raises(ValueError, match="body_masss"):
    sim.params(N, ("body_masss",))
  with pytest.raises(ValueError, match="geom_rgba"):
    sim.params(N, ("geom_rgba",))  # float32, not mjtNum
  with pytest.raises(ValueError, match="num_sims"):
    sim.params(0)
  with pytest.raises(ValueError, match="keyframe"):
    sim.init_state(N, keyframe=3)
  mass = sim.params(N + 1, ("body_mass",))
  with pytest.raises(ValueError, match="match state"):
    mjbatch_jax.step(state, ctrl, mass)  # mismatched N
  with pytest.raises(ValueError, match="ctrls must have shape"):
    mjbatch_jax.rollout(state, jnp.zeros((N + 1, 5, model.nu)), params)
  with pytest.raises(ValueError, match="qfrc_inverse_x"):
    mjbatch_jax.forward(state, params, ("qfrc_inverse_x",))
  with pytest.raises(ValueError, match="efc_force"):
    mjbatch_jax.forward(state, params, ("efc_force",))  # arena field, size varies
  assert ext.handler_calls()["mjbatch_jax_step"] == before

  jitted = jax.jit(mjbatch_jax.step)
  jitted(state, ctrl, params)
  sim.close()
  with pytest.raises(ValueError, match="closed"):
    mjbatch_jax.step(state, ctrl, params)
  with pytest.raises(ValueError, match="closed"):
    sim.init_state(N)
  # A function traced before close() finds the engine gone, and says so.
  with pytest.raises(Exception, match="closed"):
    jitted(state, ctrl, params).block_until_ready()


PILE = """
<mujoco>
  <size memory="100K"/>
  <worldbody>
    <geom type="plane" size="5 5 .1"/>
    {bodies}
  </worldbody>
</mujoco>
"""


def test_mujoco_error_names_the_sim_and_keeps_the_others():
  # Twelve balls apart are fine; piled up, their contacts overflow the small arena, which is a
  # MuJoCo error (mj_stackAlloc) in that simulation alone.
  bodies = "".join(
    f'<body pos="{i % 4} {i // 4} 1"><freejoint/><geom size=".1" mass="1"/></body>'
    for i in range(12)
  )
  model = mujoco.MjModel.from_xml_string(PILE.format(bodies=bodies))
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    state = np.array(sim.init_state(N))
    piled = state[2].copy()
    for b in range(12):
      piled[sim.layout.qpos][7 * b : 7 * b + 3] = [0.05 * b, 0, 0.1 + 0.01 * b]
    state[2] = piled
    ctrl = jnp.zeros((N, 0))
    params = sim.params(N)
    with pytest.raises(mjbatch_jax.SimulationError, match="sim 2: mj_stackAlloc"):
      mjbatch_jax.step(jnp.asarray(state), ctrl, params)
    jitted = jax.jit(lambda s: mjbatch_jax.step(s, ctrl, params, nstep=2))
    with pytest.raises(mjbatch_jax.SimulationError, match="sim 2"):
      with mjbatch_jax.simulation_errors():
        jitted(jnp.asarray(state)).block_until_ready()
    # The others are unaffected: their rows are those of a run without the failing one.
    fine = np.delete(state, 2, axis=0)
    ok = np.asarray(mjbatch_jax.step(jnp.asarray(fine), jnp.zeros((N - 1, 0)), sim.params(N - 1)))
    for j, i in enumerate([0, 1, 3]):
      d = mujoco.MjData(model)
      mujoco.mj_setState(model, d, state[i], mujoco.mjtState.mjSTATE_INTEGRATION)
      mujoco.mj_step(model, d)
      np.testing.assert_array_equal(ok[j], models.row(model, d))


def test_warnings_are_counted_per_sim():
  model = models.load(CARTPOLE)
  with mjbatch_jax.Simulator(model) as sim:
    state = np.array(sim.init_state(N))
    state[1, sim.layout.qpos] = np.nan  # MuJoCo warns and resets this simulation
    new, warnings = mjbatch_jax.step(jnp.asarray(state), jnp.zeros((N, 1)), sim.params(N),
                                     return_warnings=True)
  assert warnings.shape == (N, mjbatch_jax.NWARNING)
  bad = int(mujoco.mjtWarning.mjWARN_BADQPOS)
  np.testing.assert_array_equal(warnings[:, bad], [0, 1, 0, 0])
  assert np.isfinite(np.asarray(new)).all()


def test_layout_matches_mujoco_batch_components():
  model = models.load(TOY)
  sim = mjbatch_jax.Simulator(model)
  batch = mujoco_batch.Batch(model, 1, 1)
  for name in sim.layout.names():
    bit = {"qacc_warmstart": "WARMSTART", "plugin_state": "PLUGIN"}.get(name, name.upper())
    offset, size = batch._b.state_component(int(getattr(mujoco.mjtState, f"mjSTATE_{bit}")))
    part = getattr(sim.layout, name)
    assert (part.start, part.stop - part.start) == (offset, size), name
  sim.close()


def test_calls_larger_than_a_batch_go_through_in_chunks():
  # With one thread a batch holds kRowsPerThread = 256 rows; 600 simulations take three chunks.
  model = models.load(TOY)
  n = 600
  rng = np.random.default_rng(5)
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    state = sim.init_state(n).at[:, sim.layout.qvel].set(rng.normal(0, 0.3, (n, model.nv)))
    params = sim.params(n, ("opt.gravity",))
    gravity = params["opt.gravity"].at[:, 2].set(jnp.linspace(-12, -2, n))
    params = params.replace({"opt.gravity": gravity})
    ctrl = jnp.asarray(rng.uniform(-1, 1, (n, model.nu)))
    stepped = np.asarray(mjbatch_jax.step(state, ctrl, params, nstep=3))
    states, _ = mjbatch_jax.rollout(state, ctrl[:, None], params, nstep=3)
    np.testing.assert_array_equal(states[:, 0], stepped)
    xpos = mjbatch_jax.forward(state, params, ("xpos",))["xpos"]
  for i in (0, 255, 256, 300, 511, 512, 599):
    m = models.with_params(model, {"opt.gravity": np.asarray(gravity[i])})
    want = models.reference_steps(m, np.asarray(state[i]), np.asarray(ctrl[i : i + 1]), 3)
    np.testing.assert_array_equal(stepped[i], want[0], err_msg=f"sim {i}")
    d = mujoco.MjData(m)
    mujoco.mj_setState(m, d, np.asarray(state[i]), mujoco.mjtState.mjSTATE_INTEGRATION)
    mujoco.mj_forward(m, d)
    np.testing.assert_array_equal(xpos[i], d.xpos, err_msg=f"sim {i}")


def test_error_in_a_later_chunk_names_the_sim_by_its_row():
  bodies = "".join(
    f'<body pos="{i % 4} {i // 4} 1"><freejoint/><geom size=".1" mass="1"/></body>'
    for i in range(12)
  )
  model = mujoco.MjModel.from_xml_string(PILE.format(bodies=bodies))
  n = 300
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    state = np.array(sim.init_state(n))
    for b in range(12):
      state[270, sim.layout.qpos][7 * b : 7 * b + 3] = [0.05 * b, 0, 0.1 + 0.01 * b]
    with pytest.raises(mjbatch_jax.SimulationError, match="sim 270: mj_stackAlloc"):
      mjbatch_jax.step(jnp.asarray(state), jnp.zeros((n, 0)), sim.params(n))


_JAX_PEAK = """
import sys
import jax
jax.config.update("jax_enable_x64", True)
import mujoco
import mjbatch_jax
model = mujoco.MjModel.from_xml_path(sys.argv[1])
n = int(sys.argv[2])
sim = mjbatch_jax.Simulator(model, num_threads=2)
state = sim.init_state(n)
params = sim.params(n)
ctrl = jax.numpy.zeros((n, model.nu))
# The caller donates the state: the new rows take the old rows' buffer.
jax.block_until_ready(jax.jit(mjbatch_jax.step, donate_argnums=0)(state, ctrl, params))
# VmHWM, not ru_maxrss: Linux carries the parent's ru_maxrss into a child across fork and exec.
print(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])  # KiB
"""


@requires_models
@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_jax_path_memory_follows_threads_not_sims():
  def peak_kib(n):
    out = subprocess.run([sys.executable, "-c", _JAX_PEAK, str(G1), str(n)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return int(out.stdout.split()[-1])

  grew_mb = (peak_kib(4096) - peak_kib(16)) / 1024
  rows_mb = 4096 * mujoco.mj_stateSize(models.load(G1), mujoco.mjtState.mjSTATE_INTEGRATION) * 8
  print(f"\nJAX path, G1: peak RSS grows {grew_mb:.1f} MB from 16 to 4096 simulations "
        f"(the rows alone: {rows_mb / 2**20:.1f} MB)")
  # The rows themselves (donated, so held once) plus a batch chunk per thread, not one per sim.
  assert grew_mb < 32, f"4096 G1 simulations take {grew_mb:.1f} MB more than 16"


def test_rows_pass_between_batch_and_jax_without_conversion():
  model = models.load(GO1)
  rng = np.random.default_rng(6)
  batch = mjbatch_jax.Batch(model, N, num_threads=2)
  batch.reset(keyframe=0)
  ctrl = model.key_ctrl[0] + rng.uniform(-0.3, 0.3, (N, model.nu))
  batch.bind("ctrl")[:] = ctrl
  batch.step(nstep=2)
  with mjbatch_jax.Simulator(model, num_threads=2) as sim:
    rows = batch.to_jax()
    stepped = mjbatch_jax.step(rows, jnp.asarray(ctrl), sim.params(N), nstep=3)
  batch.step(nstep=3)
  np.testing.assert_array_equal(np.asarray(stepped), batch.bind("state"))
  batch.from_jax(rows)  # and back: the Batch continues from the JAX rows
  np.testing.assert_array_equal(batch.bind("state"), np.asarray(rows))
  batch.close()
