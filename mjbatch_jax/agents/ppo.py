"""Brax's PPO on mjbatch_jax envs, with what a long run on CPUs needs around it.

`train` is `brax.training.agents.ppo.train` (the `rl` extra: `pip install -e '.[rl]'`) on an
`mjbatch_jax.envs.Env`, given `wrap_for_brax_training` as its `wrap_env_fn`, with Brax's own
arguments and four additions: the task's own evaluation after every `iterations_per_eval`
iterations (instead of Brax's episode-reward evaluator), a checkpoint after each and `resume`
from it, a stop rule, and the wall and CPU time of the training alone (evaluations and
checkpoints kept out). `load_policy` reads a checkpoint back as a policy.

There is no PPO of our own: Brax's runs data-parallel as it is. Its training step is a
`jax.pmap` over each process's devices whose gradients and observation statistics are
`pmean`-ed over the pmap axis, and under JAX's multi-controller runtime
(`mjbatch_jax.distributed.initialize`, which `python -m mjbatch_jax.launch -n N` sets up) that
axis spans every process's devices, with gloo collectives between processes. Each process steps
only its own envs (`num_envs / processes`); every process ends with the same networks
(tests/test_go1_distributed.py). Evaluations and checkpoints run in process 0, as Brax calls its
callbacks there only.

  from mjbatch_jax.agents import ppo
  trained = ppo.train(env, num_timesteps=2_000_000, num_envs=1024, unroll_length=24,
                      batch_size=256, num_minibatches=4, episode_length=500,
                      network={"policy_hidden_layer_sizes": (128, 128)},
                      iterations_per_eval=10, evaluate=my_check, checkpoint="run.npz")
  policy = trained.make_policy(trained.params, deterministic=True)
"""

import dataclasses
import difflib
import functools
import inspect
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax import archive
from mjbatch_jax.envs.wrappers import wrap_for_brax_training

BRAX_MISSING = "Brax is not installed: `pip install -e '.[rl]'` adds brax 0.14 for training"
"""What the ImportError says when training or loading a policy needs Brax (the `rl` extra) and
it is not installed."""
CHECKPOINT_FORMAT = "mjbatch_jax.agents.ppo/1"
"""The `format` that a checkpoint's metadata holds: train writes it, read_checkpoint and
load_policy refuse a file without it."""

Evaluate = Callable[[Callable[..., Any], Any], Mapping[str, float]]
"""The type of train's `evaluate`: evaluate(make_policy, params) -> {metric name: number}, the
task's own evaluation of the networks so far (make_policy and params as Brax gives them: a
policy is make_policy(params, deterministic=True)). Its metrics join each Progress's metrics
as "eval/<name>"."""


@dataclasses.dataclass
class Progress:
  """Where training stands after an evaluation: one row of the learning curve.

  `wall_s` and `cpu_s` count the training alone, from the start of the first iteration (its
  compilation included); `eval_wall_s` and `eval_cpu_s` what the evaluations and checkpoints
  took besides. CPU time is that of every thread of the process (XLA's and the physics').

  Attributes:
    iteration: the training iterations done so far (a resumed run's included).
    env_steps: the env steps trained on so far: iteration times batch_size *
      num_minibatches * unroll_length * action_repeat.
    wall_s: seconds of wall time of the training alone.
    cpu_s: seconds of CPU time of the training alone.
    eval_wall_s: seconds of wall time of the evaluations and checkpoints.
    eval_cpu_s: seconds of CPU time of the evaluations and checkpoints.
    metrics: Brax's scalar training metrics by name ("training/...") and evaluate's, as
      "eval/<name>".
  """

  iteration: int
  env_steps: int
  wall_s: float
  cpu_s: float
  eval_wall_s: float
  eval_cpu_s: float
  metrics: dict[str, float]

  def row(self) -> dict[str, Any]:
    return {**dataclasses.asdict(self), "metrics": dict(self.metrics)}


class Trained(NamedTuple):
  """What train returns: Brax's (make_policy, params, metrics) and the learning curve.

  Attributes:
    make_policy: Brax's make_policy(params, deterministic=...) -> policy(obs, key) ->
      (action, extras).
    params: the networks' parameters at the end (normaliser, policy, value), as Brax's.
    metrics: the last Progress's metrics (Brax's own when no evaluation ran).
    curve: one Progress per evaluation period, a resumed checkpoint's rows first.
    stopped: whether the stop rule ended training before num_timesteps.
  """

  make_policy: Callable[..., Any]
  params: Any
  metrics: dict[str, float]
  curve: list[Progress]
  stopped: bool


