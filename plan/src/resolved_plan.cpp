#include "orrery/plan/resolved_plan.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "orrery/base/error.hpp"
#include "orrery/plan/fp8.hpp"
#include "orrery/plan/recomputed_layers.hpp"
#include "orrery/topologies/attention_kernels.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::plan {
namespace {

// One violated rule: "<field>: rule <name>: <reason>".
[[noreturn]] void broken(const SourceMap& where, const std::string& field, const std::string& rule,
                         const std::string& reason) {
  where.fail(field, "rule " + rule + ": " + reason);
}

std::string str(int64_t v) { return std::to_string(v); }

// `tp_field`: where the TP degree being checked came from (parallel.tp, or stage_tp[s] for a
// stage of a plan whose stages differ, checked on that stage's view).
void check_model_split(const ResolvedPlan& r, const SourceMap& where,
                       const std::string& tp_field = "parallel.tp") {
  const auto& m = r.model;
  const auto& d = r.degrees;
  if (m.num_attention_heads() % d.tp != 0) {
    broken(where, tp_field, "tp-divides-heads",
           "tp " + str(d.tp) + " must divide num_attention_heads " + str(m.num_attention_heads()));
  }
  if (!m.has_mla() && m.num_kv_heads() % d.tp != 0) {
    broken(where, tp_field, "tp-divides-kv-heads",
           "tp " + str(d.tp) + " must divide num_kv_heads " + str(m.num_kv_heads()));
  }
  // Every FFN the model has is split over TP: the dense one (all layers of a dense model, the
  // first_dense_layers of an MoE one), each routed expert's and the shared experts' together.
  std::vector<std::pair<std::string, int64_t>> ffns;
  if (!m.has_moe() || m.moe().first_dense_layers() > 0)
    ffns.emplace_back("the FFN hidden size", m.ffn_hidden_size());
  if (m.has_moe()) {
    const auto& moe = m.moe();
    // Folded plans split the routed experts by etp instead (check_folding).
    if (!d.folded()) ffns.emplace_back("moe.expert_ffn_hidden_size", moe.expert_ffn_hidden_size());
    const int64_t shared_width = moe.shared_expert_ffn_hidden_size() > 0
                                     ? moe.shared_expert_ffn_hidden_size()
                                     : moe.expert_ffn_hidden_size();
    if (moe.num_shared_experts() > 0)
      ffns.emplace_back("the shared experts' width", moe.num_shared_experts() * shared_width);
  }
  for (const auto& [what, width] : ffns) {
    if (width % d.tp != 0) {
      broken(where, tp_field, "tp-divides-ffn",
             "tp " + str(d.tp) + " must divide " + what + " " + str(width));
    }
  }
  if (d.cp > 1 && r.plan.attention_kernel() == pb::ATTENTION_KERNEL_MATERIALIZED) {
    broken(where, "attention_kernel", "cp-needs-flash-attention",
           "context parallelism (ring attention) runs on flash attention, not materialized scores");
  }
  // Load-balanced causal ring attention splits the sequence into 2 * cp chunks.
  if (d.cp > 1 && r.seq_len % (2 * d.cp) != 0) {
    broken(where, "parallel.cp", "cp-divides-seq",
           "2 x cp (" + str(2 * d.cp) + ") must divide seq_len " + str(r.seq_len));
  }
  if (r.sequence_parallel() && r.seq_len / d.cp % d.tp != 0) {
    broken(where, tp_field == "parallel.tp" ? "parallel.sequence_parallel" : tp_field,
           "sp-divides-seq",
           "tp " + str(d.tp) + " must divide the tokens per CP rank " + str(r.seq_len / d.cp));
  }
  if (d.ep > 1) {
    if (!m.has_moe()) {
      broken(where, "parallel.ep", "ep-needs-moe", "ep " + str(d.ep) + " on a dense model");
    }
    if (m.moe().num_experts() % d.ep != 0) {
      broken(where, "parallel.ep", "ep-divides-experts",
             "ep " + str(d.ep) + " must divide moe.num_experts " + str(m.moe().num_experts()));
    }
    if (!d.folded() && (d.dp * d.cp) % d.ep != 0) {
      broken(where, "parallel.ep", "ep-divides-dp-cp",
             "ep " + str(d.ep) + " must divide dp x cp = " + str(d.dp * d.cp));
    }
  }
  if (r.seq_len > m.max_seq_len()) {
    broken(
        where, "job.seq_len", "seq-fits-model",
        "seq_len " + str(r.seq_len) + " exceeds the model's max_seq_len " + str(m.max_seq_len()));
  }
}

// MoE parallel folding (parallel.etp): the experts' etp x ep ranks come out of tp x cp x dp.
void check_folding(const ResolvedPlan& r, const SourceMap& where) {
  const auto& m = r.model;
  const auto& d = r.degrees;
  if (!d.folded()) return;
  if (!m.has_moe()) {
    broken(where, "parallel.etp", "etp-needs-moe", "etp " + str(d.etp) + " on a dense model");
  }
  if (m.moe().expert_ffn_hidden_size() % d.etp != 0) {
    broken(where, "parallel.etp", "etp-divides-expert-ffn",
           "etp " + str(d.etp) + " must divide moe.expert_ffn_hidden_size " +
               str(m.moe().expert_ffn_hidden_size()));
  }
  if ((d.tp * d.cp * d.dp) % (d.ep * d.etp) != 0) {
    broken(where, "parallel.etp", "ep-etp-divide-tp-cp-dp",
           "ep x etp = " + str(d.ep * d.etp) +
               " must divide tp x cp x dp = " + str(d.tp * d.cp * d.dp));
  }
  // Megatron needs sequence parallelism for MoE with tp > 1: each TP rank routes its own
  // sequence shard, so the folded groups carry distinct tokens.
  if (d.tp > 1 && !r.sequence_parallel()) {
    broken(where, "parallel.etp", "etp-needs-sequence-parallel",
           "folding with tp " + str(d.tp) + " needs parallel.sequence_parallel");
  }
}

void check_pipeline(ResolvedPlan& r, const SourceMap& where) {
  const auto& d = r.degrees;
  const int64_t stages = d.pp * d.vp;
  const int64_t layers = r.model.num_layers();
  const auto& given = r.plan.layers_per_stage();
  if (given.empty()) {
    if (layers % stages != 0) {
      broken(where, "parallel.pp", "layers-cover-stages",
             str(layers) + " layers do not split evenly into pp x vp = " + str(stages) +
                 " stages; give layers_per_stage");
    }
    r.layers_per_stage.assign(static_cast<size_t>(stages), layers / stages);
  } else {
    if (given.size() != stages) {
      broken(where, "layers_per_stage", "layers-cover-stages",
             "has " + str(given.size()) + " entries, expected pp x vp = " + str(stages));
    }
    int64_t sum = 0;
    for (int i = 0; i < given.size(); ++i) {
      if (given[i] < 1) {
        broken(where, "layers_per_stage[" + str(i) + "]", "layers-cover-stages",
               "got " + str(given[i]) + ", every stage needs at least one layer");
      }
      sum += given[i];
    }
    if (sum != layers) {
      broken(where, "layers_per_stage", "layers-cover-stages",
             "adds up to " + str(sum) + " layers, the model has " + str(layers));
    }
    r.layers_per_stage.assign(given.begin(), given.end());
  }
  auto* par = r.plan.mutable_parallel();
  if (par->schedule() == pb::PIPELINE_SCHEDULE_UNSPECIFIED) {
    par->set_schedule(d.vp > 1 ? pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B
                               : pb::PIPELINE_SCHEDULE_ONE_F_ONE_B);
  }
  if (d.vp > 1 && par->schedule() != pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B) {
    broken(where, "parallel.schedule", "vp-needs-interleaving",
           "vp " + str(d.vp) + " needs schedule interleaved_1f1b");
  }
  if (par->schedule() == pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B) {
    if (d.vp < 2) {
      broken(where, "parallel.vp", "interleaving-needs-vp",
             "interleaved_1f1b needs vp >= 2, got " + str(d.vp));
    }
    // Megatron groups micro-batches in rounds of pp across the virtual stages.
    if (r.num_micro_batches % d.pp != 0) {
      broken(where, "micro_batch_size", "interleaving-micro-batches",
             "interleaved_1f1b needs the micro-batch count (" + str(r.num_micro_batches) +
                 ") to be a multiple of pp " + str(d.pp));
    }
  }
}

// TE's userbuffers overlap the collectives of sequence parallelism; Megatron-core refuses
// --tp-comm-overlap without --sequence-parallel.
void resolve_tp_overlap(ResolvedPlan& r, const SourceMap& where) {
  const int64_t chunks = r.plan.tp_comm_overlap_chunks();
  if (!r.plan.tp_comm_overlap()) {
    if (chunks != 0) {
      broken(where, "tp_comm_overlap_chunks", "tp-overlap-chunks-need-overlap",
             "chunks " + str(chunks) + " given without tp_comm_overlap: true");
    }
    return;
  }
  if (!r.sequence_parallel() || r.degrees.tp < 2) {
    broken(where, "tp_comm_overlap", "tp-overlap-needs-sp",
           "TP communication overlap pipelines sequence parallelism's all-gathers and "
           "reduce-scatters: it needs sequence_parallel with tp > 1");
  }
  if (chunks == 1) {
    broken(where, "tp_comm_overlap_chunks", "tp-overlap-chunks-at-least-two",
           "one chunk is no pipeline: give 2 or more, or leave it out for 4");
  }
  // Transformer Engine's num_splits for its pipelined userbuffers overlap.
  if (chunks == 0) r.plan.set_tp_comm_overlap_chunks(4);
}

void check_sharding(ResolvedPlan& r, const SourceMap& where) {
  if (r.sharding() == pb::SHARDING_HSDP) {
    const int64_t g = r.plan.shard_group_size();
    if (g < 1 || r.degrees.dp % g != 0) {
      broken(where, "shard_group_size", "hsdp-group",
             "hsdp needs shard_group_size dividing dp " + str(r.degrees.dp) + ", got " + str(g));
    }
    for (size_t s = 0; s < r.stage_degrees.size(); ++s) {
      if (r.stage_degrees[s].dp % g != 0) {
        broken(where, "shard_group_size", "hsdp-group",
               "hsdp needs shard_group_size dividing every stage's dp; stage_dp[" +
                   str(static_cast<int64_t>(s)) + "] is " + str(r.stage_degrees[s].dp) + ", got " +
                   str(g));
      }
    }
  }
  if (r.plan.grad_reduce_dtype() == pb::GRAD_REDUCE_DTYPE_BF16) r.precision.grad_reduce_bytes = 2;
  if (r.plan.grad_reduce_dtype() == pb::GRAD_REDUCE_DTYPE_FP32) r.precision.grad_reduce_bytes = 4;
  // Adam's two moments at 2 bytes each under the precision-aware optimizer's bf16 moments.
  if (r.plan.optimizer_state_dtype() == pb::OPTIMIZER_STATE_DTYPE_BF16)
    r.precision.optimizer_state_bytes = 4;
  if (r.plan.moe_imbalance() != 0 && r.plan.moe_imbalance() < 1) {
    broken(where, "moe_imbalance", "imbalance-at-least-one",
           "got " + std::to_string(r.plan.moe_imbalance()) +
               ", the busiest expert has at least the mean");
  }
}

// Megatron-core's own preconditions for --overlap-moe-expert-parallel-comm (transformer_config.py
// __post_init__): expert parallelism, a virtual pipeline when there is a pipeline (the merged
// forward/backward pairs come from its interleaved 1F1B schedule), and no whole-layer recompute
// (a checkpointed layer's backward is one opaque recompute-and-backward, with no dispatch or
// combine for the partner to run under).
void check_moe_a2a_overlap(const ResolvedPlan& r, const SourceMap& where) {
  if (!r.plan.moe_a2a_overlap()) return;
  if (!r.model.has_moe()) {
    broken(where, "moe_a2a_overlap", "moe-a2a-overlap-needs-moe",
           "the dense model " + r.model.name() + " has no expert all-to-all to overlap");
  }
  if (r.degrees.ep < 2) {
    broken(where, "moe_a2a_overlap", "moe-a2a-overlap-needs-ep",
           "needs expert parallelism (ep > 1), got ep " + str(r.degrees.ep));
  }
  if (r.degrees.pp > 1 && r.plan.parallel().schedule() != pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B) {
    broken(where, "moe_a2a_overlap", "moe-a2a-overlap-needs-interleaving",
           "with pp " + str(r.degrees.pp) +
               " it needs schedule interleaved_1f1b (vp > 1), whose steady state pairs one "
               "micro-batch's forward with another's backward");
  }
  if (r.plan.recompute() == pb::RECOMPUTE_FULL) {
    broken(where, "moe_a2a_overlap", "moe-a2a-overlap-no-full-recompute",
           "full recompute makes a layer's backward one opaque recompute-and-backward, with no "
           "dispatch/combine to overlap");
  }
}

// Token dropping and the experts' GEMMs only mean something where there are routed experts.
void check_moe_fields(const ResolvedPlan& r, const SourceMap& where) {
  const bool moe = r.model.has_moe();
  const auto& p = r.plan;
  if (p.has_moe_capacity_factor() && !moe) {
    broken(where, "moe_capacity_factor", "capacity-needs-moe",
           "a capacity factor on the dense model " + r.model.name() + ", which has no experts");
  }
  if (p.moe_pad_to_capacity() && !p.has_moe_capacity_factor()) {
    broken(where, "moe_pad_to_capacity", "pad-needs-capacity",
           "padding to capacity needs moe_capacity_factor (the capacity to pad to)");
  }
  if (p.moe_expert_gemm() != pb::MOE_EXPERT_GEMM_UNSPECIFIED && !moe) {
    broken(where, "moe_expert_gemm", "expert-gemm-needs-moe",
           "how experts run, given for the dense model " + r.model.name());
  }
  check_moe_a2a_overlap(r, where);
  if (p.moe_dispatcher() != pb::MOE_DISPATCHER_UNSPECIFIED && !moe) {
    broken(where, "moe_dispatcher", "dispatcher-needs-moe",
           "a token dispatcher, given for the dense model " + r.model.name());
  }
}

// A module the model does not have would be recomputed nowhere: refused, not ignored (Megatron
// ignores `mlp` in MoE layers, which a model with dense layers still has).
void check_recompute_module(const ResolvedPlan& r, const SourceMap& where, pb::RecomputeModule m) {
  const auto& model = r.model;
  const bool moe = model.has_moe();
  switch (m) {
    case pb::RECOMPUTE_MODULE_MOE_ACT:
      if (!moe) {
        broken(where, "recompute_modules", "moe-act-needs-moe",
               "moe_act recomputes the routed experts' activation; the dense model " +
                   model.name() + " has none");
      }
      break;
    case pb::RECOMPUTE_MODULE_MLP:
      if (moe && model.moe().first_dense_layers() == 0) {
        broken(where, "recompute_modules", "mlp-needs-dense-layers",
               "mlp recomputes the dense MLP of non-MoE layers; every layer of " + model.name() +
                   " is an MoE layer (name moe or shared_experts instead)");
      }
      break;
    case pb::RECOMPUTE_MODULE_MOE:
    case pb::RECOMPUTE_MODULE_SHARED_EXPERTS: {
      const bool shared = m == pb::RECOMPUTE_MODULE_SHARED_EXPERTS;
      if (!moe || (shared && model.moe().num_shared_experts() == 0)) {
        broken(where, "recompute_modules", shared ? "shared-experts-need-shared" : "moe-needs-moe",
               std::string(shared ? "shared_experts" : "moe") + " recomputes " +
                   (shared ? "the shared experts" : "the MoE layers") + "; " + model.name() +
                   " has none");
      }
      // The merged pairs put each all-to-all beside the partner's compute; a checkpointed MoE
      // layer's backward first re-runs its dispatch and combine, which that order has no place
      // for.
      if (!shared && r.plan.moe_a2a_overlap()) {
        broken(where, "recompute_modules", "moe-recompute-no-a2a-overlap",
               "moe recomputes the whole MoE layer, its all-to-alls included, which "
               "moe_a2a_overlap's merged forward/backward pairs do not model");
      }
      break;
    }
    case pb::RECOMPUTE_MODULE_MLA_UP_PROJ:
      if (!model.has_mla()) {
        broken(where, "recompute_modules", "mla-up-proj-needs-mla",
               "mla_up_proj recomputes multi-head latent attention's up-projections; " +
                   model.name() + " has standard attention");
      }
      break;
    default:
      break;
  }
}

// recompute_every refines full recomputation and recompute_modules selective recomputation:
// either one beside another mode would be ignored, so it is refused.
void check_recompute_fields(const ResolvedPlan& r, const SourceMap& where) {
  const auto& p = r.plan;
  if (p.has_recompute_every() && p.recompute() != pb::RECOMPUTE_FULL) {
    broken(where, "recompute_every", "recompute-every-needs-full",
           "recompute_every " + str(p.recompute_every()) +
               " picks the layers recomputed whole: it needs recompute full; the plan says " +
               enum_value_name(*pb::Recompute_descriptor()->FindValueByNumber(p.recompute())));
  }
  if (p.recompute_modules_size() > 0 && p.recompute() != pb::RECOMPUTE_SELECTIVE) {
    broken(where, "recompute_modules", "recompute-modules-need-selective",
           "modules to recompute need recompute selective; the plan says " +
               enum_value_name(*pb::Recompute_descriptor()->FindValueByNumber(p.recompute())));
  }
  std::vector<int> seen;
  for (const int m : p.recompute_modules()) {
    const std::string name =
        enum_value_name(*pb::RecomputeModule_descriptor()->FindValueByNumber(m));
    // Plan files cannot say "unspecified" (the reader refuses it); only code could.
    ORRERY_CHECK(m != pb::RECOMPUTE_MODULE_UNSPECIFIED, "recompute_modules holds UNSPECIFIED");
    if (std::find(seen.begin(), seen.end(), m) != seen.end()) {
      broken(where, "recompute_modules", "recompute-module-once", name + " is listed twice");
    }
    seen.push_back(m);
    check_recompute_module(r, where, static_cast<pb::RecomputeModule>(m));
  }
}

// Devices of each node group, in global order, with the groups' names.
struct NodeGroupDevices {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> devices;
};

NodeGroupDevices node_group_devices(const pb::ClusterSpec& cluster) {
  NodeGroupDevices out;
  int64_t next = 0;
  for (const auto& g : cluster.node_groups()) {
    int64_t per_node = 0;
    for (const auto& t : cluster.node_types())
      if (t.name() == g.node_type()) per_node = t.devices_per_node();
    out.names.push_back(g.name());
    out.devices.emplace_back();
    for (int64_t i = 0; i < g.count() * per_node; ++i) out.devices.back().push_back(next++);
  }
  return out;
}

// Stages with their own tp and dp (plan.stage_tp / stage_dp). Fills r.stage_degrees when the
// stages differ; lists that repeat the plan's degrees resolve to the uniform plan.
void resolve_stages(ResolvedPlan& r, const SourceMap& where) {
  const auto& tps = r.plan.stage_tp();
  const auto& dps = r.plan.stage_dp();
  if (tps.empty() && dps.empty()) return;
  const int64_t pp = r.degrees.pp;
  auto check_list = [&](const google::protobuf::RepeatedField<int64_t>& list,
                        const std::string& field) {
    if (list.empty()) return;
    if (list.size() != pp) {
      broken(where, field, "stage-degrees-per-stage",
             "has " + str(list.size()) + " entries, expected pp = " + str(pp));
    }
    for (int i = 0; i < list.size(); ++i) {
      if (list[i] < 1) {
        broken(where, field + "[" + str(i) + "]", "stage-degrees-per-stage",
               "got " + str(list[i]) + ", a degree is at least 1");
      }
    }
  };
  check_list(tps, "stage_tp");
  check_list(dps, "stage_dp");
  // One source for a stage's tp: parallel.tp would otherwise be a second, conflicting answer.
  if (!tps.empty() && r.plan.parallel().has_tp()) {
    broken(where, "parallel.tp", "stage-tp-replaces-tp",
           "stage_tp gives every stage's tp; leave parallel.tp out");
  }
  std::vector<Degrees> stages(static_cast<size_t>(pp), r.degrees);
  for (int64_t s = 0; s < pp; ++s) {
    if (!tps.empty()) stages[static_cast<size_t>(s)].tp = tps[static_cast<int>(s)];
    if (!dps.empty()) stages[static_cast<size_t>(s)].dp = dps[static_cast<int>(s)];
  }
  r.degrees.tp = stages[0].tp;
  if (std::all_of(stages.begin(), stages.end(), [&](const Degrees& d) { return d == r.degrees; })) {
    // The uniform plan, said the usual way (parallel.tp), so that resolving it again agrees.
    r.plan.clear_stage_tp();
    r.plan.clear_stage_dp();
    return;
  }
  // The lowering's rank grid and p2p redistribution are written for stages of tp x dp ranks.
  const auto& d = r.degrees;
  if (d.cp > 1)
    broken(where, "parallel.cp", "stage-degrees-need-uniform",
           "stages with their own tp/dp need cp 1, got " + str(d.cp));
  if (d.ep > 1)
    broken(where, "parallel.ep", "stage-degrees-need-uniform",
           "stages with their own tp/dp need ep 1, got " + str(d.ep));
  if (d.folded())
    broken(where, "parallel.etp", "stage-degrees-need-uniform",
           "stages with their own tp/dp need no expert folding, got etp " + str(d.etp));
  if (d.vp > 1)
    broken(where, "parallel.vp", "stage-degrees-need-uniform",
           "stages with their own tp/dp need vp 1, got " + str(d.vp));
  if (r.placement.back() != Dim::kPp) {
    broken(
        where, "placement_order", "stage-degrees-placement",
        "stages with their own tp/dp hold consecutive ranks: pp must be the outermost dimension");
  }
  const int64_t pipeline_mb = r.micro_batch_size * d.dp;
  for (int64_t s = 0; s < pp; ++s) {
    const int64_t sdp = stages[static_cast<size_t>(s)].dp;
    if (pipeline_mb % sdp != 0) {
      broken(where, "stage_dp[" + str(s) + "]", "stage-dp-divides-micro-batch",
             "stage dp " + str(sdp) +
                 " must divide the pipeline micro-batch micro_batch_size x dp = " +
                 str(pipeline_mb) + " sequences");
    }
  }
  r.stage_degrees = std::move(stages);
}

// Stages with their own degrees: stage s's ranks are consecutive (pp is outermost) and sit on
// one node group, the one stage_node_groups names or, without it, the next devices in order.
void place_stages(ResolvedPlan& r, const SourceMap& where) {
  const auto& groups = r.plan.stage_node_groups();
  const int64_t pp = r.degrees.pp;
  if (!groups.empty() && groups.size() != pp) {
    broken(where, "stage_node_groups", "stage-groups-per-stage",
           "has " + str(groups.size()) + " entries, expected pp = " + str(pp));
  }
  const NodeGroupDevices ng = node_group_devices(r.cluster);
  std::vector<size_t> used(ng.names.size(), 0);
  int64_t rank = 0;
  for (int64_t s = 0; s < pp; ++s) {
    const int64_t n = r.stage(s).world_size() / pp;
    if (groups.empty()) {
      // Consecutive devices: the stage must not straddle two node groups (it would be costed on
      // one representative device, missing the slower ones).
      int64_t first = rank, g = 0;
      while (first >= static_cast<int64_t>(ng.devices[static_cast<size_t>(g)].size())) {
        first -= static_cast<int64_t>(ng.devices[static_cast<size_t>(g)].size());
        ++g;
      }
      if (first + n > static_cast<int64_t>(ng.devices[static_cast<size_t>(g)].size())) {
        broken(where, "stage_tp", "stage-degrees-one-group",
               "stage " + str(s) + "'s " + str(n) + " devices would span node groups '" +
                   ng.names[static_cast<size_t>(g)] +
                   "' and the next; give stage_node_groups or change the degrees");
      }
      rank += n;
      continue;
    }
    const std::string& want = groups[static_cast<int>(s)];
    auto it = std::find(ng.names.begin(), ng.names.end(), want);
    if (it == ng.names.end()) {
      broken(where, "stage_node_groups[" + str(s) + "]", "stage-groups-exist",
             "unknown node group '" + want + "'" + base::suggest(want, ng.names));
    }
    const size_t g = static_cast<size_t>(it - ng.names.begin());
    if (used[g] + static_cast<size_t>(n) > ng.devices[g].size()) {
      broken(where, "stage_node_groups[" + str(s) + "]", "stage-groups-fit",
             "node group '" + want + "' has " + str(ng.devices[g].size()) +
                 " devices, too few for the stages placed on it (stage " + str(s) + " needs " +
                 str(n) + ")");
    }
    for (int64_t i = 0; i < n; ++i)
      r.device_of_rank[static_cast<size_t>(rank++)] = ng.devices[g][used[g]++];
  }
}

void place_ranks(ResolvedPlan& r, const SourceMap& where) {
  const int64_t devices = topologies::total_devices(r.cluster);
  const int64_t world = r.world_size();
  if (world != devices) {
    broken(where, "parallel", "world-size-matches-cluster",
           (r.uniform_stages() ? "tp x cp x dp x pp = "
                               : "the stages' stage_tp x stage_dp add up to ") +
               str(world) + " ranks, but the cluster has " + str(devices) +
               " devices (size it with --nodes or change the degrees)");
  }
  r.device_of_rank.resize(static_cast<size_t>(world));
  std::iota(r.device_of_rank.begin(), r.device_of_rank.end(), 0);
  const auto& groups = r.plan.stage_node_groups();
  if (!r.uniform_stages()) {
    place_stages(r, where);
    return;
  }
  if (groups.empty()) return;
  if (groups.size() != r.degrees.pp) {
    broken(where, "stage_node_groups", "stage-groups-per-stage",
           "has " + str(groups.size()) + " entries, expected pp = " + str(r.degrees.pp));
  }
  const NodeGroupDevices ng = node_group_devices(r.cluster);
  const std::vector<std::string>& names = ng.names;
  const std::vector<std::vector<int64_t>>& group_devices = ng.devices;
  const int64_t per_stage = world / r.degrees.pp;
  std::vector<size_t> used(names.size(), 0);
  std::vector<std::vector<int64_t>> stage_devices(static_cast<size_t>(r.degrees.pp));
  for (int64_t s = 0; s < r.degrees.pp; ++s) {
    const std::string& want = groups[static_cast<int>(s)];
    auto it = std::find(names.begin(), names.end(), want);
    if (it == names.end()) {
      broken(where, "stage_node_groups[" + str(s) + "]", "stage-groups-exist",
             "unknown node group '" + want + "'" + base::suggest(want, names));
    }
    const size_t g = static_cast<size_t>(it - names.begin());
    if (used[g] + static_cast<size_t>(per_stage) > group_devices[g].size()) {
      broken(where, "stage_node_groups[" + str(s) + "]", "stage-groups-fit",
             "node group '" + want + "' has " + str(group_devices[g].size()) +
                 " devices, too few for the " + str(per_stage) + "-device stages placed on it");
    }
    for (int64_t i = 0; i < per_stage; ++i)
      stage_devices[static_cast<size_t>(s)].push_back(group_devices[g][used[g]++]);
  }
  // Within a stage, ranks keep their relative order (so TP stays consecutive).
  std::vector<int64_t> seen(static_cast<size_t>(r.degrees.pp), 0);
  for (int64_t rank = 0; rank < world; ++rank) {
    // The pipeline coordinate of `rank` under the placement order.
    int64_t stride = 1, pp = 0;
    for (Dim d : r.placement) {
      const int64_t extent = d == Dim::kTp   ? r.degrees.tp
                             : d == Dim::kCp ? r.degrees.cp
                             : d == Dim::kDp ? r.degrees.dp
                                             : r.degrees.pp;
      if (d == Dim::kPp) pp = rank / stride % extent;
      stride *= extent;
    }
    r.device_of_rank[static_cast<size_t>(rank)] =
        stage_devices[static_cast<size_t>(pp)]
                     [static_cast<size_t>(seen[static_cast<size_t>(pp)]++)];
  }
}

}  // namespace

