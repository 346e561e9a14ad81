#include "moe_capacity.hpp"

#include <cmath>

#include "orrery/base/error.hpp"

namespace orrery::executor {

int64_t expert_capacity(double factor, int64_t tokens, int64_t top_k, int64_t experts) {
  const double mean = static_cast<double>(tokens * top_k) / static_cast<double>(experts);
  return static_cast<int64_t>(std::ceil(mean * factor));
}

namespace {

// Each copy's place among the copies of its (slice, expert) when they are ranked by weight,
// highest first (ties: the earlier copy): 0 for the best.
torch::Tensor rank_by_weight(const torch::Tensor& key, const torch::Tensor& weight, int64_t keys) {
  const torch::Tensor by_weight = std::get<1>(torch::sort(weight, true, 0, true));
  const torch::Tensor ranked = by_weight.index_select(
      0, std::get<1>(torch::sort(key.index_select(0, by_weight), true, 0, false)));
  const torch::Tensor counts = torch::bincount(key, {}, keys);
  const torch::Tensor starts = counts.cumsum(0) - counts;
  const torch::Tensor place =
      torch::arange(key.numel(), key.options()) - torch::repeat_interleave(starts, counts);
  return torch::empty_like(place).scatter_(0, ranked, place);
}

}  // namespace

RoutedCopies route_copies(const torch::Tensor& expert, const torch::Tensor& weight, int64_t experts,
                          int64_t top_k, int64_t seq, int64_t token_groups,
                          const MoeCapacity& capacity) {
  ORRERY_CHECK(token_groups >= 1 && seq % token_groups == 0,
               "token groups must divide the sequence");
  const int64_t copies = expert.numel();
  torch::Tensor kept = torch::arange(copies, expert.options());
  int64_t per_group = 0;
  if (capacity.factor > 0) {
    const int64_t tokens = copies / top_k;
    per_group = expert_capacity(capacity.factor, tokens / token_groups, top_k, experts);
    // Copies are token-major over whole sequences: a copy's token position is (c / k) mod seq.
    const torch::Tensor position = torch::remainder(torch::div(kept, top_k, "floor"), seq);
    const torch::Tensor group = torch::div(position, seq / token_groups, "floor");
    const torch::Tensor key = group * experts + expert;
    const torch::Tensor place = rank_by_weight(key, weight.detach(), token_groups * experts);
    kept = torch::nonzero(place < per_group).reshape({-1});
  }
  RoutedCopies r;
  const torch::Tensor kept_expert = expert.index_select(0, kept);
  r.order = kept.index_select(0, std::get<1>(torch::sort(kept_expert, true, 0, false)));
  r.rows = torch::bincount(kept_expert, {}, experts);
  if (!capacity.pad) return r;
  ORRERY_CHECK(capacity.factor > 0, "padding needs a capacity");
  const int64_t per_expert = per_group * token_groups;
  const torch::Tensor sorted_expert = expert.index_select(0, r.order);
  const torch::Tensor starts = r.rows.cumsum(0) - r.rows;
  r.slot = sorted_expert * per_expert + torch::arange(r.order.numel(), r.order.options()) -
           torch::repeat_interleave(starts, r.rows);
  r.rows = torch::full({experts}, per_expert, r.rows.options());
  r.padded_rows = experts * per_expert;
  return r;
}

}  // namespace orrery::executor
