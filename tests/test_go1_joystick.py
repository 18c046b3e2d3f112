"""The Go1 joystick task (examples/go1_joystick.py): its env against plain MuJoCo, its wrappers'
randomisation and resets, and a tiny training, --play and refusals through its command line.

The env tests need only mjbatch_jax; the training ones need Brax (`pip install -e '.[rl]'`) and
run in the `rl` leg of .ci/run.
"""

import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from tests.models import GO1, MODELS_MISSING

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "go1_joystick.py"
BRAX_MISSING = "Brax is not installed: `pip install -e '.[rl]'` (brax 0.14) trains the Go1"
TINY = ["--num-envs", "8", "--unroll", "4", "--iterations", "4", "--eval-every", "2",
        "--episode-length", "20", "--minibatches", "2", "--threads", "1"]

pytestmark = pytest.mark.skipif(not GO1.exists(), reason=MODELS_MISSING)


@pytest.fixture(scope="module")
def go1():
  sys.path.insert(0, str(EXAMPLE.parent))
  try:
    import go1_joystick  # pyright: ignore[reportMissingImports]  (as the examples do)
  finally:
    sys.path.remove(str(EXAMPLE.parent))
  return go1_joystick


@pytest.fixture(scope="module")
def env(go1):
  env = go1.Joystick(GO1, num_threads=1)
  yield env
  env.close()


def test_step_is_plain_mujoco_on_the_task_model(go1):
  with jax.enable_x64(True):  # float64 rows: bit for bit (float32 rows round each call's result)
    env = go1.Joystick(GO1, num_threads=1)
    try:
      check_step(env)
    finally:
      env.close()