Degrees degrees_of(const pb::Parallelism& p) {
  Degrees d;
  d.tp = p.has_tp() ? p.tp() : 1;
  d.pp = p.has_pp() ? p.pp() : 1;
  d.dp = p.has_dp() ? p.dp() : 1;
  d.cp = p.has_cp() ? p.cp() : 1;
  d.ep = p.has_ep() ? p.ep() : 1;
  d.vp = p.has_vp() ? p.vp() : 1;
  d.etp = p.has_etp() ? p.etp() : 0;
  return d;
}

Precisions precisions_of(pb::Precision p) {
  Precisions out;
  switch (p) {
    case pb::PRECISION_FP32:
      out = {4, 4, 4, 0, 8, "fp32"};
      break;
    case pb::PRECISION_FP16:
      // fp16 gradients are reduced in fp16 (Megatron's default without
      // --accumulate-allreduce-grads-in-fp32 for fp16 runs).
      out = {2, 2, 2, 4, 8, "fp16"};
      break;
    case pb::PRECISION_FP8:
      // fp8 GEMM inputs, but weights and activations are kept in bf16 between ops.
      out = {2, 2, 4, 4, 8, "fp8"};
      break;
    default:
      out = {2, 2, 4, 4, 8, "bf16"};
  }
  out.grad_reduce_bytes = out.grad_bytes;
  return out;
}

