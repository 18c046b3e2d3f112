"""Hostile and careless calls of the env layer (mjbatch_jax.envs), each in a child process.

The table's cases run in order in child processes (tests/fuzzing.py), each after a fresh exec of
PRELUDE: a cart-pole env on one thread, a batch of its states and a single one. Every bad
argument must be a ValueError naming it, raised in Python before any custom call.
"""

import textwrap

from tests.fuzzing import table_tests

PRELUDE = r'''
import numpy as np, jax, jax.numpy as jnp, mujoco
from mjbatch_jax import envs
from mjbatch_jax._extension import ext
from mjbatch_jax.envs import playground

N = 3
env = envs.CartPoleBalance(num_threads=1)
batched = envs.VmapWrapper(env)
keys = jax.random.split(jax.random.PRNGKey(0), N)
single = env.reset(jax.random.PRNGKey(1))
states = batched.reset(keys)

def calls():
  return sum(ext.handler_calls().values())
'''


def case(name: str, code: str, expect: tuple) -> tuple[str, str, tuple]:
  return name, textwrap.dedent(code), expect


def refused(name: str, code: str, pattern: str) -> tuple[str, str, tuple]:
  """A case whose code must raise a ValueError matching pattern, before any custom call."""
  body = f"before = calls()\ntry:\n{textwrap.indent(textwrap.dedent(code), '  ')}\n" \
         "finally:\n  assert calls() == before, 'a custom call ran'\n"
  return name, body, ("raises", "ValueError", pattern)


