"""The exception that MuJoCo errors in a simulation become."""


class SimulationError(RuntimeError):
  """MuJoCo raised an error in a simulation of a call; the message names it ("sim 3: ...").

  Simulations that did not fail ran to completion; the failing ones kept the state they had
  before the call.
  """
