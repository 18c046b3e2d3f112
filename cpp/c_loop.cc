#include "c_loop.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <mujoco/mujoco.h>

namespace mjbatch_jax {

double StepLoop(const mjModel* m, const mjData* data, int nthread, long nstep) {
  std::vector<mjData*> datas(nthread);
  for (int t = 0; t < nthread; ++t) {
    datas[t] = mj_copyData(nullptr, m, data);
  }
  // The clock starts when every thread has its data and stops when the last one is done, so that
  // thread start-up is not counted as physics.
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 1; t < nthread; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
        std::this_thread::yield();
      }
      for (long i = 0; i < nstep; ++i) mj_step(m, datas[t]);
    });
  }
  while (ready.load() < nthread - 1) {
    std::this_thread::yield();
  }
  auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (long i = 0; i < nstep; ++i) mj_step(m, datas[0]);
  for (auto& thread : threads) thread.join();
  auto stop = std::chrono::steady_clock::now();
  for (mjData* d : datas) mj_deleteData(d);
  return std::chrono::duration<double>(stop - start).count();
}

}  // namespace mjbatch_jax
