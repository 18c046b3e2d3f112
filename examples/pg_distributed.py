"""Data-parallel policy gradient for a cart-pole over several processes, with checkpoints.

  python examples/pg_distributed.py --processes 2                  # 2 local processes
  python -m mjbatch_jax.launch -n 2 examples/pg_distributed.py     # the same
  python examples/pg_distributed.py --processes 2 --resume         # continue from the checkpoint

A small tanh network balances a pole on a cart (inline model below) from random starts. The
policy gradient is analytic: jax.grad through a lax.scan of `mjbatch_jax.step` (its derivative
rules difference the physics in float64 inside the engine). Each iteration simulates
--sims episodes split over all processes' CPU devices (`mjbatch_jax.distributed.setup`): every
process runs its own episodes, takes the gradient of their mean cost, and `jax.lax.pmean` over
the mesh averages the gradients (a gloo all-reduce across processes), so every process applies
the same Adam step to the same replicated policy. The whole iteration is one jitted shard_map.

Episode i of iteration k starts from a perturbation drawn from the iteration's key folded with
i, the global episode index: the episodes and so the result do not depend on how many processes
share them (up to the order of the gradient's sum).

Every --checkpoint-every iterations process 0 writes the policy, Adam's state, the key and the
iteration to --checkpoint (an .npz, written whole then renamed; by default beside --out as
<out>.checkpoint.npz, or without --out pg_distributed.checkpoint.npz in the --results folder,
examples/results unless given); `--resume` continues from it, and gives the same policy bit
for bit as a run that was never interrupted. On several hosts the checkpoint's folder must be
one they share.
"""

import argparse
import os
import signal
import sys
import time
import zipfile
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import common  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import archive, distributed, launch  # noqa: E402

CARTPOLE_XML = """
<mujoco model="cartpole">
  <option timestep="0.01"/>
  <worldbody>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0" limited="true" range="-2 2" damping="0.1"/>
      <geom type="box" size="0.2 0.1 0.05" mass="1"/>
      <body name="pole">
        <joint name="hinge" type="hinge" axis="0 1 0" damping="0.01"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.6" size="0.03" mass="0.2"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slider" gear="10" ctrlrange="-1 1" ctrllimited="true"/></actuator>
</mujoco>
"""

START_SPREAD = np.array([0.5, 0.3, 0.3, 0.3])  # cart x, pole angle, their velocities: +- this
NAME, CHECKPOINT_SUFFIX = "pg_distributed", ".checkpoint.npz"  # the default checkpoint's name


def init_policy(seed: int, hidden: int) -> dict[str, np.ndarray]:
  """obs (x, angle, their velocities) -> tanh layer -> force in [-1, 1]."""
  rng = np.random.default_rng(seed)
  return {
    "w1": 0.3 * rng.standard_normal((4, hidden)), "b1": np.zeros(hidden),
    "w2": 0.3 * rng.standard_normal((hidden, 1)), "b2": np.zeros(1),
  }


def act(policy: dict[str, jax.Array], obs: jax.Array) -> jax.Array:
  hidden = jnp.tanh(obs @ policy["w1"] + policy["b1"])
  return jnp.tanh(hidden @ policy["w2"] + policy["b2"])


def make_iteration(
  dist: distributed.Distributed, horizon: int, optimizer: optax.GradientTransformation
):
  """One jitted iteration over the mesh: episodes, gradient, pmean, Adam step."""
  layout = dist.sim.layout
  axis = dist.axis
  per_device = dist.num_sims // dist.mesh.devices.size

  def episodes_cost(policy, key, rows, state, params):
    """Mean cost of this device's episodes (global indices rows) under policy."""
    starts = jax.vmap(lambda r: jax.random.uniform(jax.random.fold_in(key, r), (4,),
                                                   minval=-1.0, maxval=1.0))(rows)
    starts = starts * jnp.asarray(START_SPREAD)
    state = state.at[:, layout.qpos].add(starts[:, :2]).at[:, layout.qvel].add(starts[:, 2:])

    def knot(state, _):
      obs = jnp.concatenate([state[:, layout.qpos], state[:, layout.qvel]], axis=1)
      force = act(policy, obs)
      state = mjbatch_jax.step(state, force, params)
      qpos, qvel = state[:, layout.qpos], state[:, layout.qvel]
      cost = (qpos[:, 1] ** 2 + 0.1 * qpos[:, 0] ** 2 + 0.01 * qvel[:, 1] ** 2
              + 0.01 * force[:, 0] ** 2)
      return state, cost

    _, costs = jax.lax.scan(knot, state, None, length=horizon)
    return jnp.mean(costs)

  def iteration(policy, opt_state, key_data, state, params):
    key, sub = jax.random.split(jax.random.wrap_key_data(key_data))
    rows = jax.lax.axis_index(axis) * per_device + jnp.arange(per_device)
    # Varying over the mesh, so that grad gives this device's gradient, which pmean averages
    # (jax.grad w.r.t. a replicated value inside shard_map would psum it by itself).
    local = jax.lax.pcast(policy, axis, to="varying")
    cost, grads = jax.value_and_grad(episodes_cost)(local, sub, rows, state, params)
    grads, cost = jax.lax.pmean((grads, cost), axis)
    updates, opt_state = optimizer.update(grads, opt_state, policy)
    return optax.apply_updates(policy, updates), opt_state, jax.random.key_data(key), cost

  return dist.map(iteration, out_specs=P())


