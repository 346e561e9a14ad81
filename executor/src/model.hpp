// A decoder-only transformer built from a ModelSpec, Megatron tensor-parallel: attention heads
// and FFN columns split over the TP group (q/k/v and up/gate column-parallel, out and down
// row-parallel), the token embedding and LM head split over the vocabulary (with Megatron's
// vocabulary-parallel cross entropy), norms and position embeddings replicated. Llama-style
// (RMSNorm, SwiGLU, GQA, RoPE) and GPT-style (LayerNorm, GeLU, learned positions, biases) both come
// from the spec. Parameters are drawn full from `seed` in a fixed order and then sliced, so every
// TP degree starts from the same weights as a single process. Under pipeline parallelism a rank
// draws them all too and keeps its stage's: embeddings on the first stage, the head on the last.
// They are drawn on the CPU (the seeded CPU generator) and then moved to the rank's device, so a
// GPU run starts from exactly the CPU run's weights; every tensor the forward pass makes follows
// its input's device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "discard_output.hpp"
#include "model_moe.hpp"
#include "orrery/pb/model.pb.h"
#include "parallel.hpp"

namespace orrery::executor {

// The decoder layers [first, end) of one model chunk.
struct LayerRange {
  int64_t first = 0, end = 0;
};

// The decoder layers of one pipeline rank: one chunk, or vp chunks under interleaving (chunk c is
// virtual stage c x pp + the rank, Megatron's assignment and the lowering's).
struct StageLayers {
  std::vector<LayerRange> chunks{LayerRange{}};
  bool first = true, last = true;  // holds the embeddings / the head and loss
  bool holds(int64_t layer) const;
};

// The layers of pipeline rank `pp_rank` of `pp` whose virtual stages have `split` layers each
// (pp x vp entries, layers_per_stage in train_config.hpp).
StageLayers stage_layers_of(const std::vector<int64_t>& split, int64_t pp, int64_t pp_rank);
// The pipeline rank holding `layer` (-1: embeddings, num_layers: head).
int64_t pipeline_rank_of(const std::vector<int64_t>& split, int64_t pp, int64_t layer);

// Every parameter of the model, whichever stage holds it.
struct ParamMeta {
  std::string name;
  std::vector<int64_t> full_shape;
  int64_t layer = 0;    // -1: embeddings, num_layers: head
  int64_t expert = -1;  // MoE: the routed expert this weight belongs to (held by one EP rank)
};

// Called around each part's forward pass ("embed", "L<i>", "head"): FSDP gathers a part's
// parameters before it and frees them after it (parallel_sharding.hpp).
class PartHooks {
 public:
  virtual ~PartHooks() = default;
  virtual void before_forward(const std::string& part) = 0;
  // Returns the part's output as the next part should use it.
  virtual torch::Tensor after_forward(const std::string& part, const torch::Tensor& output) = 0;
};

class Transformer {
 public:
  // `sequence_parallel`: Megatron SP in the TP group (hidden states between the TP regions hold
  // seq / tp tokens; norms and row-parallel biases run on them).
  // `ep`: the routed experts of MoE layers are split over it (model_moe.hpp). `device`: where
  // the parameters live (and so where the forward pass runs).
  Transformer(const pb::ModelSpec& spec, GroupPtr tp, int64_t tp_size, int64_t tp_rank,
              uint64_t seed, const StageLayers& stage, bool sequence_parallel,
              const ExpertParallel& ep = {}, c10::Device device = c10::kCPU);

  // This stage's part of the forward pass of `tokens` ([batch, seq + 1] int64: inputs and shifted
  // targets). `hidden` is the previous stage's output (ignored on the first stage). Returns the
  // mean next-token cross-entropy on the last stage, the hidden states [batch, seq, hidden]
  // elsewhere ([batch, seq / tp, hidden] with SP). `chunk`: which of the stage's model chunks
  // (interleaved pipelines); the embeddings run in chunk 0, the head in the last.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& hidden,
                        int64_t chunk = 0);

  // Attention as three timed kernels (scores, softmax, context) rather than one fused op, as the
  // plan's attention_kernel says; the math is the same.
  void set_materialized_attention(bool on) { materialized_attention_ = on; }
  // The plan's expert capacity for the MoE layers (moe_capacity.hpp); none by default.
  void set_moe_capacity(const MoeCapacity& capacity) { moe_capacity_ = capacity; }
  // moe_expert_gemm per_expert: each routed expert's kernels timed as their own nodes.
  void set_per_expert_nodes(bool on) { per_expert_nodes_ = on; }
  // Context parallelism over the ring `cp` (ring_attention.hpp): this rank trains on its two
  // chunks of each `seq_len`-token sequence; forward() still takes the whole sequences and keeps
  // this rank's tokens, and attention runs around the ring.
  void set_context_parallel(GroupPtr cp, int64_t seq_len);

