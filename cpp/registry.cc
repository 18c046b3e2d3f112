#include "registry.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <mujoco/mujoco.h>

#include "trap.h"

namespace mjbatch_jax {
namespace {

// What identifies an engine: its model's bytes (by two 64-bit digests of them, both 0 when
// MuJoCo cannot save the model) and its thread count.
struct Key {
  uint64_t digest[2] = {0, 0};
  int nthread = 0;
  bool shareable() const { return digest[0] != 0; }
  bool operator==(const Key& other) const {
    return digest[0] == other.digest[0] && digest[1] == other.digest[1] &&
           nthread == other.nthread;
  }
};

struct Entry {
  std::shared_ptr<Engine> engine;
  Key key;
  int64_t owners = 0;
};

struct Registry {
  std::mutex mutex;
  int64_t last_id = 0;
  std::unordered_map<int64_t, Entry> engines;
  // Ids of closed engines by key: a model opened again gets its old id back, so functions that
  // JAX compiled for it stay valid and a create-close loop compiles once. A few dozen bytes per
  // distinct model ever opened.
  std::vector<std::pair<Key, int64_t>> retired;
  // After a fork, in the child: the engines that were open in the parent, by id, with the
  // parent's process id, and the engines themselves, held forever (see ForkedFrom).
  std::unordered_map<int64_t, int64_t> inherited;
  std::vector<std::shared_ptr<Engine>> abandoned;
};

Registry& GetRegistry();

// fork() copies only the calling thread. The registry's lock is taken around it, so the child
// never inherits it held by a thread it does not have; the child then sets aside the engines.
void LockBeforeFork() { GetRegistry().mutex.lock(); }
void UnlockInParent() { GetRegistry().mutex.unlock(); }
void SetAsideInChild() {
  Registry& r = GetRegistry();
  r.mutex.unlock();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int64_t parent = static_cast<int64_t>(getppid());
  for (auto& [id, entry] : r.engines) {
    r.inherited[id] = parent;
    r.abandoned.push_back(std::move(entry.engine));
  }
  r.engines.clear();
}

Registry& GetRegistry() {
  // Never destroyed: handlers may still look engines up while the interpreter shuts down.
  static Registry* registry = [] {
    auto* made = new Registry;
    pthread_atfork(LockBeforeFork, UnlockInParent, SetAsideInChild);
    return made;
  }();
  return *registry;
}

// The model as mj_saveModel writes it, or empty if MuJoCo cannot save it.
std::vector<unsigned char> ModelBytes(const mjModel* m) {
  std::vector<unsigned char> bytes;
  mjtSize size = 0;
  auto measure = [&] { size = mj_sizeModel(m); };
  if (!Trapped(measure).empty() || size <= 0) return bytes;
  bytes.resize(static_cast<std::size_t>(size));
  auto save = [&] { mj_saveModel(m, nullptr, bytes.data(), size); };
  if (!Trapped(save).empty()) bytes.clear();
  return bytes;
}

Key MakeKey(const std::vector<unsigned char>& bytes, int nthread) {
  Key key;
  key.nthread = nthread;
  if (bytes.empty()) return key;
  // FNV-1a, and a second pass with another basis and multiplier: an id is reused for a closed
  // model only on both, so a collision would need 128 bits to agree.
  uint64_t a = 1469598103934665603ull, b = 0x9e3779b97f4a7c15ull;
  for (unsigned char byte : bytes) {
    a = (a ^ byte) * 1099511628211ull;
    b = (b ^ byte) * 0x100000001b3ull + 0x632be59bd9b4e019ull;
  }
  key.digest[0] = a | 1;  // never 0, which means "not shareable"
  key.digest[1] = b ^ bytes.size();
  return key;
}

}  // namespace

int64_t OpenEngine(const mjModel* m, int nthread, Status* status) {
  std::vector<unsigned char> bytes = ModelBytes(m);
  Key key = MakeKey(bytes, nthread);
  Registry& r = GetRegistry();
  if (key.shareable()) {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (auto& [id, entry] : r.engines) {
      // An open engine is shared only if its model is the same byte for byte.
      if (!(entry.key == key) || ModelBytes(entry.engine->model()) != bytes) continue;
      ++entry.owners;
      return id;
    }
  }
  std::unique_ptr<Engine> engine = Engine::Create(m, nthread, status);
  if (!engine) return -1;
  std::lock_guard<std::mutex> lock(r.mutex);
  int64_t id = 0;
  if (key.shareable()) {
    for (auto it = r.retired.begin(); it != r.retired.end(); ++it) {
      if (it->first == key) {
        id = it->second;
        r.retired.erase(it);
        break;
      }
    }
  }
  if (!id || r.engines.count(id)) id = ++r.last_id;
  Entry entry;
  entry.engine = std::move(engine);
  entry.key = key;
  entry.owners = 1;
  r.engines.emplace(id, std::move(entry));
  return id;
}

std::shared_ptr<Engine> FindEngine(int64_t id) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.engines.find(id);
  return it == r.engines.end() ? nullptr : it->second.engine;
}

bool CloseEngine(int64_t id) {
  Registry& r = GetRegistry();
  std::shared_ptr<Engine> engine;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.engines.find(id);
  if (it == r.engines.end()) return false;
  if (--it->second.owners > 0) return true;
  engine = std::move(it->second.engine);
  if (it->second.key.shareable()) r.retired.emplace_back(it->second.key, id);
  r.engines.erase(it);
  return true;
}

int64_t ForkedFrom(int64_t id) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.inherited.find(id);
  return it == r.inherited.end() ? 0 : it->second;
}

int64_t OpenEngineCount() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return static_cast<int64_t>(r.engines.size());
}

}  // namespace mjbatch_jax
