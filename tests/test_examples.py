"""The examples run as a user runs them, and meet what they claim in what they print."""

import copy
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"


def run(script: str, *args: str, timeout: float = 300) -> str:
  """Run an example in a fresh interpreter; return its stdout, failing with its stderr."""
  done = subprocess.run(
    [sys.executable, str(EXAMPLES / script), *args],
    capture_output=True, text=True, timeout=timeout, cwd=EXAMPLES.parent,
  )
  assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
  return done.stdout


def number(pattern: str, text: str) -> float:
  found = re.search(pattern, text)
  assert found, f"no match for {pattern!r} in:\n{text}"
  return float(found.group(1))


def test_hello():
  out = run("hello.py")
  assert number(r"([\d,]+) sim-steps/s", out.replace(",", "")) > 0
  assert number(r"threads: (\d+)", out) >= 1


def test_hello_jax():
  out = run("hello_jax.py")
  assert number(r"([\d,]+) sim-steps/s", out.replace(",", "")) > 0
  assert number(r"time ([\d.]+) s", out) == pytest.approx(2.0)


def summary(out: str) -> dict:
  """The JSON line an example prints last."""
  import json

  return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_cartpole_mpc(tmp_path):
  out = run("cartpole_mpc.py", "--results", str(tmp_path))
  assert summary(out)["final_tilt"] < 0.2
  played = run("cartpole_mpc.py", "--play", "--results", str(tmp_path))
  assert "replay differs from the saved run by 0.0e+00" in played
  assert (tmp_path / "cartpole_mpc.png").is_file()
  # MPPI on the same task swings it up as well (60 control steps: 2.4 s).
  out = run("cartpole_mpc.py", "--method", "mppi", "--steps", "60", "--results", str(tmp_path))
  assert summary(out)["final_tilt"] < 0.2


@pytest.mark.slow
def test_cartpole_swingup(tmp_path):
  out = run("cartpole_swingup.py", "--results", str(tmp_path))
  result = summary(out)
  assert result["cost"] < 0.01 * result["initial_cost"]
  assert result["cost"] <= 12.117  # the previous hand-written solver's cost (150 iterations)
  assert result["tilt1"] < 0.1 and result["tilt2"] < 0.1
  saved = np.load(tmp_path / "cartpole_swingup.npz")
  assert saved["ctrl"].shape == (100, 1)
  assert np.all(np.abs(saved["ctrl"]) <= 1.0)  # the box
  assert saved["states"].shape[0] == 101 and saved["gains"].shape == (100, 1, 6)
  played = run("cartpole_swingup.py", "--play", "--results", str(tmp_path))
  assert "replay differs from the saved plan by 0.0e+00" in played
  assert (tmp_path / "cartpole_swingup.png").is_file()


@pytest.mark.slow
def test_g1_tracking(tmp_path):
  from tests.models import G1, MODELS_MISSING

  if not G1.exists():
    pytest.skip(MODELS_MISSING)
  # A reduced size: the clip's first 20 frames, 2 iLQR iterations.
  out = run("g1_tracking.py", "--frames", "20", "--iterations", "2", "--results", str(tmp_path),
            timeout=600)
  result = summary(out)
  before, after = result["results"]["initial guess"], result["results"]["iLQR plan"]
  assert np.isfinite(after["pos_mm"]) and after["pos_mm"] < before["pos_mm"]
  assert after["rot_deg"] < before["rot_deg"]
  assert result["cost"] < result["initial_cost"]
  assert after["upright"] and result["replay_gap"] == 0.0
  plan = np.load(tmp_path / "g1_tracking.npz")
  assert plan["ctrl"].shape == (20, 29)
  assert np.all(np.isfinite(plan["ctrl"])) and np.all(np.isfinite(plan["qpos"]))

  # --play replays the saved plan open-loop and gets the same numbers, bit for bit.
  replay = run("g1_tracking.py", "--play", "--results", str(tmp_path))
  assert "replay differs from the saved plan by 0.0e+00" in replay
  assert summary(replay)["pos_mm"] == after["pos_mm"]
  assert (tmp_path / "g1_tracking.png").exists()

  # A missing plan is a clear error, not a traceback.
  code, err = _refusal("g1_tracking.py", "--play", "--out", str(tmp_path / "no.npz"))
  assert code == 1 and "no result file" in err


