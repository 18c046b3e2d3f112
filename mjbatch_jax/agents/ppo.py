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
import functools
import json
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from mjbatch_jax.envs.wrappers import wrap_for_brax_training

BRAX_MISSING = "Brax is not installed: `pip install -e '.[rl]'` adds brax 0.14 for training"
CHECKPOINT_FORMAT = "mjbatch_jax.agents.ppo/1"

# evaluate(make_policy, params) -> metrics; stop(progress) -> whether to stop training.
Evaluate = Callable[[Callable[..., Any], Any], Mapping[str, float]]


@dataclasses.dataclass
class Progress:
  """Where training stands after an evaluation: one row of the learning curve.

  `wall_s` and `cpu_s` count the training alone, from the start of the first iteration (its
  compilation included); `eval_wall_s` and `eval_cpu_s` what the evaluations and checkpoints
  took besides. CPU time is that of every thread of the process (XLA's and the physics').
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
  """What train returns: Brax's (make_policy, params, metrics) and the learning curve."""

  make_policy: Callable[..., Any]
  params: Any
  metrics: dict[str, float]
  curve: list[Progress]
  stopped: bool  # by the stop rule, before num_timesteps


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
  `KERNEL_INITIALIZER` ("lecun_uniform", "variance_scaling", ...)."""
  _, ppo_networks = _brax()
  from brax.training import networks  # pyright: ignore[reportMissingImports]

  kwargs = dict(network or {})
  for key, value in kwargs.items():
    registry = networks.ACTIVATION if key == "activation" else (
      networks.KERNEL_INITIALIZER if key.endswith("_init_fn") else None)
    if registry is not None:
      if value not in registry:
        raise ValueError(f"network {key} must be one of {sorted(registry)}, got {value!r}")
      kwargs[key] = registry[value]
  return functools.partial(ppo_networks.make_ppo_networks, **kwargs)


def _check_sizes(num_timesteps: int, num_envs: int, unroll_length: int, batch_size: int,
                 num_minibatches: int, iterations_per_eval: int) -> None:
  sizes = {"num_timesteps": num_timesteps, "num_envs": num_envs, "unroll_length": unroll_length,
           "batch_size": batch_size, "num_minibatches": num_minibatches,
           "iterations_per_eval": iterations_per_eval}
  for name, value in sizes.items():
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
      raise ValueError(f"{name} must be an int >= 1, got {value!r}")
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
      the checkpoints so that load_policy can rebuild the networks.
    iterations_per_eval: iterations between evaluations (and checkpoints and stop checks).
    evaluate: evaluate(make_policy, params) -> metrics, run in process 0 after each period;
      its time is not training time.
    stop: stop(progress) -> True to end training early (one process only).
    checkpoint: an .npz path written after each period (process 0): networks, curve, counters.
    resume: continue from checkpoint: its networks and normaliser, learning rate, curve and
      clocks; Adam's moments and the envs start afresh.
    log: called with each Progress (process 0).
    randomization_period: steps between redraws of each env's params by Brax's
      randomization_fn (wrap_for_brax_training's); None: at reset only.
    **ppo_kwargs: the rest of Brax's ppo.train arguments (learning_rate, entropy_cost,
      discounting, num_updates_per_batch, randomization_fn, ...).

  Returns:
    Trained(make_policy, params, metrics, curve, stopped).
  """
  ppo_train, _ = _brax()
  if jax.config.read("jax_enable_x64"):
    raise ValueError("Brax's PPO trains in float32: train without jax_enable_x64")
  _check_sizes(num_timesteps, num_envs, unroll_length, batch_size, num_minibatches,
               iterations_per_eval)
  for name in ("environment", "wrap_env_fn", "num_evals", "run_evals", "progress_fn",
               "policy_params_fn", "network_factory", "restore_params"):
    if name in ppo_kwargs:
      raise ValueError(f"{name} is train's to set, not an argument to pass through")
  if stop is not None and jax.process_count() > 1:
    raise ValueError("stop ends training in process 0 alone: use it with one process")
  if resume and checkpoint is None:
    raise ValueError("resume needs the checkpoint to resume from")
  checkpoint = None if checkpoint is None else Path(checkpoint)
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
    done = int(saved["iteration"])
    curve = [Progress(**row) for row in saved["curve"]]
    lr = saved.get("learning_rate")
    if done % iterations_per_eval:
      raise ValueError(f"{checkpoint} stopped after {done} iterations, not a multiple of "
                       f"iterations_per_eval={iterations_per_eval}: resume with the run's own")
  remaining = max(0, iterations - done)
  epochs = math.ceil(remaining / iterations_per_eval)
  if resume and lr is not None and ppo_kwargs.get("learning_rate_schedule") == "ADAPTIVE_KL":
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
    metrics = {k: float(v) for k, v in metrics.items() if np.ndim(v) == 0}
    iteration = done + step // per_iteration
    if evaluate is not None:
      metrics.update({f"eval/{k}": float(v) for k, v in
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
      _save(checkpoint, latest["params"], network, curve, metrics.get("training/learning_rate"))
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
          learning_rate: float | None) -> None:
  meta = {"format": CHECKPOINT_FORMAT, "network": _plain(network or {}),
          "iteration": curve[-1].iteration, "learning_rate": learning_rate,
          "curve": [p.row() for p in curve]}
  arrays: dict[str, Any] = {f"param{name}": np.asarray(leaf)
                            for name, leaf in _named_leaves(params).items()}
  arrays["__meta__"] = np.array(json.dumps(meta))
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + ".tmp.npz")  # never a half-written checkpoint
  np.savez(tmp, **arrays)
  tmp.replace(path)


