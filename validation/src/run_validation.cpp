#include "orrery/validation/run_validation.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "orrery/base/units.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/traces/spec_io.hpp"
#include "published_run_fields.hpp"
#include "run_framework.hpp"
#include "validation_json.hpp"

namespace orrery::validation {
namespace {

using nlohmann::json;

using detail::CaseReader;
using detail::contains;
using detail::lowercase;

// A run on part of a rack-scale NVLink system (64 GB200 trays: no whole number of 18-tray NVL72
// domains) ran on equal parts of several racks, as Slurm's block topology hands them out
// (--segment): the largest tray count up to a rack's that divides the run's, each part its own
// NVLink domain. Returns what the case's cluster label says about it ("" when whole domains fit
// or the preset has none): an assumption the run does not state, so it is printed, never silent.
std::string split_into_domains(pb::ClusterSpec& cluster, int64_t nodes) {
  if (cluster.node_types_size() != 1) return "";
  pb::IntraNodeSpec& intra = *cluster.mutable_node_types(0)->mutable_intra();
  if (!intra.has_domain_nodes() || nodes <= 0) return "";
  const int64_t rack = intra.domain_nodes();
  if (nodes % rack == 0) return "";
  int64_t part = std::min(rack, nodes);
  while (nodes % part != 0) --part;
  intra.set_domain_nodes(part);
  const std::string unit = part == 1 ? " node" : " nodes";
  return " (assumed: " + std::to_string(nodes / part) + " NVLink domains of " +
         std::to_string(part) + unit + ", equal parts of " + std::to_string(rack) +
         "-node domains)";
}

// The GPU generation a run's text names, with the cluster preset it is built on
// (docs/validation.md); null when it names none. Longer names first: "gb200" also contains
// "b200".
const std::pair<const char*, const char*>* generation_entry(const std::string& gpu) {
  static const std::vector<std::pair<const char*, const char*>> kPresets = {
      {"gb300", "gb300-nvl72"}, {"gb200", "gb200-nvl72"}, {"b200", "hgx-b200"},
      {"h200", "hgx-h200"},     {"h800", "h800"},         {"h100", "dgx-h100"},
      {"a100", "dgx-a100"},     {"a800", "hgx-a800"},     {"mi325x", "mi325x"},
      {"mi300x", "mi300x"}};
  const std::string g = lowercase(gpu);
  for (const auto& entry : kPresets) {
    if (g.find(entry.first) != std::string::npos) return &entry;
  }
  return nullptr;
}

// The generation the GPU's text names ("h100"), "" when it names none of them.
std::string generation_of(const std::string& gpu) {
  const auto* entry = generation_entry(gpu);
  return entry != nullptr ? entry->first : "";
}

// The cluster preset a run's GPU is built on, by its generation; "" when no preset has it.
std::string cluster_preset_of(const std::string& gpu) {
  const auto* entry = generation_entry(gpu);
  return entry != nullptr ? entry->second : "";
}

// `hardware.cluster`: a cluster preset name, or a cluster file (base::names_a_file) relative to
// the runs file's folder. Loaded unsized; a preset or file that does
// not load skips the case naming the field.
pb::ClusterSpec stated_cluster(const CaseReader& hw, const std::string& runs_file,
                               std::string& label) {
  label = hw.text("cluster");
  std::string where = label;
  if (base::names_a_file(label) && std::filesystem::path(label).is_relative())
    where = (std::filesystem::path(runs_file).parent_path() / label).string();
  try {
    return topologies::load_cluster(where);
  } catch (const base::InputError& e) {
    hw.fail("cluster", e.what());
  }
}

// A stated cluster must hold the generation the GPU's text names, if it names one.
void check_stated_generation(const CaseReader& hw, const std::string& gpu,
                             const pb::ClusterSpec& cluster) {
  const std::string generation = generation_of(gpu);
  if (generation.empty()) return;
  for (const auto& type : cluster.node_types()) {
    if (lowercase(type.device()).find(generation) == std::string::npos) {
      hw.fail("cluster", "its node type " + type.name() + " holds " + type.device() +
                             " GPUs, but hardware.gpu names " + gpu);
    }
  }
}

// The whole number written just before position `at` of `g`, spaces between them skipped ("96"
// before the "gb" of "96 gb"); "" when there is none, or when it ends a decimal ("255.98 gb").
std::string number_before(const std::string& g, size_t at) {
  while (at > 0 && g[at - 1] == ' ') --at;
  size_t first = at;
  while (first > 0 && std::isdigit(static_cast<unsigned char>(g[first - 1]))) --first;
  if (first > 0 && g[first - 1] == '.') return {};
  return g.substr(first, at - first);
}

// The memory the GPU's text states ("H100 SXM 96GB HBM2e"), in whole GB; 0 when it states none.
// ("255.98 GB reported" is a measured total, not a part's size: not a whole number.)
int64_t stated_memory_gb(const std::string& gpu) {
  const std::string g = lowercase(gpu);
  for (size_t at = g.find("gb"); at != std::string::npos; at = g.find("gb", at + 2)) {
    if (const std::string n = number_before(g, at); !n.empty()) return std::stoll(n);
  }
  return 0;
}

// `type` runs on the variant `d` of its device, added to the cluster's devices once.
void use_device(const pb::DeviceSpec& d, pb::NodeType& type, pb::ClusterSpec& cluster) {
  type.set_device(d.name());
  for (const auto& have : cluster.devices()) {
    if (have.name() == d.name()) return;
  }
  *cluster.add_devices() = d;
}

// The preset's GPU where the case names a variant of it, its memory decides the verdict: A100
// 40GB; a part whose stated memory differs from the preset device's (an H100 of 94 or 96 GB)
// gets that memory, exposed in the same proportion as the preset's part (an H100 80GB exposes
// 81,559 of 81,920 MiB). Its other figures stay the preset part's (docs/validation.md).
void set_device_variant(const std::string& gpu, pb::ClusterSpec& cluster) {
  const std::string g = lowercase(gpu);
  if (g.find("a100") != std::string::npos && g.find("40gb") != std::string::npos) {
    for (auto& type : *cluster.mutable_node_types()) type.set_device("A100-SXM-40GB");
    return;
  }
  const int64_t stated = stated_memory_gb(gpu);
  if (stated <= 0) return;
  for (auto& type : *cluster.mutable_node_types()) {
    pb::DeviceSpec d = topologies::find_device(cluster, type.device());
    const double nominal_gib = std::round(d.memory_bytes() / (1 << 30));
    if (nominal_gib <= 0 || static_cast<double>(stated) == nominal_gib) continue;
    d.set_memory_bytes(d.memory_bytes() * static_cast<double>(stated) / nominal_gib);
    d.set_name(d.name() + "-" + std::to_string(stated) + "GB");
    use_device(d, type, cluster);
  }
}

// The HBM bandwidth the source states for its part (`hardware.memory_bandwidth`, "2.4 TB/s"):
// torchtitan's Grand Teton H100s carry HBM2e at 2.4 TB/s, not the 3.35 TB/s of the HBM3 part
// the preset holds, and every memory-bound kernel (norms, activations, RoPE, residual adds, FSDP's
// copies, the optimizer) runs at the part's bandwidth. Absent: the preset part's.
void set_stated_bandwidth(const CaseReader& hw, pb::ClusterSpec& cluster) {
  if (!hw.has("memory_bandwidth")) return;
  double bandwidth = 0;
  try {
    bandwidth = base::units::parse(hw.text("memory_bandwidth"), base::units::Unit::kBytesPerSecond);
  } catch (const std::invalid_argument& e) {
    hw.fail("memory_bandwidth", e.what());
  }
  if (!(bandwidth > 0)) hw.fail("memory_bandwidth", "expected a bandwidth > 0 (\"2.4 TB/s\")");
  for (auto& type : *cluster.mutable_node_types()) {
    pb::DeviceSpec d = topologies::find_device(cluster, type.device());
    if (d.memory_bandwidth_bytes_per_s() == bandwidth) continue;
    d.set_memory_bandwidth_bytes_per_s(bandwidth);
    d.set_name(d.name() + "-" + base::units::number(bandwidth / 1e12) + "TBps");
    use_device(d, type, cluster);
  }
}

pb::Sharding sharding_of(const std::string& text) {
  // HSDP first: "hybrid shard" is FSDP inside a group, and its text often names FSDP too.
  if (contains(text, "hsdp") || contains(text, "hybrid shard") || contains(text, "hybrid_shard"))
    return pb::SHARDING_HSDP;
  if (contains(text, "distributed optimizer") || contains(text, "zero-1") ||
      contains(text, "zero1"))
    return pb::SHARDING_ZERO1;
  if (contains(text, "zero-2") || contains(text, "zero2")) return pb::SHARDING_ZERO2;
  if (contains(text, "fsdp")) return pb::SHARDING_FSDP;
  if (contains(text, "zero-3") || contains(text, "zero3")) return pb::SHARDING_ZERO3;
  return pb::SHARDING_NONE;
}

std::string summary(const pb::Plan& p) {
  std::ostringstream o;
  const auto& q = p.parallel();
  o << "tp" << q.tp() << " pp" << q.pp() << " dp" << q.dp();
  if (q.cp() > 1) o << " cp" << q.cp();
  if (q.ep() > 1) o << " ep" << q.ep();
  if (q.vp() > 1) o << " vp" << q.vp();
  if (q.has_etp()) o << " etp" << q.etp();
  if (q.sequence_parallel()) o << " sp";
  o << " mbs" << p.micro_batch_size();
  if (p.moe_a2a_overlap()) o << " a2a-overlap";
  if (p.attention_kernel() != pb::ATTENTION_KERNEL_FLASH &&
      p.attention_kernel() != pb::ATTENTION_KERNEL_UNSPECIFIED)
    o << " attn="
      << enum_value_name(
             *pb::AttentionKernel_descriptor()->FindValueByNumber(p.attention_kernel()));
  return o.str();
}

// The profile of the release the case's `framework` names (run_framework.hpp) fills what the case
// does not state: of the fields a profile sets, a case states only its attention kernel. The
// attention kernel neither gives is dated by the framework (published_run_fields.cpp).
void apply_profile(const CaseReader& r, bool framework_profiles, PublishedRun& out) {
  if (framework_profiles) out.profile = detail::profile_named_by(out.framework);
  const bool states_kernel = r.has("attention_kernel");
  if (states_kernel) out.plan.set_attention_kernel(detail::attention_kernel_of(r));
  if (!out.profile.empty()) {
    const pb::FrameworkProfile& profile =
        plan::find_framework_profile(out.profile, r.path(), "framework");
    out.profile_fields = plan::apply_framework_profile(
        out.plan, profile, out.profile,
        [&](const std::string& field) { return field == "attention_kernel" && states_kernel; });
  }
  if (out.plan.attention_kernel() == pb::ATTENTION_KERNEL_UNSPECIFIED)
    out.plan.set_attention_kernel(detail::attention_kernel_of(r));
}

// Bounds of a case's measured numbers: far beyond any published run, so only a damaged value
// (1e308, a unit slip of many orders) is refused.
constexpr double kMaxStep_s = 86400;
constexpr const char* kStepWhy = "a day; published training steps take seconds";
constexpr double kMaxTokensPerGpu = 1e8;
constexpr const char* kTokensWhy = "1,000x the fastest published tokens/s per GPU";
constexpr double kMaxMemoryGib = 1e5;
constexpr const char* kMemoryWhy = "beyond any device's memory";

// The run's numerics: its precision with the fp8 recipe's fields, and Adam's moments' dtype.
void read_numerics(const CaseReader& r, pb::Plan& plan) {
  plan.mutable_job()->set_precision(detail::precision_of(r));
  if (plan.job().precision() == pb::PRECISION_FP8) {
    plan.mutable_job()->set_fp8_recipe(detail::fp8_recipe_of(r));
    plan.mutable_job()->set_fp8_attention(r.flag_or("fp8_attention", false));
    plan.mutable_job()->set_fp8_param_gather(r.flag_or("fp8_param_gather", false));
  }
  if (r.has("optimizer_state_dtype"))
    plan.set_optimizer_state_dtype(detail::optimizer_state_dtype_of(r));
}

// A power limit the GPU's text states ("500 W power limit", "power limited B200"), which nothing
// models: the note the case's cluster label carries, "" when the text states none. The part is
// priced at its rated power (`tdp_watts`), so such a run is predicted too fast by what the
// limit costs (docs/validation.md).
std::string power_limit_note(const std::string& gpu, const pb::ClusterSpec& cluster) {
  const std::string g = lowercase(gpu);
  const size_t at = std::min({g.find("power limit"), g.find("power-limit"), g.find("power cap")});
  if (at == std::string::npos) return {};
  // "500 W power limit": the number just before the watts, if the text gives one.
  std::string stated = "a stated power limit";
  size_t watts = at;
  while (watts > 0 && g[watts - 1] == ' ') --watts;
  if (watts > 0 && g[watts - 1] == 'w') {
    if (const std::string n = number_before(g, watts - 1); !n.empty())
      stated = "the stated " + n + " W power limit";
  }
  const pb::DeviceSpec d = topologies::find_device(cluster, cluster.node_types(0).device());
  return stated + " not modelled: priced at the part's " +
         (d.tdp_watts() > 0 ? "rated " + base::units::number(d.tdp_watts()) + " W"
                            : std::string("full clocks"));
}

// What a case's `hardware` says the run ran on: `out`'s gpu, cluster (sized to the run) and
// cluster label, and the preset (or stated cluster) and node count for its plan. A case the
// reader cannot place gets `out.skipped` and an empty result.
struct RunCluster {
  std::string preset;
  int64_t nodes = 0;
};
RunCluster read_cluster(const CaseReader& hw, const std::string& file, PublishedRun& out) {
  out.gpu = hw.text("gpu");
  const bool states_cluster = hw.has("cluster");
  std::string preset = cluster_preset_of(out.gpu);
  if (!states_cluster && contains(out.gpu, "pcie")) {
    // Every preset a generation maps to has SXM/OAM parts on NVLink or xGMI: a PCIe card there
    // would get the wrong device and links.
    out.skipped = file + ": " + hw.path() + ".gpu: got '" + out.gpu +
                  "', a PCIe part, which no cluster preset has: state hardware.cluster (a "
                  "cluster file with its devices and links)";
    return {};
  }
  if (preset.empty() && !states_cluster) {
    out.skipped = file + ": " + hw.path() + ".gpu: got '" + out.gpu +
                  "', which names no GPU a cluster preset has (A100, A800, H100, H200, H800, "
                  "B200, GB200, GB300, MI300X, MI325X); hardware.cluster can name the cluster";
    return {};
  }
  if (states_cluster) {
    out.cluster = stated_cluster(hw, file, preset);
    check_stated_generation(hw, out.gpu, out.cluster);
  }
  const int64_t gpus = hw.integer("num_gpus");
  const int64_t per_node = hw.integer("gpus_per_node");
  const int64_t nodes = (gpus + per_node - 1) / per_node;
  std::string domains;
  try {
    if (!states_cluster) out.cluster = topologies::load_cluster(preset);
    domains = split_into_domains(out.cluster, nodes);
    topologies::resize(out.cluster, nodes);
    topologies::validate_cluster(out.cluster, SourceMap());
  } catch (const base::InputError& e) {
    // The run's GPU count cannot size the preset: the case is skipped naming its own field, the
    // preset's reason after it.
    throw base::InputError(file, 0, hw.path() + ".num_gpus",
                           std::to_string(gpus) + " GPUs, " + std::to_string(per_node) +
                               " per node, do not size " + preset + ": " + e.what());
  }
  // A stated cluster's devices are the run's as the file or preset gives them; the GPU's text
  // only picks a variant of a generation's preset.
  if (!states_cluster) set_device_variant(out.gpu, out.cluster);
  set_stated_bandwidth(hw, out.cluster);
  out.cluster_label =
      preset + " x" + std::to_string(topologies::total_nodes(out.cluster)) + domains;
  if (const std::string note = power_limit_note(out.gpu, out.cluster); !note.empty())
    out.cluster_label += " (" + note + ")";
  return {preset, nodes};
}

// One case as the simulator sees it: model, cluster sized to the run, the published plan. The
// rules are the same for every case (see docs/validation.md).
PublishedRun read_run(const json& c, const std::string& file, const std::string& path,
                      bool framework_profiles) {
  const CaseReader r(c, file, path);
  PublishedRun out;
  out.id = r.text("id");
  out.framework = r.text("framework");
  if (r.has("source") && r.at("source").is_object()) out.source_url = r.child("source").text("url");
  // Every measured number is checked when present, read or not: a damaged one means a damaged
  // case (bounds and reasons: docs/formats.md#published-runs).
  const CaseReader measured = r.child("measured");
  out.measured_s = measured.measure_or("iter_time_s", kMaxStep_s, kStepWhy);
  measured.measure_or("tokens_per_s_per_gpu", kMaxTokensPerGpu, kTokensWhy);
  measured.measure_or("peak_memory_gib", kMaxMemoryGib, kMemoryWhy);
  if (r.has("derived")) {
    const double derived = r.child("derived").measure_or("iter_time_s", kMaxStep_s, kStepWhy);
    if (out.measured_s == 0) out.measured_s = derived;
  }
  const CaseReader hw = r.child("hardware");
  const RunCluster where = read_cluster(hw, file, out);
  if (!out.skipped.empty()) return out;
  const std::string& preset = where.preset;
  const int64_t nodes = where.nodes;
  out.model = detail::model_of(r, out.model_label);
  const CaseReader par = r.child("parallel");
  const CaseReader batch = r.child("batch");
  batch.integer_or("grad_accum", 1);  // not read (global / micro batch say it), but checked
  pb::Plan& plan = out.plan;
  plan.set_model(out.model.name());
  plan.set_cluster(preset);
  plan.set_nodes(nodes);
  plan.mutable_job()->set_global_batch_size(batch.integer("global_batch_seqs"));
  plan.mutable_job()->set_seq_len(detail::seq_len_of(r));
  read_numerics(r, plan);
  auto* q = plan.mutable_parallel();
  q->set_tp(par.integer_or("tp", 1));
  q->set_pp(par.integer_or("pp", 1));
  q->set_dp(par.integer_or("dp", 1));
  q->set_cp(par.integer_or("cp", 1));
  q->set_ep(par.integer_or("ep", 1));
  q->set_vp(par.integer_or("vp", 1));
  // Megatron's --expert-tensor-parallel-size: stated, the experts fold over tp x cp x dp
  // (Plan.parallel.etp); absent, the experts keep the dense tp and ep comes out of dp x cp.
  if (par.has("etp")) q->set_etp(par.integer("etp"));
  if (par.has("moe_dispatcher")) plan.set_moe_dispatcher(detail::moe_dispatcher_of(par));
  detail::read_pipeline_layout(par, out.model.num_layers(), plan);
  if (par.at("sequence_parallel").is_boolean())
    q->set_sequence_parallel(par.at("sequence_parallel").get<bool>());
  // Megatron-core's --overlap-moe-expert-parallel-comm ("+1f1b overlap"): only when stated; a
  // case that says nothing ran without it (the flag is off by default).
  plan.set_moe_a2a_overlap(par.flag_or("moe_a2a_overlap", false));
  plan.set_sharding(sharding_of(par.text("zero_fsdp")));
  // HSDP's shard group sets what is gathered inside a group and reduced across groups: a case
  // states it, or is skipped; never a default group (docs/formats.md#published-runs).
  if (plan.sharding() == pb::SHARDING_HSDP) {
    if (!par.has("shard_group")) {
      par.fail("shard_group", "missing: zero_fsdp '" + par.text("zero_fsdp") +
                                  "' names HSDP, which shards each parameter over a group of "
                                  "ranks; give the group's size");
    }
    plan.set_shard_group_size(par.integer("shard_group"));
  } else if (par.has("shard_group")) {
    par.fail("shard_group", "given, but zero_fsdp '" + par.text("zero_fsdp") +
                                "' names no HSDP (hsdp, hybrid shard)");
  }
  detail::read_recompute(r, plan, out.assumed);
  plan.set_micro_batch_size(batch.integer("micro_batch"));
  // Without a profile's word, a run overlaps the data-parallel reduction with the backward
  // (PyTorch DDP buckets, Megatron/NeMo's overlap flags).
  plan.set_overlap_grad_reduce(true);
  plan.set_overlap_param_gather(true);
  apply_profile(r, framework_profiles, out);
  return out;
}

// A case that cannot be read is skipped with the file, field and reason; the others still run.
PublishedRun published_run(const json& c, const std::string& file, const std::string& path,
                           bool framework_profiles) {
  try {
    return read_run(c, file, path, framework_profiles);
  } catch (const base::InputError& e) {
    PublishedRun out;
    if (c.is_object() && c.contains("id") && c["id"].is_string())
      out.id = c["id"].get<std::string>();
    out.skipped = e.what();
    return out;
  }
}

}  // namespace

RunCase simulate_run(const PublishedRun& run, sim::EngineKind engine,
                     const pb::CalibrationProfile* calibration) {
  RunCase out;
  out.id = run.id;
  out.measured_s = run.measured_s;
  if (!run.skipped.empty()) {
    out.skipped = run.skipped;
    return out;
  }
  if (!(out.measured_s > 0)) {
    out.skipped = "no measured or derived step time";
    return out;
  }
  out.model = run.model_label;
  out.cluster = run.cluster_label;
  out.plan = summary(run.plan) + run.assumed;
  out.profile = run.profile_fields;
  try {
    const plan::ResolvedPlan resolved = plan::resolve_plan(run.plan, run.model, run.cluster);
    const topologies::Topology topology(run.cluster);
    const sim::CostModels costs(topology, resolved.precision.dtype, calibration);
    sim::DesOptions des;
    des.timeline = false;
    const sim::SimOutput sim = sim::simulate(resolved, costs, engine, des);
    out.predicted_s = sim.result.step_time_s();
    out.error = (out.predicted_s - out.measured_s) / out.measured_s;
    // The rank closest to (or furthest past) its device's memory: a run that trained must fit.
    for (const auto& m : sim.result.memory()) {
      if (out.memory_capacity_bytes == 0 ||
          m.peak_bytes() / m.capacity_bytes() > out.peak_memory_bytes / out.memory_capacity_bytes) {
        out.peak_memory_bytes = m.peak_bytes();
        out.memory_capacity_bytes = m.capacity_bytes();
      }
    }
  } catch (const base::InputError& e) {
    out.skipped = std::string("plan rejected: ") + e.what();
  }
  return out;
}

namespace {

// The cases of a published-runs file; InputError for a file that is not one.
json read_cases(const std::filesystem::path& file) {
  const std::string text = base::read_input_file(file, "a JSON file");
  json root = detail::parse_validation_json(text, file.string());
  if (!root.is_object() || !root.contains("cases") || !root["cases"].is_array()) {
    throw base::InputError(file.string(), 0, "cases", "expected a list of cases");
  }
  if (root["cases"].empty())
    throw base::InputError(file.string(), 0, "cases",
                           "got an empty list, expected at least one case");
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
  const double median =
      v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return {median, rank(0.9)};
}

RunValidation validate_runs(const std::filesystem::path& file, sim::EngineKind engine,
                            const pb::CalibrationProfile* calibration, bool framework_profiles) {
  const json cases = read_cases(file);
  RunValidation v;
  std::vector<double> errors;
  for (size_t i = 0; i < cases.size(); ++i) {
    RunCase c = simulate_run(published_run(cases[i], file.string(),
                                           "cases[" + std::to_string(i) + "]", framework_profiles),
                             engine, calibration);
    if (c.skipped.empty()) errors.push_back(std::fabs(c.error)), ++v.simulated;
    if (!c.skipped.empty()) ++v.skipped;
    if (c.peak_memory_bytes > c.memory_capacity_bytes) ++v.out_of_memory;
    v.cases.push_back(std::move(c));
  }
  std::tie(v.median_abs_error, v.p90_abs_error) = median_p90(errors);
  return v;
}

std::vector<PublishedRun> published_runs(const std::filesystem::path& file,
                                         bool framework_profiles) {
  const json cases = read_cases(file);
  std::vector<PublishedRun> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    out.push_back(published_run(cases[i], file.string(), "cases[" + std::to_string(i) + "]",
                                framework_profiles));
  }
  return out;
}

}  // namespace orrery::validation
