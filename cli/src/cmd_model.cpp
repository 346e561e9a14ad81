// `orrery model list|show|flops|import`.
#include <algorithm>
#include <cmath>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "number_flags.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "orrery/models/hf_import.hpp"
#include "orrery/models/layer_ops.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/pb/plan.pb.h"
#include "orrery/traces/spec_io.hpp"
#include "output.hpp"
#include "table.hpp"

namespace orrery::cli {
namespace {

// Parameter counts the way model cards print them: "8.03 B", "124.4 M", "106.8 K".
std::string billions(double n) {
  if (n >= 1e9) return base::units::number(std::round(n / 1e7) / 100) + " B";
  if (n >= 1e6) return base::units::number(std::round(n / 1e5) / 10) + " M";
  return base::units::number(std::round(n / 1e2) / 10) + " K";
}

std::string enum_name(const google::protobuf::EnumDescriptor* e, int value) {
  return enum_value_name(*e->FindValueByNumber(value));
}

struct Part {
  std::string label;
  models::LayerPart part;
  int64_t layer;
  int64_t count;
};

// The decoder layers grouped by kind, in order of each kind's first layer.
std::vector<Part> layer_kinds(const pb::ModelSpec& spec) {
  std::vector<Part> out;
  for (int64_t l = 0; l < spec.num_layers(); ++l) {
    std::string label = models::is_moe_layer(spec, l) ? "moe" : "dense";
    if (spec.sliding_window() > 0)
      label += models::is_local_attention_layer(spec, l) ? ", local" : ", global";
    label = "layer (" + label + ")";
    auto it = std::find_if(out.begin(), out.end(), [&](const Part& p) { return p.label == label; });
    if (it == out.end()) {
      out.push_back({label, models::LayerPart::kDecoder, l, 1});
    } else {
      ++it->count;
    }
  }
  return out;
}

// The fields of docs/models.md#attention-variants-and-block-layouts a model sets.
void add_attention_variants(const pb::ModelSpec& spec,
                            std::vector<std::pair<std::string, std::string>>& f) {
  if (spec.sliding_window() > 0) {
    const int64_t p = spec.sliding_window_pattern();
    const int64_t from = spec.sliding_window_from_layer();
    std::string layers =
        p > 0 ? "global every " + std::to_string(p) + " layers from layer " + std::to_string(p - 1)
              : std::string("every layer");
    if (from > 0) {
      layers = p > 0 ? layers + " and every layer before " + std::to_string(from)
                     : "layers " + std::to_string(from) + " and up (the ones before global)";
    }
    f.emplace_back("sliding window", std::to_string(spec.sliding_window()) + " tokens, " + layers);
  }
  if (spec.attn_logit_softcapping() > 0 || spec.final_logit_softcapping() > 0) {
    f.emplace_back("soft-capping",
                   "attention " + base::units::number(spec.attn_logit_softcapping()) +
                       ", final logits " + base::units::number(spec.final_logit_softcapping()));
  }
  if (spec.parallel_block()) f.emplace_back("block", "parallel attention + MLP, one norm");
  if (spec.post_block_norm()) f.emplace_back("post-block norms", "yes");
}

void show_model(const std::string& name, const OutputFlags& out) {
  const pb::ModelSpec spec = models::load_model(name);
  if (print_spec_if_asked(spec, out)) return;
  const models::ModelStats stats = models::model_stats(spec, spec.max_seq_len());
  std::vector<std::pair<std::string, std::string>> f{
      {"model", spec.name()},
      {"layers", std::to_string(spec.num_layers())},
      {"hidden size", std::to_string(spec.hidden_size())},
      {"attention heads", std::to_string(spec.num_attention_heads()) + " (kv " +
                              std::to_string(spec.num_kv_heads()) + ", head dim " +
                              std::to_string(models::head_dim(spec)) + ")"},
      {"ffn hidden size", std::to_string(spec.ffn_hidden_size())},
      {"vocabulary", std::to_string(spec.vocab_size())},
      {"max sequence", std::to_string(spec.max_seq_len())},
      {"norm / activation", enum_name(pb::Norm_descriptor(), spec.norm()) + " / " +
                                enum_name(pb::Activation_descriptor(), spec.activation())},
      {"positions", enum_name(pb::PositionEmbedding_descriptor(), spec.position_embedding())},
      {"tied embeddings", spec.tied_embeddings() ? "yes" : "no"},
  };
  if (spec.has_moe()) {
    const auto& m = spec.moe();
    f.emplace_back(
        "experts",
        std::to_string(m.num_experts()) + " routed, top-" + std::to_string(m.top_k()) + ", ffn " +
            std::to_string(m.expert_ffn_hidden_size()) +
            (m.num_shared_experts() > 0 ? ", " + std::to_string(m.num_shared_experts()) + " shared"
                                        : std::string()) +
            (m.first_dense_layers() > 0
                 ? ", first " + std::to_string(m.first_dense_layers()) + " layers dense"
                 : std::string()));
  }
  if (spec.has_mla()) {
    const auto& a = spec.mla();
    f.emplace_back("latent attention", "q rank " + std::to_string(a.q_lora_rank()) + ", kv rank " +
                                           std::to_string(a.kv_lora_rank()));
  }
  add_attention_variants(spec, f);
  f.emplace_back("parameters", billions(stats.parameters));
  if (spec.has_moe()) f.emplace_back("active parameters", billions(stats.active_parameters));
  f.emplace_back("training FLOPs / token", base::units::flops(stats.training_flops_per_token) +
                                               " at seq " + std::to_string(spec.max_seq_len()));
  std::cout << render_fields(f);
}

void list_models(const OutputFlags& out) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  Table table({"model", "layers", "hidden", "heads", "kv", "experts", "params", "active"});
  for (const auto& name : models::preset_names()) {
    const pb::ModelSpec spec = models::preset(name);
    const models::ModelStats s = models::model_stats(spec, spec.max_seq_len());
    const std::string experts = spec.has_moe() ? std::to_string(spec.moe().num_experts()) +
                                                     "x top-" + std::to_string(spec.moe().top_k())
                                               : "-";
    table.add_row({name, std::to_string(spec.num_layers()), std::to_string(spec.hidden_size()),
                   std::to_string(spec.num_attention_heads()), std::to_string(spec.num_kv_heads()),
                   experts, billions(s.parameters), billions(s.active_parameters)});
    rows.push_back(
        {{"name", name}, {"parameters", s.parameters}, {"active_parameters", s.active_parameters}});
  }
  if (out.json) {
    std::cout << with_header("orrery.model.list", {{"models", rows}}).dump(2) << "\n";
  } else {
    std::cout << table.render();
  }
}

struct FlopsArgs {
  std::string model;
  int64_t seq = 0;
  int64_t micro_batch = 1;
  int64_t tp = 1, cp = 1, ep = 1;
  bool sp = false;
};

// Each flag by its plan field's range (orrery/pb/options.proto), as `simulate` checks it: a
// saturated 99999999999999999999 must not overflow the shapes below.
void check_flops_flags(const FlopsArgs& a) {
  if (a.seq > 0) check_flag("--seq", pb::Job::descriptor(), "seq_len", a.seq);
  check_flag("--micro-batch", pb::Plan::descriptor(), "micro_batch_size", a.micro_batch);
  check_flag("--tp", pb::Parallelism::descriptor(), "tp", a.tp);
  check_flag("--cp", pb::Parallelism::descriptor(), "cp", a.cp);
  check_flag("--ep", pb::Parallelism::descriptor(), "ep", a.ep);
}

void print_flops(const FlopsArgs& a, const OutputFlags& out) {
  check_flops_flags(a);
  const pb::ModelSpec spec = models::load_model(a.model);
  models::ShardContext ctx;
  ctx.micro_batch = a.micro_batch;
  ctx.seq_len = a.seq > 0 ? a.seq : spec.max_seq_len();
  ctx.tp = a.tp;
  ctx.cp = a.cp;
  ctx.ep = a.ep;
  ctx.sequence_parallel = a.sp;
  check_divides("--tp", a.tp, "num_attention_heads", spec.num_attention_heads());
  if (const std::string problem = models::shard_problem(spec, ctx); !problem.empty()) {
    throw base::InputError("", 0, "", "cannot shard " + spec.name() + " this way: " + problem);
  }

  // One row per op of the first layer of each distinct kind (dense or MoE; with a sliding window,
  // local or global attention), plus embedding and head.
  std::vector<Part> parts{{"embedding", models::LayerPart::kEmbedding, 0, 1}};
  for (Part& p : layer_kinds(spec)) parts.push_back(std::move(p));
  parts.push_back({"head", models::LayerPart::kHead, 0, 1});

  Table table({"part", "op", "class", "shape", "fwd FLOP", "bwd FLOP", "params", "saved act"});
  nlohmann::ordered_json json_parts = nlohmann::ordered_json::array();
  double total_fwd = 0, total_bwd = 0;
  for (const auto& p : parts) {
    nlohmann::ordered_json ops = nlohmann::ordered_json::array();
    for (const auto& op : models::layer_ops(spec, p.part, p.layer, ctx)) {
      std::string shape;
      for (size_t i = 0; i < op.shape.size(); ++i)
        shape += (i ? "x" : "") + std::to_string(op.shape[i]);
      table.add_row(
          {p.label + (p.count > 1 ? " x" + std::to_string(p.count) : ""), op.name,
           enum_name(pb::OpClass_descriptor(), op.op_class), shape,
           base::units::flops(op.forward_flops), base::units::flops(op.backward_flops),
           op.parameters > 0 ? base::units::number(op.parameters) : "",
           op.saved_activation_bytes > 0 ? base::units::bytes(op.saved_activation_bytes) : ""});
      total_fwd += op.forward_flops * static_cast<double>(p.count);
      total_bwd += op.backward_flops * static_cast<double>(p.count);
      ops.push_back({{"name", op.name},
                     {"op_class", enum_name(pb::OpClass_descriptor(), op.op_class)},
                     {"shape", op.shape},
                     {"forward_flops", op.forward_flops},
                     {"backward_flops", op.backward_flops},
                     {"parameters", op.parameters},
                     {"saved_activation_bytes", op.saved_activation_bytes}});
    }
    table.add_separator();
    json_parts.push_back({{"part", p.label}, {"count", p.count}, {"ops", ops}});
  }
  const models::ModelStats stats = models::model_stats(spec, ctx.seq_len);
  const double tokens = static_cast<double>(ctx.micro_batch * ctx.seq_len);
  if (out.json) {
    nlohmann::ordered_json j{{"model", spec.name()},
                             {"seq_len", ctx.seq_len},
                             {"micro_batch", ctx.micro_batch},
                             {"tp", ctx.tp},
                             {"sequence_parallel", ctx.sequence_parallel},
                             {"cp", ctx.cp},
                             {"ep", ctx.ep},
                             {"parts", json_parts},
                             {"rank_forward_flops", total_fwd},
                             {"rank_backward_flops", total_bwd},
                             {"training_flops_per_token", stats.training_flops_per_token},
                             {"approx_flops_per_token", stats.approx_flops_per_token}};
    std::cout << with_header("orrery.model.flops", j).dump(2) << "\n";
    return;
  }
  std::cout << table.render();
  std::cout << render_fields({
      {"per rank, one micro-batch",
       base::units::flops(total_fwd) + " forward + " + base::units::flops(total_bwd) + " backward"},
      {"training FLOPs / token",
       base::units::flops(stats.training_flops_per_token) + " (unsharded, no recomputation)"},
      {"6N + attention estimate", base::units::flops(stats.approx_flops_per_token)},
      {"tokens per micro-batch", base::units::number(tokens)},
  });
}

struct ImportArgs {
  std::string config;
  std::string name;
  std::string out_file;
  bool force = false;
};

void import_model(const ImportArgs& a, const OutputFlags& out) {
  const pb::ModelSpec spec = models::import_hf_config(a.config, a.name);
  const std::string text = out.json ? to_json(spec) : to_yaml(spec);
  emit(text, a.out_file, a.force);
}

}  // namespace