def check_step(env):
  model = env.mj_model
  assert model.opt.timestep == 0.004 and env.n_substeps == 5 and env.dt == pytest.approx(0.02)
  np.testing.assert_array_equal(model.actuator_gainprm[:, 0], 35.0)
  np.testing.assert_array_equal(model.actuator_biasprm[:, 1:3], [[-35.0, -0.5]] * 12)
  menagerie = mujoco.MjModel.from_xml_path(str(GO1))
  np.testing.assert_allclose(model.dof_armature[6:] - menagerie.dof_armature[6:], 0.000111842)

  state = env.reset(jax.random.PRNGKey(0))
  assert state.obs.shape == (50,) and env.action_size == 12 and env.observation_size == 50
  action = jnp.linspace(-1.0, 1.0, 12)
  new = env.step(state, action)
  # The same substeps in plain MuJoCo from the same row: bit for bit, feet as mj_step leaves them.
  data = mujoco.MjData(model)
  mujoco.mj_setState(model, data, np.asarray(state.data.row, np.float64),
                     mujoco.mjtState.mjSTATE_INTEGRATION)
  home = model.key("home").qpos[7:]
  ctrl = np.asarray(new.data.ctrl, np.float64)  # as the row holds it (float32 without x64)
  np.testing.assert_allclose(ctrl, home + 0.3 * np.asarray(action), atol=1e-6)
  data.ctrl[:] = ctrl
  for _ in range(5):
    mujoco.mj_step(model, data)
  row = np.empty(env.sim.nstate)
  mujoco.mj_getState(model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
  dtype = np.asarray(new.data.row).dtype
  np.testing.assert_array_equal(np.asarray(new.data.row), row.astype(dtype))
  np.testing.assert_array_equal(np.asarray(new.data.site_xpos), data.site_xpos.astype(dtype))
  # The observation: base velocity and gravity in the base frame (of the new qpos), the rest.
  inverse, velocity, gravity = np.empty(4), np.empty(3), np.empty(3)
  mujoco.mju_negQuat(inverse, data.qpos[3:7])
  mujoco.mju_rotVecQuat(velocity, data.qvel[:3], inverse)
  mujoco.mju_rotVecQuat(gravity, np.array([0.0, 0.0, -1.0]), inverse)
  obs = np.asarray(new.obs)
  np.testing.assert_allclose(obs[:3], velocity, atol=1e-12)
  np.testing.assert_array_equal(obs[3:6], data.qvel[3:6])
  np.testing.assert_allclose(obs[6:9], gravity, atol=1e-12)
  np.testing.assert_allclose(obs[9:21], data.qpos[7:] - home, atol=1e-12)
  np.testing.assert_array_equal(obs[21:33], data.qvel[6:])
  np.testing.assert_array_equal(obs[33:45], np.asarray(action))  # the last action
  np.testing.assert_array_equal(obs[45:48], np.asarray(state.info["command"]))
  phase = 2 * np.pi * 2.0 * 0.02
  np.testing.assert_allclose(obs[48:], [np.sin(phase), np.cos(phase)], atol=1e-12)
  scales = env.config["reward"]["scales"]
  assert set(new.metrics) >= {f"reward/{name}" for name in scales}
  # Standing at home: no pose cost, upright, not done.
  assert float(state.metrics["reward/pose"]) == 0.0 and float(new.done) == 0.0
  assert np.isfinite(float(new.reward))


def test_gait_term_rewards_the_trot_clock(env):
  # Feet at the heights the clock asks for, touching down exactly when in stance: the full term.
  step = jnp.asarray(7)
  phase = np.asarray(env.clock(step)) + np.array([0, np.pi, np.pi, 0])
  height = 0.06 * np.maximum(np.sin(phase), 0.0)
  feet_z = jnp.asarray(height + env._foot_radius, jnp.float32)
  assert float(env._reward_gait(step, feet_z)) == pytest.approx(1.0, abs=1e-3)
  # The pairs out of step (FR with FL): less than half of it.
  wrong = jnp.asarray(height[[1, 0, 3, 2]] + env._foot_radius, jnp.float32)
  assert float(env._reward_gait(step, wrong)) < 0.5


def test_friction_and_commands_are_redrawn_every_5_s(go1, env):
  from mjbatch_jax import envs

  n = 4
  wrapped = envs.wrap_for_brax_training(env, episode_length=1000,
                                        randomization_fn=env.randomize,
                                        randomization_period=env.friction_period)
  assert env.friction_period == 250
  state = jax.jit(wrapped.reset)(jax.random.split(jax.random.PRNGKey(1), n))
  ground = env._ground
  friction = np.asarray(state.data.params["geom_friction"])
  first = friction[:, ground, 0]
  assert np.all((first >= 0.4) & (first <= 1.0)) and len(set(first[:, 0].tolist())) == n
  assert np.all(first == first[:, :1])  # the floor and the four feet: one draw
  others = np.setdiff1d(np.arange(env.mj_model.ngeom), ground)
  np.testing.assert_array_equal(friction[:, others], np.broadcast_to(
    env.mj_model.geom_friction[others].astype(friction.dtype), (n, len(others), 3)))

  @jax.jit
  def run(state):
    def one(state, _):
      state = wrapped.step(state, jnp.zeros((n, 12)))
      return state, (state.data.params["geom_friction"][:, ground[0], 0], state.info["command"],
                     state.done)
    return jax.lax.scan(one, state, None, length=251)

  _, (floor, command, done) = run(state)
  assert not np.any(done)  # standing still at home
  floor, command = np.asarray(floor), np.asarray(command)
  assert np.all(floor[:249] == first[:, 0]) and np.all(floor[249] != first[:, 0])
  assert np.all(command[:248] == command[0]) and np.all(command[249] != command[0])
  low, high = env.config["command_low"], env.config["command_high"]
  assert np.all((command >= low) & (command <= high))


def test_nan_action_ends_the_episode_and_resets(env):
  from mjbatch_jax import envs

  wrapped = envs.wrap_for_brax_training(env, episode_length=1000)
  first = jax.jit(wrapped.reset)(jax.random.split(jax.random.PRNGKey(2), 3))
  action = jnp.zeros((3, 12)).at[1].set(jnp.nan)
  new = jax.jit(wrapped.step)(first, action)
  np.testing.assert_array_equal(np.asarray(new.done), [0.0, 1.0, 0.0])
  np.testing.assert_array_equal(np.asarray(new.data.row[1]), np.asarray(first.data.row[1]))
  assert np.all(np.isfinite(np.asarray(new.obs))) and np.all(np.isfinite(np.asarray(new.reward)))
  assert np.all(np.isfinite(np.asarray(new.info["last_action"])))  # the next obs' last action
  with pytest.raises(ValueError, match="shape"):
    wrapped.step(first, jnp.zeros((3, 11)))


def run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
  return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True,
                        timeout=timeout, cwd=ROOT)


