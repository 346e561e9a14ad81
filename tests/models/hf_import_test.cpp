// Hugging Face config.json import: each hand-written sample (copied from the public config of
// the model it is named after) must give the preset of that model, field for field.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>

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