@pytest.mark.slow
def test_go1_getup(tmp_path):
  from tests.models import GO1, MODELS_MISSING

  if not GO1.exists():
    pytest.skip(MODELS_MISSING)
  # A reduced size: 16 candidates, 5 control steps (the full run: 128 candidates, 150 steps).
  out = run("go1_getup.py", "--samples", "16", "--steps", "5", "--results", str(tmp_path),
            timeout=600)
  result = summary(out)
  assert result["final_tilt"] < 1.6 and result["planning_seconds"] > 0
  assert result["sim_steps_per_control_step"] == 16 * 25 * 10
  played = run("go1_getup.py", "--play", "--results", str(tmp_path))
  assert "replay differs from the saved run by 0.0e+00" in played
  assert summary(played)["final_tilt"] == result["final_tilt"]


def _refusal(script: str, *args: str) -> tuple[int, str]:
  """Exit code and stderr of an example run that should refuse its arguments."""
  done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True,
                        text=True, timeout=300, cwd=EXAMPLES.parent)
  assert "Traceback" not in done.stderr, done.stderr
  return done.returncode, done.stderr


def test_examples_refuse_another_robot_files_and_flags_up_front(tmp_path):
  """Each a clear error before any solve, never a traceback (_refusal asserts that)."""
  from tests.models import G1, GO1, MODELS_MISSING

  if not (G1.exists() and GO1.exists()):
    pytest.skip(MODELS_MISSING)
  code, err = _refusal("g1_tracking.py", "--model", str(GO1), "--out", str(tmp_path / "t.npz"))
  assert code == 1 and "has no bodies named" in err and "left_ankle_roll_link" in err
  code, err = _refusal("go1_getup.py", "--model", str(G1), "--out", str(tmp_path / "g.npz"))
  assert code == 1 and "has no bodies named ['trunk']" in err
  code, err = _refusal("g1_jump.py", "--out", str(tmp_path / "plan.json"))
  assert code == 2 and "--out must name an .npz file" in err
  notes = tmp_path / "notes.npz"
  notes.write_text("my notes")
  code, err = _refusal("cartpole_swingup.py", "--out", str(notes))
  assert code == 2 and "not overwriting it" in err and notes.read_text() == "my notes"
  code, err = _refusal("g1_jump.py", "--play", "--seed", "1")  # the shipped plan: seed 0
  assert code == 1 and "another config: seed (saved 0, here 1)" in err
  code, err = _refusal("g1_backflip.py", "--reference", "--play")
  assert code == 2 and "leave out --play" in err
  if common_module().available_memory() is not None:  # sizes that cannot fit: before a search
    code, err = _refusal("arm_throw.py", "--population", "1000000", "--restarts", "1000",
                         "--out", str(tmp_path / "throw.npz"))
    assert code == 1 and "--population 1000000 x --restarts 1000 needs about" in err, err
    assert "GB this machine has available: ask for fewer" in err
  # The counts: argparse types, refused as the other examples' are.
  for script, flags, message in (
      ("hello.py", ["--num-sims", "0"], "--num-sims: must be an integer in [1, 1000000] ("),
      ("hello.py", ["--nstep", "2.5"], "--nstep: must be an integer in [1, 1000000] ("),
      ("hello_jax.py", ["--num-calls", "-1"], "--num-calls: must be an integer in [1, 1000000]"),
      ("hello_jax.py", ["--num-sims", "x"], "--num-sims: must be an integer in [1, 1000000]"),
      ("envs_cartpole.py", ["--num-envs", "0"], "--num-envs: must be an integer in [1, 1000000]"),
      ("envs_cartpole.py", ["--steps", "1e9"], "--steps: must be an integer in [1, 1000000]"),
      ("pg_distributed.py", ["--lr", "nan"], "--lr: must be a finite number > 0"),
      ("pg_distributed.py", ["--checkpoint-every", "0"],
       "--checkpoint-every: must be an integer in [1, 1000000]"),
      ("pg_distributed.py", ["--processes", "2000"], "--processes: must be an integer in [1, 10"),
      ("pg_distributed.py", ["--seed", str(2**32)], "--seed: must be an integer in [0, 42949"),
      ("pg_distributed.py", ["--crash-after", "0"], "--crash-after: must be an integer in [1, "),
      ("pg_distributed.py", ["--checkpoint", str(tmp_path)], "--checkpoint must name an .npz"),
      # --checkpoint's default: in --results, or beside --out, never the working folder.
      ("pg_distributed.py", ["--resume", "--results", str(tmp_path / "r")],
       f"--resume: no checkpoint at {tmp_path / 'r' / 'pg_distributed.checkpoint.npz'}"),
      ("pg_distributed.py", ["--resume", "--out", str(tmp_path / "policy.npz")],
       f"--resume: no checkpoint at {tmp_path / 'policy.checkpoint.npz'}")):
    code, err = _refusal(script, *flags)
    assert code == 2 and message in err, (script, flags, err)
  assert not (tmp_path / "r").exists()  # refused before its folder was made


