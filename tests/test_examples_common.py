"""examples/common.py: the flags, result files and helpers every example uses."""

import argparse
import dataclasses
import io
import json
import re
import select
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjbatch_jax
from mjbatch_jax import control

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
import common  # noqa: E402  # pyright: ignore[reportMissingImports]  (as the examples do)


def test_result_round_trip_and_refusals(tmp_path):
  path = tmp_path / "x.npz"
  common.save_result(path, "task", {"ctrl": np.arange(6.0).reshape(3, 2)},
                     {"cost": np.float64(1.5), "shape": (3, 2)}, version="v1")
  arrays, meta = common.load_result(path, "task", version="v1", keys=("ctrl",))
  np.testing.assert_array_equal(arrays["ctrl"], np.arange(6.0).reshape(3, 2))
  assert meta == {"cost": 1.5, "shape": [3, 2]}
  assert not list(tmp_path.glob("*.tmp.npz"))  # written through a temporary file, then moved
  with pytest.raises(SystemExit, match="another version"):
    common.load_result(path, "task", version="v2")
  with pytest.raises(SystemExit, match="not a 'other' one"):
    common.load_result(path, "other")
  with pytest.raises(SystemExit, match="lacks"):
    common.load_result(path, "task", keys=("gains",))
  with pytest.raises(SystemExit, match="no result file"):
    common.load_result(tmp_path / "missing.npz", "task")
  (tmp_path / "bad.npz").write_bytes(b"not a zip")
  with pytest.raises(SystemExit, match="not a result saved"):
    common.load_result(tmp_path / "bad.npz", "task")


def test_check_arrays_sizes_names_dtypes_and_finiteness():
  path = Path("r.npz")
  arrays = {"ctrl": np.zeros((5, 2)), "states": np.zeros((6, 4)), "knots": np.arange(3),
            "flags": np.ones(2, bool)}
  common.check_arrays(path, arrays, {"ctrl": ("T", 2), "states": ("T+1", None),
                                     "knots": (3,), "flags": ("F",)})
  refused = {
    "r.npz: its 'ctrl' has shape (5, 2), expected (T, 3) where T = 5 (from 'ctrl')":
      {"ctrl": ("T", 3)},
    "its 'states' has shape (6, 4), expected (T, any) where T = 5 (from 'ctrl')":
      {"ctrl": ("T", 2), "states": ("T", None)},
    "its 'states' has shape (6, 4), expected (T+6, 4);": {"states": ("T+6", 4)},  # T >= 1
    "its 'knots' has shape (3,), expected (3, 1)": {"knots": (3, 1)},
    "its 'ctrl' has shape (5, 2), expected (any,)": {"ctrl": (None,)},
    "r.npz lacks 'gains'": {"gains": (1,)}}
  for message, shapes in refused.items():
    with pytest.raises(SystemExit, match=re.escape(message)):
      common.check_arrays(path, arrays, shapes)
  for bad, message in ((np.array(["a"]), "holds <U1, not real numbers"),
                       (np.array([1 + 1j]), "holds complex128, not real numbers"),
                       (np.array([0.0, np.inf]), "holds NaN or infinity"),
                       (np.array([np.nan]), "holds NaN or infinity")):
    with pytest.raises(SystemExit, match=re.escape(f"its 'x' {message}; solve again")):
      common.check_arrays(path, {"x": bad}, {"x": (None,)})
  with pytest.raises(ValueError, match="a name or name\\+k"):  # the caller's mistake
    common.check_arrays(path, arrays, {"ctrl": ("T-1", 2)})


def test_load_result_checks_the_shapes_a_dict_of_keys_gives(tmp_path):
  path = tmp_path / "x.npz"
  common.save_result(path, "task", {"ctrl": np.zeros((3, 2)), "states": np.zeros((3, 5))}, {})
  arrays, _ = common.load_result(path, "task", keys={"ctrl": ("T", 2)})
  assert arrays["ctrl"].shape == (3, 2)
  with pytest.raises(SystemExit, match=re.escape("its 'states' has shape (3, 5), expected (T+1, "
                                                 "5) where T = 3 (from 'ctrl'); solve again")):
    common.load_result(path, "task", keys={"ctrl": ("T", 2), "states": ("T+1", 5)})
  with pytest.raises(SystemExit, match=re.escape("lacks ['gains']")):  # names first, as before
    common.load_result(path, "task", keys={"gains": (1,)})


