// The engine behind the JAX functions: MuJoCo batches (mjbatch.h) of one model, driven as pure
// functions of state rows. A call copies its rows, controls and per-simulation model values in,
// runs the physics on a batch's thread pool, and copies the results out; nothing of one call is
// seen by the next. No Python or JAX types appear here.
#ifndef MJBATCH_JAX_ENGINE_H_
#define MJBATCH_JAX_ENGINE_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <mujoco/mjbatch.h>
#include <mujoco/mujoco.h>

#include "status.h"

namespace mjbatch_jax {

// A model field given per-simulation values by a call: its name as mjb_expand takes it ("body_mass",
// "opt.gravity") and its number of mjtNum elements per simulation.
struct ParamField {
  std::string name;
  int size = 0;
};

// An mjtNum field of mjData that Forward copies out, and its number of elements.
struct DataField {
  std::string name;
  std::size_t offset = 0;  // of the field's pointer within mjData (of the array itself if inline)
  int size = 0;
  bool inline_array = false;  // an array member of mjData (energy), not a pointer into its arena
};

// Per-simulation inputs of a call, each a row-major array of n rows; T is float or double.
template <typename T>
struct Inputs {
  std::size_t n = 0;               // number of simulations
  const T* state = nullptr;        // n x nstate, mjSTATE_INTEGRATION rows
  const T* ctrl = nullptr;         // n x nu, written into the rows' ctrl; nullptr: keep the rows'
  const T* params = nullptr;       // n x (sum of the fields' sizes), the fields side by side
  const std::vector<ParamField>* fields = nullptr;  // nullptr or empty: the model's values
  // Recompute each simulation's derived constants (mj_setConst) from its params before running,
  // as compiling a model with those values would.
  bool set_const = false;
};

// mjData fields that Rollout copies out after each knot, outputs[f] being
// n x nknot x fields[f].size: at the new state (mj_forward after the knot's last substep, and
// the extra calls some fields need, see Forward) or as mj_step left them (computed at the state
// before its last substep, MuJoCo's in-step values, at no extra cost).
template <typename T>
struct Observation {
  const std::vector<DataField>* fields = nullptr;
  const std::vector<T*>* outputs = nullptr;
  bool new_state = true;
};

// Float64 rows, each with its own params, for StepRows: the perturbed copies of finite
// differences.
struct Rows {
  std::size_t n = 0;
  const double* state = nullptr;   // n x nstate, with the controls written in
  const double* params = nullptr;  // n x (sum of the fields' sizes)
  const std::vector<ParamField>* fields = nullptr;
  bool set_const = false;
  // For error messages: the simulation of the call that row i copies (nullptr: i itself), and
  // whether it is a perturbed copy (nullptr: none is).
  const std::size_t* sim = nullptr;
  const bool* perturbed = nullptr;
  // mjData fields to record at the new state (after mj_forward there, as rollout observes with
  // observe_at="new"), side by side in a row of observe_width values, field f at
  // observe_offsets[f]; nullptr: none.
  const std::vector<DataField>* observe = nullptr;
  const std::vector<std::size_t>* observe_offsets = nullptr;
  std::size_t observe_width = 0;
};

// Simulations of one model on MuJoCo batches. Thread-safe: concurrent calls each lease a batch of
// their own from a small pool, so no two calls ever share an mjBatch; the pool has at most
// max_slots() batches, so concurrent calls use at most max_slots() * nthread() threads, and a call
// that finds every batch busy waits for one.
class Engine {
 public:
  // The most threads a batch may have: a request above this is a mistake, not a wish.
  static constexpr int kMaxThreads = 1024;
  // Rows per thread that a batch holds: a call on more simulations goes through in chunks.
  static constexpr int kRowsPerThread = 256;

  // Copy m for simulations on nthread threads (<= 0: one per logical CPU), or return nullptr
  // with the reason in status (sleep, for one, cannot be batched purely).
  static std::unique_ptr<Engine> Create(const mjModel* m, int nthread, Status* status);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const mjModel* model() const { return model_; }
  int nstate() const { return nstate_; }
  int nthread() const { return nthread_; }
  int max_slots() const { return max_slots_; }
  // Rows of a batch: kRowsPerThread per thread; a call on more goes through in chunks.
  std::size_t ChunkSize() const;

  // Number of mjtNum elements per simulation of an expandable model field, or -1 with the reason
  // in error (unknown, an asset, a structural field, or not mjtNum).
  int ParamSize(std::string_view name, std::string* error) const;

  // The mjtNum mjData field that Forward can return, or false with the reason in error. in_step:
  // the field is to be read as mj_step leaves it (observe_at="step"), so fields that only the
  // calls after mj_forward compute are refused as well.
  bool FindDataField(std::string_view name, DataField* field, std::string* error,
                     bool in_step = false) const;