def save(path: Path, iteration: int, policy, opt_state, key_data, settings: dict) -> None:
  """Process 0 writes the checkpoint whole, then renames it: never a torn file."""
  arrays = {"iteration": np.int64(iteration), "key": np.asarray(key_data)}
  arrays.update({f"policy/{k}": np.asarray(v) for k, v in policy.items()})
  arrays.update({f"opt/{i}": np.asarray(v) for i, v in enumerate(jax.tree.leaves(opt_state))})
  arrays.update({f"settings/{k}": np.asarray(v) for k, v in settings.items()})
  temporary = path.with_name(path.name + ".tmp.npz")
  np.savez(temporary, **arrays)
  os.replace(temporary, path)


def load(path: Path, policy, opt_state, settings: dict):
  """The checkpoint's iteration, policy, optimizer state and key, checked against settings."""
  with np.load(path) as data:
    for k, v in settings.items():
      if f"settings/{k}" not in data or data[f"settings/{k}"] != v:
        raise SystemExit(f"{path} was written with another --{k.replace('_', '-')}: "
                         f"{data.get(f'settings/{k}')}, not {v}")
    policy = {k: data[f"policy/{k}"] for k in policy}
    leaves, tree = jax.tree.flatten(opt_state)
    opt_state = jax.tree.unflatten(tree, [data[f"opt/{i}"] for i in range(len(leaves))])
    return int(data["iteration"]), policy, opt_state, data["key"]


def train(args: argparse.Namespace) -> dict[str, np.ndarray]:
  model = mujoco.MjModel.from_xml_string(CARTPOLE_XML)
  # In the block, a rank's SystemExit (a checkpoint it cannot read) stops the others at once,
  # where they would wait for it in the next collective.
  with distributed.setup(model, args.sims, num_threads=args.threads) as dist:
    return train_on(args, dist)


