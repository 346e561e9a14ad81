// Reading one optional spec field with its default, recording which was used (for the output).
#pragma once

#include <string>
#include <vector>

#include "orrery/base/units.hpp"
#include "orrery/sim/failure_model.hpp"

namespace orrery::sim::detail {

inline double take_setting(std::vector<Setting>& out, std::string field, bool has, double value,
                           double fallback, base::units::Unit unit, const char* source) {
  const double v = has ? value : fallback;
  out.push_back({std::move(field), v, unit, has ? "cluster file" : source});
  return v;
}

}  // namespace orrery::sim::detail