class _Stop(Exception):
  pass


# Brax is the rl extra: imported where it is used (pyright in the main venv, without it, is told
# so on each import).
def _brax():
  try:
    from brax.training.agents.ppo import networks as ppo_networks  # pyright: ignore[reportMissingImports]
    from brax.training.agents.ppo import train as ppo_train  # pyright: ignore[reportMissingImports]
  except ImportError as e:
    raise ImportError(BRAX_MISSING) from e
  return ppo_train, ppo_networks


def network_factory(network: Mapping[str, Any] | None) -> Callable[..., Any]:
  """Brax's make_ppo_networks with these keyword arguments, functions by their names in Brax's
  registries, so that checkpoints can say them: the activation in
  `brax.training.networks.ACTIVATION` ("swish", "elu", ...), the `*_init_fn` initialisers in
  `KERNEL_INITIALIZER` ("lecun_uniform", "variance_scaling", ...). ValueError for a keyword
  make_ppo_networks does not take, or one that train sets itself.

  Args:
    network: keyword arguments of make_ppo_networks ({"policy_hidden_layer_sizes": (128, 128),
      "activation": "elu"}), functions named by strings; None: Brax's defaults. Not the sizes
      that train passes itself (observation_size, action_size, preprocess_observations_fn).

  Returns:
    make_ppo_networks with those arguments bound (functools.partial), for Brax's
    network_factory.

  Raises:
    ImportError: Brax is not installed (BRAX_MISSING).
    ValueError: network is not a dict, or holds a keyword make_ppo_networks does not take (or
      train sets), or a name not in Brax's registry.

  Example:
    factory = ppo.network_factory({"policy_hidden_layer_sizes": (64, 64), "activation": "elu"})
  """
  _, ppo_networks = _brax()
  from brax.training import networks  # pyright: ignore[reportMissingImports]

  if network is not None and not isinstance(network, Mapping):
    raise ValueError(f"network must be a dict of make_ppo_networks' keyword arguments or None, "
                     f"got {v.shown(network)}")
  kwargs = dict(network or {})
  taken = set(inspect.signature(ppo_networks.make_ppo_networks).parameters) - _NETWORK_SET_HERE
  for key, value in kwargs.items():
    if not isinstance(key, str) or key not in taken:
      raise ValueError(f"network has {key!r}, which is not a keyword argument of Brax's "
                       f"make_ppo_networks that train leaves to you: {sorted(taken)}")
    registry = networks.ACTIVATION if key == "activation" else (
      networks.KERNEL_INITIALIZER if key.endswith("_init_fn") else None)
    if registry is not None:
      if not isinstance(value, str) or value not in registry:
        raise ValueError(f"network {key} must be one of {sorted(registry)}, got {value!r}")
      kwargs[key] = registry[value]
  return functools.partial(ppo_networks.make_ppo_networks, **kwargs)


# make_ppo_networks' arguments that Brax's train passes itself.
_NETWORK_SET_HERE = frozenset({"observation_size", "action_size", "preprocess_observations_fn"})

# Brax's ppo.train arguments that train sets itself.
_SET_HERE = ("environment", "wrap_env_fn", "num_evals", "run_evals", "progress_fn",
             "policy_params_fn", "network_factory", "restore_params")

# Brax's PPO hyperparameters by kind, each with its valid range: checked before training, since
# Brax takes a NaN learning rate or a discount of 2 and trains the whole run on it.
_NUMBERS: dict[str, dict[str, Any]] = {
  "learning_rate": {"low": 0.0, "low_open": True},
  "entropy_cost": {"low": 0.0},
  "discounting": {"low": 0.0, "high": 1.0, "low_open": True},
  "reward_scaling": {"low": 0.0, "low_open": True},
  "clipping_epsilon": {"low": 0.0, "low_open": True},
  "gae_lambda": {"low": 0.0, "high": 1.0},
  "vf_loss_coefficient": {"low": 0.0},
  "desired_kl": {"low": 0.0, "low_open": True},
  "learning_rate_schedule_min_lr": {"low": 0.0, "low_open": True},
  "learning_rate_schedule_max_lr": {"low": 0.0, "low_open": True},
  "normalize_observations_std_eps": {"low": 0.0},
}
_OPTIONAL_NUMBERS: dict[str, dict[str, Any]] = {  # None: the option is off
  "max_grad_norm": {"low": 0.0, "low_open": True},
  "clipping_epsilon_value": {"low": 0.0, "low_open": True},
}
_COUNTS = {"action_repeat": 1, "num_updates_per_batch": 1, "num_resets_per_eval": 0,
           "num_eval_envs": 1}
