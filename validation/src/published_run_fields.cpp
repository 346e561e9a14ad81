// Reads the fields of a published run that carry free text or optional structure, each against
// the vocabulary docs/formats.md#published-runs lists. Nothing here falls back silently: a value
// outside the vocabulary fails with the field and what would have been understood.
#include "published_run_fields.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>
#include <utility>
#include <vector>

#include "orrery/base/error.hpp"
#include "orrery/models/model_catalog.hpp"
#include "validation_json.hpp"

namespace orrery::validation::detail {

using nlohmann::json;

bool CaseReader::has(const std::string& key) const {
  return j_.is_object() && j_.contains(key) && !j_.at(key).is_null();
}

const json& CaseReader::at(const std::string& key) const {
  if (!j_.is_object() || !j_.contains(key)) fail(key, "missing");
  return j_.at(key);
}

CaseReader CaseReader::child(const std::string& key) const {
  const json& c = at(key);
  if (!c.is_object()) fail(key, "expected an object");
  return CaseReader(c, file_, path_ + "." + key);
}

int64_t CaseReader::integer(const std::string& key) const {
  const json& v = at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 1) {
    fail(key, "expected a positive integer, got " + v.dump());
  }
  return v.get<int64_t>();
}

int64_t CaseReader::integer_or(const std::string& key, int64_t fallback) const {
  return has(key) ? integer(key) : fallback;
}

int64_t CaseReader::count_or(const std::string& key, int64_t fallback) const {
  if (!has(key)) return fallback;
  const json& v = j_.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0) {
    fail(key, "expected an integer >= 0, got " + v.dump());
  }
  return v.get<int64_t>();
}

double CaseReader::measure_or(const std::string& key, double max, const char* why) const {
  if (!has(key)) return 0;
  const json& v = j_.at(key);
  if (!v.is_number()) fail(key, "expected a number > 0, got " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || !(x > 0)) fail(key, "expected a number > 0, got " + v.dump());
  if (const std::string problem = above_bound(v, max, why); !problem.empty()) fail(key, problem);
  return x;
}

bool CaseReader::flag_or(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_boolean()) fail(key, "expected true or false, got " + j_.at(key).dump());
  return j_.at(key).get<bool>();
}

std::string CaseReader::text(const std::string& key) const {
  if (!has(key)) return {};
  if (!j_.at(key).is_string()) fail(key, "expected a string");
  return j_.at(key).get<std::string>();
}

void CaseReader::only(const std::vector<std::string>& known) const {
  for (const auto& item : j_.items()) {
    if (std::find(known.begin(), known.end(), item.key()) == known.end()) {
      fail(item.key(), "unknown field" + base::suggest(item.key(), known));
    }
  }
}

void CaseReader::fail(const std::string& key, const std::string& reason) const {
  throw base::InputError(file_, 0, path_ + "." + key, reason);
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains(const std::string& text, const char* word) {
  return lowercase(text).find(word) != std::string::npos;
}

namespace {

// Lower case, every run of other characters than letters and digits one space, padded with a
// space each side, so that " word " finds whole words and phrases.
std::string words_of(const std::string& text) {
  std::string out = " ";
  for (char c : lowercase(text)) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += c;
    } else if (out.back() != ' ') {
      out += ' ';
    }
  }
  if (out.back() != ' ') out += ' ';
  return out;
}

bool names_any(const std::string& words, const std::vector<std::string>& vocabulary) {
  return std::any_of(vocabulary.begin(), vocabulary.end(), [&](const std::string& w) {
    return words.find(" " + w + " ") != std::string::npos;
  });
}

