#include <algorithm>
#include <cmath>
#include <optional>

#include <torch/version.h>

#include "attention_math.hpp"
#include "discard_output.hpp"
#include "model.hpp"
#include "op_checkpoint.hpp"
#include "op_trace.hpp"
#include "orrery/base/error.hpp"
#include "orrery/models/activation.hpp"
#include "orrery/models/layer_ops.hpp"
#include "orrery/models/model_catalog.hpp"
#include "recompute.hpp"
#include "ring_attention.hpp"

namespace orrery::executor {
namespace {

constexpr double kInitStd = 0.02;  // GPT-2 / Megatron init
constexpr double kNormEps = 1e-5;
constexpr double kRopeTheta = 10000.0;

// The rotated dimensions of each head, as the layer decomposition counts them.
int64_t rotary_dims(const pb::ModelSpec& spec) {
  const double fraction = spec.has_rotary_fraction() ? spec.rotary_fraction() : 1.0;
  return static_cast<int64_t>(static_cast<double>(models::head_dim(spec)) * fraction);
}

}  // namespace

Transformer::Transformer(const pb::ModelSpec& spec, GroupPtr tp, int64_t tp_size, int64_t tp_rank,
                         uint64_t seed, const StageLayers& stage, bool sequence_parallel,
                         const ExpertParallel& ep, c10::Device device)
    : spec_(spec),
      tp_(std::move(tp)),
      tp_size_(tp_size),
      tp_rank_(tp_rank),
      head_dim_(models::head_dim(spec)),
      sp_(sequence_parallel && tp_size > 1),
      ep_(ep),
      stage_(stage),
      device_(device),
      gen_(at::detail::createCPUGenerator(seed)) {
  const int64_t h = spec.hidden_size(), v = spec.vocab_size(), f = spec.ffn_hidden_size();
  const int64_t q = spec.num_attention_heads() * head_dim_, kv = spec.num_kv_heads() * head_dim_;
  const bool ln = spec.norm() == pb::NORM_LAYERNORM;
  const bool bias = spec.linear_bias(), qkv_bias = bias || spec.qkv_bias();
  // Output projections scaled by 1/sqrt(2 * layers) (GPT-2, Megatron).
  const double out_std = kInitStd / std::sqrt(2.0 * static_cast<double>(spec.num_layers()));
  const int64_t head = spec.num_layers();
  add("embed.tokens.weight", {v, h}, 0, kInitStd, -1);  // vocabulary-parallel
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
    if (spec.qk_norm()) {  // Qwen3: one norm over head_dim for every query head, one for keys
      // Replicated, but each TP rank normalizes its own heads: gradients summed over TP.
      for (const char* which : {"q_", "k_"}) {
        add(a + which + "norm.weight", {head_dim_}, -1, 0, l, -1, true);
        if (ln) add(a + which + "norm.bias", {head_dim_}, -1, 0, l, -1, true);
      }
    }
    add(a + "out.weight", {h, q}, 1, out_std, l);
    if (bias) add(a + "out.bias", {h}, -1, 0, l);
    if (spec.post_block_norm()) {  // Gemma 2/3's sandwich norms, on each block's output
      add(a + "post_norm.weight", {h}, -1, 0, l);
      if (ln) add(a + "post_norm.bias", {h}, -1, 0, l);
      add(m + "post_norm.weight", {h}, -1, 0, l);
      if (ln) add(m + "post_norm.bias", {h}, -1, 0, l);
    }
    if (!spec.parallel_block()) {  // a parallel block's MLP reads the attention's norm
      add(m + "norm.weight", {h}, -1, 0, l);
      if (ln) add(m + "norm.bias", {h}, -1, 0, l);
    }
    if (models::is_moe_layer(spec, l)) {  // router, shared and routed experts instead of the MLP
      for (const MoeParam& e : moe_parameters(spec, l, kInitStd, out_std)) {
        add(e.name, e.shape, e.shard_dim, e.std_dev, l, e.expert, e.tp_partial_grad);
      }
      continue;
    }
    if (models::gated_activation(spec.activation()))
      add(m + "up.gate_weight", {f, h}, 0, kInitStd, l);
    add(m + "up.weight", {f, h}, 0, kInitStd, l);
    if (bias) add(m + "up.bias", {f}, 0, 0, l);
    add(m + "down.weight", {h, f}, 1, out_std, l);
    if (bias) add(m + "down.bias", {h}, -1, 0, l);
  }
  add("head.norm.weight", {h}, -1, 0, head);
  if (ln) add("head.norm.bias", {h}, -1, 0, head);
  if (!spec.tied_embeddings()) add("head.lm.weight", {v, h}, 0, kInitStd, head);
}

