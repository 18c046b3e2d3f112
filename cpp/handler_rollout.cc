// rollout(state (..., nstate), ctrls (..., T, nu), params (..., P)) -> (states (..., T, nstate),
//   sensordata (..., T, nsensordata), warnings (..., mjNWARNING) int32, errors (...) int32, then
//   one (..., T, size) array per observed field). Attributes: engine, nstep, fields, set_const
//   and raise_errors as step; observe ("name,name,...", may be empty) and observe_new (at the
//   new state, or in-step).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ffi_common.h"
#include "handlers.h"

namespace mjbatch_jax {
namespace {

std::atomic<int64_t> calls{0};

template <typename T>
ffi::Error Run(const Common& c, const ffi::AnyBuffer& state, const ffi::AnyBuffer& ctrls,
               const ffi::AnyBuffer& params, ffi::AnyBuffer& states_out,
               ffi::AnyBuffer& sensordata_out, int32_t* warnings, int32_t* errors, int nknot,
               int nstep,
               const std::vector<DataField>& fields, ffi::RemainingRets& rets, bool new_state) {
  std::vector<T*> outputs;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    auto ret = rets.get<ffi::AnyBuffer>(i);
    if (ret.has_error()) return ret.error();
    ffi::AnyBuffer out = **ret;
    std::string what = "observed '" + fields[i].name + "'";
    std::size_t width = static_cast<std::size_t>(nknot) * fields[i].size;
    if (auto e = CheckBuffer(c, out, width, c.n, what.c_str()); e.failure()) return e;
    outputs.push_back(Data<T>(out));
  }
  Observation<T> observe{&fields, &outputs, new_state};
  Inputs<T> in = MakeInputs<T>(c, state, nullptr, params);
  return ToError(c.engine->Rollout(in, nknot, nstep, Data<const T>(ctrls), Data<T>(states_out),
                                   Data<T>(sensordata_out), warnings,
                                   fields.empty() ? nullptr : &observe, errors));
}

ffi::Error Impl(ffi::AnyBuffer state, ffi::AnyBuffer ctrls, ffi::AnyBuffer params,
                ffi::Result<ffi::AnyBuffer> states_out,
                ffi::Result<ffi::AnyBuffer> sensordata_out,
                ffi::Result<ffi::Buffer<ffi::S32>> warnings,
                ffi::Result<ffi::Buffer<ffi::S32>> errors, ffi::RemainingRets observed,
                int64_t engine, int64_t nstep, std::string_view fields, bool set_const,
                bool raise_errors, std::string_view observe, bool observe_new) {
  return Guarded(calls, [&]() -> ffi::Error {
    Common c;
    int substeps = 0;
    if (auto e = Prepare(engine, fields, state, params, &c); e.failure()) return e;
    c.set_const = set_const;
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
    std::vector<DataField> observe_fields;
    for (std::string_view name : Split(observe)) {
      DataField field;
      std::string error;
      if (!c.engine->FindDataField(name, &field, &error, /*in_step=*/!observe_new)) {
        return InvalidArgument(error);
      }
      observe_fields.push_back(field);
    }
    if (observe_fields.size() != observed.size()) {
      return InvalidArgument("rollout needs one result per observed field");
    }
    if (errors->element_count() != c.n) {
      return InvalidArgument("errors must have one value per simulation");
    }
    int32_t* counts = warnings->typed_data();
    int32_t* codes = raise_errors ? nullptr : errors->typed_data();
    if (raise_errors) std::fill_n(errors->typed_data(), c.n, 0);
    int knots = static_cast<int>(nknot);
    return c.f64 ? Run<double>(c, state, ctrls, params, *states_out, *sensordata_out, counts,
                               codes, knots, substeps, observe_fields, observed, observe_new)
                 : Run<float>(c, state, ctrls, params, *states_out, *sensordata_out, counts,
                              codes, knots, substeps, observe_fields, observed, observe_new);
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
                           .Ret<ffi::Buffer<ffi::S32>>()
                           .RemainingRets()
                           .Attr<int64_t>("engine")
                           .Attr<int64_t>("nstep")
                           .Attr<std::string_view>("fields")
                           .Attr<bool>("set_const")
                           .Attr<bool>("raise_errors")
                           .Attr<std::string_view>("observe")
                           .Attr<bool>("observe_new"));

}  // namespace

HandlerEntry RolloutHandler() { return {"mjbatch_jax_rollout", kHandler, &calls}; }

}  // namespace mjbatch_jax
