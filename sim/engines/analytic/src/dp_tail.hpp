// The data-parallel tail of a step in the analytic engine: gradient buckets as the lowering fills
// them, and the serialized reduction stream after the last backward.
#pragma once

#include <utility>
#include <vector>

namespace orrery::sim::detail {

// The serialized DP stream after the last backward: bucket i becomes ready when the window's
// compute (the last micro-batch's backward, `window` seconds alone) has done (i + 1) / n of its
// work, or all of it without overlap, `late[i]` later when its group's slowest member launches
// it late (rank skew), and then waits for the stream. While a bucket is in flight beside that
// compute, the compute runs s times slower and the bucket sc times slower (see beside()); the
// walk goes from one event (a share of the compute reached, a launch, a bucket's end) to the
// next. Returns the time past the window's end, the compute's slowing included.
double dp_tail(const std::vector<double>& buckets, double window, bool overlap,
               const std::vector<double>& late = {}, double s = 1, double sc = 1);

// Buckets as the lowering fills them: parts in backward order (reverse of `parts`), whole parts
// at a time, closed once they hold at least `bucket_params`.
std::vector<double> fill_buckets(const std::vector<std::pair<double, double>>& parts, bool expert,
                                 double bucket_params);

}  // namespace orrery::sim::detail
