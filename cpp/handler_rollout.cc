// rollout(state (..., nstate), ctrls (..., T, nu), params (..., P)) -> (states (..., T, nstate),
//   sensordata (..., T, nsensordata), warnings (..., mjNWARNING) int32). Attributes as step.
#include <atomic>
#include <climits>
#include <cstdint>
#include <string_view>

#include "ffi_common.h"
#include "handlers.h"

namespace mjbatch_jax {
namespace {

std::atomic<int64_t> calls{0};

template <typename T>
ffi::Error Run(const Common& c, const ffi::AnyBuffer& state, const ffi::AnyBuffer& ctrls,
               const ffi::AnyBuffer& params, ffi::AnyBuffer& states_out,
               ffi::AnyBuffer& sensordata_out, int32_t* warnings, int nknot, int nstep) {
  Inputs<T> in = MakeInputs<T>(c, state, nullptr, params);
  return ToError(c.engine->Rollout(in, nknot, nstep, Data<const T>(ctrls), Data<T>(states_out),
                                   Data<T>(sensordata_out), warnings));
}

ffi::Error Impl(ffi::AnyBuffer state, ffi::AnyBuffer ctrls, ffi::AnyBuffer params,
                ffi::Result<ffi::AnyBuffer> states_out,
                ffi::Result<ffi::AnyBuffer> sensordata_out,
                ffi::Result<ffi::Buffer<ffi::S32>> warnings, int64_t engine, int64_t nstep,
                std::string_view fields) {
  return Guarded(calls, [&]() -> ffi::Error {
    Common c;
    int substeps = 0;
    if (auto e = Prepare(engine, fields, state, params, &c); e.failure()) return e;
    if (auto e = CheckNstep(nstep, &substeps); e.failure()) return e;
    const mjModel* m = c.engine->model();
    auto dims = ctrls.dimensions();
    if (dims.size() < 2 || dims.back() != m->nu) {
      return InvalidArgument("ctrls must be (..., T, nu = " + std::to_string(m->nu) + ")");
    }
    const std::size_t nknot = dims[dims.size() - 2];
    if (nknot > static_cast<std::size_t>(INT32_MAX)) return InvalidArgument("too many knots");
    const std::size_t nstate = c.engine->nstate(), ns = m->nsensordata;
    if (auto e = CheckBuffer(c, ctrls, nknot * m->nu, c.n, "ctrls"); e.failure()) return e;
    if (auto e = CheckBuffer(c, *states_out, nknot * nstate, c.n, "states"); e.failure()) {
      return e;
    }
    if (auto e = CheckBuffer(c, *sensordata_out, nknot * ns, c.n, "sensordata"); e.failure()) {
      return e;
    }
    if (warnings->element_count() != c.n * mjNWARNING) {
      return InvalidArgument("warnings must have mjNWARNING values per simulation");
    }
    int32_t* counts = warnings->typed_data();
    int knots = static_cast<int>(nknot);
    return c.f64 ? Run<double>(c, state, ctrls, params, *states_out, *sensordata_out, counts,
                               knots, substeps)
                 : Run<float>(c, state, ctrls, params, *states_out, *sensordata_out, counts,
                              knots, substeps);
  });
}

XLA_FFI_DEFINE_HANDLER(kHandler, Impl,
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

}  // namespace

HandlerEntry RolloutHandler() { return {"mjbatch_jax_rollout", kHandler, &calls}; }

}  // namespace mjbatch_jax
