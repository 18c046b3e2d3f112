// The physical limit that the benchmarks compare every front end with: plain mj_step calls on one
// mjData per thread, with no batching, copies or bookkeeping around them.
#ifndef MJBATCH_JAX_C_LOOP_H_
#define MJBATCH_JAX_C_LOOP_H_

#include <mujoco/mujoco.h>

namespace mjbatch_jax {

// Run nstep calls to mj_step on each of nthread threads, each thread on its own copy of data
// (nthread >= 1, nstep >= 0). Return the wall time in seconds from the moment every thread is
// ready until the last one finishes. data is not changed.
double StepLoop(const mjModel* m, const mjData* data, int nthread, long nstep);

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_C_LOOP_H_
