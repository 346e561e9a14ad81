#include "orrery/validation/run_validation.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "orrery/models/model_catalog.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/base/error.hpp"

namespace orrery::validation {
namespace {

using nlohmann::json;

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains(const std::string& text, const char* word) { return lowercase(text).find(word) != std::string::npos; }

class CaseReader {
 public:
  CaseReader(const json& j, std::string file, std::string path) : j_(j), file_(std::move(file)), path_(std::move(path)) {}

  const json& at(const std::string& key) const {
    if (!j_.is_object() || !j_.contains(key)) fail(key, "missing");
    return j_.at(key);
  }
  CaseReader child(const std::string& key) const {
    const json& c = at(key);
    if (!c.is_object()) fail(key, "expected an object");
    return CaseReader(c, file_, path_ + "." + key);
  }
  int64_t integer(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1) fail(key, "expected a positive integer, got " + v.dump());
    return v.get<int64_t>();
  }
  // Optional positive integer: null or absent is `fallback`.
  int64_t integer_or(const std::string& key, int64_t fallback) const {
    if (!j_.contains(key) || j_.at(key).is_null()) return fallback;
    return integer(key);
  }
  std::string text(const std::string& key) const {
    if (!j_.contains(key) || j_.at(key).is_null()) return {};
    if (!j_.at(key).is_string()) fail(key, "expected a string");
    return j_.at(key).get<std::string>();
  }
  [[noreturn]] void fail(const std::string& key, const std::string& reason) const {
    throw base::InputError(file_, 0, path_ + "." + key, reason);
  }