  const std::vector<ShardedParam>& parameters() const { return params_; }
  // For the data-parallel optimizer, which may replace the tensors (FSDP: by gathered copies).
  std::vector<ShardedParam>& mutable_parameters() { return params_; }
  void set_part_hooks(PartHooks* hooks) { hooks_ = hooks; }
  const std::vector<ParamMeta>& all_parameters() const { return all_; }
  // This stage's parameter called `name`, or null.
  const ShardedParam* find(const std::string& name) const;

 private:
  // `expert` >= 0: a routed expert's weight, kept by the EP rank holding it; `tp_partial_grad`:
  // replicated, with a gradient summed over TP (model_moe.hpp).
  void add(const std::string& name, std::vector<int64_t> full_shape, int64_t shard_dim,
           double std_dev, int64_t layer, int64_t expert = -1, bool tp_partial_grad = false);
  const torch::Tensor& p(const std::string& name) const;
  // One part's forward `fn()` between the part hooks.
  template <typename Fn>
  torch::Tensor in_part(const std::string& part, Fn&& fn) {
    if (hooks_ == nullptr) return fn();
    hooks_->before_forward(part);
    return hooks_->after_forward(part, fn());
  }
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  torch::Tensor norm(const torch::Tensor& x, const std::string& prefix) const;
  // The model's norm with these weights (bias: LayerNorm's; undefined for RMSNorm).
  torch::Tensor norm_of(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias) const;
  // Block `block`'s ("attn." or "mlp.") input norm of decoder layer `layer`, timed as
  // "<block>norm"; under recompute_modules layernorm its output is discarded and `discarded`
  // holds it for the block to free (discard_output.hpp).
  torch::Tensor block_norm(const torch::Tensor& x, int64_t layer, const std::string& block,
                           std::optional<DiscardedOutput>& discarded) const;
  torch::Tensor embed(const torch::Tensor& inputs) const;
  // One decoder layer: attention then MLP, or the two side by side in a parallel block.
  torch::Tensor layer(const torch::Tensor& x, int64_t l) const;
  torch::Tensor attention(const torch::Tensor& x, int64_t layer) const;
  torch::Tensor attention_partial(const torch::Tensor& n, int64_t layer) const;
  torch::Tensor mlp(const torch::Tensor& x, int64_t layer) const;
  torch::Tensor mlp_partial(const torch::Tensor& n, int64_t layer) const;
  torch::Tensor parallel_block(const torch::Tensor& x, int64_t layer) const;
  torch::Tensor block_output(const torch::Tensor& x, const torch::Tensor& out, int64_t layer,
                             const std::string& block) const;
  // The lowering's node name of `what` in this layer and micro-batch.
  std::string name(int64_t layer, const char* phase, const std::string& what) const;
  torch::Tensor enter_tp_region(const torch::Tensor& normed, int64_t layer,
                                const std::string& norm_op) const;
  // After a row-parallel GEMM: all-reduce, or reduce-scatter along the sequence with SP.
  torch::Tensor row_parallel_out(const torch::Tensor& partial, int64_t layer,
                                 const std::string& op) const;
  torch::Tensor rope(const torch::Tensor& x) const;  // [b, heads, s, d]
  // The sequence positions of this rank's `s` tokens (0 .. s - 1 without CP), on its device.
  torch::Tensor positions(int64_t s) const;
  // Decoder layer `l`'s forward as a region re-run in the backward pass (recompute full, or
  // op-level checkpointing, whose first forward also keeps outputs: op_checkpoint.hpp).
  torch::Tensor recomputed_layer(const torch::Tensor& x, int64_t l, bool op_level);
  // A weight (with its bias, null for none) of a GEMM op.
  struct GemmPiece {
    const torch::Tensor* weight;
    const torch::Tensor* bias;
  };
  // A decoder layer's GEMM op `op` on x, the pieces' outputs side by side (model_transformer.cpp).
  torch::Tensor gemm(int64_t layer, const std::string& op, const torch::Tensor& x,
                     const std::vector<GemmPiece>& pieces) const;
  // p(name), or null when this stage has no such parameter.
  const torch::Tensor* maybe(const std::string& name) const;

  pb::ModelSpec spec_;
  GroupPtr tp_;
  int64_t tp_size_, tp_rank_;
  int64_t head_dim_;
  bool sp_;
  bool materialized_attention_ = false;
  MoeCapacity moe_capacity_;
  bool per_expert_nodes_ = false;
  ExpertParallel ep_;
  GroupPtr cp_;                 // null: no context parallelism
  torch::Tensor cp_positions_;  // this CP rank's sequence positions
  int64_t seq_len_ = 0;         // the whole sequence, under CP
  StageLayers stage_;
  c10::Device device_;
  torch::Generator gen_;  // CPU, seeded: the same draws whatever the device
  std::vector<ShardedParam> params_;
  std::vector<ParamMeta> all_;
  std::unordered_map<std::string, size_t> index_;
  PartHooks* hooks_ = nullptr;
};

}  // namespace orrery::executor