void add_model_commands(CLI::App& app) {
  CLI::App* model = app.add_subcommand("model", "Model specs: presets, FLOPs, Hugging Face import");
  model->require_subcommand(1);

  auto out_list = std::make_shared<OutputFlags>();
  CLI::App* list = model->add_subcommand("list", "List the built-in model presets");
  add_output_flags(list, *out_list, false);
  list->callback([out_list] { list_models(*out_list); });

  auto name = std::make_shared<std::string>();
  auto out_show = std::make_shared<OutputFlags>();
  CLI::App* show = model->add_subcommand("show", "Show a model preset or file");
  show->add_option("model", *name, "Preset name or YAML/JSON file")->required();
  add_output_flags(show, *out_show, true);
  show->callback([name, out_show] { show_model(*name, *out_show); });

  auto fa = std::make_shared<FlopsArgs>();
  auto out_flops = std::make_shared<OutputFlags>();
  CLI::App* flops = model->add_subcommand(
      "flops", "Per-layer op decomposition: shapes, FLOPs, parameters, saved activations");
  flops->add_option("model", fa->model, "Preset name or YAML/JSON file")->required();
  flops->add_option("--seq", fa->seq, "Sequence length (default: the model's max)")
      ->check(CLI::PositiveNumber);
  flops->add_option("--micro-batch", fa->micro_batch, "Sequences per micro-batch")
      ->check(CLI::PositiveNumber);
  flops->add_option("--tp", fa->tp, "Tensor-parallel degree")->check(CLI::PositiveNumber);
  flops->add_flag("--sp", fa->sp, "Megatron sequence parallelism");
  flops->add_option("--cp", fa->cp, "Context-parallel degree")->check(CLI::PositiveNumber);
  flops->add_option("--ep", fa->ep, "Expert-parallel degree")->check(CLI::PositiveNumber);
  add_output_flags(flops, *out_flops, false);
  flops->callback([fa, out_flops] { print_flops(*fa, *out_flops); });

  auto ia = std::make_shared<ImportArgs>();
  auto out_import = std::make_shared<OutputFlags>();
  CLI::App* imp = model->add_subcommand(
      "import", "Convert a Hugging Face config.json into an orrery model file (YAML)");
  imp->add_option("config", ia->config, "Path to config.json")->required();
  imp->add_option("--name", ia->name, "Model name (default: the config's folder name)");
  imp->add_option("--out", ia->out_file, "Write here instead of standard output");
  imp->add_flag("--force", ia->force, "Replace --out if it exists");
  add_output_flags(imp, *out_import, false);
  imp->callback([ia, out_import] { import_model(*ia, *out_import); });
}

}  // namespace orrery::cli
