#include "regime.h"

#include <algorithm>
#include <cstdint>

#include <mujoco/mujoco.h>

namespace mjbatch_jax {
namespace {

// One round of FNV-1a over the eight bytes of value.
uint64_t Mix(uint64_t hash, uint64_t value) {
  for (int byte = 0; byte < 8; ++byte) {
    hash ^= (value >> (8 * byte)) & 0xff;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// -1 below the range, +1 above, 0 inside; "at" counts as held at the limit (a clamped value
// lands exactly on it).
int Side(mjtNum value, const mjtNum* range, bool inclusive) {
  if (inclusive ? value <= range[0] : value < range[0]) return -1;
  if (inclusive ? value >= range[1] : value > range[1]) return 1;
  return 0;
}

}  // namespace

uint64_t FoldRegime(const mjModel* m, const mjData* d, uint64_t hash) {
  hash = Mix(hash, static_cast<uint64_t>(d->nefc));
  // PGS leaves efc_state unset with elliptic cones: only the solvers that compute it say.
  const bool states = m->opt.solver != mjSOL_PGS;
  for (int i = 0; i < d->nefc; ++i) {
    uint64_t row = static_cast<uint32_t>(d->efc_type[i]);
    row = (row << 32) | static_cast<uint32_t>(d->efc_id[i]);
    hash = Mix(hash, row);
    if (states) hash = Mix(hash, static_cast<uint64_t>(d->efc_state[i]));
  }
  // Clamps: a control outside its range is clamped before use (a value on the limit is not yet
  // clamped: a step inward changes the force); forces and activations land on the limit.
  const bool clamp_ctrl = !(m->opt.disableflags & mjDSBL_CLAMPCTRL);
  uint64_t clamped = 0;
  int bits = 0;
  auto push = [&](int side) {
    clamped = (clamped << 2) | static_cast<uint64_t>(side + 1);
    if (++bits == 32) {
      hash = Mix(hash, clamped);
      clamped = 0;
      bits = 0;
    }
  };
  for (int i = 0; i < m->nu; ++i) {
    if (clamp_ctrl && m->actuator_ctrllimited[i]) {
      push(Side(d->ctrl[i], m->actuator_ctrlrange + 2 * i, /*inclusive=*/false));
    }
    if (m->actuator_forcelimited[i]) {
      push(Side(d->actuator_force[i], m->actuator_forcerange + 2 * i, /*inclusive=*/true));
    }
    if (m->actuator_actlimited[i] && m->actuator_actnum[i] > 0) {
      const int adr = m->actuator_actadr[i];
      for (int j = 0; j < m->actuator_actnum[i]; ++j) {
        push(Side(d->act[adr + j], m->actuator_actrange + 2 * i, /*inclusive=*/true));
      }
    }
  }
  hash = Mix(hash, clamped);
  // The solver's path: an iterative solver stops on a tolerance, so a copy that takes another
  // number of iterations (or line-search evaluations) ends off the nominal's smooth branch by
  // the last update it did or did not take.
  const int islands = std::max(1, std::min(d->nisland, mjNISLAND));
  hash = Mix(hash, static_cast<uint64_t>(d->nisland));
  for (int island = 0; island < islands; ++island) {
    const int niter = d->solver_niter[island];
    hash = Mix(hash, static_cast<uint64_t>(niter));
    for (int i = 0; i < std::min(niter, mjNSOLVER); ++i) {
      hash = Mix(hash, static_cast<uint64_t>(d->solver[island * mjNSOLVER + i].neval));
    }
  }
  // A simulation that diverged was reset: nothing near it is differentiable.
  for (int w : {mjWARN_BADQPOS, mjWARN_BADQVEL, mjWARN_BADQACC}) {
    hash = Mix(hash, static_cast<uint64_t>(d->warning[w].number));
  }
  return hash;
}

}  // namespace mjbatch_jax