// Draws the full tensor on the CPU (normal(0, std_dev); std_dev 0: ones for norm weights, zeros
// for biases), then keeps this rank's slice along shard_dim when this stage holds `layer`, on the
// model's device.
void Transformer::add(const std::string& name, std::vector<int64_t> shape, int64_t shard_dim,
                      double std_dev, int64_t layer, int64_t expert, bool tp_partial_grad) {
  all_.push_back({name, shape, layer, expert});
  torch::Tensor full;
  if (std_dev > 0) {
    full = torch::randn(shape, gen_, torch::kFloat32) * std_dev;
  } else {
    const bool is_norm_weight = name.find("norm.weight") != std::string::npos;
    full = is_norm_weight ? torch::ones(shape) : torch::zeros(shape);
  }
  // A tied embedding matrix is also the last stage's LM head.
  const bool head_copy =
      name == "embed.tokens.weight" && spec_.tied_embeddings() && stage_.last && !stage_.first;
  const bool mine = head_copy                     ? true
                    : layer < 0                   ? stage_.first
                    : layer >= spec_.num_layers() ? stage_.last
                                                  : stage_.holds(layer);
  if (!mine) return;
  if (expert >= 0 && ep_.group && expert_owner(spec_, ep_.size, expert) != ep_.rank) return;
  if (shard_dim >= 0 && tp_size_ > 1) full = full.chunk(tp_size_, shard_dim)[tp_rank_];
  index_[name] = params_.size();
  // Under SP, replicated tensors inside the layers and the final norm see one sequence shard.
  // (Position embeddings too: they are added after the embedding's reduce-scatter.)
  const bool on_shard =
      (sp_ && shard_dim < 0 && name != "embed.tokens.weight") || (tp_partial_grad && tp_size_ > 1);
  // A copy either way: the slice must not keep the full tensor alive.
  auto tensor = device_.is_cpu() ? full.contiguous().clone() : full.contiguous().to(device_);
  params_.push_back({name, tensor.set_requires_grad(true), tp_size_ > 1 ? shard_dim : -1, on_shard,
                     head_copy, expert >= 0});
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

const torch::Tensor* Transformer::maybe(const std::string& name) const {
  const ShardedParam* param = find(name);
  return param != nullptr ? &param->tensor : nullptr;
}

// One fused GEMM over the pieces' weights side by side, as Megatron runs attn.qkv and a gated
// mlp.up. Under op-level checkpointing one GEMM per piece instead, as torchtitan's separate
// projections (wq, wk, wv; w1, w3) are the matmuls its policy counts: each kept or re-run as the
// policy decides, and an op whose pieces are all kept is not re-run at all (no `rcp` node, as the
// lowering has none: plan/op_sac.hpp).
torch::Tensor Transformer::gemm(int64_t layer, const std::string& op, const torch::Tensor& x,
                                const std::vector<GemmPiece>& pieces) const {
  if (!op_checkpointing()) {
    return timed_op(layer, op, [&] {
      if (pieces.size() == 1) {
        return torch::linear(x, *pieces[0].weight,
                             pieces[0].bias != nullptr ? *pieces[0].bias : torch::Tensor());
      }
      std::vector<torch::Tensor> weights, biases;
      const bool any_bias = std::any_of(pieces.begin(), pieces.end(), [](const GemmPiece& piece) {
        return piece.bias != nullptr;
      });
      for (const auto& piece : pieces) {
        weights.push_back(*piece.weight);
        // A piece without a bias (a gated MLP's gate beside the up projection's) adds zeros.
        if (any_bias) {
          biases.push_back(piece.bias != nullptr
                               ? *piece.bias
                               : torch::zeros({piece.weight->size(0)}, piece.weight->options()));
        }
      }
      return torch::linear(x, torch::cat(weights), any_bias ? torch::cat(biases) : torch::Tensor());
    });
  }
  const std::vector<bool> kept = next_matmuls_kept(pieces.size());
  auto run = [&] {
    std::vector<torch::Tensor> outs;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const torch::Tensor b = pieces[i].bias != nullptr ? *pieces[i].bias : torch::Tensor();
      outs.push_back(kept[i] ? kept_linear(op + "." + std::to_string(i), x, *pieces[i].weight, b)
                             : torch::linear(x, *pieces[i].weight, b));
    }
    return outs.size() == 1 ? outs[0] : torch::cat(outs, -1);
  };
  const bool all_kept = std::all_of(kept.begin(), kept.end(), [](bool k) { return k; });
  if (all_kept && recomputing()) return backward_mark(run(), name(layer, "bwd", op));
  return timed_op(layer, op, run);
}

