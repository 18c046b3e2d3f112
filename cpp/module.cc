// The Python module: the only file here that knows Python. It hands the FFI handlers to JAX as
// capsules, makes and removes engines in the registry, and exposes the C loop of mj_step that the
// benchmarks use as the physical limit.
#include <cstdint>
#include <memory>
#include <string>

#include <mujoco/mujoco.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "c_loop.h"
#include "engine.h"
#include "ffi.h"
#include "registry.h"

namespace nb = nanobind;

namespace mjbatch_jax {
namespace {

// MuJoCo's Python objects give their C struct's address as _address.
const mjModel* ModelAt(uintptr_t address) { return reinterpret_cast<const mjModel*>(address); }

std::shared_ptr<Engine> OpenEngine(int64_t id) {
  std::shared_ptr<Engine> engine = FindEngine(id);
  if (!engine) throw nb::value_error(("simulator " + std::to_string(id) + " is closed").c_str());
  return engine;
}

template <typename Fn>
nb::capsule Capsule(Fn* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

NB_MODULE(_mjbatch_jax, m) {
  m.doc() = "C++ layer of mjbatch_jax: XLA FFI handlers over MuJoCo's batch engine.";
  m.attr("MUJOCO_HEADER_VERSION") = mjVERSION_HEADER;
  m.def("mujoco_version", [] { return mj_version(); },
        "The version number of the libmujoco loaded at run time.");

  m.def("handlers", [] {
    nb::dict handlers;
    handlers["mjbatch_jax_step"] = Capsule(MjbatchJaxStep);
    handlers["mjbatch_jax_rollout"] = Capsule(MjbatchJaxRollout);
    handlers["mjbatch_jax_forward"] = Capsule(MjbatchJaxForward);
    handlers["mjbatch_jax_transition_fd"] = Capsule(MjbatchJaxTransitionFD);
    return handlers;
  }, "FFI handler capsules by target name, for jax.ffi.register_ffi_target.");

  m.def("handler_calls", [] {
    HandlerCalls calls = CountHandlerCalls();
    nb::dict counts;
    counts["mjbatch_jax_step"] = calls.step;
    counts["mjbatch_jax_rollout"] = calls.rollout;
    counts["mjbatch_jax_forward"] = calls.forward;
    counts["mjbatch_jax_transition_fd"] = calls.transition_fd;
    return counts;
  }, "How many times each handler has run in this process.");

  m.def("make_engine", [](uintptr_t model, int nthread) {
    std::string error;
    std::unique_ptr<mjbatch_jax::Engine> engine;
    {
      nb::gil_scoped_release release;
      engine = mjbatch_jax::Engine::Create(ModelAt(model), nthread, &error);
    }
    if (!engine) throw nb::value_error(error.c_str());
    return RegisterEngine(std::move(engine));
  }, nb::arg("model_address"), nb::arg("nthread"),
     "Copy the MjModel at model_address into a new engine; return its id.");

  m.def("close_engine", [](int64_t id) {
    nb::gil_scoped_release release;
    return RemoveEngine(id);
  }, nb::arg("id"), "Remove an engine; calls in flight finish first. Return whether it existed.");

  m.def("engine_nthread", [](int64_t id) { return OpenEngine(id)->nthread(); }, nb::arg("id"));

  m.def("param_size", [](int64_t id, const std::string& name) {
    std::string error;
    int size = OpenEngine(id)->ParamSize(name, &error);
    if (size < 0) throw nb::value_error(error.c_str());
    return size;
  }, nb::arg("id"), nb::arg("name"),
     "mjtNum values per simulation of an expandable model field; ValueError if it is not one.");

  m.def("data_field_size", [](int64_t id, const std::string& name) {
    std::string error;
    DataField field;
    if (!OpenEngine(id)->FindDataField(name, &field, &error)) throw nb::value_error(error.c_str());
    return field.size;
  }, nb::arg("id"), nb::arg("name"),
     "mjtNum values per simulation of an mjData field; ValueError if forward cannot return it.");

  m.def("step_loop",
        [](uintptr_t model, nb::ndarray<const double, nb::ndim<2>, nb::c_contig> states,
           int nthread, int nstep) {
    const mjModel* m = ModelAt(model);
    if (nthread < 1 || nstep < 0) throw nb::value_error("need nthread >= 1 and nstep >= 0");
    if (states.shape(1) != static_cast<std::size_t>(mj_stateSize(m, mjSTATE_INTEGRATION))) {
      throw nb::value_error("states must be (N, nstate) mjSTATE_INTEGRATION rows");
    }
    int nsim = static_cast<int>(states.shape(0));
    const double* rows = states.data();
    nb::gil_scoped_release release;
    return StepLoop(m, rows, nsim, nthread, nstep);
  }, nb::arg("model_address"), nb::arg("states"), nb::arg("nthread"), nb::arg("nstep"),
     "Seconds to simulate each (N, nstate) row for nstep mj_step calls, on nthread threads that "
     "each own one MjData: the benchmarks' limit.");
}

}  // namespace mjbatch_jax
