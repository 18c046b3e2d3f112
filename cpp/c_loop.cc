#include "c_loop.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

#include <mujoco/mujoco.h>

namespace mjbatch_jax {

namespace {

// Runs work(t, d) on nthread threads, thread t with its own mjData d that one untimed step from
// row t has warmed, and returns the wall time from the moment every thread has its data until the
// last one finishes, so that making threads and data is not counted as physics.
template <typename Work>
double TimeOnThreads(const mjModel* m, const mjtNum* states, int nsim, int nthread, Work work) {
  const std::size_t nstate = mj_stateSize(m, mjSTATE_INTEGRATION);
  std::vector<mjData*> datas(nthread);
  for (int t = 0; t < nthread; ++t) {
    datas[t] = mj_makeData(m);
    // One untimed step touches the arena's pages, as a batch's long-lived mjData has them.
    if (t < nsim) {
      mj_setState(m, datas[t], states + t * nstate, mjSTATE_INTEGRATION);
      mj_step(m, datas[t]);
    }
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 1; t < nthread; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      work(t, datas[t]);
    });
  }
  while (ready.load() < nthread - 1) std::this_thread::yield();
  auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  work(0, datas[0]);
  for (auto& thread : threads) thread.join();
  auto stop = std::chrono::steady_clock::now();
  for (mjData* d : datas) mj_deleteData(d);
  return std::chrono::duration<double>(stop - start).count();
}

}  // namespace

double StepLoop(const mjModel* m, const mjtNum* states, int nsim, int nthread, int nstep) {
  const std::size_t nstate = mj_stateSize(m, mjSTATE_INTEGRATION);
  return TimeOnThreads(m, states, nsim, nthread, [&](int t, mjData* d) {
    for (int i = t; i < nsim; i += nthread) {
      mj_setState(m, d, states + i * nstate, mjSTATE_INTEGRATION);
      for (int s = 0; s < nstep; ++s) mj_step(m, d);
    }
  });
}

double StepLoopLockstep(const mjModel* m, const mjtNum* states, int nsim, int nthread,
                        int nstep) {
  const std::size_t nstate = mj_stateSize(m, mjSTATE_INTEGRATION);
  std::vector<mjtNum> rows(states, states + nsim * nstate);
  return TimeOnThreads(m, states, nsim, nthread, [&](int t, mjData* d) {
    for (int s = 0; s < nstep; ++s) {
      for (int i = t; i < nsim; i += nthread) {
        mjtNum* row = rows.data() + i * nstate;
        mj_setState(m, d, row, mjSTATE_INTEGRATION);
        mj_step(m, d);
        mj_getState(m, d, row, mjSTATE_INTEGRATION);
      }
    }
  });
}

}  // namespace mjbatch_jax