std::string listed(const std::vector<std::string>& vocabulary) {
  std::string out;
  for (const auto& w : vocabulary) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// One value of an enumerated field, written as in the vocabulary ('-' and ' ' read as '_').
template <typename Enum>
Enum one_of(const CaseReader& r, const std::string& key,
            const std::vector<std::pair<std::string, Enum>>& vocabulary) {
  std::string got = lowercase(r.text(key));
  std::replace(got.begin(), got.end(), '-', '_');
  std::replace(got.begin(), got.end(), ' ', '_');
  std::vector<std::string> names;
  for (const auto& [name, value] : vocabulary) {
    if (got == name) return value;
    names.push_back(name);
  }
  r.fail(key, "got '" + r.text(key) + "', expected one of " + listed(names));
}

}  // namespace

pb::Precision precision_of(const CaseReader& run) {
  const std::string words = words_of(run.text("precision"));
  if (words == " ") run.fail("precision", "missing");
  // fp8 first: an fp8 recipe keeps bf16 master weights and often says so.
  if (names_any(words, {"fp8", "mxfp8", "e4m3"})) return pb::PRECISION_FP8;
  if (names_any(words, {"bf16", "bfloat16"})) return pb::PRECISION_BF16;
  if (names_any(words, {"fp16", "float16"})) return pb::PRECISION_FP16;
  if (names_any(words, {"fp32", "tf32", "float32"})) return pb::PRECISION_FP32;
  run.fail("precision", "got '" + run.text("precision") +
                            "', which names none of fp8, mxfp8, e4m3, bf16, bfloat16, fp16, "
                            "float16, fp32, tf32, float32");
}

pb::MoeDispatcher moe_dispatcher_of(const CaseReader& parallel) {
  return one_of<pb::MoeDispatcher>(
      parallel, "moe_dispatcher",
      {{"alltoall", pb::MOE_DISPATCHER_ALLTOALL}, {"deepep", pb::MOE_DISPATCHER_DEEPEP}});
}

pb::OptimizerStateDtype optimizer_state_dtype_of(const CaseReader& run) {
  return one_of<pb::OptimizerStateDtype>(
      run, "optimizer_state_dtype",
      {{"fp32", pb::OPTIMIZER_STATE_DTYPE_FP32}, {"bf16", pb::OPTIMIZER_STATE_DTYPE_BF16}});
}

pb::Fp8Recipe fp8_recipe_of(const CaseReader& run) {
  if (run.has("fp8_recipe")) {
    return one_of<pb::Fp8Recipe>(run, "fp8_recipe",
                                 {{"delayed", pb::FP8_RECIPE_DELAYED},
                                  {"current", pb::FP8_RECIPE_CURRENT},
                                  {"tensorwise", pb::FP8_RECIPE_CURRENT},
                                  {"blockwise", pb::FP8_RECIPE_BLOCKWISE},
                                  {"mxfp8", pb::FP8_RECIPE_MXFP8},
                                  {"rowwise", pb::FP8_RECIPE_ROWWISE}});
  }
  // Else as the precision text names it (Megatron's --fp8-recipe spellings and the usual prose).
  const std::string words = words_of(run.text("precision"));
  // NeMo's performance scripts name the recipe by a suffix (--fp8_recipe ds | cs | mx | ss:
  // per-tensor delayed, per-tensor current, MXFP8, subchannel scaling), written "FP8-CS".
  if (names_any(words, {"fp8 mx"})) return pb::FP8_RECIPE_MXFP8;
  if (names_any(words, {"fp8 ss"})) return pb::FP8_RECIPE_BLOCKWISE;
  if (names_any(words, {"fp8 ds"})) return pb::FP8_RECIPE_DELAYED;
  if (names_any(words, {"fp8 cs"})) return pb::FP8_RECIPE_CURRENT;
  if (names_any(words, {"mxfp8"})) return pb::FP8_RECIPE_MXFP8;
  if (names_any(words, {"blockwise", "block", "deepseek"})) return pb::FP8_RECIPE_BLOCKWISE;
  // An amax history is delayed scaling (Transformer Engine's DelayedScaling keeps one).
  if (names_any(words, {"delayed", "amax"})) return pb::FP8_RECIPE_DELAYED;
  if (names_any(words, {"current", "tensorwise"})) return pb::FP8_RECIPE_CURRENT;
  if (names_any(words, {"rowwise"})) return pb::FP8_RECIPE_ROWWISE;  // torchao's float8 rowwise
  return pb::FP8_RECIPE_UNSPECIFIED;
}

