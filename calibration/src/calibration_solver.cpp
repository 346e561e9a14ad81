// solve_curve (see calibration_solver.hpp). First, hold parameters (in hold order) until the
// samples outnumber the free ones. Then rounds: solve with Ceres; hold every free parameter that
// ended at a natural 0, that no sample depends on, or that the samples cannot separate from the
// others (the Jacobian's columns, normalised, lose rank), in hold order; solve again; stop when
// nothing changes. A parameter at a sanity bound ends the fit as a contradiction. The free set
// only shrinks, so it ends. One thread, a fixed order: deterministic.
#include "calibration_solver.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include <ceres/ceres.h>
#include <ceres/covariance.h>
#include <Eigen/Dense>

#include "orrery/base/error.hpp"

namespace orrery::calibration::detail {
namespace {

constexpr int kMaxParams = 8;
constexpr int kMaxRounds = 8;
// Singular values below this fraction of the largest (columns scaled to unit length) mean the
// samples cannot separate the parameters.
constexpr double kRankTolerance = 1e-7;
// A parameter within this fraction of its scale from a bound sits on it.
constexpr double kOnBound = 1e-9;

// One sample's log residual with its derivative in every parameter block (each block is one
// parameter divided by its scale).
class LogResidual : public ceres::CostFunction {
 public:
  LogResidual(const Predictor& predict, size_t sample, double measured,
              const std::vector<SolverParam>& params)
      : predict_(predict), sample_(sample), log_measured_(std::log(measured)), params_(params) {
    set_num_residuals(1);
    for (size_t i = 0; i < params.size(); ++i) mutable_parameter_block_sizes()->push_back(1);
  }

  bool Evaluate(double const* const* x, double* residual, double** jacobians) const override {
    const size_t n = params_.size();
    if (jacobians == nullptr) {
      double v[kMaxParams];
      for (size_t i = 0; i < n; ++i) v[i] = x[i][0] * params_[i].scale;
      residual[0] = predict_.value(sample_, v) - log_measured_;
      return std::isfinite(residual[0]);
    }
    Jet v[kMaxParams];
    for (size_t i = 0; i < n; ++i) {
      v[i] = Jet(x[i][0] * params_[i].scale);
      v[i].v[static_cast<Eigen::Index>(i)] = params_[i].scale;
    }
    const Jet r = predict_.jet(sample_, v);
    residual[0] = r.a - log_measured_;
    for (size_t i = 0; i < n; ++i) {
      if (jacobians[i] != nullptr) jacobians[i][0] = r.v[static_cast<Eigen::Index>(i)];
    }
    return std::isfinite(residual[0]);
  }

 private:
  const Predictor& predict_;
  size_t sample_;
  double log_measured_;
  const std::vector<SolverParam>& params_;
};

struct Problem {
  std::vector<double> x;  // scaled parameters, one block each
  std::unique_ptr<ceres::Problem> problem;
};

Problem build(const Predictor& predict, const std::vector<double>& measured,
              const std::vector<SolverParam>& params) {
  Problem p;
  p.x.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    p.x[i] = (params[i].free ? params[i].value : params[i].hold_value) / params[i].scale;
  }
  ceres::Problem::Options options;
  options.cost_function_ownership = ceres::TAKE_OWNERSHIP;
  p.problem = std::make_unique<ceres::Problem>(options);
  std::vector<double*> blocks;
  for (double& v : p.x) blocks.push_back(&v);
  for (size_t s = 0; s < measured.size(); ++s) {
    p.problem->AddResidualBlock(new LogResidual(predict, s, measured[s], params), nullptr, blocks);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    p.problem->SetParameterLowerBound(&p.x[i], 0, params[i].lower / params[i].scale);
    p.problem->SetParameterUpperBound(&p.x[i], 0, params[i].upper / params[i].scale);
    if (!params[i].free) p.problem->SetParameterBlockConstant(&p.x[i]);
  }
  return p;
}

double solve(Problem& p) {
  ceres::Solver::Options options;
  options.linear_solver_type = ceres::DENSE_QR;
  options.max_num_iterations = 500;
  options.function_tolerance = 1e-14;
  options.gradient_tolerance = 1e-16;
  options.parameter_tolerance = 1e-14;
  options.num_threads = 1;
  options.logging_type = ceres::SILENT;
  options.minimizer_progress_to_stdout = false;
  ceres::Solver::Summary summary;
  ceres::Solve(options, p.problem.get(), &summary);
  return summary.final_cost;
}

// Scaled Jacobian of every sample's residual in every parameter, at `params`' values.
Eigen::MatrixXd jacobian(const Predictor& predict, size_t samples,
                         const std::vector<SolverParam>& params) {
  Eigen::MatrixXd j(static_cast<Eigen::Index>(samples), static_cast<Eigen::Index>(params.size()));
  Jet v[kMaxParams];
  for (size_t s = 0; s < samples; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      v[i] = Jet(params[i].value);
      v[i].v[static_cast<Eigen::Index>(i)] = params[i].scale;
    }
    const Jet r = predict.jet(s, v);
    for (size_t i = 0; i < params.size(); ++i) {
      j(static_cast<Eigen::Index>(s), static_cast<Eigen::Index>(i)) =
          r.v[static_cast<Eigen::Index>(i)];
    }
  }
  return j;
}

bool full_rank(const Eigen::MatrixXd& j, const std::vector<size_t>& columns) {
  if (columns.empty()) return true;
  if (columns.size() > static_cast<size_t>(j.rows())) return false;
  Eigen::MatrixXd sub(j.rows(), static_cast<Eigen::Index>(columns.size()));
  for (size_t c = 0; c < columns.size(); ++c) {
    const Eigen::VectorXd col = j.col(static_cast<Eigen::Index>(columns[c]));
    const double norm = col.norm();
    if (!(norm > 0)) return false;
    sub.col(static_cast<Eigen::Index>(c)) = col / norm;
  }
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(sub);
  const auto& s = svd.singularValues();
  return s(s.size() - 1) > kRankTolerance * s(0);
}

