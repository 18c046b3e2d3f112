// Engines reached by id. A jitted function holds an engine's id, never its address, so a call
// that outlives the engine's Python owner finds nothing and says so instead of touching freed
// memory; a call in flight holds a shared owner and keeps the engine alive until it returns.
#ifndef MJBATCH_JAX_REGISTRY_H_
#define MJBATCH_JAX_REGISTRY_H_

#include <cstdint>
#include <memory>

#include "engine.h"

namespace mjbatch_jax {

// Store engine and return its id, one larger than any before.
int64_t RegisterEngine(std::shared_ptr<Engine> engine);

// The engine with this id, or nullptr if it was never registered or was removed.
std::shared_ptr<Engine> FindEngine(int64_t id);

// Remove the engine with this id; return whether it was registered.
bool RemoveEngine(int64_t id);

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_REGISTRY_H_
