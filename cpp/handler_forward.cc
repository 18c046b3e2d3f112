// forward(state (..., nstate), params (..., P)) -> one (..., size) array per output field, of the
// state's dtype. Attributes: engine, fields, outputs ("name,name,...").
#include <atomic>
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
ffi::Error Run(const Common& c, const ffi::AnyBuffer& state, const ffi::AnyBuffer& params,
               const std::vector<DataField>& data_fields, ffi::RemainingRets& rets) {
  std::vector<T*> outputs;
  for (std::size_t i = 0; i < data_fields.size(); ++i) {
    auto ret = rets.get<ffi::AnyBuffer>(i);
    if (ret.has_error()) return ret.error();
    ffi::AnyBuffer out = **ret;
    std::string what = "output '" + data_fields[i].name + "'";
    if (auto e = CheckBuffer(c, out, data_fields[i].size, c.n, what.c_str()); e.failure()) {
      return e;
    }
    outputs.push_back(Data<T>(out));
  }
  Inputs<T> in = MakeInputs<T>(c, state, nullptr, params);
  return ToError(c.engine->Forward(in, data_fields, outputs));
}

ffi::Error Impl(ffi::AnyBuffer state, ffi::AnyBuffer params, ffi::RemainingRets rets,
                int64_t engine, std::string_view fields, bool set_const, std::string_view outputs) {
  return Guarded(calls, [&]() -> ffi::Error {
    Common c;
    if (auto e = Prepare(engine, fields, state, params, &c); e.failure()) return e;
    c.set_const = set_const;
    std::vector<DataField> data_fields;
    for (std::string_view name : Split(outputs)) {
      DataField field;
      std::string error;
      if (!c.engine->FindDataField(name, &field, &error)) return InvalidArgument(error);
      data_fields.push_back(field);
    }
    if (data_fields.empty() || data_fields.size() != rets.size()) {
      return InvalidArgument("forward needs one result per output field");
    }
    return c.f64 ? Run<double>(c, state, params, data_fields, rets)
                 : Run<float>(c, state, params, data_fields, rets);
  });
}

XLA_FFI_DEFINE_HANDLER(kHandler, Impl,
                       ffi::Ffi::Bind()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .RemainingRets()
                           .Attr<int64_t>("engine")
                           .Attr<std::string_view>("fields")
                           .Attr<bool>("set_const")
                           .Attr<std::string_view>("outputs"));

}  // namespace

HandlerEntry ForwardHandler() { return {"mjbatch_jax_forward", kHandler, &calls}; }

}  // namespace mjbatch_jax
