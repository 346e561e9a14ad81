#include "orrery/plan/pipeline_schedule.hpp"

#include <algorithm>

#include "orrery/base/error.hpp"

namespace orrery::plan {
namespace {

std::vector<PipeStep> gpipe(int64_t m) {
  std::vector<PipeStep> out;
  for (int64_t i = 0; i < m; ++i) out.push_back({true, i, 0});
  for (int64_t i = 0; i < m; ++i) out.push_back({false, i, 0});
  return out;
}

// PipeDream-flush: rank r runs pp - r - 1 warm-up forwards, then alternates one forward and one
// backward, then drains the remaining backwards.
std::vector<PipeStep> one_f_one_b(int64_t m, int64_t warmup) {
  std::vector<PipeStep> out;
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({true, f, 0});
  while (f < m) {
    out.push_back({true, f++, 0});
    out.push_back({false, b++, 0});
  }
  while (b < m) out.push_back({false, b++, 0});
  return out;
}

// Megatron's interleaved schedule: micro-batches go through the chunks in rounds of pp; micro-step
// k runs chunk (k / pp) % vp of micro-batch (k / (pp * vp)) * pp + k % pp, and backward
// micro-steps visit the chunks in reverse.
std::vector<PipeStep> interleaved(int64_t pp, int64_t vp, int64_t m, int64_t warmup) {
  const int64_t total = m * vp;
  auto step = [&](int64_t k, bool forward) {
    const int64_t in_group = k % (pp * vp);
    int64_t chunk = in_group / pp;
    if (!forward) chunk = vp - 1 - chunk;
    const int64_t mb = k / (pp * vp) * pp + in_group % pp;
    return PipeStep{forward, mb, chunk};
  };
  std::vector<PipeStep> out;
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back(step(f, true));
  while (f < total) {
    out.push_back(step(f++, true));
    out.push_back(step(b++, false));
  }
  while (b < total) out.push_back(step(b++, false));
  return out;
}

}  // namespace

std::vector<PipeStep> pipeline_order(pb::PipelineSchedule schedule, int64_t pp, int64_t vp,
                                     int64_t pipeline_rank, int64_t num_micro_batches,
                                     bool combined) {
  ORRERY_CHECK(pipeline_rank >= 0 && pipeline_rank < pp, "pipeline rank out of range");
  switch (schedule) {
    case pb::PIPELINE_SCHEDULE_GPIPE:
      return gpipe(num_micro_batches);
    case pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B:
      return interleaved(
          pp, vp, num_micro_batches,
          warmup_passes(schedule, pp, vp, pipeline_rank, num_micro_batches, combined));
    default:
      return one_f_one_b(num_micro_batches, warmup_passes(schedule, pp, vp, pipeline_rank,
                                                          num_micro_batches, combined));
  }
}

// 1F1B: pp - r - 1; interleaved: Megatron's 2 (pp - r - 1) + (vp - 1) pp chunk passes; the
// combined schedule one more (Megatron-core combined_1f1b.py: with no pipeline one forward before
// the pairs, interleaved the warm-up grown by one so a steady pair's forward and backward do not
// wait on each other). At most all of the passes.
int64_t warmup_passes(pb::PipelineSchedule schedule, int64_t pp, int64_t vp, int64_t pipeline_rank,
                      int64_t num_micro_batches, bool combined) {
  const int64_t extra = combined ? 1 : 0;
  switch (schedule) {
    case pb::PIPELINE_SCHEDULE_GPIPE:
      return num_micro_batches;
    case pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B:
      return std::min((pp - pipeline_rank - 1) * 2 + (vp - 1) * pp + extra, num_micro_batches * vp);
    default:
      return std::min(pp - pipeline_rank - 1 + extra, num_micro_batches);
  }
}

std::string pipeline_transfer_name(const char* what, int64_t virtual_stage, int64_t vp) {
  std::string name = what;
  if (vp > 1) name += ".v" + std::to_string(virtual_stage);
  return name;
}

}  // namespace orrery::plan
