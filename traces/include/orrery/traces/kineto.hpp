// Import of PyTorch profiler traces (Kineto's Chrome-trace JSON: {"traceEvents": [...]}, one file
// per rank) as a measured ExecGraph, so that calibration reads them like orrery's own traces.
//
// What becomes a node. Complete events (ph "X") of category cpu_op (older Kineto: Operator) are
// nested per thread by time; an op orrery knows (table in docs/calibration.md: aten::mm, addmm,
// bmm, baddbmm, matmul, linear -> GEMM; scaled_dot_product_attention -> attention; softmax,
// _softmax, add, mul -> elementwise; layer_norm, native_layer_norm, rms_norm -> norm;
// embedding -> embedding; c10d::*, record_param_comms, nccl:*, gloo:* collectives) becomes one
// node, and ops nested inside it (aten::linear's aten::addmm, c10d::allreduce_'s
// record_param_comms) are part of it, not nodes of their own. FLOPs and bytes come from the
// "Input Dims" and "Input type" the profiler records with record_shapes=True, counted as
// models/ counts them; a compute op without them is left out and counted in the import notes.
// Collectives take their sizes and group from record_param_comms' "In/Out msg nelems", "dtype",
// "Group size" and "Process Group Ranks" (or from the op's own input dims).
//
// Durations. When the trace has GPU kernels (category kernel) linked to an op through
// "External id", the node's duration is the sum of those kernels' durations and its start the
// first one's start (device time); otherwise the CPU op's own span. An asynchronous collective's
// CPU op (c10d::allreduce_ ...) only enqueues it: with NCCL its kernels time it; with Gloo the
// "gloo:all_reduce" event on a worker thread is the collective running (the k-th worker event of
// a kind belongs to the k-th launch of that kind); a launch with neither is left out.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "orrery/pb/exec_graph.pb.h"

namespace orrery {

struct KinetoImport {
  pb::ExecGraph graph;  // one rank (distributedInfo.rank, else 0); nodes in start order
  int64_t events = 0;   // complete events read
  // Ops orrery knows but could not use, by op name, with the count: "aten::mm: no Input Dims".
  std::map<std::string, int64_t> skipped;
};

// Whether `text` is a Chrome-trace JSON object with "traceEvents" (rather than an orrery file).
bool is_kineto_trace(std::string_view text);

// Throws InputError naming `file`, the event index and the field when the trace is malformed
// (no traceEvents, an X event without a numeric ts or dur, Input Dims that contradict the op).
KinetoImport import_kineto(std::string_view text, std::string_view file);

}  // namespace orrery