torch::Tensor Transformer::norm(const torch::Tensor& x, const std::string& prefix) const {
  const bool layernorm = spec_.norm() == pb::NORM_LAYERNORM;
  return norm_of(x, p(prefix + "norm.weight"),
                 layernorm ? p(prefix + "norm.bias") : torch::Tensor());
}

torch::Tensor Transformer::norm_of(const torch::Tensor& x, const torch::Tensor& weight,
                                   const torch::Tensor& bias) const {
  if (spec_.norm() == pb::NORM_LAYERNORM)
    return torch::layer_norm(x, {x.size(-1)}, weight, bias, kNormEps);
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + kNormEps) * weight;
}

// Under recompute_modules layernorm the norm's output is discarded once its block has read it
// (discard_output.hpp); its weights are inputs of the region, so the re-run reads this micro-
// batch's (under FSDP gathered) copies.
torch::Tensor Transformer::block_norm(const torch::Tensor& x, int64_t layer,
                                      const std::string& block,
                                      std::optional<DiscardedOutput>& discarded) const {
  const std::string prefix = "layers." + std::to_string(layer) + "." + block, op = block + "norm";
  if (!recomputes_module(pb::RECOMPUTE_MODULE_LAYERNORM))
    return timed_op(layer, op, [&] { return norm(x, prefix); });
  std::vector<torch::Tensor> inputs{x, p(prefix + "norm.weight")};
  if (spec_.norm() == pb::NORM_LAYERNORM) inputs.push_back(p(prefix + "norm.bias"));
  return discarded.emplace().run(inputs, [this, layer, op](const std::vector<torch::Tensor>& in) {
    return timed_op(layer, op,
                    [&] { return norm_of(in[0], in[1], in.size() > 2 ? in[2] : torch::Tensor()); });
  });
}

// Rotary embedding, rotate-half form (GPT-NeoX, Hugging Face Llama), over the first
// rotary_fraction of each head (GPT-NeoX's rotary_pct, truncated: models::head_dims); the rest
// passes through.
torch::Tensor Transformer::rope(const torch::Tensor& x) const {
  const int64_t rotary = rotary_dims(spec_);
  if (rotary < x.size(3)) {
    return torch::cat({rope(x.narrow(3, 0, rotary)), x.narrow(3, rotary, x.size(3) - rotary)}, -1);
  }
  const int64_t s = x.size(2), d = x.size(3);
  const auto fp64 = x.options().dtype(torch::kFloat64);  // on x's device
  auto inv_freq = torch::pow(kRopeTheta, -torch::arange(0, d, 2, fp64) / static_cast<double>(d));
  auto angles = torch::outer(positions(s).to(fp64), inv_freq);  // [s, d/2]
  angles = torch::cat({angles, angles}, -1).to(x.scalar_type());
  auto halves = x.chunk(2, -1);
  auto rotated = torch::cat({-halves[1], halves[0]}, -1);
  return x * angles.cos() + rotated * angles.sin();
}