_OPTIONAL_COUNTS = {"max_devices_per_host": 1, "normalize_until_count": 1,
                    "training_metrics_steps": 1}
_FLAGS = ("normalize_observations", "normalize_advantage", "bootstrap_on_timeout",
          "use_distributional_critic", "deterministic_eval", "log_training_metrics",
          "use_pmap_on_reset", "wrap_env", "vision", "augment_pixels", "restore_value_fn")
_SCHEDULES = ("NONE", "ADAPTIVE_KL")
_NORMALIZATION_MODES = ("welford", "ema")


def _check_ppo_kwargs(ppo_kwargs: dict[str, Any], accepted: Sequence[str]) -> dict[str, Any]:
  """Brax's arguments, numbers as Python's, each in its range; ValueError naming a bad one."""
  out = dict(ppo_kwargs)
  for name, value in ppo_kwargs.items():
    if name in _SET_HERE:
      raise ValueError(f"{name} is train's to set, not an argument to pass through")
    if name not in accepted:
      close = difflib.get_close_matches(name, accepted, n=3)
      hint = f"; did you mean {', '.join(close)}?" if close else ""
      raise ValueError(f"{name} is not an argument of Brax's ppo.train{hint}")
    if name in _NUMBERS:
      out[name] = v.number(name, value, **_NUMBERS[name])
    elif name in _OPTIONAL_NUMBERS and value is not None:
      out[name] = v.number(name, value, **_OPTIONAL_NUMBERS[name])
    elif name in _COUNTS:
      out[name] = v.integer(name, value, low=_COUNTS[name])
    elif name in _OPTIONAL_COUNTS and value is not None:
      out[name] = v.integer(name, value, low=_OPTIONAL_COUNTS[name])
    elif name in _FLAGS:
      out[name] = v.flag(name, value)
    elif name == "learning_rate_schedule" and value is not None:
      v.one_of(name, getattr(value, "value", value), _SCHEDULES)
    elif name == "normalize_observations_mode":
      v.one_of(name, value, _NORMALIZATION_MODES)
    elif name == "randomization_fn" and value is not None and not callable(value):
      raise ValueError(f"randomization_fn must be a function or None, got {v.shown(value)}")
  low = out.get("learning_rate_schedule_min_lr", 1e-5)
  high = out.get("learning_rate_schedule_max_lr", 1e-2)
  if low > high:
    raise ValueError(f"learning_rate_schedule_min_lr={low} must not exceed "
                     f"learning_rate_schedule_max_lr={high}")
  if out.get("use_distributional_critic") and out.get("clipping_epsilon_value") is None:
    raise ValueError("use_distributional_critic=True needs clipping_epsilon_value (the quantile"
                     " Huber loss's kappa), got None")
  if out.get("vision"):
    raise ValueError("vision=True: mjbatch_jax envs have no pixel observations")
  return out


def _check_sizes(num_timesteps: Any, num_envs: Any, unroll_length: Any, batch_size: Any,
                 num_minibatches: Any, iterations_per_eval: Any, episode_length: Any
                 ) -> tuple[int, ...]:
  """The sizes as Python ints, each >= 1, and as Brax's pmap splits them over the devices."""
  sizes = {"num_timesteps": num_timesteps, "num_envs": num_envs, "unroll_length": unroll_length,
           "batch_size": batch_size, "num_minibatches": num_minibatches,
           "iterations_per_eval": iterations_per_eval, "episode_length": episode_length}
  out = tuple(v.integer(name, value, low=1) for name, value in sizes.items())
  num_envs, batch_size, num_minibatches = out[1], out[3], out[4]
  devices = jax.device_count()
  if num_envs % devices:
    raise ValueError(
      f"num_envs={num_envs} must be a multiple of the {devices} devices over "
      f"{jax.process_count()} process(es) (Brax gives each as many envs): try "
      f"{(num_envs // devices + 1) * devices}")
  if batch_size * num_minibatches % num_envs:
    raise ValueError(
      f"batch_size * num_minibatches = {batch_size * num_minibatches} must be a multiple of "
      f"num_envs={num_envs}: each iteration unrolls every env that many times over")
  if batch_size % devices:
    raise ValueError(f"batch_size={batch_size} must be a multiple of the {devices} devices")
  return out


