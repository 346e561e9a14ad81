// The PyTorch ops the Kineto importer knows: which node each becomes, and its FLOPs and bytes
// from the shapes the profiler recorded. Counted as models/src/layer_ops_build.hpp counts the
// same ops, so an imported trace and a lowered graph describe an op with the same numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "orrery/pb/exec_graph.pb.h"

namespace orrery::detail {

enum class KinetoOpKind { kNone, kCompute, kCollective };

struct KinetoOpClass {
  KinetoOpKind kind = KinetoOpKind::kNone;
  pb::OpClass op_class = pb::OP_CLASS_UNSPECIFIED;                  // compute
  pb::CollectiveKind collective = pb::COLLECTIVE_KIND_UNSPECIFIED;  // collective
};

// By op name ("aten::addmm", "c10d::allreduce_", "nccl:all_reduce", "record_param_comms").
KinetoOpClass classify_kineto_op(std::string_view name);

// A collective name as PyTorch spells it in record_param_comms ("allreduce", "_allgather_base",
// "reduce_scatter_tensor_coalesced", "all_to_all") or in an op name; UNSPECIFIED when unknown.
pb::CollectiveKind collective_from_name(std::string_view name);

// What a compute op did, from its "Input Dims"/"Input type" args.
struct ComputeCount {
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
  std::vector<int64_t> shape;
  std::string dtype;  // "fp32", "bf16", ...
};

// nullopt with `why` set when the args do not say (no Input Dims, an unknown element type);
// throws std::invalid_argument when they contradict the op (mismatched GEMM dims).
std::optional<ComputeCount> count_compute(std::string_view name, pb::OpClass op_class,
                                          const nlohmann::json& args, std::string& why);

// Element size and PeakFlops name of a profiler type name: "float" (Input type) or "Float"
// (record_param_comms dtype). nullopt when unknown.
struct ElementType {
  double bytes = 0;
  std::string dtype;
};
std::optional<ElementType> element_type(std::string_view profiler_name);

}  // namespace orrery::detail