# A shipped result, tampered past what its version checks: (script, result, array, how, what
# the refusal says).
TAMPERED = [
  ("cartpole_swingup.py", "cartpole_swingup", "ctrl", "rows", "shape (99, 1), expected (100, 1)"),
  ("cartpole_swingup.py", "cartpole_swingup", "states", "nan", "'states' holds NaN or infinity"),
  ("cartpole_mpc.py", "cartpole_mpc", "states", "columns", "expected (T+1, 28)"),
  ("go1_getup.py", "go1_getup", "states", "one row", "expected (T+1, 170)"),
  ("arm_throw.py", "arm_throw", "design", "columns", "has shape (11,), expected (12,)"),
  ("arm_throw.py", "arm_throw", "mean_per_iteration", "drop", "lacks ['mean_per_iteration']"),
  ("sysid.py", "sysid", "rich_test_q", "rows", "expected (N_rich, 7) where N_rich = 1000"),
  ("sysid.py", "sysid", "seed_theta", "text", "'seed_theta' holds <U3, not real numbers"),
  ("g1_jump.py", "g1_jump", "ctrls", "columns", "expected (any, 29)"),
  ("g1_tracking.py", "g1_tracking", "ctrl", "long", "a plan of 5000 frames, not 2 to"),
  ("g1_tracking.py", "g1_tracking", "qpos", "rows", "expected (T+1, 36) where T = 200"),
  ("g1_backflip.py", "g1_backflip", "holds", "columns", "expected (5, any, any, 29)"),
  ("g1_backflip.py", "g1_backflip", "landing_knots", "nan", "'landing_knots' holds NaN"),
]


@pytest.mark.parametrize("script,name,key,how,message", TAMPERED,
                         ids=[f"{t[1]}-{t[2]}-{t[3]}" for t in TAMPERED])
def test_play_refuses_a_tampered_result_before_replaying(tmp_path, script, name, key, how,
                                                         message):
  """The version says which code and model saved a result, not that its arrays are whole: a
  file edited by hand or by another program is refused naming the array, never a traceback
  from deep in a replay nor a replay of NaN."""
  from mjbatch_jax import archive
  from tests.models import G1, GO1, MODELS_MISSING

  if name.startswith(("g1", "go1")) and not (G1.exists() and GO1.exists()):
    pytest.skip(MODELS_MISSING)
  arrays, header = archive.read(EXAMPLES / "results" / f"{name}.npz")
  array = arrays[key]
  if how == "rows":
    arrays[key] = array[1:]
  elif how == "columns":
    arrays[key] = array[..., 1:]
  elif how == "one row":
    arrays[key] = array[:1]
  elif how == "long":
    arrays[key] = np.zeros((5000, *array.shape[1:]))
  elif how == "nan":
    arrays[key] = np.where(np.arange(array.size).reshape(array.shape) == 1, np.nan, array)
  elif how == "text":
    arrays[key] = np.full(array.shape, "abc")
  else:
    del arrays[key]
  tampered = tmp_path / f"{name}.npz"
  archive.write(tampered, arrays, header)
  code, err = _refusal(script, "--play", "--out", str(tampered))
  assert code == 1 and message in err and "solve again" in err, err
  assert not list(tmp_path.glob(f"{name}.*[!z]")), "refused before a plot or video was written"


