"""Identify the mass, centre of mass and inertia of every link of a 7-link arm from encoder data.

  python examples/sysid.py [--skip-mujoco-sysid]

The "true" arm (inline below: seven hinge joints with motors, hanging from a base) is simulated
with mjbatch_jax under two multisine torque signals of 2 s each: one to fit, one held out. The
recorded joint encoders carry Gaussian noise. The fit starts from a guess whose every mass,
centre of mass and inertia is perturbed, and minimises the encoder residual by Levenberg-Marquardt:
the Jacobian of the whole simulated trajectory w.r.t. the 49 parameters is `jax.jacfwd` through
`mjbatch_jax.rollout` (finite differences inside, all columns as extra rows of each call); the
damped Gauss-Newton steps for five Marquardt dampings are solved in JAX and simulated together as
the five rows of one rollout call, and the best is applied (optax.apply_updates) if it lowers
the cost. The whole iteration is one jitted function.

Parametrisation (always physically valid). MuJoCo stores a body's inertia as mass, centre of mass
`body_ipos`, principal moments `body_inertia` and the principal frame `body_iquat`; the frame
stays fixed here (it is not among the params, and mj_setConst is not rerun). A rigid body is
physically realisable iff its 4x4 pseudo-inertia [[S + m c c', m c], [m c', m]] is positive
definite, with S the second moments of mass about the centre c. In a fixed principal frame S is
diagonal, so the log-Cholesky factor of the pseudo-inertia (Rucker & Wensing, 2022) has no shear
terms left and each link has 7 free, unconstrained numbers:

  log m, c (3), and l (3) with S_k = m exp(2 l_k)   (exp(l_k): radius of gyration along axis k),
  principal moments I_x = S_y + S_z, I_y = S_x + S_z, I_z = S_x + S_y.

Every value of these numbers gives m > 0 and moments that are positive and satisfy the triangle
inequalities strictly, and every such body has one value: no bounds or projections are needed.

It prints the held-out prediction error (RMS of predicted minus recorded encoders on the held-out
segment, next to the encoder noise) before and after the fit, then fits the same recording, with
the same parametrisation and starting guess, with MuJoCo's own `mujoco.sysid` (its Levenberg-
Marquardt `optimizer="mujoco"`, one compiled model and rollout per finite-difference column) and
compares wall time and held-out error.
"""

import argparse
import contextlib
import importlib
import io
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import mjbatch_jax  # noqa: E402

NUM_LINKS = 7


def arm_xml() -> str:
  """Seven links hanging from the base, alternating vertical and horizontal hinge axes."""
  axes = ["0 0 1", "0 1 0", "1 0 0", "0 1 0", "0 0 1", "1 0 0", "0 1 0"]
  lengths = [0.25, 0.3, 0.25, 0.25, 0.2, 0.15, 0.1]
  masses = [2.0, 1.6, 1.2, 1.0, 0.7, 0.5, 0.3]
  body, close, sensors = "", "", ""
  pos = "0 0 0"
  for i in range(NUM_LINKS):
    length, mass = lengths[i], masses[i]
    # Off-axis centres of mass and unequal moments make each link's parameters matter.
    com = f"{0.01 * (i % 3):.3f} {-0.01 * (i % 2):.3f} {-0.5 * length:.3f}"
    second = mass * np.array([0.03, 0.04, length / np.sqrt(12)]) ** 2  # a slab-like rod
    inertia = " ".join(f"{v:.6f}" for v in second.sum() - second)
    body += f"""
      <body name="link{i + 1}" pos="{pos}">
        <joint name="joint{i + 1}" axis="{axes[i]}" damping="0.3" armature="0.005"/>
        <geom type="capsule" fromto="0 0 0 0 0 {-length}" size="0.03"/>
        <inertial pos="{com}" mass="{mass}" diaginertia="{inertia}"/>"""
    close += "\n      </body>"
    sensors += f'\n    <jointpos name="encoder{i + 1}" joint="joint{i + 1}"/>'
    pos = f"0 0 {-length}"
  motors = "".join(
    f'\n    <motor name="motor{i + 1}" joint="joint{i + 1}"/>' for i in range(NUM_LINKS)
  )
  return f"""
<mujoco model="arm7">
  <option timestep="0.005" integrator="implicitfast"><flag contact="disable"/></option>
  <worldbody>{body}{close}
  </worldbody>
  <actuator>{motors}
  </actuator>
  <sensor>{sensors}
  </sensor>
</mujoco>
"""


