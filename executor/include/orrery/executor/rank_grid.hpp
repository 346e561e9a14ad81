// Where each rank sits in the plan's parallel grid and which ranks share its process groups.
// The executor's own copy of the placement rule (it must not depend on sim/): ranks are numbered
// by the plan's placement order, innermost dimension first (default "tp,cp,dp,pp", EP folded into
// the (cp, dp) plane), so a TP group is consecutive ranks. tests/executor checks it agrees with
// sim::RankLayout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orrery/pb/plan.pb.h"

namespace orrery::executor {

enum class GridDim { kTp, kCp, kDp, kPp };
const char* to_string(GridDim dim);

struct GridDegrees {
  int64_t tp = 1, cp = 1, dp = 1, pp = 1;
  int64_t ep = 1;  // MoE expert parallelism, inside the (cp, dp) plane: adds no ranks
  int64_t world_size() const { return tp * cp * dp * pp; }
};

struct GridCoord {
  int64_t tp = 0, cp = 0, dp = 0, pp = 0;
};

// "tp,cp,dp,pp" (any order, "ep" accepted and ignored, missing dimensions appended outermost);
// InputError naming placement_order on an unknown or repeated dimension.
std::vector<GridDim> parse_placement_order(const std::string& text);

class RankGrid {
 public:
  RankGrid(const GridDegrees& degrees, std::vector<GridDim> placement);
  // Degrees (absent = 1) and placement order of `plan`.
  static RankGrid from_plan(const pb::Plan& plan);

  const GridDegrees& degrees() const { return degrees_; }
  int64_t world_size() const { return degrees_.world_size(); }
  GridCoord coord(int64_t rank) const;
  int64_t rank(const GridCoord& coord) const;
  // Ranks that differ from `rank` only along `dim`, in coordinate order.
  std::vector<int64_t> group(GridDim dim, int64_t rank) const;
  // MoE, as sim::RankLayout's kEp and kEdp: the (cp, dp) plane of `rank`'s tp and pp, ordered
  // dp-major (position dp * cp + cp), cut into EP groups of ep consecutive positions; the
  // expert-data-parallel group holds the positions with the same index in their EP group.
  std::vector<int64_t> expert_group(int64_t rank) const;
  std::vector<int64_t> expert_data_group(int64_t rank) const;

 private:
  int64_t extent(GridDim dim) const;
  int64_t stride(GridDim dim) const;
  GridDegrees degrees_;
  std::vector<GridDim> placement_;
};

}  // namespace orrery::executor
