// The degrees of a published plan as the benchmarks print them: "tp4 pp8 dp336 vp12" (cp and ep
// when above 1). One place, so the des and planner benchmarks' tables name plans alike.
#pragma once

#include <string>

#include "orrery/pb/plan.pb.h"

namespace orrery::bench {

inline std::string degrees_label(const pb::Plan& p) {
  const auto& q = p.parallel();
  std::string s = "tp" + std::to_string(q.tp()) + " pp" + std::to_string(q.pp()) + " dp" +
                  std::to_string(q.dp());
  if (q.cp() > 1) s += " cp" + std::to_string(q.cp());
  if (q.ep() > 1) s += " ep" + std::to_string(q.ep());
  if (q.vp() > 1) s += " vp" + std::to_string(q.vp());
  return s;
}

}  // namespace orrery::bench
