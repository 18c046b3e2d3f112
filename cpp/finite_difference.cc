#include "finite_difference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <mujoco/mujoco.h>

namespace mjbatch_jax {
namespace {

std::atomic<int64_t> total_columns{0}, total_switched{0}, total_extra_rows{0},
    total_unresolved{0};

// Offset in an mjSTATE_INTEGRATION row of one of its components: the sizes before it.
std::size_t Offset(const mjModel* m, int component) {
  std::size_t offset = 0;
  for (int bit = 1; bit < component; bit <<= 1) {
    if (bit & mjSTATE_INTEGRATION) offset += mj_stateSize(m, bit);
  }
  return offset;
}

// bools with a pointer to them, as Rows takes (std::vector<bool> has none).
class PerturbedFlags {
 public:
  void resize(std::size_t n) {
    if (n > size_) {
      flags_.reset(new bool[n]);
      size_ = n;
    }
  }
  bool& operator[](std::size_t i) { return flags_[i]; }
  const bool* get() const { return flags_.get(); }

 private:
  std::unique_ptr<bool[]> flags_;
  std::size_t size_ = 0;
};

// One stepped copy of a simulation: where it ended, its regime, and how far it was moved.
struct Sample {
  const double* state = nullptr;
  const double* sensors = nullptr;
  const double* observed = nullptr;
  uint64_t regime = 0;
  double delta = 0;
};

// A copy to step: simulation i of the chunk with column c (-1: none) moved by delta.
struct Request {
  std::size_t sim;
  int column;
  double delta;
};

// The two copies that a column is differenced between, once decided.
struct Choice {
  Sample hi, lo;
  bool decided = false;
};

// The finite differences of one call, a chunk of simulations at a time.
class Differencer {
 public:
  Differencer(Engine& engine, const Perturbation& p, const std::vector<ParamField>* fields,
              bool set_const, int nstep)
      : engine_(engine),
        m_(engine.model()),
        p_(p),
        fields_(fields),
        set_const_(set_const),
        nstep_(nstep),
        nstate_(engine.nstate()),
        width_(0),
        qpos_(Offset(m_, mjSTATE_QPOS)),
        qvel_(Offset(m_, mjSTATE_QVEL)),
        ctrl_(Offset(m_, mjSTATE_CTRL)),
        warmstart_(Offset(m_, mjSTATE_WARMSTART)),
        direction_(m_->nv, 0.0),
        tangent_(m_->nv, 0.0) {
    if (fields) {
      for (const ParamField& field : *fields) width_ += field.size;
    }
    for (const DataField& field : p.observe) {
      offsets_.push_back(observe_width_);
      observe_width_ += field.size;
    }
  }

  std::size_t width() const { return width_; }

  // A column's step: eps, and eps * kControlStep for a control. A position actuator's force is
  // linear in its control, so a control's column carries no truncation error to trade against
  // rounding; what a large step does cross is a switch inside the solver's path that its result
  // does not show (a line-search bracket of the Newton solver): on the Go1 trotting, one control
  // column at 1e-6 was off by 3%, at 1e-7 by 2e-7 (docs/derivatives.md). The solver's warm start
  // likewise: it moves where the solver starts, and at 1e-6 one column crossed a switch of the
  // solver's path on the Go1 (a 10-knot loss 1.8% off; 5e-5 at 1e-7).
  double Step(int column, double eps) const {
    if (!p_.regime_checked) return eps;  // the plain rules, as they were
    const std::size_t c = column;
    const std::size_t first = p_.tangent ? 2 * m_->nv + m_->na : ctrl_;
    if (IsWarmStart(column)) return eps * kControlStep;
    return c >= first && c < first + m_->nu ? eps * kControlStep : eps;
  }
  // Whether a column is the solver's warm start (a row entry, never in the tangent space).
  bool IsWarmStart(int column) const {
    const std::size_t c = column;
    return !p_.tangent && c >= warmstart_ && c < warmstart_ + m_->nv;
  }

  // How far a centred column's forward and backward quotients disagree, relative to the larger:
  // over the physical state (positions, velocities, activations) after the substeps.
  double Disagreement(const Sample& nominal, const Sample& plus, const Sample& minus) const {
    // qpos, qvel and act are adjacent in a state row (mjtState's order): one stretch.
    const std::size_t end = qvel_ + m_->nv + m_->na;
    double apart = 0, up = 0, down = 0;
    const double hp = plus.delta, hm = -minus.delta;
    for (std::size_t j = qpos_; j < end; ++j) {
      const double f = (plus.state[j] - nominal.state[j]) / hp;
      const double b = (nominal.state[j] - minus.state[j]) / hm;
      apart += (f - b) * (f - b);
      up += f * f;
      down += b * b;
    }
    const double scale = std::max(up, down);
    return scale > 0 ? std::sqrt(apart / scale) : 0.0;
  }

