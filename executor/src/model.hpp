// A decoder-only transformer built from a ModelSpec, Megatron tensor-parallel: attention heads
// and FFN columns split over the TP group (q/k/v and up/gate column-parallel, out and down
// row-parallel); norms, embeddings and the LM head replicated. Llama-style (RMSNorm, SwiGLU,
// GQA, RoPE) and GPT-style (LayerNorm, GeLU, learned positions, biases) both come from the spec.
// Parameters are drawn full from `seed` in a fixed order and then sliced, so every TP degree
// starts from the same weights as a single process. Under pipeline parallelism a rank draws them
// all too and keeps its stage's: embeddings on the first stage, the head on the last.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "orrery/pb/model.pb.h"
#include "parallel.hpp"

namespace orrery::executor {

// The decoder layers [first_layer, end_layer) of one pipeline stage.
struct StageLayers {
  int64_t first_layer = 0, end_layer = 0;
  bool first = true, last = true;  // holds the embeddings / the head and loss
};

// Every parameter of the model, whichever stage holds it.
struct ParamMeta {
  std::string name;
  std::vector<int64_t> full_shape;
  int64_t layer = 0;  // -1: embeddings, num_layers: head
};

class Transformer {
 public:
  // `sequence_parallel`: Megatron SP in the TP group (hidden states between the TP regions hold
  // seq / tp tokens; norms and row-parallel biases run on them).
  Transformer(const pb::ModelSpec& spec, GroupPtr tp, int64_t tp_size, int64_t tp_rank, uint64_t seed,
              const StageLayers& stage, bool sequence_parallel);

  // This stage's part of the forward pass of `tokens` ([batch, seq + 1] int64: inputs and shifted
  // targets). `hidden` is the previous stage's output (ignored on the first stage). Returns the
  // mean next-token cross-entropy on the last stage, the hidden states [batch, seq, hidden]
  // elsewhere ([batch, seq / tp, hidden] with SP).
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& hidden);

  const std::vector<ShardedParam>& parameters() const { return params_; }
  const std::vector<ParamMeta>& all_parameters() const { return all_; }
  // This stage's parameter called `name`, or null.
  const ShardedParam* find(const std::string& name) const;

 private:
  void add(const std::string& name, std::vector<int64_t> full_shape, int64_t shard_dim, double std_dev,
           int64_t layer);
  const torch::Tensor& p(const std::string& name) const;
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  torch::Tensor norm(const torch::Tensor& x, const std::string& prefix) const;
  torch::Tensor attention(const torch::Tensor& x, int64_t layer) const;
  torch::Tensor mlp(const torch::Tensor& x, int64_t layer) const;
  // After a row-parallel GEMM: all-reduce, or reduce-scatter along the sequence with SP.
  torch::Tensor row_parallel_out(const torch::Tensor& partial) const;
  torch::Tensor rope(const torch::Tensor& x) const;  // [b, heads, s, d]

  pb::ModelSpec spec_;
  GroupPtr tp_;
  int64_t tp_size_, tp_rank_;
  int64_t head_dim_;
  bool sp_;
  StageLayers stage_;
  torch::Generator gen_;
  std::vector<ShardedParam> params_;
  std::vector<ParamMeta> all_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace orrery::executor