namespace {

// "every 2nd", "every 2": the layer-level policy's frequency, or 0 when the words give none.
int64_t every_nth(const std::string& words) {
  const auto at = words.find(" every ");
  if (at == std::string::npos) return 0;
  std::string n = words.substr(at + 7, words.find(' ', at + 7) - at - 7);
  for (const char* suffix : {"st", "nd", "rd", "th"}) {
    if (n.size() > 2 && n.compare(n.size() - 2, 2, suffix) == 0) n.resize(n.size() - 2);
  }
  if (n.empty() || !std::all_of(n.begin(), n.end(), ::isdigit) || n.size() > 6) return 0;
  return std::stoll(n);
}

// Megatron-core's --recompute-modules as the text lists them after "recompute-modules" (or the
// config key's "recompute_modules", or "recompute modules"), up to a closing parenthesis: its
// module names, and the ModelZoo tables' short "norm" and "act".
std::vector<pb::RecomputeModule> modules_of(const CaseReader& run, const std::string& text) {
  const std::string lower = lowercase(text);
  auto at = std::string::npos;
  for (const char* spelling : {"recompute-modules", "recompute_modules", "recompute modules"})
    at = std::min(at, lower.find(spelling));
  if (at == std::string::npos) run.fail("recompute", "got '" + text + "': no module list");
  std::string list = lower.substr(at + 17);
  list = list.substr(0, list.find(')'));
  std::vector<pb::RecomputeModule> out;
  std::string name;
  const auto take = [&] {
    if (name.empty()) return;
    if (name == "core_attn") {
      out.push_back(pb::RECOMPUTE_MODULE_CORE_ATTN);
    } else if (name == "layernorm" || name == "norm") {
      out.push_back(pb::RECOMPUTE_MODULE_LAYERNORM);
    } else if (name == "moe_act" || name == "act") {
      out.push_back(pb::RECOMPUTE_MODULE_MOE_ACT);
    } else if (name == "mlp") {
      out.push_back(pb::RECOMPUTE_MODULE_MLP);
    } else if (name == "moe") {
      out.push_back(pb::RECOMPUTE_MODULE_MOE);
    } else if (name == "shared_experts" || name == "shared_expert") {
      out.push_back(pb::RECOMPUTE_MODULE_SHARED_EXPERTS);
    } else if (name == "mla_up_proj") {
      out.push_back(pb::RECOMPUTE_MODULE_MLA_UP_PROJ);
    } else {
      run.fail("recompute", "got '" + text + "': '" + name +
                                "' is none of Megatron-core's --recompute-modules (core_attn, "
                                "layernorm or norm, moe_act or act, mlp, moe, shared_experts, "
                                "mla_up_proj)");
    }
    name.clear();
  };
  for (const char c : list) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      name += c;
    } else if (c != '-' || !name.empty()) {
      take();
    }
  }
  take();
  if (out.empty()) run.fail("recompute", "got '" + text + "': --recompute-modules lists none");
  return out;
}

}  // namespace

