#include "registry.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace mjbatch_jax {
namespace {

struct Registry {
  std::mutex mutex;
  int64_t last_id = 0;
  std::unordered_map<int64_t, std::shared_ptr<Engine>> engines;
};

Registry& GetRegistry() {
  // Never destroyed: handlers may still look engines up while the interpreter shuts down.
  static Registry* registry = new Registry;
  return *registry;
}

}  // namespace

int64_t RegisterEngine(std::shared_ptr<Engine> engine) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.engines.emplace(++r.last_id, std::move(engine));
  return r.last_id;
}

std::shared_ptr<Engine> FindEngine(int64_t id) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.engines.find(id);
  return it == r.engines.end() ? nullptr : it->second;
}

bool RemoveEngine(int64_t id) {
  Registry& r = GetRegistry();
  std::shared_ptr<Engine> engine;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.engines.find(id);
  if (it == r.engines.end()) return false;
  engine = std::move(it->second);
  r.engines.erase(it);
  return true;
}

}  // namespace mjbatch_jax