def _check_environment(environment: Any) -> None:
  missing = [name for name in ("reset", "step") if not callable(getattr(environment, name, None))]
  if missing or not hasattr(environment, "action_size"):
    raise ValueError(f"environment must be an mjbatch_jax.envs.Env (reset, step, action_size), "
                     f"got {v.shown(environment)}")


def _check_callback(name: str, value: Any) -> None:
  if value is not None and not callable(value):
    raise ValueError(f"{name} must be a function or None, got {v.shown(value)}")


def _checkpoint_path(name: str, path: Any) -> Path:
  if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes) or str(path) == "":
    raise ValueError(f"{name} must be a path (str or pathlib.Path), got {v.shown(path)}")
  return Path(path)


def _check_writable(path: Path) -> None:
  """ValueError naming path unless a checkpoint can be written there: checked before training,
  rather than after its first period."""
  archive.check_writable(path, what="checkpoint")


def train(
  environment: Any,
  num_timesteps: int,
  *,
  num_envs: int,
  unroll_length: int,
  batch_size: int,
  num_minibatches: int,
  episode_length: int,
  network: Mapping[str, Any] | None = None,
  iterations_per_eval: int = 1,
  evaluate: Evaluate | None = None,
  stop: Callable[[Progress], bool] | None = None,
  checkpoint: str | Path | None = None,
  resume: bool = False,
  log: Callable[[Progress], None] | None = None,
  seed: int = 0,
  randomization_period: int | None = None,
  task: Mapping[str, Any] | None = None,
  **ppo_kwargs: Any,
) -> Trained:
  """Brax's ppo.train on environment, evaluated, checkpointed and timed; see the module doc.

  An iteration is one rollout of unroll_length steps of every env (batch_size *
  num_minibatches / num_envs of them) and Brax's SGD on it; num_timesteps is rounded up to whole
  evaluation periods. Brax trains in float32: call it without jax_enable_x64.

  Args:
    environment: an mjbatch_jax.envs.Env (wrapped with wrap_for_brax_training here).
    num_timesteps: env steps to train for in all, those of a resumed checkpoint included.
    num_envs, unroll_length, batch_size, num_minibatches, episode_length, seed: Brax's.
    network: keyword arguments of Brax's make_ppo_networks (activation by name), saved with
      the checkpoints so that load_policy can rebuild the networks. None: Brax's defaults, or
      on resume the checkpoint's.
    iterations_per_eval: iterations between evaluations (and checkpoints and stop checks).
    evaluate: evaluate(make_policy, params) -> metrics, run in process 0 after each period;
      its time is not training time.
    stop: stop(progress) -> True to end training early (one process only).
    checkpoint: an .npz path written after each period (process 0): networks, curve, counters.
      Checked writable before training starts: its folder is made if missing (as each save
      makes it) and a probe file written and removed beside it.
    resume: continue from checkpoint: its networks and normaliser, learning rate, curve and
      clocks; Adam's moments and the envs start afresh.
    log: called with each Progress (process 0).
    randomization_period: steps between redraws of each env's params by Brax's
      randomization_fn (wrap_for_brax_training's); None: at reset only.
    task: what the environment was built with that a checkpoint's policy depends on but its
      networks do not show (a JSON object, e.g. {"collisions": "feet"}), saved in every
      checkpoint; resume refuses a checkpoint of another task, naming the fields that differ,
      and read_checkpoint's metadata holds it ({} when not given).
    **ppo_kwargs: the rest of Brax's ppo.train arguments (learning_rate, entropy_cost,
      discounting, num_updates_per_batch, randomization_fn, ...).

  Returns:
    Trained(make_policy, params, metrics, curve, stopped).

  Raises:
    ValueError: before any training, for a bad argument (a size, count, seed or hyperparameter
      out of its range, NaN, a float where an int is due, an argument Brax's train does not
      take), an unwritable checkpoint path, or a checkpoint to resume that is invalid, of other
      networks, or already past num_timesteps.
    FloatingPointError: training diverged (NaN or inf in the networks), at the end of the
      period in which it did; the checkpoint keeps the last finite networks.
  """
  ppo_train, _ = _brax()
  if jax.config.read("jax_enable_x64"):
    raise ValueError("Brax's PPO trains in float32: train without jax_enable_x64")
  _check_environment(environment)
  num_timesteps, num_envs, unroll_length, batch_size, num_minibatches, iterations_per_eval, \
    episode_length = _check_sizes(num_timesteps, num_envs, unroll_length, batch_size,
                                  num_minibatches, iterations_per_eval, episode_length)
  seed = v.integer("seed", seed, low=-(2**62), high=2**62)
  resume = v.flag("resume", resume)
  ppo_kwargs = _check_ppo_kwargs(ppo_kwargs, tuple(inspect.signature(ppo_train.train).parameters))
  if randomization_period is not None:
    randomization_period = v.integer("randomization_period", randomization_period, low=1)
    if ppo_kwargs.get("randomization_fn") is None:
      raise ValueError("randomization_period needs randomization_fn: without it there is "
                       "nothing to redraw")
  for name, callback in (("evaluate", evaluate), ("stop", stop), ("log", log)):
    _check_callback(name, callback)
  if stop is not None and jax.process_count() > 1:
    raise ValueError("stop ends training in process 0 alone: use it with one process")
  if resume and checkpoint is None:
    raise ValueError("resume needs the checkpoint to resume from")
  task = _check_task(task)
  checkpoint = None if checkpoint is None else _checkpoint_path("checkpoint", checkpoint)
  if checkpoint is not None and checkpoint.suffix != ".npz":
    raise ValueError(f"checkpoint must be an .npz path, got {str(checkpoint)!r}")
  action_repeat = ppo_kwargs.get("action_repeat", 1)
  per_iteration = batch_size * num_minibatches * unroll_length * action_repeat
  iterations = math.ceil(num_timesteps / per_iteration)
  factory = network_factory(network)

  done, curve, restore, lr = 0, [], None, None
  if resume:
    assert checkpoint is not None
    restore, saved = _load(checkpoint, environment, network)
    if network is None:  # the checkpoint's networks, which its params fit
      network = saved["network"]
      factory = network_factory(network)
    differ = task_differences(saved["task"], task)
    if differ:
      raise ValueError(f"{checkpoint} was trained on another task: {differ}")
    done = saved["iteration"]
    curve = [Progress(**row) for row in saved["curve"]]
    lr = saved.get("learning_rate")
    if done % iterations_per_eval:
      raise ValueError(f"{checkpoint} stopped after {done} iterations, not a multiple of "
                       f"iterations_per_eval={iterations_per_eval}: resume with the run's own")
    if done >= iterations:
      raise ValueError(f"{checkpoint} has trained {done} iterations, num_timesteps="
                       f"{num_timesteps} asks for {iterations}: nothing is left to train (raise "
                       "num_timesteps to train on, or load_policy to use it)")
  if checkpoint is not None:
    _check_writable(checkpoint)  # now, rather than after the first period's training
  remaining = iterations - done
  epochs = math.ceil(remaining / iterations_per_eval)
  schedule = ppo_kwargs.get("learning_rate_schedule")
  if resume and lr is not None and getattr(schedule, "value", schedule) == "ADAPTIVE_KL":
    ppo_kwargs["learning_rate"] = lr  # where the KL rule had taken it
  last = curve[-1] if curve else Progress(0, 0, 0.0, 0.0, 0.0, 0.0, {})
  clock = {"wall": last.wall_s, "cpu": last.cpu_s, "eval_wall": last.eval_wall_s,
           "eval_cpu": last.eval_cpu_s, "mark": (0.0, 0.0)}
  latest: dict[str, Any] = {}

  def params_fn(step: int, make_policy: Callable[..., Any], params: Any) -> None:
    latest["make_policy"], latest["params"] = make_policy, params
    if step == 0:  # before the first iteration: training time starts now
      clock["mark"] = (time.perf_counter(), time.process_time())

  def progress_fn(step: int, metrics: Mapping[str, Any]) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    clock["wall"] += wall - clock["mark"][0]
    clock["cpu"] += cpu - clock["mark"][1]
    metrics = {k: float(value) for k, value in metrics.items() if np.ndim(value) == 0}
    iteration = done + step // per_iteration
    diverged = _nonfinite(_named_leaves(latest["params"]))
    if diverged is not None:  # now, not after the whole run (Brax's bare AssertionError)
      kept = f"; {checkpoint} keeps the last finite networks" if checkpoint is not None else ""
      raise FloatingPointError(
        f"training diverged in iteration {iteration}: NaN or inf in {diverged}{kept}")
    if evaluate is not None:
      metrics.update({f"eval/{k}": float(value) for k, value in
                      evaluate(latest["make_policy"], latest["params"]).items()})

    def aside() -> None:  # evaluations, checkpoints and logs: not training time
      nonlocal wall, cpu
      clock["eval_wall"] += time.perf_counter() - wall
      clock["eval_cpu"] += time.process_time() - cpu
      wall, cpu = time.perf_counter(), time.process_time()

    aside()
    progress = Progress(iteration, iteration * per_iteration, clock["wall"], clock["cpu"],
                        clock["eval_wall"], clock["eval_cpu"], metrics)
    curve.append(progress)
    if checkpoint is not None:
      rate = metrics.get("training/learning_rate")
      _save(checkpoint, latest["params"], network, curve,
            rate if rate is not None and math.isfinite(rate) and rate > 0 else None, task)
    if log is not None:
      log(progress)
    aside()  # counted in the next row
    clock["mark"] = (wall, cpu)
    if stop is not None and stop(progress):
      raise _Stop

  stopped = False
  try:
    make_policy, params, metrics = ppo_train.train(
      environment=environment,
      num_timesteps=epochs * iterations_per_eval * per_iteration,
      num_envs=num_envs, unroll_length=unroll_length, batch_size=batch_size,
      num_minibatches=num_minibatches, episode_length=episode_length,
      # Folded with the iterations done, so that a resumed run does not replay its keys.
      seed=seed + done,
      wrap_env_fn=functools.partial(wrap_for_brax_training,
                                    randomization_period=randomization_period),
      network_factory=factory, num_evals=epochs + 1,
      run_evals=False, progress_fn=progress_fn, policy_params_fn=params_fn,
      restore_params=restore, **ppo_kwargs)
  except _Stop:
    make_policy, params, metrics, stopped = latest["make_policy"], latest["params"], {}, True
  return Trained(make_policy, params, dict(curve[-1].metrics) if curve else dict(metrics),
                 curve, stopped)