def train_on(args: argparse.Namespace, dist: distributed.Distributed) -> dict[str, np.ndarray]:
  me = dist.process_index
  say = print if me == 0 else (lambda *a, **k: None)
  say(f"{dist.num_sims} episodes of {args.horizon} steps per iteration over "
      f"{dist.process_count} process(es), {dist.num_local} here", flush=True)
  optimizer = optax.adam(args.lr)
  settings = {"sims": args.sims, "horizon": args.horizon, "hidden": args.hidden,
              "seed": args.seed, "lr": args.lr}
  policy = init_policy(args.seed, args.hidden)
  opt_state = jax.tree.map(np.asarray, optimizer.init(policy))
  key_data = np.asarray(jax.random.key_data(jax.random.key(args.seed)))
  first = 0
  checkpoint = Path(args.checkpoint)
  if args.resume:  # check_args saw the checkpoint there before any rank started
    try:
      first, policy, opt_state, key_data = load(checkpoint, policy, opt_state, settings)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
      raise SystemExit(f"--resume: {checkpoint} is not a checkpoint of this example "
                       f"({type(e).__name__}: {e})") from None
    say(f"resumed from {checkpoint} at iteration {first}", flush=True)
  policy, opt_state, key_data = dist.replicate((policy, opt_state, key_data))
  iteration = make_iteration(dist, args.horizon, optimizer)
  for k in range(first, args.iterations):
    begin = time.perf_counter()
    policy, opt_state, key_data, cost = iteration(policy, opt_state, key_data, dist.state,
                                                  dist.params)
    cost = float(dist.local(cost))
    done = k + 1
    if done % args.checkpoint_every == 0 or done == args.iterations:
      if me == 0:
        saved_policy, saved_opt_state, saved_key = jax.tree.map(dist.local,
                                                                 (policy, opt_state, key_data))
        save(checkpoint, done, saved_policy, saved_opt_state, saved_key, settings)
      # Nobody goes on (or crashes, below) before the checkpoint is whole.
      multihost_utils.sync_global_devices(f"checkpoint {done}")
    say(f"iteration {done:4d}  cost {cost:.6f}  {time.perf_counter() - begin:.2f} s", flush=True)
    if args.crash_after == done and me == dist.process_count - 1:
      print(f"crashing after iteration {done} (--crash-after)", flush=True)
      os.kill(os.getpid(), signal.SIGKILL)
  final = jax.tree.map(dist.local, policy)  # replicated: every process holds it whole
  if args.out and me == 0:
    np.savez(args.out, **final)
  return final


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
  """The files named and writable before any process starts (argparse checked the counts);
  --checkpoint's default filled in: beside --out, else under --results."""
  if args.checkpoint is None:  # not the working folder, which may differ by rank
    args.checkpoint = (args.results / f"{NAME}{CHECKPOINT_SUFFIX}" if args.out is None
                       else args.out.with_name(args.out.name[:-4] + CHECKPOINT_SUFFIX))
  for flag in ("out", "checkpoint"):
    path = getattr(args, flag)
    if path is not None and not str(path).endswith(".npz"):
      parser.error(f"--{flag} must name an .npz file, got {path}")
  if args.resume and not args.checkpoint.is_file():  # before the ranks start, not in one
    parser.error(f"--resume: no checkpoint at {args.checkpoint}")
  for flag in ("checkpoint", "out"):
    path = getattr(args, flag)
    if path is None:
      continue
    try:
      archive.check_writable(path, f"--{flag}")
    except ValueError as e:
      parser.error(str(e))


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    description="Data-parallel policy gradient for a cart-pole, with checkpoints."
  )
  count = common.int_in
  parser.add_argument("--processes", type=count(1, launch.MAX_PROCESSES, "local processes"),
                      default=1,
                      help="start this many local processes (python -m mjbatch_jax.launch)")
  parser.add_argument("--iterations", type=count(1, 10**6, "training iterations"), default=40,
                      help="training iterations (default 40)")
  parser.add_argument("--sims", type=count(1, 10**6, "episodes per iteration"), default=64,
                      help="episodes per iteration, all processes (default 64)")
  parser.add_argument("--horizon", type=count(1, 10**5, "steps per episode"), default=100,
                      help="steps per episode (default 100)")
  parser.add_argument("--hidden", type=count(1, 10**4, "hidden units"), default=16,
                      help="units of the policy's hidden layer (default 16)")
  parser.add_argument("--lr", type=common.positive_float("Adam's learning rate"), default=1e-2,
                      help="Adam's learning rate (default 0.01)")
  parser.add_argument("--seed", type=count(0, 2**32 - 1, "random seed"), default=0,
                      help="random seed (default 0)")
  # A fixed bound, not one per CPU: every rank parses the same flags, on hosts of any size.
  parser.add_argument("--threads", type=count(0, 1024, "threads per process, 0: one per CPU"),
                      default=1, help="threads per process (default 1)")
  parser.add_argument("--results", type=Path, default=common.RESULTS,
                      help="folder of the default --checkpoint (default examples/results)")
  parser.add_argument("--checkpoint", type=Path, default=None,
                      help=f"the checkpoint .npz (default: beside --out, NAME{CHECKPOINT_SUFFIX} "
                           f"for --out NAME.npz; without --out, {NAME}{CHECKPOINT_SUFFIX} in "
                           f"the --results folder)")
  parser.add_argument("--checkpoint-every", type=count(1, 10**6, "iterations between "
                                                       "checkpoints"), default=10,
                      help="iterations between checkpoints (default 10)")
  parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
  parser.add_argument("--out", type=Path, default=None,
                      help="write the final policy to this .npz")
  parser.add_argument("--crash-after", type=count(1, 10**6, "an iteration"), default=None,
                      help="(for tests) the last process kills itself after this iteration")
  args = parser.parse_args(argv)
  check_args(parser, args)
  if args.processes > 1 and launch.ENV_NUM_PROCESSES not in os.environ:
    # Each process runs this script again, with the same arguments; under the launcher,
    # --processes is ignored.
    return launch.launch(args.processes, [__file__, *(sys.argv[1:] if argv is None else argv)])
  train(args)
  return 0


if __name__ == "__main__":
  sys.exit(main())
