#include "engine.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include <mujoco/mjbatch.h>
#include <mujoco/mjxmacro.h>
#include <mujoco/mujoco.h>

#include "regime.h"
#include "trap.h"

namespace mjbatch_jax {

struct Engine::Slot {
  mjBatch* batch = nullptr;
  int capacity = 0;
  std::vector<int> ids;  // 0 .. capacity-1, the selection of a call on fewer rows
  // Fields that earlier calls expanded, with the model's values, which a call without them
  // restores: a call must not see the parameters of the one before.
  std::vector<std::pair<std::string, std::vector<char>>> expanded;
  bool busy = false;
  // The batch's derived constants came from mj_setConst on some call's params: such a batch
  // serves only calls that recompute them, so a call without set_const never sees stale ones.
  bool set_const = false;
};

namespace {

int Threads(int nthread) {
  if (nthread > 0) return nthread;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// A new batch, or nullptr with the reason. MuJoCo's errors on this thread (an allocation that
// fails) are trapped like those of its workers.
mjBatch* MakeBatch(const mjModel* m, int nsim, int nthread, Status* status) {
  mjBatchConfig config;
  mjb_defaultConfig(&config);
  config.nthread = nthread;
  char buffer[1000] = "";
  mjBatch* batch = nullptr;
  auto make = [&] { batch = mjb_makeBatch(m, nsim, &config, buffer, sizeof(buffer)); };
  std::string trapped = Trapped(make);
  if (batch) return batch;
  std::string reason = !trapped.empty() ? trapped : buffer;
  if (status) {
    // Sleep and the like are properties of the model; anything else is a lack of resources.
    bool model = reason.find("sleep") != std::string::npos ||
                 reason.find("IPC") != std::string::npos ||
                 reason.find("persistent") != std::string::npos;
    *status = model ? Status::InvalidArgument(reason)
                    : Status::ResourceExhausted("could not make a batch of " +
                                                std::to_string(nsim) + " simulations on " +
                                                std::to_string(nthread) + " threads: " + reason);
  }
  return nullptr;
}

// Copy count values between element types, as a memcpy when they agree.
template <typename To, typename From>
void Convert(To* to, const From* from, std::size_t count) {
  if constexpr (std::is_same_v<To, From>) {
    if (count) std::memcpy(to, from, count * sizeof(To));
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

// mjb_* calls on the calling thread, with MuJoCo's argument errors trapped.
template <typename Fn>
Status Call(Fn fn) {
  std::string error = Trapped(fn);
  if (error.empty()) return Status();
  return Status::InvalidArgument("MuJoCo: " + error);
}

// Fields that mj_forward leaves alone, and the call that computes them after it.
enum class Extra { kNone, kSubtreeVel, kRnePost, kInverse };

Extra ExtraStage(std::string_view name) {
  if (name == "subtree_linvel" || name == "subtree_angmom") return Extra::kSubtreeVel;
  if (name == "cacc" || name == "cfrc_int" || name == "cfrc_ext") return Extra::kRnePost;
  if (name == "qfrc_inverse") return Extra::kInverse;
  return Extra::kNone;
}

template <typename T>
void CopyField(const DataField& field, const mjData* d, T* to) {
  const char* at = reinterpret_cast<const char*>(d) + field.offset;
  const mjtNum* values;
  if (field.inline_array) {
    values = reinterpret_cast<const mjtNum*>(at);
  } else {
    std::memcpy(&values, at, sizeof(values));
  }
  Convert(to, values, field.size);
}

// The calls that some of a set of fields need beyond mj_forward.
struct ExtraStages {
  bool subtree_vel = false, rne_post = false, inverse = false;

  static ExtraStages Of(const std::vector<DataField>& fields) {
    ExtraStages stages;
    for (const DataField& field : fields) {
      Extra extra = ExtraStage(field.name);
      stages.subtree_vel |= extra == Extra::kSubtreeVel;
      stages.rne_post |= extra == Extra::kRnePost;
      stages.inverse |= extra == Extra::kInverse;
    }
    return stages;
  }
};

// Copy fields out of d, field f to where(f): after mj_forward and the extra stages they need if
// forward (else as d stands), and qfrc_inverse after mj_inverse, which reuses mj_forward's qacc
// but rewrites other fields, so it runs last. With a regime, the constraints mj_forward made are
// folded into it. Owns no C++ objects: it runs under mjb_apply, where a MuJoCo error unwinds with
// longjmp.
template <typename Where>
void ObserveFields(const mjModel* m, mjData* d, const std::vector<DataField>& fields, Where where,
                   const ExtraStages& stages, bool forward, uint64_t* regime = nullptr) {
  if (forward) {
    mj_forward(m, d);
    if (regime) *regime = FoldRegime(m, d, *regime);
    if (stages.subtree_vel) mj_subtreeVel(m, d);
    if (stages.rne_post) mj_rnePostConstraint(m, d);
  }
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (ExtraStage(fields[f].name) != Extra::kInverse) CopyField(fields[f], d, where(f));
  }
  if (!stages.inverse) return;
  mj_inverse(m, d);
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (ExtraStage(fields[f].name) == Extra::kInverse) CopyField(fields[f], d, where(f));
  }
}

template <typename T>
struct RolloutArgs {
  const T* ctrls;
  T* states;
  T* sensordata;  // may be nullptr
  int32_t* warnings;
  int nknot;
  int nstep;
  const Observation<T>* observe;  // may be nullptr
  ExtraStages stages;             // of the observed fields
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
    if (a->ctrls) Convert(d->ctrl, a->ctrls + knot * m->nu, m->nu);
    for (int s = 0; s < a->nstep; ++s) mj_step(m, d);
    mj_getState(m, d, row, mjSTATE_INTEGRATION);
    Convert(a->states + knot * nstate, row, nstate);
    if (a->sensordata) {
      Convert(a->sensordata + knot * m->nsensordata, d->sensordata, m->nsensordata);
    }
    if (a->observe) {
      // At the new state: mj_forward reads the row and writes only derived fields, none of
      // which the next mj_step reads (it starts with its own mj_forward), so the trajectory is
      // the same with or without it.
      const auto& fields = *a->observe->fields;
      const auto& outputs = *a->observe->outputs;
      auto where = [&](std::size_t f) { return outputs[f] + knot * fields[f].size; };
      ObserveFields(m, d, fields, where, a->stages, a->observe->new_state);
    }
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
  ExtraStages stages;
};

template <typename T>
void ForwardSim(const mjModel* m, mjData* d, int sim, void* arg) {
  auto* a = static_cast<ForwardArgs<T>*>(arg);
  const std::size_t row = sim;
  auto where = [&](std::size_t f) { return (*a->outputs)[f] + row * (*a->fields)[f].size; };
  ObserveFields(m, d, *a->fields, where, a->stages, /*forward=*/true);
}

struct TransitionArgs {
  double eps;
  int centered;
  double *A, *B, *C, *D;
};

void TransitionSim(const mjModel* m, mjData* d, int sim, void* arg) {
  auto* a = static_cast<TransitionArgs*>(arg);
  std::size_t nx = 2 * m->nv + m->na, nu = m->nu, ns = m->nsensordata;
  std::size_t s = sim;
  mjd_transitionFD(m, d, a->eps, a->centered, a->A + s * nx * nx, a->B + s * nx * nu,
                   a->C ? a->C + s * ns * nx : nullptr, a->D ? a->D + s * ns * nu : nullptr);
}

const std::vector<DataField> kNoFields;

struct StepRowsArgs {
  double* states;
  double* sensordata;
  uint64_t* regimes;
  int nstep;
  const Rows* in;
  double* observed;  // n x in->observe_width, fields side by side
  ExtraStages stages;
};

// mjb_apply function: nstep substeps of one loaded row (none: mj_forward alone), recording the
// row, sensordata, the observed fields at the new state (after mj_forward there) and the regime
// of every substep and of that mj_forward.
void StepRowSim(const mjModel* m, mjData* d, int row, void* arg) {
  auto* a = static_cast<StepRowsArgs*>(arg);
  std::size_t nstate = mj_stateSize(m, mjSTATE_INTEGRATION), ns = m->nsensordata;
  std::size_t r = row;
  uint64_t regime = kRegimeSeed;
  for (int s = 0; s < a->nstep; ++s) {
    mj_step(m, d);
    regime = FoldRegime(m, d, regime);
  }
  mj_getState(m, d, a->states + r * nstate, mjSTATE_INTEGRATION);
  // After the last substep, as rollout records it; with no substep, at the state itself.
  if (a->nstep > 0) Convert(a->sensordata + r * ns, d->sensordata, ns);
  const Rows& in = *a->in;
  if (in.observe || a->nstep == 0) {
    const std::vector<DataField>& fields = in.observe ? *in.observe : kNoFields;
    double* out = a->observed + r * in.observe_width;
    auto where = [&](std::size_t f) { return out + (*in.observe_offsets)[f]; };
    ObserveFields(m, d, fields, where, a->stages, /*forward=*/true, &regime);
  }
  if (a->nstep == 0) Convert(a->sensordata + r * ns, d->sensordata, ns);
  a->regimes[r] = regime;
}

}  // namespace

std::unique_ptr<Engine> Engine::Create(const mjModel* m, int nthread, Status* status) {
  if (nthread < 0 || nthread > kMaxThreads) {
    *status = Status::InvalidArgument("nthread must be in [0, " + std::to_string(kMaxThreads) +
                                      "], got " + std::to_string(nthread));
    return nullptr;
  }
  // A batch of one tells whether MuJoCo can batch the model at all, before any call.
  mjBatch* probe = MakeBatch(m, 1, 1, status);
  if (!probe) return nullptr;
  mjb_deleteBatch(probe);
  mjModel* copy = nullptr;
  auto copy_model = [&] { copy = mj_copyModel(nullptr, m); };
  std::string error = Trapped(copy_model);
  if (!copy) {
    *status = Status::ResourceExhausted("could not copy the model: " + error);
    return nullptr;
  }
  return std::unique_ptr<Engine>(new Engine(copy, nthread));
}

Engine::Engine(mjModel* model, int nthread)
    : model_(model),
      nthread_(nthread),
      nstate_(mj_stateSize(model, mjSTATE_INTEGRATION)) {
  // Concurrent calls (Python threads, shard_map devices) lease a batch each, and each batch has
  // its own pool of threads: bound the batches so that they never hold more than about twice
  // the machine's threads together, and let a call beyond that wait for a free batch.
  int hardware = Threads(0);
  max_slots_ = std::max(2, hardware / Threads(nthread));
}

Engine::~Engine() {
  for (auto& slot : slots_) {
    if (slot->batch) mjb_deleteBatch(slot->batch);
  }
  mj_deleteModel(model_);
}

int Engine::ParamSize(std::string_view name, std::string* error) const {
  std::string field(name);
  {
    std::lock_guard<std::mutex> lock(param_mutex_);
    auto it = param_sizes_.find(field);
    if (it != param_sizes_.end()) {
      if (it->second.first < 0) *error = it->second.second;
      return it->second.first;
    }
  }
  int size = ProbeParamSize(field, error);
  std::lock_guard<std::mutex> lock(param_mutex_);
  param_sizes_[field] = {size, size < 0 ? *error : std::string()};
  return size;
}

int Engine::ProbeParamSize(const std::string& field, std::string* error) const {
  // A throwaway batch of one simulation answers with MuJoCo's own table of expandable fields.
  Status status;
  mjBatch* probe = MakeBatch(model_, 1, 1, &status);
  if (!probe) {
    *error = status.message();
    return -1;
  }
  int size = 0, elemsize = 0;
  void* storage = nullptr;
  auto expand = [&] { storage = mjb_expand(probe, field.c_str(), &size, &elemsize); };
  std::string trapped = Trapped(expand);
  mjb_deleteBatch(probe);
  if (!storage) {
    *error = "'" + field + "' is not a model field that can vary per simulation" +
             (trapped.empty() ? "" : " (" + trapped + ")");
    return -1;
  }
  if (elemsize != sizeof(mjtNum)) {
    // Integer fields are types, ids, addresses and flags: a wrong value reads out of bounds.
    *error = "'" + field + "' is not a floating-point field (integer model fields are "
             "structural and cannot be params)";
    return -1;
  }
  return size;
}

bool Engine::FindDataField(std::string_view name, DataField* field, std::string* error,
                           bool in_step) const {
  // Scratch of mj_step's integrators (Euler's implicit damping, implicit, implicitfast): written
  // inside the step and not kept with the state, so a batch's per-thread MjData would hold
  // another simulation's values.
  if (name == "qH" || name == "qHDiagInv" || name == "qDeriv" || name == "qLU") {
    *error = "'" + std::string(name) + "' is scratch of mj_step's integrators, computed inside the "
             "step and not kept with the state, so it cannot be returned per simulation";
    return false;
  }
  if (in_step && ExtraStage(name) != Extra::kNone) {
    *error = "'" + std::string(name) + "' is not computed by mj_step (mj_forward's callers compute "
             "it after it): observe it with observe_at='new'";
    return false;
  }
  if (name == "energy") {
    if (!(model_->opt.enableflags & mjENBL_ENERGY)) {
      *error = "'energy' is computed only with the energy flag: enable it in the model "
               "(<option><flag energy=\"enable\"/></option>, or model.opt.enableflags |= "
               "mujoco.mjtEnableBit.mjENBL_ENERGY before making the Simulator)";
      return false;
    }
    field->name = "energy";
    field->offset = offsetof(mjData, energy);
    field->size = 2;
    field->inline_array = true;
    return true;
  }
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

std::size_t Engine::ChunkSize() const {
  return static_cast<std::size_t>(kRowsPerThread) * Threads(nthread_);
}

Engine::Slot* Engine::Acquire(std::size_t n, bool set_const, Status* status) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    *status = Status::InvalidArgument("too many rows for one batch");
    return nullptr;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  Slot* chosen = nullptr;
  for (;;) {
    for (auto& slot : slots_) {
      if (slot->busy || slot->set_const != set_const) continue;
      if (!chosen || (chosen->capacity < static_cast<int>(n) &&
                      slot->capacity > chosen->capacity)) {
        chosen = slot.get();
      }
      if (chosen->capacity >= static_cast<int>(n)) break;
    }
    if (chosen) break;
    if (static_cast<int>(slots_.size()) < max_slots_) {
      slots_.push_back(std::make_unique<Slot>());
      chosen = slots_.back().get();
      chosen->set_const = set_const;
      break;
    }
    // Every batch is busy or of the other kind: an idle one of the other kind is remade.
    for (auto& slot : slots_) {
      if (!slot->busy) {
        if (slot->batch) mjb_deleteBatch(slot->batch);
        slot->batch = nullptr;
        slot->capacity = 0;
        slot->expanded.clear();
        slot->set_const = set_const;
        chosen = slot.get();
        break;
      }
    }
    if (chosen) break;
    slot_freed_.wait(lock);
  }
  chosen->busy = true;
  lock.unlock();
  if (chosen->capacity < static_cast<int>(n)) {
    // Grown to fit the call; memory follows the rows of the largest chunk, not a fixed N.
    if (chosen->batch) mjb_deleteBatch(chosen->batch);
    chosen->expanded.clear();
    int rows = static_cast<int>(n);
    chosen->batch = MakeBatch(model_, rows, std::min(Threads(nthread_), rows), status);
    chosen->capacity = chosen->batch ? rows : 0;
    chosen->ids.resize(chosen->capacity);
    std::iota(chosen->ids.begin(), chosen->ids.end(), 0);
    if (!chosen->batch) {
      Release(chosen);
      return nullptr;
    }
  }
  return chosen;
}

void Engine::Release(Slot* slot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    slot->busy = false;
  }
  slot_freed_.notify_one();
}

// Holds a leased slot until the scope ends, whatever way it ends.
class Engine::Lease {
 public:
  Lease(Engine* engine, Slot* slot) : engine_(engine), slot_(slot) {}
  ~Lease() {
    if (slot_) engine_->Release(slot_);
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

 private:
  Engine* engine_;
  Slot* slot_;
};

template <typename T>
Status Engine::Load(Slot* slot, const Inputs<T>& in, std::size_t start, int rows_per_sim) {
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

  const bool has_fields = in.fields && !in.fields->empty();
  // Fields of earlier calls that this one does not give go back to the model's values.
  for (auto& [name, initial] : slot->expanded) {
    bool given = false;
    if (has_fields) {
      for (const ParamField& field : *in.fields) given |= field.name == name;
    }
    if (given) continue;
    char* storage = nullptr;
    Status status = Call([&] {
      storage = static_cast<char*>(mjb_expand(b, name.c_str(), nullptr, nullptr));
    });
    if (!status.ok() || !storage) return Status::InvalidArgument("could not restore " + name);
    for (std::size_t i = 0; i < n; ++i) {
      std::memcpy(storage + i * initial.size(), initial.data(), initial.size());
    }
  }
  if (!has_fields) return in.set_const ? SetConst(slot, in.n, start, rows_per_sim) : Status();
  const std::size_t width = ParamWidth(in.fields);
  std::size_t column = 0;
  for (const ParamField& field : *in.fields) {
    int size = 0, elemsize = 0;
    mjtNum* storage = nullptr;
    Status status = Call([&] {
      storage = static_cast<mjtNum*>(mjb_expand(b, field.name.c_str(), &size, &elemsize));
    });
    if (!status.ok() || !storage || elemsize != sizeof(mjtNum) || size != field.size) {
      return Status::InvalidArgument("'" + field.name + "' is not a floating-point model field "
                                     "of " + std::to_string(field.size) +
                                     " values per simulation");
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
  return in.set_const ? SetConst(slot, in.n, start, rows_per_sim) : Status();
}

Status Engine::SetConst(Slot* slot, std::size_t n, std::size_t start, int rows_per_sim) {
  const int count = static_cast<int>(n);
  const int* ids = count == slot->capacity ? nullptr : slot->ids.data();
  int nfail = 0;
  Status status = Call([&] { nfail = mjb_setConst(slot->batch, ids, count); });
  if (!status.ok()) return status;
  if (nfail) return Failure(slot, start, count, nfail, rows_per_sim);
  return Status();
}

Status Engine::Failure(Slot* slot, std::size_t start, int count, int nfail, int rows_per_sim) {
  const int* status = mjb_status(slot->batch);
  for (int i = 0; i < count; ++i) {
    if (!status[i]) continue;
    std::string message = "sim " + std::to_string(start + i / rows_per_sim) + ": " +
                          mjb_error(slot->batch, i);
    if (rows_per_sim > 1 && i % rows_per_sim) message += " (in a perturbed copy)";
    if (nfail > 1) message += " (" + std::to_string(nfail) + " rows of the call failed)";
    return Status::Simulation(message);
  }
  return Status::Simulation("a simulation failed");
}

template <typename T, typename Fn>
Status Engine::Run(const Inputs<T>& in, Fn run_chunk) {
  if (in.n == 0) return Status();
  // Rows go through the batch a chunk at a time, so that the batch's own memory follows the
  // threads, not the number of simulations of a call.
  Status status;
  Slot* slot = Acquire(std::min(in.n, ChunkSize()), in.set_const, &status);
  if (!slot) return status;
  Lease lease(this, slot);
  const std::size_t width = ParamWidth(in.fields);
  for (std::size_t start = 0; start < in.n; start += slot->capacity) {
    std::size_t count = std::min<std::size_t>(slot->capacity, in.n - start);
    Inputs<T> chunk = in;
    chunk.n = count;
    chunk.state = in.state + start * nstate_;
    if (in.ctrl) chunk.ctrl = in.ctrl + start * model_->nu;
    if (in.params) chunk.params = in.params + start * width;
    status = Load(slot, chunk, start);
    if (!status.ok()) return status;
    status = run_chunk(slot, start, static_cast<int>(count));
    if (!status.ok()) return status;
  }
  return Status();
}

void Engine::Failures::Record(const mjBatch* batch, std::size_t start, int count,
                              int32_t* errors) {
  const int* status = mjb_status(batch);
  for (int i = 0; i < count; ++i) {
    if (errors) errors[start + i] = status[i] ? 1 : 0;
    if (!status[i]) continue;
    if (ids.empty()) first = mjb_error(batch, i);
    ids.push_back(start + i);
  }
}

Status Engine::Failures::ToStatus() const {
  if (ids.empty()) return Status();
  std::string message = "sim " + std::to_string(ids[0]) + ": " + first;
  if (ids.size() > 1) {
    // Runs of consecutive ids as ranges, so that the message stays short when many failed.
    message += " (" + std::to_string(ids.size()) + " simulations failed: ";
    for (std::size_t i = 0; i < ids.size();) {
      std::size_t j = i;
      while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
      if (i) message += ", ";
      message += std::to_string(ids[i]);
      if (j > i) message += "-" + std::to_string(ids[j]);
      i = j + 1;
    }
    message += ")";
  }
  return Status::Simulation(message);
}

template <typename T>
Status Engine::Step(const Inputs<T>& in, int nstep, T* state_out, int32_t* warnings,
                    int32_t* errors) {
  if (nstep < 1) return Status::InvalidArgument("nstep must be >= 1");
  Failures failures;
  Status status = Run(in, [&](Slot* slot, std::size_t start, int count) {
    mjBatch* b = slot->batch;
    const int* ids = count == slot->capacity ? nullptr : slot->ids.data();
    int nfail = 0;
    Status call = Call([&] { nfail = mjb_step(b, ids, count, nstep, mjSTAGE_NONE); });
    if (!call.ok()) return call;
    // Rows of failed simulations are their input rows again; the others' results stand.
    Convert(state_out + start * nstate_, mjb_state(b), static_cast<std::size_t>(count) * nstate_);
    if (warnings) {
      const mjWarningStat* stat = mjb_warning(b);
      int32_t* out = warnings + start * mjNWARNING;
      for (std::size_t k = 0; k < static_cast<std::size_t>(count) * mjNWARNING; ++k) {
        out[k] = stat[k].number;
      }
    }
    if (nfail || errors) failures.Record(b, start, count, errors);
    return Status();
  });
  if (!status.ok()) return status;
  return errors ? Status() : failures.ToStatus();
}

template <typename T>
Status Engine::Rollout(const Inputs<T>& in, int nknot, int nstep, const T* ctrls,
                       T* states_out, T* sensordata_out, int32_t* warnings,
                       const Observation<T>* observe, int32_t* errors) {
  if (nstep < 1 || nknot < 0) return Status::InvalidArgument("need nstep >= 1 and nknot >= 0");
  ExtraStages stages;
  if (observe) {
    if (observe->fields->size() != observe->outputs->size()) {
      return Status::InvalidArgument("observe needs one output per field");
    }
    for (const DataField& field : *observe->fields) {
      if (!observe->new_state && ExtraStage(field.name) != Extra::kNone) {
        return Status::InvalidArgument("'" + field.name + "' is not computed by mj_step");
      }
    }
    stages = ExtraStages::Of(*observe->fields);
  }
  Failures failures;
  std::vector<T*> chunk_outputs;
  Observation<T> chunk_observe;
  Status status = Run(in, [&](Slot* slot, std::size_t start, int count) {
    const std::size_t knots = start * nknot;
    if (observe) {
      chunk_outputs.clear();
      for (std::size_t f = 0; f < observe->fields->size(); ++f) {
        chunk_outputs.push_back((*observe->outputs)[f] + knots * (*observe->fields)[f].size);
      }
      chunk_observe = {observe->fields, &chunk_outputs, observe->new_state};
    }
    RolloutArgs<T> args{ctrls + knots * model_->nu,
                        states_out + knots * nstate_,
                        sensordata_out ? sensordata_out + knots * model_->nsensordata : nullptr,
                        warnings ? warnings + start * mjNWARNING : nullptr,
                        nknot,
                        nstep,
                        observe ? &chunk_observe : nullptr,
                        stages};
    const int* ids = count == slot->capacity ? nullptr : slot->ids.data();
    int nfail = 0;
    Status call = Call([&] {
      nfail = mjb_apply(slot->batch, ids, count, RolloutSim<T>, &args, /*save=*/0);
    });
    if (!call.ok()) return call;
    if (nfail) {
      // A failed simulation's knots are its input row, as step gives a failed one back, and its
      // records zeros: what the failed run left there is not a result.
      const int* failed = mjb_status(slot->batch);
      const std::size_t ns = model_->nsensordata;
      for (int i = 0; i < count; ++i) {
        if (!failed[i]) continue;
        const std::size_t sim = start + i;
        for (int k = 0; k < nknot; ++k) {
          std::memcpy(states_out + (sim * nknot + k) * nstate_, in.state + sim * nstate_,
                      nstate_ * sizeof(T));
        }
        if (sensordata_out) std::fill_n(sensordata_out + sim * nknot * ns, nknot * ns, T(0));
        if (observe) {
          for (std::size_t f = 0; f < observe->fields->size(); ++f) {
            const std::size_t size = (*observe->fields)[f].size;
            std::fill_n((*observe->outputs)[f] + sim * nknot * size, nknot * size, T(0));
          }
        }
      }
    }
    if (nfail || errors) failures.Record(slot->batch, start, count, errors);
    return Status();
  });
  if (!status.ok()) return status;
  return errors ? Status() : failures.ToStatus();
}

template <typename T>
Status Engine::Forward(const Inputs<T>& in, const std::vector<DataField>& fields,
                       const std::vector<T*>& outputs) {
  if (fields.size() != outputs.size()) {
    return Status::InvalidArgument("forward needs one output per field");
  }
  const ExtraStages stages = ExtraStages::Of(fields);
  Failures failures;
  Status status = Run(in, [&](Slot* slot, std::size_t start, int count) {
    std::vector<T*> chunk_outputs;
    for (std::size_t f = 0; f < fields.size(); ++f) {
      chunk_outputs.push_back(outputs[f] + start * fields[f].size);
    }
    ForwardArgs<T> args{&fields, &chunk_outputs, stages};
    const int* ids = count == slot->capacity ? nullptr : slot->ids.data();
    int nfail = 0;
    Status call = Call([&] {
      nfail = mjb_apply(slot->batch, ids, count, ForwardSim<T>, &args, /*save=*/0);
    });
    if (!call.ok()) return call;
    if (nfail) failures.Record(slot->batch, start, count, nullptr);
    return Status();
  });
  return status.ok() ? failures.ToStatus() : status;
}

template <typename T>
Status Engine::TransitionFD(const Inputs<T>& in, double eps, bool centered, T* A, T* B, T* C,
                            T* D) {
  if (model_->opt.integrator == mjINT_RK4) {
    return Status::InvalidArgument("mjd_transitionFD does not support the RK4 integrator");
  }
  if (!(eps > 0) || !std::isfinite(eps)) {
    return Status::InvalidArgument("eps must be a finite number > 0");
  }
  const std::size_t nx = 2 * model_->nv + model_->na, nu = model_->nu;
  const std::size_t ns = model_->nsensordata;
  Failures failures;
  std::vector<double> a, b, c, d;
  Status status = Run(in, [&](Slot* slot, std::size_t start, int count) {
    const std::size_t n = count;
    // MuJoCo writes float64; results are rounded to T only at the end.
    a.resize(n * nx * nx);
    b.resize(n * nx * nu);
    if (C) {
      c.resize(n * ns * nx);
      d.resize(n * ns * nu);
    }
    TransitionArgs args{eps, centered ? 1 : 0, a.data(), b.data(), C ? c.data() : nullptr,
                        C ? d.data() : nullptr};
    const int* ids = count == slot->capacity ? nullptr : slot->ids.data();
    int nfail = 0;
    Status call = Call([&] {
      nfail = mjb_apply(slot->batch, ids, count, TransitionSim, &args, /*save=*/0);
    });
    if (!call.ok()) return call;
    Convert(A + start * nx * nx, a.data(), a.size());
    Convert(B + start * nx * nu, b.data(), b.size());
    if (C) {
      Convert(C + start * ns * nx, c.data(), c.size());
      Convert(D + start * ns * nu, d.data(), d.size());
    }
    if (nfail) failures.Record(slot->batch, start, count, nullptr);
    return Status();
  });
  return status.ok() ? failures.ToStatus() : status;
}

Status Engine::StepRows(const Rows& in, int nstep, double* states, double* sensordata,
                        uint64_t* regimes, double* observed) {
  if (nstep < 0) return Status::InvalidArgument("nstep must be >= 0");
  if (in.observe && (!observed || !in.observe_offsets)) {
    return Status::InvalidArgument("observed fields need their output and offsets");
  }
  const ExtraStages stages = in.observe ? ExtraStages::Of(*in.observe) : ExtraStages();
  if (in.n == 0) return Status();
  const std::size_t ns = model_->nsensordata, width = ParamWidth(in.fields);
  Status status;
  Slot* slot = Acquire(std::min(in.n, ChunkSize()), in.set_const, &status);
  if (!slot) return status;
  Lease lease(this, slot);
  for (std::size_t start = 0; start < in.n; start += slot->capacity) {
    const int count = static_cast<int>(std::min<std::size_t>(slot->capacity, in.n - start));
    Inputs<double> chunk;
    chunk.n = count;
    chunk.state = in.state + start * nstate_;
    chunk.params = width ? in.params + start * width : nullptr;
    chunk.fields = in.fields;
    status = Load(slot, chunk);  // the constants below, so that a failure names its row
    if (!status.ok()) return status;
    const int* ids = count == slot->capacity ? nullptr : slot->ids.data();
    int nfail = 0;
    if (in.set_const) {
      status = Call([&] { nfail = mjb_setConst(slot->batch, ids, count); });
      if (!status.ok()) return status;
      if (nfail) return RowsFailure(slot, in, start, count);
    }
    StepRowsArgs args{states + start * nstate_, sensordata + start * ns, regimes + start, nstep,
                      &in, observed ? observed + start * in.observe_width : nullptr, stages};
    status = Call([&] {
      nfail = mjb_apply(slot->batch, ids, count, StepRowSim, &args, /*save=*/0);
    });
    if (!status.ok()) return status;
    if (nfail) return RowsFailure(slot, in, start, count);
  }
  return Status();
}

Status Engine::RowsFailure(Slot* slot, const Rows& in, std::size_t start, int count) {
  const int* failed = mjb_status(slot->batch);
  for (int i = 0; i < count; ++i) {
    if (!failed[i]) continue;
    const std::size_t row = start + i;
    std::string message = "sim " + std::to_string(in.sim ? in.sim[row] : row) + ": " +
                          mjb_error(slot->batch, i);
    if (in.perturbed && in.perturbed[row]) message += " (in a perturbed copy)";
    return Status::Simulation(message);
  }
  return Status::Simulation("a simulation failed");
}

#define MJBATCH_JAX_INSTANTIATE(T)                                                            \
  template Status Engine::Step<T>(const Inputs<T>&, int, T*, int32_t*, int32_t*);             \
  template Status Engine::Rollout<T>(const Inputs<T>&, int, int, const T*, T*, T*, int32_t*,  \
                                     const Observation<T>*, int32_t*);                        \
  template Status Engine::Forward<T>(const Inputs<T>&, const std::vector<DataField>&,         \
                                     const std::vector<T*>&);                                 \
  template Status Engine::TransitionFD<T>(const Inputs<T>&, double, bool, T*, T*, T*, T*);
MJBATCH_JAX_INSTANTIATE(float)
MJBATCH_JAX_INSTANTIATE(double)
#undef MJBATCH_JAX_INSTANTIATE

}  // namespace mjbatch_jax