@pytest.mark.slow
def test_arm_throw(tmp_path):
  # A reduced size: 4 searches of 16 candidates x 4 CEM iterations (the full run: 4 x 256 x 60).
  out = run("arm_throw.py", "--population", "16", "--iterations", "4", "--results",
            str(tmp_path))
  result = summary(out)
  hand, best = result["hand_distance"], result["distance"]
  assert best == max(result["searches"])
  assert hand > 3.0
  assert best >= 1.05 * hand  # morphology and control searched together beat every hand design
  saved = np.load(tmp_path / "arm_throw.npz")
  assert saved["design"].shape == (12,) and np.all((saved["design"] >= 0) & (saved["design"] <= 1))

  played = summary(run("arm_throw.py", "--play", "--results", str(tmp_path)))
  assert played["optimised"]["distance"] == pytest.approx(best, abs=1e-9)
  assert played["hand design"]["distance"] == pytest.approx(hand, abs=1e-9)
  assert (tmp_path / "arm_throw.png").is_file()


@pytest.mark.slow
def test_arm_throw_refuses_bad_flags(tmp_path):
  code, err = _refusal("arm_throw.py", "--population", "4")
  assert code == 2 and "--population: must be an integer in [8," in err
  code, err = _refusal("arm_throw.py", "--iterations", "0")
  assert code == 2 and "--iterations: must be an integer in [1," in err
  code, err = _refusal("arm_throw.py", "--restarts", "0")
  assert code == 2 and "--restarts: must be an integer in [1," in err
  code, err = _refusal("arm_throw.py", "--threads", "-1")
  assert code == 2 and "--threads: must be an integer in" in err
  code, err = _refusal("arm_throw.py", "--play", "--out", str(tmp_path / "missing.npz"))
  assert code == 1 and "no result file" in err
  other = tmp_path / "other.npz"
  np.savez(other, something=1)
  code, err = _refusal("arm_throw.py", "--play", "--out", str(other))
  assert code == 1 and "not a result saved by an example" in err


def compiled_arm(arm, thrower, u: np.ndarray) -> mujoco.MjModel:
  """arm_throw's design u as its own MjModel: the MjSpec edited to its params row's values."""
  _, _, params = thrower.inputs(arm.jnp.asarray(u)[None])
  value = {name: np.asarray(params[name][0], dtype=float) for name in arm.FIELDS}
  spec = mujoco.MjSpec.from_string(arm.arm_xml())
  for i, body in enumerate(arm.SELECT["body_pos"]):
    spec.body(body).pos = value["body_pos"][i]
  for i, body in enumerate(arm.SELECT["body_mass"]):
    spec.body(body).mass = float(value["body_mass"][i])
    spec.body(body).ipos, spec.body(body).inertia = value["body_ipos"][i], value["body_inertia"][i]
  for i, geom in enumerate(arm.SELECT["geom_pos"]):
    spec.geom(geom).pos, spec.geom(geom).size = value["geom_pos"][i], value["geom_size"][i]
  for i, name in enumerate(("shoulder", "elbow")):
    spec.actuator(name).gear = value["actuator_gear"][i]
    spec.joint(name).armature = float(value["dof_armature"][i])
  return spec.compile()


def throw_by_mj_step(arm, thrower, u: np.ndarray) -> np.ndarray:
  """The states of design u's throw and of the ball's flight from its release, by plain mj_step
  on its compiled MjModel: the rows Thrower.flights returns."""
  model, state = compiled_arm(arm, thrower, u), mujoco.mjtState.mjSTATE_INTEGRATION
  data, row = mujoco.MjData(model), np.empty(thrower.sim.nstate)
  _, _, knots, release = arm.decode(u)
  mujoco.mj_setState(model, data, np.asarray(thrower.start), state)
  rows, released = [], data
  for k, ctrl in enumerate(arm.controls(knots)):
    data.ctrl[:] = ctrl
    mujoco.mj_step(model, data)
    mujoco.mj_getState(model, data, row, state)
    rows.append(row.copy())
    released = copy.copy(data) if k == int(arm.release_step(release)) else released
  released.eq_active[0], released.ctrl[:] = 0, 0.0
  for _ in range(arm.FLIGHT_KNOTS):  # the flight: the weld off, the motors idle
    mujoco.mj_step(model, released, arm.FLIGHT_SUBSTEPS)
    mujoco.mj_getState(model, released, row, state)
    rows.append(row.copy())
  return np.array(rows)


