// The regime of a step: a hash of everything at which MuJoCo's dynamics switch from one smooth
// formula to another. Finite differences compare it between a perturbed copy and its nominal
// row: a copy in another regime has crossed a switch (a contact that appears, a limit that
// engages, a friction cone's state, a clamp, one more solver iteration), and its difference
// measures the jump, not the derivative.
#ifndef MJBATCH_JAX_REGIME_H_
#define MJBATCH_JAX_REGIME_H_

#include <cstdint>

#include <mujoco/mujoco.h>

namespace mjbatch_jax {

// The regime hash before any substep.
inline constexpr uint64_t kRegimeSeed = 0xcbf29ce484222325ULL;

// Fold the regime of d's last mj_step into hash: the active constraints (count, type and object
// of each row of efc, and, with the CG and Newton solvers, which set it, each row's state), the
// controls, actuator forces and activations held at a limit of their range, the solver's
// iterations and line-search evaluations per island, and the warnings that reset a simulation.
// Allocates nothing, so it may run under mjb_apply.
uint64_t FoldRegime(const mjModel* m, const mjData* d, uint64_t hash);

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_REGIME_H_
