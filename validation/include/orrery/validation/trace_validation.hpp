// Re-simulating a measured run (`orrery validate --trace`): the trace of `orrery run --out`
// carries its plan, model and cluster, so the simulator lowers exactly that run, costs every node
// with the models the engines use (ComputeCostModel on the rank's device, CollectiveCostModel on
// the group's devices plus the rank skew's expected wait, p2p for sends and receives), and an
// engine predicts the step. Nodes are
// matched by rank and node id (the executor times the lowering's own nodes); any node the two
// do not share is an error naming the first one, since then simulator and executor disagree
// about what the plan does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/sim/engine.hpp"

namespace orrery::validation {

struct NodeComparison {
  int64_t rank = 0;
  int64_t id = 0;
  std::string name;
  std::string group;  // the op class ("gemm") or collective ("all_reduce"), or "send"/"recv"
  double measured_s = 0;
  double predicted_s = 0;
};

// Nodes of one op class or collective kind, summed.
struct GroupComparison {
  std::string name;
  int64_t nodes = 0;
  double measured_s = 0;
  double predicted_s = 0;
  double error = 0;             // predicted / measured - 1 of the sums
  double median_abs_error = 0;  // over the nodes
};

struct TraceValidation {
  sim::EngineKind engine = sim::EngineKind::kAnalytic;
  int64_t ranks = 0;
  double measured_step_s = 0;                // the trace's measured_step_s
  double predicted_step_s = 0;               // the engine's step time
  double step_error = 0;                     // predicted / measured - 1
  std::vector<GroupComparison> op_classes;   // in OpClass order
  std::vector<GroupComparison> collectives;  // in CollectiveKind order, then send, recv
  std::vector<NodeComparison> nodes;         // the trace's ranks in order, each in lowering order
  // des: the simulated timeline of the trace's ranks (empty with the analytic engine).
  pb::ExecGraph predicted_timeline;
};

// `file` names the trace in errors: InputError when it carries no plan, model, cluster or
// measured_step_s, when its plan does not resolve, or when its nodes differ from the lowering's.
TraceValidation validate_trace(const pb::ExecGraph& trace, const std::string& file,
                               sim::EngineKind engine, const pb::CalibrationProfile* calibration);

}  // namespace orrery::validation
