#include "engine.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>

#include <mujoco/mjbatch.h>
#include <mujoco/mjxmacro.h>
#include <mujoco/mujoco.h>

namespace mjbatch_jax {

struct Engine::Slot {
  mjBatch* batch = nullptr;
  int capacity = 0;
  std::vector<int> ids;  // 0 .. capacity-1, the selection of a call on fewer rows
  // Fields that earlier calls expanded, with the model's values, which a call without them
  // restores: a call must not see the parameters of the one before.
  std::vector<std::pair<std::string, std::vector<char>>> expanded;
  bool busy = false;
};

namespace {

mjBatch* MakeBatch(const mjModel* m, int nsim, int nthread, std::string* error) {
  mjBatchConfig config;
  mjb_defaultConfig(&config);
  config.nthread = nthread;
  char buffer[1000] = "";
  mjBatch* batch = mjb_makeBatch(m, nsim, &config, buffer, sizeof(buffer));
  if (!batch && error) *error = buffer;
  return batch;
}

// Copy count values between element types, as a memcpy when they agree.
template <typename To, typename From>
void Convert(To* to, const From* from, std::size_t count) {
  if constexpr (std::is_same_v<To, From>) {
    std::memcpy(to, from, count * sizeof(To));
  } else {
    for (std::size_t i = 0; i < count; ++i) to[i] = static_cast<To>(from[i]);
  }
}

// Values per simulation of the params of a call: its fields side by side.
std::size_t ParamWidth(const std::vector<ParamField>* fields) {
  std::size_t width = 0;
  if (fields) {
    for (const ParamField& field : *fields) width += field.size;
  }
  return width;
}

template <typename T>
struct RolloutArgs {
  const T* ctrls;
  T* states;
  T* sensordata;
  int32_t* warnings;
  int nknot;
  int nstep;
};

// mjb_apply function: the rollout of one simulation. No C++ objects live here, since a MuJoCo
// error unwinds with longjmp.
template <typename T>
void RolloutSim(const mjModel* m, mjData* d, int sim, void* arg) {
  auto* a = static_cast<RolloutArgs<T>*>(arg);
  int nstate = mj_stateSize(m, mjSTATE_INTEGRATION);
  mj_markStack(d);
  mjtNum* row = mj_stackAllocNum(d, nstate);
  for (int k = 0; k < a->nknot; ++k) {
    std::size_t knot = static_cast<std::size_t>(sim) * a->nknot + k;
    Convert(d->ctrl, a->ctrls + knot * m->nu, m->nu);
    for (int s = 0; s < a->nstep; ++s) mj_step(m, d);
    mj_getState(m, d, row, mjSTATE_INTEGRATION);
    Convert(a->states + knot * nstate, row, nstate);
    Convert(a->sensordata + knot * m->nsensordata, d->sensordata, m->nsensordata);
  }
  mj_freeStack(d);
  if (a->warnings) {
    for (int w = 0; w < mjNWARNING; ++w) {
      a->warnings[static_cast<std::size_t>(sim) * mjNWARNING + w] = d->warning[w].number;
    }
  }
}

template <typename T>
struct ForwardArgs {
  const std::vector<DataField>* fields;
  const std::vector<T*>* outputs;
};

template <typename T>
void ForwardSim(const mjModel* m, mjData* d, int sim, void* arg) {
  auto* a = static_cast<ForwardArgs<T>*>(arg);
  mj_forward(m, d);
  for (std::size_t f = 0; f < a->fields->size(); ++f) {
    const DataField& field = (*a->fields)[f];
    mjtNum* values;
    std::memcpy(&values, reinterpret_cast<const char*>(d) + field.offset, sizeof(values));
    Convert((*a->outputs)[f] + static_cast<std::size_t>(sim) * field.size, values, field.size);
  }
}

struct TransitionArgs {
  double eps;
  int centered;
  double *A, *B, *C, *D;
};

void TransitionSim(const mjModel* m, mjData* d, int sim, void* arg) {
  auto* a = static_cast<TransitionArgs*>(arg);
  std::size_t nx = 2 * m->nv + m->na, nu = m->nu, ns = m->nsensordata;
  mjd_transitionFD(m, d, a->eps, a->centered, a->A + sim * nx * nx, a->B + sim * nx * nu,
                   a->C ? a->C + sim * ns * nx : nullptr, a->D ? a->D + sim * ns * nu : nullptr);
}

}  // namespace

std::unique_ptr<Engine> Engine::Create(const mjModel* m, int nthread, std::string* error) {
  // A batch of one tells whether MuJoCo can batch the model at all, before any call.
  mjBatch* probe = MakeBatch(m, 1, 1, error);
  if (!probe) return nullptr;
  mjb_deleteBatch(probe);
  mjModel* copy = mj_copyModel(nullptr, m);
  if (!copy) {
    *error = "could not copy the model";
    return nullptr;
  }
  return std::unique_ptr<Engine>(new Engine(copy, nthread));
}

Engine::Engine(mjModel* model, int nthread)
    : model_(model),
      nthread_(nthread),
      nstate_(mj_stateSize(model, mjSTATE_INTEGRATION)) {}

Engine::~Engine() {
  for (auto& slot : slots_) mjb_deleteBatch(slot->batch);
  mj_deleteModel(model_);
}

int Engine::ParamSize(std::string_view name, std::string* error) const {
  std::string field(name);
  // A throwaway batch of one simulation answers with MuJoCo's own table of expandable fields.
  std::string make_error;
  mjBatch* probe = MakeBatch(model_, 1, 1, &make_error);
  if (!probe) {
    *error = make_error;
    return -1;
  }
  int size = 0, elemsize = 0;
  void* storage = mjb_expand(probe, field.c_str(), &size, &elemsize);
  mjb_deleteBatch(probe);
  if (!storage) {
    *error = "'" + field + "' is not a model field that can vary per simulation";
    return -1;
  }
  if (elemsize != sizeof(mjtNum)) {
    *error = "'" + field + "' is not a floating-point field";
    return -1;
  }
  return size;
}

bool Engine::FindDataField(std::string_view name, DataField* field, std::string* error) const {
  const mjModel* m = model_;
#undef MJ_M
#define MJ_M(n) m->n
#define X(type, member, nr, nc)                                         \
  if (name == #member) {                                                \
    if (!std::is_same_v<type, mjtNum>) {                                \
      *error = "'" #member "' is not a floating-point mjData field";    \
      return false;                                                     \
    }                                                                   \
    field->name = #member;                                              \
    field->offset = offsetof(mjData, member);                           \
    field->size = static_cast<int>(m->nr * (nc));                       \
    return true;                                                        \
  }
  MJDATA_POINTERS
#undef X
#undef MJ_M
  *error = "'" + std::string(name) + "' is not an mjData array of fixed size";
  return false;
}

Engine::Slot* Engine::Acquire(int n, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  Slot* chosen = nullptr;
  for (auto& slot : slots_) {
    if (slot->busy) continue;
    if (!chosen || (chosen->capacity < n && slot->capacity > chosen->capacity)) {
      chosen = slot.get();
    }
    if (chosen->capacity >= n) break;
  }
  if (!chosen) {
    slots_.push_back(std::make_unique<Slot>());
    chosen = slots_.back().get();
  }
  if (chosen->capacity < n) {
    // Grown to fit the call; memory follows the rows of the largest call, not a fixed N.
    mjb_deleteBatch(chosen->batch);
    chosen->batch = MakeBatch(model_, n, nthread_, error);
    chosen->capacity = chosen->batch ? n : 0;
    chosen->expanded.clear();
    chosen->ids.resize(n);
    std::iota(chosen->ids.begin(), chosen->ids.end(), 0);
    if (!chosen->batch) return nullptr;
  }
  chosen->busy = true;
  return chosen;
}

void Engine::Release(Slot* slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  slot->busy = false;
}

template <typename T>
std::string Engine::Load(Slot* slot, const Inputs<T>& in) {
  mjBatch* b = slot->batch;
  const std::size_t n = in.n;
  Convert(mjb_state(b), in.state, n * nstate_);
  if (in.ctrl && model_->nu) {
    mjtNum* ctrl = mjb_stateComponent(b, mjSTATE_CTRL, nullptr);
    for (std::size_t i = 0; i < n; ++i) {
      Convert(ctrl + i * nstate_, in.ctrl + i * model_->nu, model_->nu);
    }
  }
  std::memset(mjb_warning(b), 0, n * mjNWARNING * sizeof(mjWarningStat));

  // Fields of earlier calls that this one does not give go back to the model's values.
  for (auto& [name, initial] : slot->expanded) {
    bool given = false;
    if (in.fields) {
      for (const ParamField& field : *in.fields) given |= field.name == name;
    }
    if (given) continue;
    char* storage = static_cast<char*>(mjb_expand(b, name.c_str(), nullptr, nullptr));
    for (std::size_t i = 0; i < n; ++i) {
      std::memcpy(storage + i * initial.size(), initial.data(), initial.size());
    }
  }
  if (!in.fields) return "";
  const std::size_t width = ParamWidth(in.fields);
  std::size_t column = 0;
  for (const ParamField& field : *in.fields) {
    int size = 0, elemsize = 0;
    auto* storage =
        static_cast<mjtNum*>(mjb_expand(b, field.name.c_str(), &size, &elemsize));
    if (!storage || elemsize != sizeof(mjtNum) || size != field.size) {
      return "'" + field.name + "' is not a floating-point model field of " +
             std::to_string(field.size) + " values per simulation";
    }
    bool known = false;
    for (auto& entry : slot->expanded) known |= entry.first == field.name;
    if (!known) {
      // Expanded storage starts as the model's values: keep them for calls without this field.
      const char* first = reinterpret_cast<const char*>(storage);
      slot->expanded.emplace_back(
          field.name, std::vector<char>(first, first + size * sizeof(mjtNum)));
    }
    for (std::size_t i = 0; i < n; ++i) {
      Convert(storage + i * size, in.params + i * width + column, size);
    }
    column += field.size;
  }
  return "";
}

template <typename T>
Inputs<T> Engine::Chunk(const Inputs<T>& in, int start, int count) const {
  const std::size_t width = ParamWidth(in.fields);
  Inputs<T> chunk = in;
  chunk.n = count;
  chunk.state = in.state + static_cast<std::size_t>(start) * nstate_;
  if (in.ctrl) chunk.ctrl = in.ctrl + static_cast<std::size_t>(start) * model_->nu;
  if (in.params) chunk.params = in.params + static_cast<std::size_t>(start) * width;
  return chunk;
}

template <typename T, typename Fn>
std::string Engine::Run(const Inputs<T>& in, Fn run_chunk) {
  if (in.n == 0) return "";
  std::string error;
  // Rows go through the batch a chunk at a time, so that the batch's own memory follows the
  // threads, not the number of simulations of a call.
  Slot* slot = Acquire(std::min(in.n, ChunkSize()), &error);
  if (!slot) return error;
  int total_failed = 0;
  std::string first_failure;
  for (int start = 0; start < in.n; start += slot->capacity) {
    int count = std::min(slot->capacity, in.n - start);
    error = Load(slot, Chunk(in, start, count));
    if (!error.empty()) break;
    const int* ids = count == slot->capacity ? nullptr : slot->ids.data();
    int nfail = run_chunk(slot->batch, ids, start, count);
    if (nfail && first_failure.empty()) {
      const int* status = mjb_status(slot->batch);
      for (int i = 0; i < count; ++i) {
        if (status[i]) {
          first_failure = "sim " + std::to_string(start + i) + ": " + mjb_error(slot->batch, i);
          break;
        }
      }
    }
    total_failed += nfail;
  }
  Release(slot);
  if (!error.empty() || !total_failed) return error;
  if (total_failed > 1) {
    first_failure += " (" + std::to_string(total_failed) + " of " + std::to_string(in.n) +
                     " simulations failed)";
  }
  return first_failure;
}

int Engine::ChunkSize() const {
  int threads = nthread_ > 0 ? nthread_ : static_cast<int>(std::thread::hardware_concurrency());
  return kRowsPerThread * std::max(threads, 1);
}

template <typename T>
std::string Engine::Step(const Inputs<T>& in, int nstep, T* state_out, int32_t* warnings) {
  return Run(in, [&](mjBatch* b, const int* ids, int start, int count) {
    int nfail = mjb_step(b, ids, count, nstep, mjSTAGE_NONE);
    Convert(state_out + static_cast<std::size_t>(start) * nstate_, mjb_state(b),
            static_cast<std::size_t>(count) * nstate_);
    if (warnings) {
      const mjWarningStat* stat = mjb_warning(b);
      int32_t* out = warnings + static_cast<std::size_t>(start) * mjNWARNING;
      for (std::size_t k = 0; k < static_cast<std::size_t>(count) * mjNWARNING; ++k) {
        out[k] = stat[k].number;
      }
    }
    return nfail;
  });
}

template <typename T>
std::string Engine::Rollout(const Inputs<T>& in, int nknot, int nstep, const T* ctrls,
                            T* states_out, T* sensordata_out, int32_t* warnings) {
  return Run(in, [&](mjBatch* b, const int* ids, int start, int count) {
    std::size_t knots = static_cast<std::size_t>(start) * nknot;
    RolloutArgs<T> args{ctrls + knots * model_->nu,
                        states_out + knots * nstate_,
                        sensordata_out + knots * model_->nsensordata,
                        warnings ? warnings + static_cast<std::size_t>(start) * mjNWARNING
                                 : nullptr,
                        nknot,
                        nstep};
    return mjb_apply(b, ids, count, RolloutSim<T>, &args, /*save=*/0);
  });
}

template <typename T>
std::string Engine::Forward(const Inputs<T>& in, const std::vector<DataField>& fields,
                            const std::vector<T*>& outputs) {
  return Run(in, [&](mjBatch* b, const int* ids, int start, int count) {
    std::vector<T*> chunk_outputs;
    for (std::size_t f = 0; f < fields.size(); ++f) {
      chunk_outputs.push_back(outputs[f] + static_cast<std::size_t>(start) * fields[f].size);
    }
    ForwardArgs<T> args{&fields, &chunk_outputs};
    return mjb_apply(b, ids, count, ForwardSim<T>, &args, /*save=*/0);
  });
}

std::string Engine::TransitionFD(const Inputs<double>& in, double eps, bool centered, double* A,
                                 double* B, double* C, double* D) {
  if (model_->opt.integrator == mjINT_RK4) {
    return "mjd_transitionFD does not support the RK4 integrator";
  }
  const std::size_t nx = 2 * model_->nv + model_->na, nu = model_->nu;
  const std::size_t ns = model_->nsensordata;
  return Run(in, [&](mjBatch* b, const int* ids, int start, int count) {
    std::size_t s = start;
    TransitionArgs args{eps,
                        centered ? 1 : 0,
                        A + s * nx * nx,
                        B + s * nx * nu,
                        C ? C + s * ns * nx : nullptr,
                        D ? D + s * ns * nu : nullptr};
    return mjb_apply(b, ids, count, TransitionSim, &args, /*save=*/0);
  });
}

#define MJBATCH_JAX_INSTANTIATE(T)                                                            \
  template std::string Engine::Step<T>(const Inputs<T>&, int, T*, int32_t*);                  \
  template std::string Engine::Rollout<T>(const Inputs<T>&, int, int, const T*, T*, T*,       \
                                          int32_t*);                                          \
  template std::string Engine::Forward<T>(const Inputs<T>&, const std::vector<DataField>&,    \
                                          const std::vector<T*>&);
MJBATCH_JAX_INSTANTIATE(float)
MJBATCH_JAX_INSTANTIATE(double)
#undef MJBATCH_JAX_INSTANTIATE

}  // namespace mjbatch_jax
