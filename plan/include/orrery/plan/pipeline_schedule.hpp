// The order in which one pipeline rank runs forward and backward passes of micro-batches
// (GPipe, 1F1B, Megatron's interleaved 1F1B with virtual stages).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orrery/pb/plan.pb.h"

namespace orrery::plan {

struct PipeStep {
  bool forward = true;
  int64_t micro_batch = 0;
  int64_t chunk = 0;  // model chunk (virtual stage index on this rank), 0..vp-1
};

// Every (micro-batch, chunk) appears exactly once forward and once backward; a backward never
// precedes its forward. `combined`: Megatron-core's combined 1F1B (moe_a2a_overlap), one more
// warm-up forward than the schedule's own, after which each steady forward runs merged with the
// backward listed right after it (so both micro-batches' activations are alive at once).
std::vector<PipeStep> pipeline_order(pb::PipelineSchedule schedule, int64_t pp, int64_t vp,
                                     int64_t pipeline_rank, int64_t num_micro_batches,
                                     bool combined = false);

// The forward passes (of one chunk each) pipeline_order runs before its first backward.
int64_t warmup_passes(pb::PipelineSchedule schedule, int64_t pp, int64_t vp, int64_t pipeline_rank,
                      int64_t num_micro_batches, bool combined = false);

// The name of a pipeline transfer ("send.act", "recv.act", "send.grad", "recv.grad") of the pass
// at `virtual_stage`: with vp > 1 a rank runs several chunks of each micro-batch, each with its
// own transfers, so the name carries the virtual stage ("send.act.v2") and every transfer of a
// rank has a name of its own (the executor times each under it); with vp 1 it is `what` itself.
std::string pipeline_transfer_name(const char* what, int64_t virtual_stage, int64_t vp);

}  // namespace orrery::plan