torch::Tensor Transformer::positions(int64_t s) const {
  if (cp_) return cp_positions_;
  return torch::arange(s, torch::dtype(torch::kLong).device(device_));
}

void Transformer::set_context_parallel(GroupPtr cp, int64_t seq_len) {
  if (!cp) return;
  cp_ = std::move(cp);
  seq_len_ = seq_len;
  cp_positions_ = cp_positions(seq_len, cp_->getSize(), cp_->getRank()).to(device_);
}

// Every op below runs inside timed_op (op_trace.hpp) under the name the simulator's lowering
// gives it (models/ layer_ops), and every TP collective under the lowering's collective name, so
// a measured trace has exactly the predicted graph's nodes.
std::string Transformer::name(int64_t layer, const char* phase, const std::string& what) const {
  return site_name(layer, current_micro_batch(), phase, what);
}

// Before a column-parallel region: the block norm's output all-gathered along the sequence (SP)
// or copied in (its gradient all-reduced).
torch::Tensor Transformer::enter_tp_region(const torch::Tensor& normed, int64_t layer,
                                           const std::string& norm_op) const {
  if (sp_) {
    return gather_from_sequence_region(normed, tp_, true,
                                       name(layer, "fwd", norm_op + ".all_gather"),
                                       name(layer, "bwd", norm_op + ".grad.reduce_scatter"));
  }
  return copy_to_tp_region(normed, tp_,
                           tp_ ? name(layer, "bwd", norm_op + ".grad.all_reduce") : "");
}

torch::Tensor Transformer::row_parallel_out(const torch::Tensor& partial, int64_t layer,
                                            const std::string& op) const {
  if (sp_) {
    return reduce_scatter_to_sequence_region(partial, tp_,
                                             name(layer, "fwd", op + ".reduce_scatter"),
                                             name(layer, "bwd", op + ".grad.all_gather"));
  }
  return reduce_from_tp_region(partial, tp_, tp_ ? name(layer, "fwd", op + ".all_reduce") : "");
}

