// The physical limit that the benchmarks compare every front end with: plain mj_step calls on one
// mjData per thread, with no batching, copies or bookkeeping around them.
#ifndef MJBATCH_JAX_C_LOOP_H_
#define MJBATCH_JAX_C_LOOP_H_

#include <mujoco/mujoco.h>

namespace mjbatch_jax {

// Simulate nsim simulations from their mjSTATE_INTEGRATION rows (nsim x nstate, ctrl included)
// for nstep calls to mj_step each, on nthread threads that each own one mjData and take every
// nthread-th simulation. Return the wall time in seconds from the moment every thread has its
// mjData until the last one finishes. states is not changed.
double StepLoop(const mjModel* m, const mjtNum* states, int nsim, int nthread, int nstep);

// The limit of a batch that steps every simulation one substep per call: as StepLoop, but substep
// by substep in lock step, each simulation loaded from and saved back to its own row (a copy of
// states made before the clock starts) with mj_setState and mj_getState on every substep. The
// threads do not meet between substeps, so a batch's per-call join is not in it. states is not
// changed.
double StepLoopLockstep(const mjModel* m, const mjtNum* states, int nsim, int nthread,
                        int nstep);

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_C_LOOP_H_
