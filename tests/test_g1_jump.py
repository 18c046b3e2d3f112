"""examples/g1_jump.py: the program's targets, the jump's metrics, the replay against MuJoCo, a
reduced solve and its replay, and the refusals."""

import importlib
import json
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

from tests.models import G1, robot

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def jump():
  robot(G1)
  sys.path.insert(0, str(EXAMPLES))
  try:
    return importlib.import_module("g1_jump")
  finally:
    sys.path.remove(str(EXAMPLES))


@pytest.fixture(scope="module")
def loaded(jump):
  return jump.load_model(None)


def last_json(capsys) -> dict:
  return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_program_reaches_each_phase_and_returns_to_standing(jump, loaded):
  model, plan, _ = loaded
  columns = [np.flatnonzero(row) for row in plan.synergy]
  program = jump.PROGRAM.copy()
  program[:, -1] = [0.4, 0.2, 0.16, 0.4]  # whole knots: each phase ends on one
  ctrls = np.asarray(plan(program.ravel()))
  stand = model.key_ctrl[0]
  assert ctrls.shape == (jump.KNOTS, model.nu)
  np.testing.assert_allclose(ctrls[0], stand)
  np.testing.assert_allclose(ctrls[-1], stand)
  ids = np.concatenate(columns)
  others = np.setdiff1d(np.arange(model.nu), ids)
  np.testing.assert_allclose(ctrls[:, others], np.broadcast_to(stand[others], (jump.KNOTS,
                                                                                len(others))))
  lo, hi = model.actuator_ctrlrange.T
  end = 0.0
  for phase in program:
    end += phase[-1]
    knot = round(end / jump.KNOT_S)
    for j, synergy in enumerate(columns):
      np.testing.assert_allclose(ctrls[knot, synergy], np.clip(phase[j], lo[synergy],
                                                               hi[synergy]), atol=1e-9)


def test_metrics_find_the_flight_the_landing_and_what_touches(jump):
  steps, dt = 1000, 0.002
  qpos = np.zeros((steps, 36))
  qpos[:, 0] = np.linspace(0.0, 0.7, steps)
  qpos[:, 2] = 0.75
  floor = np.tile([4.0, 4.0, 8.0], (steps, 1))
  floor[200:300] = 0.0  # 0.2 s in the air
  floor[300:310] = [4.0, 0.0, 4.0]  # one foot first
  metrics = jump.jump_metrics(qpos, floor, np.zeros(2), dt)
  assert metrics["flight_s"] == pytest.approx(0.2)
  assert metrics["takeoff_s"] == pytest.approx(0.4) and metrics["touchdown_s"] == pytest.approx(0.6)
  assert metrics["landed"] and metrics["passed"]
  assert metrics["upright_s"] == pytest.approx(1.4)
  assert metrics["distance_m"] == pytest.approx(0.7)
  knee = floor.copy()
  knee[500, 2] += 1  # a body other than the feet on the floor after touchdown
  assert not jump.jump_metrics(qpos, knee, np.zeros(2), dt)["landed"]
  low = qpos.copy()
  low[700, 2] = jump.PELVIS_UPRIGHT - 0.01
  assert jump.jump_metrics(low, floor, np.zeros(2), dt)["upright_s"] == pytest.approx(0.598)
  assert not jump.jump_metrics(low, floor, np.zeros(2), dt)["passed"]
  hop = floor.copy()
  hop[200:300] = [4.0, 4.0, 8.0]
  hop[200:240] = 0.0  # 0.08 s: shorter than MIN_FLIGHT
  assert not jump.jump_metrics(qpos, hop, np.zeros(2), dt)["landed"]


def test_the_replay_is_mujocos_physics(jump, loaded):
  import mjbatch_jax

  model, plan, slots = loaded
  ctrls = np.asarray(plan(jump.PROGRAM.ravel()))[:30]
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    start = sim.init_state(1)[0].at[sim.layout.qpos].set(model.key_qpos[0])
    start = start.at[sim.layout.ctrl].set(model.key_ctrl[0])
    _, rows = jump.replay(slots, sim, start, ctrls, sim.params(1))
    qpos = rows[:, sim.layout.qpos]
  data = mujoco.MjData(model)
  mujoco.mj_resetDataKeyframe(model, data, 0)
  for i in range(len(qpos)):
    data.ctrl[:] = ctrls[i // jump.NSTEP]
    mujoco.mj_step(model, data)
    np.testing.assert_allclose(qpos[i], data.qpos, atol=1e-9, err_msg=f"step {i}")


def test_reduced_solve_replays_to_its_summary_and_refusals(jump, tmp_path, capsys):
  small = ["--samples", "4", "--iterations", "1", "--robust", "2", "--threads", "2",
           "--results", str(tmp_path)]
  saved = jump.main(small)
  assert last_json(capsys) == json.loads(json.dumps(saved))
  assert (tmp_path / "g1_jump.npz").exists()
  assert json.loads((tmp_path / "g1_jump.json").read_text()) == json.loads(json.dumps(saved))
  assert saved["robust_robots"] == 2 and 0.0 <= saved["robust_share"] <= 1.0
  played = jump.main([*small, "--play"])
  assert last_json(capsys) == json.loads(json.dumps(played))
  assert played == saved
  assert (tmp_path / "g1_jump.png").exists()
  # The plan of another configuration is refused naming what differs, not replayed.
  with pytest.raises(SystemExit, match=r"another config: samples \(saved 4, here 5\)"):
    jump.main([*small[2:], "--samples", "5", "--play"])
  with pytest.raises(SystemExit, match="no result file"):
    jump.main(["--play", "--out", str(tmp_path / "none.npz")])


def test_bad_arguments_and_models_are_refused(jump, tmp_path, capsys):
  for flags in (["--samples", "1"], ["--iterations", "-1"], ["--robust", "0"]):
    with pytest.raises(SystemExit) as raised:
      jump.main(flags)
    assert raised.value.code == 2
    assert "must be an integer" in capsys.readouterr().err
  other = tmp_path / "box.xml"
  other.write_text('<mujoco><worldbody><geom name="floor" type="plane" size="1 1 .1"/>'
                   '<body name="pelvis"><freejoint/><geom size=".1"/></body></worldbody>'
                   '</mujoco>')
  with pytest.raises(SystemExit, match="Unitree G1"):
    jump.main(["--model", str(other), "--iterations", "0"])