# -- checkpoints ---------------------------------------------------------------------------------


def _named_leaves(tree: Any) -> dict[str, Any]:
  flat, _ = jax.tree_util.tree_flatten_with_path(tree)
  return {jax.tree_util.keystr(path): leaf for path, leaf in flat}


def _save(path: Path, params: Any, network: Mapping[str, Any] | None, curve: list[Progress],
          learning_rate: float | None, task: dict[str, Any] | None = None) -> None:
  meta = {"format": CHECKPOINT_FORMAT, "network": network or {},
          "iteration": curve[-1].iteration, "learning_rate": learning_rate,
          "curve": [p.row() for p in curve], "task": task or {}}
  arrays = {f"param{name}": np.asarray(leaf) for name, leaf in _named_leaves(params).items()}
  archive.write(path, arrays, meta, header_key="__meta__")  # never a half-written checkpoint


def _nonfinite(arrays: Mapping[str, Any]) -> str | None:
  """The first float array holding NaN or inf, as 'name (value at index)'; None if none does."""
  for name, array in arrays.items():
    values = np.asarray(array)
    if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
      index = tuple(int(i) for i in np.argwhere(~np.isfinite(values))[0])
      return f"{name} ({values[index]} at index {index})"
  return None


_CURVE_KEYS = tuple(field.name for field in dataclasses.fields(Progress))
# Leaf dtypes a checkpoint may hold: Brax's networks (float32) and its normaliser's step count
# (two uint32 words); float64 and int32 for networks saved by other versions.
_LEAF_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.uint32),
                np.dtype(np.int32))


