// What one layer (or the embedding, or the head) runs in a forward, recompute or backward pass:
// its ops in order with the TP/SP/EP communication between them and ring attention under CP.
// Both the lowering (which turns steps into graph nodes) and the analytic engine (which adds up
// their costs) read this, so they cannot disagree about where communication happens.
//
// Megatron-LM's placement:
//   TP without SP: all-reduce after each row-parallel op (attn.out, mlp.down) in forward, and of
//     the input gradient before the block norm's backward.
//   TP with SP: reduce-scatter instead of that forward all-reduce and an all-gather after each
//     block norm; backward mirrors them (all-gather before a row-parallel op's backward,
//     reduce-scatter before the block norm's backward).
//   EP: all-to-all after the router (dispatch) and after the experts (combine); backward mirrors.
//   MoE folding (parallel.etp): with etp > 1 an all-gather in the experts' etp group after the
//     dispatch and a reduce-scatter before the combine; the TP all-gather after mlp.norm and the
//     reduce-scatter after the FFN only serve shared experts (none when the model has none),
//     since each rank routes its own sequence-parallel tokens (Megatron-core's alltoall
//     dispatcher with expert tensor parallelism).
//   CP: the attention core as a ring: cp pieces, KV blocks passed on while each piece computes.
//   tp_comm_overlap (Megatron-core / Transformer Engine userbuffers, needs SP): a decoder layer's
//     all-gather before a GEMM and reduce-scatter after one become one kOverlapped step: the
//     collective and the GEMM each split into `chunks` pieces, pipelined (all-gather piece i
//     before GEMM piece i; GEMM piece i before reduce-scatter piece i) on a stream of their own.
//   moe_expert_gemm per_expert (Megatron-core's SequentialMLP): each routed-expert op a kCompute
//     step per local expert, each with 1 / (num_experts / ep) of the op's work.
#pragma once

#include <string>
#include <vector>

#include "orrery/models/layer_ops.hpp"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::plan::detail {

struct Step {
  enum class Kind { kCompute, kCollective, kRing, kOverlapped };
  Kind kind = Kind::kCompute;
  const models::LayerOp* op = nullptr;  // kCompute, kRing, kOverlapped (the GEMM)
  // kCompute: RECOMPUTE for selectively recomputed ops; kCollective: RECOMPUTE for a
  // checkpointed module's re-run collectives (the graph names them in that phase), else the pass's.
  pb::Phase phase = pb::PHASE_FORWARD;
  // kCompute: the part of the op's work this step runs (op-level selective checkpointing
  // re-runs only the matmuls of a fused GEMM it did not keep: plan/op_sac.hpp).
  double work_fraction = 1;
  // kCollective, kOverlapped: which group, what, how much (the whole collective's bytes), and a
  // readable name ("attn.out.all_reduce"); kCompute: `name` is a suffix for the node's name when
  // an op runs as several (".expert3": one GEMM per local expert under moe_expert_gemm per_expert).
  // The group it runs in: TP, EP (the dispatch and combine all-to-alls) or, with MoE folding,
  // the routed experts' etp group.
  enum class Group { kTp, kEp, kEtp };
  Group group = Group::kTp;
  pb::CollectiveKind collective = pb::COLLECTIVE_KIND_UNSPECIFIED;
  double bytes = 0;
  std::string name;
  // kRing: bytes of each KV exchange (doubled in backward: KV and their gradients travel).
  double ring_bytes = 0;
  // kOverlapped: pieces, and whether the collective comes first (all-gather feeding the GEMM)
  // or last (reduce-scatter of its output).
  int64_t chunks = 0;
  bool comm_first = false;
};

// Megatron-core's output-discarding recompute modules (recompute selective with
// recompute_modules layernorm, moe_act or mla_up_proj) in one decoder layer's ops: for each op,
// the ops whose forward re-runs just before its backward (a block norm before its block's last
// op, the routed experts' activation before their down projection, MLA's up-projections and
// rotary embedding before the attention core). Empty lists elsewhere. The checkpointed modules
// (mlp, moe, shared_experts), whose re-runs carry collectives, are placed by layer_program.
// Whether `op` belongs to Megatron-core's checkpointed module `module` (mlp: the dense MLP's up,
// activation and down projection with their fp8 casts; moe: every op of the MoE layer;
// shared_experts: the shared experts'); false for the other modules.
bool in_checkpointed_module(const models::LayerOp& op, pb::RecomputeModule module);

std::vector<std::vector<const models::LayerOp*>> module_reruns(
    const std::vector<models::LayerOp>& ops, const ResolvedPlan& p);

// FLOPs and bytes one op moves in a phase (backward: its backward FLOPs and about twice the
// forward bytes: it reads activations and output gradients and writes input and weight
// gradients). The lowering's nodes and the analytic engine both use this.
struct Work {
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
};
Work op_work(const models::LayerOp& op, pb::Phase phase);

// FSDP's copies on the compute stream around its collectives (PyTorch FSDP2's copy-out and
// copy-in): after an all-gather the gathered flat buffer is split into the parameters' tensors,
// and before a reduce-scatter the gradients are packed into one flat buffer. Each reads and
// writes `elements` values of `bytes_per_element`, in any phase (unlike op_work, no backward
// doubling: a copy is the same copy in backward). Plain copies with no FLOPs, costed by the copy
// class's curve (OP_CLASS_COPY: bytes over the memory bandwidth, which calibration fits from
// `orrery bench`'s copies); the lowering's nodes and the analytic engine both use this.
struct CopyWork {
  std::vector<int64_t> shape;  // {elements}
  double bytes_read = 0;
  double bytes_written = 0;
};
CopyWork fsdp_copy(double elements, double bytes_per_element);

// FSDP buckets of one chunk (Megatron/SimpleFSDP-style): consecutive units (parts with weights,
// in forward order) share one gather and one reduce-scatter, filled up to `limit` parameters (one
// unit each when it is 0). The lowering gathers and reduces them, the analytic engine costs them.
// `keys`: each unit's part (its layer, -1 the embedding, -2 the head); `params`: its parameters.
struct FsdpBucketSpan {
  double params = 0;
  size_t first = 0, last = 0;  // the bucket's first and last unit (indices into keys)
  // Tied embeddings on a rank that also holds the head (`tied_single_stage`): the LM head reads
  // the embedding matrix after the embedding's forward, so the embedding's bucket stays gathered
  // from its forward gather until its backward (as FSDP keeps a root unit's shared weights),
  // unless the head shares the bucket, which is then gathered as usual.
  bool resident = false;
};
std::vector<FsdpBucketSpan> fsdp_buckets(const std::vector<int64_t>& keys,
                                         const std::vector<double>& params, double limit,
                                         bool tied_single_stage);

// `phase`: FORWARD, RECOMPUTE (the same steps re-run) or BACKWARD (reverse order).
std::vector<Step> layer_program(const std::vector<models::LayerOp>& ops, const ResolvedPlan& plan,
                                pb::Phase phase);

}  // namespace orrery::plan::detail