def test_arm_throw_candidate_equals_its_compiled_model():
  # A candidate is a params row with set_const=True, never a recompile: its throw and flight
  # equal mj_step on the MjModel compiled with its morphology, bit for bit. Without set_const the
  # derived constants (implicit armature, subtree masses) stay the base model's and it differs.
  # The designs: the saved result's optimised and hand designs, and two random ones.
  arm = example_module("arm_throw")
  saved = np.load(EXAMPLES / "results" / "arm_throw.npz")
  designs = [saved["design"], saved["hand_design"], *np.random.default_rng(0).uniform(size=(2, 12))]
  thrower = arm.Thrower(num_threads=1)
  try:
    for u in designs:
      reference = throw_by_mj_step(arm, thrower, u)
      for set_const in (True, False):
        throw, _, flight = thrower.flights(arm.jnp.asarray(u)[None], set_const)
        error = np.max(np.abs(np.concatenate([throw[0], flight[0]]) - reference))
        assert error == 0.0 if set_const else error > 1e-3, (u, set_const, error)
  finally:
    thrower.sim.close()


def sysid_run(tmp_path, *args: str) -> tuple[str, Path]:
  """The reduced size: 200 commands (4 windows of 50), at most 10 LM iterations per excitation."""
  result = tmp_path / f"sysid{'_'.join(args)}.npz"
  return run("sysid.py", "--samples", "200", "--iterations", "10", "--skip-mujoco-sysid",
             "--out", str(result), *args), result


@pytest.mark.slow
def test_sysid_identifiability(tmp_path):
  out, result = sysid_run(tmp_path)
  before = number(r"error before: ([\d.]+) rad", out)
  after = number(r"error after: +([\d.]+) rad", out)
  assert after * 10 <= before
  assert after < 2e-4  # down to the encoder noise, 1e-4 rad
  # 43 of the 70 numbers' directions change the joints' motion at all; the seed's excitation pins
  # fewer of them than the richer one.
  assert number(r"identifiable: (\d+) of 70", out) == 43
  seed = number(r"seed excitation: (\d+) of the 43", out)
  rich = number(r"rich excitation: (\d+) of the 43", out)
  assert rich >= seed + 10
  # The richer excitation's fit predicts a held-out recording of its kind better.
  assert (number(r"error, rich : seed recording [\d.]+ rad RMS, rich recording ([\d.]+) rad", out)
          < number(r"error, seed : seed recording [\d.]+ rad RMS, rich recording ([\d.]+) rad",
                   out))
  # The library's report names the combinations that joint motion never sees.
  assert re.search(r"unidentifiable 1: [+-]\d\.\d\d link\d\.", out)
  summary = json.loads(out.strip().splitlines()[-1])
  assert summary["heldout_after"] == pytest.approx(after, abs=1e-5)
  assert summary["rank"] == {"seed": 43, "rich": 43}

  played = run("sysid.py", "--play", "--out", str(result))
  assert number(r"error, seed : seed recording ([\d.]+) rad", played) == pytest.approx(after,
                                                                                     abs=1e-5)
  assert (tmp_path / f"{result.stem}.png").is_file()


@pytest.mark.slow
def test_sysid_over_two_processes_equals_one(tmp_path):
  # Data-parallel over two processes (2 windows each, the 70 x 70 normal equations summed by a
  # collective): the same fit up to the order of the sums' rounding. The 27 directions no data
  # reach drift with that rounding over the iterations (their information is finite-difference
  # noise: measured 1.3e-5 on a log mass), hence the looser bound on the numbers themselves.
  _, one = sysid_run(tmp_path, "--skip-rich")
  out2, two = sysid_run(tmp_path, "--skip-rich", "--processes", "2")
  assert "[0] arm: 7 links" in out2 and "2 process(es), 2 windows here" in out2
  assert "[1] arm:" not in out2 and "[1] saved" not in out2  # process 0 alone reports
  meta = [json.loads(str(np.load(path)["__header__"]))["meta"] for path in (one, two)]
  assert meta[0]["iterations"] == meta[1]["iterations"]
  np.testing.assert_allclose(meta[1]["heldout"]["seed"], meta[0]["heldout"]["seed"], rtol=0,
                             atol=1e-9)  # rad
  with np.load(one) as first, np.load(two) as second:
    np.testing.assert_allclose(second["seed_costs"], first["seed_costs"], rtol=1e-6)
    np.testing.assert_allclose(second["seed_theta"], first["seed_theta"], atol=1e-4)


