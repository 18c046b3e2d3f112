// transition_fd(state (..., nstate), ctrl (..., nu), params (..., P)) -> A (..., nx, nx),
//   B (..., nx, nu), C (..., ns, nx), D (..., ns, nu) of the state's dtype: MuJoCo's own
//   mjd_transitionFD per simulation, in float64 inside. Attributes: engine, fields, eps,
//   centered, sensors (C and D are written only if true; else they have no elements).
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
               const ffi::AnyBuffer& params, ffi::AnyBuffer& A, ffi::AnyBuffer& B,
               ffi::AnyBuffer& C, ffi::AnyBuffer& D, double eps, bool centered, bool sensors) {
  Inputs<T> in = MakeInputs<T>(c, state, Data<const T>(ctrl), params);
  return ToError(c.engine->TransitionFD(in, eps, centered, Data<T>(A), Data<T>(B),
                                        sensors ? Data<T>(C) : nullptr,
                                        sensors ? Data<T>(D) : nullptr));
}

ffi::Error Impl(ffi::AnyBuffer state, ffi::AnyBuffer ctrl, ffi::AnyBuffer params,
                ffi::Result<ffi::AnyBuffer> A, ffi::Result<ffi::AnyBuffer> B,
                ffi::Result<ffi::AnyBuffer> C, ffi::Result<ffi::AnyBuffer> D, int64_t engine,
                std::string_view fields, bool set_const, double eps, bool centered, bool sensors) {
  return Guarded(calls, [&]() -> ffi::Error {
    Common c;
    if (auto e = Prepare(engine, fields, state, params, &c); e.failure()) return e;
    c.set_const = set_const;
    const mjModel* m = c.engine->model();
    const std::size_t nx = 2 * m->nv + m->na, nu = m->nu, ns = sensors ? m->nsensordata : 0;
    if (auto e = CheckBuffer(c, ctrl, nu, c.n, "ctrl"); e.failure()) return e;
    if (auto e = CheckBuffer(c, *A, nx * nx, c.n, "A"); e.failure()) return e;
    if (auto e = CheckBuffer(c, *B, nx * nu, c.n, "B"); e.failure()) return e;
    if (auto e = CheckBuffer(c, *C, ns * nx, c.n, "C"); e.failure()) return e;
    if (auto e = CheckBuffer(c, *D, ns * nu, c.n, "D"); e.failure()) return e;
    return c.f64 ? Run<double>(c, state, ctrl, params, *A, *B, *C, *D, eps, centered, sensors)
                 : Run<float>(c, state, ctrl, params, *A, *B, *C, *D, eps, centered, sensors);
  });
}

XLA_FFI_DEFINE_HANDLER(kHandler, Impl,
                       ffi::Ffi::Bind()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>()
                           .Attr<int64_t>("engine")
                           .Attr<std::string_view>("fields")
                           .Attr<bool>("set_const")
                           .Attr<double>("eps")
                           .Attr<bool>("centered")
                           .Attr<bool>("sensors"));

}  // namespace

HandlerEntry TransitionFDHandler() { return {"mjbatch_jax_transition_fd", kHandler, &calls}; }

}  // namespace mjbatch_jax