  // The size of a one-sided quotient (a - b) / (a.delta - b.delta) over the physical state.
  double Slope(const Sample& a, const Sample& b) const {
    const std::size_t end = qvel_ + m_->nv + m_->na;
    const double h = a.delta - b.delta;
    double sum = 0;
    for (std::size_t j = qpos_; j < end; ++j) {
      const double q = (a.state[j] - b.state[j]) / h;
      sum += q * q;
    }
    return std::sqrt(sum);
  }

  std::size_t observe_width() const { return observe_width_; }
  const std::vector<std::size_t>& offsets() const { return offsets_; }

  // The nominal inputs of a chunk's simulations, in float64, with the controls written in.
  template <typename T>
  void SetChunk(const Inputs<T>& in, std::size_t start, std::size_t count) {
    start_ = start;
    base_.resize(count * nstate_);
    base_params_.resize(count * width_);
    for (std::size_t i = 0; i < count; ++i) {
      double* row = base_.data() + i * nstate_;
      for (std::size_t j = 0; j < nstate_; ++j) row[j] = in.state[(start + i) * nstate_ + j];
      if (in.ctrl) {
        for (int j = 0; j < m_->nu; ++j) row[ctrl_ + j] = in.ctrl[(start + i) * m_->nu + j];
      }
      for (std::size_t j = 0; j < width_; ++j) {
        base_params_[i * width_ + j] = in.params[(start + i) * width_ + j];
      }
    }
    used_ = 0;
  }

  // Step the requested copies; samples[r] is where request r ended.
  Status Step(const std::vector<Request>& requests, std::vector<Sample>* samples) {
    const std::size_t n = requests.size(), ns = m_->nsensordata;
    rows_.resize(n * nstate_);
    params_.resize(n * width_);
    sims_.resize(n);
    perturbed_.resize(n);
    for (std::size_t r = 0; r < n; ++r) {
      const Request& q = requests[r];
      double* row = rows_.data() + r * nstate_;
      double* row_params = params_.data() + r * width_;
      std::memcpy(row, base_.data() + q.sim * nstate_, nstate_ * sizeof(double));
      if (width_) {
        std::memcpy(row_params, base_params_.data() + q.sim * width_, width_ * sizeof(double));
      }
      if (q.column >= 0) Perturb(row, row_params, q.column, q.delta);
      sims_[r] = start_ + q.sim;
      perturbed_[r] = q.column >= 0;
    }
    if (used_ == storage_.size()) storage_.emplace_back();
    std::vector<double>& out = storage_[used_++];
    out.resize(n * (nstate_ + ns + observe_width_));
    double* observed = out.data() + n * (nstate_ + ns);
    regimes_.resize(n);
    Rows batch;
    batch.n = n;
    batch.state = rows_.data();
    batch.params = width_ ? params_.data() : nullptr;
    batch.fields = fields_;
    batch.set_const = set_const_;
    batch.sim = sims_.data();
    batch.perturbed = perturbed_.get();
    if (!p_.observe.empty()) {
      batch.observe = &p_.observe;
      batch.observe_offsets = &offsets_;
      batch.observe_width = observe_width_;
    }
    Status status = engine_.StepRows(batch, nstep_, out.data(), out.data() + n * nstate_,
                                     regimes_.data(), observed);
    if (!status.ok()) return status;
    samples->resize(n);
    for (std::size_t r = 0; r < n; ++r) {
      (*samples)[r] = {out.data() + r * nstate_, out.data() + n * nstate_ + r * ns,
                       observed + r * observe_width_, regimes_[r], requests[r].delta};
    }
    return Status();
  }