CASES = [
  # Sizes of the wrappers: ints >= 1, numpy ints too, never bool, float or str.
  *[refused(f"EpisodeWrapper episode_length {bad!r}",
            f"envs.EpisodeWrapper(batched, {bad})", r"episode_length must be an int >= 1")
    for bad in ("0", "-1", "2.5", "True", "'5'", "None", "np.int64(0)", "np.float32(5)")],
  *[refused(f"EpisodeWrapper action_repeat {bad!r}",
            f"envs.EpisodeWrapper(batched, 10, {bad})", r"action_repeat must be an int >= 1")
    for bad in ("0", "-2", "1.0", "False")],
  refused("VmapWrapper batch_size 0", "envs.VmapWrapper(env, batch_size=0)",
          r"batch_size must be an int >= 1, got 0"),
  refused("DomainRandomizationWrapper period 0",
          "envs.DomainRandomizationWrapper(env, lambda p, rng: p, period=0)",
          r"period must be an int >= 1, got 0"),
  refused("DomainRandomizationWrapper fn not callable",
          "envs.DomainRandomizationWrapper(env, 'friction')",
          r"randomization_fn must be a function"),
  *[refused(f"{wrapper} of {bad}", f"envs.{wrapper}({bad})", r"env must be an env")
    for wrapper in ("AutoResetWrapper", "WarningWrapper", "VmapWrapper")
    for bad in ("None", "'cartpole'", "3")],
  refused("wrap_for_brax_training episode_length 0",
          "envs.wrap_for_brax_training(env, episode_length=0)", r"episode_length must be"),
  refused("wrap_for_brax_training action_repeat 0",
          "envs.wrap_for_brax_training(env, action_repeat=0)", r"action_repeat must be"),
  refused("wrap_for_brax_training action_repeat 1.5",
          "envs.wrap_for_brax_training(env, action_repeat=1.5)", r"action_repeat must be an int"),
  refused("wrap_for_brax_training period without fn",
          "envs.wrap_for_brax_training(env, randomization_period=5)",
          r"randomization_period needs randomization_fn"),
  refused("wrap_for_brax_training period -1",
          "envs.wrap_for_brax_training(env, randomization_fn=lambda p, rng: p, "
          "randomization_period=-1)", r"randomization_period must be an int >= 1"),
  refused("wrap_for_brax_training fn not callable",
          "envs.wrap_for_brax_training(env, randomization_fn=1.0)",
          r"randomization_fn must be a function"),
  case("wrap_for_brax_training takes numpy ints", """
    wrapped = envs.wrap_for_brax_training(env, episode_length=np.int64(4),
                                          action_repeat=np.int32(2))
    state = jax.jit(wrapped.reset)(keys)
    state = jax.jit(wrapped.step)(state, jnp.zeros((N, 1)))
    assert np.all(np.asarray(state.info["steps"]) == 2)
    """, ("ok",)),

  # Keys: one for an env's reset, a batch (N,) for a batched one; typed or raw.
  refused("batched reset with one key", "batched.reset(jax.random.PRNGKey(0))",
          r"rng must be a batch \(N,\) of PRNG keys"),
  refused("batched reset with a typed key", "batched.reset(jax.random.key(0))",
          r"rng must be a batch \(N,\) of PRNG keys"),
  refused("batch_size reset with a batch of keys",
          "envs.VmapWrapper(env, batch_size=2).reset(keys)", r"rng must be one PRNG key"),
  refused("reset with an int", "env.reset(0)", r"rng must be one PRNG key.*got 0"),
  refused("reset with float keys", "env.reset(jnp.zeros(2))", r"got a float\d+ array"),
  refused("reset with a batch of keys", "env.reset(keys)", r"rng must be one PRNG key"),
  refused("jitted reset with a batch of keys", "jax.jit(env.reset)(keys)",
          r"rng must be one PRNG key"),
  case("typed and raw keys both reset", """
    a = batched.reset(jax.random.split(jax.random.key(0), N))
    b = envs.VmapWrapper(env, batch_size=N).reset(jax.random.key(0))
    assert a.obs.shape == b.obs.shape == (N, 4)
    """, ("ok",)),

  # Actions: float32 or float64 of exactly the env's shape; checked under jit as eagerly.
  *[refused(f"step action {label}", f"env.step(single, {action})", pattern)
    for label, action, pattern in (
      ("str", "'push'", r"action must be a float32 or float64 array"),
      ("None", "None", r"action must be a float32 or float64 array"),
      ("int list", "[1]", r"action must be float32 or float64, got int32"),
      ("bool", "jnp.array([True])", r"action must be float32 or float64, got bool"),
      ("float16", "jnp.zeros(1, jnp.float16)", r"float32 or float64, got float16"),
      ("wrong size", "jnp.zeros(2)", r"action must have shape \(1,\), got \(2,\)"),
      ("extra axis", "jnp.zeros((1, 1))", r"action must have shape \(1,\)"),
      ("scalar", "jnp.float32(0.5)", r"action must have shape \(1,\), got \(\)"),
      ("object", "object()", r"action must be an array"),
      ("ragged", "[[0.1], [0.2, 0.3]]", r"action must be an array"),
    )],
  refused("jitted step action wrong size", "jax.jit(env.step)(single, jnp.zeros(3))",
          r"action must have shape \(1,\)"),
  refused("batched step action missing the batch", "batched.step(states, jnp.zeros(1))",
          r"action must have shape \(3, 1\)"),
  refused("batched step of a single state", "batched.step(single, jnp.zeros((N, 1)))",
          r"state must be a batch of N envs' states"),
  refused("batched step of something else", "batched.step({'done': 1}, jnp.zeros((N, 1)))",
          r"state must be the State of this env's reset or step"),
  # NaN and inf actions: not checkable under jit, so not refused eagerly either. MuJoCo zeroes
  # a NaN control with its bad-control warning, the same eagerly and jitted, and
  # wrap_for_brax_training's WarningWrapper ends that env's episode; an inf one its ctrlrange
  # clamps. The row's ctrl keeps the action given.
  case("NaN action: a warning, the same jitted, and done when wrapped", """
    bad_ctrl = int(mujoco.mjtWarning.mjWARN_BADCTRL)
    physics = np.ones(env.sim.nstate, bool)
    physics[env.sim.layout.ctrl] = False
    for action, like in ((jnp.array([jnp.nan]), 0.0), (jnp.array([jnp.inf]), 1.0)):
      eager = env.step(single, action)
      jitted = jax.jit(env.step)(single, action)
      np.testing.assert_array_equal(np.asarray(eager.data.row), np.asarray(jitted.data.row))
      assert bool(env.bad(eager.data)) == bool(np.isnan(action[0]))
      assert (int(eager.data.warnings[bad_ctrl]) > 0) == bool(np.isnan(action[0]))
      assert np.all(np.isfinite(np.asarray(eager.obs)))
      same = env.step(single, jnp.array([like]))
      np.testing.assert_array_equal(np.asarray(eager.data.row)[physics],
                                    np.asarray(same.data.row)[physics])
      np.testing.assert_array_equal(np.asarray(eager.data.ctrl), np.asarray(action))
    wrapped = envs.wrap_for_brax_training(env, episode_length=100)
    state = wrapped.reset(keys)
    state = wrapped.step(state, jnp.array([[0.1], [jnp.nan], [0.1]]))
    np.testing.assert_array_equal(np.asarray(state.done), [0, 1, 0])
    """, ("ok",)),

  # Data: parts of the row by shape, named.
  refused("make_data qpos of the wrong size", "env.make_data(qpos=jnp.zeros(5))",
          r"qpos must be numbers of shape \(2,\).*got \(5,\)"),
  refused("make_data qvel a string", "env.make_data(qvel='fast')",
          r"qvel must be numbers of shape \(2,\)"),
  refused("replace of no field", "single.data.replace(qpos_typo=1.0)", r"no field 'qpos_typo'"),

  # Constructors.
  *[refused(f"CartPoleBalance n_substeps {bad}", f"envs.CartPoleBalance(n_substeps={bad})",
            r"n_substeps must be an int >= 1")
    for bad in ("0", "-1", "2.0", "'2'", "True")],
  *[refused(f"CartPoleBalance num_threads {bad}", f"envs.CartPoleBalance(num_threads={bad})",
            r"num_threads must be an int in \[0, ")
    for bad in ("-1", "1.5", "None", "10**6")],
  refused("CartPoleBalance param_fields a str",
          "envs.CartPoleBalance(param_fields='body_mass')",
          r"param_fields must be a sequence of field names, got 'body_mass'"),
  refused("CartPoleBalance param_fields unknown", "envs.CartPoleBalance(param_fields=('nope',))",
          r"nope"),
  refused("CartPoleBalance param_fields repeated",
          "envs.CartPoleBalance(param_fields=('body_mass', 'body_mass'))",
          r"param_fields must be unique"),
  case("CartPoleBalance takes numpy ints", """
    e = envs.CartPoleBalance(n_substeps=np.int64(3), num_threads=np.int32(1))
    assert e.n_substeps == 3 and type(e.n_substeps) is int
    e.close()
    """, ("ok",)),
  refused("Env of no model", "envs.CartPoleBalance.__mro__[1].__init__(env, None)",
          r"model must be a mujoco.MjModel"),

  # The Playground adapter's arguments, checked before Playground is imported or loads anything.
  refused("playground.load num_threads '2'", "playground.load('CartpoleBalance', num_threads='2')",
          r"num_threads must be an int in \[0, "),
  refused("playground.load num_threads -1", "playground.load('CartpoleBalance', num_threads=-1)",
          r"num_threads must be an int in \[0, "),
  refused("playground.wrap num_threads 1.5", "playground.wrap(None, num_threads=1.5)",
          r"num_threads must be an int"),
  refused("playground.load_mjx overrides a list",
          "playground.load_mjx('CartpoleBalance', config_overrides=['impl'])",
          r"config_overrides must be a dict"),
  refused("playground.load_mjx menagerie a number",
          "playground.load_mjx('CartpoleBalance', menagerie=3)", r"menagerie must be a folder"),
]


results, test_names_are_unique, test_case = table_tests(PRELUDE, CASES)
