// Appends nodes to one rank's graph with consistent ids, names and fields.
#pragma once

#include <string>
#include <vector>

#include "orrery/models/layer_ops.hpp"
#include "orrery/pb/exec_graph.pb.h"

namespace orrery::plan::detail {

// Where a node sits in the step, for its name and its layer/micro_batch/stage fields.
struct Site {
  pb::Phase phase = pb::PHASE_UNSPECIFIED;
  int64_t layer = -1;
  int64_t micro_batch = -1;
  int64_t stage = -1;
};

struct CopyWork;  // layer_program.hpp

class GraphBuilder {
 public:
  explicit GraphBuilder(pb::RankGraph* rank) : rank_(rank) {}

  // Returns the new node's id. `deps` are data dependencies (ids of this rank's nodes).
  int64_t compute(const Site& site, const models::LayerOp& op, double flop_scale,
                  std::vector<int64_t> deps, const std::string& suffix = {});
  // A plain copy (OP_CLASS_COPY, no FLOPs), FSDP's copy-in/copy-out, named `what` (ExecNode.name's
  // tail), of op `op` (ExecNode.op: one per kind of copy whichever part it serves, so that all
  // parts' copies share a curve per op).
  int64_t copy(const Site& site, const std::string& what, const std::string& op,
               const CopyWork& work, std::vector<int64_t> deps);
  int64_t optimizer(const std::string& name, double params, double bytes_per_param_read,
                    double bytes_per_param_written, std::vector<int64_t> deps);
  int64_t collective(const Site& site, int32_t stream, const std::string& what,
                     pb::CollectiveKind kind, int64_t group, double bytes,
                     std::vector<int64_t> deps);
  int64_t send(const Site& site, int32_t stream, const std::string& what, int64_t peer, int64_t tag,
               double bytes, std::vector<int64_t> deps);
  int64_t recv(const Site& site, int32_t stream, const std::string& what, int64_t peer, int64_t tag,
               double bytes, std::vector<int64_t> deps);

  // Id of the last node added on `stream`, -1 if none.
  int64_t last_on(int32_t stream) const;

 private:
  pb::ExecNode* add(const Site& site, pb::NodeKind kind, int32_t stream, const std::string& what,
                    std::vector<int64_t> deps);
  // A send or a receive: the same fields, matched across ranks by (peer, tag).
  int64_t p2p(pb::NodeKind kind, const Site& site, int32_t stream, const std::string& what,
              int64_t peer, int64_t tag, double bytes, std::vector<int64_t> deps);
  pb::RankGraph* rank_;
  std::vector<int64_t> last_on_stream_ = std::vector<int64_t>(10, -1);  // lower.hpp's streams
};

std::string site_prefix(const Site& site);

}  // namespace orrery::plan::detail
