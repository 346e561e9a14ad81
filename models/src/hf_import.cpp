// Hugging Face config.json -> ModelSpec. Each architecture family reads the keys its modeling
// code reads, with the defaults that code applies when a key is absent or null (those defaults
// are part of the file format, not guesses); anything the spec cannot express is rejected.
#include "orrery/models/hf_import.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "hf_config.hpp"
#include "orrery/base/error.hpp"
#include "orrery/models/model_catalog.hpp"

namespace orrery::models {
namespace {

using detail::HfConfig;

enum class Family {
  kLlama,
  kMistral,
  kMixtral,
  kQwen2,
  kQwen2Moe,
  kQwen3,
  kQwen3Moe,
  kDeepseekV2,
  kDeepseekV3,
  kGemma2,
  kGemma3Text,
  kPhi3,
  kOlmo2,
  kGpt2,
  kGptNeoX
};

bool is_deepseek(Family f) { return f == Family::kDeepseekV2 || f == Family::kDeepseekV3; }
bool is_gemma(Family f) { return f == Family::kGemma2 || f == Family::kGemma3Text; }
bool is_qwen(Family f) {
  return f == Family::kQwen2 || f == Family::kQwen2Moe || f == Family::kQwen3 ||
         f == Family::kQwen3Moe;
}

const std::map<std::string, Family>& architectures() {
  static const std::map<std::string, Family> kArchitectures = {
      {"LlamaForCausalLM", Family::kLlama},
      {"MistralForCausalLM", Family::kMistral},
      {"MixtralForCausalLM", Family::kMixtral},
      {"Qwen2ForCausalLM", Family::kQwen2},
      {"Qwen2MoeForCausalLM", Family::kQwen2Moe},
      {"Qwen3ForCausalLM", Family::kQwen3},
      {"Qwen3MoeForCausalLM", Family::kQwen3Moe},
      {"DeepseekV2ForCausalLM", Family::kDeepseekV2},
      {"DeepseekV3ForCausalLM", Family::kDeepseekV3},
      {"Gemma2ForCausalLM", Family::kGemma2},
      {"Gemma3ForCausalLM", Family::kGemma3Text},
      {"Phi3ForCausalLM", Family::kPhi3},
      {"Olmo2ForCausalLM", Family::kOlmo2},
      {"GPT2LMHeadModel", Family::kGpt2},
      {"GPTNeoXForCausalLM", Family::kGptNeoX}};
  return kArchitectures;
}

Family family_of(const HfConfig& c) {
  const std::string arch = c.architecture();
  auto it = architectures().find(arch);
  if (it == architectures().end()) {
    std::vector<std::string> names;
    for (const auto& [name, family] : architectures()) names.push_back(name);
    c.fail("architectures",
           "got '" + arch + "', which orrery cannot import" + base::suggest(arch, names));
  }
  return it->second;
}

// Gated FFNs (Llama family): hidden_act names the gate's activation.
// Gemma's MLP reads hidden_activation instead.
pb::Activation gated_activation(const HfConfig& c, std::string_view key, std::string fallback) {
  const std::string act = c.optional_string(key).value_or(fallback);
  if (act == "silu" || act == "swish") return pb::ACTIVATION_SWIGLU;
  if (act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") {
    return pb::ACTIVATION_GEGLU;
  }
  c.fail(key, "got '" + act +
                  "', expected one of: silu, swish (SwiGLU), gelu, gelu_new, "
                  "gelu_pytorch_tanh, gelu_fast (GeGLU)");
}

// Two-matrix FFNs (GPT-2, GPT-NeoX).
pb::Activation plain_activation(const HfConfig& c, std::string_view key, std::string fallback) {
  const std::string act = c.optional_string(key).value_or(fallback);
  if (act.rfind("gelu", 0) == 0) return pb::ACTIVATION_GELU;
  if (act == "relu") return pb::ACTIVATION_RELU;
  c.fail(key, "got '" + act + "', expected gelu, gelu_new, gelu_fast or relu");
}

// Every this-many-th layer attends globally, from layer_types (transformers >= 4.53 writes it for
// every family with sliding windows): 0 when every layer is local; a layout that is not periodic
// that way is refused.
int64_t pattern_of_layer_types(const HfConfig& c, int64_t layers) {
  const auto& types = c.json().at("layer_types");
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers) {
    c.fail("layer_types", "expected a list of num_hidden_layers (" + std::to_string(layers) +
                              ") entries, each sliding_attention or full_attention");
  }
  std::vector<int64_t> global;
  for (int64_t l = 0; l < layers; ++l) {
    const auto& t = types.at(static_cast<size_t>(l));
    if (t == "full_attention") {
      global.push_back(l);
    } else if (t != "sliding_attention") {
      c.fail("layer_types", "entry " + std::to_string(l) + " is " + t.dump() +
                                ", expected sliding_attention or full_attention");
    }
  }
  if (global.empty()) return 0;
  const int64_t period = global.front() + 1;
  for (int64_t l = 0; l < layers; ++l) {
    const bool is_global = std::find(global.begin(), global.end(), l) != global.end();
    if (is_global != ((l + 1) % period == 0)) {
      c.fail("layer_types", "the full_attention layers are not exactly layers " +
                                std::to_string(period - 1) + ", " + std::to_string(2 * period - 1) +
                                ", ...: sliding_window_pattern cannot express this layout");
    }
  }
  if (period == 1) {
    c.fail("layer_types", "every layer is full_attention while sliding_window is set");
  }
  return period;
}

// The window and which layers use it, with each modeling file's defaults: Mistral's config
// defaults to a 4096 window, Mixtral's and Phi-3's to none; Gemma 2 alternates local and global
// layers (its modeling code hard-wires it), Gemma 3 has sliding_window_pattern (default 6).
void read_sliding_window(const HfConfig& c, Family f, pb::ModelSpec& spec) {
  std::optional<int64_t> window = c.optional_non_negative("sliding_window");
  if (!window && !c.json().contains("sliding_window")) {
    if (f == Family::kMistral) window = 4096;  // MistralConfig(sliding_window=4096)
    if (is_gemma(f)) window = 4096;            // Gemma2Config, Gemma3TextConfig
  }
  if (!window || *window == 0) return;
  spec.set_sliding_window(*window);
  if (c.has("layer_types")) {
    spec.set_sliding_window_pattern(pattern_of_layer_types(c, spec.num_layers()));
  } else if (f == Family::kGemma2) {
    spec.set_sliding_window_pattern(2);  // even layers local (Gemma2DecoderLayer)
  } else if (f == Family::kGemma3Text) {
    spec.set_sliding_window_pattern(c.optional_non_negative("sliding_window_pattern").value_or(6));
  }
}

// The first layer of a `layer_types` list that is windowed when all before it are global and all
// after it windowed (Qwen's layout); refused otherwise.
int64_t first_windowed_layer(const HfConfig& c, int64_t layers) {
  const auto& types = c.json().at("layer_types");
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers) {
    c.fail("layer_types", "expected a list of num_hidden_layers (" + std::to_string(layers) +
                              ") entries, each sliding_attention or full_attention");
  }
  int64_t first = layers;
  for (int64_t l = 0; l < layers; ++l) {
    const auto& t = types.at(static_cast<size_t>(l));
    if (t != "full_attention" && t != "sliding_attention") {
      c.fail("layer_types", "entry " + std::to_string(l) + " is " + t.dump() +
                                ", expected sliding_attention or full_attention");
    }
    if (t == "sliding_attention" && first == layers) first = l;
    if (t == "full_attention" && first < layers) {
      c.fail("layer_types",
             "layer " + std::to_string(l) + " is full_attention after windowed layer " +
                 std::to_string(first) +
                 ": Qwen's layout windows every layer from the first windowed one on");
    }
  }
  return first;
}

