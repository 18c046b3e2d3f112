// finite_difference(state (..., nstate), ctrl (..., nu), params (..., P)) -> next
//   (..., nstate), sensordata (..., ns), jx (..., k, nstate or nx), jy (..., k, ns), of the
//   state's dtype: nstep substeps and their differences w.r.t. k entries of each simulation's
//   inputs (its row with ctrl written in, then its params; or, with tangent, its tangent-space
//   state, controls and params), all in float64 inside, regime-checked (finite_difference.h).
//   Attributes: engine, fields, set_const, nstep, eps, tangent, regime_checked, columns
//   ("i,j,...", a "c" after a column differenced centred: "3c,4").
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "ffi_common.h"
#include "finite_difference.h"
#include "handlers.h"

namespace mjbatch_jax {
namespace {

std::atomic<int64_t> calls{0};

// "i,j,..." with a "c" after each column to difference centred ("3c,4,5c").
bool ParseColumns(std::string_view text, std::vector<int>* columns, std::vector<bool>* centered) {
  for (std::string_view item : Split(text)) {
    const bool centred = !item.empty() && item.back() == 'c';
    if (centred) item.remove_suffix(1);
    centered->push_back(centred);
    if (item.empty() || item.size() > 9) return false;
    int value = 0;
    for (char ch : item) {
      if (ch < '0' || ch > '9') return false;
      value = value * 10 + (ch - '0');
    }
    columns->push_back(value);
  }
  return true;
}

template <typename T>
ffi::Error Run(const Common& c, const ffi::AnyBuffer& state, const ffi::AnyBuffer& ctrl,
               const ffi::AnyBuffer& params, ffi::AnyBuffer& next, ffi::AnyBuffer& sensordata,
               ffi::AnyBuffer& jx, ffi::AnyBuffer& jy, int nstep, const Perturbation& p) {
  Inputs<T> in = MakeInputs<T>(c, state, Data<const T>(ctrl), params);
  return ToError(FiniteDifference(*c.engine, in, nstep, p, Data<T>(next), Data<T>(sensordata),
                                  Data<T>(jx), Data<T>(jy)));
}

ffi::Error Impl(ffi::AnyBuffer state, ffi::AnyBuffer ctrl, ffi::AnyBuffer params,
                ffi::Result<ffi::AnyBuffer> next, ffi::Result<ffi::AnyBuffer> sensordata,
                ffi::Result<ffi::AnyBuffer> jx, ffi::Result<ffi::AnyBuffer> jy, int64_t engine,
                std::string_view fields, bool set_const, int64_t nstep, double eps, bool tangent,
                bool regime_checked, std::string_view columns) {
  return Guarded(calls, [&]() -> ffi::Error {
    Common c;
    int substeps = 0;
    if (auto e = Prepare(engine, fields, state, params, &c); e.failure()) return e;
    c.set_const = set_const;
    if (auto e = CheckNstep(nstep, &substeps); e.failure()) return e;
    Perturbation p;
    p.eps = eps;
    p.tangent = tangent;
    p.regime_checked = regime_checked;
    if (!ParseColumns(columns, &p.columns, &p.centered)) {
      return InvalidArgument("malformed columns '" + std::string(columns) + "'");
    }
    const mjModel* m = c.engine->model();
    const std::size_t nstate = c.engine->nstate(), ns = m->nsensordata, k = p.columns.size();
    const std::size_t out = tangent ? 2 * m->nv + m->na : nstate;
    if (auto e = CheckBuffer(c, ctrl, m->nu, c.n, "ctrl"); e.failure()) return e;
    if (auto e = CheckBuffer(c, *next, nstate, c.n, "next"); e.failure()) return e;
    if (auto e = CheckBuffer(c, *sensordata, ns, c.n, "sensordata"); e.failure()) return e;
    if (auto e = CheckBuffer(c, *jx, k * out, c.n, "jx"); e.failure()) return e;
    if (auto e = CheckBuffer(c, *jy, k * ns, c.n, "jy"); e.failure()) return e;
    return c.f64 ? Run<double>(c, state, ctrl, params, *next, *sensordata, *jx, *jy, substeps, p)
                 : Run<float>(c, state, ctrl, params, *next, *sensordata, *jx, *jy, substeps, p);
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
                           .Attr<int64_t>("nstep")
                           .Attr<double>("eps")
                           .Attr<bool>("tangent")
                           .Attr<bool>("regime_checked")
                           .Attr<std::string_view>("columns"));

}  // namespace

HandlerEntry FiniteDifferenceHandler() {
  return {"mjbatch_jax_finite_difference", kHandler, &calls};
}

}  // namespace mjbatch_jax
