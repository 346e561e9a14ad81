// Lowering: model x plan x cluster -> the execution graph of every (or some) rank. The graph is
// the contract between the simulator's engines and the executor: both run exactly these nodes.
//
// Stream semantics (the engines and the executor implement them): every rank has the streams
// named in kStreams; nodes on one stream run one after another in list order; a node also waits
// for its data_deps (which may sit on other streams). Collectives start when every member of the
// group has reached them; a send and its matching recv (same peers and tag) start together when
// both have been reached, and finish when the data has arrived.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "orrery/pb/exec_graph.pb.h"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::plan {

enum Stream : int32_t {
  kCompute = 0,  // kernels, and the blocking TP/EP collectives Megatron issues in line
  kCommDp = 1,   // gradient reduction and parameter gathers, overlapped with compute
  // Point-to-point traffic: sends and receives on separate streams per direction, so that a
  // send waiting for its receiver never blocks a receive (rendezvous semantics, as NCCL's).
  kCommCpSend = 2,  // ring attention: KV blocks to the next CP rank
  kCommCpRecv = 3,  // ring attention: KV blocks from the previous CP rank
  kRecvPrev = 4,    // pipeline: activations from the previous stage
  kSendNext = 5,    // pipeline: activations to the next stage
  kRecvNext = 6,    // pipeline: gradients from the next stage
  kSendPrev = 7,    // pipeline: gradients to the previous stage
  // TP collectives split into chunks pipelined with their GEMM's pieces (tp_comm_overlap, TE's
  // userbuffers); a rank lists this stream only when its plan overlaps TP communication, so
  // other plans' graphs keep the eight streams of kStreams.
  kCommTp = 8,
  // moe_a2a_overlap: the expert all-to-alls of merged forward/backward pairs, beside the partner
  // pass's compute (Megatron-core's combined 1F1B). Listed, with comm.tp before it, only when the
  // plan overlaps them.
  kCommEp = 9,
};
inline constexpr std::array<std::string_view, 8> kStreams{
    "compute", "comm.dp", "cp.send", "cp.recv", "recv.prev", "send.next", "recv.next", "send.prev"};
inline constexpr std::string_view kCommTpName = "comm.tp";
inline constexpr std::string_view kCommEpName = "comm.ep";

// A collective issued in line with compute (Megatron's TP/EP collectives, on the compute stream):
// it blocks that stream, pays the calibrated blocking overhead and ends a stretch of compute. The
// one rule the engines, calibration and validation tell it by.
inline bool is_blocking_collective(const pb::ExecNode& n) {
  return n.kind() == pb::NODE_KIND_COLLECTIVE && n.stream() == kCompute;
}

struct LowerOptions {
  // Ranks to lower; empty means all of them. Engines that exploit symmetry lower one
  // representative rank per pipeline stage.
  std::vector<int64_t> ranks;
};

pb::ExecGraph lower(const ResolvedPlan& plan, const LowerOptions& options = {});

// One representative rank per pipeline rank (tp = cp = dp = 0): all ranks of a stage run the
// same program on different data.
std::vector<int64_t> representative_ranks(const ResolvedPlan& plan);

}  // namespace orrery::plan