// Attention from the normalized input `n` (entered into the TP region) up to the out projection's
// partial sum, before its TP reduction.
torch::Tensor Transformer::attention_partial(const torch::Tensor& n, int64_t layer) const {
  const std::string a = "layers." + std::to_string(layer) + ".attn.";
  const int64_t b = n.size(0), s = n.size(1), d = head_dim_;
  const int64_t heads = spec_.num_attention_heads() / tp_size_,
                kv_heads = spec_.num_kv_heads() / tp_size_;
  // Q, K and V as one GEMM (as Megatron fuses them), split afterwards: [b, heads + 2 kv, s, d].
  auto qkv = gemm(layer, "attn.qkv", n,
                  {{&p(a + "qkv.q_weight"), maybe(a + "qkv.q_bias")},
                   {&p(a + "qkv.k_weight"), maybe(a + "qkv.k_bias")},
                   {&p(a + "qkv.v_weight"), maybe(a + "qkv.v_bias")}})
                 .view({b, s, heads + 2 * kv_heads, d})
                 .transpose(1, 2);
  auto qk = qkv.narrow(1, 0, heads + kv_heads);
  if (spec_.qk_norm()) {
    qk = torch::cat(
        {timed_op(layer, "attn.q_norm", [&] { return norm(qk.narrow(1, 0, heads), a + "q_"); }),
         timed_op(layer, "attn.k_norm",
                  [&] { return norm(qk.narrow(1, heads, kv_heads), a + "k_"); })},
        1);
  }
  auto v = qkv.narrow(1, heads + kv_heads, kv_heads);
  if (spec_.position_embedding() == pb::POSITION_EMBEDDING_ROPE) {
    qk = timed_op(layer, "attn.rope", [&] { return rope(qk); });
  }
  auto q = qk.narrow(1, 0, heads), k = qk.narrow(1, heads, kv_heads);
  // GQA: each KV head serves heads / kv_heads consecutive query heads (the CP ring passes the
  // KV heads themselves and repeats them in its kernel).
  if (kv_heads != heads && !cp_) {
    k = k.repeat_interleave(heads / kv_heads, 1);
    v = v.repeat_interleave(heads / kv_heads, 1);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const bool materialized = materialized_attention_;
  const int64_t window =
      models::is_local_attention_layer(spec_, layer) ? spec_.sliding_window() : 0;
  const double cap = spec_.attn_logit_softcapping();
  const bool alibi = spec_.position_embedding() == pb::POSITION_EMBEDDING_ALIBI;
  const int64_t all_heads = spec_.num_attention_heads(), first_head = tp_rank_ * heads;
  // The attention core from q, k and v. It owns what it captures: selective recomputation
  // (recompute.hpp) runs it again in the backward pass, after attention() has returned.
  RingAttention ring;
  if (cp_) {
    ring = {cp_, seq_len_, scale, window, cap, {}, layer};
    if (alibi) {
      const auto slopes = alibi_slopes(all_heads);
      ring.alibi_slopes.assign(slopes.begin() + first_head, slopes.begin() + first_head + heads);
    }
  }
  auto core = [=, this](const std::vector<torch::Tensor>& qkv_in) {
    const auto &q = qkv_in[0], &k = qkv_in[1], &v = qkv_in[2];
    if (cp_) {  // around the CP ring, each step timed as its own node
      return ring_attention(q, k, v, ring).transpose(1, 2).reshape({b, s, heads * d});
    }
    // ALiBi's biases join the scores in the QK^T GEMM (as the lowering's attn.scores has them).
    auto scores_of = [&] {
      auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale;
      if (alibi) scores = scores + alibi_bias(all_heads, first_head, heads, s, scores.options());
      return scores;
    };
    auto capped = [&](const torch::Tensor& scores) {
      return cap > 0 ? softcap(scores, cap) : scores;
    };
    auto softmax_of = [&](const torch::Tensor& scores) {
      auto mask = attention_mask(s, window, scores.options());
      return torch::softmax(scores.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
    };
    auto context_of = [&](const torch::Tensor& probs) {
      return torch::matmul(probs, v).transpose(1, 2).reshape({b, s, heads * d});
    };
    torch::Tensor context;
    if (materialized) {  // the plan costs the three kernels separately
      auto scores = timed_op(layer, "attn.scores", scores_of);
      if (cap > 0) scores = timed_op(layer, "attn.softcap", [&] { return capped(scores); });
      auto probs = timed_op(layer, "attn.softmax", [&] { return softmax_of(scores); });
      context = timed_op(layer, "attn.context", [&] { return context_of(probs); });
    } else {  // one fused kernel in the plan
      context = timed_op(layer, "attn.core", [&] {
#if TORCH_VERSION_MAJOR >= 2
        // On a GPU, PyTorch's fused causal attention (flash in bf16): the kernel the plan costs,
        // and without it the [b, heads, s, s] scores and probabilities of every layer stay saved
        // for the backward pass (133 GiB for llama3.2-1b at 8 x 2048 tokens, more than an H200
        // holds).
        // (Plain causal attention only: a window, ALiBi or soft-capping take the math below.)
        if (q.is_cuda() && window == 0 && !alibi && cap <= 0) {
          return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, scale)
              .transpose(1, 2)
              .reshape({b, s, heads * d});
        }
#endif
        // Libtorch 1.13 has no public fused attention, and on the CPU the same math timed as one op
        // keeps the CPU runs' numerics (and the correctness tests' tolerances) as they were.
        return context_of(softmax_of(capped(scores_of())));
      });
    }
    return context;
  };
  torch::Tensor context;
  if (op_checkpointing() && !materialized && !cp_) {  // (the CP ring keeps its own output)
    // Op-level checkpointing keeps the fused kernel's output: the re-run takes it from memory,
    // so only the kernel's backward is timed then.
    context = kept_region("attn.core", {q, k, v}, core);
    if (recomputing()) context = backward_mark(context, name(layer, "bwd", "attn.core"));
  } else {
    context = recomputes_module(pb::RECOMPUTE_MODULE_CORE_ATTN)
                  ? recompute_in_backward({q, k, v}, core)
                  : core({q, k, v});
  }
  return gemm(layer, "attn.out", context, {{&p(a + "out.weight"), nullptr}});
}

torch::Tensor Transformer::attention(const torch::Tensor& x, int64_t layer) const {
  std::optional<DiscardedOutput> discarded;
  auto n = enter_tp_region(block_norm(x, layer, "attn.", discarded), layer, "attn.norm");
  auto out = row_parallel_out(attention_partial(n, layer), layer, "attn.out");
  auto y = block_output(x, out, layer, "attn.");
  return discarded ? discarded->discard_until(y) : y;
}

// The residual add of a block's reduced output (with its row-parallel bias), through the block's
// post norm when the model has one (the bias goes in before the norm).
torch::Tensor Transformer::block_output(const torch::Tensor& x, const torch::Tensor& out,
                                        int64_t layer, const std::string& block) const {
  const std::string prefix = "layers." + std::to_string(layer) + "." + block;
  const std::string bias = prefix + (block == "attn." ? "out.bias" : "down.bias");
  const std::string residual = block == "attn." ? "attn.residual" : "mlp.residual";
  if (!spec_.post_block_norm()) {
    return timed_op(layer, residual, [&] { return has(bias) ? x + out + p(bias) : x + out; });
  }
  auto normed = timed_op(layer, block + "post_norm",
                         [&] { return norm(has(bias) ? out + p(bias) : out, prefix + "post_"); });
  return timed_op(layer, residual, [&] { return x + normed; });
}

// The MLP block: norm, then from the norm's output the TP region's entry (the SP all-gather),
// the dense MLP or the MoE layer (model_moe.cpp; one TP reduction of routed + shared experts) and
// the TP reduction. Megatron-core's checkpointed MLP (recompute_modules mlp for a dense layer, moe
// for an MoE layer) keeps only the norm's output and re-runs the rest from it when the backward
// reaches the block's output, named in the recompute phase as the lowering names it.
torch::Tensor Transformer::mlp(const torch::Tensor& x, int64_t layer) const {
  const bool moe_layer = models::is_moe_layer(spec_, layer);
  const auto from_norm = [this, layer, moe_layer](const std::vector<torch::Tensor>& in) {
    const torch::Tensor n = enter_tp_region(in[0], layer, "mlp.norm");
    if (!moe_layer) return row_parallel_out(mlp_partial(n, layer), layer, "mlp.down");
    const MoeContext moe{&spec_,
                         ep_,
                         tp_size_,
                         tp_rank_,
                         [this](const std::string& what) { return has(what) ? &p(what) : nullptr; },
                         moe_capacity_,
                         sp_ ? tp_size_ : 1,
                         per_expert_nodes_};
    return row_parallel_out(moe_ffn(moe, layer, n), layer, "moe.experts.down");
  };
  std::optional<DiscardedOutput> discarded;
  auto normed = block_norm(x, layer, "mlp.", discarded);
  auto out = recomputes_module(moe_layer ? pb::RECOMPUTE_MODULE_MOE : pb::RECOMPUTE_MODULE_MLP)
                 ? recompute_in_backward({normed}, from_norm)
                 : from_norm({normed});
  auto y = block_output(x, out, layer, "mlp.");
  return discarded ? discarded->discard_until(y) : y;
}

// The dense MLP from the normalized input `n` up to the down projection's partial sum.
torch::Tensor Transformer::mlp_partial(const torch::Tensor& n, int64_t layer) const {
  const std::string m = "layers." + std::to_string(layer) + ".mlp.";
  const bool gate = has(m + "up.gate_weight");
  // Gated MLPs run the gate and up projections as one GEMM: [..., 2 f] (gate first).
  std::vector<GemmPiece> up_pieces;
  if (gate) up_pieces.push_back({&p(m + "up.gate_weight"), nullptr});
  up_pieces.push_back({&p(m + "up.weight"), maybe(m + "up.bias")});
  auto up = gemm(layer, "mlp.up", n, up_pieces);
  auto act =
      timed_op(layer, "mlp.act", [&] { return ffn_activation(up, spec_.activation(), gate); });
  return gemm(layer, "mlp.down", act, {{&p(m + "down.weight"), nullptr}});
}

// GPT-J/PaLM's parallel block: attention and MLP both read the one norm's output, their partial
// sums are added (block.sum) and reduced over TP once, then added to the residual with both
// row-parallel biases (the lowering's block.sum and block.residual).
torch::Tensor Transformer::parallel_block(const torch::Tensor& x, int64_t layer) const {
  const std::string l = "layers." + std::to_string(layer) + ".";
  auto n = enter_tp_region(timed_op(layer, "attn.norm", [&] { return norm(x, l + "attn."); }),
                           layer, "attn.norm");
  auto attn = attention_partial(n, layer);
  // recompute_modules mlp: the MLP re-runs from the shared normalized input (kept for the
  // attention anyway); the one TP reduction after block.sum is outside it.
  auto mlp = recomputes_module(pb::RECOMPUTE_MODULE_MLP)
                 ? recompute_in_backward({n},
                                         [this, layer](const std::vector<torch::Tensor>& in) {
                                           return mlp_partial(in[0], layer);
                                         })
                 : mlp_partial(n, layer);
  auto out = row_parallel_out(timed_op(layer, "block.sum", [&] { return attn + mlp; }), layer,
                              "block.sum");
  return timed_op(layer, "block.residual", [&] {
    auto y = x + out;
    if (has(l + "attn.out.bias")) y = y + p(l + "attn.out.bias");
    if (has(l + "mlp.down.bias")) y = y + p(l + "mlp.down.bias");
    return y;
  });
}

// Megatron's vocabulary-parallel embedding: each TP rank looks up the tokens of its vocabulary
// slice (zeros for the others), then the partial embeddings are summed (all-reduce), or
// reduce-scattered along the sequence under SP.
torch::Tensor Transformer::embed(const torch::Tensor& inputs) const {
  const auto& w = p("embed.tokens.weight");
  const int64_t local_vocab = w.size(0), start = tp_rank_ * local_vocab;
  auto x = timed_op(-1, "embed.tokens", [&] {
    if (!tp_) return torch::embedding(w, inputs);
    auto local = inputs - start;
    auto in_range = (local >= 0).logical_and(local < local_vocab);
    return torch::embedding(w, local.clamp(0, local_vocab - 1)) *
           in_range.unsqueeze(-1).to(w.scalar_type());
  });
  if (sp_) {
    x = reduce_scatter_to_sequence_region(x, tp_, name(-1, "fwd", "embed.tokens.reduce_scatter"),
                                          name(-1, "bwd", "embed.tokens.grad.all_gather"));
  } else if (tp_) {
    x = reduce_from_tp_region(x, tp_, name(-1, "fwd", "embed.tokens.all_reduce"));
  }
  if (!has("embed.positions.weight")) return x;
  // Under SP this rank holds the sequence positions [rank * s / tp, (rank + 1) * s / tp).
  const int64_t s = x.size(1), first = sp_ ? tp_rank_ * s : 0;
  return timed_op(-1, "embed.positions", [&] {
    const auto& table = p("embed.positions.weight");
    // Under CP this rank's tokens sit at its two chunks' positions.
    return x + (cp_ ? table.index_select(0, cp_positions_.narrow(0, first, s))
                    : table.narrow(0, first, s));
  });
}

torch::Tensor Transformer::layer(const torch::Tensor& x, int64_t l) const {
  return spec_.parallel_block() ? parallel_block(x, l) : mlp(attention(x, l), l);
}

torch::Tensor Transformer::recomputed_layer(const torch::Tensor& x, int64_t l, bool op_level) {
  // Under ZeRO-3/FSDP the layer's parameters are this micro-batch's gathered copies, not leaves:
  // they are inputs of the region too, so the re-run reads the copies the backward gather
  // re-filled (params_ may hold a later micro-batch's by then, or a freed bucket's) and their
  // gradients flow back through the gather to the reduce-scatter (a leaf parameter needs neither).
  std::vector<torch::Tensor> inputs{x};
  std::vector<size_t> gathered;
  const std::string prefix = "layers." + std::to_string(l) + ".";
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& t = params_[i].tensor;
    if (params_[i].name.rfind(prefix, 0) == 0 && t.requires_grad() && !t.is_leaf()) {
      gathered.push_back(i);
      inputs.push_back(t);
    }
  }
  return recompute_in_backward(inputs,
                               [this, l, gathered, op_level](const std::vector<torch::Tensor>& in) {
                                 std::vector<torch::Tensor> outer;
                                 for (size_t j = 0; j < gathered.size(); ++j) {
                                   outer.push_back(params_[gathered[j]].tensor);
                                   params_[gathered[j]].tensor = in[j + 1];
                                 }
                                 std::optional<OpCheckpointScope> scope;
                                 if (op_level) scope.emplace(l);
                                 const torch::Tensor out = layer(in[0], l);
                                 scope.reset();
                                 for (size_t j = 0; j < gathered.size(); ++j)
                                   params_[gathered[j]].tensor = outer[j];
                                 return out;
                               });
}

