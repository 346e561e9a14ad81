// The order in which one pipeline rank runs forward and backward passes of micro-batches
// (GPipe, 1F1B, Megatron's interleaved 1F1B with virtual stages).
#pragma once

#include <cstdint>
#include <vector>

#include "orrery/pb/plan.pb.h"

namespace orrery::plan {

struct PipeStep {
  bool forward = true;
  int64_t micro_batch = 0;
  int64_t chunk = 0;  // model chunk (virtual stage index on this rank), 0..vp-1
};

// Every (micro-batch, chunk) appears exactly once forward and once backward; a backward never
// precedes its forward.
std::vector<PipeStep> pipeline_order(pb::PipelineSchedule schedule, int64_t pp, int64_t vp,
                                     int64_t pipeline_rank, int64_t num_micro_batches);

}  // namespace orrery::plan
