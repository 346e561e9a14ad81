#include <cmath>

#include "model.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/traces/error.hpp"

namespace orrery::executor {
namespace {

constexpr double kInitStd = 0.02;  // GPT-2 / Megatron init
constexpr double kNormEps = 1e-5;
constexpr double kRopeTheta = 10000.0;

bool gated(pb::Activation a) { return a == pb::ACTIVATION_SWIGLU || a == pb::ACTIVATION_GEGLU; }

}  // namespace

Transformer::Transformer(const pb::ModelSpec& spec, GroupPtr tp, int64_t tp_size, int64_t tp_rank, uint64_t seed,
                         const StageLayers& stage, bool sequence_parallel)
    : spec_(spec), tp_(std::move(tp)), tp_size_(tp_size), tp_rank_(tp_rank),
      head_dim_(models::head_dim(spec)), sp_(sequence_parallel && tp_size > 1), stage_(stage), gen_(at::detail::createCPUGenerator(seed)) {
  const int64_t h = spec.hidden_size(), v = spec.vocab_size(), f = spec.ffn_hidden_size();
  const int64_t q = spec.num_attention_heads() * head_dim_, kv = spec.num_kv_heads() * head_dim_;
  const bool ln = spec.norm() == pb::NORM_LAYERNORM;
  const bool bias = spec.linear_bias(), qkv_bias = bias || spec.qkv_bias();
  // Output projections scaled by 1/sqrt(2 * layers) (GPT-2, Megatron).
  const double out_std = kInitStd / std::sqrt(2.0 * static_cast<double>(spec.num_layers()));
  const int64_t head = spec.num_layers();
  add("embed.tokens.weight", {v, h}, -1, kInitStd, -1);
  if (spec.position_embedding() == pb::POSITION_EMBEDDING_LEARNED) {
    add("embed.positions.weight", {spec.max_seq_len(), h}, -1, kInitStd, -1);
  }
  for (int64_t l = 0; l < spec.num_layers(); ++l) {
    const std::string a = "layers." + std::to_string(l) + ".attn.";
    const std::string m = "layers." + std::to_string(l) + ".mlp.";
    add(a + "norm.weight", {h}, -1, 0, l);
    if (ln) add(a + "norm.bias", {h}, -1, 0, l);
    add(a + "qkv.q_weight", {q, h}, 0, kInitStd, l);
    add(a + "qkv.k_weight", {kv, h}, 0, kInitStd, l);
    add(a + "qkv.v_weight", {kv, h}, 0, kInitStd, l);
    if (qkv_bias) {
      add(a + "qkv.q_bias", {q}, 0, 0, l);
      add(a + "qkv.k_bias", {kv}, 0, 0, l);
      add(a + "qkv.v_bias", {kv}, 0, 0, l);
    }
    add(a + "out.weight", {h, q}, 1, out_std, l);
    if (bias) add(a + "out.bias", {h}, -1, 0, l);
    add(m + "norm.weight", {h}, -1, 0, l);
    if (ln) add(m + "norm.bias", {h}, -1, 0, l);
    if (gated(spec.activation())) add(m + "up.gate_weight", {f, h}, 0, kInitStd, l);
    add(m + "up.weight", {f, h}, 0, kInitStd, l);
    if (bias) add(m + "up.bias", {f}, 0, 0, l);
    add(m + "down.weight", {h, f}, 1, out_std, l);
    if (bias) add(m + "down.bias", {h}, -1, 0, l);
  }
  add("head.norm.weight", {h}, -1, 0, head);
  if (ln) add("head.norm.bias", {h}, -1, 0, head);
  if (!spec.tied_embeddings()) add("head.lm.weight", {v, h}, -1, kInitStd, head);
}

// Draws the full tensor (normal(0, std_dev); std_dev 0: ones for norm weights, zeros for biases),
// then keeps this rank's slice along shard_dim when this stage holds `layer`.
void Transformer::add(const std::string& name, std::vector<int64_t> shape, int64_t shard_dim, double std_dev,
                      int64_t layer) {
  all_.push_back({name, shape, layer});
  torch::Tensor full;
  if (std_dev > 0) {
    full = torch::randn(shape, gen_, torch::kFloat32) * std_dev;
  } else {
    const bool is_norm_weight = name.find("norm.weight") != std::string::npos;
    full = is_norm_weight ? torch::ones(shape) : torch::zeros(shape);
  }
  // A tied embedding matrix is also the last stage's LM head.
  const bool head_copy = name == "embed.tokens.weight" && spec_.tied_embeddings() && stage_.last && !stage_.first;
  const bool mine = head_copy ? true
                    : layer < 0 ? stage_.first
                    : layer >= spec_.num_layers() ? stage_.last
                                                  : layer >= stage_.first_layer && layer < stage_.end_layer;
  if (!mine) return;
  if (shard_dim >= 0 && tp_size_ > 1) full = full.chunk(tp_size_, shard_dim)[tp_rank_];
  index_[name] = params_.size();
  // Under SP, replicated tensors inside the layers and the final norm see one sequence shard.
  const bool on_shard = sp_ && shard_dim < 0 && name.rfind("embed.", 0) != 0 && name != "head.lm.weight";
  params_.push_back(
      {name, full.contiguous().clone().set_requires_grad(true), tp_size_ > 1 ? shard_dim : -1, on_shard, head_copy});
}

const ShardedParam* Transformer::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &params_[it->second];
}

const torch::Tensor& Transformer::p(const std::string& name) const {
  const auto it = index_.find(name);
  ORRERY_CHECK(it != index_.end(), "no parameter " + name);
  return params_[it->second].tensor;
}