def test_a_result_of_another_config_is_refused_naming_the_fields(tmp_path):
  import dataclasses

  @dataclasses.dataclass(frozen=True)
  class Config:
    steps: int = 3
    gains: tuple = (1.0, 2.0)

  path = tmp_path / "x.npz"
  meta = common.config_meta(Config())
  assert meta["config"] == {"steps": 3, "gains": [1.0, 2.0]}
  common.save_result(path, "task", {"ctrl": np.zeros(2)}, {**meta, "seed": 0})
  _, saved = common.load_result(path, "task", config=Config())
  assert saved["seed"] == 0 and saved["config_fingerprint"] == meta["config_fingerprint"]
  with pytest.raises(SystemExit, match=r"another config: gains \(saved \[1.0, 2.0\], here "
                                       r"\[1.0, 3.0\]\), steps \(saved 3, here 4\)"):
    common.load_result(path, "task", config=Config(4, (1.0, 3.0)))
  common.save_result(path, "task", {"ctrl": np.zeros(2)}, {})  # saved without a config
  with pytest.raises(SystemExit, match="another config: gains"):
    common.load_result(path, "task", config=Config())


def test_secant_finds_a_root_and_stays_in_its_bracket():
  calls = []

  def f(x):
    calls.append(x)
    return x**3 - 2.0, x * 10

  x, payload, misses = common.secant(f, 0.5, 3.0, done=lambda miss, _: abs(miss) < 1e-12)
  assert x == pytest.approx(2 ** (1 / 3), abs=1e-12) and payload == 10 * x
  assert misses[-1] == f(x)[0] and len(misses) == len(calls) - 1 <= 12
  assert all(0.5 <= c <= 3.0 for c in calls)  # once bracketed, never outside
  # A kink the secant overshoots: bisection keeps it inside the bracket; tries bound the calls.
  x, _, misses = common.secant(lambda x: (np.sign(x - 1.0) * abs(x - 1.0) ** 0.2, None), 0.0,
                               3.0, done=lambda miss, _: False, tries=30)
  assert len(misses) == 30 and abs(x - 1.0) < 1e-3


def test_secant_refuses_equal_or_non_finite_starts_and_no_tries():
  """Equal starts divided by zero at the first secant step (ZeroDivisionError); each is now a
  ValueError naming the argument, before f is called."""

  def f(x):
    raise AssertionError("f was called")

  never = {"done": lambda miss, _: False}
  for x0, x1 in ((1.0, 1.0), (2, 2.0), (np.nan, 1.0), (0.0, np.inf), (True, 2.0), ("1", 2.0)):
    with pytest.raises(ValueError, match=r"x0 and x1 must be two different finite numbers"):
      common.secant(f, x0, x1, **never)
  for tries in (0, -1, 2.5, True):
    with pytest.raises(ValueError, match=r"tries must be an int >= 1"):
      common.secant(f, 0.0, 1.0, tries=tries, **never)


