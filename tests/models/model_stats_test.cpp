// Whole-model figures: parameter counts against the published ones, FLOPs per token against the
// 6N + attention approximation.
#include <cmath>

#include <gtest/gtest.h>

#include "orrery/models/layer_ops.hpp"
#include "orrery/models/model_catalog.hpp"

namespace orrery::models {
namespace {

double relative_error(double got, double want) { return std::abs(got - want) / want; }

struct Published {
  const char* name;
  double parameters;
  double tolerance;
};

// Published totals (model cards, papers); the SC'21 names are rounded figures from Table 1
// (12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h))), hence 3%: sc21-1.7b is 1.652e9 by that very
// formula (-2.8%).
TEST(ModelStats, ParameterCountsMatchPublishedFigures) {
  const Published rows[] = {
      {"llama3-8b", 8.03e9, 0.01},     {"llama3-70b", 70.6e9, 0.01},
      {"llama3-405b", 405.9e9, 0.01},  {"mixtral-8x7b", 46.7e9, 0.01},
      {"deepseek-v3", 671e9, 0.01},    {"qwen3-235b-a22b", 235e9, 0.01},
      {"gpt3-175b", 175e9, 0.01},      {"nemotron4-15b", 15.6e9, 0.01},
      {"nemotron4-340b", 341e9, 0.01}, {"sc21-1.7b", 1.7e9, 0.03},
      {"sc21-3.6b", 3.6e9, 0.03},      {"sc21-7.5b", 7.5e9, 0.03},
      {"sc21-18.4b", 18.4e9, 0.03},    {"sc21-39.1b", 39.1e9, 0.03},
      {"sc21-76.1b", 76.1e9, 0.03},    {"sc21-145.6b", 145.6e9, 0.03},
      {"sc21-310.1b", 310.1e9, 0.03},  {"sc21-529.6b", 529.6e9, 0.03},
      {"sc21-1t", 1008e9, 0.03}};  // Table 1 lists 1008 billion for the "1T" model
  for (const Published& row : rows) {
    const ModelStats stats = model_stats(preset(row.name), 2048);
    EXPECT_LT(relative_error(stats.parameters, row.parameters), row.tolerance)
        << row.name << ": " << stats.parameters;
  }
}

TEST(ModelStats, Llama3_8bIsExact) {
  // Per layer: q, o 4096^2 each + k, v 4096 * 1024 each = 41,943,040; MLP 3 * 4096 * 14336 =
  // 176,160,768; two RMSNorms 8,192 -> 218,112,000 * 32 = 6,979,584,000. Embedding and untied
  // output 2 * 128256 * 4096 = 1,050,673,152; final norm 4,096. Total 8,030,261,248 (the
  // checkpoint's count).
  const ModelStats stats = model_stats(preset("llama3-8b"), 8192);
  EXPECT_DOUBLE_EQ(stats.parameters, 8030261248.0);
  EXPECT_DOUBLE_EQ(stats.active_parameters, stats.parameters);
  EXPECT_DOUBLE_EQ(stats.embedding_parameters, 1050673152.0);
}

TEST(ModelStats, MoeActiveParameters) {
  // Qwen3-235B-A22B: "A22B" = 22B active; DeepSeek-V3: 37B active (paper), ours 37.5e9 since the
  // paper's figure leaves out the embedding (1.85e9) in some accounts: 2% tolerance.
  EXPECT_LT(relative_error(model_stats(preset("qwen3-235b-a22b"), 4096).active_parameters, 22e9),
            0.01);
  EXPECT_LT(relative_error(model_stats(preset("deepseek-v3"), 4096).active_parameters, 37e9), 0.02);
  // Mixtral: 12.9B active (Jiang et al. 2024: "13B active").
  EXPECT_LT(relative_error(model_stats(preset("mixtral-8x7b"), 4096).active_parameters, 12.9e9),
            0.01);
}

double attention_width(const pb::ModelSpec& spec) {
  if (spec.has_mla()) {
    const auto& m = spec.mla();
    return spec.num_attention_heads() *
           (m.qk_nope_head_dim() + m.qk_rope_head_dim() + m.v_head_dim()) / 2.0;
  }
  return static_cast<double>(spec.num_attention_heads()) * head_dim(spec);
}

// The approximation counts attention as the full square, forward 4 s w per token and layer
// (QK^T 2 s w + PV 2 s w), training 3x: 12 s w. The decomposition counts what a causal
// flash-attention kernel does: half the square, 2 s w forward, backward 2.5x: 7 s w. So the
// decomposition must equal approx - 5 L s w. What is left is the memory-bound ops (norms,
// activations, RoPE, residuals: roughly 40 h + 18 f FLOPs per token and layer, fwd + bwd) against
// GEMMs of 6 (4 h^2 + 3 h f): 0.1% at h = 4096, and the loss (7 V per token against 6 V h).
// 1% covers them for every preset but tiny (h = 64: ~3%).
TEST(ModelStats, FlopsPerTokenMatchSixNPlusAttention) {
  for (const auto& name : preset_names()) {
    if (name == "tiny") continue;  // h = 64: elementwise work is not negligible next to GEMMs
    const pb::ModelSpec spec = preset(name);
    const int64_t seq = std::min<int64_t>(spec.max_seq_len(), 8192);
    const ModelStats stats = model_stats(spec, seq);
    const double causal_flash =
        stats.approx_flops_per_token - 5.0 * spec.num_layers() * seq * attention_width(spec);
    EXPECT_LT(relative_error(stats.training_flops_per_token, causal_flash), 0.01)
        << name << ": " << stats.training_flops_per_token << " vs " << causal_flash;
  }
}

// Where attention is a small share the raw approximation holds within 2%. GPT-3 175B at s = 2048:
// per token, GEMMs 6 N ~ 6 * 174.6e9 = 1.048e12, the attention term 12 L s h = 12 * 96 * 2048 *
// 12288 = 2.90e10 (2.7%); counting it causal with flash backward keeps 7/12 of it, so the
// decomposition is 5/12 * 2.7% = 1.1% under the approximation.
TEST(ModelStats, Gpt3FlopsWithinTwoPercentOfTheApproximation) {
  const ModelStats stats = model_stats(preset("gpt3-175b"), 2048);
  const double share = 5.0 * 96 * 2048 * 12288 / stats.approx_flops_per_token;
  EXPECT_NEAR(share, 0.0113, 0.0005);
  EXPECT_LT(relative_error(stats.training_flops_per_token, stats.approx_flops_per_token), 0.02);
  EXPECT_LT(stats.training_flops_per_token, stats.approx_flops_per_token);
}

// Narayanan et al. SC'21 eq. 3 counts 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) per iteration with
// full recomputation (4 passes through the layers, 3 through the LM head). Without recomputation
// the layers take 3 passes: per token 72 l h^2 (1 + s/(6h)) + 6 V h.
TEST(ModelStats, ApproximationIsTheMegatronFormulaForGpt) {
  const pb::ModelSpec spec = preset("sc21-1t");
  const ModelStats stats = model_stats(spec, 2048);
  const double l = 128, h = 25600, s = 2048, v = 51200;
  const double megatron = 72 * l * h * h * (1 + s / (6 * h)) + 6 * v * h;
  // 6 N_nonembed = 6 l (12 h^2 + 13 h) + 6 * 2h (final norm): the 13h biases and norms are the
  // only difference, 6 * 13 l h / (72 l h^2) = 1.1 / h = 4e-5.
  EXPECT_LT(relative_error(stats.approx_flops_per_token, megatron), 1e-4);
}

}  // namespace
}  // namespace orrery::models