// Qwen2/3 (Qwen2Config): with use_sliding_window, the layers from max_window_layers on attend
// within sliding_window, the ones before it to the whole sequence; `layer_types`, when given,
// says the same per layer. Both keys are required: the transformers defaults (4096, 28) are
// those of one checkpoint, not of the family.
void read_qwen_window(const HfConfig& c, pb::ModelSpec& spec) {
  if (!c.optional_bool("use_sliding_window").value_or(false)) return;
  const std::optional<int64_t> window = c.optional_non_negative("sliding_window");
  if (!window || *window == 0) {
    c.fail("sliding_window", "use_sliding_window is true: expected the window in tokens (> 0)");
  }
  int64_t from = 0;
  if (c.has("layer_types")) {
    from = first_windowed_layer(c, spec.num_layers());
  } else {
    const std::optional<int64_t> layers = c.optional_non_negative("max_window_layers");
    if (!layers) {
      c.fail("max_window_layers",
             "use_sliding_window is true: expected the number of layers before the windowed ones");
    }
    from = *layers;
  }
  if (from >= spec.num_layers()) return;  // no layer reaches the window: full attention
  spec.set_sliding_window(*window);
  spec.set_sliding_window_from_layer(from);
}

void reject_sliding_window(const HfConfig& c, Family f) {
  if (is_qwen(f)) return;  // read_qwen_window
  if (c.has("sliding_window")) {
    c.fail("sliding_window", "got " + c.json().at("sliding_window").dump() + ", " +
                                 c.architecture() +
                                 " has no sliding-window attention (null imports as full "
                                 "attention)");
  }
}

