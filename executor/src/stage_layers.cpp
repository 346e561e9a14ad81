// Which decoder layers a pipeline rank holds: virtual stage s (pp x vp of them, `split` layers
// each, in model order) lives on pipeline rank s % pp as its chunk s / pp, as the lowering
// assigns them (plan::ResolvedPlan::layers_per_stage; Megatron's interleaving).
#include "model.hpp"

namespace orrery::executor {

bool StageLayers::holds(int64_t layer) const {
  for (const LayerRange& r : chunks) {
    if (layer >= r.first && layer < r.end) return true;
  }
  return false;
}

StageLayers stage_layers_of(const std::vector<int64_t>& split, int64_t pp, int64_t pp_rank) {
  StageLayers s;
  s.chunks.clear();
  int64_t first = 0;
  for (size_t v = 0; v < split.size(); ++v) {
    const int64_t end = first + split[v];
    if (static_cast<int64_t>(v) % pp == pp_rank) s.chunks.push_back({first, end});
    first = end;
  }
  s.first = pp_rank == 0;
  s.last = pp_rank == pp - 1;
  return s;
}

int64_t pipeline_rank_of(const std::vector<int64_t>& split, int64_t pp, int64_t layer) {
  if (layer < 0) return 0;
  int64_t end = 0;
  for (size_t v = 0; v < split.size(); ++v) {
    end += split[v];
    if (layer < end) return static_cast<int64_t>(v) % pp;
  }
  return pp - 1;  // the head
}

}  // namespace orrery::executor
