// Hugging Face config.json import: each hand-written sample (copied from the public config of
// the model it is named after) must give the preset of that model, field for field.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "orrery/base/error.hpp"
#include "orrery/models/hf_import.hpp"
#include "orrery/models/layer_ops.hpp"
#include "orrery/models/model_catalog.hpp"
#include "test_paths.hpp"

namespace orrery::models {
namespace {

const std::string kHf = std::string(ORRERY_TEST_INPUTS) + "/models/hf/";

// The architecture fields only: name and description say where a spec came from.
pb::ModelSpec architecture_of(pb::ModelSpec spec) {
  spec.clear_name();
  spec.clear_description();
  return spec;
}

class HfSample : public testing::TestWithParam<const char*> {};

TEST_P(HfSample, ImportsToThePreset) {
  const std::string name = GetParam();
  const pb::ModelSpec imported = import_hf_config(kHf + name + "/config.json");
  EXPECT_EQ(imported.name(), name);  // the folder names the model
  const pb::ModelSpec expected = preset(name);
  // Presets set head_dim and rotary_fraction explicitly; Llama and Mixtral configs leave them to
  // their defaults (hidden / heads, all dimensions rotated), which mean the same.
  pb::ModelSpec got = architecture_of(imported);
  if (!got.has_head_dim()) got.set_head_dim(head_dim(got));
  if (!got.has_rotary_fraction()) got.set_rotary_fraction(1);
  std::string diff;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(architecture_of(expected), got)) << diff;
  EXPECT_DOUBLE_EQ(model_stats(imported, 4096).parameters, model_stats(expected, 4096).parameters);
}

INSTANTIATE_TEST_SUITE_P(Samples, HfSample,
                         testing::Values("llama3-8b", "mixtral-8x7b", "qwen3-235b-a22b",
                                         "deepseek-v3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

TEST(HfImport, Gpt2SmallHas124MParameters) {
  const pb::ModelSpec spec = import_hf_config(kHf + "gpt2/config.json");
  EXPECT_EQ(spec.num_layers(), 12);
  EXPECT_EQ(spec.hidden_size(), 768);
  EXPECT_EQ(spec.ffn_hidden_size(), 4 * 768);  // n_inner absent: 4 * n_embd
  EXPECT_EQ(spec.max_seq_len(), 1024);
  EXPECT_EQ(spec.norm(), pb::NORM_LAYERNORM);
  EXPECT_EQ(spec.activation(), pb::ACTIVATION_GELU);
  EXPECT_EQ(spec.position_embedding(), pb::POSITION_EMBEDDING_LEARNED);
  EXPECT_TRUE(spec.tied_embeddings());
  EXPECT_TRUE(spec.linear_bias());
  EXPECT_DOUBLE_EQ(spec.hidden_dropout(), 0.1);
  // 12 layers * (12 h^2 + 13 h) + V h + 1024 h + 2 h (final LayerNorm), h = 768, V = 50257:
  // 12 * 7,087,872 + 38,597,376 + 786,432 + 1,536 = 124,439,808 (the HF model's 124.44M).
  EXPECT_DOUBLE_EQ(model_stats(spec, 1024).parameters, 124439808);
}

TEST(HfImport, Pythia160mRotatesAQuarterOfEachHead) {
  const pb::ModelSpec spec = import_hf_config(kHf + "pythia-160m/config.json");
  EXPECT_EQ(spec.position_embedding(), pb::POSITION_EMBEDDING_ROPE);
  EXPECT_DOUBLE_EQ(spec.rotary_fraction(), 0.25);
  EXPECT_FALSE(spec.tied_embeddings());
  // 12 * (12 h^2 + 13 h) + 2 V h + 2 h, h = 768, V = 50304:
  // 85,054,464 + 77,266,944 + 1,536 = 162,322,944 (EleutherAI's 162,322,944 for pythia-160m).
  EXPECT_DOUBLE_EQ(model_stats(spec, 2048).parameters, 162322944);
  // RoPE on 16 of the 64 dimensions of the 12 query and 12 key heads per token.
  ShardContext ctx;
  ctx.seq_len = 2048;
  for (const LayerOp& op : layer_ops(spec, LayerPart::kDecoder, 0, ctx)) {
    if (op.name == "attn.rope") {
      EXPECT_EQ(op.shape[0], 2048 * 24 * 16);
    }
  }
}

// Gemma 2 2B: h = 2304, 26 layers, 8 query and 4 KV heads of 256, GeGLU FFN 9216, V = 256000,
// tied. Per layer q 2304 x 2048 and o 2048 x 2304 (4,718,592 each), k and v 2304 x 1024
// (2,359,296 each), FFN 3 x 2304 x 9216 = 63,700,992, four norms 9,216: 77,865,984; x 26 =
// 2,024,515,584, + embedding 589,824,000 + final norm 2,304 = 2,614,341,888 (the 2.61B of its
// model card).
TEST(HfImport, Gemma2AlternatesLocalAndGlobalLayersAndSoftCaps) {
  const pb::ModelSpec spec = import_hf_config(kHf + "gemma2-2b/config.json");
  EXPECT_EQ(spec.activation(), pb::ACTIVATION_GEGLU);
  EXPECT_TRUE(spec.tied_embeddings());
  EXPECT_TRUE(spec.post_block_norm());
  EXPECT_FALSE(spec.qk_norm());
  EXPECT_EQ(spec.sliding_window(), 4096);
  EXPECT_EQ(spec.sliding_window_pattern(), 2);  // Gemma2DecoderLayer: even layers local
  EXPECT_TRUE(is_local_attention_layer(spec, 0));
  EXPECT_FALSE(is_local_attention_layer(spec, 1));
  EXPECT_DOUBLE_EQ(spec.attn_logit_softcapping(), 50);
  EXPECT_DOUBLE_EQ(spec.final_logit_softcapping(), 30);
  EXPECT_DOUBLE_EQ(model_stats(spec, 8192).parameters, 2614341888);
}

// Gemma 3 1B: h = 1152, 26 layers, 4 query heads and 1 KV head of 256, FFN 6912, V = 262144,
// tied, per-head q/k norms. Per layer attention 2 x 1152 x 1024 + 2 x 1152 x 256 = 2,949,120,
// q/k norms 512, FFN 3 x 1152 x 6912 = 23,887,872, four norms 4,608: 26,842,112; x 26 =
// 697,894,912, + embedding 301,989,888 + final norm 1,152 = 999,885,952.
TEST(HfImport, Gemma3MakesEverySixthLayerGlobal) {
  const pb::ModelSpec spec = import_hf_config(kHf + "gemma3-1b/config.json");
  EXPECT_EQ(spec.sliding_window(), 512);
  EXPECT_EQ(spec.sliding_window_pattern(), 6);
  EXPECT_TRUE(spec.qk_norm());
  EXPECT_TRUE(spec.post_block_norm());
  EXPECT_DOUBLE_EQ(spec.attn_logit_softcapping(), 0);  // null: off
  EXPECT_DOUBLE_EQ(spec.final_logit_softcapping(), 0);
  EXPECT_DOUBLE_EQ(model_stats(spec, 4096).parameters, 999885952);
}

// Phi-3-mini: every layer windowed (2047). 32 x (4 x 3072^2 + 3 x 3072 x 8192 + 2 x 3072)
// = 3,624,075,264, + 2 x 32064 x 3072 = 197,001,216 + 3,072 = 3,821,079,552 (its 3.8B).
TEST(HfImport, Phi3WindowsEveryLayer) {
  const pb::ModelSpec spec = import_hf_config(kHf + "phi3-mini-4k/config.json");
  EXPECT_EQ(spec.sliding_window(), 2047);
  EXPECT_EQ(spec.sliding_window_pattern(), 0);
  EXPECT_TRUE(is_local_attention_layer(spec, 31));
  EXPECT_DOUBLE_EQ(model_stats(spec, 4096).parameters, 3821079552);
}

// Mistral 7B v0.1: 4096-token window on every layer; 7,241,732,096 parameters (Mistral's count).
// At 8192 tokens a query sees at most 4096 keys: (8192 x 4096 - 4096^2 / 2) / 8192^2 = 3/8 of
// the square instead of 1/2.
TEST(HfImport, MistralWithSlidingWindow) {
  const pb::ModelSpec spec = import_hf_config(kHf + "mistral-7b-v0.1/config.json");
  EXPECT_EQ(spec.sliding_window(), 4096);
  EXPECT_DOUBLE_EQ(model_stats(spec, 8192).parameters, 7241732096);
  ShardContext ctx;
  ctx.seq_len = 8192;
  for (const LayerOp& op : layer_ops(spec, LayerPart::kDecoder, 0, ctx)) {
    // 32 heads x 8192^2 x 3/8 pairs x 2 x (128 + 128) FLOPs.
    if (op.name == "attn.core") {
      EXPECT_DOUBLE_EQ(op.forward_flops, 32.0 * 8192 * 8192 * 0.375 * 512);
    }
  }
}

// OLMo 2 7B: qk-norm, post-block norms priced as the pre-block ones (same count), and the
// description says so. 32 x (4 x 4096^2 + 256 + 3 x 4096 x 11008 + 2 x 4096) = 6,476,275,712,
// + 2 x 100352 x 4096 = 822,083,584 + 4,096 = 7,298,363,392: 253,952 under OLMo 2's own count,
// its q/k norms spanning the whole projection (8,192 weights per layer, not 256).
TEST(HfImport, Olmo2ImportsWithQkNorm) {
  const pb::ModelSpec spec = import_hf_config(kHf + "olmo2-7b/config.json");
  EXPECT_TRUE(spec.qk_norm());
  EXPECT_FALSE(spec.post_block_norm());
  EXPECT_NE(spec.description().find("post-block norms priced as pre-block ones"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(model_stats(spec, 4096).parameters, 7298363392);
}

// DeepSeek-V2-Lite: MLA without query compression, 64 routed + 2 shared experts, top-6, first
// layer dense. Attention per layer: q 2048 x 16 x 192 = 6,291,456, kv_down 2048 x 576 = 1,179,648,
// kv_norm 512, kv_up 512 x 16 x 256 = 2,097,152, o 2048 x 2048 = 4,194,304 (13,763,072); dense
// FFN 3 x 2048 x 10944 = 67,239,936; MoE router 131,072 + shared 2 x 3 x 2048 x 1408 =
// 17,301,504 + routed 64 x 8,650,752 = 553,648,128; norms 4,096. Layer 0 81,007,104, layers 1-26
// 26 x 584,847,872, embeddings 2 x 102400 x 2048, final norm 2,048: 15,706,484,224 (its 15.7B).
TEST(HfImport, DeepseekV2LiteHasMlaAndMoe) {
  const pb::ModelSpec spec = import_hf_config(kHf + "deepseek-v2-lite/config.json");
  ASSERT_TRUE(spec.has_mla());
  EXPECT_EQ(spec.mla().q_lora_rank(), 0);
  EXPECT_EQ(spec.moe().num_experts(), 64);
  EXPECT_EQ(spec.moe().num_shared_experts(), 2);
  EXPECT_EQ(spec.moe().first_dense_layers(), 1);
  EXPECT_DOUBLE_EQ(model_stats(spec, 4096).parameters, 15706484224);
}

// Qwen3-235B-A22B's config with its window turned on: layers from max_window_layers on attend
// within sliding_window, the ones before to the whole sequence; layer_types says the same per
// layer; a layout Qwen's code cannot produce, or a missing key, is refused naming the key.
std::string qwen_with(const std::string& edits) {
  std::ifstream in(kHf + "qwen3-235b-a22b/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config.merge_patch(nlohmann::json::parse("{" + edits + "}"));
  const auto file = std::filesystem::temp_directory_path() /
                    ("orrery_qwen_window_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << config.dump(2);
  return file.string();
}

std::string layer_types(int64_t full, int64_t windowed, bool full_after = false) {
  std::string list;
  for (int64_t l = 0; l < full + windowed + (full_after ? 1 : 0); ++l) {
    const bool global = l < full || l == full + windowed;
    list += std::string(list.empty() ? "" : ", ") +
            (global ? "\"full_attention\"" : "\"sliding_attention\"");
  }
  return "[" + list + "]";
}

TEST(HfImport, QwenWindowsTheLayersFromMaxWindowLayersOn) {
  const pb::ModelSpec spec = import_hf_config(
      qwen_with(R"("use_sliding_window": true, "sliding_window": 4096, "max_window_layers": 90)"));
  EXPECT_EQ(spec.sliding_window(), 4096);
  EXPECT_EQ(spec.sliding_window_from_layer(), 90);
  EXPECT_FALSE(is_local_attention_layer(spec, 89));
  EXPECT_TRUE(is_local_attention_layer(spec, 90));
  EXPECT_TRUE(is_local_attention_layer(spec, 93));
  const pb::ModelSpec typed = import_hf_config(
      qwen_with(R"("use_sliding_window": true, "sliding_window": 4096, "layer_types": )" +
                layer_types(88, 6)));
  EXPECT_EQ(typed.sliding_window_from_layer(), 88);
  // Every layer before max_window_layers: full attention, as transformers builds it.
  const pb::ModelSpec none = import_hf_config(
      qwen_with(R"("use_sliding_window": true, "sliding_window": 4096, "max_window_layers": 94)"));
  EXPECT_EQ(none.sliding_window(), 0);
  const auto refused = [](const std::string& edits) {
    try {
      import_hf_config(qwen_with(edits));
    } catch (const base::InputError& e) {
      return std::string(e.what());
    }
    return std::string("imported");
  };
  EXPECT_NE(refused(R"("use_sliding_window": true, "sliding_window": null)")
                .find("sliding_window: use_sliding_window is true: expected the window"),
            std::string::npos);
  EXPECT_NE(refused(R"("use_sliding_window": true, "sliding_window": 4096, "layer_types": )" +
                    layer_types(80, 13, true))
                .find("layer 93 is full_attention after windowed layer 80"),
            std::string::npos);
}

TEST(HfImport, NameOverridesTheFolder) {
  EXPECT_EQ(import_hf_config(kHf + "llama3-8b/config.json", "my-llama").name(), "my-llama");
}

}  // namespace
// A number past a double's range in config.json (found by hf_config_fuzz) is an input error,
// not an exception out of the reader.
TEST(HfImport, ANumberPastADoubleIsAnInputError) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("orrery_hf_big_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << R"({"hidden_size": 15e1643})";
  EXPECT_THROW(import_hf_config(file, "big"), base::InputError);
  std::filesystem::remove(file);
}

}  // namespace orrery::models
