// Pipeline schedules (GPipe, 1F1B, interleaved 1F1B) over a grid of (pp, vp, M): completeness,
// order, warm-up and in-flight counts, and that all ranks' orders together run without deadlock.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "orrery/plan/pipeline_schedule.hpp"

namespace orrery::sim {
namespace {

struct Case {
  pb::PipelineSchedule schedule;
  int64_t pp, vp, m;
};

std::vector<Case> grid() {
  std::vector<Case> out;
  for (int64_t pp : {1, 2, 3, 4, 8}) {
    for (int64_t m : {1, 2, 3, 4, 7, 8, 16}) {
      out.push_back({pb::PIPELINE_SCHEDULE_GPIPE, pp, 1, m});
      out.push_back({pb::PIPELINE_SCHEDULE_ONE_F_ONE_B, pp, 1, m});
      // Interleaving needs vp >= 2 and M a multiple of pp (resolve_plan's rules).
      if (pp > 1 && m % pp == 0) {
        for (int64_t vp : {2, 3, 4})
          out.push_back({pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B, pp, vp, m});
      }
    }
  }
  return out;
}

std::string name(const Case& c) {
  return pb::PipelineSchedule_Name(c.schedule) + " pp=" + std::to_string(c.pp) +
         " vp=" + std::to_string(c.vp) + " M=" + std::to_string(c.m);
}

TEST(PipelineSchedule, EveryMicroBatchAndChunkRunsForwardOnceThenBackwardOnce) {
  int cases = 0;
  for (const Case& c : grid()) {
    for (int64_t rank = 0; rank < c.pp; ++rank) {
      SCOPED_TRACE(name(c) + " rank=" + std::to_string(rank));
      const auto order = plan::pipeline_order(c.schedule, c.pp, c.vp, rank, c.m);
      ASSERT_EQ(order.size(), static_cast<size_t>(2 * c.m * c.vp));
      std::map<std::pair<int64_t, int64_t>, int> fwd, bwd;
      for (const plan::PipeStep& s : order) {
        ASSERT_GE(s.micro_batch, 0);
        ASSERT_LT(s.micro_batch, c.m);
        ASSERT_GE(s.chunk, 0);
        ASSERT_LT(s.chunk, c.vp);
        const auto key = std::make_pair(s.micro_batch, s.chunk);
        if (s.forward) {
          ++fwd[key];
        } else {
          EXPECT_EQ(fwd[key], 1) << "backward of mb " << s.micro_batch << " chunk " << s.chunk
                                 << " before its forward";
          ++bwd[key];
        }
      }
      EXPECT_EQ(fwd.size(), static_cast<size_t>(c.m * c.vp));
      EXPECT_EQ(bwd.size(), static_cast<size_t>(c.m * c.vp));
      for (const auto& [k, n] : fwd) EXPECT_EQ(n, 1);
      for (const auto& [k, n] : bwd) EXPECT_EQ(n, 1);
    }
    ++cases;
  }
  EXPECT_GT(cases, 80);
}

// Leading forwards before the first backward.
int64_t warmup(const std::vector<plan::PipeStep>& order) {
  int64_t n = 0;
  while (n < static_cast<int64_t>(order.size()) && order[static_cast<size_t>(n)].forward) ++n;
  return n;
}

// Most (micro-batch, chunk) forwards done whose backward has not run: activations held at once.
int64_t peak_in_flight(const std::vector<plan::PipeStep>& order) {
  int64_t live = 0, peak = 0;
  for (const plan::PipeStep& s : order) {
    live += s.forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

TEST(PipelineSchedule, OneFOneBWarmsUpWithPpMinusRankMinusOneForwards) {
  for (const Case& c : grid()) {
    if (c.schedule != pb::PIPELINE_SCHEDULE_ONE_F_ONE_B) continue;
    for (int64_t rank = 0; rank < c.pp; ++rank) {
      SCOPED_TRACE(name(c) + " rank=" + std::to_string(rank));
      const auto order = plan::pipeline_order(c.schedule, c.pp, c.vp, rank, c.m);
      // PipeDream-flush: pp - rank - 1 warm-up forwards, then the steady state starts with one
      // more forward before the first backward; with M too small, all M forwards first.
      const int64_t expected_warmup = std::min(c.pp - rank - 1, c.m);
      const int64_t leading = std::min(expected_warmup + 1, c.m);
      EXPECT_EQ(warmup(order), leading);
      // In flight: pp - rank (Narayanan et al. 2021: stage p stashes pp - p activations).
      EXPECT_EQ(peak_in_flight(order), std::min(c.pp - rank, c.m));
      // Steady state alternates F B F B ... after the warm-up, then only backwards drain.
      for (int64_t k = 0; k < 2 * (c.m - expected_warmup); ++k) {
        EXPECT_EQ(order[static_cast<size_t>(expected_warmup + k)].forward, k % 2 == 0)
            << "step " << k;
      }
      // Backwards run in micro-batch order.
      int64_t next = 0;
      for (const auto& s : order) {
        if (!s.forward) {
          EXPECT_EQ(s.micro_batch, next++);
        }
      }
    }
  }
}

TEST(PipelineSchedule, GPipeHoldsEveryMicroBatch) {
  const auto order = plan::pipeline_order(pb::PIPELINE_SCHEDULE_GPIPE, 4, 1, 2, 6);
  // F0..F5 then B0..B5: all 6 in flight at once on every rank.
  EXPECT_EQ(warmup(order), 6);
  EXPECT_EQ(peak_in_flight(order), 6);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(order[static_cast<size_t>(i)].micro_batch, i);
    EXPECT_EQ(order[static_cast<size_t>(6 + i)].micro_batch, i);
    EXPECT_FALSE(order[static_cast<size_t>(6 + i)].forward);
  }
}

TEST(PipelineSchedule, InterleavedWarmUpAndInFlightFollowMegatron) {
  for (const Case& c : grid()) {
    if (c.schedule != pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B) continue;
    for (int64_t rank = 0; rank < c.pp; ++rank) {
      SCOPED_TRACE(name(c) + " rank=" + std::to_string(rank));
      const auto order = plan::pipeline_order(c.schedule, c.pp, c.vp, rank, c.m);
      // Megatron: (pp - rank - 1) x 2 + (vp - 1) x pp warm-up micro-steps (capped at M vp), then
      // one more forward before the first backward.
      const int64_t total = c.m * c.vp;
      const int64_t w = std::min((c.pp - rank - 1) * 2 + (c.vp - 1) * c.pp, total);
      EXPECT_EQ(warmup(order), std::min(w + 1, total));
      EXPECT_EQ(peak_in_flight(order), std::min(w + 1, total));
      // Forward micro-steps visit chunks in rounds of pp micro-batches: the first pp forwards
      // are chunk 0 of micro-batches 0..pp-1, then chunk 1 of the same ones.
      if (total >= 2 * c.pp && w >= 2 * c.pp) {
        for (int64_t k = 0; k < 2 * c.pp; ++k) {
          EXPECT_EQ(order[static_cast<size_t>(k)].chunk, k / c.pp);
          EXPECT_EQ(order[static_cast<size_t>(k)].micro_batch, k % c.pp);
        }
      }
      // The first backward is of the last chunk (the model's last virtual stage on this rank).
      EXPECT_EQ(order[static_cast<size_t>(std::min(w + 1, total))].chunk, c.vp - 1);
    }
  }
}

// Runs all pipeline ranks' orders together with unit-time steps: the forward of (mb, stage s)
// needs the forward of (mb, s - 1) (on the previous rank), the backward of (mb, s) needs the
// backward of (mb, s + 1) and its own forward. Each rank runs its list in order. Returns the
// makespan in steps, or -1 on deadlock.
int64_t run_pipeline(const Case& c) {
  const int64_t stages = c.pp * c.vp;
  std::vector<std::vector<plan::PipeStep>> orders;
  for (int64_t r = 0; r < c.pp; ++r)
    orders.push_back(plan::pipeline_order(c.schedule, c.pp, c.vp, r, c.m));
  // Time each (mb, stage, fwd) completes; -1 not yet.
  std::map<std::tuple<int64_t, int64_t, bool>, int64_t> done;
  std::vector<size_t> next(static_cast<size_t>(c.pp), 0);
  int64_t t = 0, finished = 0;
  const int64_t all = 2 * c.m * stages;
  while (finished < all) {
    std::vector<std::tuple<int64_t, int64_t, bool>> now;
    for (int64_t r = 0; r < c.pp; ++r) {
      auto& i = next[static_cast<size_t>(r)];
      if (i == orders[static_cast<size_t>(r)].size()) continue;
      const plan::PipeStep& s = orders[static_cast<size_t>(r)][i];
      const int64_t stage = s.chunk * c.pp + r;
      auto ready = [&](int64_t st, bool fwd) {
        auto it = done.find({s.micro_batch, st, fwd});
        return it != done.end() && it->second < t;
      };
      const bool ok = s.forward
                          ? (stage == 0 || ready(stage - 1, true))
                          : ready(stage, true) && (stage == stages - 1 || ready(stage + 1, false));
      if (ok) now.push_back({s.micro_batch, stage, s.forward}), ++i;
    }
    // Steps finished before t are all that can enable one at t: if none can start, none ever will.
    if (now.empty()) return -1;
    for (const auto& k : now) done[k] = t, ++finished;
    ++t;
  }
  return t;
}

TEST(PipelineSchedule, AllRanksTogetherNeverDeadlock) {
  for (const Case& c : grid()) {
    SCOPED_TRACE(name(c));
    EXPECT_GT(run_pipeline(c), 0);
  }
}

TEST(PipelineSchedule, UnitTimeMakespansMatchTheBubbleFormulas) {
  // Forward and backward of a stage each take one step, so a micro-batch costs 2 per stage.
  // GPipe and 1F1B: 2 (M + pp - 1) steps: M x 2 of work plus (pp - 1) x 2 of bubble.
  for (int64_t pp : {2, 4}) {
    for (int64_t m : {4, 8}) {
      EXPECT_EQ(run_pipeline({pb::PIPELINE_SCHEDULE_ONE_F_ONE_B, pp, 1, m}), 2 * (m + pp - 1));
      EXPECT_EQ(run_pipeline({pb::PIPELINE_SCHEDULE_GPIPE, pp, 1, m}), 2 * (m + pp - 1));
    }
  }
  // Interleaved with vp chunks, each step a 1/vp-size chunk: a rank works 2 M vp steps, and the
  // bubble is (pp - 1) x 2 chunk-steps (Narayanan et al. 2021: the bubble shrinks by vp when
  // measured in whole-stage time). pp 4, vp 2, M 8: 2 x 8 x 2 + 2 x 3 = 38.
  EXPECT_EQ(run_pipeline({pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B, 4, 2, 8}), 2 * 8 * 2 + 2 * 3);
  EXPECT_EQ(run_pipeline({pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B, 2, 4, 4}), 2 * 4 * 4 + 2 * 1);
}

}  // namespace
}  // namespace orrery::sim
