#include "orrery/traces/field_ranges.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "field_unit.hpp"
#include "orrery/base/units.hpp"
#include "orrery/pb/options.pb.h"

namespace orrery {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr double kNoMin = -std::numeric_limits<double>::infinity();
constexpr double kNoMax = std::numeric_limits<double>::infinity();

// Why each bound: generous enough for any real machine and job, with the margin said.
constexpr const char* kHeads = "1,000x any published model";
constexpr const char* kWidth = "100x the widest published model";
constexpr const char* kLayers = "500x the deepest published model";
constexpr const char* kVocab = "1,000x the largest published vocabulary";
constexpr const char* kSeq = "100x the longest context published";
constexpr const char* kFraction = "a probability or fraction";
constexpr const char* kFlops = "100x the densest accelerator's peak";
constexpr const char* kDeviceMemory = "no device has less; 100 TB is beyond any device or CPU host";
constexpr const char* kMemoryBandwidth = "no memory is this slow; 1 PB/s is 100x the fastest HBM";
constexpr const char* kWatts = "30x the hungriest accelerator module";
constexpr const char* kLinkBandwidth = "10 Mb Ethernet is faster; 1 PB/s is 500x NVLink 5";
constexpr const char* kLatency = "a round trip across a continent; cluster links take microseconds";
constexpr const char* kPerSwitch = "far beyond any board";
constexpr const char* kDomain = "1,000x NVL72";
constexpr const char* kNics = "far beyond any server";
constexpr const char* kPerNode = "100x the cores of any server";
constexpr const char* kHostMemory = "30x the largest server";
constexpr const char* kNodes = "10x the largest cluster built";
constexpr const char* kRadix = "100x any switch";
constexpr const char* kTiers = "Clos fabrics use 2 or 3";
constexpr const char* kOversubscription = "100x any oversubscribed fabric";
constexpr const char* kGlobalBatch = "10,000x the largest published batch";
constexpr const char* kDegree = "more ranks than any cluster has";
constexpr const char* kVirtualStages = "more than a model has layers";
constexpr const char* kBucket = "more than any model's gradients";
constexpr const char* kPrefetch = "more than a model has buckets";
constexpr const char* kMicroBatch = "no more than the largest step";
constexpr const char* kImbalance = "more than a model has experts";

// A range's end as the docs write it: "100 ms", "1 PB/s", or a plain "100000000".
std::string bound(double value, pb::Unit unit) {
  if (unit != pb::UNIT_UNSPECIFIED) return base::units::format(value, detail::base_unit(unit));
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<int64_t>(value));
  }
  return base::units::number(value);
}

std::string child(const std::string& path, const std::string& field) {
  return path.empty() ? field : path + "." + field;
}

// A set number field as a double and as text; false for other fields.
bool number_of(const Message& message, const FieldDescriptor* f, double* value, std::string* text) {
  const Reflection* refl = message.GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64:
      *value = static_cast<double>(refl->GetInt64(message, f));
      *text = std::to_string(refl->GetInt64(message, f));
      return true;
    case FieldDescriptor::CPPTYPE_INT32:
      *value = refl->GetInt32(message, f);
      *text = std::to_string(refl->GetInt32(message, f));
      return true;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      *value = refl->GetDouble(message, f);
      *text = base::units::number(*value);
      return true;
    default:
      return false;
  }
}

}  // namespace