def _plain(value: Any) -> Any:
  if isinstance(value, Mapping):
    return {str(k): _plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_plain(v) for v in value]
  return value


def read_checkpoint(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """(arrays by key path, metadata) of a checkpoint; ValueError saying why it cannot be read."""
  path = Path(path)
  if not path.is_file():
    raise ValueError(f"no checkpoint at {path}: train first (or without --resume)")
  try:
    with np.load(path, allow_pickle=False) as saved:
      arrays = {key: saved[key] for key in saved.files}
    meta = json.loads(str(arrays.pop("__meta__")))
  except (OSError, ValueError, KeyError) as e:
    raise ValueError(f"{path} is not a checkpoint of mjbatch_jax.agents.ppo: "
                     f"{type(e).__name__}: {e}") from None
  if meta.get("format") != CHECKPOINT_FORMAT:
    raise ValueError(f"{path} is not a checkpoint of mjbatch_jax.agents.ppo "
                     f"(format {meta.get('format')!r})")
  return {k[len("param"):]: v for k, v in arrays.items()}, meta


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
  arrays, meta = read_checkpoint(path)
  if network is not None and _plain(network) != meta["network"]:
    raise ValueError(f"{path} holds networks {meta['network']}, not the {_plain(network)} "
                     "asked for")
  _, template = _template(environment, meta["network"])
  named = _named_leaves(template)
  if sorted(named) != sorted(arrays):
    raise ValueError(f"{path} holds other networks than this env's: {len(arrays)} arrays, "
                     f"{len(named)} expected")
  for name, leaf in named.items():
    if np.shape(leaf) != arrays[name].shape:
      raise ValueError(f"{path}: {name} has shape {arrays[name].shape}, this env's networks "
                       f"{np.shape(leaf)} (another observation or action size)")
  leaves = [arrays[name] for name in named]
  return jax.tree.unflatten(jax.tree.structure(template), leaves), meta


def load_policy(path: str | Path, environment: Any,
                deterministic: bool = True) -> tuple[Callable[..., Any], dict[str, Any]]:
  """The policy of a checkpoint for environment, policy(obs, key) -> (action, extras); and the
  checkpoint's metadata. ValueError if it was trained for other observations or actions.

  Example:
    policy, meta = ppo.load_policy("run.npz", env)
    action, _ = policy(state.obs, jax.random.PRNGKey(0))
  """
  path = Path(path)
  read_checkpoint(path)  # says what is wrong with the file before anything needs Brax
  _, ppo_networks = _brax()
  params, meta = _load(path, environment, None)
  networks, _ = _template(environment, meta["network"])
  make_policy = ppo_networks.make_inference_fn(networks)
  return make_policy(params, deterministic=deterministic), meta
