"""Hostile and careless calls of the JAX front end, each isolated so that a crash is a failure.

CASES is the table: a name, a snippet, and what it must do: raise an exception of a type whose
message matches a pattern ("raises"), or run to the end, its own asserts included ("ok").
The snippets run in child processes, in order, one result line each; when a child dies (a
signal, an exit) or hangs, the case it was running is marked with how it died and a new child
goes on with the next case. Every case sees a fresh prelude: a small model, its Simulator and
inputs for N = 3 simulations (see PRELUDE).
"""

import textwrap

from tests.fuzzing import run_cases, table_tests

PRELUDE = r'''
import dataclasses, gc, threading
import numpy as np, jax, jax.numpy as jnp, mujoco
jax.config.update("jax_enable_x64", True)
import mjbatch_jax
from mjbatch_jax import _ffi
from mjbatch_jax._extension import ext

XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body name="cart" pos="0 0 .1">
      <joint name="slide" type="slide" axis="1 0 0"/>
      <geom type="box" size=".1 .1 .05" mass="1"/>
      <body name="pole" pos="0 0 .05">
        <joint name="hinge" axis="0 1 0" damping=".01"/>
        <geom type="capsule" fromto="0 0 0 0 0 .5" size=".02" mass=".1"/>
        <site name="tip" pos="0 0 .5"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slide" gear="10" ctrlrange="-1 1"/></actuator>
  <sensor><jointpos joint="hinge"/><framepos objtype="site" objname="tip"/></sensor>
</mujoco>
"""
PILE = """
<mujoco><size memory="100K"/><worldbody><geom type="plane" size="5 5 .1"/>{}</worldbody></mujoco>
""".format("".join(
  f'<body pos="{i % 4} {i // 4} 1"><freejoint/><geom size=".1" mass="1"/></body>'
  for i in range(12)))
N = 3
m = mujoco.MjModel.from_xml_string(XML)
sim = mjbatch_jax.Simulator(m, num_threads=1)
state = sim.init_state(N)
ctrl = jnp.zeros((N, m.nu))
params = sim.params(N, ("body_mass",))
ctrls = jnp.zeros((N, 4, m.nu))
'''

# (name, snippet, expectation): ("raises", exception type name, regex) or ("ok",).
# control.ilqr_gains on the prelude's cart-pole: a plan of 4 knots, a cost on qpos and ctrl.
GAINS = """
from mjbatch_jax import control
cost = control.Cost(lambda x, u, obs, t: jnp.concatenate([x[sim.layout.qpos], u]),
                    (control.Term(m.nq, 1.0), control.Term(m.nu, 0.1)))
def gains(mu, plan=None, start=None):
  return control.ilqr_gains(cost, sim.params(1), state[0] if start is None else start,
                            jnp.zeros((4, m.nu)) if plan is None else plan, mu)
"""

# control.ilqr with an accept guard on the same cart-pole, started away from the cost's minimum
# (so that a step lowers the cost and accept is asked).
GUARDED = GAINS + """
def solve(accept, **kw):
  return control.ilqr(cost, sim.params(1), state[0].at[sim.layout.qpos].set(0.3),
                      jnp.zeros((4, m.nu)), iterations=2, accept=accept, **kw)
"""

