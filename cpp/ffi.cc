#include "ffi.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine.h"
#include "registry.h"
#include "xla/ffi/api/ffi.h"

namespace mjbatch_jax {
namespace {

namespace ffi = xla::ffi;

// Messages of errors that MuJoCo raised start with this, so that Python can tell them from
// others and raise its SimulationError.
constexpr char kSimulationError[] = "mjbatch_jax.SimulationError: ";

std::atomic<int64_t> step_calls{0}, rollout_calls{0}, forward_calls{0}, transition_calls{0};

ffi::Error InvalidArgument(const std::string& message) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument, "mjbatch_jax: " + message);
}

ffi::Error Result(const std::string& error) {
  if (error.empty()) return ffi::Error::Success();
  return ffi::Error(ffi::ErrorCode::kInternal, kSimulationError + error);
}

// "name:size,name:size" as the Python side writes it.
bool ParseFields(std::string_view text, std::vector<ParamField>* fields, std::size_t* width) {
  *width = 0;
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    std::size_t colon = item.rfind(':');
    if (colon == std::string_view::npos) return false;
    ParamField field;
    field.name = std::string(item.substr(0, colon));
    try {
      field.size = std::stoi(std::string(item.substr(colon + 1)));
    } catch (...) {
      return false;
    }
    if (field.size < 0) return false;
    *width += field.size;
    fields->push_back(std::move(field));
  }
  return true;
}

std::vector<std::string_view> Split(std::string_view text) {
  std::vector<std::string_view> parts;
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    parts.push_back(text.substr(0, comma));
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return parts;
}

// Whether buffer holds rows of width elements each.
bool Rows(const ffi::AnyBuffer& buffer, std::size_t width, std::size_t rows) {
  return buffer.element_count() == rows * width;
}

bool Floating(ffi::DataType type) {
  return type == ffi::DataType::F32 || type == ffi::DataType::F64;
}

// The engine and the inputs common to every handler, checked.
struct Common {
  std::shared_ptr<Engine> engine;
  std::vector<ParamField> fields;
  std::size_t n = 0;
  std::size_t width = 0;
};

ffi::Error Prepare(int64_t id, std::string_view field_text, const ffi::AnyBuffer& state,
                   const ffi::AnyBuffer& params, Common* c) {
  c->engine = FindEngine(id);
  if (!c->engine) {
    return InvalidArgument("simulator " + std::to_string(id) +
                           " was closed; make a new Simulator and trace again");
  }
  if (!ParseFields(field_text, &c->fields, &c->width)) {
    return InvalidArgument("malformed parameter fields '" + std::string(field_text) + "'");
  }
  auto dims = state.dimensions();
  std::size_t nstate = c->engine->nstate();
  if (dims.size() < 1 || static_cast<std::size_t>(dims.back()) != nstate) {
    return InvalidArgument("state rows must end in a dimension of nstate = " +
                           std::to_string(nstate));
  }
  c->n = state.element_count() / nstate;
  if (c->n > static_cast<std::size_t>(INT32_MAX)) {
    return InvalidArgument("too many simulations in one call");
  }
  if (!Floating(state.element_type()) || params.element_type() != state.element_type()) {
    return InvalidArgument("state and params must be float32 or float64, both the same");
  }
  if (!Rows(params, c->width, c->n)) {
    return InvalidArgument("params must have " + std::to_string(c->width) +
                           " values per simulation");
  }
  return ffi::Error::Success();
}

template <typename T>
Inputs<T> MakeInputs(const Common& c, const ffi::AnyBuffer& state, const T* ctrl,
                     const ffi::AnyBuffer& params) {
  Inputs<T> in;
  in.n = static_cast<int>(c.n);
  in.state = static_cast<const T*>(state.untyped_data());
  in.ctrl = ctrl;
  in.params = static_cast<const T*>(params.untyped_data());
  in.fields = c.fields.empty() ? nullptr : &c.fields;
  return in;
}