torch::Tensor Transformer::forward(const torch::Tensor& tokens, const torch::Tensor& hidden,
                                   int64_t chunk) {
  const int64_t s = tokens.size(1) - 1;
  auto inputs = tokens.narrow(1, 0, s), targets = tokens.narrow(1, 1, s);
  if (cp_) {  // this CP rank's two chunks of each sequence
    inputs = inputs.index_select(1, cp_positions_);
    targets = targets.index_select(1, cp_positions_);
  }
  const bool embeds = stage_.first && chunk == 0;
  const bool ends = stage_.last && chunk + 1 == static_cast<int64_t>(stage_.chunks.size());
  torch::Tensor x = embeds ? in_part("embed", [&] { return embed(inputs); }) : hidden;
  const LayerRange& range = stage_.chunks.at(static_cast<size_t>(chunk));
  for (int64_t l = range.first; l < range.end; ++l) {
    x = in_part("L" + std::to_string(l), [&] {
      const bool op_level = recompute_mode() == pb::RECOMPUTE_SELECTIVE_OP;
      return recomputes_layer(l) || op_level ? recomputed_layer(x, l, op_level) : layer(x, l);
    });
  }
  if (!ends) return x;
  if (hooks_ != nullptr) hooks_->before_forward("head");
  auto h =
      enter_tp_region(timed_op(-1, "head.norm", [&] { return norm(x, "head."); }), -1, "head.norm");
  // The LM head is column-parallel over the vocabulary (tied: the embedding's own slice).
  const auto& w = has("head.lm.weight") ? p("head.lm.weight") : p("embed.tokens.weight");
  auto logits = timed_op(-1, "head.lm", [&] { return torch::linear(h, w); });
  if (spec_.final_logit_softcapping() > 0) {  // Gemma 2: cap x tanh(logits / cap)
    logits = timed_op(-1, "head.softcap",
                      [&] { return softcap(logits, spec_.final_logit_softcapping()); });
  }
  auto loss = timed_op(-1, "head.loss", [&] {
    // From fp32 logits under bf16 too (as Megatron computes the vocabulary-parallel loss).
    return vocab_parallel_cross_entropy(logits.to(torch::kFloat32), targets, tp_,
                                        tp_rank_ * w.size(0),
                                        tp_ ? name(-1, "fwd", "head.loss") : "");
  });
  return hooks_ != nullptr ? hooks_->after_forward("head", loss) : loss;
}

}  // namespace orrery::executor