def read_checkpoint(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """(arrays by key path, metadata) of a checkpoint, checked as a whole before it is returned.

  Checked: that the file is an .npz archive of this module's format (its `__meta__` header a
  JSON object), the header's types and ranges (format, network, iteration, learning rate, the
  curve's rows), the arrays' names and dtypes, and that no array holds NaN or inf. load_policy
  and train's resume also check names, shapes and dtypes against the env's networks.

  Raises:
    ValueError: naming the file and saying what is wrong with it, for every defect (a missing,
      empty, truncated or corrupted file included).
  """
  path = _checkpoint_path("path", path)
  if not path.is_file():
    raise ValueError(f"no checkpoint at {path}: train first (or without --resume)")

  what = "a valid checkpoint of mjbatch_jax.agents.ppo"

  def bad(why: str) -> ValueError:
    return ValueError(f"{path} is not {what}: {why}")

  arrays, meta = archive.read(path, header_key="__meta__", what=what)
  if meta.get("format") != CHECKPOINT_FORMAT:
    raise bad(f"format {meta.get('format')!r}, not {CHECKPOINT_FORMAT!r}")
  _check_meta(meta, bad)
  if not arrays:
    raise bad("it holds no network arrays")
  for key, array in arrays.items():
    if not key.startswith("param"):
      raise bad(f"it holds an array {key!r}; network arrays are named param[...]")
    if array.dtype not in _LEAF_DTYPES:
      raise bad(f"{key} has dtype {array.dtype}; network arrays are float32, float64, uint32 "
                "or int32")
  nonfinite = _nonfinite(arrays)
  if nonfinite is not None:
    raise bad(f"NaN or inf in {nonfinite}: the run had diverged")
  return {k[len("param"):]: a for k, a in arrays.items()}, meta


def _check_meta(meta: dict[str, Any], bad: Callable[[str], ValueError]) -> None:
  """ValueError (from bad) unless the header's fields have the types and ranges _save gives."""

  def count(what: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
      raise bad(f"{what} must be an int >= 0, got {v.shown(value)}")
    return value

  def seconds(what: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) \
        or not math.isfinite(value) or value < 0:
      raise bad(f"{what} must be a finite number >= 0, got {v.shown(value)}")

  if not isinstance(meta.get("network"), dict):
    raise bad(f"network must be a JSON object of make_ppo_networks' arguments, got "
              f"{v.shown(meta.get('network'))}")
  meta.setdefault("task", {})  # checkpoints from before train's task
  if not isinstance(meta["task"], dict):
    raise bad(f"task must be a JSON object, got {v.shown(meta['task'])}")
  if "iteration" not in meta:
    raise bad("its header has no iteration")
  iteration = count("iteration", meta["iteration"])
  if iteration < 1:
    raise bad("iteration must be >= 1 (a checkpoint is written after an iteration), got 0")
  lr = meta.get("learning_rate")
  if lr is not None and (not isinstance(lr, (int, float)) or isinstance(lr, bool)
                         or not math.isfinite(lr) or lr <= 0):
    raise bad(f"learning_rate must be a finite number > 0 or null, got {v.shown(lr)}")
  curve = meta.get("curve")
  if not isinstance(curve, list) or not curve:
    raise bad(f"curve must be a non-empty list of rows, got {v.shown(curve)}")
  previous = 0
  for i, row in enumerate(curve):
    if not isinstance(row, dict) or set(row) != set(_CURVE_KEYS):
      raise bad(f"curve[{i}] must be a row with keys {_CURVE_KEYS}, got {v.shown(row)}")
    at = count(f"curve[{i}] iteration", row["iteration"])
    if at <= previous:
      raise bad(f"curve[{i}] iteration {at} does not follow {previous}")
    previous = at
    count(f"curve[{i}] env_steps", row["env_steps"])
    for key in ("wall_s", "cpu_s", "eval_wall_s", "eval_cpu_s"):
      seconds(f"curve[{i}] {key}", row[key])
    metrics = row["metrics"]
    if not isinstance(metrics, dict) or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in metrics.values()):
      raise bad(f"curve[{i}] metrics must map names to numbers, got {v.shown(metrics)}")
  if previous != iteration:
    raise bad(f"iteration {iteration} is not its curve's last ({previous})")


def _check_task(task: Any) -> dict[str, Any]:
  """train's task as the JSON object a checkpoint saves (ValueError if it cannot be one)."""
  if task is None:
    return {}
  if not isinstance(task, Mapping) or not all(isinstance(k, str) for k in task):
    raise ValueError(f"task must be a mapping of names to JSON values or None, got "
                     f"{v.shown(task)}")
  try:
    return json.loads(json.dumps(archive.plain(dict(task)), allow_nan=False))
  except (TypeError, ValueError) as e:
    raise ValueError(f"task must hold JSON values (finite numbers, strings, lists, mappings), "
                     f"got {v.shown(task)}: {e}") from None


def task_differences(saved: Mapping[str, Any], task: Mapping[str, Any] | None) -> str:
  """'' if a checkpoint's task (its metadata's "task") is `task`, else the fields that differ,
  each as 'name: saved value, not given value' (for the error that refuses it)."""
  given = _check_task(task)
  names = sorted(set(saved) | set(given), key=str)
  return "; ".join(f"{name}: {saved.get(name)!r}, not {given.get(name)!r}" for name in names
                   if saved.get(name) != given.get(name))


def _template(environment: Any, network: Mapping[str, Any] | None) -> tuple[Any, Any]:
  """Brax's networks for environment, and params of their shapes (normaliser, policy, value)."""
  _, ppo_networks = _brax()
  from brax.training.acme import running_statistics, specs  # pyright: ignore[reportMissingImports]

  obs_size = environment.observation_size
  if not isinstance(obs_size, int):
    raise ValueError(f"checkpoints take envs with flat observations, got {obs_size}")
  networks = network_factory(network)(
    obs_size, environment.action_size, preprocess_observations_fn=running_statistics.normalize)
  key = jax.random.PRNGKey(0)
  params = (running_statistics.init_state(specs.Array((obs_size,), np.dtype("float32"))),
            networks.policy_network.init(key), networks.value_network.init(key))
  return networks, params


def _load(path: Path, environment: Any, network: Mapping[str, Any] | None) -> tuple[Any, dict]:
  """The checkpoint's params as this env's networks take them, after checking every array's
  name, shape and dtype against them."""
  arrays, meta = read_checkpoint(path)
  if network is not None and archive.plain(network) != meta["network"]:
    raise ValueError(f"{path} holds networks {meta['network']}, not the {archive.plain(network)} "
                     "asked for")
  try:
    _, template = _template(environment, meta["network"])
  except (TypeError, ValueError) as e:  # a value of the wrong type for make_ppo_networks
    raise ValueError(f"{path}: its network {meta['network']} cannot be built: "
                     f"{type(e).__name__}: {e}") from None
  named = _named_leaves(template)
  missing = sorted(set(named) - set(arrays))
  extra = sorted(set(arrays) - set(named))
  if missing or extra:
    raise ValueError(f"{path} holds other networks than this env's: {len(arrays)} arrays, "
                     f"{len(named)} expected; missing {missing[:3]}, unexpected {extra[:3]}")
  for name, leaf in named.items():
    if np.shape(leaf) != arrays[name].shape:
      raise ValueError(f"{path}: {name} has shape {arrays[name].shape}, this env's networks "
                       f"{np.shape(leaf)} (another observation or action size)")
    # Floats of either width (the template's follow jax_enable_x64, Brax's are float32);
    # integers (the normaliser's count) exactly.
    want, got = np.asarray(leaf).dtype, arrays[name].dtype
    if want.kind != got.kind or (want.kind != "f" and want != got):
      raise ValueError(f"{path}: {name} has dtype {got}, this env's networks {want}")
  leaves = [arrays[name] for name in named]
  return jax.tree.unflatten(jax.tree.structure(template), leaves), meta


def load_policy(path: str | Path, environment: Any,
                deterministic: bool = True) -> tuple[Callable[..., Any], dict[str, Any]]:
  """The policy of a checkpoint for environment, policy(obs, key) -> (action, extras); and the
  checkpoint's metadata. ValueError if the file is not a valid checkpoint (read_checkpoint), or
  it was trained for other observations or actions, or other networks.

  Args:
    path: the checkpoint, an .npz file that train wrote (str or pathlib.Path).
    environment: the env the policy acts in (an mjbatch_jax.envs.Env): its observation and
      action sizes must be those the checkpoint was trained with.
    deterministic: True (default): the action is the mode of the policy's distribution; False:
      a sample from it, drawn with the key.

  Returns:
    (policy, metadata): policy(obs, key) -> (action, extras), and the checkpoint's metadata
    (format, network, iteration, learning_rate, curve, task).

  Raises:
    ValueError: path is not a valid checkpoint, or its networks do not fit environment.
    ImportError: Brax is not installed (BRAX_MISSING).

  Example:
    policy, meta = ppo.load_policy("run.npz", env)
    action, _ = policy(state.obs, jax.random.PRNGKey(0))
  """
  path = _checkpoint_path("path", path)
  deterministic = v.flag("deterministic", deterministic)
  read_checkpoint(path)  # says what is wrong with the file before anything needs Brax
  _, ppo_networks = _brax()
  _check_environment(environment)
  params, meta = _load(path, environment, None)
  networks, _ = _template(environment, meta["network"])
  make_policy = ppo_networks.make_inference_fn(networks)
  return make_policy(params, deterministic=deterministic), meta