std::vector<Dim> parse_placement(const std::string& text, const SourceMap& where) {
  if (text.empty()) return {Dim::kTp, Dim::kCp, Dim::kDp, Dim::kPp};
  std::vector<Dim> dims;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    if (item == "ep")
      continue;  // EP lives inside the (cp, dp) plane; accepted for Megatron's spelling
    Dim d;
    if (item == "tp")
      d = Dim::kTp;
    else if (item == "cp")
      d = Dim::kCp;
    else if (item == "dp")
      d = Dim::kDp;
    else if (item == "pp")
      d = Dim::kPp;
    else
      broken(
          where, "placement_order", "placement-dims",
          "unknown dimension '" + item + "'" + base::suggest(item, {"tp", "cp", "ep", "dp", "pp"}));
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) {
      broken(where, "placement_order", "placement-dims", "'" + item + "' appears twice");
    }
    dims.push_back(d);
  }
  for (Dim d : {Dim::kTp, Dim::kCp, Dim::kDp, Dim::kPp}) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) dims.push_back(d);
  }
  return dims;
}

const char* to_string(Dim dim) {
  switch (dim) {
    case Dim::kTp:
      return "tp";
    case Dim::kCp:
      return "cp";
    case Dim::kDp:
      return "dp";
    case Dim::kPp:
      return "pp";
  }
  return "?";
}