torch::Tensor Transformer::norm(const torch::Tensor& x, const std::string& prefix) const {
  if (spec_.norm() == pb::NORM_LAYERNORM) {
    return torch::layer_norm(x, {x.size(-1)}, p(prefix + "norm.weight"), p(prefix + "norm.bias"), kNormEps);
  }
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + kNormEps) * p(prefix + "norm.weight");
}

// Rotary embedding, rotate-half form (GPT-NeoX, Hugging Face Llama), over the whole head.
torch::Tensor Transformer::rope(const torch::Tensor& x) const {
  const int64_t s = x.size(2), d = x.size(3);
  auto inv_freq = torch::pow(kRopeTheta, -torch::arange(0, d, 2, torch::kFloat64) / static_cast<double>(d));
  auto angles = torch::outer(torch::arange(s, torch::kFloat64), inv_freq);  // [s, d/2]
  angles = torch::cat({angles, angles}, -1).to(x.scalar_type());
  auto halves = x.chunk(2, -1);
  auto rotated = torch::cat({-halves[1], halves[0]}, -1);
  return x * angles.cos() + rotated * angles.sin();
}

torch::Tensor Transformer::attention(const torch::Tensor& x, int64_t layer) const {
  const std::string a = "layers." + std::to_string(layer) + ".attn.";
  auto n = sp_ ? gather_from_sequence_region(norm(x, a), tp_, true) : copy_to_tp_region(norm(x, a), tp_);
  const int64_t b = n.size(0), s = n.size(1), d = head_dim_;
  const int64_t heads = spec_.num_attention_heads() / tp_size_, kv_heads = spec_.num_kv_heads() / tp_size_;
  auto bias = [&](const std::string& name) { return has(a + name) ? p(a + name) : torch::Tensor(); };
  auto q = torch::linear(n, p(a + "qkv.q_weight"), bias("qkv.q_bias")).view({b, s, heads, d}).transpose(1, 2);
  auto k = torch::linear(n, p(a + "qkv.k_weight"), bias("qkv.k_bias")).view({b, s, kv_heads, d}).transpose(1, 2);
  auto v = torch::linear(n, p(a + "qkv.v_weight"), bias("qkv.v_bias")).view({b, s, kv_heads, d}).transpose(1, 2);
  if (spec_.position_embedding() == pb::POSITION_EMBEDDING_ROPE) {
    q = rope(q);
    k = rope(k);
  }
  if (kv_heads != heads) {  // GQA: each KV head serves heads / kv_heads consecutive query heads
    k = k.repeat_interleave(heads / kv_heads, 1);
    v = v.repeat_interleave(heads / kv_heads, 1);
  }
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
  auto mask = torch::ones({s, s}, torch::kBool).triu(1);
  auto probs = torch::softmax(scores.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
  auto context = torch::matmul(probs, v).transpose(1, 2).reshape({b, s, heads * d});
  auto out = row_parallel_out(torch::linear(context, p(a + "out.weight")));
  return has(a + "out.bias") ? out + p(a + "out.bias") : out;
}

torch::Tensor Transformer::row_parallel_out(const torch::Tensor& partial) const {
  return sp_ ? reduce_scatter_to_sequence_region(partial, tp_) : reduce_from_tp_region(partial, tp_);
}

torch::Tensor Transformer::mlp(const torch::Tensor& x, int64_t layer) const {
  const std::string m = "layers." + std::to_string(layer) + ".mlp.";
  auto n = sp_ ? gather_from_sequence_region(norm(x, m), tp_, true) : copy_to_tp_region(norm(x, m), tp_);
  auto up = torch::linear(n, p(m + "up.weight"), has(m + "up.bias") ? p(m + "up.bias") : torch::Tensor());
  torch::Tensor act;
  switch (spec_.activation()) {
    case pb::ACTIVATION_SWIGLU: act = torch::silu(torch::linear(n, p(m + "up.gate_weight"))) * up; break;
    case pb::ACTIVATION_GEGLU: act = torch::gelu(torch::linear(n, p(m + "up.gate_weight"))) * up; break;
    case pb::ACTIVATION_RELU: act = torch::relu(up); break;
    case pb::ACTIVATION_SQUARED_RELU: act = torch::relu(up).pow(2); break;
    default: act = torch::gelu(up);
  }
  auto out = row_parallel_out(torch::linear(act, p(m + "down.weight")));
  return has(m + "down.bias") ? out + p(m + "down.bias") : out;
}

torch::Tensor Transformer::forward(const torch::Tensor& tokens, const torch::Tensor& hidden) {
  const int64_t s = tokens.size(1) - 1;
  auto inputs = tokens.narrow(1, 0, s), targets = tokens.narrow(1, 1, s);
  torch::Tensor x = hidden;
  if (stage_.first) {
    x = torch::embedding(p("embed.tokens.weight"), inputs);
    if (has("embed.positions.weight")) x = x + p("embed.positions.weight").narrow(0, 0, s);
    if (sp_) x = scatter_to_sequence_region(x, tp_);
  }
  for (int64_t l = stage_.first_layer; l < stage_.end_layer; ++l) {
    x = x + attention(x, l);
    x = x + mlp(x, l);
  }
  if (!stage_.last) return x;
  x = norm(x, "head.");
  // The LM head is replicated: every TP rank needs the whole sequence, and its gradient is its own.
  if (sp_) x = gather_from_sequence_region(x, tp_, false);
  const auto& w = has("head.lm.weight") ? p("head.lm.weight") : p("embed.tokens.weight");
  auto logits = torch::linear(x, w);
  return torch::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace orrery::executor
