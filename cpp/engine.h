// The engine behind the JAX functions: MuJoCo batches (mjbatch.h) of one model, driven as pure
// functions of state rows. A call copies its rows, controls and per-simulation model values in,
// runs the physics on the batch's thread pool, and copies the results out; nothing of one call is
// seen by the next. No Python or JAX types appear here.
#ifndef MJBATCH_JAX_ENGINE_H_
#define MJBATCH_JAX_ENGINE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <mujoco/mjbatch.h>
#include <mujoco/mujoco.h>

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
  std::size_t offset = 0;  // of the field's pointer within mjData
  int size = 0;
};

// Per-simulation inputs of a call, each a row-major array of n rows; T is float or double.
template <typename T>
struct Inputs {
  int n = 0;                       // number of simulations
  const T* state = nullptr;        // n x nstate, mjSTATE_INTEGRATION rows
  const T* ctrl = nullptr;         // n x nu, written into the rows' ctrl; nullptr: keep the rows'
  const T* params = nullptr;       // n x (sum of the fields' sizes), the fields side by side
  const std::vector<ParamField>* fields = nullptr;  // nullptr: the model's values everywhere
};

// Simulations of one model on MuJoCo batches. Thread-safe: concurrent calls each lease a batch of
// their own from a small pool, so no two calls ever share an mjBatch.
class Engine {
 public:
  // Copy m for simulations on nthread threads (<= 0: one per logical CPU). Return nullptr and
  // write the reason into error if MuJoCo cannot batch the model (sleep, for one).
  static std::unique_ptr<Engine> Create(const mjModel* m, int nthread, std::string* error);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const mjModel* model() const { return model_; }
  int nstate() const { return nstate_; }
  int nthread() const { return nthread_; }

  // Number of mjtNum elements per simulation of an expandable model field, or -1 with the reason
  // in error (unknown, an asset, or not mjtNum).
  int ParamSize(std::string_view name, std::string* error) const;

  // The mjtNum mjData field name, or false with the reason in error.
  bool FindDataField(std::string_view name, DataField* field, std::string* error) const;

  // Advance each simulation by nstep calls to mj_step and write its rows into state_out
  // (n x nstate) and the number of warnings of each kind it raised into warnings
  // (n x mjNWARNING, may be nullptr). Return "" or a message naming the first failing simulation,
  // whose row is then its input row.
  template <typename T>
  std::string Step(const Inputs<T>& in, int nstep, T* state_out, int32_t* warnings);

  // Advance each simulation through nknot knots of nstep substeps, knot k with controls
  // ctrls[sim, k] (n x nknot x nu), recording the rows (n x nknot x nstate) and sensordata
  // (n x nknot x nsensordata) after each knot. in.ctrl is unused.
  template <typename T>
  std::string Rollout(const Inputs<T>& in, int nknot, int nstep, const T* ctrls, T* states_out,
                      T* sensordata_out, int32_t* warnings);

  // Run mj_forward on each simulation and copy the fields out, outputs[f] being n x fields[f].size.
  template <typename T>
  std::string Forward(const Inputs<T>& in, const std::vector<DataField>& fields,
                      const std::vector<T*>& outputs);

  // MuJoCo's own mjd_transitionFD on each simulation, on the pool: A (n x nx x nx),
  // B (n x nx x nu), and if C is not nullptr C (n x ns x nx) and D (n x ns x nu).
  std::string TransitionFD(const Inputs<double>& in, double eps, bool centered, double* A,
                           double* B, double* C, double* D);

  // Rows per thread that a batch holds: a call on more simulations goes through in chunks.
  static constexpr int kRowsPerThread = 256;

 private:
  struct Slot;
  Engine(mjModel* model, int nthread);

  // Rows of a batch: kRowsPerThread per thread.
  int ChunkSize() const;

  // The inputs of simulations [start, start + count).
  template <typename T>
  Inputs<T> Chunk(const Inputs<T>& in, int start, int count) const;

  // Lease a batch, and for each chunk of in's simulations load it and call
  // run_chunk(batch, ids or nullptr, start, count), which returns its number of failed
  // simulations. Return "" or the first failure, named by its index in in.
  template <typename T, typename Fn>
  std::string Run(const Inputs<T>& in, Fn run_chunk);

  // A batch of at least n simulations that no other call holds until Release.
  Slot* Acquire(int n, std::string* error);
  void Release(Slot* slot);

  // Copy the inputs of a call into slot's batch and zero its warning counters; return "" or what
  // is wrong with the parameter fields.
  template <typename T>
  std::string Load(Slot* slot, const Inputs<T>& in);

  mjModel* model_;
  int nthread_;
  int nstate_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_ENGINE_H_