// HSDP shards inside its shard groups, each shard_group_size dp ranks with their CP ranks.
int64_t ResolvedPlan::dense_shard_degree() const {
  if (sharding() == pb::SHARDING_NONE) return 1;
  if (sharding() == pb::SHARDING_HSDP) return plan.shard_group_size() * degrees.cp;
  return degrees.dp * degrees.cp;
}

int64_t ResolvedPlan::expert_shard_degree() const {
  if (sharding() == pb::SHARDING_NONE) return 1;
  if (sharding() == pb::SHARDING_HSDP) return plan.shard_group_size() * degrees.cp;
  return std::max<int64_t>(1, degrees.edp());
}

int64_t ResolvedPlan::world_size() const {
  if (stage_degrees.empty()) return degrees.world_size();
  int64_t n = 0;
  for (const auto& d : stage_degrees) n += d.tp * d.cp * d.dp;
  return n;
}

const Degrees& ResolvedPlan::stage(int64_t p) const {
  return stage_degrees.empty() ? degrees : stage_degrees.at(static_cast<size_t>(p));
}

ResolvedPlan ResolvedPlan::for_stage(int64_t p) const {
  ResolvedPlan view = *this;
  const Degrees& d = stage(p);
  view.micro_batch_size = micro_batch_size * degrees.dp / d.dp;
  view.degrees.tp = d.tp;
  view.degrees.dp = d.dp;
  return view;
}

