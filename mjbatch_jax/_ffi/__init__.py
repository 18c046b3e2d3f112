"""The custom calls: one module per C++ handler (cpp/handler_<name>.cc), each a thin wrapper of
jax.ffi.ffi_call on inputs that the public functions have already checked and flattened.

To add a handler, pair cpp/handler_<name>.cc with a module here and add one line to TARGETS.
"""

from mjbatch_jax._ffi import finite_difference, forward, rollout, step, transition_fd
from mjbatch_jax._ffi._common import (
  DIFFERENTIATION_TRACERS,
  HIGHER_ORDER,
  NWARNING,
  register,
  without_derivatives,
)

# The XLA target of each wrapper; test_layout.py checks that it is the C++ table exactly.
TARGETS = {
  "mjbatch_jax_step": step,
  "mjbatch_jax_rollout": rollout,
  "mjbatch_jax_forward": forward,
  "mjbatch_jax_transition_fd": transition_fd,
  "mjbatch_jax_finite_difference": finite_difference,
}

__all__ = [
  "DIFFERENTIATION_TRACERS",
  "HIGHER_ORDER",
  "NWARNING",
  "TARGETS",
  "register",
  "without_derivatives",
]
