#include "orrery/plan/stage_redistribution.hpp"

#include <algorithm>

namespace orrery::plan {

std::vector<StageTransfer> Redistribution::sends_of(int64_t rank) const {
  std::vector<StageTransfer> out;
  for (const auto& t : transfers) {
    if (t.from == rank) out.push_back(t);
  }
  return out;
}

std::vector<StageTransfer> Redistribution::receives_of(int64_t rank) const {
  std::vector<StageTransfer> out;
  for (const auto& t : transfers) {
    if (t.to == rank) out.push_back(t);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const StageTransfer& a, const StageTransfer& b) { return a.from < b.from; });
  return out;
}

Redistribution redistribute(const ResolvedPlan& plan, const RankLayout& layout, int64_t from_stage,
                            int64_t to_stage) {
  const Degrees& x = plan.stage(from_stage);
  const Degrees& y = plan.stage(to_stage);
  const int64_t batch = plan.micro_batch_size * plan.degrees.dp;  // sequences per micro-batch
  const double per_sequence = static_cast<double>(plan.seq_len) *
                              static_cast<double>(plan.model.hidden_size()) *
                              plan.precision.activation_bytes;
  const bool sp = plan.sequence_parallel();
  Redistribution r;
  for (int64_t j = 0; j < y.dp; ++j) {
    const int64_t lo = j * batch / y.dp, hi = (j + 1) * batch / y.dp;
    for (int64_t i = 0; i < x.dp; ++i) {
      const int64_t n = std::min(hi, (i + 1) * batch / x.dp) - std::max(lo, i * batch / x.dp);
      if (n <= 0) continue;
      const double bytes = static_cast<double>(n) * per_sequence;
      for (int64_t k = 0; k < y.tp; ++k) {
        const int64_t to = layout.rank({k, 0, j, to_stage});
        if (!sp) {
          r.transfers.push_back(
              {layout.rank({k % x.tp, 0, i, from_stage}), to, bytes / static_cast<double>(y.tp)});
          continue;
        }
        // Token ranges in units of 1 / (tp_x tp_y): sender a holds [a tp_y, (a + 1) tp_y),
        // receiver k needs [k tp_x, (k + 1) tp_x).
        for (int64_t a = 0; a < x.tp; ++a) {
          const int64_t overlap =
              std::min((a + 1) * y.tp, (k + 1) * x.tp) - std::max(a * y.tp, k * x.tp);
          if (overlap <= 0) continue;
          r.transfers.push_back(
              {layout.rank({a, 0, i, from_stage}), to,
               bytes * static_cast<double>(overlap) / static_cast<double>(x.tp * y.tp)});
        }
      }
    }
  }
  std::sort(r.transfers.begin(), r.transfers.end(),
            [](const StageTransfer& a, const StageTransfer& b) {
              return a.from != b.from ? a.from < b.from : a.to < b.to;
            });
  if (!sp && y.tp > 1) r.gather_bytes = static_cast<double>(batch / y.dp) * per_sequence;
  return r;
}

}  // namespace orrery::plan
