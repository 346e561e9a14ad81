// Time intervals [start, end) in seconds, shared by the executor (a step's time no op covers) and
// calibration (when a rank computed, when its communication was in flight).
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

namespace orrery::base {

using Interval = std::pair<double, double>;  // [start, end)

// The union of `spans` as disjoint intervals in time order (touching ones merged).
inline std::vector<Interval> merge_intervals(std::vector<Interval> spans) {
  std::sort(spans.begin(), spans.end());
  std::vector<Interval> merged;
  for (const auto& s : spans) {
    if (!merged.empty() && s.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, s.second);
    } else {
      merged.push_back(s);
    }
  }
  return merged;
}

}  // namespace orrery::base
