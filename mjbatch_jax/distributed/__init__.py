"""Many processes, one batch: mjbatch_jax on JAX's own multi-controller runtime.

Every process runs the same program (multi-controller JAX): it calls `setup`, which starts
`jax.distributed.initialize` (unless the caller did), makes this process's `Simulator`, checks
that every process has the same model, versions and settings, and returns a `Distributed`: the
simulator, a global 1-D mesh over every process's CPU devices, and helpers that make globally
sharded arrays of which each process builds only its own rows. A function of rows under
`jax.jit(jax.shard_map(...))` over that mesh then runs each process's custom calls on its rows
only, and collectives (`jax.lax.pmean`, `psum`) cross processes through gloo.

  # python -m mjbatch_jax.launch -n 2 train.py     (or one such process per host, see
  # docs/distributed.md)
  dist = mjbatch_jax.distributed.setup(model, num_sims_global=4096, fields=("body_mass",))
  step = dist.map(mjbatch_jax.step)              # jit(shard_map(...)) over dist.mesh
  state = step(dist.state, dist.zeros(dist.sim.nu), dist.params)
  rows = dist.gather(state)                      # (4096, nstate) numpy, in every process

No runtime of our own: processes find each other through JAX's coordination service, from
arguments, from the MJBATCH_JAX_* variables that `python -m mjbatch_jax.launch` sets, or by
JAX's own detection (SLURM, Open MPI). What we add is checking, and a watchdog: a process whose
peer died or hangs stops within `timeout` seconds with a message naming that peer (exit status
EXIT_PEER_LOST), instead of waiting in a collective for a peer that never comes.

The package's modules: errors (what a run raises), bootstrap (starting JAX's runtime), watchdog
(a lost peer), handle (`setup` and `Distributed`).
"""

from mjbatch_jax.distributed.bootstrap import initialize
from mjbatch_jax.distributed.errors import (
  DEFAULT_TIMEOUT,
  EXIT_PEER_LOST,
  DistributedError,
  PeerLostError,
)
from mjbatch_jax.distributed.handle import Distributed, setup, versions
from mjbatch_jax.launch import ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID, ENV_TIMEOUT
from mjbatch_jax.params import model_digest

__all__ = [
  "DEFAULT_TIMEOUT",
  "ENV_COORDINATOR",
  "ENV_NUM_PROCESSES",
  "ENV_PROCESS_ID",
  "ENV_TIMEOUT",
  "EXIT_PEER_LOST",
  "Distributed",
  "DistributedError",
  "PeerLostError",
  "initialize",
  "model_digest",
  "setup",
  "versions",
]
