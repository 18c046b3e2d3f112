// XLA FFI handlers over the engine, for jax.ffi.ffi_call on the CPU. Each takes the engine's
// registry id as the attribute "engine"; arrays may have any leading dimensions, which the
// handlers flatten into one batch of simulations, so that vmap becomes a single call.
#ifndef MJBATCH_JAX_FFI_H_
#define MJBATCH_JAX_FFI_H_

#include <cstdint>

#include "xla/ffi/api/c_api.h"

namespace mjbatch_jax {

// How often each handler has run in this process: what tests count to see that vmap and the
// derivatives make one call, not many.
struct HandlerCalls {
  int64_t step, rollout, forward, transition_fd;
};
HandlerCalls CountHandlerCalls();

// step(state (..., nstate), ctrl (..., nu), params (..., P)) -> (state (..., nstate),
//   warnings (..., mjNWARNING) int32). Attributes: engine, nstep, fields ("name:size,...").
extern "C" XLA_FFI_Error* MjbatchJaxStep(XLA_FFI_CallFrame* call_frame);

// rollout(state (..., nstate), ctrls (..., T, nu), params (..., P)) -> (states (..., T, nstate),
//   sensordata (..., T, nsensordata), warnings (..., mjNWARNING)). Attributes as step.
extern "C" XLA_FFI_Error* MjbatchJaxRollout(XLA_FFI_CallFrame* call_frame);

// forward(state (..., nstate), params (..., P)) -> one (..., size) array per output field.
// Attributes: engine, fields, outputs ("name,name,...").
extern "C" XLA_FFI_Error* MjbatchJaxForward(XLA_FFI_CallFrame* call_frame);

// transition_fd(state (..., nstate), ctrl (..., nu), params (..., P)) -> A (..., nx, nx),
//   B (..., nx, nu), C (..., ns, nx), D (..., ns, nu), float64: mjd_transitionFD per simulation.
//   Attributes: engine, fields, eps, centered, sensors (C and D are written only if true).
extern "C" XLA_FFI_Error* MjbatchJaxTransitionFD(XLA_FFI_CallFrame* call_frame);

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_FFI_H_