void read_recompute(const CaseReader& run, pb::Plan& plan, std::string& assumed) {
  const std::string text = run.text("recompute");
  const std::string words = words_of(text);
  const auto leads = [&](const char* word) {
    return words.rfind(" " + std::string(word) + " ", 0) == 0;
  };
  if (leads("none") || leads("no") || leads("off") || leads("false") || leads("disabled"))
    return plan.set_recompute(pb::RECOMPUTE_NONE);
  if (leads("not stated")) {
    // Published recipes that leave it out ran their framework's default, which for the recipes
    // in the files so far (NeMo's) is none; the reader says so rather than decide silently.
    assumed = " (assumed: no recomputation; `recompute` not stated)";
    return plan.set_recompute(pb::RECOMPUTE_NONE);
  }
  if (leads("full")) {
    // "full (block, 40 of 80 layers)": Megatron's --recompute-num-layers below the stage's count.
    const auto of = words.find(" of ");
    if (of != std::string::npos) {
      const auto before = words.rfind(' ', of - 1), after = words.find(' ', of + 4);
      const std::string n = words.substr(before + 1, of - before - 1);
      const std::string m = words.substr(of + 4, after - of - 4);
      if (!n.empty() && !m.empty() && std::all_of(n.begin(), n.end(), ::isdigit) &&
          std::all_of(m.begin(), m.end(), ::isdigit) && n != m) {
        run.fail("recompute", "got '" + text + "': full recomputation of " + n + " of " + m +
                                  " layers; a partial layer count is not modelled (full "
                                  "recomputes every layer)");
      }
    }
    return plan.set_recompute(pb::RECOMPUTE_FULL);
  }
  if (!leads("selective")) {
    run.fail("recompute", "got '" + text +
                              "', which begins with none of none, no, off, false, "
                              "disabled, not stated, full, selective");
  }
  if (names_any(words, {"op", "ops"})) return plan.set_recompute(pb::RECOMPUTE_SELECTIVE_OP);
  if (names_any(words, {"layer"})) {
    // torchtitan's layer-level policy: every N-th block checkpointed whole. Its frequency is a
    // setting of the run (selective_ac_option), so the text must state it.
    const int64_t n = every_nth(words);
    if (n < 1) {
      run.fail("recompute", "got '" + text +
                                "': torchtitan's layer-level selective checkpointing needs its "
                                "frequency ('every 2nd': selective_ac_option), which the text "
                                "does not state");
    }
    plan.set_recompute(pb::RECOMPUTE_FULL);
    return plan.set_recompute_every(n);
  }
  plan.set_recompute(pb::RECOMPUTE_SELECTIVE);
  if (names_any(words, {"recompute modules"})) {
    for (const auto m : modules_of(run, text)) plan.add_recompute_modules(m);
  }
}

int64_t seq_len_of(const CaseReader& run) {
  if (run.at("model").is_object() && run.child("model").has("seq_len")) {
    return run.child("model").integer("seq_len");
  }
  return run.child("batch").integer("seq_len");
}

