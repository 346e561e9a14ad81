#include "orrery/planner/search.hpp"

#include <cstdio>

#include "orrery/plan/resolved_plan.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <set>

#include "moves.hpp"
#include "orrery/planner/explain.hpp"
#include "spread.hpp"

namespace orrery::planner {
namespace {

using Status = Evaluation::Status;

// Every evaluation the search made, keyed by knob_key; used only by the coordinating thread
// between batches.
class Memo {
 public:
  Memo(const PlanSpace& space, const Engine& engine, const SearchOptions& options,
       const Ranks* ranks, SearchStats& stats)
      : space_(space), engine_(engine), options_(options), ranks_(ranks), stats_(stats) {}

  // Evaluates what is not yet known (checks only, or checks and timing) on the pool; returns the
  // evaluations in the order of `batch`.
  std::vector<const Evaluation*> run(const std::vector<Knobs>& batch, bool timed,
                                     const std::string& phase) {
    std::vector<const Knobs*> todo;
    std::set<std::string> queued;
    for (const Knobs& k : batch) {
      const std::string key = knob_key(k);
      auto it = entries_.find(key);
      const bool known =
          it != entries_.end() && (!timed || it->second.eval.status != Status::kFits);
      if (!known && queued.insert(key).second) todo.push_back(&k);
    }
    const bool reports = options_.progress && (ranks_ == nullptr || ranks_->rank() == 0);
    std::vector<Evaluation> results = detail::evaluate_spread(
        todo.size(), options_.threads, ranks_,
        [&](size_t i) {
          return timed ? evaluate(space_, *todo[i], engine_) : check(space_, *todo[i]);
        },
        [&](int64_t done, int64_t mine) {
          if (reports) options_.progress({phase, done, mine, evaluations_ + done});
        });
    evaluations_ += static_cast<int64_t>(todo.size());
    for (size_t i = 0; i < todo.size(); ++i) record(*todo[i], std::move(results[i]));
    std::vector<const Evaluation*> out;
    for (const Knobs& k : batch) out.push_back(&entries_.at(knob_key(k)).eval);
    return out;
  }

  struct Entry {
    Knobs knobs;
    Evaluation eval;
  };
  const std::map<std::string, Entry>& entries() const { return entries_; }

 private:
  void record(const Knobs& k, Evaluation e) {
    const std::string key = knob_key(k);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      ++stats_.checked;
      if (e.status == Status::kInvalid) ++stats_.invalid;
      if (e.status == Status::kOutOfMemory) ++stats_.out_of_memory;
    }
    if (e.status == Status::kTimed) ++stats_.timed;
    entries_[key] = {k, std::move(e)};
  }

