"""benchmarks/control_suite.py: every task builds on its dm_control model, its success predicate
can fail, and a reduced run reports every task (never its speed or its score).

dm_control's models come from mujoco_playground (this interpreter, or the .venv-rl that .ci/run
builds, whose leg runs this file).
"""

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mjbatch_jax

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suite() -> ModuleType:
  sys.path.insert(0, str(BENCHMARKS))
  spec = importlib.util.spec_from_file_location("control_suite", BENCHMARKS / "control_suite.py")
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if module.package_file("mujoco_playground", f"{module.XMLS}/acrobot.xml",
                         module.PEER_PYTHONS) is None:
    pytest.skip("mujoco_playground (dm_control's models) is installed neither here nor in "
                ".venv-rl: .ci/run's RL leg runs this file")
  return module


def _names(module_path: Path) -> list[str]:
  """The suite's default tasks' names (its TASKS list), read without importing it (for
  parametrize)."""
  lines = module_path.read_text().splitlines()
  block = lines[lines.index("TASKS = [") + 1:]
  block = block[:block.index("]")]
  return [line.split('"')[1] for line in block if line.strip().startswith('Task("')]


TASK_NAMES = _names(BENCHMARKS / "control_suite.py")


def test_the_suite_has_its_tasks():
  assert set(TASK_NAMES) == {"acrobot_swingup", "acrobot_balance", "cartpole_swingup",
                             "cartpole_balance", "pendulum_swingup", "point_mass_reach",
                             "reacher_reach", "swimmer_reach", "hopper_hop", "walker_walk"}


@pytest.mark.parametrize("name", TASK_NAMES)
def test_doing_nothing_does_not_solve_a_task(suite, name):
  # The success predicate on an episode of zero controls from the task's first start: never
  # solved (a predicate that cannot fail would make the suite's table meaningless).
  task = {t.name: t for t in suite.TASKS}[name]
  model = suite.load_model(task)
  nstep = round(task.control_s / model.opt.timestep)
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    setup = task.setup(model, sim, task.control_s)
    start = setup.start(np.random.default_rng(0))
    assert start.shape == (sim.layout.size,) and np.all(np.isfinite(start))
    steps = round(task.seconds / task.control_s)
    states, _ = mjbatch_jax.rollout(jnp.asarray(start)[None], jnp.zeros((1, steps, model.nu)),
                                    sim.params(1), nstep=nstep)
    rows = np.concatenate([start[None], np.asarray(states[0])])
    solved, numbers = setup.solved(rows)
    assert not solved, numbers
    assert numbers and all(np.isfinite(v) for v in numbers.values())
    # The residual has the cost's size on the start row.
    obs = (mjbatch_jax.forward(jnp.asarray(start)[None], sim.params(1), setup.cost.observe)
           if setup.cost.observe else {})
    r = setup.cost.residual(jnp.asarray(start), jnp.zeros(model.nu),
                            jax.tree.map(lambda x: x[0], obs), jnp.asarray(0))
    assert r.shape == (sum(term.size for term in setup.cost.terms),)


def test_a_hopper_on_its_knee_is_not_solved(suite):
  # Fallen onto its knee (thigh on the floor, foot up: a pose a planner reached), the hopper
  # holds its torso at 0.615 m, above the 0.6 m floor of the test, upright and 1.2 m ahead: only
  # the check that its thigh is on the floor refuses it.
  task = {t.name: t for t in suite.TASKS}["hopper_hop"]
  model = suite.load_model(task)
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    setup = task.setup(model, sim, task.control_s)
    start = setup.start(np.random.default_rng(0))
    kneeling = start.copy()
    kneeling[sim.layout.qpos] = (1.2, -0.385, 0.0, -0.1, 0.17, 2.23, -0.29)
    solved, numbers = setup.solved(np.stack([start, kneeling]))
  assert numbers["moved"] == pytest.approx(1.2) and numbers["lowest_torso"] > 0.6
  assert numbers["worst_tilt"] < 0.8 and numbers["steps_upper_body_down"] == 1 and not solved


def test_a_reduced_run_reports_every_task(suite, tmp_path):
  # The hopper's policy is trained by Brax (the rl extra, .ci/run's RL leg).
  pytest.importorskip("brax", reason="the hopper's policy trains with Brax: pip install -e '.[rl]'")
  result = suite.main(["--quick", "--out", str(tmp_path)])
  written = json.loads(next(tmp_path.glob("control_suite-*.json")).read_text())
  assert [e["task"] for e in written["tasks"]] == TASK_NAMES == [e["task"] for e in
                                                                result["tasks"]]
  for entry in written["tasks"]:
    assert entry["starts"] == 1 and entry["solved"] in (0, 1)
    assert entry["planner"] in ("ilqr", "predictive", "mppi", "cem", "ppo")
    assert entry["real_time_factor"] > 0 and np.isfinite(entry["cost_per_step"])
  # The hopper's policy is trained in the run (2 iterations when --quick), its checkpoint kept.
  (hopper,) = [e for e in written["tasks"] if e["planner"] == "ppo"]
  assert hopper["task"] == "hopper_hop" and hopper["training"]["iterations"] == 2
  assert hopper["training"]["train_wall_s"] > 0
  assert (tmp_path / "control_suite" / hopper["training"]["checkpoint"]).is_file()


def test_the_hopper_policy_env_pays_for_hopping_and_ends_at_a_fall(suite):
  import hopper_policy  # pyright: ignore[reportMissingImports]  (benchmarks/, on the path)

  env = hopper_policy.HopperHop(suite.suite_xml("hopper"), num_threads=1)
  try:
    state = env.reset(jax.random.PRNGKey(0))
    assert state.obs.shape == (env.mj_model.nq - 1 + env.mj_model.nv,)
    stood = env.step(state, jnp.zeros(env.action_size))
    # Up and still: the up reward and the speed's bell at 0 m/s.
    still = hopper_policy.UP_REWARD + np.exp(-(hopper_policy.SPEED / hopper_policy.SPEED_WIDTH)**2)
    assert not stood.done and stood.reward == pytest.approx(still, abs=0.01)
    # The same state moving forward at the rewarded speed earns the most: 0.5 + 1.
    qvel = stood.data.qvel.at[0].set(hopper_policy.SPEED)
    moving = env.step(stood.replace(data=stood.data.replace(qvel=qvel)),
                      jnp.zeros(env.action_size))
    assert moving.reward > 1.45 and not moving.done
    # Pitched past the tilt allowed: the episode ends.
    qpos = stood.data.qpos.at[2].set(hopper_policy.TILT + 0.2)
    tilted = env.step(stood.replace(data=stood.data.replace(qpos=qpos)),
                      jnp.zeros(env.action_size))
    assert tilted.done
  finally:
    env.close()


def test_an_unknown_task_is_refused(suite):
  with pytest.raises(SystemExit):
    suite.main(["--tasks", "acrobot_swingup,backflip"])