@pytest.mark.slow
def test_sysid_refuses_bad_flags(tmp_path):
  code, err = _refusal("sysid.py", "--samples", "130")
  assert code == 2 and "multiple of --window" in err
  code, err = _refusal("sysid.py", "--window", "0")
  assert code == 2 and "--window: must be an integer in [1," in err
  code, err = _refusal("sysid.py", "--iterations", "0")
  assert code == 2 and "--iterations: must be an integer in [1," in err
  code, err = _refusal("sysid.py", "--play", "--out", str(tmp_path / "missing.npz"))
  assert code == 1 and "no result file" in err
  code, err = _refusal("sysid.py", "--processes", "0")
  assert code == 2 and "--processes: must be an integer in [1," in err
  code, err = _refusal("sysid.py", "--processes", "2", "--play")
  assert code == 2 and "--play replays in one process" in err
  code, err = _refusal("sysid.py", "--processes", "2", "--samples", "250")
  assert code != 0 and "5 windows must be a multiple of the 2 CPU devices" in err
  stale = tmp_path / "stale.npz"
  header = {"kind": "sysid", "version": "0123456789abcdef", "meta": {}}
  np.savez(stale, __header__=np.array(json.dumps(header)), theta_true=np.zeros((7, 10)))
  code, err = _refusal("sysid.py", "--play", "--out", str(stale))
  assert code == 1 and "another version of the model" in err


