// Local-search moves: the plans one knob (or one pair of degrees) away from a plan, each tagged
// with the step terms it can shrink, so the search tries the moves aimed at a plan's limiting
// term first (bottleneck-driven) and the rest only when those do not help.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "orrery/planner/plan_space.hpp"

namespace orrery::planner::detail {

struct Move {
  Knobs knobs;
  std::vector<std::string> targets;  // term names (explain.hpp) this move can shrink
};

class MoveGenerator {
 public:
  explicit MoveGenerator(const PlanSpace& space);
  std::vector<Move> moves(const Knobs& from) const;
  // The same settings on another shape (micro-batch and layer split adjusted where they must be).
  Knobs reshape(const Knobs& from, const Shape& to) const;

 private:
  void setting_moves(const Knobs& from, std::vector<Move>& out) const;
  void shape_moves(const Knobs& from, std::vector<Move>& out) const;
  const PlanSpace& space_;
  std::vector<Shape> shapes_;
};

}  // namespace orrery::planner::detail