namespace {

std::optional<std::string> preset_named(const std::string& name) {
  const std::string key = lowercase(name);
  for (const auto& preset : models::preset_names()) {
    if (preset == key) return preset;
  }
  return std::nullopt;
}

pb::ModelSpec from_preset(const std::string& name, int64_t seq_len, std::string& label) {
  label = name;
  pb::ModelSpec spec = models::preset(name);
  // The published run may use a different sequence length than the preset's maximum.
  spec.set_max_seq_len(std::max(spec.max_seq_len(), seq_len));
  return spec;
}

pb::ModelSpec named_preset(const CaseReader& r, const std::string& key, const std::string& name,
                           int64_t seq_len, std::string& label) {
  const auto preset = preset_named(name);
  if (!preset)
    r.fail(key,
           "'" + name + "' is not a model preset" + base::suggest(name, models::preset_names()));
  return from_preset(*preset, seq_len, label);
}

// Files that predate the architecture fields: the family their notes or name state, GPT
// (LayerNorm, GeLU, learned positions, biases, dropout) or Llama (RMSNorm, SwiGLU, RoPE).
void family_from_notes(const CaseReader& m, pb::ModelSpec& s) {
  const std::string notes = m.text("notes") + " " + m.text("name");
  const bool gpt =
      contains(notes, "gpt") || contains(notes, "layernorm") || contains(notes, "gelu");
  const bool llama =
      contains(notes, "llama") || contains(notes, "rmsnorm") || contains(notes, "swiglu");
  if (gpt == llama) {
    m.fail("activation",
           gpt ? "missing, and the notes name both the GPT and the Llama family"
               : "missing, and the notes name no family (give activation, norm, position)");
  }
  s.set_norm(gpt ? pb::NORM_LAYERNORM : pb::NORM_RMSNORM);
  s.set_activation(gpt ? pb::ACTIVATION_GELU : pb::ACTIVATION_SWIGLU);
  s.set_position_embedding(gpt ? pb::POSITION_EMBEDDING_LEARNED : pb::POSITION_EMBEDDING_ROPE);
  s.set_linear_bias(gpt);
  s.set_hidden_dropout(gpt ? 0.1 : 0);
}

void read_architecture(const CaseReader& m, pb::ModelSpec& s) {
  if (!m.has("activation") && !m.has("norm") && !m.has("position")) return family_from_notes(m, s);
  s.set_activation(one_of<pb::Activation>(m, "activation",
                                          {{"gelu", pb::ACTIVATION_GELU},
                                           {"relu", pb::ACTIVATION_RELU},
                                           {"squared_relu", pb::ACTIVATION_SQUARED_RELU},
                                           {"swiglu", pb::ACTIVATION_SWIGLU},
                                           {"geglu", pb::ACTIVATION_GEGLU}}));
  s.set_norm(one_of<pb::Norm>(m, "norm",
                              {{"layernorm", pb::NORM_LAYERNORM}, {"rmsnorm", pb::NORM_RMSNORM}}));
  s.set_position_embedding(
      one_of<pb::PositionEmbedding>(m, "position",
                                    {{"rope", pb::POSITION_EMBEDDING_ROPE},
                                     {"learned", pb::POSITION_EMBEDDING_LEARNED},
                                     {"alibi", pb::POSITION_EMBEDDING_ALIBI},
                                     {"none", pb::POSITION_EMBEDDING_NONE}}));
  s.set_linear_bias(m.flag_or("linear_bias", false));
  s.set_qkv_bias(m.flag_or("qkv_bias", false));
  s.set_tied_embeddings(m.flag_or("tied_embeddings", false));
  s.set_hidden_dropout(m.flag_or("dropout", false) ? 0.1 : 0);
}

double cap_or_zero(const CaseReader& m, const std::string& key) {
  if (!m.has(key)) return 0;
  const json& v = m.at(key);
  if (!v.is_number() || !(v.get<double>() >= 0)) {
    m.fail(key, "expected a number >= 0 (0: no soft-capping), got " + v.dump());
  }
  return v.get<double>();
}

// The attention variants and block layout (docs/models.md): a window and which layers use it,
// soft-capping, the parallel block, Gemma's post-block norms. validate_model judges their
// combination.
void read_attention_variants(const CaseReader& m, pb::ModelSpec& s) {
  s.set_parallel_block(m.flag_or("parallel_block", false));
  s.set_post_block_norm(m.flag_or("post_block_norm", false));
  s.set_sliding_window(m.integer_or("sliding_window", 0));
  s.set_sliding_window_pattern(m.count_or("sliding_window_pattern", 0));
  s.set_sliding_window_from_layer(m.count_or("sliding_window_from_layer", 0));
  s.set_attn_logit_softcapping(cap_or_zero(m, "attn_logit_softcapping"));
  s.set_final_logit_softcapping(cap_or_zero(m, "final_logit_softcapping"));
}

void read_moe(const CaseReader& m, pb::ModelSpec& s) {
  if (!m.has("moe")) return;
  const CaseReader moe = m.child("moe");
  moe.only(
      {"experts", "top_k", "expert_ffn", "shared_experts", "shared_expert_ffn", "dense_layers"});
  pb::MoeSpec* e = s.mutable_moe();
  e->set_num_experts(moe.integer("experts"));
  e->set_top_k(moe.integer("top_k"));
  e->set_expert_ffn_hidden_size(moe.integer("expert_ffn"));
  e->set_num_shared_experts(moe.count_or("shared_experts", 0));
  // Absent: the model's own rule, a shared expert as wide as a routed one.
  e->set_shared_expert_ffn_hidden_size(moe.count_or("shared_expert_ffn", 0));
  e->set_first_dense_layers(moe.count_or("dense_layers", 0));
}

pb::ModelSpec inline_model(const CaseReader& m, int64_t seq_len, std::string& label) {
  const std::string key = lowercase(m.text("key"));
  if (key.empty()) m.fail("key", "missing (names an inline model, or a preset)");
  label = key + " (from the file)";
  pb::ModelSpec s;
  s.set_name(key);
  s.set_num_layers(m.integer("layers"));
  s.set_hidden_size(m.integer("hidden"));
  s.set_num_attention_heads(m.integer("heads"));
  s.set_num_kv_heads(m.integer_or("kv_heads", m.integer("heads")));
  if (m.has("head_dim")) s.set_head_dim(m.integer("head_dim"));
  s.set_ffn_hidden_size(m.integer("ffn"));
  s.set_vocab_size(m.integer("vocab"));
  s.set_max_seq_len(seq_len);
  read_architecture(m, s);
  read_attention_variants(m, s);
  read_moe(m, s);
  try {
    models::validate_model(s, SourceMap());
  } catch (const base::InputError& e) {
    m.fail(e.field(), e.reason());
  }
  return s;
}

}  // namespace

