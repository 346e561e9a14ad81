// Semantic rules a ModelSpec must pass beyond its schema (which the generic reader already
// enforces: required fields, signs, enum names). Each failure names the field and its line.
#include <cmath>
#include <string>
#include <utility>

#include "orrery/base/units.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/traces/field_ranges.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::models {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

void check_attention(const pb::ModelSpec& spec, const SourceMap& where) {
  if (spec.num_attention_heads() % spec.num_kv_heads() != 0) {
    where.fail("num_kv_heads", "got " + str(spec.num_kv_heads()) +
                                   ", must divide num_attention_heads (" +
                                   str(spec.num_attention_heads()) + ")");
  }
  if (!spec.has_head_dim() && spec.hidden_size() % spec.num_attention_heads() != 0) {
    where.fail("num_attention_heads", "got " + str(spec.num_attention_heads()) +
                                          ", must divide hidden_size (" + str(spec.hidden_size()) +
                                          ") when head_dim is not set");
  }
  if (spec.qkv_bias() && spec.linear_bias()) {
    where.fail("qkv_bias", "redundant: linear_bias is true, so every linear layer has a bias");
  }
}

void check_enums(const pb::ModelSpec& spec, const SourceMap& where) {
  // A file cannot name the zero values, but a spec made in code can leave them out.
  if (spec.norm() == pb::NORM_UNSPECIFIED) where.fail("norm", "must be set");
  if (spec.activation() == pb::ACTIVATION_UNSPECIFIED) where.fail("activation", "must be set");
  if (spec.position_embedding() == pb::POSITION_EMBEDDING_UNSPECIFIED) {
    where.fail("position_embedding", "must be set");
  }
}

void check_regularisation(const pb::ModelSpec& spec, const SourceMap& where) {
  if (!(spec.hidden_dropout() >= 0 && spec.hidden_dropout() < 1)) {
    where.fail("hidden_dropout",
               "got " + base::units::number(spec.hidden_dropout()) + ", must be in [0, 1)");
  }
  if (spec.has_rotary_fraction()) {
    if (spec.position_embedding() != pb::POSITION_EMBEDDING_ROPE) {
      where.fail("rotary_fraction", "only applies with position_embedding: rope");
    }
    if (!(spec.rotary_fraction() > 0 && spec.rotary_fraction() <= 1)) {
      where.fail("rotary_fraction",
                 "got " + base::units::number(spec.rotary_fraction()) + ", must be in (0, 1]");
    }
  }
}

void check_attention_variants(const pb::ModelSpec& spec, const SourceMap& where) {
  if (spec.sliding_window_pattern() > 0 && spec.sliding_window() == 0) {
    where.fail("sliding_window_pattern", "got " + str(spec.sliding_window_pattern()) +
                                             ", but sliding_window is 0 (no layer is local)");
  }
  if (spec.sliding_window_from_layer() > 0 && spec.sliding_window() == 0) {
    where.fail("sliding_window_from_layer", "got " + str(spec.sliding_window_from_layer()) +
                                                ", but sliding_window is 0 (no layer is local)");
  }
  if (spec.sliding_window_from_layer() >= spec.num_layers() && spec.sliding_window() > 0) {
    where.fail("sliding_window_from_layer",
               "got " + str(spec.sliding_window_from_layer()) + ", at or past the last of " +
                   str(spec.num_layers()) + " layers: no layer would use the window");
  }
  if (spec.sliding_window_pattern() == 1) {
    where.fail("sliding_window_pattern",
               "got 1, which makes every layer global: leave sliding_window out instead");
  }
  for (const auto& [field, cap] :
       {std::pair{"attn_logit_softcapping", spec.attn_logit_softcapping()},
        std::pair{"final_logit_softcapping", spec.final_logit_softcapping()}}) {
    if (!(cap >= 0 && std::isfinite(cap))) {
      where.fail(field, "got " + base::units::number(cap) + ", must be a finite number >= 0");
    }
  }
  if (spec.parallel_block() && spec.post_block_norm()) {
    where.fail("post_block_norm",
               "not modelled with parallel_block (the parallel block sums both outputs before "
               "one residual add)");
  }
}

