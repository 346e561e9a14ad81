// Degradation episodes from the cluster spec, counted over the plan's footprint as failures are
// (docs/goodput.md, "Degradations").
#include <cstdint>
#include <string>
#include <vector>

#include "orrery/sim/goodput.hpp"

namespace orrery::sim {
namespace {

// The footprint's count of `component`; the cluster reader admits only these names.
int64_t count_of(const std::string& component, const Footprint& fp) {
  if (component == "gpu") return fp.gpus;
  if (component == "host") return fp.hosts;
  if (component == "nic") return fp.nics;
  if (component == "link") return fp.links;
  return fp.switches;
}

}  // namespace

std::vector<Degradation> degradations(const pb::ClusterSpec& cluster, const Footprint& fp) {
  std::vector<Degradation> out;
  for (const pb::Degradation& d : cluster.failures().degradations()) {
    Degradation e;
    e.component = d.component();
    e.count = count_of(d.component(), fp);
    e.mean_interval_s = d.mean_interval_s();
    e.rate_per_s = static_cast<double>(e.count) / d.mean_interval_s();
    e.step_ratio = d.step_ratio();
    e.detect_steps = d.has_detect_steps() ? d.detect_steps() : 0;
    e.duration_s = d.has_duration_s() ? d.duration_s() : 0;
    out.push_back(e);
  }
  return out;
}

}  // namespace orrery::sim