pb::ModelSpec model_of(const CaseReader& run, std::string& label) {
  const int64_t seq_len = seq_len_of(run);
  const json& model = run.at("model");
  if (model.is_string())
    return named_preset(run, "model", model.get<std::string>(), seq_len, label);
  const CaseReader m = run.child("model");
  if (m.has("preset")) return named_preset(m, "preset", m.text("preset"), seq_len, label);
  if (const auto preset = preset_named(m.text("key"))) return from_preset(*preset, seq_len, label);
  return inline_model(m, seq_len, label);
}

namespace {

// A flash kernel's generation where the text names one: FlashAttention-2 (also PyTorch SDPA, whose
// flash backend is FlashAttention-2) or FlashAttention-3; else the generic flash kernel. Naming
// both generations is refused. cuDNN and Transformer Engine's fused attention stay generic: which
// cuDNN kernel ran depends on the device and release.
pb::AttentionKernel flash_generation(const CaseReader& run, const std::string& words) {
  const std::vector<std::string> fa2 = {
      "flashattention2", "flashattention 2", "flash attention 2", "flash attn 2", "fa2", "sdpa"};
  const std::vector<std::string> fa3 = {"flashattention3", "flashattention 3", "flash attention 3",
                                        "flash attn 3", "fa3"};
  const bool is_2 = names_any(words, fa2), is_3 = names_any(words, fa3);
  if (is_2 && is_3) {
    run.fail("attention_kernel", "got '" + run.text("attention_kernel") +
                                     "', which names two flash generations (flash_2: " +
                                     listed(fa2) + "; flash_3: " + listed(fa3) + ")");
  }
  return is_2   ? pb::ATTENTION_KERNEL_FLASH_2
         : is_3 ? pb::ATTENTION_KERNEL_FLASH_3
                : pb::ATTENTION_KERNEL_FLASH;
}

pb::AttentionKernel kernel_from_text(const CaseReader& run) {
  const std::string words = words_of(run.text("attention_kernel"));
  const std::vector<std::string> flash = {
      "flash", "flashattention", "flashattention2",  "flashattention3", "fa2", "fa3", "cudnn",
      "sdpa",  "xformers",       "memory efficient", "fused attention"};
  const std::vector<std::string> materialized = {"materialized", "unfused", "eager",
                                                 "naive",        "math",    "fused softmax"};
  const bool is_flash = names_any(words, flash), is_materialized = names_any(words, materialized);
  if (is_flash != is_materialized)
    return is_flash ? flash_generation(run, words) : pb::ATTENTION_KERNEL_MATERIALIZED;
  run.fail("attention_kernel", "got '" + run.text("attention_kernel") + "', which names " +
                                   (is_flash ? "both kinds" : "neither kind") + " (flash: " +
                                   listed(flash) + "; materialized: " + listed(materialized) + ")");
}

// FlashAttention shipped in mid-2022 and reached Megatron-LM and NeMo in 2023: a framework dated
// 2022 or earlier materialized the attention scores, a later one ran a flash kernel.
pb::AttentionKernel kernel_from_framework(const CaseReader& run) {
  const std::string framework = lowercase(run.text("framework"));
  auto by_year = [](int year) {
    return year <= 2022 ? pb::ATTENTION_KERNEL_MATERIALIZED : pb::ATTENTION_KERNEL_FLASH;
  };
  std::smatch m;
  if (std::regex_search(framework, m, std::regex(R"(\b(20[12]\d)\b)")))
    return by_year(std::stoi(m[1].str()));
  if (std::regex_search(framework, m, std::regex(R"(\bnemo\s+(\d\d)\.\d\d)"))) {
    return by_year(2000 + std::stoi(m[1].str()));
  }
  // The Megatron-LM commits of the SC'21 scripts carry no date; they are from 2021.
  if (framework.find("megatron-lm @") != std::string::npos)
    return pb::ATTENTION_KERNEL_MATERIALIZED;
  const std::string words = words_of(framework);
  if (names_any(words, {"torchtitan", "nanotron", "picotron", "megatron core", "mcore"})) {
    return pb::ATTENTION_KERNEL_FLASH;
  }
  run.fail("attention_kernel", "missing, and framework '" + run.text("framework") +
                                   "' has no year, NeMo version or name that dates its kernel");
}

}  // namespace