@pytest.mark.slow
def test_g1_backflip(tmp_path):
  """The whole pipeline at a reduced size; the saved plan replays bit for bit; bad inputs."""
  import json

  from tests.models import G1, MODELS_MISSING

  if not G1.exists():
    pytest.skip(MODELS_MISSING)
  flip = example_module("g1_backflip")
  plan_path = tmp_path / "flip.npz"
  # The clip's first 100 frames (the flight ends at knot 83), the program as it is, one iLQR
  # iteration, one iteration of the push's search, the closed loop on 2 randomised robots.
  small = ("--frames", "100", "--iterations", "1", "--push-iterations", "1")
  out = run("g1_backflip.py", *small, "--robust", "2", "--threads", "2", "--out", str(plan_path),
            timeout=2400)
  assert "feasibility: peak torque / limit" in out
  assert number(r"L = (-[\d.]+) kg m\^2/s", out) < 0  # a backward turn
  assert out.count("push search") == 1 and out.count("push check") == 2  # the means: 2
  assert "open loop replays the plan's states within 0.0e+00" in out
  summary = json.loads(out.strip().splitlines()[-1])
  assert set(summary) == {"rotation_rad", "target_rad", "complete", "flight_s", "apex_m",
                          "landed", "upright_s", "open_loop_landed", "robust_robots",
                          "robust_landed_share"}
  assert summary["complete"] == (summary["rotation_rad"] >= summary["target_rad"])
  assert summary["target_rad"] == pytest.approx(2 * np.pi - 0.3) and summary["robust_robots"] == 2
  arrays, meta = common_module().load_result(plan_path, "g1_backflip")
  cfg = flip.Config(frames=100, iterations=1, push_iterations=1)
  assert {k: meta[k] for k in ("config", "config_fingerprint")} == flip.common.config_meta(cfg)
  assert arrays["ctrl"].shape == (100, 29) and arrays["states"].shape[0] == 101
  assert arrays["holds"].shape == (cfg.tuck_holds, len(cfg.tilts), 100, 29)
  assert np.array_equal(arrays["holds"][0, 0], arrays["ctrl"])
  decide, tilt_at, land_from = arrays["landing_knots"].tolist()
  assert decide < tilt_at <= land_from < 100

  # --play in a fresh process: the same replay, bit for bit, and the same numbers.
  replay = run("g1_backflip.py", *small, "--play", "--robust", "2", "--out", str(plan_path),
               timeout=1800)
  assert "open loop replays the plan's states within 0.0e+00" in replay
  assert json.loads(replay.strip().splitlines()[-1]) == summary
  assert plan_path.with_suffix(".png").exists()

  # Bad inputs: clear errors, no tracebacks.
  code, err = _refusal("g1_backflip.py", "--frames", "100", "--iterations", "1",
                       "--push-iterations", "2", "--play", "--out", str(plan_path))
  assert code == 1 and "solved with another config: push_iterations (saved 1, here 2)" in err
  code, err = _refusal("g1_backflip.py", "--play", "--out", str(plan_path))  # the defaults
  assert code == 1 and "frames (saved 100, here 200)" in err and "iterations (saved 1" in err
  code, err = _refusal("g1_backflip.py", "--play", "--out", str(tmp_path / "none.npz"))
  assert code == 1 and "no result file" in err
  other = tmp_path / "other.npz"  # a plan saved for another version of the model or task
  common_module().save_result(other, "g1_backflip", arrays, meta, version="0" * 16)
  code, err = _refusal("g1_backflip.py", *small, "--play", "--out", str(other))
  assert code == 1 and "another version" in err
  code, err = _refusal("g1_backflip.py", "--frames", "500")
  assert code == 2 and "must be an integer in [2, 200]" in err
  for iterations in ("-1", "nan", "2.5", "1001"):
    code, err = _refusal("g1_backflip.py", "--push-iterations", iterations)
    assert code == 2 and "must be an integer in [0, 1000] (iterations of the push's" in err, err
  for gone in ("--program", "--samples", "--search-iterations"):  # the program is the default
    code, err = _refusal("g1_backflip.py", gone, "1")
    assert code == 2 and f"unrecognized arguments: {gone}" in err
  model = tmp_path / "ball.xml"
  model.write_text('<mujoco><worldbody><geom name="floor" type="plane" size="1 1 .1"/>'
                   '<body name="pelvis"><freejoint/><geom size=".1"/></body></worldbody>'
                   '</mujoco>')
  code, err = _refusal("g1_backflip.py", "--reference", "--model", str(model))
  assert code == 1 and "has no bodies named" in err and "torso_link" in err


def test_g1_backflip_warm_start_flips_and_its_guard_keeps_it():
  """The default program (the warm start iLQR starts from), replayed by plain mj_step from the
  clip's first pose, leaves leaning forward, turns more than 5.5 rad in flight and stands on the
  nominal robot; the example's guard (control.ensemble_guard on its guard robots) accepts it
  and refuses the same controls with the tuck held from 1.2 s on, jitted as ilqr calls it."""
  from tests.models import G1, MODELS_MISSING

  if not G1.exists():
    pytest.skip(MODELS_MISSING)
  flip = example_module("g1_backflip")
  cfg = flip.Config()
  model = flip.load_model(None)
  clip, _ = flip.prepare(model, cfg, log=lambda *_: None)
  nstep = round(flip.FRAME_DT / model.opt.timestep)
  with flip.mjbatch_jax.Simulator(model, num_threads=2) as sim:
    start = flip.common.g1_at_rest(sim, clip["qpos"][0])
    cost = flip.motion.tracking_cost(sim, clip["xpos"], clip["xquat"], clip["qpos"],
                                     flip.TRACKED, **flip.common.G1_TRACKING)
    base = min((clip["angles"], clip["servo"]), key=lambda u: float(
      flip.control.plan_cost(cost, sim.params(1), start, u, nstep)[0]))
    warm = np.asarray(flip.program(model, cfg, base)(flip.jnp.asarray(np.ravel(cfg.program))))
    floor = flip.common.g1_floor_columns(model)
    data = mujoco.MjData(model)
    mujoco.mj_setState(model, data, np.asarray(start), mujoco.mjtState.mjSTATE_INTEGRATION)
    qpos, contacts = [], []
    for u in warm:
      data.ctrl[:] = u
      for _ in range(nstep):
        mujoco.mj_step(model, data)
        qpos.append(data.qpos.copy())
        contacts.append(data.sensordata[floor].copy())
    metrics = flip.flip_metrics(cfg, np.array(qpos), np.array(contacts), model.opt.timestep)
    off = round(metrics["takeoff_s"] / model.opt.timestep)
    w, _, y, _ = qpos[off][3:7]
    assert 2 * np.arctan2(y, w) > 0.2, metrics  # the pelvis pitched forward (nose down)
    assert metrics["rotation_rad"] > 5.5 and cfg.stands(metrics), metrics

    ensemble = flip.common.g1_robots(sim, dict.fromkeys(flip.PURPOSES, 0))
    log = []
    guard = flip.control.ensemble_guard(
      lambda u: flip.control.open_loop(ensemble.params("guard", cfg.guard_robots), start, u,
                                       nstep),
      lambda row: cfg.stands(flip.replay_metrics(sim, cfg, row[0][None], row[1][None])[0]),
      warm, log=log.append)
    assert guard.accept is not None and guard.warm.passed[0] and "refuses steps" in log[0]
    fallen = warm.copy()
    fallen[60:] = warm[60]
    accept = flip.jax.jit(guard.accept)
    assert bool(accept(None, flip.jnp.asarray(warm))) and guard.refusals == []
    assert not bool(accept(None, flip.jnp.asarray(fallen)))
    assert len(guard.refusals) == 1 and not guard.refusals[0].passed[0] and guard.asked == 2


