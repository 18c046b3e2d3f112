// Finite differences of nstep substeps, every perturbed copy of every simulation a row of one
// batch, in float64 whatever the caller's element type, and right through switches of the
// dynamics: a copy that ends in another regime than its nominal row (regime.h: a contact that
// appears or vanishes, a limit, a cone state, a clamp) has measured a jump, not a derivative,
// so its column is differenced on the side that stays in the nominal regime, or with smaller
// steps until one does.
#ifndef MJBATCH_JAX_FINITE_DIFFERENCE_H_
#define MJBATCH_JAX_FINITE_DIFFERENCE_H_

#include <cstdint>
#include <vector>

#include "engine.h"
#include "status.h"

namespace mjbatch_jax {

// What FiniteDifference perturbs and how.
struct Perturbation {
  // Entries of a simulation's inputs to perturb. Plain: its row with the call's ctrl written in,
  // then its params (0 .. nstate-1 row entries, nstate .. nstate+P-1 params). Tangent: MuJoCo's
  // tangent space, as mjd_transitionFD perturbs it: 0 .. nv-1 positions along each degree of
  // freedom (mj_integratePos), nv .. 2nv+na-1 velocities and activations, then nu controls, then
  // the P params.
  std::vector<int> columns;
  // Per column: centred differences (copies at +eps and -eps) instead of forward ones.
  std::vector<bool> centered;
  // The step: eps, and eps * kControlStep for the controls' and the warm start's columns
  // (regime-checked only). The solver's warm start (a row entry) is differenced forward, never
  // checked or refined: it changes where the solver starts, not which constraints are active; a
  // step of it often changes the solver's iteration count, and refining it to smaller steps
  // measured the solver's rounding instead (on the G1 a 10-knot chain's median error 1e-3
  // instead of 3e-6).
  double eps = 1e-6;
  bool tangent = false;
  // Difference only copies in their nominal row's regime (the default). Off: plain forward or
  // centred differences at eps, whatever they cross.
  bool regime_checked = true;
  // mjData fields to difference too, at the state after the substeps (mj_forward there).
  std::vector<DataField> observe;
};

// Totals over every FiniteDifference call of the process, for benchmarks and tests.
struct FiniteDifferenceCounts {
  int64_t columns = 0;     // differences asked for: simulations x columns
  int64_t switched = 0;    // of which a copy at eps crossed a switch of the dynamics
  int64_t extra_rows = 0;  // rows stepped beyond the first pass to difference those
  int64_t unresolved = 0;  // of which no step down to eps * 1e-4 stayed in the regime: the
                           // smallest one-sided quotient of the copies tried is taken
};

// A control's or the warm start's column is stepped by eps times this (Differencer::Step).
inline constexpr double kControlStep = 0.1;

// A centred column whose forward and backward quotients (over positions, velocities and
// activations) differ by more than this fraction of the larger has crossed a switch that the
// regime does not show on one side, and is refined like a column whose copy changed regime. On
// the G1 standing, a position's copy at -1e-6 crossed one (a 50-knot chain off by 36x and 264x at
// 2 of 24 points). Measured over 10-knot windows at 1e-6, smooth columns mostly differ by under
// 1% (cheetah at most 0.7%, G1 1.8%, Go1 15%); the gripper's fingers exceed 30% in 0.5% of its
// columns, which then take two more rows each.
inline constexpr double kDisagreement = 0.3;

// The steps tried after eps: each level's copies are 100 times closer to the nominal row.
inline constexpr int kRefinements = 2;
inline constexpr double kRefinement = 1e-2;

// Nominal rows (n x nstate) and sensordata (n x ns) after nstep substeps of each simulation of
// in (nstep 0: none, sensordata of mj_forward), and their derivatives w.r.t. p.columns: jx
// (n x k x nstate, or n x k x (2nv+na) in the tangent space when p.tangent, positions compared
// with mj_differentiatePos) and jy (n x k x ns), k = p.columns.size(); and for each observed
// field f its nominal values observed[f] (n x size) and derivatives observed_jacobians[f]
// (n x k x size). Differences are taken in float64 and rounded to T once.
template <typename T>
Status FiniteDifference(Engine& engine, const Inputs<T>& in, int nstep, const Perturbation& p,
                        T* next, T* sensordata, T* jx, T* jy,
                        const std::vector<T*>& observed = {},
                        const std::vector<T*>& observed_jacobians = {});

FiniteDifferenceCounts FiniteDifferenceTotals();

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_FINITE_DIFFERENCE_H_
