// The bad-input corpus of models/: each file in tests/inputs/models/bad/ with the exact message
// it must produce (file, line of the offending key, field, reason).
#include <string>

#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/models/hf_import.hpp"
#include "orrery/models/model_catalog.hpp"
#include "test_paths.hpp"

namespace orrery::models {
namespace {

struct BadCase {
  const char* file;
  const char* message;  // after "<path>"
};

const std::string kBad = std::string(ORRERY_TEST_INPUTS) + "/models/bad/";

std::string error_of(const std::string& path) {
  try {
    if (path.ends_with(".json")) {
      import_hf_config(path);
    } else {
      load_model(path);
    }
  } catch (const base::InputError& e) {
    return e.what();
  }
  return "(no error)";
}

class BadModel : public testing::TestWithParam<BadCase> {};

TEST_P(BadModel, GivesItsExactMessage) {
  const BadCase& c = GetParam();
  EXPECT_EQ(error_of(kBad + c.file), kBad + c.file + c.message);
}

INSTANTIATE_TEST_SUITE_P(
    Corpus, BadModel,
    testing::Values(
        // ModelSpec files: the semantic rules of validate_model, at the line of the field.
        BadCase{"kv-heads.yaml", ":6: num_kv_heads: got 3, must divide num_attention_heads (4)"},
        // Ranges and finiteness (options.proto), in files and in imported configs alike.
        BadCase{"layers-huge.yaml",
                ":3: num_layers: got 999999999, expected at most 100000 (500x the deepest "
                "published model)"},
        BadCase{"hidden-size-range.yaml",
                ":4: hidden_size: got 640000000, expected at most 10000000 (100x the widest "
                "published model)"},
        BadCase{"rotary-fraction-inf.yaml",
                ":10: rotary_fraction: got 'inf', expected a finite number"},
        BadCase{"hf-context-huge.json",
                ":13: max_seq_len: got 10000000000000, expected at most 1000000000 (100x the "
                "longest context published)"},
        BadCase{"head-divide.yaml",
                ":5: num_attention_heads: got 4, must divide hidden_size (66) when head_dim is not "
                "set"},
        BadCase{"qkv-bias-redundant.yaml",
                ":14: qkv_bias: redundant: linear_bias is true, so every linear layer has a bias"},
        BadCase{"moe-top-k.yaml", ":15: moe.top_k: got 9, must be in 1..moe.num_experts (8)"},
        BadCase{"moe-first-dense.yaml",
                ":17: moe.first_dense_layers: got 2, must be < num_layers (2) or the model has no "
                "MoE layer"},
        BadCase{"mla-learned.yaml",
                ":12: position_embedding: MLA (mla) requires rope: its qk_rope_head_dim part "
                "carries the positions"},
        BadCase{"dropout-one.yaml", ":13: hidden_dropout: got 1, must be in [0, 1)"},
        // The schema reader's own check, for completeness of the corpus.
        BadCase{"typo-field.yaml", ":3: num_layer: unknown field (did you mean 'num_layers'?)"},
        // Hugging Face config.json files: the key and its line in the JSON text.
        BadCase{"hf-missing-layers.json",
                ": num_hidden_layers: required key is missing (expected an integer > 0)"},
        BadCase{"hf-string-hidden.json",
                ":10: hidden_size: got \"4096\" (a string), expected an integer > 0"},
        BadCase{"hf-unsupported-arch.json",
                ":2: architectures: got 'BertForMaskedLM', which orrery cannot import (expected "
                "one of: DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, GPT2LMHeadModel, "
                "GPTNeoXForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, LlamaForCausalLM, "
                "MistralForCausalLM, MixtralForCausalLM, Olmo2ForCausalLM, Phi3ForCausalLM, "
                "Qwen2ForCausalLM, ... (15 in all))"},
        BadCase{"hf-zero-experts.json", ":18: num_local_experts: got 0, expected an integer > 0"},
        // Semantic rules on an imported spec point at the HF key behind the field.
        BadCase{"hf-kv-heads.json",
                ":17: num_kv_heads: got 5, must divide num_attention_heads (32)"},
        BadCase{"hf-top-k.json", ":15: moe.top_k: got 9, must be in 1..moe.num_experts (8)"},
        BadCase{"hf-sliding-window.json",
                ":27: sliding_window: got 4096, LlamaForCausalLM has no sliding-window attention "
                "(null imports as full attention)"},
        BadCase{"hf-layer-types.json",
                ":32: layer_types: the full_attention layers are not exactly layers 1, 3, ...: "
                "sliding_window_pattern cannot express this layout"},
        BadCase{"hf-attention-bias.json",
                ":5: attention_bias: got true while mlp_bias is false: ModelSpec expresses biases "
                "on every linear layer or on q/k/v only"},
        BadCase{"hf-not-json.json",
                ":27: not valid JSON: syntax error while parsing object key - unexpected '}'; "
                "expected string literal"}),
    [](const testing::TestParamInfo<BadCase>& info) {
      std::string name = info.param.file;
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

TEST(BadModel, UnknownPresetSuggestsTheClosest) {
  try {
    preset("lama3-8b");
    FAIL() << "no error";
  } catch (const base::InputError& e) {
    EXPECT_STREQ(e.what(), "model: no preset named 'lama3-8b' (did you mean 'llama3-8b'?)");
  }
}

// A path that does not exist is the user's mistake (exit 2), as in every reader
// (base/input_file.hpp).
TEST(BadModel, MissingConfigIsAnInputError) {
  EXPECT_THROW(import_hf_config(kBad + "no-such/config.json"), base::InputError);
}

}  // namespace
}  // namespace orrery::models