pb::AttentionKernel attention_kernel_of(const CaseReader& run) {
  return run.has("attention_kernel") ? kernel_from_text(run) : kernel_from_framework(run);
}

void read_pipeline_layout(const CaseReader& parallel, int64_t layers, pb::Plan& plan) {
  if (!parallel.has("pipeline_layout")) return;
  const int64_t stages = plan.parallel().pp() * plan.parallel().vp();
  const json& layout = parallel.at("pipeline_layout");
  std::vector<int64_t> per_stage;
  if (layout.is_array()) {
    for (const auto& v : layout) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1) {
        parallel.fail("pipeline_layout", "expected positive integers, got " + v.dump());
      }
      per_stage.push_back(v.get<int64_t>());
    }
  } else if (layout.is_object()) {
    const CaseReader ends = parallel.child("pipeline_layout");
    ends.only({"first", "last"});
    const int64_t inner = stages - (ends.has("first") ? 1 : 0) - (ends.has("last") ? 1 : 0);
    const int64_t rest = layers - ends.integer_or("first", 0) - ends.integer_or("last", 0);
    if (inner < 1 || rest < inner || rest % inner != 0) {
      parallel.fail("pipeline_layout", std::to_string(rest) +
                                           " layers do not split evenly over the other " +
                                           std::to_string(inner) +
                                           " of pp x vp = " + std::to_string(stages) + " stages");
    }
    per_stage.assign(static_cast<size_t>(stages), rest / inner);
    if (ends.has("first")) per_stage.front() = ends.integer("first");
    if (ends.has("last")) per_stage.back() = ends.integer("last");
  } else {
    parallel.fail("pipeline_layout",
                  "expected a list of layers per virtual stage or {first, last}");
  }
  if (static_cast<int64_t>(per_stage.size()) != stages) {
    parallel.fail("pipeline_layout", "has " + std::to_string(per_stage.size()) +
                                         " entries, expected pp x vp = " + std::to_string(stages));
  }
  for (int64_t n : per_stage) plan.add_layers_per_stage(n);
}

}  // namespace orrery::validation::detail