def test_tiny_training_resume_and_play(tmp_path):
  pytest.importorskip("brax.training.agents.ppo.train", reason=BRAX_MISSING)
  policy = tmp_path / "go1.npz"
  done = run(*TINY, "--out", str(policy))
  assert done.returncode == 0, done.stdout + done.stderr[-3000:]
  assert "iter    2:" in done.stdout and "iter    4:" in done.stdout, done.stdout
  summary = json.loads((tmp_path / "go1.json").read_text())
  assert summary["num_envs"] == 8 and summary["unroll"] == 4 and summary["iterations"] == 4
  assert summary["env_steps"] == 8 * 4 * 4 and summary["threads"] == 1
  assert summary["wall_s"] > 0 and np.isfinite(summary["final_velocity_error"])
  assert 0 <= summary["falls"] <= 16 and "time_to_walk_s" in summary
  assert (tmp_path / "go1_curve.png").is_file()

  # --resume goes on from the checkpoint: its iterations, its clock, its networks.
  before = dict(np.load(policy))
  done = run(*TINY, "--iterations", "6", "--resume", "--out", str(policy))
  assert done.returncode == 0, done.stdout + done.stderr[-3000:]
  assert "iter    6:" in done.stdout and "iter    2:" not in done.stdout, done.stdout
  after = dict(np.load(policy))
  meta = json.loads(str(after["__meta__"]))
  assert [row["iteration"] for row in meta["curve"]] == [2, 4, 6]
  assert meta["curve"][2]["wall_s"] > meta["curve"][1]["wall_s"]
  changed = [k for k in before if k != "__meta__" and not np.array_equal(before[k], after[k])]
  assert changed, "resuming trained nothing"

  played = run("--play", "--play-seconds", "1.5", "--out", str(policy))
  assert played.returncode == 0, played.stderr[-3000:]
  assert "mean forward-velocity error:" in played.stdout and "falls:" in played.stdout
  assert "check: " in played.stdout and "policy of iteration 6" in played.stdout
  assert (tmp_path / "go1_play.png").is_file()