CASES = [
  # nstep: range-checked as an int64 and never cast down silently.
  ("step nstep 2**32+1", "mjbatch_jax.step(state, ctrl, params, nstep=2**32 + 1)",
   ("raises", "ValueError", r"nstep must be an int in \[1, 2\*\*31 - 1\]")),
  ("step nstep 2**31", "mjbatch_jax.step(state, ctrl, params, nstep=2**31)",
   ("raises", "ValueError", "nstep")),
  ("rollout nstep 2**31", "mjbatch_jax.rollout(state, ctrls, params, nstep=2**31)",
   ("raises", "ValueError", "nstep")),
  ("transition_fd nstep 2**31", "mjbatch_jax.transition_fd(state, ctrl, params, nstep=2**31)",
   ("raises", "ValueError", "nstep")),
  ("step nstep 0", "mjbatch_jax.step(state, ctrl, params, nstep=0)",
   ("raises", "ValueError", "nstep")),
  ("step nstep float", "mjbatch_jax.step(state, ctrl, params, nstep=2.7)",
   ("raises", "ValueError", "nstep")),
  ("step nstep bool", "mjbatch_jax.step(state, ctrl, params, nstep=True)",
   ("raises", "ValueError", "nstep")),
  ("step nstep traced",
   "jax.jit(lambda s, n: mjbatch_jax.step(s, ctrl, params, nstep=n))(state, 2)",
   ("raises", "ValueError", "static")),
  ("engine nstep 2**31 past Python", textwrap.dedent("""
    with mjbatch_jax.simulation_errors():
      _ffi.step.call(state, ctrl, jnp.asarray(params['body_mass']), params.spec, 2**31)
    """), ("raises", "ValueError", r"nstep must be in \[1")),
  # Threads: capped, and a huge count is refused before any thread starts.
  ("num_threads 2**23", "mjbatch_jax.Simulator(m, num_threads=2**23)",
   ("raises", "ValueError", "num_threads")),
  ("num_threads 1000", "mjbatch_jax.Simulator(m, num_threads=1000)",
   ("raises", "ValueError", "num_threads")),
  ("num_threads -1", "mjbatch_jax.Simulator(m, num_threads=-1)",
   ("raises", "ValueError", "num_threads")),
  ("num_threads float", "mjbatch_jax.Simulator(m, num_threads=1.5)",
   ("raises", "ValueError", "num_threads")),
  ("engine num_threads 2**23", "ext.open_engine(m._address, 2**23)",
   ("raises", "ValueError", "nthread")),
  # Every output buffer is checked by the handler, whatever Python declared.
  ("rollout wrong nsensordata", textwrap.dedent("""
    spec = dataclasses.replace(params.spec, nsensordata=params.spec.nsensordata + 7)
    with mjbatch_jax.simulation_errors():
      _ffi.rollout.call(state, ctrls, jnp.asarray(params['body_mass']), spec, 1)
    """), ("raises", "ValueError", "sensordata must have")),
  ("rollout fewer sensordata", textwrap.dedent("""
    spec = dataclasses.replace(params.spec, nsensordata=0)
    with mjbatch_jax.simulation_errors():
      _ffi.rollout.call(state, ctrls, jnp.asarray(params['body_mass']), spec, 1)
    """), ("raises", "ValueError", "sensordata must have")),
  ("step wrong nstate", textwrap.dedent("""
    spec = dataclasses.replace(params.spec, nstate=params.spec.nstate + 1)
    s = jnp.zeros((N, spec.nstate))
    with mjbatch_jax.simulation_errors():
      _ffi.step.call(s, ctrl, jnp.asarray(params['body_mass']), spec, 1)
    """), ("raises", "ValueError", "nstate")),
  ("params field size lie", textwrap.dedent("""
    spec = params.spec.with_fields(("body_mass",), ((m.nbody + 5,),))
    flat = jnp.ones((N, m.nbody + 5))
    with mjbatch_jax.simulation_errors():
      _ffi.step.call(state, ctrl, flat, spec, 1)
    """), ("raises", "ValueError", "body_mass")),
  ("params field unknown to engine", textwrap.dedent("""
    spec = params.spec.with_fields(("no_such_field",), ((2,),))
    with mjbatch_jax.simulation_errors():
      _ffi.step.call(state, ctrl, jnp.ones((N, 2)), spec, 1)
    """), ("raises", "ValueError", "no_such_field")),
  ("forward output size lie", textwrap.dedent("""
    with mjbatch_jax.simulation_errors():
      _ffi.forward.call(state, jnp.asarray(params['body_mass']), params.spec, ("xpos",), (5,))
    """), ("raises", "ValueError", "output 'xpos'")),
  ("finite_difference column out of range", textwrap.dedent("""
    with mjbatch_jax.simulation_errors():
      _ffi.finite_difference.call(state, ctrl, jnp.asarray(params['body_mass']), params.spec,
                                  1, [10**6], 1e-6, [False])
    """), ("raises", "ValueError", "column")),
  ("transition_fd output lie", textwrap.dedent("""
    spec = dataclasses.replace(params.spec, nsensordata=params.spec.nsensordata + 3)
    with mjbatch_jax.simulation_errors():
      _ffi.transition_fd.call(state, ctrl, jnp.asarray(params['body_mass']), spec, 1e-6,
                              False, True)
    """), ("raises", "ValueError", "must have")),
  # Closed objects and lifetimes.
  ("step after close", "sim.close(); mjbatch_jax.step(state, ctrl, params)",
   ("raises", "ValueError", "closed")),
  # Simulators of one model share an engine, which goes when the last of them closes: a model of
  # this case's own, so that no earlier case's objects share it.
  ("jitted after close", textwrap.dedent("""
    own = mujoco.MjModel.from_xml_string(XML.replace('0.002', '0.0021'))
    s = mjbatch_jax.Simulator(own, num_threads=1)
    x, p = s.init_state(N), s.params(N)
    f = jax.jit(mjbatch_jax.step)
    f(x, ctrl, p).block_until_ready()
    s.close()
    with mjbatch_jax.simulation_errors():
      f(x, ctrl, p).block_until_ready()
    """), ("raises", "ValueError", "closed")),
  ("close twice", "sim.close(); sim.close(); assert sim.closed", ("ok",)),
  ("params outlive their Simulator object", textwrap.dedent("""
    p = mjbatch_jax.Simulator(m, num_threads=1).params(2, ("body_mass",))
    s = mjbatch_jax.Simulator(m, num_threads=1).init_state(2)
    gc.collect()
    out = mjbatch_jax.step(s, jnp.zeros((2, m.nu)), p)
    assert np.isfinite(np.asarray(out)).all()
    """), ("ok",)),
  # Dtypes, shapes, values.
  ("float16 state", "mjbatch_jax.step(state.astype(jnp.float16), ctrl, params)",
   ("raises", "ValueError", "float32 or float64")),
  ("bfloat16 state", "mjbatch_jax.step(state.astype(jnp.bfloat16), ctrl, params)",
   ("raises", "ValueError", "float32 or float64")),
  ("int ctrl", "mjbatch_jax.step(state, ctrl.astype(jnp.int32), params)",
   ("raises", "ValueError", "ctrl must be float32 or float64")),
  ("complex state", "mjbatch_jax.step(state.astype(jnp.complex64), ctrl, params)",
   ("raises", "ValueError", "float32 or float64")),
  ("string state", "mjbatch_jax.step('abc', ctrl, params)",
   ("raises", "ValueError", "state")),
  ("0-d state", "mjbatch_jax.step(jnp.float64(1.0), ctrl, params)",
   ("raises", "ValueError", "nstate")),
  ("ctrl wrong shape", "mjbatch_jax.step(state, jnp.zeros((N, m.nu + 1)), params)",
   ("raises", "ValueError", "ctrl must have shape")),
  ("params leaf wrong shape",
   "mjbatch_jax.step(state, ctrl, params.replace({'body_mass': jnp.ones((N, 2))}))",
   ("raises", "ValueError", "body_mass")),
  ("params not Params", "mjbatch_jax.step(state, ctrl, {'body_mass': 1.0})",
   ("raises", "ValueError", "params must come from")),
  ("params of another model", textwrap.dedent("""
    other = mjbatch_jax.Simulator(mujoco.MjModel.from_xml_string(PILE), num_threads=1)
    mjbatch_jax.step(state, ctrl, other.params(N))
    """), ("raises", "ValueError", "nstate")),
  ("N=0 with params fields", textwrap.dedent("""
    p0 = params.replace({'body_mass': params['body_mass'][:0]})
    out = mjbatch_jax.step(state[:0], ctrl[:0], p0)
    assert out.shape == (0, sim.nstate)
    states, sensors = mjbatch_jax.rollout(state[:0], ctrls[:0], p0)
    assert states.shape == (0, 4, sim.nstate) and sensors.shape == (0, 4, m.nsensordata)
    A, B = mjbatch_jax.transition_fd(state[:0], ctrl[:0], p0)
    assert A.shape == (0, 2 * m.nv, 2 * m.nv)
    g = jax.grad(lambda p: mjbatch_jax.step(state[:0], ctrl[:0], p).sum())(p0)
    assert g['body_mass'].shape == (0, m.nbody)
    """), ("ok",)),
  ("N=1", "assert mjbatch_jax.step(state[:1], ctrl[:1], "
   "params.replace({'body_mass': params['body_mass'][:1]})).shape == (1, sim.nstate)", ("ok",)),
  ("NaN state is MuJoCo's bad-qpos warning and reset", textwrap.dedent("""
    bad = state.at[1, sim.layout.qpos].set(jnp.nan)
    out, warnings = mjbatch_jax.step(bad, ctrl, params, return_warnings=True)
    assert np.isfinite(np.asarray(out)).all()
    assert warnings[1].sum() > 0 and warnings[0].sum() == 0
    """), ("ok",)),
  ("NaN ctrl is MuJoCo's bad-ctrl warning", textwrap.dedent("""
    out, warnings = mjbatch_jax.step(state, ctrl.at[2].set(jnp.nan), params,
                                     return_warnings=True)
    assert np.isfinite(np.asarray(out[:, sim.layout.qvel])).all()
    assert warnings[2, int(mujoco.mjtWarning.mjWARN_BADCTRL)] == 1
    assert warnings[:2].sum() == 0
    """), ("ok",)),
  ("Inf ctrl is clamped to the ctrlrange", textwrap.dedent("""
    out = mjbatch_jax.step(state, ctrl.at[2].set(jnp.inf), params)
    want = mjbatch_jax.step(state, ctrl.at[2].set(1.0), params)
    np.testing.assert_array_equal(out[:, sim.layout.qvel], want[:, sim.layout.qvel])
    """), ("ok",)),
  ("NaN params mass", textwrap.dedent("""
    out, warnings = mjbatch_jax.step(state, ctrl, params.replace(
        {'body_mass': params['body_mass'].at[0].set(jnp.nan)}), return_warnings=True)
    assert out.shape == state.shape
    """), ("ok",)),
  ("MuJoCo error names the sim", textwrap.dedent("""
    pile = mujoco.MjModel.from_xml_string(PILE)
    with mjbatch_jax.Simulator(pile, num_threads=1) as s:
      rows = np.array(s.init_state(2))
      for b in range(12):
        rows[1, s.layout.qpos][7 * b : 7 * b + 3] = [0.05 * b, 0, 0.1 + 0.01 * b]
      mjbatch_jax.step(jnp.asarray(rows), jnp.zeros((2, 0)), s.params(2))
    """), ("raises", "SimulationError", "sim 1: mj_stackAlloc")),
  ("errors do not leak batches", textwrap.dedent("""
    pile = mujoco.MjModel.from_xml_string(PILE)
    with mjbatch_jax.Simulator(pile, num_threads=1) as s:
      rows = np.array(s.init_state(2))
      for b in range(12):
        rows[1, s.layout.qpos][7 * b : 7 * b + 3] = [0.05 * b, 0, 0.1 + 0.01 * b]
      for _ in range(20):  # more than the engine's batches: a leaked one would hang here
        try:
          mjbatch_jax.step(jnp.asarray(rows), jnp.zeros((2, 0)), s.params(2))
        except mjbatch_jax.SimulationError:
          pass
      out = mjbatch_jax.step(jnp.asarray(rows[:1]), jnp.zeros((1, 0)), s.params(1))
      assert np.isfinite(np.asarray(out)).all()
    """), ("ok",)),
  # Derivatives.
  ("transition_fd eps 0", "mjbatch_jax.transition_fd(state, ctrl, params, eps=0)",
   ("raises", "ValueError", "eps")),
  ("transition_fd eps NaN", "mjbatch_jax.transition_fd(state, ctrl, params, eps=float('nan'))",
   ("raises", "ValueError", "eps")),
  ("transition_fd eps -1 rows",
   "mjbatch_jax.transition_fd(state, ctrl, params, eps=-1.0, method='rows')",
   ("raises", "ValueError", "eps")),
  ("transition_fd eps inf", "mjbatch_jax.transition_fd(state, ctrl, params, eps=float('inf'))",
   ("raises", "ValueError", "eps")),
  ("transition_fd method typo", "mjbatch_jax.transition_fd(state, ctrl, params, method='nativ')",
   ("raises", "ValueError", "method")),
  ("transition_fd centered string",
   "mjbatch_jax.transition_fd(state, ctrl, params, centered='yes')",
   ("raises", "ValueError", "centered")),
  ("param_fd eps 0", "mjbatch_jax.param_fd(state, ctrl, params, eps=0)",
   ("raises", "ValueError", "eps")),
  ("step eps 0", "jax.jacfwd(lambda c: mjbatch_jax.step(state, c, params, eps=0.0))(ctrl)",
   ("raises", "ValueError", "eps")),
  ("RK4 native", textwrap.dedent("""
    rk4 = mujoco.MjModel.from_xml_string(XML.replace('timestep="0.002"',
                                                     'timestep="0.002" integrator="RK4"'))
    with mjbatch_jax.Simulator(rk4, num_threads=1) as s:
      mjbatch_jax.transition_fd(s.init_state(N), ctrl, s.params(N), method="native")
    """), ("raises", "ValueError", "RK4")),
  ("RK4 auto takes rows", textwrap.dedent("""
    rk4 = mujoco.MjModel.from_xml_string(XML.replace('timestep="0.002"',
                                                     'timestep="0.002" integrator="RK4"'))
    with mjbatch_jax.Simulator(rk4, num_threads=1) as s:
      A, B = mjbatch_jax.transition_fd(s.init_state(N), ctrl, s.params(N))
      assert np.isfinite(np.asarray(A)).all() and np.abs(np.asarray(B)).max() > 0
    """), ("ok",)),
  ("hessian of step", "jax.hessian(lambda c: mjbatch_jax.step(state, c, params).sum())(ctrl)",
   ("raises", "ValueError", "higher-order")),
  ("jacfwd of jacrev of rollout", textwrap.dedent("""
    f = lambda c: mjbatch_jax.rollout(state, c, params)[0].sum()
    jax.jacfwd(jax.jacrev(f))(ctrls)
    """), ("raises", "ValueError", "higher-order")),
  ("grad through return_warnings",
   "jax.grad(lambda c: mjbatch_jax.step(state, c, params, return_warnings=True)[0].sum())(ctrl)",
   ("raises", "ValueError", "return_warnings")),
  # forward: fields mj_forward does not compute are computed by the right call, or refused.
  ("forward qfrc_inverse is mj_inverse", textwrap.dedent("""
    s = state.at[:, sim.layout.qvel].set(jnp.asarray([[0.1, -0.2], [0.3, 0.0], [0.0, 1.0]]))
    s = s.at[:, sim.layout.ctrl].set(jnp.asarray([[0.5], [-0.2], [0.9]]))
    got = mjbatch_jax.forward(s, params, ("qfrc_inverse", "cacc", "subtree_linvel"))
    for i in range(N):
      d = mujoco.MjData(m)
      mujoco.mj_setState(m, d, np.asarray(s[i]), mujoco.mjtState.mjSTATE_INTEGRATION)
      mujoco.mj_forward(m, d)
      mujoco.mj_rnePostConstraint(m, d)
      mujoco.mj_subtreeVel(m, d)
      np.testing.assert_array_equal(got["cacc"][i], d.cacc)
      np.testing.assert_array_equal(got["subtree_linvel"][i], d.subtree_linvel)
      mujoco.mj_inverse(m, d)
      np.testing.assert_allclose(got["qfrc_inverse"][i], d.qfrc_inverse, atol=1e-12)
      # The inverse of the forward dynamics: the applied (actuator) forces, not zeros.
      np.testing.assert_allclose(got["qfrc_inverse"][i], d.qfrc_actuator, atol=1e-9)
      assert np.abs(d.qfrc_actuator).max() > 1
    """), ("ok",)),
  ("forward qHDiagInv", "mjbatch_jax.forward(state, params, ('qHDiagInv',))",
   ("raises", "ValueError", "mj_step")),
  ("forward typo", "mjbatch_jax.forward(state, params, ('site_xposs',))",
   ("raises", "ValueError", "site_xposs")),
  ("forward arena field", "mjbatch_jax.forward(state, params, ('efc_force',))",
   ("raises", "ValueError", "efc_force")),
  ("forward int field", "mjbatch_jax.forward(state, params, ('warning',))",
   ("raises", "ValueError", "warning")),
  ("forward no fields", "mjbatch_jax.forward(state, params, ())",
   ("raises", "ValueError", "non-empty")),
  # Observations, params options, randomisation and names: the arguments added with them.
  ("observe unknown field", "mjbatch_jax.step(state, ctrl, params, observe=('site_xposs',))",
   ("raises", "ValueError", "site_xposs")),
  ("observe a string", "mjbatch_jax.step(state, ctrl, params, observe='xpos')",
   ("raises", "ValueError", "string")),
  ("observe twice", "mjbatch_jax.step(state, ctrl, params, observe=('xpos', 'xpos'))",
   ("raises", "ValueError", "once")),
  ("observe_at unknown",
   "mjbatch_jax.step(state, ctrl, params, observe=('xpos',), observe_at='before')",
   ("raises", "ValueError", "observe_at")),
  ("rollout observe arena field",
   "mjbatch_jax.rollout(state, ctrls, params, observe=('efc_force',))",
   ("raises", "ValueError", "efc_force")),
  ("observe after close", "sim.close(); mjbatch_jax.step(state, ctrl, params, observe=('xpos',))",
   ("raises", "ValueError", "closed")),
  ("observe with NaN state", textwrap.dedent("""
    bad = state.at[0, sim.layout.qpos].set(jnp.nan)
    out, obs, warnings = mjbatch_jax.step(bad, ctrl, params, observe=('xpos',),
                                          return_warnings=True)
    assert np.isfinite(np.asarray(obs['xpos'])).all() and warnings[0].sum() > 0
    """), ("ok",)),
  ("shared leaf with a batch axis", textwrap.dedent("""
    p = sim.params(N, ('opt.gravity',), shared=('opt.gravity',))
    mjbatch_jax.step(state, ctrl, p.replace({'opt.gravity': jnp.zeros((N, 3))}))
    """), ("raises", "ValueError", "shared by all simulations")),
  ("shared unknown field", "sim.params(N, ('body_mass',), shared=('geom_friction',))",
   ("raises", "ValueError", "not among fields")),
  ("select out of range", "sim.params(N, ('body_mass',), select={'body_mass': [99]})",
   ("raises", "ValueError", "rows 0")),
  ("select a float", "sim.params(N, ('body_mass',), select={'body_mass': [1.5]})",
   ("raises", "ValueError", "ids or names")),
  ("select a typo", "sim.params(N, ('body_mass',), select={'body_mass': ['poll']})",
   ("raises", "ValueError", "pole")),
  ("select wrong leaf shape", textwrap.dedent("""
    p = sim.params(N, ('body_mass',), select={'body_mass': ['pole']})
    mjbatch_jax.step(state, ctrl, p.replace({'body_mass': jnp.ones((N, 2))}))
    """), ("raises", "ValueError", "body_mass")),
  ("set_const not a bool", "sim.params(N, ('body_mass',), set_const='yes')",
   ("raises", "ValueError", "set_const")),
  ("set_const with NaN mass", textwrap.dedent("""
    p = sim.params(N, ('body_mass',), set_const=True)
    out, w = mjbatch_jax.step(state, ctrl, p.replace(
        {'body_mass': p['body_mass'].at[1].set(jnp.nan)}), return_warnings=True)
    assert out.shape == state.shape
    """), ("ok",)),
  ("set_const after close", textwrap.dedent("""
    p = sim.params(N, ('body_mass',), set_const=True)
    sim.close()
    mjbatch_jax.step(state, ctrl, p)
    """), ("raises", "ValueError", "closed")),
  ("randomize unknown field",
   "mjbatch_jax.randomize(jax.random.key(0), params, uniform={'dof_damping': (0, 1)})",
   ("raises", "ValueError", "dof_damping")),
  ("randomize a dict", "mjbatch_jax.randomize(jax.random.key(0), {'a': 1}, uniform={})",
   ("raises", "ValueError", "Simulator.params")),
  ("randomize twice one field", textwrap.dedent("""
    mjbatch_jax.randomize(jax.random.key(0), params, uniform={'body_mass': (1, 2)},
                          scale={'body_mass': (1, 2)})
    """), ("raises", "ValueError", "one way")),
  ("tree_replace unknown path", "mjbatch_jax.tree_replace({'a': 1}, {'b.c': 2})",
   ("raises", "ValueError", "b")),
  ("names typo", "sim.names.joint('hingee')", ("raises", "ValueError", "hinge")),
  ("names empty", "sim.names.site('')", ("raises", "ValueError", "unnamed")),
  ("names not a string", "sim.names.body(3)", ("raises", "ValueError", "strings")),
  # Simulator arguments.
  ("Simulator of a string", "mjbatch_jax.Simulator('model.xml')",
   ("raises", "ValueError", "MjModel")),
  ("params of an integer field", "sim.params(N, ('geom_type',))",
   ("raises", "ValueError", "geom_type")),
  ("params of an unknown field", "sim.params(N, ('body_masss',))",
   ("raises", "ValueError", "body_masss")),
  ("params num_sims 0", "sim.params(0)", ("raises", "ValueError", "num_sims")),
  ("params num_sims bool", "sim.params(True)", ("raises", "ValueError", "num_sims")),
  ("init_state keyframe out of range", "sim.init_state(N, keyframe=5)",
   ("raises", "ValueError", "keyframe")),
  # MuJoCo errors on the calling thread are trapped, and MuJoCo's Python errors still work.
  ("calling-thread MuJoCo error trapped", textwrap.dedent("""
    assert ext.trapped_error("boom") == "boom"
    try:
      mujoco.mj_stateSize(m, 1 << 30)
    except Exception as e:
      assert type(e).__name__ == "FatalError", type(e)
    else:
      raise AssertionError("no FatalError")
    assert ext.trapped_error("again") == "again"
    """), ("ok",)),
  # Round three: bounds, flags and names that used to pass silently or fail late.
  ("forward qH", "mjbatch_jax.forward(state, params, ('qH',))",
   ("raises", "ValueError", "scratch of mj_step's integrators")),
  ("observe qLU in step", "mjbatch_jax.step(state, ctrl, params, observe=('qLU',), "
   "observe_at='step')", ("raises", "ValueError", "scratch")),
  ("observe cacc in step", "mjbatch_jax.step(state, ctrl, params, observe=('cacc',), "
   "observe_at='step')", ("raises", "ValueError", "observe_at='new'")),
  ("forward energy without the flag", "mjbatch_jax.forward(state, params, ('energy',))",
   ("raises", "ValueError", "energy flag")),
  ("forward energy with the flag", textwrap.dedent("""
    own = mujoco.MjModel.from_xml_string(XML)
    own.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
    with mjbatch_jax.Simulator(own, num_threads=1) as s:
      x = s.init_state(N).at[:, s.layout.qvel].set(0.5)
      got = mjbatch_jax.forward(x, s.params(N), ('energy',))['energy']
      d = mujoco.MjData(own)
      mujoco.mj_setState(own, d, np.asarray(x[0]), mujoco.mjtState.mjSTATE_INTEGRATION)
      mujoco.mj_forward(own, d)
      np.testing.assert_array_equal(got[0], d.energy)
      assert got.shape == (N, 2) and d.energy[1] > 0
    """), ("ok",)),
  ("randomize low above high",
   "mjbatch_jax.randomize(jax.random.key(0), params, uniform={'body_mass': (2.0, 1.0)})",
   ("raises", "ValueError", "low <= high")),
  ("randomize infinite bound",
   "mjbatch_jax.randomize(jax.random.key(0), params, scale={'body_mass': (0.5, np.inf)})",
   ("raises", "ValueError", "finite")),
  ("randomize NaN bound",
   "mjbatch_jax.randomize(jax.random.key(0), params, uniform={'body_mass': (np.nan, 1.0)})",
   ("raises", "ValueError", "finite")),
  ("randomize log_uniform from 0",
   "mjbatch_jax.randomize(jax.random.key(0), params, log_uniform={'body_mass': (0.0, 1.0)})",
   ("raises", "ValueError", "> 0")),
  ("randomize bounds not a pair",
   "mjbatch_jax.randomize(jax.random.key(0), params, uniform={'body_mass': 1.0})",
   ("raises", "ValueError", "pair")),
  ("init_state keyframe True", textwrap.dedent("""
    own = mujoco.MjModel.from_xml_string(XML.replace('</actuator>',
        '</actuator><keyframe><key qpos="0 0"/><key qpos="1 1"/></keyframe>'))
    with mjbatch_jax.Simulator(own, num_threads=1) as s:
      s.init_state(N, keyframe=True)
    """), ("raises", "ValueError", "keyframe")),
  ("step observe_at typo without observe",
   "mjbatch_jax.step(state, ctrl, params, observe_at='bogus')",
   ("raises", "ValueError", "observe_at")),
  ("rollout observe_at typo without observe",
   "mjbatch_jax.rollout(state, ctrls, params, observe_at='bogus')",
   ("raises", "ValueError", "observe_at")),
  ("select nothing", "sim.params(N, ('body_mass',), select={'body_mass': []})",
   ("raises", "ValueError", "empty")),
  ("select dofs by joint name", textwrap.dedent("""
    p = sim.params(N, ('dof_damping', 'qpos0'),
                   select={'dof_damping': ['hinge'], 'qpos0': ['hinge']})
    hinge = m.joint('hinge')
    assert p['dof_damping'].shape == (N, 1) and p['qpos0'].shape == (N, 1)
    np.testing.assert_array_equal(p['dof_damping'][:, 0], m.dof_damping[hinge.dofadr[0]])
    out = mjbatch_jax.step(state, ctrl, p.replace({'dof_damping': p['dof_damping'] * 0}))
    assert out.shape == state.shape
    """), ("ok",)),
  ("select dofs by a joint typo",
   "sim.params(N, ('dof_damping',), select={'dof_damping': ['hingee']})",
   ("raises", "ValueError", "hinge")),
  ("VmapWrapper batch_size -1", textwrap.dedent("""
    from mjbatch_jax import envs
    envs.VmapWrapper(envs.CartPoleBalance(), batch_size=-1)
    """), ("raises", "ValueError", "batch_size must be an int >= 1")),
  ("VmapWrapper batch_size 2.0", textwrap.dedent("""
    from mjbatch_jax import envs
    envs.VmapWrapper(envs.CartPoleBalance(), batch_size=2.0)
    """), ("raises", "ValueError", "batch_size")),
  ("wrappers take numpy ints", textwrap.dedent("""
    from mjbatch_jax import envs
    env = envs.CartPoleBalance()
    batched = envs.VmapWrapper(env, batch_size=np.int64(2))
    limited = envs.EpisodeWrapper(batched, np.int64(5), np.int32(1))
    drawn = envs.DomainRandomizationWrapper(env, lambda p, rng: p, period=np.int64(3))
    assert type(limited.episode_length) is int and type(batched.batch_size) is int
    state = jax.jit(limited.reset)(jax.random.key(0))
    assert state.done.shape == (2,)
    """), ("ok",)),
  # Python callbacks: the engine's threads cannot call them; every call refuses them up front,
  # and a function compiled before one was installed refuses it from the handler. Each case
  # uninstalls its callback, since the cases after it share the process.
  *[(f"python mjcb_{kind} {how}", textwrap.dedent(f"""
    f = jax.jit(mjbatch_jax.step)
    f(state, ctrl, params).block_until_ready()
    mujoco.set_mjcb_{kind}(lambda *args: {result})
    try:
      with mjbatch_jax.simulation_errors():
        {call}
    finally:
      mujoco.set_mjcb_{kind}(None)
    """), ("raises", "ValueError", f"mjcb_{kind} is a Python function.*set_mjcb_{kind}"))
    for kind, result in (("control", "None"), ("passive", "None"), ("sensor", "None"),
                         ("act_gain", "0.0"), ("contactfilter", "0"))
    for how, call in (
      ("step", "mjbatch_jax.step(state, ctrl, params)"),
      ("jitted before", "f(state, ctrl, params).block_until_ready()"),
    )],
  *[(f"python mjcb_control {how}", textwrap.dedent(f"""
    mujoco.set_mjcb_control(lambda m, d: None)
    try:
      with mjbatch_jax.simulation_errors():
        {call}
    finally:
      mujoco.set_mjcb_control(None)
    """), ("raises", "ValueError", "mjcb_control is a Python function"))
    for how, call in (
      ("rollout", "mjbatch_jax.rollout(state, ctrls, params)"),
      ("forward", "mjbatch_jax.forward(state, params)"),
      ("transition_fd", "mjbatch_jax.transition_fd(state, ctrl, params)"),
      ("param_fd", "mjbatch_jax.param_fd(state, ctrl, params)"),
      ("grad", "jax.grad(lambda u: mjbatch_jax.step(state, u, params).sum())(ctrl)"),
      ("jitted rollout", "jax.jit(mjbatch_jax.rollout)(state, ctrls, params)[0]"
                         ".block_until_ready()"),
    )],
  ("C callback through ctypes runs", textwrap.dedent("""
    import ctypes
    calls = []
    passive = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
        lambda m_, d_: calls.append(1))
    mujoco.set_mjcb_passive(passive)
    try:
      mjbatch_jax.step(state, ctrl, params, nstep=2)
    finally:
      mujoco.set_mjcb_passive(None)
    assert len(calls) == 2 * N, len(calls)
    mjbatch_jax.step(state, ctrl, params)
    """), ("ok",)),
  ("callback uninstalled, calls run again", textwrap.dedent("""
    mujoco.set_mjcb_control(lambda m, d: None)
    try:
      mjbatch_jax.step(state, ctrl, params)
    except ValueError:
      pass
    mujoco.set_mjcb_control(None)
    assert mjbatch_jax.step(state, ctrl, params).shape == state.shape
    """), ("ok",)),
  # Threads: concurrent calls are right and use a bounded number of threads.
  ("concurrent calls bounded", textwrap.dedent("""
    s2 = mjbatch_jax.Simulator(m, num_threads=2)
    p2 = s2.params(64)
    x0 = s2.init_state(64).at[:, s2.layout.qvel].set(0.1)
    want = np.asarray(mjbatch_jax.step(x0, jnp.zeros((64, m.nu)), p2, nstep=20))
    def threads():
      with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("Threads:")).split()[1])
    peak, results, errors = [threads()], [], []
    def work():
      try:
        for _ in range(5):
          results.append(np.asarray(mjbatch_jax.step(x0, jnp.zeros((64, m.nu)), p2, nstep=20)))
          peak.append(threads())
      except Exception as e:
        errors.append(e)
    pool = [threading.Thread(target=work) for _ in range(8)]
    for t in pool: t.start()
    for t in pool: t.join()
    assert not errors, errors
    assert all(np.array_equal(r, want) for r in results) and len(results) == 40
    slots = ext.engine_max_slots(s2.spec.engine)
    # 8 Python threads, XLA's own pool, and at most `slots` batches of 2 threads (1 the caller).
    assert max(peak) - peak[0] <= 8 + slots * 1 + 64, (peak, slots)
    """), ("ok",)),
  # control.ilqr_gains' mu: a non-empty 1-D sequence of finite numbers >= 0, refused before
  # any simulation; the plan and start as ilqr's; a closed simulator.
  *[(f"ilqr_gains mu {label}", GAINS + f"gains({value})", ("raises", "ValueError", pattern))
    for label, value, pattern in (
      ("empty", "[]", "non-empty 1-D"), ("scalar", "1.0", "non-empty 1-D"),
      ("2-D", "[[1.0, 2.0]]", "1-D"), ("strings", "['a']", "numbers"),
      ("bools", "[True]", "numbers"), ("None", "None", "numbers"),
      ("NaN", "[1.0, float('nan')]", "finite and >= 0"),
      ("inf", "[float('inf')]", "finite and >= 0"), ("negative", "[-1e-3]", "finite and >= 0"),
      ("object", "[object()]", "numbers"))],
  ("ilqr_gains plan wrong nu", GAINS + "gains([1.0], plan=jnp.zeros((4, m.nu + 1)))",
   ("raises", "ValueError", r"\(T, nu=1\)")),
  ("ilqr_gains plan NaN", GAINS + "gains([1.0], plan=jnp.full((4, m.nu), jnp.nan))",
   ("raises", "ValueError", "ctrls must not hold NaN")),
  ("ilqr_gains start wrong size", GAINS + "gains([1.0], start=jnp.zeros(3))",
   ("raises", "ValueError", "shape")),
  ("ilqr_gains after close", GAINS + "sim.close(); gains([1.0])",
   ("raises", "ValueError", "closed")),
  ("ilqr_gains shapes and a traced mu", GAINS + textwrap.dedent("""
    ks, k = gains([0.0, 1.0, 1e3])
    nx = 2 * m.nv + m.na
    assert ks.shape == (3, 4, m.nu) and k.shape == (3, 4, m.nu, nx), (ks.shape, k.shape)
    assert np.all(np.isfinite(np.asarray(k)))
    traced = jax.jit(gains)(jnp.asarray([0.0, 1.0, 1e3]))[1]
    assert np.array_equal(np.asarray(traced), np.asarray(k))
    """), ("ok",)),
  # control.ilqr's accept: a function (states, ctrls) -> one boolean, checked by its shape before
  # any simulation; a guard that fails on the host is an exception, and the simulator goes on.
  *[(f"ilqr accept {label}", GUARDED + f"solve({value})", ("raises", kind, pattern))
    for label, value, kind, pattern in (
      ("True", "True", "ValueError", "accept must be a function"),
      ("string", "'yes'", "ValueError", "accept must be a function"),
      ("one argument", "lambda xs: True", "ValueError", r"accept\(states .*failed.*positional"),
      ("per knot", "lambda xs, us: us[:, 0] > 0", "ValueError", r"one boolean .*shape=\(4,\)"),
      ("float", "lambda xs, us: jnp.sum(us)", "ValueError", "one boolean .*float"),
      ("NaN", "lambda xs, us: jnp.nan", "ValueError", "one boolean .*float"))],
  ("ilqr accept after close", GUARDED + "sim.close(); solve(lambda xs, us: True)",
   ("raises", "ValueError", "closed")),
  ("ilqr accept fails on the host", GUARDED + textwrap.dedent("""
    def fail(us):
      raise RuntimeError("the guard failed")
    try:
      solve(lambda xs, us: jax.pure_callback(fail, jax.ShapeDtypeStruct((), jnp.bool_), us))
    except Exception as e:
      assert "the guard failed" in str(e), e
    else:
      raise AssertionError("the guard's failure was lost")
    free = solve(None)
    assert float(free.cost) < float(free.costs[0])
    guarded = jax.jit(lambda: solve(lambda xs, us: jnp.asarray(True)))()
    assert np.array_equal(np.asarray(guarded.ctrls), np.asarray(free.ctrls))
    """), ("ok",)),
]


results, test_names_are_unique, test_case = table_tests(PRELUDE, CASES)


def test_a_crash_is_reported_with_its_signal():
  # The harness itself: a case that kills its process is a failure naming the signal, and the
  # cases after it still run.
  out = run_cases(PRELUDE, [
    ("dies", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"),
    ("after", "x = 1"),
  ])
  assert out["dies"]["outcome"] == "crashed" and "SIGSEGV" in out["dies"]["message"]
  assert out["after"]["outcome"] == "ok"
