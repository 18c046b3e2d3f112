// step(state (..., nstate), ctrl (..., nu), params (..., P)) -> (state (..., nstate),
//   warnings (..., mjNWARNING) int32, errors (...) int32). Attributes: engine, nstep, fields
//   ("name:size,..."), set_const, and raise_errors: a MuJoCo error in a simulation fails the
//   call (naming it), or, if false, is only its error code (1) while the others' results stand.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string_view>

#include "ffi_common.h"
#include "handlers.h"

namespace mjbatch_jax {
namespace {

std::atomic<int64_t> calls{0};

template <typename T>
ffi::Error Run(const Common& c, const ffi::AnyBuffer& state, const ffi::AnyBuffer& ctrl,
               const ffi::AnyBuffer& params, ffi::AnyBuffer& state_out, int32_t* warnings,
               int32_t* errors, int nstep) {
  Inputs<T> in = MakeInputs<T>(c, state, Data<const T>(ctrl), params);
  return ToError(c.engine->Step(in, nstep, Data<T>(state_out), warnings, errors));
}

ffi::Error Impl(ffi::AnyBuffer state, ffi::AnyBuffer ctrl, ffi::AnyBuffer params,
                ffi::Result<ffi::AnyBuffer> state_out,
                ffi::Result<ffi::Buffer<ffi::S32>> warnings,
                ffi::Result<ffi::Buffer<ffi::S32>> errors, int64_t engine, int64_t nstep,
                std::string_view fields, bool set_const, bool raise_errors) {
  return Guarded(calls, [&]() -> ffi::Error {
    Common c;
    int substeps = 0;
    if (auto e = Prepare(engine, fields, state, params, &c); e.failure()) return e;
    c.set_const = set_const;
    if (auto e = CheckNstep(nstep, &substeps); e.failure()) return e;
    const std::size_t nu = c.engine->model()->nu, nstate = c.engine->nstate();
    if (auto e = CheckBuffer(c, ctrl, nu, c.n, "ctrl"); e.failure()) return e;
    if (auto e = CheckBuffer(c, *state_out, nstate, c.n, "the new state"); e.failure()) return e;
    if (warnings->element_count() != c.n * mjNWARNING) {
      return InvalidArgument("warnings must have mjNWARNING values per simulation");
    }
    if (errors->element_count() != c.n) {
      return InvalidArgument("errors must have one value per simulation");
    }
    int32_t* counts = warnings->typed_data();
    int32_t* codes = raise_errors ? nullptr : errors->typed_data();
    if (raise_errors) std::fill_n(errors->typed_data(), c.n, 0);
    return c.f64 ? Run<double>(c, state, ctrl, params, *state_out, counts, codes, substeps)
                 : Run<float>(c, state, ctrl, params, *state_out, counts, codes, substeps);
  });
}

XLA_FFI_DEFINE_HANDLER(kHandler, Impl,
                       ffi::Ffi::Bind()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>()
                           .Ret<ffi::Buffer<ffi::S32>>()
                           .Ret<ffi::Buffer<ffi::S32>>()
                           .Attr<int64_t>("engine")
                           .Attr<int64_t>("nstep")
                           .Attr<std::string_view>("fields")
                           .Attr<bool>("set_const")
                           .Attr<bool>("raise_errors"));

}  // namespace

HandlerEntry StepHandler() { return {"mjbatch_jax_step", kHandler, &calls}; }

}  // namespace mjbatch_jax