 private:
  const json& j_;
  std::string file_, path_;
};

// The model: the preset of the same key when there is one (its architecture details are
// complete), else a spec built from the case's numbers with the family its notes name.
pb::ModelSpec model_of(const CaseReader& m, std::string& label) {
  const std::string key = lowercase(m.text("key"));
  for (const auto& name : models::preset_names()) {
    if (name == key) {
      label = name;
      pb::ModelSpec spec = models::preset(name);
      // The published run may use a different sequence length than the preset's maximum.
      spec.set_max_seq_len(std::max(spec.max_seq_len(), m.integer("seq_len")));
      return spec;
    }
  }
  label = key + " (from the file)";
  pb::ModelSpec s;
  s.set_name(key);
  s.set_num_layers(m.integer("layers"));
  s.set_hidden_size(m.integer("hidden"));
  s.set_num_attention_heads(m.integer("heads"));
  s.set_num_kv_heads(m.integer_or("kv_heads", m.integer("heads")));
  s.set_ffn_hidden_size(m.integer("ffn"));
  s.set_vocab_size(m.integer("vocab"));
  s.set_max_seq_len(m.integer("seq_len"));
  const std::string notes = m.text("notes") + " " + m.text("name");
  const bool gpt = contains(notes, "gpt") || contains(notes, "layernorm");
  s.set_norm(gpt ? pb::NORM_LAYERNORM : pb::NORM_RMSNORM);
  s.set_activation(gpt ? pb::ACTIVATION_GELU : pb::ACTIVATION_SWIGLU);
  s.set_position_embedding(gpt ? pb::POSITION_EMBEDDING_LEARNED : pb::POSITION_EMBEDDING_ROPE);
  s.set_linear_bias(gpt);
  s.set_hidden_dropout(gpt ? 0.1 : 0);
  models::validate_model(s, SourceMap());
  return s;
}

std::string cluster_preset_of(const std::string& gpu) {
  const std::string g = lowercase(gpu);
  if (g.find("a100") != std::string::npos) return "dgx-a100";
  if (g.find("h100") != std::string::npos) return "dgx-h100";
  if (g.find("h800") != std::string::npos) return "h800";
  if (g.find("gb200") != std::string::npos) return "gb200-nvl72";
  if (g.find("mi300") != std::string::npos) return "mi300x";
  return {};
}

pb::Sharding sharding_of(const std::string& text) {
  if (contains(text, "distributed optimizer") || contains(text, "zero-1") || contains(text, "zero1")) return pb::SHARDING_ZERO1;
  if (contains(text, "zero-2") || contains(text, "zero2")) return pb::SHARDING_ZERO2;
  if (contains(text, "fsdp")) return pb::SHARDING_FSDP;
  if (contains(text, "zero-3") || contains(text, "zero3")) return pb::SHARDING_ZERO3;
  return pb::SHARDING_NONE;
}

pb::Recompute recompute_of(const std::string& text) {
  if (contains(text, "selective")) return pb::RECOMPUTE_SELECTIVE;
  if (text.rfind("full", 0) == 0 || contains(text, "full (")) return pb::RECOMPUTE_FULL;
  return pb::RECOMPUTE_NONE;
}

std::string summary(const pb::Plan& p) {
  std::ostringstream o;
  const auto& q = p.parallel();
  o << "tp" << q.tp() << " pp" << q.pp() << " dp" << q.dp();
  if (q.cp() > 1) o << " cp" << q.cp();
  if (q.ep() > 1) o << " ep" << q.ep();
  if (q.vp() > 1) o << " vp" << q.vp();
  if (q.sequence_parallel()) o << " sp";
  o << " mbs" << p.micro_batch_size();
  if (p.attention_kernel() == pb::ATTENTION_KERNEL_MATERIALIZED) o << " attn=materialized";
  return o.str();
}

// One case as the simulator sees it: model, cluster sized to the run, the published plan. The
// rules are the same for every case (see docs/validation.md).
PublishedRun published_run(const json& c, const std::string& file, const std::string& path) {
  const CaseReader r(c, file, path);
  PublishedRun out;
  out.id = r.text("id");
  const json& measured = r.at("measured");
  if (measured.is_object() && measured.contains("iter_time_s") && measured["iter_time_s"].is_number()) {
    out.measured_s = measured["iter_time_s"].get<double>();
  } else if (c.contains("derived") && c["derived"].is_object() && c["derived"].contains("iter_time_s") &&
             c["derived"]["iter_time_s"].is_number()) {
    out.measured_s = c["derived"]["iter_time_s"].get<double>();
  }
  const CaseReader hw = r.child("hardware");
  const std::string preset = cluster_preset_of(hw.text("gpu"));
  if (preset.empty()) {
    out.skipped = "no cluster preset for GPU '" + hw.text("gpu") + "'";
    return out;
  }
  const int64_t gpus = hw.integer("num_gpus");
  const int64_t per_node = hw.integer("gpus_per_node");
  const int64_t nodes = (gpus + per_node - 1) / per_node;
  out.cluster = topologies::load_cluster(preset, nodes);
  out.cluster_label = preset + " x" + std::to_string(topologies::total_nodes(out.cluster));
  out.model = model_of(r.child("model"), out.model_label);
  const CaseReader par = r.child("parallel");
  const CaseReader batch = r.child("batch");
  pb::Plan& plan = out.plan;
  plan.set_model(out.model.name());
  plan.set_cluster(preset);
  plan.set_nodes(nodes);
  plan.mutable_job()->set_global_batch_size(batch.integer("global_batch_seqs"));
  plan.mutable_job()->set_seq_len(r.child("model").integer("seq_len"));
  plan.mutable_job()->set_precision(lowercase(r.text("precision")).rfind("fp16", 0) == 0 && !contains(r.text("precision"), "bf16")
                                        ? pb::PRECISION_FP16
                                        : pb::PRECISION_BF16);
  auto* q = plan.mutable_parallel();
  q->set_tp(par.integer_or("tp", 1));
  q->set_pp(par.integer_or("pp", 1));
  q->set_dp(par.integer_or("dp", 1));
  q->set_cp(par.integer_or("cp", 1));
  q->set_ep(par.integer_or("ep", 1));
  q->set_vp(par.integer_or("vp", 1));
  if (par.at("sequence_parallel").is_boolean()) q->set_sequence_parallel(par.at("sequence_parallel").get<bool>());
  plan.set_sharding(sharding_of(par.text("zero_fsdp")));
  plan.set_recompute(recompute_of(r.text("recompute")));
  plan.set_micro_batch_size(batch.integer("micro_batch"));
  // Every framework in these runs overlaps the data-parallel reduction with the backward
  // (PyTorch DDP buckets, Megatron/NeMo's overlap flags).
  plan.set_overlap_grad_reduce(true);
  plan.set_overlap_param_gather(true);
  // FlashAttention reached Megatron-LM in 2023; runs on the 2021 commits and the 2022 release
  // materialized the attention scores.
  const std::string framework = r.text("framework");
  const bool before_flash = contains(framework, "megatron-lm @") || contains(framework, "(2021)") ||
                            contains(framework, "(2022)");
  plan.set_attention_kernel(before_flash ? pb::ATTENTION_KERNEL_MATERIALIZED : pb::ATTENTION_KERNEL_FLASH);
  return out;
}

RunCase run_case(const json& c, const std::string& file, const std::string& path, sim::EngineKind engine,
                 const pb::CalibrationProfile* calibration) {
  const PublishedRun run = published_run(c, file, path);
  RunCase out;
  out.id = run.id;
  out.measured_s = run.measured_s;
  if (!(out.measured_s > 0)) {
    out.skipped = "no measured or derived step time";
    return out;
  }
  if (!run.skipped.empty()) {
    out.skipped = run.skipped;
    return out;
  }
  out.model = run.model_label;
  out.cluster = run.cluster_label;
  out.plan = summary(run.plan);
  try {
    const plan::ResolvedPlan resolved = plan::resolve_plan(run.plan, run.model, run.cluster);
    const topologies::Topology topology(run.cluster);
    const sim::CostModels costs(topology, resolved.precision.dtype, calibration);
    sim::DesOptions des;
    des.timeline = false;
    out.predicted_s = sim::simulate(resolved, costs, engine, des).result.step_time_s();
    out.error = (out.predicted_s - out.measured_s) / out.measured_s;
  } catch (const base::InputError& e) {
    out.skipped = std::string("plan rejected: ") + e.what();
  }
  return out;
}

// The cases of a published-runs file; InputError for a file that is not one.
json read_cases(const std::filesystem::path& file) {
  if (std::filesystem::is_directory(file))
    throw base::InputError(file.string(), 0, "", "is a directory, expected a JSON file");
  std::ifstream in(file);
  if (!in) throw base::InputError(file.string(), 0, "", "no such file");
  json root;
  try {
    root = json::parse(in);
  } catch (const json::parse_error& e) {
    throw base::InputError(file.string(), 0, "", std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object() || !root.contains("cases") || !root["cases"].is_array()) {
    throw base::InputError(file.string(), 0, "cases", "expected a list of cases");
  }
  if (root["cases"].empty())
    throw base::InputError(file.string(), 0, "cases", "got an empty list, expected at least one case");
  return root["cases"];
}

}  // namespace

std::pair<double, double> median_p90(std::vector<double> v) {
  if (v.empty()) return {0, 0};
  std::sort(v.begin(), v.end());
  auto rank = [&](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
    return v[std::min(i, v.size() - 1)];
  };
  const double median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return {median, rank(0.9)};
}

RunValidation validate_runs(const std::filesystem::path& file, sim::EngineKind engine,
                            const pb::CalibrationProfile* calibration) {
  const json cases = read_cases(file);
  RunValidation v;
  std::vector<double> errors;
  for (size_t i = 0; i < cases.size(); ++i) {
    RunCase c = run_case(cases[i], file.string(), "cases[" + std::to_string(i) + "]", engine, calibration);
    if (c.skipped.empty()) errors.push_back(std::fabs(c.error)), ++v.simulated;
    v.cases.push_back(std::move(c));
  }
  std::tie(v.median_abs_error, v.p90_abs_error) = median_p90(errors);
  return v;
}

std::vector<PublishedRun> published_runs(const std::filesystem::path& file) {
  const json cases = read_cases(file);
  std::vector<PublishedRun> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    out.push_back(published_run(cases[i], file.string(), "cases[" + std::to_string(i) + "]"));
  }
  return out;
}

}  // namespace orrery::validation
