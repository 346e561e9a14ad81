// The mixture-of-experts FFN of the executor's transformer, and expert parallelism (EP).
//
// Routing is Mixtral's (the spec has no routing options): a replicated router (linear to
// num_experts), softmax over the experts in fp32, the top_k of them, their weights renormalized to
// sum to 1 (Megatron-core's default, a softmax over the top-k logits, is the same). Every routed
// copy of a token is processed, so a plan gives the same numbers as one process up to fp32
// summation order; unless the plan sets an expert capacity (moe_capacity_factor), when each
// expert drops the copies past it (moe_capacity.hpp) and the numbers depend on which tokens a
// rank routes together. There is no auxiliary
// load-balancing loss: ModelSpec has no coefficient for one. Shared experts (DeepSeek, Qwen2-MoE)
// run on every token as one FFN of their combined width, as models/ layer_ops costs them.
//
// Parallelism, as the lowering models it (models/src/layer_ops_mlp.cpp):
// - TP: every expert is split like the dense MLP (up/gate columns, down rows; expert TP = TP).
//   The router runs on the same tokens on every TP rank; the routing weights multiply the experts'
//   partial outputs, so the router's weight gradient is a partial sum on each TP rank (summed over
//   TP after backward, like SP's norm weights), and down biases are added as bias / tp per rank.
//   Routed plus shared partial outputs get one TP reduction after moe.experts.down. Under SP the
//   router runs after mlp.norm's all-gather, on the whole sequence, as the lowering orders the
//   nodes (layer_ops counts the router and the dispatch bytes on seq / tp tokens, Megatron's way).
// - EP: the EP group (ep data-parallel replicas, see orrery/plan/rank_layout.hpp) splits the
// experts:
//   rank i holds experts [i E / ep, (i + 1) E / ep). Routed copies are sorted by expert and sent
//   to the rank holding it with alltoall_base and split sizes (after an exchange of per-expert
//   counts), run there, and sent back ("dispatch" after moe.router, "combine" after
//   moe.experts.down); backward runs the same all-to-alls with the split sizes swapped.
// - Expert gradients: a rank's expert gradient sums the contributions of the ep replicas whose
//   tokens it served; they are averaged over the expert-data-parallel group (the replicas holding
//   the same experts) and divided by ep, which is the mean over all dp replicas, as the dense
//   gradients' mean over dp (Megatron-Core's expert gradient scaling). The optimizer does it
//   (sharding_reduction.cpp, ShardedParam::expert); the gradient norm sums experts over EP.
// - bf16 mixed precision: dispatch and combine carry bf16 both ways (mixed_precision.hpp), the
//   lowering's activation_bytes 2; the counts stay int64.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "moe_capacity.hpp"
#include "orrery/pb/model.pb.h"
#include "parallel.hpp"

namespace orrery::executor {

// This rank's place in expert parallelism.
struct ExpertParallel {
  GroupPtr group;  // the EP group; null when ep == 1
  int64_t size = 1, rank = 0;
};

// One parameter of an MoE FFN, in the order the model draws them (after the layer's mlp.norm):
// router, shared experts, then each routed expert (up.gate_weight, up.weight, up.bias,
// down.weight, down.bias as the spec has them).
struct MoeParam {
  std::string name;            // "layers.1.moe.router.weight", "layers.1.moe.experts.3.up.weight"
  std::vector<int64_t> shape;  // full
  int64_t shard_dim = -1;      // split over TP; -1: replicated
  double std_dev = 0;          // normal(0, std_dev); 0: zeros (biases)
  int64_t expert = -1;         // the routed expert; -1: router and shared experts (every rank)
  // Replicated over TP, but each TP rank's gradient is a partial sum (see the file comment).
  bool tp_partial_grad = false;
};
std::vector<MoeParam> moe_parameters(const pb::ModelSpec& spec, int64_t layer, double init_std,
                                     double out_std);

// The EP rank holding routed expert `expert`.
int64_t expert_owner(const pb::ModelSpec& spec, int64_t ep_size, int64_t expert);

// What the MoE forward needs from the model. `param(name)` returns this rank's tensor of a
// parameter, or null when the spec has none of that name.
struct MoeContext {
  const pb::ModelSpec* spec = nullptr;
  ExpertParallel ep;
  int64_t tp_size = 1, tp_rank = 0;
  std::function<const torch::Tensor*(const std::string&)> param;
  MoeCapacity capacity;      // none: every routed copy processed
  int64_t token_groups = 1;  // slices of the sequence routed apart (tp under SP; moe_capacity.hpp)
  // moe_expert_gemm per_expert: each local expert's kernels timed under their own names
  // ("moe.experts.up.expert<j>"), as the lowering has one node per expert; else one per op.
  bool per_expert_nodes = false;
};

// Routed plus shared experts of decoder layer `layer` on `x` ([batch, seq, hidden], the normalized
// input inside the TP region): this TP rank's partial output, before the TP reduction. Each op
// is timed under the lowering's name (moe.router, moe.shared.*, moe.experts.*) and the EP
// all-to-alls as moe.router.all_to_all / moe.experts.down.all_to_all (backward: .grad.all_to_all).
torch::Tensor moe_ffn(const MoeContext& context, int64_t layer, const torch::Tensor& x);

// An FFN's activation of its up projection's output `up` (gated: [..., 2 w], the gate half
// first): SwiGLU or GeGLU when gated, else ReLU, squared ReLU or GELU. The dense MLP and the
// experts share it.
torch::Tensor ffn_activation(const torch::Tensor& up, pb::Activation activation, bool gated);

// Every EP rank's copy of a routed expert's full tensor (for saving): `held` is the tensor on the
// rank holding it (TP shards already gathered) and undefined elsewhere. A sum over the EP group
// of it and zeros, so exact. `options`: the zeros' type and device on the other ranks (those of
// the model's parameters).
torch::Tensor share_expert_tensor(const torch::Tensor& held, const std::vector<int64_t>& full_shape,
                                  const GroupPtr& ep,
                                  const torch::TensorOptions& options = torch::kFloat32);

}  // namespace orrery::executor
