// Engines reached by id. A jitted function holds an engine's id, never its address, so a call
// that outlives every owner of the engine finds nothing and says so instead of touching freed
// memory; a call in flight holds a shared owner and keeps the engine alive until it returns.
//
// Simulators of identical models (the same bytes as mj_saveModel writes them) on the same number
// of threads share one engine and so one id. The id is what a compiled function bakes in, so a
// loop that makes a new Simulator of the same model each time compiles once, not once per
// Simulator; the engine holds no state between calls, so sharing it changes no result.
#ifndef MJBATCH_JAX_REGISTRY_H_
#define MJBATCH_JAX_REGISTRY_H_

#include <cstdint>
#include <memory>

#include <mujoco/mujoco.h>

#include "engine.h"
#include "status.h"

namespace mjbatch_jax {

// Take one ownership of an engine for a copy of m on nthread threads: an open engine of an
// identical model and thread count if there is one, else a new one. Return its id, or -1 with
// the reason in status.
int64_t OpenEngine(const mjModel* m, int nthread, Status* status);

// The engine with this id, or nullptr if it was never opened or every owner closed it.
std::shared_ptr<Engine> FindEngine(int64_t id);

// Give up one ownership of the engine with this id; the last one removes it (calls in flight
// finish first). Return whether the id was open.
bool CloseEngine(int64_t id);

// How many engines are open: what tests count to see that closing frees them.
int64_t OpenEngineCount();

// If the engine with this id was open in the process that forked this one, that process's id;
// else 0. Such an engine's batches had worker threads that a forked child does not have: the
// child never runs nor frees it (freeing would wait for those threads forever).
int64_t ForkedFrom(int64_t id);

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_REGISTRY_H_