  // d(row after the substeps)/d(column), d(sensordata)/d(column) and d(observed field f)/
  // d(column) (written to jobs[f]) between two copies, as T once.
  template <typename T>
  void Difference(const Sample& hi, const Sample& lo, T* jx, T* jy, const std::vector<T*>& jobs) {
    const double scale = 1.0 / (hi.delta - lo.delta);
    if (p_.tangent) {
      const int nv = m_->nv, rest = m_->nv + m_->na;
      mj_differentiatePos(m_, tangent_.data(), hi.delta - lo.delta, lo.state + qpos_,
                          hi.state + qpos_);
      for (int j = 0; j < nv; ++j) jx[j] = static_cast<T>(tangent_[j]);
      for (int j = 0; j < rest; ++j) {
        jx[nv + j] = static_cast<T>((hi.state[qvel_ + j] - lo.state[qvel_ + j]) * scale);
      }
    } else {
      for (std::size_t j = 0; j < nstate_; ++j) {
        jx[j] = static_cast<T>((hi.state[j] - lo.state[j]) * scale);
      }
    }
    for (int j = 0; j < m_->nsensordata; ++j) {
      jy[j] = static_cast<T>((hi.sensors[j] - lo.sensors[j]) * scale);
    }
    for (std::size_t f = 0; f < jobs.size(); ++f) {
      const double* h = hi.observed + offsets_[f];
      const double* l = lo.observed + offsets_[f];
      for (int j = 0; j < p_.observe[f].size; ++j) {
        jobs[f][j] = static_cast<T>((h[j] - l[j]) * scale);
      }
    }
  }

 private:
  // Move one input of a copy: its row (or tangent) entry, control or param.
  void Perturb(double* row, double* params, int column, double delta) {
    if (!p_.tangent) {
      if (static_cast<std::size_t>(column) < nstate_) {
        row[column] += delta;
      } else {
        params[column - nstate_] += delta;
      }
      return;
    }
    const int nv = m_->nv, nx = 2 * m_->nv + m_->na, nu = m_->nu;
    if (column < nv) {
      direction_[column] = 1.0;
      mj_integratePos(m_, row + qpos_, direction_.data(), delta);
      direction_[column] = 0.0;
    } else if (column < nx) {
      row[qvel_ + column - nv] += delta;  // velocities, then activations, side by side
    } else if (column < nx + nu) {
      row[ctrl_ + column - nx] += delta;
    } else {
      params[column - nx - nu] += delta;
    }
  }

