#include "ffi_common.h"

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "callbacks.h"
#include "registry.h"

namespace mjbatch_jax {

ffi::Error ToError(const Status& status) {
  switch (status.code()) {
    case Status::Code::kOk:
      return ffi::Error::Success();
    case Status::Code::kInvalidArgument:
      return ffi::Error(ffi::ErrorCode::kInvalidArgument, kValueErrorPrefix + status.message());
    case Status::Code::kResourceExhausted:
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        kResourceErrorPrefix + status.message());
    case Status::Code::kSimulation:
      return ffi::Error(ffi::ErrorCode::kInternal, kSimulationErrorPrefix + status.message());
  }
  return ffi::Error(ffi::ErrorCode::kInternal, "mjbatch_jax: unknown status");
}

ffi::Error InvalidArgument(const std::string& message) {
  return ToError(Status::InvalidArgument(message));
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

namespace {

// "name:size,name:size" as the Python side writes it.
bool ParseFields(std::string_view text, std::vector<ParamField>* fields, std::size_t* width) {
  *width = 0;
  for (std::string_view item : Split(text)) {
    std::size_t colon = item.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return false;
    ParamField field;
    field.name = std::string(item.substr(0, colon));
    std::string_view digits = item.substr(colon + 1);
    if (digits.empty() || digits.size() > 9) return false;
    int size = 0;
    for (char ch : digits) {
      if (ch < '0' || ch > '9') return false;
      size = size * 10 + (ch - '0');
    }
    field.size = size;
    *width += field.size;
    fields->push_back(std::move(field));
  }
  return true;
}

bool Floating(ffi::DataType type) {
  return type == ffi::DataType::F32 || type == ffi::DataType::F64;
}

}  // namespace

ffi::Error Prepare(int64_t engine, std::string_view fields, const ffi::AnyBuffer& state,
                   const ffi::AnyBuffer& params, Common* c) {
  // Checked in every call, since a callback may be installed after a function was compiled.
  if (std::string callback = PythonCallback(); !callback.empty()) {
    return InvalidArgument(PythonCallbackError(callback));
  }
  c->engine = FindEngine(engine);
  if (!c->engine) {
    if (int64_t parent = ForkedFrom(engine)) return InvalidArgument(ForkedMessage(engine, parent));
    return InvalidArgument("simulator " + std::to_string(engine) +
                           " was closed; make a new Simulator and trace again");
  }
  if (!ParseFields(fields, &c->fields, &c->width)) {
    return InvalidArgument("malformed parameter fields '" + std::string(fields) + "'");
  }
  // Each field must be one the engine knows, with the size it has: a wrong size would make the
  // engine read past the params buffer.
  for (const ParamField& field : c->fields) {
    std::string error;
    if (c->engine->ParamSize(field.name, &error) != field.size) {
      return InvalidArgument(error.empty() ? "'" + field.name + "' does not have " +
                                                 std::to_string(field.size) + " values"
                                           : error);
    }
  }
  auto dims = state.dimensions();
  std::size_t nstate = c->engine->nstate();
  if (dims.size() < 1 || static_cast<std::size_t>(dims.back()) != nstate) {
    return InvalidArgument("state rows must end in a dimension of nstate = " +
                           std::to_string(nstate));
  }
  if (!Floating(state.element_type())) {
    return InvalidArgument("state must be float32 or float64");
  }
  c->f64 = state.element_type() == ffi::DataType::F64;
  c->n = state.element_count() / nstate;
  if (c->n > static_cast<std::size_t>(INT32_MAX)) {
    return InvalidArgument("too many simulations in one call");
  }
  return CheckBuffer(*c, params, c->width, c->n, "params");
}

std::string ForkedMessage(int64_t engine, int64_t parent) {
  return "simulator " + std::to_string(engine) + " was made in process " +
         std::to_string(parent) + " before it forked this one, and its worker threads do not "
         "exist here: make a new Simulator (and trace again) in this process, or start workers "
         "with multiprocessing's 'spawn' or 'forkserver' method";
}

ffi::Error CheckNstep(int64_t nstep, int* out) {
  if (nstep < 1 || nstep > INT32_MAX) {
    return InvalidArgument("nstep must be in [1, 2**31 - 1], got " + std::to_string(nstep));
  }
  *out = static_cast<int>(nstep);
  return ffi::Error::Success();
}

ffi::Error CheckBuffer(const Common& c, const ffi::AnyBuffer& buffer, std::size_t width,
                       std::size_t rows, const char* what) {
  ffi::DataType want = c.f64 ? ffi::DataType::F64 : ffi::DataType::F32;
  if (buffer.element_type() != want) {
    return InvalidArgument(std::string(what) + " must have the state's dtype");
  }
  if (buffer.element_count() != rows * width) {
    return InvalidArgument(std::string(what) + " must have " + std::to_string(width) +
                           " values per simulation for " + std::to_string(rows) +
                           " simulations, got " + std::to_string(buffer.element_count()));
  }
  return ffi::Error::Success();
}

}  // namespace mjbatch_jax
