// The table of XLA FFI handlers that the module hands to JAX.
//
// To add a handler: write cpp/handler_<name>.cc defining <Name>Handler() (see handler_step.cc),
// add <Name> to MJBATCH_JAX_HANDLERS below, and pair it with its Python wrapper in
// mjbatch_jax/_ffi/ (one file, one line in that package's table). CMake compiles every
// cpp/handler_*.cc it finds.
#ifndef MJBATCH_JAX_HANDLERS_H_
#define MJBATCH_JAX_HANDLERS_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "xla/ffi/api/c_api.h"

namespace mjbatch_jax {

struct HandlerEntry {
  const char* name;                   // the target name that jax.ffi.ffi_call uses
  XLA_FFI_Handler* function;
  const std::atomic<int64_t>* calls;  // how often it ran: tests count calls with it
};

#define MJBATCH_JAX_HANDLERS(X) X(Step) X(Rollout) X(Forward) X(TransitionFD) X(FiniteDifference)

#define MJBATCH_JAX_DECLARE_HANDLER(Name) HandlerEntry Name##Handler();
MJBATCH_JAX_HANDLERS(MJBATCH_JAX_DECLARE_HANDLER)
#undef MJBATCH_JAX_DECLARE_HANDLER

// Every handler, in the order of MJBATCH_JAX_HANDLERS.
const std::vector<HandlerEntry>& Handlers();

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_HANDLERS_H_