const std::map<std::string, FieldRange, std::less<>>& field_ranges() {
  static const std::map<std::string, FieldRange, std::less<>> kRanges = {
      {"MoeSpec.num_experts", {kNoMin, 1000000, kHeads}},
      {"MoeSpec.top_k", {kNoMin, 1000000, kHeads}},
      {"MoeSpec.expert_ffn_hidden_size", {kNoMin, 10000000, kWidth}},
      {"MoeSpec.num_shared_experts", {kNoMin, 1000000, kHeads}},
      {"MoeSpec.shared_expert_ffn_hidden_size", {kNoMin, 10000000, kWidth}},
      {"MoeSpec.first_dense_layers", {kNoMin, 100000, kLayers}},
      {"MoeSpec.n_group", {kNoMin, 1000000, kHeads}},
      {"MoeSpec.topk_group", {kNoMin, 1000000, kHeads}},
      {"MlaSpec.q_lora_rank", {kNoMin, 10000000, kWidth}},
      {"MlaSpec.kv_lora_rank", {kNoMin, 10000000, kWidth}},
      {"MlaSpec.qk_nope_head_dim", {kNoMin, 10000000, kWidth}},
      {"MlaSpec.qk_rope_head_dim", {kNoMin, 10000000, kWidth}},
      {"MlaSpec.v_head_dim", {kNoMin, 10000000, kWidth}},
      {"ModelSpec.num_layers", {kNoMin, 100000, kLayers}},
      {"ModelSpec.hidden_size", {kNoMin, 10000000, kWidth}},
      {"ModelSpec.num_attention_heads", {kNoMin, 1000000, kHeads}},
      {"ModelSpec.num_kv_heads", {kNoMin, 1000000, kHeads}},
      {"ModelSpec.head_dim", {kNoMin, 10000000, kWidth}},
      {"ModelSpec.ffn_hidden_size", {kNoMin, 10000000, kWidth}},
      {"ModelSpec.vocab_size", {kNoMin, 1000000000, kVocab}},
      {"ModelSpec.max_seq_len", {kNoMin, 1000000000, kSeq}},
      {"ModelSpec.hidden_dropout", {kNoMin, 1, kFraction}},
      {"ModelSpec.rotary_fraction", {kNoMin, 1, kFraction}},
      {"ModelSpec.sliding_window", {kNoMin, 1000000000, kSeq}},
      {"ModelSpec.sliding_window_pattern", {kNoMin, 100000, kLayers}},
      {"ModelSpec.sliding_window_from_layer", {kNoMin, 100000, kLayers}},
      {"PeakFlops.fp64", {kNoMin, 1e18, kFlops}},
      {"PeakFlops.fp32", {kNoMin, 1e18, kFlops}},
      {"PeakFlops.tf32", {kNoMin, 1e18, kFlops}},
      {"PeakFlops.bf16", {kNoMin, 1e18, kFlops}},
      {"PeakFlops.fp16", {kNoMin, 1e18, kFlops}},
      {"PeakFlops.fp8", {kNoMin, 1e18, kFlops}},
      {"PeakFlops.int8", {kNoMin, 1e18, kFlops}},
      {"PeakFlops.fp4", {kNoMin, 1e18, kFlops}},
      {"DeviceSpec.memory_bytes", {1e6, 1e14, kDeviceMemory}},
      {"DeviceSpec.memory_bandwidth_bytes_per_s", {1e6, 1e15, kMemoryBandwidth}},
      {"DeviceSpec.tdp_watts", {kNoMin, 1e5, kWatts}},
      {"LinkSpec.bandwidth_bytes_per_s", {1e6, 1e15, kLinkBandwidth}},
      {"LinkSpec.latency_s", {kNoMin, 0.1, kLatency}},
      {"IntraNodeSpec.devices_per_pcie_switch", {kNoMin, 1024, kPerSwitch}},
      {"IntraNodeSpec.domain_nodes", {kNoMin, 100000, kDomain}},
      {"NicSpec.count", {kNoMin, 1024, kNics}},
      {"TransportSpec.message_latency_s", {kNoMin, 0.1, kLatency}},
      {"TransportSpec.bandwidth_efficiency", {kNoMin, 1, kFraction}},
      {"TransportSpec.active_nics", {kNoMin, 1024, kNics}},
      {"TransportSpec.nics_per_gpu", {kNoMin, 1024, kNics}},
      {"NodeType.devices_per_node", {kNoMin, 65536, kPerNode}},
      {"NodeType.host_memory_bytes", {kNoMin, 1e15, kHostMemory}},
      {"NodeGroup.count", {kNoMin, 1000000, kNodes}},
      {"FabricSpec.switch_radix", {kNoMin, 65536, kRadix}},
      {"FabricSpec.tiers", {kNoMin, 16, kTiers}},
      {"FabricSpec.oversubscription", {kNoMin, 1000, kOversubscription}},
      {"FabricSpec.switch_latency_s", {kNoMin, 0.1, kLatency}},
      {"FabricSpec.pod_nodes", {kNoMin, 1000000, kNodes}},
      {"FabricSpec.pod_oversubscription", {kNoMin, 1000, kOversubscription}},
      {"Job.global_batch_size", {kNoMin, 100000000, kGlobalBatch}},
      {"Job.seq_len", {kNoMin, 1000000000, kSeq}},
      {"Parallelism.tp", {kNoMin, 1048576, kDegree}},
      {"Parallelism.pp", {kNoMin, 1048576, kDegree}},
      {"Parallelism.dp", {kNoMin, 1048576, kDegree}},
      {"Parallelism.cp", {kNoMin, 1048576, kDegree}},
      {"Parallelism.ep", {kNoMin, 1048576, kDegree}},
      {"Parallelism.etp", {kNoMin, 1048576, kDegree}},
      {"Parallelism.vp", {kNoMin, 100000, kVirtualStages}},
      {"Plan.nodes", {kNoMin, 1000000, kNodes}},
      {"Plan.shard_group_size", {kNoMin, 1048576, kDegree}},
      {"Plan.bucket_bytes", {kNoMin, 1e13, kBucket}},
      {"Plan.prefetch_buckets", {kNoMin, 100000, kPrefetch}},
      {"Plan.micro_batch_size", {kNoMin, 100000000, kMicroBatch}},
      {"Plan.moe_imbalance", {kNoMin, 1000000, kImbalance}},
      {"Plan.moe_capacity_factor", {kNoMin, 1000000, kImbalance}},
  };
  return kRanges;
}

std::string field_value_problem(const FieldDescriptor& field, double value,
                                const std::string& text) {
  const auto meta = field.options().GetExtension(pb::meta);
  const std::string got = "got " + text;
  if (!std::isfinite(value)) return got + ", expected a finite number";
  if (meta.positive() && !(value > 0)) return got + ", expected a value > 0";
  if (meta.non_negative() && value < 0) return got + ", expected a value >= 0";
  const auto it = field_ranges().find(field.containing_type()->name() + "." + field.name());
  if (it == field_ranges().end()) return "";
  const FieldRange& r = it->second;
  if (value < r.min) {
    return got + ", expected at least " + bound(r.min, meta.unit()) + " (" + r.reason + ")";
  }
  if (value > r.max) {
    return got + ", expected at most " + bound(r.max, meta.unit()) + " (" + r.reason + ")";
  }
  return "";
}

void check_field_values(const Message& message, const SourceMap& where, const std::string& path) {
  const Reflection* refl = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(message, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string at = child(path, f->name());
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && f->is_repeated()) {
      for (int i = 0; i < refl->FieldSize(message, f); ++i) {
        check_field_values(refl->GetRepeatedMessage(message, f, i), where,
                           at + "[" + std::to_string(i) + "]");
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      check_field_values(refl->GetMessage(message, f), where, at);
    } else if (double value = 0; !f->is_repeated()) {
      std::string text;
      if (!number_of(message, f, &value, &text)) continue;
      if (auto problem = field_value_problem(*f, value, text); !problem.empty())
        where.fail(at, problem);
    }
  }
}

}  // namespace orrery