@pytest.mark.slow  # nine runs of the example's command line in child processes
def test_refusals(tmp_path):
  cases = [
    (["--play", "--command", "1.5"], "outside the trained range [0.0, 1.0]"),
    (["--play", "--command", "-0.2"], "outside the trained range"),
    (["--num-envs", "10", "--minibatches", "4"], "--num-envs 10 must be a multiple of"),
    (["--iterations", "5", "--eval-every", "2"], "must be a multiple of --eval-every"),
    (["--num-envs", "0"], "must be an integer in [1,"),
    (["--out", str(tmp_path / "policy.pt")], "--out must name an .npz file"),
    (["--play", "--resume"], "give one of them"),
    (["--play", "--out", str(tmp_path / "missing.npz")], "no checkpoint at"),
    (["--resume", "--out", str(tmp_path / "missing.npz"), *TINY], "no checkpoint at"),
  ]
  foreign = tmp_path / "foreign.npz"
  np.savez(foreign, __meta__=np.array(json.dumps({"format": "something else"})))
  cases.append((["--play", "--out", str(foreign)],
                "not a valid checkpoint of mjbatch_jax.agents.ppo"))
  for args, message in cases:
    if "no checkpoint at" in message and "--resume" in args:
      pytest.importorskip("brax.training.agents.ppo.train", reason=BRAX_MISSING)
    done = run(*args, timeout=600)
    assert done.returncode == 2 and message in done.stderr, (args, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr


# -- the feet-only model (--collisions feet) -----------------------------------------------------

FEET_CONFIG = {"collisions": "feet"}
# What feet_only changes, besides the options: which geoms collide, and what MuJoCo derives from
# that alone (the bodies' collision masks and the bounding-volume trees of colliding geoms).
COLLISION_FIELDS = {"geom_contype", "geom_conaffinity", "body_contype", "body_conaffinity",
                    "body_bvhadr", "body_bvhnum", "bvh_aabb", "bvh_child", "bvh_depth",
                    "bvh_nodeid"}


def colliding(model, data):
  return {tuple(sorted((model.geom(int(c.geom[0])).name, model.geom(int(c.geom[1])).name)))
          for c in data.contact[:data.ncon]}


def test_feet_model_collides_the_feet_with_the_floor_alone(go1):
  config = go1.default_config()
  assert config["collisions"] == "full"
  full = go1.go1_model(GO1, config)
  feet = go1.go1_model(GO1, {**config, **FEET_CONFIG})
  # Statically: no explicit pairs, and of the geoms that may collide, only floor-foot pairs match.
  assert feet.npair == 0 and feet.nexclude == 0
  may = [g for g in range(feet.ngeom) if feet.geom_contype[g] or feet.geom_conaffinity[g]]
  assert sorted(feet.geom(g).name for g in may) == sorted(["floor", *go1.FEET])
  for n, i in enumerate(may):
    for j in may[n + 1:]:
      match = (feet.geom_contype[i] & feet.geom_conaffinity[j]) \
        | (feet.geom_contype[j] & feet.geom_conaffinity[i])
      names = {feet.geom(i).name, feet.geom(j).name}
      assert bool(match) == ("floor" in names), names
  # Dynamically: the robot sunk into the floor touches it with its legs and body in the full
  # model, with its four feet alone in the feet model.
  pairs = {}
  for name, model in (("full", full), ("feet", feet)):
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, model.key("home").id)
    data.qpos[2] = 0.05
    mujoco.mj_forward(model, data)
    pairs[name] = colliding(model, data)
  assert pairs["feet"] == {tuple(sorted(("floor", foot))) for foot in go1.FEET}
  assert pairs["full"] - pairs["feet"], pairs["full"]  # other geoms touch in the full model

  # Playground's solver options; Menagerie's in the full model.
  opt, menagerie = feet.opt, mujoco.MjModel.from_xml_path(str(GO1)).opt
  assert (opt.iterations, opt.ls_iterations, opt.cone, opt.impratio) \
    == (1, 5, mujoco.mjtCone.mjCONE_PYRAMIDAL, 1.0)
  assert opt.disableflags == mujoco.mjtDisableBit.mjDSBL_EULERDAMP
  assert opt.integrator == mujoco.mjtIntegrator.mjINT_EULER and opt.timestep == 0.004
  assert (full.opt.iterations, full.opt.ls_iterations, full.opt.cone, full.opt.impratio,
          full.opt.disableflags) == (menagerie.iterations, menagerie.ls_iterations,
                                     mujoco.mjtCone.mjCONE_ELLIPTIC, 100.0, 0)
  np.testing.assert_array_equal(full.geom_contype, mujoco.MjModel.from_xml_path(
    str(GO1)).geom_contype)
  # Everything else is the full model's, array for array and option for option.
  differ = {name for name in dir(full) if not name.startswith("_")
            and isinstance(getattr(full, name), np.ndarray)
            and not np.array_equal(getattr(full, name), getattr(feet, name), equal_nan=True)}
  assert differ <= COLLISION_FIELDS, differ - COLLISION_FIELDS
  options = {name for name in dir(opt) if not name.startswith("_")
             and not callable(getattr(opt, name))
             and not np.array_equal(getattr(full.opt, name), getattr(opt, name))}
  assert options == {"iterations", "ls_iterations", "cone", "impratio", "disableflags"}


