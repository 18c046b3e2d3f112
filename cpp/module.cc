// The Python module: the only file here that knows Python. It hands the FFI handlers to JAX as
// capsules, opens and closes engines in the registry, and exposes the C loop of mj_step that the
// benchmarks use as the physical limit.
#include <cstdint>
#include <memory>
#include <string>

#include <mujoco/mujoco.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "c_loop.h"
#include "callbacks.h"
#include "engine.h"
#include "ffi_common.h"
#include "finite_difference.h"
#include "handlers.h"
#include "registry.h"
#include "status.h"
#include "trap.h"

namespace nb = nanobind;

namespace mjbatch_jax {
namespace {

// MuJoCo's Python objects give their C struct's address as _address.
const mjModel* ModelAt(uintptr_t address) { return reinterpret_cast<const mjModel*>(address); }

std::shared_ptr<Engine> LiveEngine(int64_t id) {
  std::shared_ptr<Engine> engine = FindEngine(id);
  if (engine) return engine;
  if (int64_t parent = ForkedFrom(id)) throw nb::value_error(ForkedMessage(id, parent).c_str());
  throw nb::value_error(("simulator " + std::to_string(id) + " is closed").c_str());
}

// The binding of a C loop (StepLoop, StepLoopLockstep): checked rows in, seconds out.
template <typename Loop>
auto LoopBinding(Loop loop) {
  return [loop](uintptr_t model, nb::ndarray<const double, nb::ndim<2>, nb::c_contig> states,
                int nthread, int nstep) {
    const mjModel* m = ModelAt(model);
    if (nthread < 1 || nthread > Engine::kMaxThreads || nstep < 0) {
      throw nb::value_error("need 1 <= nthread <= MAX_THREADS and nstep >= 0");
    }
    if (states.shape(1) != static_cast<std::size_t>(mj_stateSize(m, mjSTATE_INTEGRATION))) {
      throw nb::value_error("states must be (N, nstate) mjSTATE_INTEGRATION rows");
    }
    int nsim = static_cast<int>(states.shape(0));
    const double* rows = states.data();
    nb::gil_scoped_release release;
    return loop(m, rows, nsim, nthread, nstep);
  };
}

}  // namespace

NB_MODULE(_mjbatch_jax, m) {
  m.doc() = "C++ layer of mjbatch_jax: XLA FFI handlers over MuJoCo's batch engine.";
  m.attr("MUJOCO_HEADER_VERSION") = mjVERSION_HEADER;
  m.attr("MAX_THREADS") = Engine::kMaxThreads;
  m.def("mujoco_version", [] { return mj_version(); },
        "The version number of the libmujoco loaded at run time.");

  m.def("handlers", [] {
    nb::dict handlers;
    for (const HandlerEntry& entry : Handlers()) {
      handlers[entry.name] = nb::capsule(reinterpret_cast<void*>(entry.function));
    }
    return handlers;
  }, "FFI handler capsules by target name, for jax.ffi.register_ffi_target.");

  m.def("handler_calls", [] {
    nb::dict counts;
    for (const HandlerEntry& entry : Handlers()) counts[entry.name] = entry.calls->load();
    return counts;
  }, "How many times each handler has run in this process.");

  m.def("finite_difference_totals", [] {
    FiniteDifferenceCounts counts = FiniteDifferenceTotals();
    nb::dict totals;
    totals["columns"] = counts.columns;
    totals["switched"] = counts.switched;
    totals["extra_rows"] = counts.extra_rows;
    totals["unresolved"] = counts.unresolved;
    return totals;
  }, "Totals of the finite differences of this process: columns, those whose first copies "
     "crossed a switch of the dynamics, the extra rows that differenced them, and those that no "
     "smaller step resolved.");

  m.def("open_engine", [](uintptr_t model, int nthread) {
    Status status;
    int64_t id;
    {
      nb::gil_scoped_release release;
      id = OpenEngine(ModelAt(model), nthread, &status);
    }
    if (id < 0) {
      if (status.code() == Status::Code::kResourceExhausted) {
        throw std::runtime_error(status.message());
      }
      throw nb::value_error(status.message().c_str());
    }
    return id;
  }, nb::arg("model_address"), nb::arg("nthread"),
     "Own an engine for a copy of the MjModel at model_address: a new one, or the open engine of "
     "an identical model and thread count. Return its id.");

  m.def("close_engine", [](int64_t id) {
    nb::gil_scoped_release release;
    return CloseEngine(id);
  }, nb::arg("id"),
     "Give up one ownership of an engine; the last frees it once calls in flight finish. Return "
     "whether it was open.");

  m.def("trapped_error", [](const std::string& text) {
    auto raise = [&] { mju_error("%s", text.c_str()); };
    return Trapped(raise);
  }, nb::arg("text"),
     "Raise a MuJoCo error with text on this thread inside the engine's trap and return the "
     "message it trapped: what the tests use to see that such errors never end the process.");

  m.def("remember_default_timer", &RememberDefaultTimer,
        "Take the current mjcb_time as MuJoCo's bindings' own C timer (call it when "
        "mujoco.get_mjcb_time() is None).");
  m.def("python_callback", [] {
    std::string name = PythonCallback();
    return name.empty() ? std::string() : PythonCallbackError(name);
  }, "The error message for the first mjcb_* callback that is a Python function, or ''.");

  m.def("open_engines", [] { return OpenEngineCount(); }, "How many engines are open.");
  m.def("engine_open", [](int64_t id) { return FindEngine(id) != nullptr; }, nb::arg("id"),
        "Whether the engine with this id is open (some Simulator still owns it).");
  m.def("forked_from", &ForkedFrom, nb::arg("id"),
        "The id of the process that forked this one if the engine was open there, else 0.");

  m.def("engine_nthread", [](int64_t id) { return LiveEngine(id)->nthread(); }, nb::arg("id"));
  m.def("engine_max_slots", [](int64_t id) { return LiveEngine(id)->max_slots(); },
        nb::arg("id"), "How many batches concurrent calls of the engine may hold at once.");

  m.def("param_size", [](int64_t id, const std::string& name) {
    std::string error;
    int size = LiveEngine(id)->ParamSize(name, &error);
    if (size < 0) throw nb::value_error(error.c_str());
    return size;
  }, nb::arg("id"), nb::arg("name"),
     "mjtNum values per simulation of an expandable model field; ValueError if it is not one.");

  m.def("data_field_size", [](int64_t id, const std::string& name, bool in_step) {
    std::string error;
    DataField field;
    if (!LiveEngine(id)->FindDataField(name, &field, &error, in_step)) {
      throw nb::value_error(error.c_str());
    }
    return field.size;
  }, nb::arg("id"), nb::arg("name"), nb::arg("in_step") = false,
     "mjtNum values per simulation of an mjData field; ValueError if forward (or, in_step, an "
     "observation as mj_step leaves it) cannot return it.");

  m.def("step_loop", LoopBinding(StepLoop),
        nb::arg("model_address"), nb::arg("states"), nb::arg("nthread"), nb::arg("nstep"),
        "Seconds to simulate each (N, nstate) row for nstep mj_step calls, on nthread threads "
        "that each own one MjData: the benchmarks' limit.");
  m.def("step_loop_lockstep", LoopBinding(StepLoopLockstep),
        nb::arg("model_address"), nb::arg("states"), nb::arg("nthread"), nb::arg("nstep"),
        "As step_loop, but one substep of every simulation in turn, each loaded from and saved "
        "to its row with mj_setState/mj_getState: the limit of a batch stepping one substep per "
        "call.");
}

}  // namespace mjbatch_jax
