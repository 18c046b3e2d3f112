#include "handlers.h"

#include <vector>

namespace mjbatch_jax {

const std::vector<HandlerEntry>& Handlers() {
#define MJBATCH_JAX_ENTRY(Name) Name##Handler(),
  static const std::vector<HandlerEntry>* handlers =
      new std::vector<HandlerEntry>{MJBATCH_JAX_HANDLERS(MJBATCH_JAX_ENTRY)};
#undef MJBATCH_JAX_ENTRY
  return *handlers;
}

}  // namespace mjbatch_jax
