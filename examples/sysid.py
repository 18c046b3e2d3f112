"""Identify all 70 inertial parameters of a 7-link arm, and what an excitation can identify.

  python examples/sysid.py [--samples 1000] [--window 50] [--iterations 30] [--threads 2]
                           [--out FILE] [--skip-rich] [--skip-mujoco-sysid]
  python examples/sysid.py --play [FILE]
  python examples/sysid.py --play examples/results/sysid.npz    # the committed full-size run
  python examples/sysid.py --processes 2 [...]                  # data-parallel, 2 processes
  python -m mjbatch_jax.launch -n 2 examples/sysid.py [...]     # the same

(--out defaults to sysid.npz in the system's temporary directory, and --play to that file.)

The "true" arm (inline below: seven hinge joints, hanging from a base, alternating axes) has, per
link, a mass, a centre of mass and a full 3x3 inertia whose principal axes are tilted from the
link's frame: 10 numbers a link, 70 in all. Each joint is driven by a PD position servo
(MuJoCo `position` actuators, kp 400 .. 10 N m/rad and kv 30 .. 0.5 N m s/rad from the shoulder
to the wrist). The robot holds a pose, then tracks 1000 position commands at 100 Hz (five 2 ms
physics steps each, 10 s): per joint a multisine of three frequencies in 0.37-1.07 Hz with a peak
of 0.3 rad at the shoulder down to 0.08 rad at the wrist (the seed's excitation). The recording
is the joints' positions (encoder noise 1e-4 rad) and velocities (noise 2e-3 rad/s) after each
command.

Parametrisation (always physical). MuJoCo stores a body's inertia as mass, centre of mass
`body_ipos`, principal moments `body_inertia` and the principal frame `body_iquat`. Per link:

  log m, c (3), l (3) with second moments S_k = m exp(2 l_k), r (3): the principal frame's
  rotation vector; principal moments I_x = S_y + S_z, I_y = S_x + S_z, I_z = S_x + S_y.

Every value gives m > 0 and moments that are positive and satisfy the triangle inequalities
strictly (the pseudo-inertia is positive definite), and every rigid body has such values: no
bounds or projections are needed. The full inertia about the centre of mass is R diag(I) R'.

Fit. Multiple shooting: the recording is cut into windows of --window samples (50: 0.5 s), each
a simulation started from the state before it, all windows rows of one `mjbatch_jax.rollout`
call. Each window's start (7 positions, 7 velocities) is estimated along with the 70 numbers,
with the recorded state as its prior (its noise as the width): started from the noisy record
instead, a window's error grows with the start's velocity noise times the time, which fits no
parameter and biases the masses. The residual is the windows' predicted minus recorded
positions and velocities in units of their noise, plus those priors and a weak prior at the
starting guess (one prior width: 50% of a mass or radius of gyration, 5 cm of a centre of mass,
0.5 rad of a principal frame). Levenberg-Marquardt: the Jacobian w.r.t. the 70 numbers and the
starts is `jax.jacfwd` through the rollout, with 70 + 14 columns: a window is a simulation of its
own, so nudging every window's start along one direction at once gives each window's own block,
and the normal equations are assembled from those blocks (a dense Jacobian over all 20 x 14
starts made the JAX side 20-30% of an iteration). Inside, finite differences with a 1e-6 step:
every Jacobian column of every window is a simulation row of one call per knot, 50 calls an
iteration (the rule's columns are the state's 14 and the params' 77 entries, whatever the
tangents). The damped Gauss-Newton steps for
five Levenberg dampings (in prior widths, where the prior's curvature is the identity) are solved
in JAX and simulated together as rows of one rollout call, and the best is applied if it
lowers the cost; it stops once a step lowers the cost (half the
sum of squared residuals in noise units) by less than 1. One LM iteration is one jitted
function. The params are made with set_const=True: a new body_iquat or mass changes derived
constants (body_subtreemass sets the reference point of the com-frame algebra), so without it
the arm differs from a compiled one by rounding (~1e-12 rad over 2 s); it costs about +40% on
the derivative calls, printed at the start.

What it reports, for the seed's excitation and for a richer one (eight frequencies in 0.2-4 Hz,
2.5x the amplitudes): the held-out prediction error (a fresh 10 s recording of each kind,
simulated open loop from its start), the error of every identified parameter against the truth,
and the identifiability of each parameter: the posterior spread sqrt(diag((F + P)^-1)) over the
prior's, with F the information J'J on the 70 numbers once the unknown starts are accounted for
(1: the data say nothing, the prior alone holds it; small: identified), and how many of the 70
directions the data pin to a tenth of the prior or better (square roots of F's eigenvalues, in
prior widths). A serial chain leaves some combinations unidentifiable from joint
motion under any excitation (e.g. the first link turns about a vertical axis: its mass and most of
its inertia never act): the Jacobian's structural rank is 43, so 27 combinations of the 70 stay
at the guess whatever the data. A link's mass alone is not one of the 43 (joint motion sees it
together with its neighbours' first moments): the richer excitation pins more of the 43
combinations and predicts better, but no excitation pins every link's mass. Then
the same fit with MuJoCo's own `mujoco.sysid` (its "mujoco" least-squares optimiser, the same
windows as its sequences, the same 10 numbers per link set on an MjSpec), where its dependencies
are installed.

Data-parallel. The windows are rows of a global batch over every process's CPU devices
(`mjbatch_jax.distributed.setup`); one LM iteration is one jitted shard_map. Each device
simulates its own windows, builds their Jacobian blocks and eliminates their starts from the
normal equations (a window's start enters only its own residuals: the Schur complement, solved
for each of its 14 x 14 blocks); what crosses processes is `jax.lax.psum` of the remaining
70 x 70 system, its right-hand side and the trial steps' costs. Every process then takes the
same step, so the 70 numbers stay replicated. With one process the same program runs on its
own devices; with several (`--processes N`, or under `python -m mjbatch_jax.launch`) the fit
equals the one-process fit up to the order of the sums' rounding, process 0 prints and saves,
and the comparison with `mujoco.sysid` (one process) is skipped.

It saves the recording, the truth, the guess, both fits and the timings to --out (.npz; the
full-size run's is examples/results/sysid.npz, with its log sysid.log);
`--play FILE` re-simulates the held-out recordings with the saved fits, prints the tables and
draws a plot next to the file.
"""

import argparse
import contextlib
import hashlib
import importlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import mjbatch_jax  # noqa: E402
from mjbatch_jax import distributed, launch  # noqa: E402