  // Advance each simulation by nstep calls to mj_step and write its rows into state_out
  // (n x nstate) and the number of warnings of each kind it raised into warnings
  // (n x mjNWARNING, may be nullptr). A simulation that fails gets its input row back. With
  // errors (n, may be nullptr), each simulation's error code goes there (0: ran, 1: MuJoCo
  // raised an error in it) and such errors are not the call's: the others' results stand.
  // Without, the call fails with a message naming the first failed simulation and listing all.
  template <typename T>
  Status Step(const Inputs<T>& in, int nstep, T* state_out, int32_t* warnings,
              int32_t* errors = nullptr);

  // Advance each simulation through nknot knots of nstep substeps, knot k with controls
  // ctrls[sim, k] (n x nknot x nu), recording the rows (n x nknot x nstate), sensordata
  // (n x nknot x nsensordata, unless nullptr) and the observed fields after each knot. in.ctrl
  // is unused. A simulation that fails gets its input row in every knot, and zeros for its
  // sensordata and observations; errors as for Step.
  template <typename T>
  Status Rollout(const Inputs<T>& in, int nknot, int nstep, const T* ctrls, T* states_out,
                 T* sensordata_out, int32_t* warnings, const Observation<T>* observe = nullptr,
                 int32_t* errors = nullptr);

  // Run mj_forward on each simulation (and the extra stages that some fields need) and copy the
  // fields out, outputs[f] being n x fields[f].size.
  template <typename T>
  Status Forward(const Inputs<T>& in, const std::vector<DataField>& fields,
                 const std::vector<T*>& outputs);

  // MuJoCo's own mjd_transitionFD on each simulation, on the pool, in float64 whatever T is:
  // A (n x nx x nx), B (n x nx x nu), and if C is not nullptr C (n x ns x nx) and D (n x ns x nu).
  template <typename T>
  Status TransitionFD(const Inputs<T>& in, double eps, bool centered, T* A, T* B, T* C, T* D);

  // Advance each row by nstep substeps on the pool (0: run mj_forward on it alone) and write
  // its row (n x nstate), sensordata (n x nsensordata, after the last substep as rollout
  // records it, or mj_forward's), regime (n, see regime.h: a hash of the switches of the
  // dynamics it met at every substep and at the observing mj_forward) and the observed fields
  // (n x in.observe_width, may be nullptr without in.observe) after them.
  Status StepRows(const Rows& in, int nstep, double* states, double* sensordata,
                  uint64_t* regimes, double* observed = nullptr);

 private:
  struct Slot;
  class Lease;
  Engine(mjModel* model, int nthread);

  int ProbeParamSize(const std::string& field, std::string* error) const;

  // Lease a batch of min(rows, ChunkSize()) rows, and for each chunk of in's simulations load it
  // and call run_chunk(lease, start, count), which returns a Status. Stop at the first error.
  template <typename T, typename Fn>
  Status Run(const Inputs<T>& in, Fn run_chunk);

  // A batch of at least n rows that no other call holds until released, waiting for one when
  // max_slots() are busy.
  Slot* Acquire(std::size_t n, bool set_const, Status* status);
  void Release(Slot* slot);

  // Copy the inputs of a call into slot's batch, zero its warning counters, and recompute the
  // derived constants if in.set_const. start and rows_per_sim name a failing simulation.
  template <typename T>
  Status Load(Slot* slot, const Inputs<T>& in, std::size_t start = 0, int rows_per_sim = 1);

  // mj_setConst on the first n simulations of slot's batch, from their loaded params.
  Status SetConst(Slot* slot, std::size_t n, std::size_t start, int rows_per_sim);

  // The first failed row of slot's last call on rows start .. start + count - 1 of a StepRows
  // call, named by in.sim.
  Status RowsFailure(Slot* slot, const Rows& in, std::size_t start, int count);

  // The first failed simulation of slot's last call on count rows, named as "sim <start + i>".
  Status Failure(Slot* slot, std::size_t start, int count, int nfail, int rows_per_sim = 1);

  // Per-simulation failures of a call that runs each simulation as one row (Step, Rollout):
  // the rows of slot's last call on count rows that failed are simulations start + i.
  struct Failures {
    std::vector<std::size_t> ids;  // every failed simulation of the call, in order
    std::string first;             // the first one's message
    // Record the failed rows of the chunk; write 0/1 codes to errors + start if not nullptr.
    void Record(const mjBatch* batch, std::size_t start, int count, int32_t* errors);
    // OK, or a SimulationError naming the first failed simulation and listing all of them.
    Status ToStatus() const;
  };

  mjModel* model_;
  int nthread_;
  int nstate_;
  int max_slots_;
  std::mutex mutex_;
  std::condition_variable slot_freed_;
  std::vector<std::unique_ptr<Slot>> slots_;
  // ParamSize's answers by field name (size, or -1 and the reason): every call checks its fields.
  mutable std::mutex param_mutex_;
  mutable std::unordered_map<std::string, std::pair<int, std::string>> param_sizes_;
};

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_ENGINE_H_