void hold(SolverParam& p, double value, std::string reason) {
  p.free = false;
  p.value = value;
  p.hold_value = value;
  p.held_reason = std::move(reason);
}

std::vector<size_t> free_columns(const std::vector<SolverParam>& params) {
  std::vector<size_t> out;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].free) out.push_back(i);
  }
  return out;
}

bool natural_lower(const SolverParam& p) { return p.lower == 0 || p.natural_lower; }

// Holds parameters in hold order until the free ones leave at least one residual degree of
// freedom; returns whether anything changed.
bool hold_for_count(size_t samples, std::vector<SolverParam>& params,
                    const std::vector<size_t>& hold_order) {
  bool changed = false;
  for (size_t i : hold_order) {
    if (free_columns(params).size() < samples) break;
    if (!params[i].free) continue;
    hold(params[i], params[i].hold_value, "too few samples to fit it as well");
    changed = true;
  }
  return changed;
}

// Holds what the samples do not determine; returns whether anything changed. Sets
// `contradiction` instead when a parameter ran to a sanity bound.
bool hold_undetermined(const Predictor& predict, size_t samples, std::vector<SolverParam>& params,
                       const std::vector<size_t>& hold_order, std::string& contradiction) {
  bool changed = false;
  for (SolverParam& p : params) {
    if (!p.free) continue;
    const bool at_lower = p.value <= p.lower + kOnBound * p.scale;
    const bool at_upper = p.value >= p.upper - kOnBound * p.scale;
    if (at_lower && natural_lower(p)) {
      hold(p, p.lower,
           p.lower == 0 ? "the samples push it to 0" : "the samples push it to its floor");
      changed = true;
    } else if (at_lower || at_upper) {
      contradiction = p.name + " runs to its " + (at_lower ? "lower" : "upper") + " bound";
      return false;
    }
  }
  const Eigen::MatrixXd j = jacobian(predict, samples, params);
  // A parameter no sample's prediction depends on first, then the hold order until the rest
  // separate.
  for (size_t i : free_columns(params)) {
    if (!(j.col(static_cast<Eigen::Index>(i)).norm() > 0)) {
      hold(params[i], params[i].hold_value, "no sample's prediction depends on it");
      changed = true;
    }
  }
  for (size_t i : hold_order) {
    if (full_rank(j, free_columns(params))) break;
    if (!params[i].free) continue;
    hold(params[i], params[i].hold_value, "the samples cannot separate it from the others");
    changed = true;
  }
  return changed;
}

void standard_errors(Problem& p, std::vector<SolverParam>& params, size_t samples, double cost,
                     SolveResult& out) {
  const auto cols = free_columns(params);
  if (cols.empty() || samples <= cols.size()) return;
  ceres::Covariance::Options options;
  options.algorithm_type = ceres::DENSE_SVD;
  options.num_threads = 1;
  ceres::Covariance covariance(options);
  std::vector<std::pair<const double*, const double*>> blocks;
  for (size_t i : cols) blocks.emplace_back(&p.x[i], &p.x[i]);
  if (!covariance.Compute(blocks, p.problem.get())) return;
  // Ceres assumes unit-variance residuals; scale by the residuals' own variance.
  const double variance = 2.0 * cost / static_cast<double>(samples - cols.size());
  for (size_t i : cols) {
    double c = 0;
    covariance.GetCovarianceBlock(&p.x[i], &p.x[i], &c);
    params[i].std_error = params[i].scale * std::sqrt(std::max(c, 0.0) * variance);
  }
  out.covariance_ok = true;
}

}  // namespace

SolveResult solve_curve(const Predictor& predict, const std::vector<double>& measured,
                        std::vector<SolverParam>& params, const std::vector<size_t>& hold_order,
                        const std::vector<std::vector<double>>& starts) {
  ORRERY_CHECK(!params.empty() && params.size() <= kMaxParams, "a curve has 1 to 8 parameters");
  ORRERY_CHECK(!measured.empty(), "a curve fit needs samples");
  SolveResult out;
  hold_for_count(measured.size(), params, hold_order);
  for (int round = 0; round < kMaxRounds; ++round) {
    std::vector<std::vector<double>> tries = {{}};
    if (round == 0) tries.insert(tries.end(), starts.begin(), starts.end());
    double best_cost = std::numeric_limits<double>::infinity();
    std::vector<double> best;
    for (const auto& start : tries) {
      std::vector<SolverParam> trial = params;
      for (size_t i = 0; i < start.size() && i < trial.size(); ++i) {
        if (trial[i].free) trial[i].value = std::clamp(start[i], trial[i].lower, trial[i].upper);
      }
      Problem p = build(predict, measured, trial);
      const double cost = solve(p);
      if (cost < best_cost) {
        best_cost = cost;
        best.clear();
        for (size_t i = 0; i < trial.size(); ++i) best.push_back(p.x[i] * trial[i].scale);
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].free) params[i].value = best[i];
    }
    out.cost = best_cost;
    if (!hold_undetermined(predict, measured.size(), params, hold_order, out.contradiction)) break;
  }
  if (!out.contradiction.empty()) return out;
  // The final values, and their covariance, on the final free set.
  Problem p = build(predict, measured, params);
  out.cost = solve(p);
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].free) params[i].value = p.x[i] * params[i].scale;
  }
  standard_errors(p, params, measured.size(), out.cost, out);
  return out;
}

}  // namespace orrery::calibration::detail