NUM_LINKS = 7
TIMESTEP = 0.002
SUBSTEPS = 5  # physics steps per command: 100 Hz
SETTLE = 200  # commands of holding the pose before the recording
KP = (400.0, 400.0, 200.0, 200.0, 60.0, 30.0, 10.0)
KV = (30.0, 30.0, 12.0, 12.0, 3.0, 1.5, 0.5)
HOME = (0.0, 0.6, 0.0, -0.9, 0.0, 0.5, 0.0)  # the held pose: bent, so gravity loads every link
NOISE_POS = 1e-4  # rad
NOISE_VEL = 2e-3  # rad/s
# (frequencies per joint, their band in Hz, peak amplitude shoulder .. wrist in rad)
EXCITATIONS = {
  "seed": (3, (0.37, 1.07), (0.3, 0.08)),
  "rich": (8, (0.2, 4.0), (0.75, 0.2)),
}
# Prior widths per link's 10 numbers: log m, c (m), log radii of gyration, rotation (rad).
SCALE = np.array([0.5, 0.05, 0.05, 0.05, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
# Levenberg's dampings, relative to the mean curvature (the trace of the normal equations over
# their size) in prior widths: from none (Gauss-Newton; the priors keep the system positive
# definite) to heavy. The mean is set by the best-pinned directions, so only the smallest
# dampings leave the weakly identified ones free to move.
LM_DAMPINGS = (0.0, 1e-8, 1e-6, 1e-4, 1e-2)
FIELDS = ("body_mass", "body_ipos", "body_inertia", "body_iquat")
LINKS = [f"link{i + 1}" for i in range(NUM_LINKS)]
# Not examples/results/ (where the committed full-size result is): a test run must not touch it.
DEFAULT_OUT = Path(tempfile.gettempdir()) / "sysid.npz"
RESULT_KEYS = ("model_version", "theta_true", "theta0", "fits", "heldout")
# The 10 numbers of a link, as the identifiability report names them.
THETA_NAMES = ("mass", "com_x", "com_y", "com_z", "gyration_1", "gyration_2", "gyration_3",
               "frame_x", "frame_y", "frame_z")


def rotation(r: np.ndarray) -> np.ndarray:
  angle = np.linalg.norm(r)
  k = np.array([[0, -r[2], r[1]], [r[2], 0, -r[0]], [-r[1], r[0], 0]]) / angle
  return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


def arm_xml() -> str:
  """Seven links hanging from the base, alternating axes, with tilted principal frames."""
  axes = ["0 0 1", "0 1 0", "1 0 0", "0 1 0", "0 0 1", "1 0 0", "0 1 0"]
  lengths = [0.25, 0.3, 0.25, 0.25, 0.2, 0.15, 0.1]
  masses = [2.0, 1.6, 1.2, 1.0, 0.7, 0.5, 0.3]
  body, close, actuators = "", "", ""
  pos = "0 0 0"
  for i in range(NUM_LINKS):
    length, mass = lengths[i], masses[i]
    com = f"{0.01 * (i % 3):.3f} {-0.01 * (i % 2):.3f} {-0.5 * length:.3f}"
    second = mass * np.array([0.03, 0.045, length / np.sqrt(12)]) ** 2  # a slab-like rod
    tilt = rotation(0.4 * np.array([np.sin(i + 1), np.cos(2 * i + 1), np.sin(3 * i + 2)]))
    full = tilt @ np.diag(second.sum() - second) @ tilt.T
    inertia = " ".join(f"{v:.8f}" for v in (*np.diag(full), full[0, 1], full[0, 2], full[1, 2]))
    body += f"""
      <body name="link{i + 1}" pos="{pos}">
        <joint name="joint{i + 1}" axis="{axes[i]}" damping="0.3" armature="0.005"/>
        <geom type="capsule" fromto="0 0 0 0 0 {-length}" size="0.03"/>
        <inertial pos="{com}" mass="{mass}" fullinertia="{inertia}"/>"""
    close += "\n      </body>"
    actuators += (f'\n    <position name="servo{i + 1}" joint="joint{i + 1}" kp="{KP[i]}" '
                  f'kv="{KV[i]}"/>')
    pos = f"0 0 {-length}"
  return f"""
<mujoco model="arm7">
  <option timestep="{TIMESTEP}" integrator="implicitfast"><flag contact="disable"/></option>
  <worldbody>{body}{close}
  </worldbody>
  <actuator>{actuators}
  </actuator>
</mujoco>
"""


def model_version() -> str:
  """A fingerprint of the model and the experiment, stored with results to refuse stale ones."""
  text = arm_xml() + repr((SUBSTEPS, SETTLE, HOME, NOISE_POS, NOISE_VEL, EXCITATIONS))
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def multisine(rng: np.random.Generator, samples: int, kind: str) -> np.ndarray:
  """(samples, 7) position commands about HOME: per joint a sum of sines, random frequencies in
  the kind's band and random phases, scaled to the joint's peak amplitude."""
  count, (f_lo, f_hi), (a_hi, a_lo) = EXCITATIONS[kind]
  times = np.arange(samples) * SUBSTEPS * TIMESTEP
  freqs = rng.uniform(f_lo, f_hi, (count, NUM_LINKS))
  phases = rng.uniform(0, 2 * np.pi, (count, NUM_LINKS))
  waves = np.sin(2 * np.pi * freqs * times[:, None, None] + phases).sum(axis=1)
  # Ramp in over the first second, so the command does not jump from the held pose.
  ramp = np.clip(times / 1.0, 0.0, 1.0)[:, None]
  waves = ramp * (waves - waves[0])
  peak = np.geomspace(a_hi, a_lo, NUM_LINKS)
  return np.asarray(HOME) + peak * waves / np.max(np.abs(waves), axis=0)


# -- the parametrisation ------------------------------------------------------------------------


def quat_of(r):
  """Unit quaternions (..., 4) of rotation vectors r (..., 3); numpy or jax."""
  xp = jnp if isinstance(r, jax.Array) else np
  angle = xp.sqrt(xp.sum(r * r, axis=-1, keepdims=True) + 1e-30)
  return xp.concatenate([xp.cos(angle / 2), 0.5 * xp.sinc(angle / (2 * np.pi)) * r], axis=-1)


def matrix_of(q):
  """Rotation matrices (..., 3, 3) of unit quaternions (..., 4); numpy or jax."""
  xp = jnp if isinstance(q, jax.Array) else np
  w, x, y, z = (q[..., i] for i in range(4))
  rows = [
    [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
    [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
    [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
  ]
  return xp.stack([xp.stack(row, axis=-1) for row in rows], axis=-2)


def to_theta(mass, ipos, inertia, iquat) -> np.ndarray:
  """(links, 10) numbers of links' MuJoCo inertials: mass (L,), ipos, inertia (L, 3), iquat."""
  second = 0.5 * inertia.sum(axis=-1, keepdims=True) - inertia  # S_k = (sum I) / 2 - I_k
  q = iquat * np.where(iquat[:, :1] < 0, -1.0, 1.0)
  half = np.arctan2(np.linalg.norm(q[:, 1:], axis=-1), q[:, 0])
  axis = q[:, 1:] / np.maximum(np.linalg.norm(q[:, 1:], axis=-1, keepdims=True), 1e-300)
  return np.concatenate([np.log(mass)[:, None], ipos, 0.5 * np.log(second / mass[:, None]),
                         2 * half[:, None] * axis], axis=-1)


def from_theta(theta):
  """mass (L,), ipos (L, 3), principal moments (L, 3), iquat (L, 4) of theta (L, 10)."""
  xp = jnp if isinstance(theta, jax.Array) else np
  mass = xp.exp(theta[..., 0])
  second = mass[..., None] * xp.exp(2 * theta[..., 4:7])
  inertia = second.sum(axis=-1, keepdims=True) - second
  return mass, theta[..., 1:4], inertia, quat_of(theta[..., 7:10])


def standard(theta):
  """(L, 10) standard parameters: m, c, and the inertia about c in the link frame (Ixx Iyy Izz
  Ixy Ixz Iyz): what the comparison with the truth uses, free of the parametrisation."""
  xp = jnp if isinstance(theta, jax.Array) else np
  mass, ipos, inertia, iquat = from_theta(theta)
  rot = matrix_of(iquat)
  full = rot @ (inertia[..., :, None] * xp.swapaxes(rot, -1, -2))
  return xp.concatenate([mass[..., None], ipos, full[..., 0, 0, None], full[..., 1, 1, None],
                         full[..., 2, 2, None], full[..., 0, 1, None], full[..., 0, 2, None],
                         full[..., 1, 2, None]], axis=-1)


def with_theta(params: mjbatch_jax.Params, thetas: jax.Array) -> mjbatch_jax.Params:
  """params (N rows) with the links' values of thetas (N, L, 10)."""
  mass, ipos, inertia, iquat = from_theta(thetas)
  return params.replace({"body_mass": mass, "body_ipos": ipos, "body_inertia": inertia,
                         "body_iquat": iquat})


# -- recording and fitting ----------------------------------------------------------------------


class Arm:
  """The arm's simulator, its settled start and the state columns the recording reads."""

  def __init__(self, num_threads: int):
    self.model = mujoco.MjModel.from_xml_string(arm_xml())
    self.sim = mjbatch_jax.Simulator(self.model, num_threads=num_threads)
    self.layout = self.sim.layout
    links = slice(1, NUM_LINKS + 1)
    m = self.model
    self.theta_true = to_theta(m.body_mass[links], m.body_ipos[links], m.body_inertia[links],
                               m.body_iquat[links])
    # Hold the pose until the arm settles under gravity: the recordings start there.
    hold = jnp.broadcast_to(jnp.asarray(HOME), (1, SETTLE, NUM_LINKS))
    settled, _ = mjbatch_jax.rollout(self.sim.init_state(1).at[:, self.layout.qpos].set(HOME),
                                     hold, self.params(1), nstep=SUBSTEPS)
    self.start = settled[0, -1]

  def params(self, num: int, set_const: bool = True) -> mjbatch_jax.Params:
    with jax.ensure_compile_time_eval():
      return self.sim.params(num, FIELDS, select={f: LINKS for f in FIELDS}, set_const=set_const)

  def record(self, ctrls: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Noisy joint positions and velocities (K, T, 7) after each command of ctrls (K, T, 7)."""
    rows = jnp.broadcast_to(self.start, (len(ctrls), self.sim.nstate))
    states, _ = mjbatch_jax.rollout(rows, jnp.asarray(ctrls), self.params(len(ctrls)),
                                    nstep=SUBSTEPS)
    q = np.asarray(states[..., self.layout.qpos])
    v = np.asarray(states[..., self.layout.qvel])
    return q + rng.normal(0, NOISE_POS, q.shape), v + rng.normal(0, NOISE_VEL, v.shape)

  def windows(self, ctrls, q, v, window: int):
    """Start rows (W, nstate), commands (W, window, 7) and recorded q, v (W, window, 7) of the
    windows of a recording: window w starts from the recorded state before its first command."""
    count = len(ctrls) // window
    q0 = np.concatenate([np.asarray(self.start[self.layout.qpos])[None], q[window - 1::window]])
    v0 = np.concatenate([np.asarray(self.start[self.layout.qvel])[None], v[window - 1::window]])
    rows = jnp.broadcast_to(self.start, (count, self.sim.nstate))
    rows = rows.at[:, self.layout.qpos].set(q0[:count]).at[:, self.layout.qvel].set(v0[:count])
    shape = (count, window, NUM_LINKS)
    return rows, *(jnp.asarray(a[: count * window]).reshape(shape) for a in (ctrls, q, v))

  def simulate(self, theta, ctrls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Open-loop q, v (T, 7) of one parameter set from the settled start."""
    params = with_theta(self.params(1), jnp.asarray(theta)[None])
    states, _ = mjbatch_jax.rollout(self.start[None], jnp.asarray(ctrls)[None], params,
                                    nstep=SUBSTEPS)
    return np.asarray(states[0, :, self.layout.qpos]), np.asarray(states[0, :, self.layout.qvel])


def make_fit(arm: Arm, dist: distributed.Distributed, theta0):
  """The fit's jitted pieces over the mesh: each device simulates its own windows.

  The unknowns are theta, the 70 numbers (replicated), and each window's start (qpos, qvel) as an
  offset from its recorded value ((W, 14), sharded with the windows). Both pieces take (theta,
  offsets, rows, ctrls, q_meas, v_meas), the last four the windows' start rows (W, nstate),
  commands and recorded positions and velocities (W, window, 7), sharded.

  Returns `linearize` (the data residual (W, P) and its Jacobian blocks d r / d theta (W, P, 70)
  and each window's d r_w / d its own start (W, P, 14), both in prior widths) and `lm_step` (one
  LM iteration: the new theta and offsets and the cost before it).
  """
  nv, n = arm.model.nv, theta0.size
  nx = 2 * nv
  count = dist.num_sims  # windows over all processes
  local = count // dist.mesh.devices.size  # a device's
  axis = dist.axis
  params = arm.params(local)
  candidates = arm.params(local * len(LM_DAMPINGS))
  dampings = jnp.asarray(LM_DAMPINGS)
  qpos, qvel = arm.layout.qpos, arm.layout.qvel
  # Prior widths: SCALE for the links' numbers, the recording's noise for the window starts.
  scale = jnp.asarray(np.tile(SCALE, NUM_LINKS))
  start_scale = jnp.asarray(np.concatenate([np.full(nv, NOISE_POS), np.full(nv, NOISE_VEL)]))
  theta0 = jnp.ravel(jnp.asarray(theta0))
  size = n + count * nx

  def total(x):
    """Summed over every device's windows: the only traffic between processes (in all 30,000
    float64 numbers, 239 kB, an iteration)."""
    return jax.lax.psum(x, axis)

  def starts_of(rows, offsets):
    """Start rows (..., W, nstate) of offsets (..., W, 14)."""
    rows = jnp.broadcast_to(rows, (*offsets.shape[:-1], rows.shape[-1]))
    return rows.at[..., qpos].add(offsets[..., :nv]).at[..., qvel].add(offsets[..., nv:])

  def data_residual(states, q_meas, v_meas):
    """(..., W, window * 14): each window's position and velocity errors in noise units."""
    q = (states[..., qpos] - q_meas) / NOISE_POS
    v = (states[..., qvel] - v_meas) / NOISE_VEL
    return jnp.concatenate([q, v], axis=-1).reshape(*states.shape[:-2], -1)

  def linearize(theta, offsets, rows, ctrls, q_meas, v_meas):
    starts = starts_of(rows, offsets)

    # A window is a simulation of its own: nudging every window's start along one direction
    # at once gives each window's own block in its rows, so 14 columns stand for all W x 14.
    def of(t, shift):
      moved = starts.at[:, qpos].add(shift[:nv]).at[:, qvel].add(shift[nv:])
      thetas = jnp.broadcast_to(t.reshape(NUM_LINKS, 10), (local, NUM_LINKS, 10))
      states, _ = mjbatch_jax.rollout(moved, ctrls, with_theta(params, thetas), nstep=SUBSTEPS)
      r = data_residual(states, q_meas, v_meas)
      return r, r

    (jac_theta, jac_start), r = jax.jacfwd(of, argnums=(0, 1), has_aux=True)(
      theta, jnp.zeros(nx))
    return r, jac_theta * scale, jac_start * start_scale

  def data_costs(thetas, offsets, rows, ctrls, q_meas, v_meas):
    """This device's windows' squared residuals and start priors for K candidates: thetas
    (K, 70), offsets (K, W, 14); simulated as the K x W rows of one call."""
    k = thetas.shape[0]
    starts = starts_of(rows, offsets).reshape(k * local, -1)
    each = jnp.repeat(thetas.reshape(k, NUM_LINKS, 10), local, axis=0)
    states, _ = mjbatch_jax.rollout(starts, jnp.tile(ctrls, (k, 1, 1)),
                                    with_theta(candidates, each), nstep=SUBSTEPS)
    r = data_residual(states.reshape(k, local, *states.shape[1:]), q_meas, v_meas)
    return jnp.sum(r**2, axis=(1, 2)) + jnp.sum((offsets / start_scale) ** 2, axis=(1, 2))

  def lm_step(theta, offsets, rows, ctrls, q_meas, v_meas):
    r, a, b = linearize(theta, offsets, rows, ctrls, q_meas, v_meas)
    prior_theta = (theta - theta0) / scale
    prior_starts = offsets / start_scale
    # Normal equations in prior widths, where each prior's curvature is the identity, so that
    # Levenberg's damping lambda * I means the same for every number. A window's start enters
    # only its own residuals, so its 14 x 14 block is eliminated on the device that simulates
    # the window (the Schur complement): what crosses processes is the 70 x 70 system.
    # Three all-reduces an iteration, each of everything it needs at once (between processes
    # each costs a round trip): the normal equations' sums, the reduced systems of every
    # damping, the trial steps' costs.
    eye = jnp.eye(nx)
    cross = jnp.einsum("wpi,wpj->wij", a, b)  # (W, 70, 14)
    blocks = jnp.einsum("wpi,wpj->wij", b, b) + eye  # (W, 14, 14)
    grad_starts = jnp.einsum("wpj,wp->wj", b, r) + prior_starts
    sums = total(jnp.concatenate([
      jnp.einsum("wpi,wpj->ij", a, a).ravel(), jnp.einsum("wpi,wp->i", a, r),
      jnp.stack([jnp.sum(jnp.trace(blocks, axis1=1, axis2=2)),
                 jnp.sum(r**2) + jnp.sum(prior_starts**2)])]))
    hessian_theta = sums[: n * n].reshape(n, n) + jnp.eye(n)
    grad_theta = sums[n * n : n * n + n] + prior_theta
    mean = (jnp.trace(hessian_theta) + sums[-2]) / size
    value = 0.5 * (sums[-1] + prior_theta @ prior_theta)
    right = jnp.concatenate([jnp.swapaxes(cross, 1, 2), grad_starts[..., None]], axis=-1)

    def step(damping):
      shift = damping * mean
      solved = jnp.linalg.solve(blocks + shift * eye, right)  # (W, 14, 70 + 1)
      # C B^-1 [C' g]: the starts' share of the 70 x 70 system and of its right-hand side.
      eliminated = total(jnp.einsum("wij,wjk->ik", cross, solved))  # (70, 70 + 1)
      reduced = hessian_theta + shift * jnp.eye(n) - eliminated[:, :n]
      direction = -jnp.linalg.solve(reduced, grad_theta - eliminated[:, n])
      starts = -(solved[..., n] + jnp.einsum("wji,i->wj", solved[..., :n], direction))
      # At most two prior widths per link number and step: beyond, the linearisation means
      # little. (The starts act nearly linearly, and a few noise widths is their usual move.)
      factor = jnp.minimum(1.0, 2.0 / jnp.max(jnp.abs(direction)))
      return direction * factor * scale, starts * factor * start_scale

    # Every damping's step is tried as rows of one rollout call; the best is taken if it helps.
    steps = jax.vmap(step)(dampings)
    tried = total(data_costs(theta + steps[0], offsets + steps[1], rows, ctrls, q_meas, v_meas))
    tried = tried + jnp.sum(((theta + steps[0] - theta0) / scale) ** 2, axis=1)
    tried = jnp.nan_to_num(0.5 * tried, nan=jnp.inf)
    best = jnp.argmin(tried)
    update = jax.tree.map(lambda x: jnp.where(tried[best] < value, x[best], 0.0), steps)
    return theta + update[0], offsets + update[1], value

  return linearize, lm_step


def fit(arm: Arm, dist: distributed.Distributed, ctrls, q, v, theta0, window: int,
        iterations: int) -> dict:
  """LM from theta0 on one recording; the fit, its costs, identifiability and timings."""
  windows = arm.windows(ctrls, q, v, window)
  mine = [np.asarray(x)[dist.rows] for x in windows]  # this process's windows
  data = dist.shard(tuple(mine))
  linearize, lm_step = make_fit(arm, dist, theta0)
  sharded = P(dist.axis)
  lm_step = dist.map(lm_step, out_specs=(P(), sharded, P()))
  linearize = dist.map(linearize, out_specs=(sharded, sharded, sharded))
  theta = dist.replicate(np.ravel(theta0))
  offsets = dist.zeros(2 * arm.model.nv)
  costs, wall, cpu = [], [], []
  for _ in range(iterations):
    begin, begin_cpu = time.perf_counter(), time.process_time()
    theta, offsets, value = lm_step(theta, offsets, *data)
    costs.append(float(dist.local(value)))
    wall.append(time.perf_counter() - begin)
    cpu.append(time.process_time() - begin_cpu)
    if len(costs) > 2 and costs[-2] - costs[-1] < 1.0:
      break  # converged: a gain below 1 (chi-square 2, noise units) is no evidence of anything
  found = dist.local(theta).reshape(theta0.shape)
  # CPU seconds of an iteration and of its custom calls alone (this process's), interleaved
  # (least of three).
  physics = physics_of(arm, jnp.asarray(mine[0]), jnp.asarray(mine[1]), found)
  jax.block_until_ready(physics())
  whole, alone = [], []
  for _ in range(3):
    begin = time.process_time()
    # Its third output is the cost at the fit (the cost before the step it would take).
    last = jax.block_until_ready(lm_step(theta, offsets, *data))[2]
    whole.append(time.process_time() - begin)
    begin = time.process_time()
    jax.block_until_ready(physics())
    alone.append(time.process_time() - begin)
  costs.append(float(dist.local(last)))
  r, a, b = (np.asarray(x) for x in dist.gather(linearize(theta, offsets, *data)))
  # What the data say of the links' numbers once the unknown window starts are accounted for:
  # the Schur complement of the starts' blocks (their prior included), in prior widths.
  n = found.size
  marginal = np.einsum("wpi,wpj->ij", a, a)
  for w in range(len(r)):
    cross = a[w].T @ b[w]
    marginal -= cross @ np.linalg.solve(b[w].T @ b[w] + np.eye(b.shape[-1]), cross.T)
  eigen, vectors = np.linalg.eigh(0.5 * (marginal + marginal.T))
  order = np.argsort(eigen)[::-1]
  singular = np.sqrt(np.maximum(eigen[order], 0.0))
  # Posterior covariance with the prior, in prior widths: 1 where the data add nothing.
  posterior = np.linalg.inv(marginal + np.eye(n))
  spread = np.sqrt(np.diag(posterior)).reshape(NUM_LINKS, 10)
  later = slice(1, None) if len(wall) > 1 else slice(None)
  return {"theta": found, "costs": np.array(costs), "singular": singular,
          "directions": vectors[:, order].T, "spread": spread, "iterations": len(wall),
          "seconds_first": wall[0], "seconds_per_iteration": float(np.median(wall[later])),
          "cpu_per_iteration": float(np.median(cpu[later])), "windows": len(windows[0]),
          "cpu_iteration": min(whole), "cpu_physics": min(alone)}


def structural_rank(singular: np.ndarray) -> int:
  """Directions the data constrain at all: a serial chain's others are exactly invisible (their
  singular values are finite-difference noise, 1e-6 of the largest and below)."""
  return int(np.sum(singular > 1e-6 * singular[0]))


def physics_of(arm: Arm, rows, ctrls, theta) -> Any:
  """The custom calls of one LM iteration, alone, on the same inputs: per knot one call on all
  windows x fd_rows rows (what the derivative rule of jax.jacfwd through the rollout makes),
  then one call on the windows x dampings rows of the trial steps."""
  count, window = rows.shape[0], ctrls.shape[1]
  columns, trials = fd_rows(arm), len(LM_DAMPINGS)
  wide = jnp.repeat(rows, columns, axis=0)
  theta = jnp.asarray(theta)
  params = with_theta(arm.params(count * columns),
                      jnp.broadcast_to(theta, (count * columns, *theta.shape)))
  tried = with_theta(arm.params(count * trials),
                     jnp.broadcast_to(theta, (count * trials, *theta.shape)))
  knot = jax.jit(lambda r, u, p: mjbatch_jax.rollout(r, u, p, nstep=SUBSTEPS))
  calls = [ctrls[:, k:k + 1].repeat(columns, axis=0) for k in range(window)]
  trial_rows, trial_ctrls = jnp.tile(rows, (trials, 1)), jnp.tile(ctrls, (trials, 1, 1))

  def physics():
    for u in calls:
      knot(wide, u, params)
    return knot(trial_rows, trial_ctrls, tried)

  return physics


def fd_rows(arm: Arm) -> int:
  """Rows per window of each knot's derivative call: the nominal, one per state tangent column
  (qpos, qvel) and one per params entry the leaves hold."""
  return 1 + 2 * arm.model.nv + len(arm.params(1).spec.param_columns)


def set_const_check(arm: Arm, theta, windows: int) -> tuple[float, float, float]:
  """What set_const does here: the largest difference of a 2 s rollout at theta with and without
  it, and the CPU seconds of one knot's derivative-sized call (windows x fd_rows rows) with and
  without it."""
  ctrls = jnp.asarray(multisine(np.random.default_rng(5), 200, "rich"))[None]
  out = []
  for flag in (True, False):
    params = with_theta(arm.params(1, set_const=flag), jnp.asarray(theta)[None])
    out.append(np.asarray(mjbatch_jax.rollout(arm.start[None], ctrls, params,
                                              nstep=SUBSTEPS)[0]))
  rows = windows * fd_rows(arm)
  wide = jnp.broadcast_to(arm.start, (rows, arm.sim.nstate))
  thetas = jnp.broadcast_to(jnp.asarray(theta), (rows, NUM_LINKS, 10))
  knot = jax.jit(lambda r, u, p: mjbatch_jax.rollout(r, u, p, nstep=SUBSTEPS)[0])
  spent = []
  for flag in (True, False):
    params = with_theta(arm.params(rows, set_const=flag), thetas)
    jax.block_until_ready(knot(wide, ctrls[:, :1].repeat(rows, 0), params))
    times = []
    for k in range(5):
      u = ctrls[:, k:k + 1].repeat(rows, 0)
      begin = time.process_time()
      jax.block_until_ready(knot(wide, u, params))
      times.append(time.process_time() - begin)
    spent.append(min(times))
  return float(np.max(np.abs(out[0] - out[1]))), spent[0], spent[1]


# -- reports ------------------------------------------------------------------------------------


def errors(theta, theta_true) -> dict[str, Any]:
  """Per link: mass error (%), centre-of-mass error (mm), inertia error (Frobenius, % of the
  true inertia's), and every standard parameter's error (L, 10)."""
  fit_std, true_std = standard(np.asarray(theta)), standard(theta_true)

  def full(s):
    return np.stack([[s[:, 4], s[:, 7], s[:, 8]], [s[:, 7], s[:, 5], s[:, 9]],
                     [s[:, 8], s[:, 9], s[:, 6]]]).transpose(2, 0, 1)

  inertia = (np.linalg.norm(full(fit_std) - full(true_std), axis=(1, 2))
             / np.linalg.norm(full(true_std), axis=(1, 2)))
  return {"mass": 100 * (fit_std[:, 0] / true_std[:, 0] - 1),
          "com": 1000 * np.linalg.norm(fit_std[:, 1:4] - true_std[:, 1:4], axis=1),
          "inertia": 100 * inertia, "standard": fit_std - true_std}


def print_tables(theta_true, theta0, fits: dict) -> None:
  columns = {"guess": theta0, **{k: f["theta"] for k, f in fits.items()}}
  table = {k: errors(t, theta_true) for k, t in columns.items()}
  head = "".join(f"{k:>22s}" for k in columns)
  print(f"parameter errors vs the truth, per link ({' | '.join(columns)}):")
  print(f"  link {head}")
  print("       " + "".join(f"{'mass%  com mm  inert%':>22s}" for _ in columns))
  for i in range(NUM_LINKS):
    cells = "".join(f"{e['mass'][i]:+7.1f} {e['com'][i]:6.1f} {e['inertia'][i]:7.1f} "
                    for e in table.values())
    print(f"  {i + 1:4d}  {cells}")
  true_std = standard(theta_true)
  # Inertia entries relative to the link's largest principal moment, so off-diagonal ones
  # (near 0 in truth) get a meaningful scale.
  size = np.max(from_theta(theta_true)[2], axis=1, keepdims=True)
  for name, e in table.items():
    rel = np.concatenate([100 * e["standard"][:, :1] / true_std[:, :1],
                          1000 * e["standard"][:, 1:4], 100 * e["standard"][:, 4:] / size], 1)
    print(f"every parameter's error, {name} (m %, c mm, inertia % of the largest moment):")
    print("  link" + "".join(f"{n:>7s}" for n in ("m", "cx", "cy", "cz", "Ixx", "Iyy", "Izz",
                                                   "Ixy", "Ixz", "Iyz")))
    for i in range(NUM_LINKS):
      print(f"  {i + 1:4d}" + "".join(f"{x:+7.1f}" for x in rel[i]))
  rank = structural_rank(fits[list(fits)[-1]]["singular"])
  print(f"identifiable: {rank} of 70 directions (structural rank of the Jacobian; the other "
        f"{70 - rank} combinations never change the joints' motion)")
  for k, f in fits.items():
    weak = f["spread"] > 0.5
    identified = int(np.sum(f["singular"] >= 10))
    print(f"{k} excitation: {identified} of the {structural_rank(f['singular'])} identifiable "
          f"directions pinned to a tenth of the prior or better (their information's square "
          f"roots in prior widths {f['singular'][0]:.2g} .. {f['singular'][rank - 1]:.2g}); "
          f"{int(weak.sum())} of the 70 numbers left mostly to the prior (posterior spread > "
          "half the prior's), by link:")
    print("  " + "; ".join(f"{name} {''.join(str(i + 1) for i in np.flatnonzero(weak[:, j]))}"
                           for j, name in enumerate(THETA_NAMES) if weak[:, j].any()))
    # log m's prior width is 0.5: its posterior spread times that is the mass's relative spread.
    print("  posterior spread of each link's mass: "
          + " ".join(f"{100 * SCALE[0] * x:.0f}%" for x in f["spread"][:, 0]))
  print("a link's mass alone is not among the identifiable combinations (joint motion sees it with "
        "its neighbours' first moments), so no excitation pins every mass; a richer one pins the "
        "combinations, as its held-out predictions show")


def prediction(arm: Arm, theta, ctrls, q) -> float:
  """RMS (rad) of the open-loop simulated minus the recorded positions of a held-out recording."""
  return float(np.sqrt(np.mean((arm.simulate(theta, ctrls)[0] - q) ** 2)))


# -- mujoco.sysid on the same recording ---------------------------------------------------------


def fit_mujoco_sysid(arm: Arm, ctrls, q, v, theta0, window: int,
                     iterations: int) -> tuple[np.ndarray, int]:
  """The same fit with MuJoCo's toolbox: the same 10 numbers per link set on an MjSpec, the same
  windows as its sequences, joint position and velocity sensors as the measurements."""
  sysid = importlib.import_module("mujoco.sysid")
  xml = arm_xml().replace("</actuator>", "</actuator>\n  <sensor>" + "".join(
    f'<jointpos name="q{i + 1}" joint="joint{i + 1}"/>'
    f'<jointvel name="v{i + 1}" joint="joint{i + 1}"/>'
    for i in range(NUM_LINKS)) + "</sensor>")  # named: its TimeSeries maps data by name
  spec = mujoco.MjSpec.from_string(xml)
  model = spec.compile()
  params = sysid.ParameterDict()
  for i in range(NUM_LINKS):

    def modifier(spec, p, name=f"link{i + 1}"):
      values = standard(np.asarray(p.value)[None])[0]  # m, c, the full inertia's 6 entries
      body = spec.body(name)
      body.mass, body.ipos, body.fullinertia = float(values[0]), values[1:4], values[4:]

    params.add(sysid.Parameter(f"link{i + 1}", theta0[i], theta0[i] - 4 * SCALE,
                               theta0[i] + 4 * SCALE, modifier=modifier))
  rows, c, qm, vm = (np.asarray(a) for a in arm.windows(ctrls, q, v, window))
  sequences = []
  for w in range(len(rows)):
    # Its rollouts step once per control: hold each command for the five substeps.
    per_step = np.repeat(c[w], SUBSTEPS, axis=0)
    times = np.arange(len(per_step) + 1) * TIMESTEP
    control = sysid.TimeSeries(times, np.concatenate([per_step, per_step[-1:]]))
    measured = np.stack([qm[w], vm[w]], axis=-1).reshape(window, -1)
    # Its rollouts record a step's sensors at the state before the step, tagged with the time
    # after it: a measurement of the state at t goes in at t + one step.
    sensors = sysid.TimeSeries.from_names(times[SUBSTEPS::SUBSTEPS] + TIMESTEP, measured, model)
    initial = sysid.create_initial_state(model, rows[w, arm.layout.qpos], rows[w, arm.layout.qvel])
    sequences.append(sysid.ModelSequences("arm7", spec, f"window{w}", initial, control, sensors))
  residual_fn = sysid.build_residual_fn(models_sequences=sequences)
  with contextlib.redirect_stdout(io.StringIO()):  # its per-iteration log
    fitted, report = sysid.optimize(params, residual_fn, optimizer="mujoco", verbose=False,
                                    max_iters=iterations)
  # Its optimiser logs one objective per iteration and one at the end (the printed log went to
  # the StringIO).
  done = max(len(getattr(report, "extras", {}).get("objective", [])) - 1, 0) or iterations
  return np.stack([fitted[f"link{i + 1}"].value for i in range(NUM_LINKS)]), done


# -- solve and play -----------------------------------------------------------------------------


def solve(samples: int, window: int, iterations: int, threads: int, out: Path, rich: bool,
          skip_mujoco_sysid: bool) -> dict:
  # Before any JAX computation (JAX's rule): joins the other processes under the launcher.
  distributed.initialize()
  windows, devices = samples // window, jax.device_count()
  if windows % devices:
    raise SystemExit(f"--samples / --window = {windows} windows must be a multiple of the "
                     f"{devices} CPU devices of the {jax.process_count()} process(es): each "
                     "device fits as many windows")
  leader = jax.process_index() == 0
  if not leader:  # every process computes the same report; process 0 alone prints and saves
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (until the process ends)
  arm = Arm(threads)
  dist = distributed.setup(arm.model, windows, num_threads=threads)
  rng = np.random.default_rng(0)
  kinds = ["seed", "rich"] if rich else ["seed"]
  # A recording to fit and a held-out one of each kind.
  commands = {(k, part): multisine(rng, samples, k) for k in kinds for part in ("fit", "test")}
  keys = list(commands)
  q, v = arm.record(np.stack([commands[k] for k in keys]), rng)
  recorded = {key: (q[i], v[i]) for i, key in enumerate(keys)}
  theta_true = arm.theta_true
  # The guess: masses and radii of gyration off by ~30%, centres of mass by ~2 cm, principal
  # frames by ~0.2 rad.
  theta0 = theta_true + rng.normal(0, 1, theta_true.shape) * np.array(
    [0.3, 0.02, 0.02, 0.02, 0.3, 0.3, 0.3, 0.2, 0.2, 0.2])
  print(f"arm: {NUM_LINKS} links, {10 * NUM_LINKS} parameters; {samples} commands at "
        f"{1 / (SUBSTEPS * TIMESTEP):.0f} Hz, {SUBSTEPS} substeps each, windows of {window}; "
        f"{arm.sim.num_threads} threads; {jax.process_count()} process(es), {dist.num_local} "
        f"windows here")
  difference, with_sc, without_sc = set_const_check(arm, theta0, samples // window)
  print(f"set_const: a 2 s rollout with new inertias differs by {difference:.1e} rad without it "
        f"(body_subtreemass sets the reference point of the com-frame algebra: rounding only, "
        f"no constraint here reads the other derived constants); used, so the fit simulates "
        f"the arm a compiled model would be; a derivative knot call costs "
        f"{with_sc * 1e3:.1f} ms CPU with it, {without_sc * 1e3:.1f} ms without "
        f"({100 * (with_sc / without_sc - 1):+.0f}%)")

  fits, heldout, begin = {}, {}, time.perf_counter()
  for kind in kinds:
    fits[kind] = fit(arm, dist, commands[kind, "fit"], *recorded[kind, "fit"], theta0, window,
                     iterations)
    f = fits[kind]
    print(f"{kind} excitation: cost {f['costs'][0]:.4g} -> {f['costs'][-1]:.4g} (noise alone: "
          f"{7 * samples:.4g}) in {f['iterations']} LM iterations; per iteration "
          f"{f['seconds_per_iteration']:.2f} s wall, {f['cpu_per_iteration']:.2f} s CPU "
          f"({f['windows']} windows x {fd_rows(arm)} rows per knot); the first "
          f"{f['seconds_first']:.1f} s with compilation")
  seconds = time.perf_counter() - begin
  for name, theta in {"guess": theta0, **{k: f["theta"] for k, f in fits.items()}}.items():
    heldout[name] = [prediction(arm, theta, commands[k, "test"], recorded[k, "test"][0])
                     for k in kinds]
    print(f"held-out prediction error, {name:5s}: " + ", ".join(
      f"{k} recording {e:.5f} rad RMS" for k, e in zip(kinds, heldout[name], strict=True)))
  before, after = heldout["guess"][0], heldout["seed"][0]
  print(f"held-out prediction error before: {before:.5f} rad RMS")
  print(f"held-out prediction error after:  {after:.5f} rad RMS ({before / after:.0f}x lower, "
        f"seed excitation; encoder noise {NOISE_POS:g} rad); fits {seconds:.1f} s wall in all")
  print_tables(theta_true, theta0, fits)
  for kind, f in fits.items():
    print(f"{kind} excitation, one LM iteration at the fit: {f['cpu_iteration']:.2f} s CPU, of "
          f"which the custom calls alone {f['cpu_physics']:.2f} s "
          f"({100 * f['cpu_physics'] / f['cpu_iteration']:.0f}% physics)")

  result = {"before": before, "after": after, "seconds": seconds}
  sysid = importlib.import_module("mujoco.sysid")
  theta_mj = None
  if not skip_mujoco_sysid and jax.process_count() > 1:
    print("mujoco.sysid skipped: it runs in one process (run with one process to compare)")
  elif not skip_mujoco_sysid and not hasattr(sysid, "ParameterDict"):
    # The toolbox imports quietly to an empty module when its extra's packages are missing.
    print("mujoco.sysid skipped: its dependencies are missing "
          "(pip install 'mujoco-core[sysid]==4.0.0')")
  elif not skip_mujoco_sysid:
    begin = time.perf_counter()
    theta_mj, mj_iterations = fit_mujoco_sysid(arm, commands["seed", "fit"],
                                               *recorded["seed", "fit"], theta0, window,
                                               iterations)
    mj_seconds = time.perf_counter() - begin
    after_mj = prediction(arm, theta_mj, commands["seed", "test"], recorded["seed", "test"][0])
    mass_mj = np.abs(errors(theta_mj, theta_true)["mass"]).mean()
    mass_ours = np.abs(errors(fits["seed"]["theta"], theta_true)["mass"]).mean()
    ours = fits["seed"]
    print(f"mujoco.sysid (seed excitation, the 70 numbers; its windows start from the record): "
          f"held-out prediction error {after_mj:.5f} rad RMS, mean |mass error| {mass_mj:.1f}%, "
          f"{mj_seconds:.1f} s wall for {mj_iterations} iterations "
          f"({mj_seconds / mj_iterations:.2f} s each); mjbatch_jax: {after:.5f} rad RMS, "
          f"{mass_ours:.1f}%, {ours['seconds_per_iteration']:.2f} s per iteration "
          f"({ours['iterations']} iterations)")
    result.update(after_mujoco_sysid=after_mj, seconds_mujoco_sysid=mj_seconds)

  out.parent.mkdir(parents=True, exist_ok=True)
  arrays: dict[str, Any] = {
    "model_version": model_version(), "theta_true": theta_true, "theta0": theta0,
    "fits": np.array(list(fits)), "heldout": np.array([heldout[k] for k in heldout]),
    "heldout_names": np.array(list(heldout)), "kinds": np.array(kinds), "samples": samples,
    "window": window, "iterations": iterations, "threads": arm.sim.num_threads,
  }
  arrays.update({f"{k}_{name}": value for k, f in fits.items() for name, value in f.items()})
  for (k, part), (qq, vv) in recorded.items():
    arrays.update({f"{k}_{part}_q": qq, f"{k}_{part}_v": vv, f"{k}_{part}_ctrl": commands[k, part]})
  if theta_mj is not None:
    arrays["mujoco_sysid_theta"] = theta_mj
  if leader:
    np.savez(out, **arrays)
    print(f"saved to {out}")
  dist.close()
  arm.sim.close()
  result.update({f"{k}_mass_error": float(np.abs(errors(f["theta"], theta_true)["mass"]).mean())
                 for k, f in fits.items()})
  return result


def load_result(path: Path) -> dict:
  """A saved result, refused with a clear message if missing, malformed or of another model."""
  if not path.is_file():
    raise SystemExit(f"--play: no result file {path} (run without --play first to make it)")
  try:
    with np.load(path) as saved:
      result = {key: saved[key] for key in saved.files}
  except (OSError, ValueError) as e:
    raise SystemExit(f"--play: {path} is not a saved result (.npz): {e}") from None
  missing = [key for key in RESULT_KEYS if key not in result]
  if missing:
    raise SystemExit(f"--play: {path} is not a sysid result (missing {missing})")
  if str(result["model_version"]) != model_version():
    raise SystemExit(f"--play: {path} was saved for another version of the arm or experiment "
                     f"({result['model_version']}, this script's is {model_version()}); solve "
                     "again")
  return result


def play(path: Path, threads: int) -> dict:
  """Re-simulate the held-out recordings with the saved fits; print tables and plot."""
  saved = load_result(path)
  arm = Arm(threads)
  kinds = [str(k) for k in saved["kinds"]]
  fits = {str(k): {name: saved[f"{k}_{name}"] for name in ("theta", "singular", "spread",
                                                          "directions")}
          for k in saved["fits"]}
  thetas = {"guess": saved["theta0"], **{k: f["theta"] for k, f in fits.items()}}
  heldout = {}
  for name, theta in thetas.items():
    heldout[name] = [prediction(arm, theta, saved[f"{k}_test_ctrl"], saved[f"{k}_test_q"])
                     for k in kinds]
    print(f"held-out prediction error, {name:5s}: " + ", ".join(
      f"{k} recording {e:.5f} rad RMS" for k, e in zip(kinds, heldout[name], strict=True)))
  expected = dict(zip([str(n) for n in saved["heldout_names"]], saved["heldout"], strict=True))
  for name, values in heldout.items():
    if not np.allclose(values, expected[name], rtol=1e-9, atol=0):
      raise SystemExit(f"--play: replayed errors {values} of {name} differ from the saved "
                       f"{expected[name]}")
  print_tables(saved["theta_true"], saved["theta0"], fits)
  plot_path = path.with_suffix(".png")
  plot(arm, saved, kinds, thetas, fits, plot_path)
  print(f"plot saved to {plot_path}")
  arm.sim.close()
  return {name: values[0] for name, values in heldout.items()}


def plot(arm, saved, kinds, thetas, fits, path: Path) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
  kind = kinds[-1]
  ctrls, q = saved[f"{kind}_test_ctrl"], saved[f"{kind}_test_q"]
  t = (np.arange(len(q)) + 1) * SUBSTEPS * TIMESTEP
  joint = 3
  axes[0].plot(t, q[:, joint], "k.", ms=2, label="recorded")
  for name, theta in thetas.items():
    axes[0].plot(t, arm.simulate(theta, ctrls)[0][:, joint], label=f"{name}")
  axes[0].set(xlabel="t (s)", ylabel=f"joint {joint + 1} (rad)",
              title=f"held-out {kind} recording, open loop")
  axes[0].legend(fontsize=8)
  width = 0.8 / (len(thetas))
  links = np.arange(NUM_LINKS) + 1
  for i, (name, theta) in enumerate(thetas.items()):
    axes[1].bar(links + (i - len(thetas) / 2 + 0.5) * width,
                np.abs(errors(theta, saved["theta_true"])["mass"]), width, label=name)
  axes[1].set(xlabel="link", ylabel="|mass error| (%)", title="identified masses")
  axes[1].legend(fontsize=8)
  for name, f in fits.items():
    axes[2].semilogy(f["singular"], ".-", label=f"{name} excitation")
  axes[2].axhline(10, color="k", lw=0.8, ls=":")
  axes[2].set(xlabel="direction of the 70 numbers", ylabel="sqrt(information) (1 / prior width)",
              title="identifiability (dotted: pinned to a tenth of the prior)")
  axes[2].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  plt.close(fig)


def main() -> None:
  parser = argparse.ArgumentParser(description="Inertial identification of a 7-link arm.")
  parser.add_argument("--samples", type=int, default=1000, help="commands per recording")
  parser.add_argument("--window", type=int, default=50, help="samples per shooting window")
  parser.add_argument("--iterations", type=int, default=30,
                      help="most Levenberg-Marquardt iterations (it stops once converged)")
  parser.add_argument("--threads", type=int, default=2, help="simulation threads (0: all CPUs)")
  parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to save the result")
  parser.add_argument("--skip-rich", action="store_true",
                      help="fit the seed's excitation only, not also the richer one")
  parser.add_argument("--skip-mujoco-sysid", action="store_true",
                      help="fit with mjbatch_jax only, not also with mujoco.sysid")
  parser.add_argument("--play", nargs="?", const=DEFAULT_OUT, type=Path, metavar="FILE",
                      help="replay a saved result instead of solving (default: --out's default)")
  parser.add_argument("--processes", type=int, default=1,
                      help="fit over this many local processes (python -m mjbatch_jax.launch)")
  args = parser.parse_args()
  if args.processes < 1:
    parser.error(f"--processes must be at least 1, got {args.processes}")
  if args.processes > 1 and args.play is not None:
    parser.error("--play replays in one process: drop --processes")
  if args.window < 1:
    parser.error(f"--window must be at least 1, got {args.window}")
  if args.samples < args.window or args.samples % args.window:
    parser.error(f"--samples must be a positive multiple of --window ({args.window}), got "
                 f"{args.samples}")
  if args.samples < 100:
    parser.error(f"--samples must be at least 100 (1 s: the commands ramp in over it), got "
                 f"{args.samples}")
  if args.iterations < 1:
    parser.error(f"--iterations must be at least 1, got {args.iterations}")
  if not 0 <= args.threads <= 4 * (os.cpu_count() or 1):
    parser.error(f"--threads must be in [0, 4 per CPU], got {args.threads}")
  if args.processes > 1 and launch.ENV_NUM_PROCESSES not in os.environ:
    # Each process runs this script again with the same arguments (under the launcher,
    # --processes is ignored).
    sys.exit(launch.launch(args.processes, [__file__, *sys.argv[1:]]))
  if args.play is not None:
    play(args.play, args.threads)
  else:
    solve(args.samples, args.window, args.iterations, args.threads, args.out,
          not args.skip_rich, args.skip_mujoco_sysid)


if __name__ == "__main__":
  main()
