// Presets: every one loads, validates, is named after its file, and the SC'21 family has the
// shapes of the validation cases.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/models/model_catalog.hpp"
#include "test_paths.hpp"

namespace orrery::models {
namespace {

namespace fs = std::filesystem;

TEST(ModelCatalog, ListsEveryPresetSorted) {
  const std::vector<std::string> expected = {
      "deepseek-v3", "gpt3-175b",    "llama3-405b",   "llama3-70b",     "llama3-8b",
      "llama3.2-1b", "mixtral-8x7b", "nemotron4-15b", "nemotron4-340b", "qwen3-235b-a22b",
      "sc21-1.7b",   "sc21-145.6b",  "sc21-18.4b",    "sc21-1t",        "sc21-3.6b",
      "sc21-310.1b", "sc21-39.1b",   "sc21-529.6b",   "sc21-7.5b",      "sc21-76.1b",
      "tiny"};
  EXPECT_EQ(preset_names(), expected);
}

TEST(ModelCatalog, EveryPresetFileIsNamedAfterItsModel) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(ORRERY_SOURCE_DIR) / "models/presets")) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    const std::string stem = entry.path().stem().string();  // "sc21-1.7b": only ".yaml" goes
    SCOPED_TRACE(stem);
    const pb::ModelSpec from_file = load_model(entry.path().string());
    EXPECT_EQ(from_file.name(), stem);
    EXPECT_EQ(preset(stem).SerializeAsString(), from_file.SerializeAsString());
  }
  EXPECT_EQ(files, static_cast<int>(preset_names().size()));
}

TEST(ModelCatalog, EveryPresetSetsEveryFieldAndCitesItsSource) {
  for (const auto& name : preset_names()) {
    SCOPED_TRACE(name);
    const pb::ModelSpec spec = preset(name);
    EXPECT_FALSE(spec.description().empty());
    EXPECT_TRUE(spec.has_head_dim());
    if (spec.position_embedding() == pb::POSITION_EMBEDDING_ROPE) {
      EXPECT_TRUE(spec.has_rotary_fraction());
    }
    validate_model(spec, SourceMap("preset"));
  }
}

TEST(ModelCatalog, LoadModelTakesPresetsAndFiles) {
  SourceMap where;
  const pb::ModelSpec spec = load_model("tiny", &where);
  EXPECT_EQ(spec.num_layers(), 2);
  EXPECT_EQ(where.file(), "models/presets/tiny.yaml");
  EXPECT_EQ(where.line("hidden_size"), 4);
  const std::string file = std::string(ORRERY_SOURCE_DIR) + "/models/presets/tiny.yaml";
  EXPECT_EQ(load_model(file).SerializeAsString(), spec.SerializeAsString());
}

TEST(ModelCatalog, HeadDimDefaultsToHiddenOverHeads) {
  pb::ModelSpec spec = preset("llama3-8b");
  EXPECT_EQ(head_dim(spec), 128);
  spec.clear_head_dim();
  EXPECT_EQ(head_dim(spec), 4096 / 32);
  EXPECT_EQ(head_dim(preset("nemotron4-340b")), 192);  // 18432 / 96
}

// Layers, hidden size and heads of the SC'21 family are those of the validation cases
// (shared/validation/public_runs.json, SC21-T1-*; ffn = 4h, vocabulary 51200, sequence 2048).
TEST(ModelCatalog, Sc21FamilyMatchesTable1) {
  struct Row {
    const char* name;
    int64_t layers, hidden, heads;
  };
  const Row rows[] = {{"sc21-1.7b", 24, 2304, 24},      {"sc21-3.6b", 30, 3072, 32},
                      {"sc21-7.5b", 36, 4096, 32},      {"sc21-18.4b", 40, 6144, 48},
                      {"sc21-39.1b", 48, 8192, 64},     {"sc21-76.1b", 60, 10240, 80},
                      {"sc21-145.6b", 80, 12288, 96},   {"sc21-310.1b", 96, 16384, 128},
                      {"sc21-529.6b", 105, 20480, 128}, {"sc21-1t", 128, 25600, 160}};
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const pb::ModelSpec spec = preset(row.name);
    EXPECT_EQ(spec.num_layers(), row.layers);
    EXPECT_EQ(spec.hidden_size(), row.hidden);
    EXPECT_EQ(spec.num_attention_heads(), row.heads);
    EXPECT_EQ(spec.num_kv_heads(), row.heads);
    EXPECT_EQ(spec.ffn_hidden_size(), 4 * row.hidden);
    EXPECT_EQ(spec.vocab_size(), 51200);
    EXPECT_EQ(spec.max_seq_len(), 2048);
    EXPECT_EQ(spec.activation(), pb::ACTIVATION_GELU);
    EXPECT_EQ(spec.norm(), pb::NORM_LAYERNORM);
    EXPECT_EQ(spec.position_embedding(), pb::POSITION_EMBEDDING_LEARNED);
    EXPECT_TRUE(spec.linear_bias());
  }
}

TEST(ModelCatalog, ValidateNamesTheFieldOfASpecMadeInCode) {
  pb::ModelSpec spec = preset("mixtral-8x7b");
  spec.mutable_moe()->set_top_k(9);
  try {
    validate_model(spec, SourceMap("made-in-code"));
    FAIL() << "no error";
  } catch (const base::InputError& e) {
    EXPECT_EQ(e.field(), "moe.top_k");
    EXPECT_STREQ(e.what(), "made-in-code: moe.top_k: got 9, must be in 1..moe.num_experts (8)");
  }
  spec = preset("deepseek-v3");
  spec.set_num_kv_heads(8);
  EXPECT_THROW(validate_model(spec, SourceMap()), base::InputError);  // MLA: kv heads = heads
  spec = preset("tiny");
  spec.mutable_moe()->set_num_experts(4);
  spec.mutable_moe()->set_top_k(1);
  spec.mutable_moe()->set_expert_ffn_hidden_size(32);
  spec.mutable_moe()->set_shared_expert_ffn_hidden_size(32);  // but no shared expert
  EXPECT_THROW(validate_model(spec, SourceMap()), base::InputError);
}

}  // namespace
}  // namespace orrery::models