ffi::Error StepImpl(ffi::AnyBuffer state, ffi::AnyBuffer ctrl, ffi::AnyBuffer params,
                    ffi::Result<ffi::AnyBuffer> state_out,
                    ffi::Result<ffi::Buffer<ffi::S32>> warnings, int64_t engine, int64_t nstep,
                    std::string_view fields) {
  step_calls.fetch_add(1, std::memory_order_relaxed);
  Common c;
  if (ffi::Error error = Prepare(engine, fields, state, params, &c); error.failure()) {
    return error;
  }
  if (nstep < 1) return InvalidArgument("nstep must be >= 1");
  if (ctrl.element_type() != state.element_type() || !Rows(ctrl, c.engine->model()->nu, c.n)) {
    return InvalidArgument("ctrl must have nu = " + std::to_string(c.engine->model()->nu) +
                           " values per simulation, of the state's dtype");
  }
  int32_t* warning_data = warnings->typed_data();
  if (state.element_type() == ffi::DataType::F64) {
    auto in = MakeInputs(c, state, static_cast<const double*>(ctrl.untyped_data()), params);
    return Result(c.engine->Step(in, static_cast<int>(nstep),
                                 static_cast<double*>(state_out->untyped_data()), warning_data));
  }
  auto in = MakeInputs(c, state, static_cast<const float*>(ctrl.untyped_data()), params);
  return Result(c.engine->Step(in, static_cast<int>(nstep),
                               static_cast<float*>(state_out->untyped_data()), warning_data));
}

ffi::Error RolloutImpl(ffi::AnyBuffer state, ffi::AnyBuffer ctrls, ffi::AnyBuffer params,
                       ffi::Result<ffi::AnyBuffer> states_out,
                       ffi::Result<ffi::AnyBuffer> sensordata_out,
                       ffi::Result<ffi::Buffer<ffi::S32>> warnings, int64_t engine,
                       int64_t nstep, std::string_view fields) {
  rollout_calls.fetch_add(1, std::memory_order_relaxed);
  Common c;
  if (ffi::Error error = Prepare(engine, fields, state, params, &c); error.failure()) {
    return error;
  }
  if (nstep < 1) return InvalidArgument("nstep must be >= 1");
  const mjModel* m = c.engine->model();
  auto dims = ctrls.dimensions();
  if (dims.size() < 2 || ctrls.element_type() != state.element_type() ||
      dims.back() != m->nu) {
    return InvalidArgument("ctrls must be (..., T, nu = " + std::to_string(m->nu) +
                           ") of the state's dtype");
  }
  std::size_t nknot = dims[dims.size() - 2];
  if (!Rows(ctrls, nknot * m->nu, c.n) || nknot > static_cast<std::size_t>(INT32_MAX)) {
    return InvalidArgument("ctrls must have the state's leading dimensions");
  }
  int32_t* warning_data = warnings->typed_data();
  if (state.element_type() == ffi::DataType::F64) {
    auto in = MakeInputs<double>(c, state, nullptr, params);
    return Result(c.engine->Rollout(
        in, static_cast<int>(nknot), static_cast<int>(nstep),
        static_cast<const double*>(ctrls.untyped_data()),
        static_cast<double*>(states_out->untyped_data()),
        static_cast<double*>(sensordata_out->untyped_data()), warning_data));
  }
  auto in = MakeInputs<float>(c, state, nullptr, params);
  return Result(c.engine->Rollout(
      in, static_cast<int>(nknot), static_cast<int>(nstep),
      static_cast<const float*>(ctrls.untyped_data()),
      static_cast<float*>(states_out->untyped_data()),
      static_cast<float*>(sensordata_out->untyped_data()), warning_data));
}

template <typename T>
ffi::Error RunForward(const Common& c, const ffi::AnyBuffer& state, const ffi::AnyBuffer& params,
                      const std::vector<DataField>& data_fields, ffi::RemainingRets& rets) {
  std::vector<T*> outputs;
  for (std::size_t i = 0; i < data_fields.size(); ++i) {
    auto ret = rets.get<ffi::AnyBuffer>(i);
    if (ret.has_error()) return ret.error();
    ffi::AnyBuffer out = **ret;
    if (out.element_type() != state.element_type() ||
        !Rows(out, data_fields[i].size, c.n)) {
      return InvalidArgument("output '" + data_fields[i].name + "' has the wrong shape or dtype");
    }
    outputs.push_back(static_cast<T*>(out.untyped_data()));
  }
  auto in = MakeInputs<T>(c, state, nullptr, params);
  return Result(c.engine->Forward(in, data_fields, outputs));
}