def test_collisions_must_be_a_known_model(go1):
  with pytest.raises(ValueError, match=r'config\["collisions"\] must be one of'):
    go1.go1_model(GO1, {**go1.default_config(), "collisions": "hands"})


def test_feet_model_steps_as_plain_mujoco(go1):
  with jax.enable_x64(True):
    env = go1.Joystick(GO1, FEET_CONFIG, num_threads=1)
    try:
      model = env.mj_model
      assert model.opt.iterations == 1 and env.config["collisions"] == "feet"
      state = env.reset(jax.random.PRNGKey(3))
      data = mujoco.MjData(model)
      mujoco.mj_setState(model, data, np.asarray(state.data.row),
                         mujoco.mjtState.mjSTATE_INTEGRATION)
      step = jax.jit(env.step)
      actions = np.random.default_rng(0).uniform(-1, 1, (10, 12))
      row = np.empty(env.sim.nstate)
      touched = set()
      for action in actions:
        state = step(state, jnp.asarray(action))
        data.ctrl[:] = np.asarray(state.data.ctrl)
        for _ in range(env.n_substeps):
          mujoco.mj_step(model, data)
          touched |= colliding(model, data)
        mujoco.mj_getState(model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
        np.testing.assert_array_equal(np.asarray(state.data.row), row)
        np.testing.assert_array_equal(np.asarray(state.data.site_xpos), data.site_xpos)
      assert touched and all("floor" in pair for pair in touched), touched
    finally:
      env.close()


def write_checkpoint(path, collisions):
  from mjbatch_jax import archive
  from mjbatch_jax.agents import ppo

  row = ppo.Progress(10, 1000, 1.0, 2.0, 0.1, 0.2, {"eval/forward_error": 0.5}).row()
  meta = {"format": ppo.CHECKPOINT_FORMAT, "network": {}, "iteration": 10,
          "learning_rate": None, "curve": [row]}
  if collisions is not None:  # ppo.train's task, as training() gives it
    meta["task"] = {"collisions": collisions}
  archive.write(path, {"param['w']": np.zeros(3, np.float32)}, meta, header_key="__meta__")
  return path


@pytest.mark.parametrize("trained, args", [
  ("feet", ["--play"]),                           # feet checkpoint, full model
  ("full", ["--play", "--collisions", "feet"]),   # full checkpoint, feet model
  (None, ["--resume", "--collisions", "feet"]),   # a checkpoint from before the option: full
  ("feet", ["--resume", "--collisions", "full"]),
])
def test_checkpoint_of_the_other_model_is_refused(go1, tmp_path, capsys, trained, args):
  policy = write_checkpoint(tmp_path / "go1.npz", trained)
  model = trained or "full"
  assert go1.trained_collisions(policy) == model
  assert go1.trained_collisions(tmp_path / "missing.npz") is None  # its loader says why
  with pytest.raises(SystemExit) as exit_:
    go1.main([*args, "--out", str(policy)])
  assert exit_.value.code == 2
  assert f"holds a policy trained with --collisions {model}, not --collisions" \
    in capsys.readouterr().err


# -- the time-to-walk preset (--preset minute) ---------------------------------------------------

@pytest.mark.parametrize("args, message", [
  (["--preset", "fast"], "argument --preset: invalid choice: 'fast'"),
  (["--preset", "minute", "--collisions", "full"], "--collisions full contradicts it"),
  (["--preset", "minute", "--num-envs", "4096"], "--num-envs 4096 contradicts it"),
  (["--preset", "minute", "--learning-rate", "0.5"], "--learning-rate 0.5 contradicts it"),
  (["--preset", "minute", "--processes", "2"], "trains in one process"),
])
def test_preset_refusals(go1, capsys, args, message):
  with pytest.raises(SystemExit) as exit_:
    go1.main(args)
  assert exit_.value.code == 2
  assert message in capsys.readouterr().err


def test_preset_refuses_a_checkpoint_of_the_full_model(go1, tmp_path, capsys):
  policy = write_checkpoint(tmp_path / "go1.npz", "full")
  with pytest.raises(SystemExit) as exit_:
    go1.main(["--preset", "minute", "--play", "--out", str(policy)])
  assert exit_.value.code == 2
  assert "trained with --collisions full, not --collisions feet" in capsys.readouterr().err


@pytest.mark.parametrize("extra, stops, iterations", [([], True, None), (["--iterations", "40"],
                                                                        False, 40)])
def test_preset_sets_its_flags(go1, monkeypatch, extra, stops, iterations):
  seen = {}
  monkeypatch.setattr(go1, "train", lambda args, leader: seen.update(vars(args)) or {})
  preset = go1.PRESETS["minute"]
  flags = preset["flags"]
  # Giving a flag the preset's own value is no contradiction.
  go1.main(["--preset", "minute", "--threads", "1", "--unroll", str(flags["unroll"]), *extra])
  assert {flag: seen[flag] for flag in flags} == flags
  assert seen["stop_when_walking"] is stops
  assert seen["iterations"] == (preset["iterations"] if iterations is None else iterations)
  assert seen["eval_every"] == preset["eval_every"]
  seen.clear()
  go1.main(["--threads", "1"])  # without the preset: FLAGS, and no stop
  assert {flag: seen[flag] for flag in go1.FLAGS} == go1.FLAGS
  assert seen["stop_when_walking"] is False and seen["iterations"] == 600


def test_preset_stops_at_the_first_passing_check_and_prints_json_last(tmp_path):
  """The preset's stop and last line, at a tiny size: a preset of 8 envs whose check passes at
  any error (WALKING raised), so that the run stops at its first check."""
  pytest.importorskip("brax.training.agents.ppo.train", reason=BRAX_MISSING)
  script = (
    "import sys; sys.path.insert(0, sys.argv[1]); import go1_joystick as go1\n"
    "go1.PRESETS['minute'] = {'flags': {'collisions': 'feet', 'num_envs': 8, 'unroll': 4,\n"
    "  'minibatches': 2, 'epochs': 1, 'learning_rate': 1e-3}, 'ppo': {}, 'eval_every': 2,\n"
    "  'network': {'policy_hidden_layer_sizes': (8,)}, 'iterations': 6}\n"
    "go1.WALKING = 1e9\n"
    "go1.main(sys.argv[2:])\n")
  done = subprocess.run([sys.executable, "-c", script, str(EXAMPLE.parent), "--preset", "minute",
                         "--threads", "1", "--episode-length", "20", "--seed", "3", "--out",
                         str(tmp_path / "go1.npz")], capture_output=True, text=True, timeout=900,
                        cwd=ROOT)
  assert done.returncode == 0, done.stdout + done.stderr[-3000:]
  assert "iter    2:" in done.stdout and "iter    4:" not in done.stdout, done.stdout
  last = json.loads(done.stdout.strip().splitlines()[-1])
  assert last["iterations"] == 2 and last["env_steps"] == 2 * 8 * 4 and last["seed"] == 3
  assert last["preset"] == "minute" and "feet" in last["model"]
  # From the process's start: at least the training, at most the process's whole life.
  assert 0 < last["time_to_walk_training_s"] < last["time_to_walk_s"]