// Llama's attention_bias puts biases on q, k, v and o; mlp_bias on the MLP.
void read_llama_biases(const HfConfig& c, pb::ModelSpec& spec) {
  const bool attention = c.optional_bool("attention_bias").value_or(false);
  const bool mlp = c.optional_bool("mlp_bias").value_or(false);
  if (attention != mlp) {
    c.fail(attention ? "attention_bias" : "mlp_bias",
           "got true while " + std::string(attention ? "mlp_bias" : "attention_bias") +
               " is false: ModelSpec expresses biases on every linear layer or on q/k/v only");
  }
  spec.set_linear_bias(attention && mlp);
}

// Group-limited routing: DeepSeek-V3 always routes within topk_group of n_group groups;
// DeepSeek-V2 only with topk_method "group_limited_greedy" (its "greedy" ignores the groups).
void read_group_limit(const HfConfig& c, Family f, pb::MoeSpec& moe) {
  if (f == Family::kDeepseekV2) {
    const bool grouped = c.has("topk_method") && c.json().at("topk_method").is_string() &&
                         c.json().at("topk_method").get<std::string>() == "group_limited_greedy";
    if (!grouped) return;
  }
  if (!c.has("n_group") && !c.has("topk_group")) return;
  moe.set_n_group(c.positive("n_group"));
  moe.set_topk_group(c.positive("topk_group"));
}

void read_moe(const HfConfig& c, Family f, pb::ModelSpec& spec) {
  pb::MoeSpec& moe = *spec.mutable_moe();
  moe.set_top_k(c.positive("num_experts_per_tok"));
  if (f == Family::kMixtral) {
    moe.set_num_experts(c.positive("num_local_experts"));
    moe.set_expert_ffn_hidden_size(spec.ffn_hidden_size());
    return;
  }
  moe.set_num_experts(c.positive(is_deepseek(f) ? "n_routed_experts" : "num_experts"));
  moe.set_expert_ffn_hidden_size(c.positive("moe_intermediate_size"));
  if (is_deepseek(f)) {
    moe.set_num_shared_experts(c.optional_non_negative("n_shared_experts").value_or(0));
    if (moe.num_shared_experts() > 0)
      moe.set_shared_expert_ffn_hidden_size(moe.expert_ffn_hidden_size());
    moe.set_first_dense_layers(c.optional_non_negative("first_k_dense_replace").value_or(0));
    read_group_limit(c, f, moe);
    if (c.optional_non_negative("moe_layer_freq").value_or(1) != 1) {
      c.fail("moe_layer_freq", "got " + c.json().at("moe_layer_freq").dump() +
                                   ", only every layer after first_k_dense_replace being MoE (1) "
                                   "is modelled");
    }
    return;
  }
  // Qwen MoE: every decoder_sparse_step-th layer is MoE, mlp_only_layers are dense.
  if (c.optional_non_negative("decoder_sparse_step").value_or(1) != 1) {
    c.fail("decoder_sparse_step", "got " + c.json().at("decoder_sparse_step").dump() +
                                      ", only all-MoE layer stacks (1) are modelled");
  }
  if (c.has("mlp_only_layers") && !c.json().at("mlp_only_layers").empty()) {
    c.fail("mlp_only_layers", "dense layers among MoE layers are not modelled (expected [])");
  }
  if (f == Family::kQwen2Moe) {
    if (auto shared = c.optional_non_negative("shared_expert_intermediate_size");
        shared && *shared > 0) {
      moe.set_num_shared_experts(1);
      moe.set_shared_expert_ffn_hidden_size(*shared);
    }
  }
}

