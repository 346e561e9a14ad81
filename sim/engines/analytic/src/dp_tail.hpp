// The data-parallel tail of a step in the analytic engine: gradient buckets as the lowering fills
// them, and the serialized reduction stream after the last backward.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace orrery::sim::detail {

// The serialized DP stream after the last backward: bucket i becomes ready when the window's
// compute (the last micro-batch's backward, `window` seconds alone) has done (i + 1) / n of its
// work, or all of it without overlap, `late[i]` later when its group's slowest member launches
// it late (rank skew), and then waits for the stream. While a bucket is in flight beside that
// compute, the compute runs s times slower and the bucket sc times slower (see beside()); the
// walk goes from one event (a share of the compute reached, a launch, a bucket's end) to the
// next. Returns the time past the window's end, the compute's slowing included. `shares`, when
// given, replaces (i + 1) / n: bucket i is ready once the compute has done shares[i] of the
// window (ascending), as under interleaving, where each chunk's buckets wait for that chunk's
// last backward (chunk_shares).
double dp_tail(const std::vector<double>& buckets, double window, bool overlap,
               const std::vector<double>& late = {}, double s = 1, double sc = 1,
               const std::vector<double>& shares = {});

// Interleaved pipelines (Megatron's overlap_grad_reduce per model chunk): the last micro-batch's
// backward passes run chunk vp - 1 first, and after chunk c's there are still c x pp chunk
// backwards to run (the last pp micro-batches pass through every lower chunk), so the window
// opens with chunk vp - 1's last backward and holds 1 + (vp - 1) pp chunk backwards. Chunk c's
// n_c buckets (in issue order) are ready at shares ((vp - 1 - c) pp + (k + 1) / n_c) / (1 +
// (vp - 1) pp), k = 0 .. n_c - 1. `chunk`: each bucket's chunk (that of its last unit).
std::vector<double> chunk_shares(const std::vector<int64_t>& chunk, int64_t pp, int64_t vp);

// The chunk of each bucket fill_buckets makes (that of its last part, in backward order).
std::vector<int64_t> bucket_chunks(const std::vector<std::pair<double, double>>& parts,
                                   const std::vector<int64_t>& part_chunk, bool expert,
                                   double bucket_params);

// Buckets as the lowering fills them: parts in backward order (reverse of `parts`), whole parts
// at a time, closed once they hold at least `bucket_params`.
std::vector<double> fill_buckets(const std::vector<std::pair<double, double>>& parts, bool expert,
                                 double bucket_params);

}  // namespace orrery::sim::detail
