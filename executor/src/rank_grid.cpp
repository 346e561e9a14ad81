#include "orrery/executor/rank_grid.hpp"

#include <algorithm>
#include <sstream>

#include "orrery/traces/error.hpp"

namespace orrery::executor {

const char* to_string(GridDim dim) {
  switch (dim) {
    case GridDim::kTp: return "tp";
    case GridDim::kCp: return "cp";
    case GridDim::kDp: return "dp";
    case GridDim::kPp: return "pp";
  }
  return "?";
}

std::vector<GridDim> parse_placement_order(const std::string& text) {
  constexpr GridDim kAll[] = {GridDim::kTp, GridDim::kCp, GridDim::kDp, GridDim::kPp};
  std::vector<GridDim> dims;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    if (item == "ep" || item.empty()) continue;  // EP lives inside the (cp, dp) plane
    const auto* found = std::find_if(std::begin(kAll), std::end(kAll),
                                     [&](GridDim d) { return item == to_string(d); });
    if (found == std::end(kAll)) {
      throw InputError("", 0, "placement_order", "unknown dimension '" + item + "'" +
                                                     suggest(item, {"tp", "cp", "ep", "dp", "pp"}));
    }
    if (std::find(dims.begin(), dims.end(), *found) != dims.end()) {
      throw InputError("", 0, "placement_order", "'" + item + "' appears twice");
    }
    dims.push_back(*found);
  }
  for (GridDim d : kAll) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) dims.push_back(d);
  }
  return dims;
}

RankGrid::RankGrid(const GridDegrees& degrees, std::vector<GridDim> placement)
    : degrees_(degrees), placement_(std::move(placement)) {
  ORRERY_CHECK(placement_.size() == 4, "placement must order all four dimensions");
  ORRERY_CHECK(degrees_.ep >= 1 && degrees_.dp * degrees_.cp % degrees_.ep == 0, "ep must divide dp x cp");
}

RankGrid RankGrid::from_plan(const pb::Plan& plan) {
  const auto& p = plan.parallel();
  GridDegrees d;
  d.tp = p.has_tp() ? p.tp() : 1;
  d.cp = p.has_cp() ? p.cp() : 1;
  d.dp = p.has_dp() ? p.dp() : 1;
  d.pp = p.has_pp() ? p.pp() : 1;
  d.ep = p.has_ep() ? p.ep() : 1;
  return RankGrid(d, parse_placement_order(plan.placement_order()));
}

int64_t RankGrid::extent(GridDim dim) const {
  switch (dim) {
    case GridDim::kTp: return degrees_.tp;
    case GridDim::kCp: return degrees_.cp;
    case GridDim::kDp: return degrees_.dp;
    case GridDim::kPp: return degrees_.pp;
  }
  return 1;
}

int64_t RankGrid::stride(GridDim dim) const {
  int64_t s = 1;
  for (GridDim d : placement_) {
    if (d == dim) return s;
    s *= extent(d);
  }
  ORRERY_CHECK(false, "dimension missing from the placement");
}

GridCoord RankGrid::coord(int64_t rank) const {
  ORRERY_CHECK(rank >= 0 && rank < world_size(), "rank out of range");
  auto at = [&](GridDim d) { return rank / stride(d) % extent(d); };
  return {at(GridDim::kTp), at(GridDim::kCp), at(GridDim::kDp), at(GridDim::kPp)};
}

int64_t RankGrid::rank(const GridCoord& c) const {
  return c.tp * stride(GridDim::kTp) + c.cp * stride(GridDim::kCp) + c.dp * stride(GridDim::kDp) +
         c.pp * stride(GridDim::kPp);
}

std::vector<int64_t> RankGrid::group(GridDim dim, int64_t r) const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < extent(dim); ++i) {
    GridCoord c = coord(r);
    switch (dim) {
      case GridDim::kTp: c.tp = i; break;
      case GridDim::kCp: c.cp = i; break;
      case GridDim::kDp: c.dp = i; break;
      case GridDim::kPp: c.pp = i; break;
    }
    out.push_back(rank(c));
  }
  return out;
}

std::vector<int64_t> RankGrid::expert_group(int64_t r) const {
  const GridCoord c = coord(r);
  const int64_t first = (c.dp * degrees_.cp + c.cp) / degrees_.ep * degrees_.ep;
  std::vector<int64_t> out;
  for (int64_t pos = first; pos < first + degrees_.ep; ++pos) {
    out.push_back(rank({c.tp, pos % degrees_.cp, pos / degrees_.cp, c.pp}));
  }
  return out;
}

std::vector<int64_t> RankGrid::expert_data_group(int64_t r) const {
  const GridCoord c = coord(r);
  std::vector<int64_t> out;
  for (int64_t pos = (c.dp * degrees_.cp + c.cp) % degrees_.ep; pos < degrees_.dp * degrees_.cp; pos += degrees_.ep) {
    out.push_back(rank({c.tp, pos % degrees_.cp, pos / degrees_.cp, c.pp}));
  }
  return out;
}

}  // namespace orrery::executor
