"""What the processes of a distributed run raise, and the constants they agree on."""

from mjbatch_jax.launch import EXIT_PEER_LOST

DEFAULT_TIMEOUT = 30.0
# EXIT_PEER_LOST (75): the status of a process stopped because another one failed or went
# silent, sysexits' "temporary failure, try again": for training, resume from the checkpoint.


class DistributedError(RuntimeError):
  """The processes disagree (model, versions, settings, compiled program) or one failed."""


class PeerLostError(DistributedError):
  """A process never arrived (or left) while the processes were starting.

  Left uncaught, it ends the process with EXIT_PEER_LOST (75), as a peer lost later does.
  """


__all__ = ["DEFAULT_TIMEOUT", "EXIT_PEER_LOST", "DistributedError", "PeerLostError"]