void read_mla(const HfConfig& c, pb::ModelSpec& spec) {
  pb::MlaSpec& mla = *spec.mutable_mla();
  mla.set_q_lora_rank(c.optional_non_negative("q_lora_rank").value_or(0));  // null: no compression
  mla.set_kv_lora_rank(c.positive("kv_lora_rank"));
  mla.set_qk_nope_head_dim(c.positive("qk_nope_head_dim"));
  mla.set_qk_rope_head_dim(c.positive("qk_rope_head_dim"));
  mla.set_v_head_dim(c.positive("v_head_dim"));
  // Newer transformers write head_dim = qk_rope_head_dim for DeepSeek; ModelSpec's head_dim is
  // the query/key head width.
  spec.set_head_dim(mla.qk_nope_head_dim() + mla.qk_rope_head_dim());
}

// Gemma 2/3: GeGLU, tied embeddings, a norm before and after each block; Gemma 2 soft-caps the
// attention scores and the final logits (Gemma2Config defaults 50 and 30; null turns them off).
// Gemma's embedding scaling by sqrt(hidden_size) is one multiply per element, not modelled.
void read_gemma(const HfConfig& c, Family f, pb::ModelSpec& spec) {
  spec.set_activation(gated_activation(c, "hidden_activation", "gelu_pytorch_tanh"));
  spec.set_tied_embeddings(c.optional_bool("tie_word_embeddings").value_or(true));
  spec.set_post_block_norm(true);
  spec.set_qk_norm(f == Family::kGemma3Text);  // Gemma3Attention's q_norm, k_norm per head
  if (f != Family::kGemma2) return;
  auto cap = [&](const char* key, double absent) {
    return c.optional_number(key).value_or(c.json().contains(key) ? 0.0 : absent);
  };
  spec.set_attn_logit_softcapping(cap("attn_logit_softcapping", 50.0));
  spec.set_final_logit_softcapping(cap("final_logit_softcapping", 30.0));
}

// Phi-3: fused qkv and gate/up projections (the same GEMM work as separate ones), optional
// partial rotary, resid_pdrop on both blocks' outputs.
void read_phi3(const HfConfig& c, pb::ModelSpec& spec) {
  if (auto fraction = c.optional_number("partial_rotary_factor"); fraction && *fraction != 1.0) {
    spec.set_rotary_fraction(*fraction);
  }
  spec.set_hidden_dropout(c.optional_number("resid_pdrop").value_or(0.0));
}

