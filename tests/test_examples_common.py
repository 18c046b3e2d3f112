"""examples/common.py: the flags, result files and helpers every example uses."""

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
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


def test_example_parser_has_the_standard_flags_and_the_mpc_ones_when_asked(tmp_path):
  args = common.parse(common.example_parser("task", "A task.", threads=2),
                      ["--results", str(tmp_path)])
  assert args.out == tmp_path / "task.npz" and args.threads == 2 and not args.play
  assert not hasattr(args, "steps") and not hasattr(args, "method")
  args = common.parse(common.example_parser("mpc", None, mpc_steps=7), ["--method", "cem"])
  assert (args.steps, args.method, args.out.name) == (7, "cem", "mpc.npz")
  with pytest.raises(SystemExit):
    common.parse(common.example_parser("mpc", None, mpc_steps=7), ["--method", "ilqr"])


def test_run_mpc_is_the_receding_horizon_loop(cartpole, capsys):
  with mjbatch_jax.Simulator(cartpole, num_threads=1) as sim:
    lay = sim.layout

    def residual(x, u, obs, t):
      return jnp.concatenate([x[lay.qpos], 0.1 * u])

    cost = control.Cost(residual, (control.Term(cartpole.nq), control.Term(cartpole.nu)))
    settings = control.PredictiveSettings(8, 3, noise=0.5)
    planner = control.sampling(cost, sim.params(1), horizon=5, nstep=2, settings=settings)
    start = sim.init_state(1)[0].at[lay.qpos.start + 1].set(0.3)
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


def test_fingerprint_follows_the_model(cartpole):
  first = common.model_fingerprint(cartpole, 1)
  assert first == common.model_fingerprint(cartpole, 1) != common.model_fingerprint(cartpole, 2)
  cartpole.body_mass[1] += 1
  assert common.model_fingerprint(cartpole, 1) != first
