// Pipeline transfers between stages of different shapes (ResolvedPlan::stage_degrees): which
// rank sends which slice of a micro-batch's hidden states (or their gradients) to which rank.
//
// The model (Megatron's scatter/gather p2p optimization, generalized to differing tp and dp):
// a pipeline micro-batch is micro_batch_size x dp sequences; the sending stage's replica i holds
// the consecutive sequences [i B / dp_x, (i + 1) B / dp_x), the receiving stage's replica j needs
// [j B / dp_y, (j + 1) B / dp_y), so replica j gets its sequences from every sender replica that
// holds some of them. Inside a replica, receiving TP rank k takes the k-th 1/tp_y slice of those
// sequences' hidden states: without sequence parallelism every sending TP rank holds them all
// and rank k % tp_x sends it (spreading the sends over the sender's TP group), then the
// receivers all-gather the slices in their TP group (each TP rank needs the full activations);
// with sequence parallelism the slice is a token range, sent by the sending TP ranks whose token
// ranges overlap it, and no all-gather follows (the receiver needs only its tokens).
// Uniform plans never come here: their stages exchange whole tensors rank to rank.
#pragma once

#include <cstdint>
#include <vector>

#include "orrery/plan/rank_layout.hpp"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::plan {

struct StageTransfer {
  int64_t from = 0, to = 0;  // ranks
  double bytes = 0;
};

struct Redistribution {
  // Sorted by (from, to): a sender's sends are in receiver order; a receiver takes its
  // receives in sender order (receives_of), which keeps blocking transfers free of deadlock.
  std::vector<StageTransfer> transfers;
  // Receivers all-gather their slices in their TP group: the all-gather's output bytes (one
  // replica's micro-batch of hidden states), 0 when no all-gather follows.
  double gather_bytes = 0;

  std::vector<StageTransfer> sends_of(int64_t rank) const;
  std::vector<StageTransfer> receives_of(int64_t rank) const;
};

// One micro-batch's hidden states (forward: from < to) or their gradients (backward) moving
// from pipeline rank `from_stage` to the adjacent `to_stage`.
Redistribution redistribute(const ResolvedPlan& plan, const RankLayout& layout, int64_t from_stage,
                            int64_t to_stage);

}  // namespace orrery::plan
