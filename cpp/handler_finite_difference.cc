// finite_difference(state (..., nstate), ctrl (..., nu), params (..., P)) -> next
//   (..., nstate), sensordata (..., ns), jx (..., k, nstate or nx), jy (..., k, ns), of the
//   state's dtype: nstep substeps and their differences w.r.t. k entries of each simulation's
//   inputs (its row with ctrl written in, then its params; or, with tangent, its tangent-space
//   state, controls and params), all in float64 inside, regime-checked (finite_difference.h).
//   Then, per observed field, its values (..., size) at the state after the substeps (mj_forward
//   there) and their derivatives (..., k, size). nstep 0: no substep, mj_forward alone.
//   Attributes: engine, fields, set_const, nstep, eps, tangent, regime_checked, columns
//   ("i,j,...", a "c" after a column differenced centred: "3c,4"), observe ("name,...").
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
               ffi::AnyBuffer& jx, ffi::AnyBuffer& jy, ffi::RemainingRets& rets, int nstep,
               const Perturbation& p) {
  // Per observed field: its values (..., size) and their derivatives (..., k, size).
  std::vector<T*> observed, jacobians;
  const std::size_t k = p.columns.size();
  for (std::size_t f = 0; f < p.observe.size(); ++f) {
    const DataField& field = p.observe[f];
    for (std::size_t part = 0; part < 2; ++part) {
      auto ret = rets.get<ffi::AnyBuffer>(2 * f + part);
      if (ret.has_error()) return ret.error();
      ffi::AnyBuffer out = **ret;
      std::string what = (part ? "derivatives of '" : "output '") + field.name + "'";
      const std::size_t width = part ? k * field.size : field.size;
      if (auto e = CheckBuffer(c, out, width, c.n, what.c_str()); e.failure()) return e;
      (part ? jacobians : observed).push_back(Data<T>(out));
    }
  }
  Inputs<T> in = MakeInputs<T>(c, state, Data<const T>(ctrl), params);
  return ToError(FiniteDifference(*c.engine, in, nstep, p, Data<T>(next), Data<T>(sensordata),
                                  Data<T>(jx), Data<T>(jy), observed, jacobians));
}

ffi::Error Impl(ffi::AnyBuffer state, ffi::AnyBuffer ctrl, ffi::AnyBuffer params,
                ffi::Result<ffi::AnyBuffer> next, ffi::Result<ffi::AnyBuffer> sensordata,
                ffi::Result<ffi::AnyBuffer> jx, ffi::Result<ffi::AnyBuffer> jy,
                ffi::RemainingRets rets, int64_t engine, std::string_view fields, bool set_const,
                int64_t nstep, double eps, bool tangent, bool regime_checked,
                std::string_view columns, std::string_view observe) {
  return Guarded(calls, [&]() -> ffi::Error {
    Common c;
    int substeps = 0;
    if (auto e = Prepare(engine, fields, state, params, &c); e.failure()) return e;
    c.set_const = set_const;
    // nstep 0: no substep, mj_forward alone (the derivatives of forward's fields).
    if (nstep != 0) {
      if (auto e = CheckNstep(nstep, &substeps); e.failure()) return e;
    }
    Perturbation p;
    for (std::string_view name : Split(observe)) {
      DataField field;
      std::string error;
      if (!c.engine->FindDataField(name, &field, &error)) return InvalidArgument(error);
      p.observe.push_back(field);
    }
    if (rets.size() != 2 * p.observe.size()) {
      return InvalidArgument("finite_difference needs two results per observed field");
    }
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
    return c.f64 ? Run<double>(c, state, ctrl, params, *next, *sensordata, *jx, *jy, rets,
                               substeps, p)
                 : Run<float>(c, state, ctrl, params, *next, *sensordata, *jx, *jy, rets,
                              substeps, p);
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
                           .RemainingRets()
                           .Attr<int64_t>("engine")
                           .Attr<std::string_view>("fields")
                           .Attr<bool>("set_const")
                           .Attr<int64_t>("nstep")
                           .Attr<double>("eps")
                           .Attr<bool>("tangent")
                           .Attr<bool>("regime_checked")
                           .Attr<std::string_view>("columns")
                           .Attr<std::string_view>("observe"));

}  // namespace

HandlerEntry FiniteDifferenceHandler() {
  return {"mjbatch_jax_finite_difference", kHandler, &calls};
}

}  // namespace mjbatch_jax