void read_llama_shape(const HfConfig& c, Family f, pb::ModelSpec& spec) {
  spec.set_num_layers(c.positive("num_hidden_layers"));
  spec.set_hidden_size(c.positive("hidden_size"));
  spec.set_num_attention_heads(c.positive("num_attention_heads"));
  // Absent or null means multi-head attention in every one of these modeling files.
  spec.set_num_kv_heads(c.has("num_key_value_heads") ? c.positive("num_key_value_heads")
                                                     : spec.num_attention_heads());
  if (c.has("head_dim") && !is_deepseek(f)) spec.set_head_dim(c.positive("head_dim"));
  spec.set_ffn_hidden_size(c.positive("intermediate_size"));
  spec.set_vocab_size(c.positive("vocab_size"));
  spec.set_max_seq_len(c.positive("max_position_embeddings"));
  spec.set_tied_embeddings(c.optional_bool("tie_word_embeddings").value_or(false));
  // These architectures use RMSNorm whatever the file says; rms_norm_eps, when present, must be
  // a number (a config with layer_norm_eps instead would be a different model).
  (void)c.optional_number("rms_norm_eps");
  if (c.has("layer_norm_eps") && !c.has("rms_norm_eps")) {
    c.fail("layer_norm_eps", "this architecture uses RMSNorm (expected rms_norm_eps)");
  }
  spec.set_norm(pb::NORM_RMSNORM);
  spec.set_activation(gated_activation(c, "hidden_act", "silu"));
  spec.set_position_embedding(pb::POSITION_EMBEDDING_ROPE);
}

// OLMo 2 normalizes each block's output instead of its input (the same two norms per layer,
// priced where pre-norm models have them) and its q/k norms span the whole projection rather
// than each head: priced as qk_norm, whose per-head weights undercount OLMo 2's by
// (heads + kv_heads - 2) * head_dim per layer (253,952 over the 7B's 32 layers, of 7.3 billion).
void read_llama_family(const HfConfig& c, Family f, pb::ModelSpec& spec) {
  read_llama_shape(c, f, spec);
  const bool windowed =
      f == Family::kMistral || f == Family::kMixtral || f == Family::kPhi3 || is_gemma(f);
  windowed ? read_sliding_window(c, f, spec) : reject_sliding_window(c, f);
  if (is_qwen(f)) read_qwen_window(c, spec);
  if (f == Family::kQwen2 || f == Family::kQwen2Moe) {
    spec.set_qkv_bias(true);  // hard-wired in Qwen2's attention
  } else if (!is_deepseek(f)) {
    read_llama_biases(c, spec);
  }
  spec.set_qk_norm(f == Family::kQwen3 || f == Family::kQwen3Moe || f == Family::kOlmo2);
  if (is_gemma(f)) read_gemma(c, f, spec);
  if (f == Family::kPhi3) read_phi3(c, spec);
  if (f == Family::kMixtral || f == Family::kQwen2Moe || f == Family::kQwen3Moe || is_deepseek(f)) {
    read_moe(c, f, spec);
  }
  if (is_deepseek(f)) read_mla(c, spec);
}

void read_gpt2(const HfConfig& c, pb::ModelSpec& spec) {
  spec.set_num_layers(c.positive("n_layer"));
  spec.set_hidden_size(c.positive("n_embd"));
  spec.set_num_attention_heads(c.positive("n_head"));
  spec.set_num_kv_heads(spec.num_attention_heads());
  // n_inner null: 4 * n_embd (GPT2MLP).
  spec.set_ffn_hidden_size(c.has("n_inner") ? c.positive("n_inner") : 4 * spec.hidden_size());
  spec.set_vocab_size(c.positive("vocab_size"));
  spec.set_max_seq_len(c.positive("n_positions"));
  spec.set_tied_embeddings(c.optional_bool("tie_word_embeddings").value_or(true));
  spec.set_norm(pb::NORM_LAYERNORM);
  spec.set_activation(plain_activation(c, "activation_function", "gelu_new"));
  spec.set_position_embedding(pb::POSITION_EMBEDDING_LEARNED);
  spec.set_linear_bias(true);
  spec.set_hidden_dropout(c.optional_number("resid_pdrop").value_or(0.1));  // GPT2Config default
}

