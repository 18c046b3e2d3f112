"""What the processes of a distributed run raise, and the constants they agree on."""

from mjbatch_jax.launch import EXIT_PEER_LOST

DEFAULT_TIMEOUT = 30.0
"""Seconds of silence after which a process counts a peer as lost, where neither initialize's
timeout nor MJBATCH_JAX_PEER_TIMEOUT (ENV_TIMEOUT) says otherwise."""


class DistributedError(RuntimeError):
  """The processes disagree (model, versions, settings, compiled program) or one failed."""


class PeerLostError(DistributedError):
  """A process never arrived (or left) while the processes were starting.

  Left uncaught, it ends the process with EXIT_PEER_LOST (75), as a peer lost later does.
  """


__all__ = ["DEFAULT_TIMEOUT", "EXIT_PEER_LOST", "DistributedError", "PeerLostError"]