ffi::Error ForwardImpl(ffi::AnyBuffer state, ffi::AnyBuffer params, ffi::RemainingRets rets,
                       int64_t engine, std::string_view fields, std::string_view outputs) {
  forward_calls.fetch_add(1, std::memory_order_relaxed);
  Common c;
  if (ffi::Error error = Prepare(engine, fields, state, params, &c); error.failure()) {
    return error;
  }
  std::vector<DataField> data_fields;
  for (std::string_view name : Split(outputs)) {
    DataField field;
    std::string error;
    if (!c.engine->FindDataField(name, &field, &error)) return InvalidArgument(error);
    data_fields.push_back(field);
  }
  if (data_fields.size() != rets.size()) {
    return InvalidArgument("forward needs one result per output field");
  }
  if (state.element_type() == ffi::DataType::F64) {
    return RunForward<double>(c, state, params, data_fields, rets);
  }
  return RunForward<float>(c, state, params, data_fields, rets);
}

ffi::Error TransitionImpl(ffi::AnyBuffer state, ffi::AnyBuffer ctrl, ffi::AnyBuffer params,
                          ffi::Result<ffi::Buffer<ffi::F64>> A, ffi::Result<ffi::Buffer<ffi::F64>> B,
                          ffi::Result<ffi::Buffer<ffi::F64>> C, ffi::Result<ffi::Buffer<ffi::F64>> D,
                          int64_t engine, std::string_view fields, double eps, bool centered,
                          bool sensors) {
  transition_calls.fetch_add(1, std::memory_order_relaxed);
  Common c;
  if (ffi::Error error = Prepare(engine, fields, state, params, &c); error.failure()) {
    return error;
  }
  const mjModel* m = c.engine->model();
  if (state.element_type() != ffi::DataType::F64 || ctrl.element_type() != ffi::DataType::F64 ||
      !Rows(ctrl, m->nu, c.n)) {
    return InvalidArgument("the native transition_fd needs float64 (jax_enable_x64) state and "
                           "ctrl of nu = " + std::to_string(m->nu) + " values per simulation");
  }
  std::size_t nx = 2 * m->nv + m->na, nu = m->nu, ns = m->nsensordata;
  if (A->element_count() != c.n * nx * nx || B->element_count() != c.n * nx * nu ||
      (sensors && (C->element_count() != c.n * ns * nx || D->element_count() != c.n * ns * nu))) {
    return InvalidArgument("transition_fd results have the wrong shapes");
  }
  auto in = MakeInputs(c, state, static_cast<const double*>(ctrl.untyped_data()), params);
  return Result(c.engine->TransitionFD(in, eps, centered, A->typed_data(), B->typed_data(),
                                       sensors ? C->typed_data() : nullptr,
                                       sensors ? D->typed_data() : nullptr));
}

}  // namespace

HandlerCalls CountHandlerCalls() {
  return {step_calls.load(), rollout_calls.load(), forward_calls.load(), transition_calls.load()};
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(MjbatchJaxStep, StepImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<int64_t>("engine")
                                  .Attr<int64_t>("nstep")
                                  .Attr<std::string_view>("fields"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MjbatchJaxRollout, RolloutImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<int64_t>("engine")
                                  .Attr<int64_t>("nstep")
                                  .Attr<std::string_view>("fields"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MjbatchJaxForward, ForwardImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .RemainingRets()
                                  .Attr<int64_t>("engine")
                                  .Attr<std::string_view>("fields")
                                  .Attr<std::string_view>("outputs"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MjbatchJaxTransitionFD, TransitionImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Attr<int64_t>("engine")
                                  .Attr<std::string_view>("fields")
                                  .Attr<double>("eps")
                                  .Attr<bool>("centered")
                                  .Attr<bool>("sensors"));

}  // namespace mjbatch_jax
