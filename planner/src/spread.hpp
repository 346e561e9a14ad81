// One batch of candidate evaluations, on the thread pool of this process and, when `ranks` is
// given, spread over ranks: candidate i is evaluated on rank i % size, then every rank receives
// every evaluation (serialized, all-gathered) so the batch's result is the same on all ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "orrery/planner/evaluator.hpp"
#include "orrery/planner/ranks.hpp"

namespace orrery::planner::detail {

// Evaluations of [0, n) in index order. `evaluate(i)` runs on `threads` threads of this rank;
// `on_done(done, mine)` after each of this rank's `mine` evaluations (serialized).
std::vector<Evaluation> evaluate_spread(size_t n, int threads, const Ranks* ranks,
                                        const std::function<Evaluation(size_t)>& evaluate,
                                        const std::function<void(int64_t, int64_t)>& on_done);

// The wire format of a list of evaluations (exact: doubles are copied bit for bit, the result
// as protobuf bytes). decode() of a malformed buffer is a bug (ORRERY_CHECK).
std::string encode(const std::vector<const Evaluation*>& evaluations);
std::vector<Evaluation> decode(const std::string& bytes);

}  // namespace orrery::planner::detail