void read_gpt_neox(const HfConfig& c, pb::ModelSpec& spec) {
  spec.set_num_layers(c.positive("num_hidden_layers"));
  spec.set_hidden_size(c.positive("hidden_size"));
  spec.set_num_attention_heads(c.positive("num_attention_heads"));
  spec.set_num_kv_heads(spec.num_attention_heads());
  spec.set_ffn_hidden_size(c.positive("intermediate_size"));
  spec.set_vocab_size(c.positive("vocab_size"));
  spec.set_max_seq_len(c.positive("max_position_embeddings"));
  spec.set_tied_embeddings(c.optional_bool("tie_word_embeddings").value_or(false));
  spec.set_norm(pb::NORM_LAYERNORM);
  spec.set_activation(plain_activation(c, "hidden_act", "gelu"));
  spec.set_position_embedding(pb::POSITION_EMBEDDING_ROPE);
  spec.set_rotary_fraction(c.optional_number("rotary_pct").value_or(0.25));  // GPTNeoXConfig
  // The MLP always has biases; attention_bias (default true) covers the attention's.
  if (!c.optional_bool("attention_bias").value_or(true)) {
    c.fail("attention_bias",
           "got false, but GPT-NeoX's MLP keeps its biases: ModelSpec expresses "
           "biases on every linear layer or on q/k/v only");
  }
  spec.set_linear_bias(true);
  spec.set_hidden_dropout(c.optional_number("hidden_dropout").value_or(0.0));
}

// Lines of the HF keys behind each ModelSpec field, so validate_model's errors point into the file.
SourceMap source_map(const HfConfig& c, Family f) {
  SourceMap where(c.file());
  const bool gpt2 = f == Family::kGpt2;
  const std::pair<const char*, const char*> keys[] = {
      {"num_layers", gpt2 ? "n_layer" : "num_hidden_layers"},
      {"hidden_size", gpt2 ? "n_embd" : "hidden_size"},
      {"num_attention_heads", gpt2 ? "n_head" : "num_attention_heads"},
      {"num_kv_heads", "num_key_value_heads"},
      {"head_dim", "head_dim"},
      {"ffn_hidden_size", gpt2 ? "n_inner" : "intermediate_size"},
      {"vocab_size", "vocab_size"},
      {"max_seq_len", gpt2 ? "n_positions" : "max_position_embeddings"},
      {"moe.top_k", "num_experts_per_tok"},
      {"moe.first_dense_layers", "first_k_dense_replace"},
      {"moe.n_group", "n_group"},
      {"moe.topk_group", "topk_group"},
      {"hidden_dropout", gpt2 || f == Family::kPhi3 ? "resid_pdrop" : "hidden_dropout"},
      {"rotary_fraction", f == Family::kPhi3 ? "partial_rotary_factor" : "rotary_pct"},
      {"sliding_window", "sliding_window"},
      {"sliding_window_pattern", c.has("layer_types") ? "layer_types" : "sliding_window_pattern"},
      {"attn_logit_softcapping", "attn_logit_softcapping"},
      {"final_logit_softcapping", "final_logit_softcapping"}};
  for (const auto& [field, key] : keys) {
    if (int line = c.line(key); line > 0) where.record(field, line);
  }
  return where;
}

}  // namespace

pb::ModelSpec import_hf_config(const std::filesystem::path& config_json, std::string name) {
  const HfConfig c(config_json);
  const Family f = family_of(c);
  pb::ModelSpec spec;
  if (name.empty()) name = config_json.parent_path().filename().string();
  if (name.empty()) name = config_json.stem().string();
  spec.set_name(name);
  spec.set_description("Imported from Hugging Face " + c.architecture() + " config " +
                       config_json.filename().string());
  switch (f) {
    case Family::kGpt2:
      read_gpt2(c, spec);
      break;
    case Family::kGptNeoX:
      read_gpt_neox(c, spec);
      break;
    default:
      read_llama_family(c, f, spec);
      break;
  }
  if (f == Family::kOlmo2) {
    spec.set_description(spec.description() +
                         "; OLMo 2's post-block norms priced as pre-block ones and its "
                         "whole-projection q/k norms as per-head qk_norm");
  }
  validate_model(spec, source_map(c, f));
  return spec;
}

}  // namespace orrery::models
