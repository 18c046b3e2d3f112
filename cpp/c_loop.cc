#include "c_loop.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

#include <mujoco/mujoco.h>

namespace mjbatch_jax {

double StepLoop(const mjModel* m, const mjtNum* states, int nsim, int nthread, int nstep) {
  const std::size_t nstate = mj_stateSize(m, mjSTATE_INTEGRATION);
  std::vector<mjData*> datas(nthread);
  for (int t = 0; t < nthread; ++t) {
    datas[t] = mj_makeData(m);
    // One untimed step touches the arena's pages, as a batch's long-lived mjData has them.
    if (t < nsim) {
      mj_setState(m, datas[t], states + t * mj_stateSize(m, mjSTATE_INTEGRATION),
                  mjSTATE_INTEGRATION);
      mj_step(m, datas[t]);
    }
  }

  // The clock starts when every thread has its data and stops when the last one is done, so that
  // making threads and data is not counted as physics.
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  auto work = [&](int t) {
    mjData* d = datas[t];
    for (int i = t; i < nsim; i += nthread) {
      mj_setState(m, d, states + i * nstate, mjSTATE_INTEGRATION);
      for (int s = 0; s < nstep; ++s) mj_step(m, d);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < nthread; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      work(t);
    });
  }
  while (ready.load() < nthread - 1) std::this_thread::yield();
  auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  work(0);
  for (auto& thread : threads) thread.join();
  auto stop = std::chrono::steady_clock::now();
  for (mjData* d : datas) mj_deleteData(d);
  return std::chrono::duration<double>(stop - start).count();
}

}  // namespace mjbatch_jax