def test_g1_scene_adds_the_floor_sensors_and_refuses_other_robots(tmp_path):
  from tests.models import G1, MODELS_MISSING

  if not G1.exists():
    pytest.skip(MODELS_MISSING)
  model = common.g1_scene(None, ("torso_link",))
  columns = common.g1_floor_columns(model)
  data = mujoco.MjData(model)
  mujoco.mj_resetDataKeyframe(model, data, 0)
  mujoco.mj_forward(model, data)
  left, right, robot = data.sensordata[columns]
  assert left > 0 and right > 0 and robot == left + right  # standing: only the feet down
  with pytest.raises(SystemExit, match=r"has no bodies named \['nose'\]"):
    common.g1_scene(None, ("nose",))
  ball = tmp_path / "ball.xml"
  ball.write_text('<mujoco><worldbody><body name="pelvis"><freejoint/><geom size=".1"/>'
                  '<body name="left_ankle_roll_link"><joint/><geom size=".1"/></body>'
                  '<body name="right_ankle_roll_link"><geom size=".1"/></body></body>'
                  '</worldbody></mujoco>')
  with pytest.raises(SystemExit, match="floor"):
    common.g1_scene(ball)
  ball.write_text(ball.read_text().replace("<worldbody>", '<worldbody><geom name="floor" '
                                           'type="plane" size="1 1 .1"/>'))
  with pytest.raises(SystemExit, match="one position servo per hinge"):
    common.g1_scene(ball)
  ball.write_text(ball.read_text().replace("<joint/>", "").replace(
    "<mujoco>", '<mujoco><option gravity="0 0 9.81"/>'))
  with pytest.raises(SystemExit, match=r"expected gravity along -z, got \[0.0, 0.0, 9.81\]"):
    common.g1_scene(ball)


def test_g1_synergies_name_both_sides_and_refuse_a_missing_servo():
  from tests.models import G1, MODELS_MISSING

  if not G1.exists():
    pytest.skip(MODELS_MISSING)
  model = common.g1_scene(None)
  rows = common.g1_synergies(model, ("knee", "waist_pitch", "elbow"))
  names = [[model.actuator(i).name for i in np.flatnonzero(row)] for row in rows]
  assert names == [["left_knee_joint", "right_knee_joint"], ["waist_pitch_joint"],
                   ["left_elbow_joint", "right_elbow_joint"]]
  assert rows.shape == (3, model.nu) and set(np.unique(rows)) == {0.0, 1.0}
  with pytest.raises(SystemExit, match=r"no actuators \['left_tail_joint', 'right_tail_joint'\]"):
    common.g1_synergies(model, ("knee", "tail"))


