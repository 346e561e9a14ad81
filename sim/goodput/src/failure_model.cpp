#include "orrery/sim/failure_model.hpp"

#include <cmath>

#include "failure_defaults.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "settings.hpp"

namespace orrery::sim {
namespace {

constexpr const char* kNodeStudy = "default: Meta RSC node failure rate x Llama 3 cause share";

struct Collector {
  FailureRates& out;

  // The spec's value when it has one, the default otherwise, recorded either way.
  double take(const std::string& name, bool has, double value, double fallback,
              base::units::Unit unit, const char* source) {
    return detail::take_setting(out.settings, "failures." + name, has, value, fallback, unit,
                                source);
  }

  void component(const char* name, int64_t count, bool has, double value, double fallback,
                 const char* source, FailureCost cost, bool job_wide = false) {
    const double mtbf = take(std::string(name) + "_mtbf_s", has, value, fallback,
                             base::units::Unit::kSeconds, source);
    const double rate = static_cast<double>(count) / mtbf;
    out.components.push_back({name, count, mtbf, rate, cost, job_wide});
    out.total_rate_per_s += rate;
  }
};

void check_fraction(const std::string& where, const std::string& field, double v, double lo,
                    double hi) {
  if (!(v >= lo && v <= hi)) {
    throw base::InputError(where, 0, field,
                           "must be between " + base::units::number(lo) + " and " +
                               base::units::number(hi) + ", got " + base::units::number(v));
  }
}

}  // namespace

FailureRates failure_rates(const pb::ClusterSpec& cluster, const Footprint& fp,
                           const std::string& where) {
  namespace d = defaults;
  const pb::FailureModel& s = cluster.failures();
  FailureRates r;
  Collector c{r};
  const auto lost = FailureCost::kNodeLost;
  const auto in_place = FailureCost::kRestartInPlace;
  c.component("gpu", fp.gpus, s.has_gpu_mtbf_s(), s.gpu_mtbf_s(), d::kGpuMtbfS, kNodeStudy, lost);
  c.component("hbm", fp.gpus, s.has_hbm_mtbf_s(), s.hbm_mtbf_s(), d::kHbmMtbfS, kNodeStudy, lost);
  c.component("host", fp.hosts, s.has_host_mtbf_s(), s.host_mtbf_s(), d::kHostMtbfS, kNodeStudy,
              lost);
  c.component("nic", fp.nics, s.has_nic_mtbf_s(), s.nic_mtbf_s(), d::kNicMtbfS, kNodeStudy, lost);
  c.component("link", fp.links, s.has_link_mtbf_s(), s.link_mtbf_s(), d::kLinkMtbfS,
              "default: Alibaba HPN, 0.057% of links a month", in_place);
  c.component("switch", fp.switches, s.has_switch_mtbf_s(), s.switch_mtbf_s(), d::kSwitchMtbfS,
              "default: Alibaba HPN, 0.051% of switches a month", in_place, true);
  c.component("software", fp.hosts, s.has_software_mtbf_s(), s.software_mtbf_s(), d::kSoftwareMtbfS,
              kNodeStudy, in_place);
  c.component("hang", fp.hosts, s.has_hang_mtbf_s(), s.hang_mtbf_s(), d::kHangMtbfS, kNodeStudy,
              FailureCost::kHang);
  r.hang_detection_s =
      c.take("hang_detection_s", s.has_hang_detection_s(), s.hang_detection_s(), d::kHangDetectionS,
             base::units::Unit::kSeconds, "default: PyTorch NCCL watchdog timeout");
  r.straggler_fraction =
      c.take("straggler_fraction", s.has_straggler_fraction(), s.straggler_fraction(),
             d::kStragglerFraction, base::units::Unit::kNone, "default: no stragglers");
  r.straggler_slowdown =
      c.take("straggler_slowdown", s.has_straggler_slowdown(), s.straggler_slowdown(),
             d::kStragglerSlowdown, base::units::Unit::kNone, "default: no stragglers");
  check_fraction(where, "failures.straggler_fraction", r.straggler_fraction, 0, 1);
  if (!(r.straggler_slowdown >= 1)) {
    throw base::InputError(where, 0, "failures.straggler_slowdown",
                           "a straggler is slower: must be at least 1, got " +
                               base::units::number(r.straggler_slowdown));
  }
  return r;
}

double straggler_step_factor(double fraction, double slowdown, int64_t gpus) {
  // P(at least one straggler) = 1 - (1 - p)^n, computed stably for tiny p and large n.
  const double any = -std::expm1(static_cast<double>(gpus) * std::log1p(-fraction));
  return 1 + (slowdown - 1) * any;
}

}  // namespace orrery::sim