const pb::DeviceSpec& device_of(const ResolvedPlan& plan, int64_t rank) {
  int64_t index = plan.device_of_rank.at(static_cast<size_t>(rank));
  for (const auto& g : plan.cluster.node_groups()) {
    for (const auto& nt : plan.cluster.node_types()) {
      if (nt.name() != g.node_type()) continue;
      const int64_t n = g.count() * nt.devices_per_node();
      if (index < n) return topologies::find_device(plan.cluster, nt.device());
      index -= n;
    }
  }
  ORRERY_CHECK(false, "rank placed beyond the cluster's devices");
}

bool shards_parameters(pb::Sharding sharding) {
  return sharding == pb::SHARDING_ZERO3 || sharding == pb::SHARDING_FSDP ||
         sharding == pb::SHARDING_HSDP;
}

bool recomputes_module(const pb::Plan& plan, pb::RecomputeModule module) {
  if (plan.recompute() != pb::RECOMPUTE_SELECTIVE) return false;
  const auto& m = plan.recompute_modules();
  if (m.empty()) return module == pb::RECOMPUTE_MODULE_CORE_ATTN;
  return std::find(m.begin(), m.end(), module) != m.end();
}

bool recomputes_layer(const pb::Plan& plan, int64_t layer) {
  if (plan.recompute() != pb::RECOMPUTE_FULL) return false;
  return !plan.has_recompute_every() || (layer + 1) % plan.recompute_every() == 0;
}