def test_g1_at_rest_holds_the_pose_it_starts_in():
  """The state's pose is qpos, its servo targets qpos's joint angles, nothing moving; MuJoCo
  reads the row back as that pose and those controls."""
  import mjbatch_jax
  from tests.models import G1, MODELS_MISSING

  if not G1.exists():
    pytest.skip(MODELS_MISSING)
  model = common.g1_scene(None)
  qpos = model.key_qpos[0].copy()
  qpos[7:] += 0.05
  with mjbatch_jax.Simulator(model, num_threads=1) as sim:
    row = np.asarray(common.g1_at_rest(sim, qpos))
    np.testing.assert_array_equal(row[sim.layout.qpos], qpos)
    np.testing.assert_array_equal(row[sim.layout.ctrl], qpos[7:])
    assert not row[sim.layout.qvel].any()
    data = mujoco.MjData(model)
    mujoco.mj_setState(model, data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
    assert np.array_equal(data.ctrl, qpos[7:]) and np.array_equal(data.qpos, qpos)


def test_config_flags_set_a_frozen_configs_fields():
  @dataclasses.dataclass(frozen=True)
  class Config:
    samples: int = 8
    iterations: int = 3
    spread: float = 0.1

  flags = {"samples": (2, 64, "candidates"), "iterations": (0, 10, "iterations")}
  parser = argparse.ArgumentParser()
  common.config_flags(parser, Config(), flags)
  assert "candidates (default 8)" in parser.format_help()
  args = parser.parse_args(["--iterations", "5"])
  assert common.config_from(args, Config(), flags) == Config(iterations=5)
  with pytest.raises(SystemExit):
    parser.parse_args(["--samples", "1"])


def test_config_flags_refuse_a_default_outside_the_flags_range():
  """argparse never checks a default against its type: a config value the flag refuses ran
  unchecked. Now a ValueError naming the field, the range and the value."""

  @dataclasses.dataclass(frozen=True)
  class Config:
    samples: int = 8
    spread: float = 0.1

  for flags, message in (({"samples": (10, 64, "candidates")},
                          r"Config.samples must be an integer in \[10, 64\] \(candidates\), the "
                          r"range of --samples, got 8"),
                         ({"spread": (0, 1, "spread")}, r"Config.spread must be an integer"),
                         ({"missing": (0, 1, "x")}, r"Config has no field 'missing'")):
    with pytest.raises(ValueError, match=message):
      common.config_flags(argparse.ArgumentParser(), Config(), flags)


def test_standard_flags_and_defaults(tmp_path):
  parser = argparse.ArgumentParser()
  common.add_standard_args(parser, "task", threads=2)
  args = common.parse(parser, ["--results", str(tmp_path)])
  assert args.out == tmp_path / "task.npz" and args.threads == 2 and not args.play
  with pytest.raises(SystemExit):
    common.parse(parser, ["--threads", "-1"])
  assert common.int_in(1, 3, "x")("2") == 2
  with pytest.raises(argparse.ArgumentTypeError, match=r"\[1, 3\]"):
    common.int_in(1, 3, "x")("7")
  with pytest.raises(argparse.ArgumentTypeError, match="> 0"):
    common.positive_float("x")("nan")


def test_out_is_checked_before_any_work(tmp_path, capsys):
  """--out names an .npz a result can be written to, and never overwrites anything else: the
  example's JSON, plot and video go beside it under other suffixes."""
  parser = common.example_parser("task", None)

  def refused(message, *argv, **kw):
    with pytest.raises(SystemExit) as stop:
      common.parse(parser, list(argv), **kw)
    assert stop.value.code == 2 and message in capsys.readouterr().err

  refused("--out must name an .npz file", "--out", str(tmp_path / "plan.json"))
  refused("--out must name an .npz file", "--out", str(tmp_path / "plan.png"), "--play")
  (tmp_path / "folder.npz").mkdir()
  refused("is a folder, not a file name", "--out", str(tmp_path / "folder.npz"))
  (tmp_path / "file").write_text("x")
  refused("cannot be written", "--out", str(tmp_path / "file" / "x.npz"))
  refused("must be an integer in [0, 4294967295]", "--seed", "-1")
  refused("must be an integer in [0, 4294967295]", "--seed", str(2**64))
  notes = tmp_path / "notes.npz"
  notes.write_text("my notes")
  refused("exists and is not a task result: not overwriting it", "--out", str(notes))
  assert notes.read_text() == "my notes"
  other = common.save_result(tmp_path / "other.npz", "another", {"x": np.zeros(1)})
  refused("exists and is not a task result", "--out", str(other))
  mine = common.save_result(tmp_path / "mine.npz", "task", {"x": np.zeros(1)})
  assert common.parse(parser, ["--out", str(mine)]).out == mine  # solved again: replaced
  assert common.parse(parser, ["--out", str(other), "--play"]).out == other  # load_result says
  assert common.parse(parser, ["--out", str(notes)], replaceable=lambda path: True).out == notes


def test_load_result_names_the_config_before_the_version_that_holds_it(tmp_path):
  @dataclasses.dataclass(frozen=True)
  class Config:
    samples: int = 40

  path = common.save_result(tmp_path / "x.npz", "task", {"ctrl": np.zeros(2)},
                            {"config": Config()}, version="v(40)")
  assert common.load_result(path, "task", "v(40)", "ctrl", config=Config())[1]["config"] == {
    "samples": 40}
  with pytest.raises(SystemExit, match=r"another config: samples \(saved 40, here 41\)"):
    common.load_result(path, "task", "v(41)", config=Config(41))
  with pytest.raises(SystemExit, match=r"lacks \['gains'\]"):
    common.load_result(path, "task", keys="gains")
  path = common.save_result(tmp_path / "y.npz", "task", {"ctrl": np.zeros(2)})
  archive = mjbatch_jax.archive
  arrays, header = archive.read(path)
  archive.write(path, arrays, {**header, "meta": [1, 2]})
  with pytest.raises(SystemExit, match="its metadata is not a JSON object"):
    common.load_result(path, "task", config=Config())


def test_write_json_replaces_the_file_whole(tmp_path):
  path = common.write_json(tmp_path / "a" / "x.json", {"v": np.float64(1.5), "n": np.arange(2)})
  assert path.read_text() == '{\n  "v": 1.5,\n  "n": [\n    0,\n    1\n  ]\n}\n'
  with pytest.raises(TypeError):
    common.write_json(path, {"v": object()})
  assert path.read_text().startswith('{\n  "v": 1.5') and [p.name for p in path.parent.iterdir()
                                                         ] == ["x.json"]


def test_render_refuses_a_bad_fps_before_rendering(cartpole, tmp_path, monkeypatch):
  """fps 0 divided by zero after every frame was rendered (a negative one wrote a GIF of
  negative frame times); each is a ValueError naming fps before any GL is touched."""

  def no_renderer(*args, **kwargs):
    raise AssertionError("a renderer was made")

  monkeypatch.setattr(common.mujoco, "Renderer", no_renderer)
  rows = np.zeros((2, mujoco.mj_stateSize(cartpole, mujoco.mjtState.mjSTATE_INTEGRATION)))
  for fps in (0, -10.0, float("nan"), float("inf"), True, "30"):
    with pytest.raises(ValueError, match=r"render: fps must be a finite number > 0"):
      common.render(cartpole, rows, tmp_path / "v.gif", fps)  # pyright: ignore[reportArgumentType]
  assert not list(tmp_path.iterdir())


def test_json_written_is_strict_non_finite_floats_null(tmp_path, capsys):
  """Python's json writes Infinity and NaN, which strict parsers refuse (g1_jump --iterations 0:
  best_value inf); write_json and print_summary write null for them."""

  def strict(text):
    def refuse(constant):
      raise AssertionError(f"{constant} in {text!r}")

    return json.loads(text, parse_constant=refuse)

  value = {"best": float("inf"), "low": -np.inf, "f32": np.float32("nan"), "ok": np.float64(2.5),
           "rows": np.array([[1.0, np.inf], [np.nan, -0.5]]), "jax": jnp.array([np.nan, 1.0]),
           "nested": ({"x": float("nan")}, [np.float16("-inf"), 3]), "n": np.int64(4)}
  want = {"best": None, "low": None, "f32": None, "ok": 2.5, "rows": [[1.0, None], [None, -0.5]],
          "jax": [None, 1.0], "nested": [{"x": None}, [None, 3]], "n": 4}
  assert strict(common.write_json(tmp_path / "x.json", value).read_text()) == want
  common.print_summary(value)
  assert strict(capsys.readouterr().out.strip()) == want


def test_load_scene_refuses_what_is_not_the_robot(tmp_path):
  bad = tmp_path / "bad.xml"
  bad.write_text("<html></html>")
  with pytest.raises(SystemExit, match="MuJoCo cannot load it"):
    common.load_scene(bad, "unitree_go1")
  ball = tmp_path / "ball.xml"
  ball.write_text('<mujoco><worldbody><body name="ball"><freejoint/><geom size=".1"/></body>'
                  '</worldbody></mujoco>')
  with pytest.raises(SystemExit, match=r"has no bodies named \['trunk'\]"):
    common.load_scene(ball, "unitree_go1", bodies=("trunk",))
  with pytest.raises(SystemExit, match="has no keyframe"):
    common.load_scene(ball, "unitree_go1", bodies=("ball",))
  with pytest.raises(SystemExit, match="no model at"):
    common.load_scene("", "unitree_go1")  # not the default model
  with pytest.raises(SystemExit, match="MuJoCo cannot load it"):
    common.g1_scene(bad)


def test_example_parser_has_the_standard_flags_and_the_mpc_ones_when_asked(tmp_path):
  args = common.parse(common.example_parser("task", "A task.", threads=2),
                      ["--results", str(tmp_path)])
  assert args.out == tmp_path / "task.npz" and args.threads == 2 and not args.play
  assert not hasattr(args, "steps") and not hasattr(args, "method")
  args = common.parse(common.example_parser("mpc", None, mpc_steps=7), ["--method", "cem"])
  assert (args.steps, args.method, args.out.name) == (7, "cem", "mpc.npz")
  with pytest.raises(SystemExit):
    common.parse(common.example_parser("mpc", None, mpc_steps=7), ["--method", "ilqr"])
  assert not hasattr(args, "model")  # --model only for a robot of the shared models
  robot = common.example_parser("walk", None, robot="unitree_go1")
  assert common.parse(robot, []).model is None  # robot_scene then finds the shared one
  assert common.parse(robot, ["--model", "my/scene.xml"]).model == Path("my/scene.xml")
  assert "unitree_go1/scene.xml" in robot.format_help()


def _cartpole_problem(sim: mjbatch_jax.Simulator) -> tuple[control.Cost, jax.Array]:
  """A cost on the cart-pole's positions and controls, and a start with the pole 0.3 rad off."""
  lay, model = sim.layout, sim.model

  def residual(x, u, obs, t):
    return jnp.concatenate([x[lay.qpos], 0.1 * u])

  cost = control.Cost(residual, (control.Term(model.nq), control.Term(model.nu)))
  return cost, sim.init_state(1)[0].at[lay.qpos.start + 1].set(0.3)


def test_run_mpc_is_the_receding_horizon_loop(cartpole, capsys):
  with mjbatch_jax.Simulator(cartpole, num_threads=1) as sim:
    lay = sim.layout
    cost, start = _cartpole_problem(sim)
    settings = control.PredictiveSettings(8, 3, noise=0.5)
    planner = control.sampling(cost, sim.params(1), horizon=5, nstep=2, settings=settings)
    rows, timing = common.run_mpc(planner, sim.params(1), start, 3, 3, every=2,
                                  report=lambda k, s: f"hinge {float(s[lay.qpos.start + 1]):.4f}")
    # The same as control.receding_horizon's step from planner.init(), keyed fold_in(seed, k).
    step, state, plan = control.receding_horizon(planner, sim.params(1)), start, planner.init()
    expected = [np.asarray(start)]
    for k in range(3):
      state, plan, _ = step(state, plan, jax.random.fold_in(jax.random.PRNGKey(3), k))
      expected.append(np.asarray(state))
  np.testing.assert_array_equal(rows, np.array(expected))
  assert rows.shape == (4, sim.nstate) and not np.array_equal(rows[1], rows[0])
  assert sorted(timing) == ["cpu_per_step", "seconds_per_step"]
  assert all(np.isfinite(v) and v >= 0 for v in timing.values())
  printed = capsys.readouterr().out.splitlines()  # steps 0 and 2 (every 2, and the last)
  assert printed == [f"step {k:4d}: hinge {expected[k + 1][lay.qpos.start + 1]:.4f}"
                     for k in (0, 2)]


def test_ilqr_with_progress_is_ilqr_and_counts_its_iterations(cartpole, capsys):
  with mjbatch_jax.Simulator(cartpole, num_threads=1) as sim:
    cost, start = _cartpole_problem(sim)
    guess = jnp.zeros((6, cartpole.nu))
    result = common.ilqr_with_progress(cost, sim.params(1), start, guess, nstep=2,
                                       iterations=3)
    plain = jax.block_until_ready(control.ilqr(cost, sim.params(1), start, guess, nstep=2,
                                               iterations=3))
  np.testing.assert_array_equal(result.ctrls, plain.ctrls)
  assert int(result.iterations) >= 1 and float(result.cost) < float(result.costs[0])
  lines = [line for line in capsys.readouterr().out.splitlines() if "iLQR iteration" in line]
  assert len(lines) == int(result.iterations)  # its verbose line per iteration, shown


def test_fingerprint_follows_the_model(cartpole):
  first = common.model_fingerprint(cartpole, 1)
  assert first == common.model_fingerprint(cartpole, 1) != common.model_fingerprint(cartpole, 2)
  cartpole.body_mass[1] += 1
  assert common.model_fingerprint(cartpole, 1) != first


def test_fingerprint_ignores_where_the_files_are(tmp_path):
  # A checkout elsewhere loads the same robot from another folder: its results must still play.
  scene = """<mujoco><asset><mesh file="wedge.obj"/></asset><worldbody><body name="{}">
    <freejoint/><geom type="mesh" mesh="wedge"/></body></worldbody></mujoco>"""
  wedge = "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n"
  models = []
  for folder, body in ((tmp_path / "here", "box"), (tmp_path / "there" / "deeper", "box"),
                       (tmp_path / "renamed", "crate")):
    folder.mkdir(parents=True)
    (folder / "wedge.obj").write_text(wedge)
    (folder / "scene.xml").write_text(scene.format(body))
    models.append(mujoco.MjModel.from_xml_path(str(folder / "scene.xml")))
  here, there, renamed = models
  assert here.paths != there.paths  # what the fingerprint must not see
  assert common.model_fingerprint(here, 1) == common.model_fingerprint(there, 1)
  assert common.model_fingerprint(renamed, 1) != common.model_fingerprint(here, 1)
  there.body_mass[1] *= 2
  assert common.model_fingerprint(there, 1) != common.model_fingerprint(here, 1)


# -- progress --------------------------------------------------------------------------------------


class Clock:
  """A clock the test moves by hand."""

  def __init__(self) -> None:
    self.now = 1000.0

  def __call__(self) -> float:
    return self.now


def test_progress_writes_plain_lines_at_a_bounded_rate_when_not_a_terminal(capsys):
  stream, clock = io.StringIO(), Clock()
  assert not stream.isatty()
  bar = common.Progress(10, "search", stream=stream, interval=10.0, clock=clock)
  assert bar.bar is None
  clock.now += 30.0  # the first iteration compiles
  bar.update(postfix="best 1.0")
  for i in range(2, 6):
    clock.now += 2.0
    bar.update(postfix=f"best {i}.0")
    if i == 3:
      bar.write("iteration 3: a log line")
  bar.close()
  lines = stream.getvalue().splitlines()
  # One line at the first update (30 s after the start), none for the next four (2 s apart, under
  # the 10 s interval), one at the close.
  assert lines == ["search 1/10 (10%), elapsed 30 s, about 4 min 30 s left: best 1.0",
                   "search 5/10 (50%), done in 38 s: best 5.0"]
  # The estimate leaves out the first update's compilation: 2 s per iteration since.
  assert bar.left(clock.now) == pytest.approx(10.0)
  clock.now += 11.0
  assert "about 24 s left" in bar.line()  # 19 s for the 4 iterations since the first
  assert capsys.readouterr().out == "iteration 3: a log line\n"  # the log line on stdout
  assert common.duration(3725) == "1 h 02 min" and common.duration(59.4) == "59 s"
  bar.total = 7  # the loop learned it ends sooner
  assert bar.line(clock.now).startswith("search 5/7 (71%),") and bar.left(clock.now) == 9.5


def test_progress_lines_come_further_apart_as_the_run_goes_on():
  stream, clock = io.StringIO(), Clock()
  bar = common.Progress(None, "training", stream=stream, interval=10.0, clock=clock)
  for _ in range(100):  # 1,000 s, an update every 10 s
    clock.now += 10.0
    bar.update(10)
  bar.close()
  lines = stream.getvalue().splitlines()
  # The gap grows from 10 s to a tenth of the time elapsed (at most a minute): 30 lines and the
  # last rather than 100.
  times = [int(line.split()[1]) for line in lines]  # the count is the time here
  gaps = np.diff(times[:-1])
  least = np.clip(np.array(times[1:-1]) / 10, 10, 60)  # at the time of the later line
  assert len(lines) == 31 and np.all(gaps >= least) and np.all(gaps < least + 10), times
  assert lines[0] == "training 10 it, elapsed 10 s"  # no total: no estimate
  assert lines[-1] == "training 1000 it, done in 16 min 40 s"


def test_progress_is_silent_under_quiet(capsys):
  stream = io.StringIO()
  parser = argparse.ArgumentParser()
  common.add_standard_args(parser, "task")
  args = common.parse(parser, ["--quiet"])
  assert args.quiet
  for bar in (common.progress(3, "x", args, stream=stream),
              common.progress(3, "x", args, stream=stream, quiet=True),
              common.progress(3, "x", stream=stream),  # follows the last parse()'s --quiet
              common.progress(3, "x", common.parse(parser, []), stream=stream, quiet=True)):
    with bar:
      for _ in range(3):
        bar.update(postfix="note")
        bar.write("a log line")
    assert bar.quiet and bar.bar is None
  assert stream.getvalue() == "" and capsys.readouterr().out == ""
  assert not common.progress(3, "x", stream=stream).quiet  # the last parse() had no --quiet


def test_progress_draws_a_tqdm_bar_with_the_time_left_on_a_terminal(capsys):
  pytest.importorskip("tqdm")
  import os
  import pty

  main, child = pty.openpty()  # a terminal of no size, as under `script` from a pipe
  try:
    with os.fdopen(child, "w", closefd=False) as tty:
      assert tty.isatty()
      assert common.Progress(4, "x", stream=tty, plain=True).bar is None  # lines on request
      bar = common.Progress(4, "CEM", stream=tty)
      assert bar.bar is not None
      for i in range(4):
        time.sleep(0.15)
        bar.update(postfix=f"best {i}")
        if i == 1:
          bar.write("iteration 2: a log line")
      bar.close()
    drawn = b""
    while select.select([main], [], [], 0.5)[0]:
      chunk = os.read(main, 65536)
      if not chunk:
        break
      drawn += chunk
  finally:
    os.close(main)
    os.close(child)
  text = drawn.decode()
  assert "\r" in text  # redrawn in place
  final = text.split("\r")[-2] if text.endswith("\r\n") else text.split("\r")[-1]
  assert re.search(r"CEM: 100%\|.*\| 4/4 \[00:0\d elapsed, 00:00 left, best 3\]", final), final
  # While it ran, the estimate was a time, not "?".
  assert re.search(r"CEM:  *[257]\d%\|.*\| [123]/4 \[00:0\d elapsed, 00:0\d left, best", text), text
  assert "iteration" not in text  # the log line went to stdout, above the bar
  assert capsys.readouterr().out == "iteration 2: a log line\n"


def test_progress_follows_lines_printed_from_a_jitted_loop(capsys):
  stream = io.StringIO()

  @jax.jit
  def loop(x):
    def body(i, x):
      jax.debug.print("iteration {i}: cost {c:.3f}", i=i + 1, c=x)
      return x / 2

    return jax.lax.fori_loop(0, 5, body, x)

  bar = common.Progress(5, "solve", stream=stream, interval=0.0)
  with bar.follow(r"iteration (?P<n>\d+): (?P<cost>cost \S+)"):
    print("something else")
    result = jax.block_until_ready(loop(jnp.asarray(8.0)))
  bar.close()
  assert float(result) == 0.25  # what it computes is untouched
  assert bar.n == 5 and bar.postfix == "cost 0.500"
  out = capsys.readouterr().out.splitlines()
  assert out == ["something else", *[f"iteration {i}: cost {8 / 2 ** (i - 1):.3f}"
                                     for i in range(1, 6)]]
  assert stream.getvalue().splitlines()[-1] == "solve 5/5 (100%), done in 0 s: cost 0.500"
  with common.Progress(5, "quiet", stream=stream, quiet=True).follow(r"iteration (\d+)") as q:
    jax.block_until_ready(loop(jnp.asarray(8.0)))
  assert q.n == 5 and capsys.readouterr().out == ""  # counted, not shown


def test_check_memory_refuses_what_cannot_fit(monkeypatch):
  have = common.available_memory()
  assert have is None or have > 0
  monkeypatch.setattr(common, "available_memory", lambda: 4 * 10**9)
  common.check_memory(3.9e9, "--sims 10")
  with pytest.raises(SystemExit, match=re.escape(
      "--sims 11 needs about 4.1 GB at once, more than the 4 GB this machine has available")):
    common.check_memory(4.1e9, "--sims 11")
  monkeypatch.setattr(common, "available_memory", lambda: None)  # unknown: not refused
  common.check_memory(1e30, "--sims 12")