# The saved plan was solved on Python 3.13 with numpy 2.5.5 (what pip installs on 3.12 and 3.13);
# numpy 2.4.6 (Python 3.11's) builds the reference a little otherwise with AVX2's kernels too.
SAVED_PLANS_NUMPY = "2.5.5"
REFERENCE_AGAIN = """
import os, sys
sys.path.insert(0, "examples")
import g1_backflip as flip  # first, as running the example imports it: before numpy loads
import numpy as np
from pathlib import Path
saved, _ = flip.common.load_result(Path("examples/results/g1_backflip.npz"), flip.KIND)
clip, _ = flip.prepare(flip.load_model(None), flip.Config(), log=lambda *a: None)
same = all(np.array_equal(clip[k], saved["ref_" + k]) for k in ("qpos", "xpos", "xquat"))
print(os.environ.get("OPENBLAS_CORETYPE"), same)
"""


def test_g1_backflip_builds_the_saved_plans_reference_bit_for_bit():
  """The solve is chaotic in the reference's last bits, which numpy's BLAS kernels round by CPU;
  the example pins AVX2's kernels before numpy loads, so that a fresh run builds the reference
  the saved plan was solved from bit for bit on any x86 CPU with AVX2 (this one: AVX-512 too,
  whose kernels alone give joint angles 2e-6 rad apart), with the numpy it was solved with. A
  user's own OPENBLAS_CORETYPE stands."""
  from tests.models import G1, MODELS_MISSING

  if not G1.exists():
    pytest.skip(MODELS_MISSING)
  try:
    flags = set(Path("/proc/cpuinfo").read_text().split())
  except OSError:
    flags = set()
  if not {"avx2", "fma"} <= flags:
    pytest.skip("not an x86 CPU with AVX2 and FMA (Linux): the saved plan's kernels are not here")
  if np.__version__ != SAVED_PLANS_NUMPY:
    pytest.skip(f"numpy {np.__version__} rounds the reference otherwise in the last bits; the "
                f"saved plan's was built with numpy {SAVED_PLANS_NUMPY}")

  def fresh(**env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"} | env
    done = subprocess.run([sys.executable, "-c", REFERENCE_AGAIN], capture_output=True,
                          text=True, timeout=300, cwd=EXAMPLES.parent, env=environ)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()

  assert fresh() == ["Haswell", "True"]
  assert fresh(OPENBLAS_CORETYPE="Sandybridge")[0] == "Sandybridge"


def example_module(name: str):
  """examples/<name>.py as a module, imported as the examples import common."""
  sys.path.insert(0, str(EXAMPLES))
  try:
    return importlib.import_module(name)
  finally:
    sys.path.remove(str(EXAMPLES))


def common_module():
  """examples/common.py, as the examples import it."""
  return example_module("common")