bool ResolvedPlan::recomputes_layer(int64_t layer) const {
  return plan::recomputes_layer(plan, layer);
}

bool ResolvedPlan::recomputes_module(pb::RecomputeModule module) const {
  return plan::recomputes_module(plan, module);
}

int64_t ResolvedPlan::first_layer(int64_t stage) const {
  int64_t first = 0;
  for (int64_t s = 0; s < stage; ++s) first += layers_per_stage[static_cast<size_t>(s)];
  return first;
}

namespace {

// resolve_plan up to placement: degrees, defaults of the plan's own fields, and every rule that
// needs no cluster.
ResolvedPlan resolve_rules(const pb::Plan& plan, const pb::ModelSpec& model,
                           const SourceMap& where) {
  ResolvedPlan r;
  r.plan = plan;
  r.model = model;
  r.degrees = degrees_of(plan.parallel());
  r.precision = precisions_of(plan.job().precision());
  r.seq_len = plan.job().seq_len();
  r.micro_batch_size = plan.micro_batch_size();
  r.placement = parse_placement(plan.placement_order(), where);

  resolve_stages(r, where);
  auto* par = r.plan.mutable_parallel();
  if (r.uniform_stages()) par->set_tp(r.degrees.tp);
  par->set_pp(r.degrees.pp);
  par->set_dp(r.degrees.dp);
  par->set_cp(r.degrees.cp);
  par->set_ep(r.degrees.ep);
  par->set_vp(r.degrees.vp);
  if (r.plan.sharding() == pb::SHARDING_UNSPECIFIED) r.plan.set_sharding(pb::SHARDING_NONE);
  if (r.plan.recompute() == pb::RECOMPUTE_UNSPECIFIED) r.plan.set_recompute(pb::RECOMPUTE_NONE);
  if (r.plan.moe_imbalance() == 0) r.plan.set_moe_imbalance(1.0);
  if (r.plan.attention_kernel() == pb::ATTENTION_KERNEL_UNSPECIFIED) {
    r.plan.set_attention_kernel(pb::ATTENTION_KERNEL_FLASH);
  }

  // fill_unstated gives an unstated micro-batch 1; a caller that skipped it would divide by 0.
  ORRERY_CHECK(r.micro_batch_size >= 1, "micro_batch_size unfilled (plan::fill_unstated)");
  const int64_t per_step = r.degrees.dp * r.micro_batch_size;
  if (plan.job().global_batch_size() % per_step != 0) {
    broken(where, "job.global_batch_size", "batch-divides",
           "global batch " + str(plan.job().global_batch_size()) +
               " is not a multiple of dp x micro_batch_size = " + str(per_step));
  }
  r.num_micro_batches = plan.job().global_batch_size() / per_step;
  if (r.uniform_stages()) {
    check_model_split(r, where);
  } else {
    for (int64_t s = 0; s < r.degrees.pp; ++s)
      check_model_split(r.for_stage(s), where, "stage_tp[" + str(s) + "]");
  }
  check_folding(r, where);
  check_pipeline(r, where);
  check_sharding(r, where);
  check_moe_fields(r, where);
  check_recompute_fields(r, where);
  resolve_tp_overlap(r, where);
  return r;
}

// A named kernel generation is priced at its paper's figure for the device; a device without
// one is refused rather than priced as another kernel.
void check_attention_kernel(const ResolvedPlan& r, const SourceMap& where) {
  // Every plan the planner checks is resolved: for the kernels every device runs, no walk over
  // the ranks (device_of searches the node groups, per rank).
  if (!topologies::names_a_generation(r.plan.attention_kernel())) return;
  std::set<const pb::DeviceSpec*> seen;
  for (size_t rank = 0; rank < r.device_of_rank.size(); ++rank) {
    const pb::DeviceSpec& d = device_of(r, static_cast<int64_t>(rank));
    if (!seen.insert(&d).second) continue;
    const std::string problem = topologies::attention_kernel_problem(d, r.plan.attention_kernel());
    if (!problem.empty()) broken(where, "attention_kernel", "attention-kernel-on-device", problem);
  }
}

}  // namespace

ResolvedPlan resolve_plan(const pb::Plan& plan, const pb::ModelSpec& model,
                          const pb::ClusterSpec& cluster, const SourceMap& where) {
  ResolvedPlan r = resolve_rules(plan, model, where);
  r.cluster = cluster;
  place_ranks(r, where);
  check_attention_kernel(r, where);
  resolve_fp8(r, where);
  return r;
}

std::string rule_violation(const pb::Plan& plan, const pb::ModelSpec& model) {
  try {
    resolve_rules(plan, model, SourceMap());
  } catch (const base::InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace orrery::plan