// Group-limited routing: a token's top_k experts must fit in its topk_group groups.
void check_moe_groups(const pb::MoeSpec& moe, const SourceMap& where) {
  if (moe.n_group() == 0 && moe.topk_group() == 0) return;
  if (moe.n_group() == 0 || moe.topk_group() == 0) {
    where.fail(moe.n_group() == 0 ? "moe.n_group" : "moe.topk_group",
               "moe.n_group and moe.topk_group come together (got n_group " + str(moe.n_group()) +
                   ", topk_group " + str(moe.topk_group()) + ")");
  }
  if (moe.num_experts() % moe.n_group() != 0) {
    where.fail("moe.n_group", "got " + str(moe.n_group()) + ", must divide moe.num_experts (" +
                                  str(moe.num_experts()) + ")");
  }
  if (moe.topk_group() > moe.n_group()) {
    where.fail("moe.topk_group", "got " + str(moe.topk_group()) + ", must be <= moe.n_group (" +
                                     str(moe.n_group()) + ")");
  }
  if (moe.topk_group() * (moe.num_experts() / moe.n_group()) < moe.top_k()) {
    where.fail("moe.topk_group", "got " + str(moe.topk_group()) + ": its groups hold fewer than " +
                                     "moe.top_k (" + str(moe.top_k()) + ") experts");
  }
}

void check_moe(const pb::ModelSpec& spec, const SourceMap& where) {
  if (!spec.has_moe()) return;
  const pb::MoeSpec& moe = spec.moe();
  if (moe.num_experts() <= 0) where.fail("moe.num_experts", "must be > 0");
  if (moe.expert_ffn_hidden_size() <= 0) where.fail("moe.expert_ffn_hidden_size", "must be > 0");
  if (moe.top_k() <= 0 || moe.top_k() > moe.num_experts()) {
    where.fail("moe.top_k", "got " + str(moe.top_k()) + ", must be in 1..moe.num_experts (" +
                                str(moe.num_experts()) + ")");
  }
  if (moe.first_dense_layers() >= spec.num_layers()) {
    where.fail("moe.first_dense_layers", "got " + str(moe.first_dense_layers()) +
                                             ", must be < num_layers (" + str(spec.num_layers()) +
                                             ") or the model has no MoE layer");
  }
  check_moe_groups(moe, where);
  if (moe.shared_expert_ffn_hidden_size() > 0 && moe.num_shared_experts() == 0) {
    where.fail(
        "moe.shared_expert_ffn_hidden_size",
        "got " + str(moe.shared_expert_ffn_hidden_size()) + ", but moe.num_shared_experts is 0");
  }
}

void check_mla(const pb::ModelSpec& spec, const SourceMap& where) {
  if (!spec.has_mla()) return;
  const pb::MlaSpec& mla = spec.mla();
  if (mla.kv_lora_rank() <= 0 || mla.qk_nope_head_dim() <= 0 || mla.qk_rope_head_dim() <= 0 ||
      mla.v_head_dim() <= 0) {
    where.fail("mla",
               "kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim must be > 0");
  }
  if (spec.position_embedding() != pb::POSITION_EMBEDDING_ROPE) {
    where.fail("position_embedding",
               "MLA (mla) requires rope: its qk_rope_head_dim part carries the positions");
  }
  if (spec.num_kv_heads() != spec.num_attention_heads()) {
    where.fail("num_kv_heads", "got " + str(spec.num_kv_heads()) +
                                   ", MLA expands keys and values to every head: must equal "
                                   "num_attention_heads (" +
                                   str(spec.num_attention_heads()) + ")");
  }
  const int64_t qk = mla.qk_nope_head_dim() + mla.qk_rope_head_dim();
  if (spec.has_head_dim() && spec.head_dim() != qk) {
    where.fail("head_dim", "got " + str(spec.head_dim()) +
                               ", with MLA must equal qk_nope_head_dim + qk_rope_head_dim (" +
                               str(qk) + ")");
  }
  if (spec.qk_norm()) where.fail("qk_norm", "not supported with MLA (it normalizes its latents)");
  if (spec.has_rotary_fraction() && spec.rotary_fraction() != 1) {
    where.fail("rotary_fraction", "must be 1 with MLA: qk_rope_head_dim sets the rotated part");
  }
}

}  // namespace

void validate_model(const pb::ModelSpec& spec, const SourceMap& where) {
  if (spec.name().empty()) where.fail("name", "must not be empty");
  check_field_values(spec, where);  // an imported config's numbers get a file's ranges
  if (spec.num_layers() <= 0 || spec.hidden_size() <= 0 || spec.num_attention_heads() <= 0 ||
      spec.num_kv_heads() <= 0 || spec.ffn_hidden_size() <= 0 || spec.vocab_size() <= 0 ||
      spec.max_seq_len() <= 0) {
    // The reader rejects these in files; a spec made in code reaches here.
    where.fail("",
               "num_layers, hidden_size, num_attention_heads, num_kv_heads, ffn_hidden_size, "
               "vocab_size and max_seq_len must all be > 0");
  }
  check_enums(spec, where);
  check_attention(spec, where);
  check_regularisation(spec, where);
  check_attention_variants(spec, where);
  check_moe(spec, where);
  check_mla(spec, where);
}

}  // namespace orrery::models