  const PlanSpace& space_;
  const Engine& engine_;
  const SearchOptions& options_;
  const Ranks* ranks_;
  // Checks and timings run so far, for progress: a plan checked in one phase and timed in the
  // next counts twice, so the count never goes back between phases (stats_.checked counts each
  // plan once and did).
  int64_t evaluations_ = 0;
  SearchStats& stats_;
  std::map<std::string, Entry> entries_;
};

RankedPlan ranked(const PlanSpace& space, const Knobs& k, const Evaluation& e) {
  return {k, space.plan(k), e};
}

bool better_timed(const Knobs& a, const Evaluation& ea, const Knobs& b, const Evaluation& eb) {
  if (ea.step_time_s() != eb.step_time_s()) return ea.step_time_s() < eb.step_time_s();
  if (ea.peak_bytes != eb.peak_bytes) return ea.peak_bytes < eb.peak_bytes;
  return knob_key(a) < knob_key(b);
}

// One HSDP shard group for the screening pass: the largest power of two not beyond the ranks of
// one NVLink domain per model replica, below dp.
int64_t screening_group(const PlanSpace& space, const Shape& s) {
  const auto groups = hsdp_groups(s.dp);
  if (groups.empty()) return 0;
  const int64_t target =
      std::max<int64_t>(2, nvlink_domain_size(space.job().cluster) / (s.tp * s.cp));
  int64_t pick = groups.front();
  for (int64_t g : groups) {
    if (g <= target) pick = g;
  }
  return pick;
}

// Screening: for every shape, micro-batch and sharding, the least recomputation that fits, timed.
std::vector<Knobs> screen(const PlanSpace& space, Memo& memo, const std::vector<Shape>& shapes) {
  const auto& o = space.options();
  std::vector<Knobs> checks;
  std::vector<std::pair<size_t, size_t>> groups;  // [first, last) in checks: one recompute ladder
  for (const Shape& s : shapes) {
    for (int64_t mbs : space.micro_batches(s)) {
      for (auto sharding : o.sharding) {
        if (s.dp == 1 && sharding != pb::SHARDING_NONE) continue;
        // HSDP is not searched with per-stage degrees (its group would have to divide every stage's
        // dp).
        if (sharding == pb::SHARDING_HSDP && !s.stage_tp.empty()) continue;
        const int64_t g = sharding == pb::SHARDING_HSDP ? screening_group(space, s) : 0;
        if (sharding == pb::SHARDING_HSDP && g == 0) continue;
        const size_t first = checks.size();
        for (auto r : o.recompute) checks.push_back(space.seed(s, mbs, sharding, g, r));
        groups.emplace_back(first, checks.size());
      }
    }
  }
  const auto evals = memo.run(checks, false, "screen: memory");
  std::vector<Knobs> timing;
  for (const auto& [first, last] : groups) {
    for (size_t i = first; i < last; ++i) {
      if (evals[i]->status == Status::kFits) {
        timing.push_back(checks[i]);
        break;
      }
    }
  }
  memo.run(timing, true, "screen: timing");
  return timing;
}

// Bottleneck-driven hill climbing from `seeds`, all climbers advancing in lockstep so each round
// is one parallel batch.
void local_search(const PlanSpace& space, Memo& memo, std::vector<Knobs> climbers,
                  SearchStats& stats) {
  const detail::MoveGenerator generator(space);
  std::vector<bool> active(climbers.size(), true);
  constexpr int kMaxRounds = 64;
  for (int round = 0; round < kMaxRounds; ++round) {
    if (std::none_of(active.begin(), active.end(), [](bool a) { return a; })) break;
    ++stats.local_rounds;
    std::vector<std::vector<detail::Move>> moves(climbers.size());
    std::vector<Knobs> batch;
    std::vector<std::string> limit(climbers.size());
    for (size_t c = 0; c < climbers.size(); ++c) {
      if (!active[c]) continue;
      const auto& here = memo.entries().at(knob_key(climbers[c])).eval;
      limit[c] = limiting_term(here.result).name;
      if (limit[c].empty()) limit[c] = "compute";
      moves[c] = generator.moves(climbers[c]);
      for (const auto& m : moves[c]) {
        if (std::find(m.targets.begin(), m.targets.end(), limit[c]) != m.targets.end())
          batch.push_back(m.knobs);
      }
    }
    memo.run(batch, true, "local search");
    // Climbers whose targeted moves did not help try every move.
    auto best_move = [&](size_t c, bool targeted_only) -> const Knobs* {
      const Knobs* best = &climbers[c];
      const Evaluation* best_eval = &memo.entries().at(knob_key(climbers[c])).eval;
      for (const auto& m : moves[c]) {
        const bool targeted =
            std::find(m.targets.begin(), m.targets.end(), limit[c]) != m.targets.end();
        if (targeted_only && !targeted) continue;
        const auto& e = memo.entries().at(knob_key(m.knobs)).eval;
        if (e.status == Status::kTimed && better_timed(m.knobs, e, *best, *best_eval))
          best = &m.knobs, best_eval = &e;
      }
      return best == &climbers[c] ? nullptr : best;
    };
    std::vector<const Knobs*> next(climbers.size(), nullptr);
    batch.clear();
    for (size_t c = 0; c < climbers.size(); ++c) {
      if (!active[c]) continue;
      next[c] = best_move(c, true);
      if (next[c] == nullptr) {
        for (const auto& m : moves[c]) batch.push_back(m.knobs);
      }
    }
    memo.run(batch, true, "local search");
    std::set<std::string> positions;
    for (size_t c = 0; c < climbers.size(); ++c) {
      if (!active[c]) continue;
      if (next[c] == nullptr) next[c] = best_move(c, false);
      if (next[c] == nullptr) {
        active[c] = false;
        continue;
      }
      Knobs moved = *next[c];
      climbers[c] = std::move(moved);
      // Two climbers on one plan climb alike from here: keep the first.
      if (!positions.insert(knob_key(climbers[c])).second) active[c] = false;
    }
  }
}

// Seeds: the best screened plan of each of the best `beam` shapes.
std::vector<Knobs> pick_seeds(const Memo& memo, const std::vector<Knobs>& screened, int64_t beam) {
  std::vector<const Knobs*> timed;
  for (const Knobs& k : screened) {
    if (memo.entries().at(knob_key(k)).eval.status == Status::kTimed) timed.push_back(&k);
  }
  std::sort(timed.begin(), timed.end(), [&](const Knobs* a, const Knobs* b) {
    return better_timed(*a, memo.entries().at(knob_key(*a)).eval, *b,
                        memo.entries().at(knob_key(*b)).eval);
  });
  std::vector<Knobs> seeds;
  std::set<Shape> shapes;
  for (const Knobs* k : timed) {
    if (static_cast<int64_t>(seeds.size()) >= beam) break;
    if (shapes.insert(shape_of(*k)).second) seeds.push_back(*k);
  }
  return seeds;
}

std::string rule_of(const std::string& reason) {
  const auto at = reason.find("rule ");
  if (at == std::string::npos) return reason;
  const auto end = reason.find(':', at);
  return reason.substr(at + 5, end == std::string::npos ? std::string::npos : end - at - 5);
}

std::string distinct_key(const Knobs& k) {
  Knobs d = k;
  d.placement.clear();
  d.bucket_bytes = 0;
  d.balanced_split = false;
  d.sp = false;
  d.tp_overlap = false;
  d.a2a_overlap = false;
  d.recompute_every = 0;
  return knob_key(d);
}

void summarize_rejections(const PlanSpace& space, const Memo& memo, SearchResult& out) {
  std::map<std::string, int64_t> rules;
  const Memo::Entry* closest = nullptr;
  for (const auto& [key, e] : memo.entries()) {
    if (e.eval.status == Status::kInvalid) ++rules[rule_of(e.eval.reason)];
    if (e.eval.status != Status::kOutOfMemory) continue;
    const double ratio = e.eval.peak_bytes / e.eval.capacity_bytes;
    if (closest == nullptr || ratio < closest->eval.peak_bytes / closest->eval.capacity_bytes)
      closest = &e;
  }
  for (const auto& r : rules) out.rules_hit.push_back(r);
  std::stable_sort(out.rules_hit.begin(), out.rules_hit.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (closest != nullptr) {
    out.closest_oom_plan = plan_label(ranked(space, closest->knobs, closest->eval));
    out.closest_oom_peak_bytes = closest->eval.peak_bytes;
    out.closest_oom_capacity_bytes = closest->eval.capacity_bytes;
  }
}

// Full recomputation of every N-th layer is not a setting of its own (it would multiply the
// full-recompute settings by log2 of the layers): after an exhaustive pass, the `count` best
// full-recompute plans try N = 2, 4, ... (each halving the layers re-run), as local search's
// moves reach it from any full-recompute plan.
void refine_recompute_every(const PlanSpace& space, Memo& memo, int64_t count) {
  std::vector<std::pair<const Knobs*, const Evaluation*>> full;
  for (const auto& [key, e] : memo.entries()) {
    if (e.eval.status == Status::kTimed && e.knobs.recompute == pb::RECOMPUTE_FULL &&
        e.knobs.recompute_every == 0)
      full.emplace_back(&e.knobs, &e.eval);
  }
  std::sort(full.begin(), full.end(), [](const auto& a, const auto& b) {
    return better_timed(*a.first, *a.second, *b.first, *b.second);
  });
  if (static_cast<int64_t>(full.size()) > count) full.resize(static_cast<size_t>(count));
  std::vector<Knobs> batch;
  for (const auto& [k, e] : full) {
    for (int64_t n = 2; n <= space.job().model.num_layers(); n *= 2) {
      batch.push_back(*k);
      batch.back().recompute_every = n;
    }
  }
  memo.run(batch, true, "recompute every");
}

}  // namespace

bool better(const RankedPlan& a, const RankedPlan& b) {
  return better_timed(a.knobs, a.eval, b.knobs, b.eval);
}

std::vector<Knobs> all_points(const PlanSpace& space) {
  std::vector<Knobs> out;
  for (const Shape& s : space.shapes()) {
    auto more = space.settings(s);
    out.insert(out.end(), std::make_move_iterator(more.begin()),
               std::make_move_iterator(more.end()));
  }
  return out;
}

SearchResult search(const PlanSpace& space, const Engine& engine, const SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  SearchResult out;
  const bool own_world =
      options.ranks == nullptr && options.use_mpi_world && mpi_world() != nullptr;
  const Ranks* ranks = own_world ? mpi_world() : options.ranks;
  Memo memo(space, engine, options, ranks, out.stats);
  const auto shapes = space.shapes();
  out.stats.shapes = static_cast<int64_t>(shapes.size());
  for (const Shape& s : shapes)
    out.stats.space_size += static_cast<int64_t>(space.settings(s).size());
  out.stats.exhaustive =
      options.force_exhaustive || out.stats.space_size <= options.exhaustive_limit;
  if (out.stats.exhaustive) {
    memo.run(all_points(space), true, "exhaustive");
    refine_recompute_every(space, memo, options.beam);
  } else {
    const auto screened = screen(space, memo, shapes);
    local_search(space, memo, pick_seeds(memo, screened, options.beam), out.stats);
  }
  std::vector<RankedPlan> all;
  for (const auto& [key, e] : memo.entries()) {
    if (e.eval.status == Status::kTimed) all.push_back(ranked(space, e.knobs, e.eval));
  }
  std::sort(all.begin(), all.end(), better);
  std::set<std::string> seen;
  for (auto& p : all) {
    if (options.distinct && !seen.insert(distinct_key(p.knobs)).second) continue;
    out.ranked.push_back(std::move(p));
  }
  if (options.rerank != nullptr && options.rerank_k > 0) {
    const size_t k = std::min(out.ranked.size(), static_cast<size_t>(options.rerank_k));
    out.ranked.resize(k);
    double work = 0;
    std::vector<double> works;
    for (const auto& p : out.ranked) {
      works.push_back(options.rerank->work(
          plan::resolve_plan(space.plan(p.knobs), space.job().model, space.job().cluster)));
      work += works.back();
    }
    if (options.rerank_budget > 0 && work > options.rerank_budget) {
      // All or nothing: a ranking mixing engines would compare unlike numbers.
      char why[160];
      std::snprintf(why, sizeof why,
                    "the best %zu plans need %.0f units of %s work, over the budget of %.0f", k,
                    work, options.rerank->name().c_str(), options.rerank_budget);
      out.rerank_skipped = why;
    } else {
      // Longest first, so that the workers finish together (the runs differ by 10x in cost);
      // results go back by index, so the order changes nothing but the wall time.
      std::vector<size_t> order(k);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return works[a] > works[b]; });
      std::vector<Evaluation> again = detail::evaluate_spread(
          k, options.threads, ranks,
          [&](size_t i) { return evaluate(space, out.ranked[order[i]].knobs, *options.rerank); },
          nullptr);
      for (size_t i = 0; i < k; ++i) out.ranked[order[i]].eval = std::move(again[i]);
      std::sort(out.ranked.begin(), out.ranked.end(), better);
    }
  }
  if (static_cast<int64_t>(out.ranked.size()) > options.top_k)
    out.ranked.resize(static_cast<size_t>(options.top_k));
  summarize_rejections(space, memo, out);
  // Every rank holds the whole result now; ranks other than 0 leave here.
  if (own_world) end_mpi_world();
  out.stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace orrery::planner