DURATION = 2.0  # seconds of each segment
NOISE = 1e-3  # encoder noise, rad
LM_DAMPINGS = (1e-2, 1e-1, 1.0, 10.0, 100.0)  # Marquardt: relative to the diagonal of J'J
PRIOR = 1.0  # weight of theta - guess in the residual, next to encoder errors in units of NOISE
MAX_STEP = 1.0  # largest change of any parameter in one iteration
FIELDS = ("body_mass", "body_ipos", "body_inertia")


def multisine(rng: np.random.Generator, times: np.ndarray, amplitudes: np.ndarray) -> np.ndarray:
  """(T, nu) torques: per joint, 5 sines of random frequency in [0.3, 3] Hz and random phase."""
  freqs = rng.uniform(0.3, 3.0, (5, len(amplitudes)))
  phases = rng.uniform(0, 2 * np.pi, (5, len(amplitudes)))
  waves = np.sin(2 * np.pi * freqs * times[:, None, None] + phases).sum(axis=1)
  return amplitudes * waves / np.sqrt(5)


# -- the parametrisation ------------------------------------------------------------------------


def to_theta(mass: np.ndarray, ipos: np.ndarray, inertia: np.ndarray) -> np.ndarray:
  """(links, 7) [log m, c, l] from links' mass (L,), ipos (L, 3) and principal moments (L, 3)."""
  second = 0.5 * inertia.sum(axis=-1, keepdims=True) - inertia  # S_k = (sum I) / 2 - I_k
  return np.concatenate(
    [np.log(mass)[:, None], ipos, 0.5 * np.log(second / mass[:, None])], axis=-1
  )