  Engine& engine_;
  const mjModel* m_;
  const Perturbation& p_;
  const std::vector<ParamField>* fields_;
  bool set_const_;
  int nstep_;
  std::size_t nstate_, width_, qpos_, qvel_, ctrl_, warmstart_;
  std::size_t observe_width_ = 0;
  std::vector<std::size_t> offsets_;
  std::size_t start_ = 0;
  std::vector<double> base_, base_params_;
  std::vector<double> direction_, tangent_;
  // The copies of a pass, reused from pass to pass.
  std::vector<double> rows_, params_;
  std::vector<std::size_t> sims_;
  PerturbedFlags perturbed_;
  std::vector<uint64_t> regimes_;
  // The rows and sensordata of the chunk's passes, kept until its differences are written; the
  // buffers are reused by the next chunk (a deque never moves its elements).
  std::deque<std::vector<double>> storage_;
  std::size_t used_ = 0;
};

// Decide a column from copies at +h and -h: both in the nominal regime -> centred, one -> that
// side against the nominal row, none -> undecided. Returns whether either copy crossed.
bool Decide(const Sample& nominal, const Sample& plus, const Sample& minus, Choice* choice) {
  const bool up = plus.regime == nominal.regime, down = minus.regime == nominal.regime;
  if (up && down) {
    *choice = {plus, minus, true};
  } else if (up) {
    *choice = {plus, nominal, true};
  } else if (down) {
    *choice = {nominal, minus, true};
  }
  return !(up && down);
}

}  // namespace

template <typename T>
Status FiniteDifference(Engine& engine, const Inputs<T>& in, int nstep, const Perturbation& p,
                        T* next, T* sensordata, T* jx, T* jy, const std::vector<T*>& observed,
                        const std::vector<T*>& observed_jacobians) {
  const mjModel* m = engine.model();
  if (nstep < 0) return Status::InvalidArgument("nstep must be >= 0");
  if (observed.size() != p.observe.size() || observed_jacobians.size() != p.observe.size()) {
    return Status::InvalidArgument("every observed field needs its values and derivatives");
  }
  if (!(p.eps > 0) || !std::isfinite(p.eps)) {
    return Status::InvalidArgument("eps must be a finite number > 0");
  }
  Differencer diff(engine, p, in.fields, in.set_const, nstep);
  const std::size_t nstate = engine.nstate(), ns = m->nsensordata;
  const std::size_t nx = 2 * m->nv + m->na;
  const std::size_t inputs = (p.tangent ? nx + m->nu : nstate) + diff.width();
  for (int column : p.columns) {
    if (column < 0 || static_cast<std::size_t>(column) >= inputs) {
      return Status::InvalidArgument(p.tangent
                                         ? "a perturbed column is outside [0, nx + nu + params)"
                                         : "a perturbed column is outside [0, nstate + params)");
    }
  }
  if (p.centered.size() != p.columns.size()) {
    return Status::InvalidArgument("every perturbed column needs its centred flag");
  }
  if (in.n == 0) return Status();
  const std::size_t k = p.columns.size(), out = p.tangent ? nx : nstate;
  // The first pass of a simulation: its nominal row, a copy at +eps per column, and one at -eps
  // per centred column; backward[c] is the position of column c's copy at -eps (0: none).
  std::vector<std::size_t> backward(k, 0);
  std::size_t first = 1 + k;
  for (std::size_t c = 0; c < k; ++c) {
    if (p.centered[c]) backward[c] = first++;
  }
  if (first > engine.ChunkSize() * 16) {
    return Status::InvalidArgument("too many perturbed columns for one simulation");
  }
  // Whole simulations per chunk, each with all the copies of its first pass.
  const std::size_t sims = std::max<std::size_t>(1, engine.ChunkSize() / first);
  std::vector<Request> requests;
  std::vector<Sample> samples, more;
  std::vector<Choice> choices;
  // Per column, its smallest one-sided quotient among the copies tried (see consider).
  std::vector<Choice> least;
  std::vector<double> least_slope;
  std::vector<std::size_t> pending, still;
  std::vector<T*> jobs(p.observe.size());
  int64_t switched = 0, extra_rows = 0, unresolved = 0;
  for (std::size_t start = 0; start < in.n; start += sims) {
    const std::size_t count = std::min(sims, in.n - start);
    diff.SetChunk(in, start, count);
    requests.clear();
    for (std::size_t i = 0; i < count; ++i) {
      requests.push_back({i, -1, 0.0});
      for (std::size_t c = 0; c < k; ++c) {
        requests.push_back({i, p.columns[c], diff.Step(p.columns[c], p.eps)});
      }
      for (std::size_t c = 0; c < k; ++c) {
        if (p.centered[c]) requests.push_back({i, p.columns[c], -diff.Step(p.columns[c], p.eps)});
      }
    }
    Status status = diff.Step(requests, &samples);
    if (!status.ok()) return status;
    auto nominal = [&](std::size_t i) -> const Sample& { return samples[i * first]; };
    choices.assign(count * k, Choice());
    least.assign(count * k, Choice());
    least_slope.assign(count * k, std::numeric_limits<double>::infinity());
    // A copy that crossed a switch measured its jump divided by its step on top of the slope, so
    // of a column's one-sided quotients the smallest is the least wrong: what an unresolved
    // column takes (a centred pair of the last level divided its jump by eps * 1e-4: the G1's
    // arms against its torso, mesh contacts whose count flickers with rounding whichever way a
    // copy moves, read 1e9 where the slope is 50).
    auto consider = [&](std::size_t id, const Sample& plus, const Sample& minus) {
      const Sample& x0 = nominal(id / k);
      for (const Choice& side : {Choice{plus, x0, true}, Choice{x0, minus, true}}) {
        const double slope = diff.Slope(side.hi, side.lo);
        if (slope < least_slope[id]) {
          least_slope[id] = slope;
          least[id] = side;
        }
      }
    };
    pending.clear();
    // Forward differences whose copy crossed a switch try the backward side at the same step.
    std::vector<std::size_t> backward_tries;
    for (std::size_t i = 0; i < count; ++i) {
      for (std::size_t c = 0; c < k; ++c) {
        Choice& choice = choices[i * k + c];
        const Sample& plus = samples[i * first + 1 + c];
        const Sample* minus = backward[c] ? &samples[i * first + backward[c]] : nullptr;
        if (!p.regime_checked || diff.IsWarmStart(p.columns[c])) {
          choice = {plus, minus ? *minus : nominal(i), true};
        } else if (minus) {
          const bool crossed = Decide(nominal(i), plus, *minus, &choice);
          // Both copies in the regime, yet their quotients far apart: a switch the regime does
          // not show (see kDisagreement).
          const bool kink =
              !crossed && diff.Disagreement(nominal(i), plus, *minus) > kDisagreement;
          if (kink) choice.decided = false;
          switched += crossed || kink;
          if (!choice.decided) {
            pending.push_back(i * k + c);
            consider(i * k + c, plus, *minus);
          }
        } else if (plus.regime == nominal(i).regime) {
          choice = {plus, nominal(i), true};
        } else {
          backward_tries.push_back(i * k + c);
        }
      }
    }
    switched += static_cast<int64_t>(backward_tries.size());
    if (!backward_tries.empty()) {
      requests.clear();
      for (std::size_t id : backward_tries) {
        const int column = p.columns[id % k];
        requests.push_back({id / k, column, -diff.Step(column, p.eps)});
      }
      status = diff.Step(requests, &more);
      if (!status.ok()) return status;
      extra_rows += static_cast<int64_t>(requests.size());
      for (std::size_t r = 0; r < backward_tries.size(); ++r) {
        const std::size_t id = backward_tries[r];
        if (more[r].regime == nominal(id / k).regime) {
          choices[id] = {nominal(id / k), more[r], true};
        } else {
          pending.push_back(id);
          consider(id, samples[(id / k) * first + 1 + id % k], more[r]);
        }
      }
    }
    // Then both sides, each level 100 times closer; after the last, the least wrong quotient.
    double h = p.eps;
    for (int level = 1; level <= kRefinements && !pending.empty(); ++level) {
      h *= kRefinement;
      requests.clear();
      for (std::size_t id : pending) {
        const int column = p.columns[id % k];
        requests.push_back({id / k, column, diff.Step(column, h)});
        requests.push_back({id / k, column, -diff.Step(column, h)});
      }
      status = diff.Step(requests, &more);
      if (!status.ok()) return status;
      extra_rows += static_cast<int64_t>(requests.size());
      still.clear();
      for (std::size_t r = 0; r < pending.size(); ++r) {
        const std::size_t id = pending[r];
        Choice& choice = choices[id];
        Decide(nominal(id / k), more[2 * r], more[2 * r + 1], &choice);
        if (choice.decided) continue;
        consider(id, more[2 * r], more[2 * r + 1]);
        if (level == kRefinements) {
          choice = least[id];
          ++unresolved;
        } else {
          still.push_back(id);
        }
      }
      pending.swap(still);
    }
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t sim = start + i;
      const Sample& x0 = nominal(i);
      for (std::size_t j = 0; j < nstate; ++j) next[sim * nstate + j] = static_cast<T>(x0.state[j]);
      for (std::size_t j = 0; j < ns; ++j) {
        sensordata[sim * ns + j] = static_cast<T>(x0.sensors[j]);
      }
      for (std::size_t f = 0; f < p.observe.size(); ++f) {
        const std::size_t size = p.observe[f].size;
        const double* values = x0.observed + diff.offsets()[f];
        for (std::size_t j = 0; j < size; ++j) {
          observed[f][sim * size + j] = static_cast<T>(values[j]);
        }
      }
      for (std::size_t c = 0; c < k; ++c) {
        const Choice& choice = choices[i * k + c];
        for (std::size_t f = 0; f < p.observe.size(); ++f) {
          jobs[f] = observed_jacobians[f] + (sim * k + c) * p.observe[f].size;
        }
        diff.Difference(choice.hi, choice.lo, jx + (sim * k + c) * out, jy + (sim * k + c) * ns,
                        jobs);
      }
    }
  }
  total_columns.fetch_add(static_cast<int64_t>(in.n * k), std::memory_order_relaxed);
  total_switched.fetch_add(switched, std::memory_order_relaxed);
  total_extra_rows.fetch_add(extra_rows, std::memory_order_relaxed);
  total_unresolved.fetch_add(unresolved, std::memory_order_relaxed);
  return Status();
}

FiniteDifferenceCounts FiniteDifferenceTotals() {
  FiniteDifferenceCounts counts;
  counts.columns = total_columns.load();
  counts.switched = total_switched.load();
  counts.extra_rows = total_extra_rows.load();
  counts.unresolved = total_unresolved.load();
  return counts;
}

template Status FiniteDifference<float>(Engine&, const Inputs<float>&, int, const Perturbation&,
                                        float*, float*, float*, float*,
                                        const std::vector<float*>&, const std::vector<float*>&);
template Status FiniteDifference<double>(Engine&, const Inputs<double>&, int, const Perturbation&,
                                         double*, double*, double*, double*,
                                         const std::vector<double*>&,
                                         const std::vector<double*>&);

}  // namespace mjbatch_jax
