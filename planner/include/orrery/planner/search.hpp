// The search: exhaustive where the space is small; otherwise a screening pass over every shape
// followed by memoized, bottleneck-driven local search from the best screened plans. Every
// candidate is checked against the rules and memory before it is timed; only plans that fit are
// ranked. Candidates are evaluated by a std::thread pool in batches whose results are consumed in
// a fixed order, so the ranking is the same bytes for any thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "orrery/planner/evaluator.hpp"
#include "orrery/planner/plan_space.hpp"
#include "orrery/planner/ranks.hpp"

namespace orrery::planner {

struct Progress {
  std::string phase;  // "screen: memory", "screen: timing", "local search", "exhaustive", "re-rank"
  int64_t done = 0, total = 0;  // within the current batch
  int64_t evaluated = 0;        // checks and timings so far, all phases: never decreases
};

struct SearchOptions {
  int threads = 1;
  int64_t top_k = 5;
  // The whole space is evaluated when it has at most this many points (or when forced).
  int64_t exhaustive_limit = 4000;
  bool force_exhaustive = false;
  // Plans the local search starts from (the best screened ones, one per shape at most).
  int64_t beam = 16;
  // Rank only one plan per (degrees, micro-batch, sharding, recompute); the others differ in
  // buckets, placement or layer split only and are reported as part of the winner's variants.
  bool distinct = true;
  // Optional second engine that re-ranks the best `rerank_k` plans (e.g. des).
  const Engine* rerank = nullptr;
  int64_t rerank_k = 0;
  // Most work (Engine::work units) the re-ranking may cost; when the best plans together need
  // more, the first engine's ranking stands (SearchResult::rerank_skipped says so). 0: no limit.
  // Decided before any re-ranking run, from the plans alone, so the result never depends on how
  // fast the machine is.
  double rerank_budget = 0;
  // Called on the worker threads (serialized) after each evaluation; on rank 0 only when the
  // search is spread over ranks (then done/total count rank 0's share of the batch).
  std::function<void(const Progress&)> progress;
  // Ranks to spread candidate evaluation over (ranks.hpp); the result is the same bytes for any
  // number of ranks. When unset and `use_mpi_world`, the MPI world if this process was started by
  // mpirun: the search then ends it, ranks other than 0 leave the process (exit status 0) and
  // only rank 0 returns from search().
  const Ranks* ranks = nullptr;
  bool use_mpi_world = true;
};

struct RankedPlan {
  Knobs knobs;
  pb::Plan plan;
  Evaluation eval;  // kTimed; result from the re-ranking engine when one ran
};

struct SearchStats {
  bool exhaustive = false;
  int64_t space_size = 0;  // points of the full space (shapes x settings)
  int64_t shapes = 0;
  int64_t checked = 0;  // candidates resolved and memory-checked
  int64_t invalid = 0;  // rejected by a rule
  int64_t out_of_memory = 0;
  int64_t timed = 0;  // simulated by the engine
  int64_t local_rounds = 0;
  double seconds = 0;  // wall time (not part of deterministic output)
};

struct SearchResult {
  std::vector<RankedPlan> ranked;  // best first
  SearchStats stats;
  // The rejected plan closest to fitting in memory ("needs 81.2 GB of 80 GB"), when any.
  std::string closest_oom_plan;
  double closest_oom_peak_bytes = 0, closest_oom_capacity_bytes = 0;
  // The most frequent rule violations, most frequent first, with counts.
  std::vector<std::pair<std::string, int64_t>> rules_hit;
  // Why the re-ranking engine's ranking was not used, when it was asked for and failed (its
  // time budget ran out): the ranking is then the first engine's.
  std::string rerank_skipped;
};

SearchResult search(const PlanSpace& space, const Engine& engine, const SearchOptions& options);

// The full space in enumeration order (for tests and --exhaustive).
std::vector<Knobs> all_points(const PlanSpace& space);

// Strict total order of timed plans: step time, then peak memory, then the knob key.
bool better(const RankedPlan& a, const RankedPlan& b);

}  // namespace orrery::planner
