#include "orrery/calibration/skew_count.hpp"

#include <algorithm>
#include <map>

#include "orrery/plan/lower.hpp"

namespace orrery::calibration::detail {

std::vector<double> compute_since_group_wait(
    const pb::RankGraph& rank, const std::function<double(const pb::ExecNode&)>& compute_s) {
  std::vector<double> out(static_cast<size_t>(rank.nodes_size()), -1);
  std::vector<int> order;
  for (int i = 0; i < rank.nodes_size(); ++i) {
    if (rank.nodes(i).has_start_s() && rank.nodes(i).has_duration_s()) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return rank.nodes(a).start_s() < rank.nodes(b).start_s(); });
  double computed = 0,
         stream_end = -1;               // compute so far; the end of the compute stream's last node
  std::map<int64_t, double> waited_at;  // per group: `computed` when the rank last waited on it
  for (int i : order) {
    const pb::ExecNode& n = rank.nodes(i);
    if (n.stream() == plan::kCompute) {
      for (int64_t d : n.data_deps()) {
        if (d < 0 || d >= rank.nodes_size()) continue;
        const pb::ExecNode& dep = rank.nodes(static_cast<int>(d));
        if (dep.kind() == pb::NODE_KIND_COLLECTIVE && dep.stream() != plan::kCompute &&
            dep.has_duration_s() && dep.start_s() + dep.duration_s() > stream_end)
          waited_at[dep.process_group()] = computed;
      }
      stream_end = std::max(stream_end, n.start_s() + n.duration_s());
    }
    if (n.kind() == pb::NODE_KIND_COMPUTE) computed += compute_s(n);
    if (n.kind() != pb::NODE_KIND_COLLECTIVE) continue;
    out[static_cast<size_t>(i)] = computed - waited_at[n.process_group()];
    if (n.stream() == plan::kCompute) waited_at[n.process_group()] = computed;
  }
  return out;
}

}  // namespace orrery::calibration::detail