def from_theta(theta: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """mass (L,), ipos (L, 3), principal moments (L, 3) of links' parameters theta (L, 7)."""
  mass = jnp.exp(theta[:, 0])
  second = mass[:, None] * jnp.exp(2 * theta[:, 4:7])
  inertia = second.sum(axis=-1, keepdims=True) - second
  return mass, theta[:, 1:4], inertia


def with_theta(params: mjbatch_jax.Params, theta: jax.Array) -> mjbatch_jax.Params:
  """params (one simulation) with the links' (bodies 1..L) values set from theta."""
  mass, ipos, inertia = from_theta(theta)
  return params.replace({
    "body_mass": params["body_mass"].at[0, 1:].set(mass),
    "body_ipos": params["body_ipos"].at[0, 1:].set(ipos),
    "body_inertia": params["body_inertia"].at[0, 1:].set(inertia),
  })


# -- mjbatch_jax: Levenberg-Marquardt on jax.jacfwd through rollout ----------------------------


def fit_mjbatch(sim, start, ctrls, measured, theta0, iterations):
  """Levenberg-Marquardt on the encoder residual of one segment; returns theta and costs."""
  base = sim.params(1, FIELDS)
  candidates = sim.params(len(LM_DAMPINGS), FIELDS)
  dampings = jnp.asarray(LM_DAMPINGS)

  def residual(theta: jax.Array) -> jax.Array:
    _, sensordata = mjbatch_jax.rollout(start, ctrls[None], with_theta(base, theta))
    data = ((sensordata[0] - measured) / NOISE).ravel()
    # A weak prior at the guess: a serial chain leaves some parameter combinations without any
    # effect on the encoders, and the prior keeps them at the guess instead of drifting.
    return jnp.concatenate([data, PRIOR * (theta - theta0).ravel()])

  def costs(thetas: jax.Array) -> jax.Array:
    """The cost of K parameter sets (K, L, 7), simulated as the K rows of one rollout."""
    mass, ipos, inertia = jax.vmap(from_theta)(thetas)
    params = candidates.replace({
      "body_mass": candidates["body_mass"].at[:, 1:].set(mass),
      "body_ipos": candidates["body_ipos"].at[:, 1:].set(ipos),
      "body_inertia": candidates["body_inertia"].at[:, 1:].set(inertia),
    })
    k = thetas.shape[0]
    _, sensordata = mjbatch_jax.rollout(jnp.broadcast_to(start, (k, sim.nstate)),
                                        jnp.broadcast_to(ctrls, (k, *ctrls.shape)), params)
    data = jnp.sum(((sensordata - measured) / NOISE) ** 2, axis=(1, 2))
    prior = jnp.sum((PRIOR * (thetas - theta0)) ** 2, axis=(1, 2))
    return jnp.nan_to_num(0.5 * (data + prior), nan=jnp.inf)

  @jax.jit
  def lm_step(theta):
    def with_value(t):
      r = residual(t)
      return r, r

    jac, r = jax.jacfwd(with_value, has_aux=True)(theta)
    jac = jac.reshape(r.shape[0], -1)
    jtj, grad = jac.T @ jac, jac.T @ r
    scale = jnp.diag(jnp.diag(jtj))  # Marquardt: damping in each parameter's own units

    def step(damping):
      direction = -jnp.linalg.solve(jtj + damping * scale, grad)
      # Never move any parameter far in one step: beyond that the linearisation means little.
      return direction * jnp.minimum(1.0, MAX_STEP / jnp.max(jnp.abs(direction)))

    # Instead of adapting the damping over iterations, try them all: each candidate step is a
    # row of one rollout call, and the best one is taken if it lowers the cost.
    steps = jax.vmap(step)(dampings).reshape(-1, *theta.shape)
    trial = costs(theta[None] + steps)
    best = jnp.argmin(trial)
    value = 0.5 * r @ r
    update = jnp.where(trial[best] < value, steps[best], 0.0)
    return optax.apply_updates(theta, update), value

  theta, values = theta0, []
  for _ in range(iterations):
    theta, value = lm_step(theta)
    values.append(float(value))
  values.append(float(0.5 * jnp.sum(residual(theta) ** 2)))
  return theta, values


def prediction_error(sim, start, ctrls, measured, theta) -> float:
  """RMS (rad) of the simulated minus the recorded encoders of a segment."""
  params = with_theta(sim.params(1, FIELDS), jnp.asarray(theta))
  _, sensordata = mjbatch_jax.rollout(start, jnp.asarray(ctrls)[None], params)
  return float(jnp.sqrt(jnp.mean((sensordata[0] - measured) ** 2)))


# -- mujoco.sysid on the same recording ---------------------------------------------------------


def fit_mujoco_sysid(xml, model, ctrls, measured, theta0, iterations):
  """The same fit with MuJoCo's toolbox: the same 7 numbers per link, set on an MjSpec."""
  sysid = importlib.import_module("mujoco.sysid")
  spec = mujoco.MjSpec.from_string(xml)
  params = sysid.ParameterDict()
  for i in range(NUM_LINKS):

    def modifier(spec, p, name=f"link{i + 1}"):
      mass, ipos, inertia = (np.asarray(v)[0] for v in from_theta(jnp.asarray(p.value)[None]))
      body = spec.body(name)
      body.mass, body.ipos, body.inertia = float(mass), ipos, inertia

    # It needs box bounds: wide ones, about the guess.
    lower = theta0[i] - np.array([2.0, 0.2, 0.2, 0.2, 2.0, 2.0, 2.0])
    upper = theta0[i] + np.array([2.0, 0.2, 0.2, 0.2, 2.0, 2.0, 2.0])
    params.add(sysid.Parameter(f"link{i + 1}", theta0[i], lower, upper, modifier=modifier))
  dt = model.opt.timestep
  times = np.arange(len(ctrls) + 1) * dt  # the controls, one past the end as sysid expects
  control = sysid.TimeSeries(times, np.concatenate([ctrls, ctrls[-1:]]))
  sensors = sysid.TimeSeries.from_names(times[1:], measured, model)
  initial = sysid.create_initial_state(model, np.zeros(model.nq), np.zeros(model.nv))
  sequences = sysid.ModelSequences("arm7", spec, "fit", initial, control, sensors)
  residual_fn = sysid.build_residual_fn(models_sequences=[sequences])
  with contextlib.redirect_stdout(io.StringIO()):  # its per-iteration log
    fitted, _ = sysid.optimize(params, residual_fn, optimizer="mujoco", verbose=False,
                               max_iters=iterations)
  return np.stack([fitted[f"link{i + 1}"].value for i in range(NUM_LINKS)])


def main(iterations: int = 20, skip_mujoco_sysid: bool = False) -> dict[str, float]:
  xml = arm_xml()
  model = mujoco.MjModel.from_xml_string(xml)
  rng = np.random.default_rng(0)
  num_knots = int(round(DURATION / model.opt.timestep))
  times = np.arange(num_knots) * model.opt.timestep
  amplitudes = np.array([3.0, 4.0, 2.5, 2.0, 0.8, 0.5, 0.2])  # N m, the distal joints lighter
  fit_ctrls, test_ctrls = multisine(rng, times, amplitudes), multisine(rng, times, amplitudes)
  links = slice(1, NUM_LINKS + 1)
  theta_true = to_theta(model.body_mass[links], model.body_ipos[links], model.body_inertia[links])
  # The guess: masses and radii of gyration off by up to ~40%, centres of mass by 2 cm.
  theta0 = theta_true + np.concatenate([
    rng.normal(0, 0.3, (NUM_LINKS, 1)), rng.normal(0, 0.02, (NUM_LINKS, 3)),
    rng.normal(0, 0.3, (NUM_LINKS, 3)),
  ], axis=-1)

  with mjbatch_jax.Simulator(model) as sim:
    start = sim.init_state(1)
    true_params = sim.params(2, FIELDS)
    # Record both segments in one call, as two simulations of the true arm.
    _, clean = mjbatch_jax.rollout(jnp.broadcast_to(start, (2, sim.nstate)),
                                   jnp.stack([fit_ctrls, test_ctrls]), true_params)
    recorded = np.asarray(clean) + rng.normal(0, NOISE, clean.shape)
    fit_measured, test_measured = recorded[0], recorded[1]
    print(f"arm: {NUM_LINKS} links, {7 * NUM_LINKS} parameters; {num_knots} steps of "
          f"{model.opt.timestep} s per segment; encoder noise {NOISE:g} rad")

    before = prediction_error(sim, start, test_ctrls, test_measured, theta0)
    print(f"held-out prediction error before: {before:.5f} rad RMS")
    begin = time.perf_counter()
    theta, costs = fit_mjbatch(sim, start, jnp.asarray(fit_ctrls), jnp.asarray(fit_measured),
                               jnp.asarray(theta0), iterations)
    ours_seconds = time.perf_counter() - begin
    after = prediction_error(sim, start, test_ctrls, test_measured, theta)
    print(f"held-out prediction error after:  {after:.5f} rad RMS ({before / after:.0f}x lower)"
          f"; fit cost {costs[0]:.4g} -> {costs[-1]:.4g} in {iterations} LM iterations, "
          f"{ours_seconds:.1f} s (mjbatch_jax, compile included)")
    masses = np.exp(np.asarray(theta)[:, 0])
    print("link masses (kg): true " + " ".join(f"{m:.2f}" for m in model.body_mass[links]))
    print("                  fit  " + " ".join(f"{m:.2f}" for m in masses))
    result = {"before": before, "after": after, "seconds": ours_seconds}

    sysid = importlib.import_module("mujoco.sysid")
    if not skip_mujoco_sysid and not hasattr(sysid, "ParameterDict"):
      # The toolbox imports quietly to an empty module when its extra's packages are missing.
      print("mujoco.sysid skipped: its dependencies are missing "
            "(pip install 'mujoco-core[sysid]==4.0.0')")
    elif not skip_mujoco_sysid:
      begin = time.perf_counter()
      theta_mj = fit_mujoco_sysid(xml, model, fit_ctrls, fit_measured, theta0, iterations)
      mj_seconds = time.perf_counter() - begin
      after_mj = prediction_error(sim, start, test_ctrls, test_measured, theta_mj)
      print(f"mujoco.sysid: held-out prediction error after {after_mj:.5f} rad RMS, "
            f"{mj_seconds:.1f} s ({iterations} iterations at most)")
      print(f"wall time mujoco.sysid / mjbatch_jax: {mj_seconds / ours_seconds:.1f}x")
      result.update(after_mujoco_sysid=after_mj, seconds_mujoco_sysid=mj_seconds)
  return result


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description="Inertia identification of a 7-link arm.")
  parser.add_argument("--iterations", type=int, default=20, help="Levenberg-Marquardt iterations")
  parser.add_argument("--skip-mujoco-sysid", action="store_true",
                      help="fit with mjbatch_jax only, not also with mujoco.sysid")
  args = parser.parse_args()
  main(args.iterations, args.skip_mujoco_sysid)
