// What every XLA FFI handler shares: the engine lookup, the checks of the common inputs, the
// checks of every output buffer, and the mapping of engine errors to FFI errors with a kind.
//
// Handlers trust nothing the Python side declared: every buffer's dtype and element count is
// checked against the engine before a byte is written.
#ifndef MJBATCH_JAX_FFI_COMMON_H_
#define MJBATCH_JAX_FFI_COMMON_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine.h"
#include "status.h"
#include "xla/ffi/api/ffi.h"

namespace mjbatch_jax {

namespace ffi = xla::ffi;

// Message prefixes that the Python side turns into its own exception types.
inline constexpr char kValueErrorPrefix[] = "mjbatch_jax.ValueError: ";
inline constexpr char kSimulationErrorPrefix[] = "mjbatch_jax.SimulationError: ";
inline constexpr char kResourceErrorPrefix[] = "mjbatch_jax.ResourceError: ";

// An engine Status as an FFI error of the matching code.
ffi::Error ToError(const Status& status);
ffi::Error InvalidArgument(const std::string& message);

// The engine and the inputs common to every handler, checked.
struct Common {
  std::shared_ptr<Engine> engine;
  std::vector<ParamField> fields;
  std::size_t n = 0;      // simulations: the state's elements / nstate
  std::size_t width = 0;  // params per simulation
  bool f64 = false;       // the state's dtype is float64 (else float32)
  bool set_const = false;  // recompute derived constants from the params (attribute set_const)
};

// Find the engine, parse the params fields ("name:size,..."), and check that state is
// (..., nstate) float32 or float64 and params (..., width) of the same dtype and rows.
ffi::Error Prepare(int64_t engine, std::string_view fields, const ffi::AnyBuffer& state,
                   const ffi::AnyBuffer& params, Common* c);

// Why an engine of the process that forked this one cannot run here.
std::string ForkedMessage(int64_t engine, int64_t parent);

// nstep as an int in [1, INT32_MAX], or an error.
ffi::Error CheckNstep(int64_t nstep, int* out);

// An error unless buffer has the common dtype (or int32 when int32 is true) and exactly
// rows * width elements.
ffi::Error CheckBuffer(const Common& c, const ffi::AnyBuffer& buffer, std::size_t width,
                       std::size_t rows, const char* what);

// Comma-separated items of text.
std::vector<std::string_view> Split(std::string_view text);

// Count the calls of a handler and keep C++ exceptions (bad_alloc) from crossing into XLA.
template <typename Fn>
ffi::Error Guarded(std::atomic<int64_t>& calls, Fn fn) {
  calls.fetch_add(1, std::memory_order_relaxed);
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return ToError(Status::ResourceExhausted("out of memory"));
  } catch (const std::exception& e) {
    return ToError(Status::ResourceExhausted(e.what()));
  }
}

// The elements of a checked buffer as T.
template <typename T>
T* Data(const ffi::AnyBuffer& buffer) {
  return static_cast<T*>(buffer.untyped_data());
}

// The Inputs of an engine call over the common buffers.
template <typename T>
Inputs<T> MakeInputs(const Common& c, const ffi::AnyBuffer& state, const T* ctrl,
                     const ffi::AnyBuffer& params) {
  Inputs<T> in;
  in.n = c.n;
  in.state = Data<const T>(state);
  in.ctrl = ctrl;
  in.params = c.width ? Data<const T>(params) : nullptr;
  in.fields = c.fields.empty() ? nullptr : &c.fields;
  in.set_const = c.set_const;
  return in;
}

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_FFI_COMMON_H_
