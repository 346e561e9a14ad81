#include "orrery/validation/run_holdout.hpp"

#include <cmath>
#include <map>

#include "orrery/base/error.hpp"
#include "orrery/sim/compute_defaults.hpp"
#include "orrery/topologies/attention_kernels.hpp"
#include "orrery/topologies/device_db.hpp"
#include "published_run_fields.hpp"

namespace orrery::validation {
namespace {

std::string framework_family(const std::string& text) {
  // The name before its version, commit or date: "Megatron-LM @6985e58", "NeMo 24.09".
  const std::string t = detail::lowercase(text);
  const size_t end = t.find_first_of(" @(/,;");
  return t.substr(0, end);
}

std::string gpu_family(const std::string& text) {
  const std::string t = detail::lowercase(text);
  // Longer names first: "gb200" also contains "b200", "mi325x" is not "mi300x".
  for (const char* g : {"gb300", "gb200", "b300", "b200", "h200", "h100", "h800", "h20", "a100",
                        "a800", "v100", "mi355x", "mi325x", "mi300x", "mi250x", "l40s"}) {
    if (t.find(g) != std::string::npos) return g;
  }
  return framework_family(t);  // the first word
}

std::string source_family(const std::string& url) {
  std::string t = url;
  if (const size_t scheme = t.find("://"); scheme != std::string::npos) t = t.substr(scheme + 3);
  // Host and the first two path parts: one paper, one repository.
  size_t cut = 0;
  for (int slashes = 0; cut < t.size(); ++cut) {
    if (t[cut] == '/' && ++slashes == 3) break;
  }
  t = t.substr(0, cut);
  while (!t.empty() && t.back() == '/') t.pop_back();
  return t;
}

RunCase predict(const PublishedRun& run, sim::EngineKind engine, double scale) {
  const pb::CalibrationProfile profile =
      kernel_scale_profile(run.cluster, scale, run.plan.attention_kernel());
  return simulate_run(run, engine, &profile);
}

bool usable(const PublishedRun& run) { return run.skipped.empty() && run.measured_s > 0; }

// Sum of squared log ratios predicted/measured over `runs` at `scale` (skipped cases add nothing).
double misfit(const std::vector<const PublishedRun*>& runs, sim::EngineKind engine, double scale) {
  double sum = 0;
  for (const PublishedRun* r : runs) {
    const RunCase c = predict(*r, engine, scale);
    if (!c.skipped.empty()) continue;
    const double l = std::log(c.predicted_s / c.measured_s);
    sum += l * l;
  }
  return sum;
}

// Golden-section search of the factor in log space over [kMinKernelScale, kMaxKernelScale]: the
// misfit of a step time in one factor is smooth and, over this range, has one minimum.
double fit_scale(const std::vector<const PublishedRun*>& runs, sim::EngineKind engine) {
  constexpr double kPhi = 0.6180339887498949;
  double a = std::log(kMinKernelScale), b = std::log(kMaxKernelScale);
  double x1 = b - kPhi * (b - a), x2 = a + kPhi * (b - a);
  double f1 = misfit(runs, engine, std::exp(x1)), f2 = misfit(runs, engine, std::exp(x2));
  for (int i = 0; i < 18; ++i) {  // the interval shrinks to 1e-4 of its log width
    if (f1 <= f2) {
      b = x2, x2 = x1, f2 = f1;
      x1 = b - kPhi * (b - a);
      f1 = misfit(runs, engine, std::exp(x1));
    } else {
      a = x1, x1 = x2, f1 = f2;
      x2 = a + kPhi * (b - a);
      f2 = misfit(runs, engine, std::exp(x2));
    }
  }
  return std::exp(f1 <= f2 ? x1 : x2);
}

std::vector<double> abs_errors(const std::vector<RunCase>& cases) {
  std::vector<double> out;
  for (const auto& c : cases) {
    if (c.skipped.empty()) out.push_back(std::fabs(c.error));
  }
  return out;
}

}  // namespace

pb::CalibrationProfile kernel_scale_profile(const pb::ClusterSpec& cluster, double scale,
                                            pb::AttentionKernel kernel) {
  pb::CalibrationProfile p;
  p.set_name("holdout kernel scale");
  for (const auto& type : cluster.node_types()) {
    const pb::DeviceSpec& device = topologies::find_device(cluster, type.device());
    for (const pb::OpClass op : {pb::OP_CLASS_GEMM, pb::OP_CLASS_ATTENTION}) {
      pb::ComputeCurve c = sim::detail::default_curve(device, op);
      c.set_max_efficiency(c.max_efficiency() * scale);
      *p.add_compute() = c;
    }
    // A named kernel generation has its own published efficiency per pass; a class curve in a
    // profile replaces it (a calibrated curve says what ran), so the factor scales the kernel's
    // own curves, given as the attention core's curves per pass, which take precedence over the
    // class's. A device with no figure for the kernel keeps the class curve (plan resolution
    // refuses the plan anyway).
    if (!topologies::attention_kernel_efficiency(device, kernel)) continue;
    for (const pb::Phase pass : {pb::PHASE_FORWARD, pb::PHASE_BACKWARD}) {
      pb::ComputeCurve c = sim::detail::default_curve(device, pb::OP_CLASS_ATTENTION, kernel, pass);
      c.set_max_efficiency(c.max_efficiency() * scale);
      c.set_op("attn.core");  // the fused attention op (models/src/layer_ops_attention.cpp)
      c.set_phase(pass);
      *p.add_compute() = c;
    }
  }
  return p;
}

HoldoutKey parse_holdout_key(const std::string& text, const std::string& flag) {
  if (text == "framework") return HoldoutKey::kFramework;
  if (text == "gpu") return HoldoutKey::kGpu;
  if (text == "source") return HoldoutKey::kSource;
  throw base::InputError("", 0, flag, "got '" + text + "', expected framework, gpu or source");
}

const char* to_string(HoldoutKey key) {
  switch (key) {
    case HoldoutKey::kFramework:
      return "framework";
    case HoldoutKey::kGpu:
      return "gpu";
    case HoldoutKey::kSource:
      return "source";
  }
  return "?";
}

std::string family_of(const PublishedRun& run, HoldoutKey key) {
  std::string f;
  switch (key) {
    case HoldoutKey::kFramework:
      f = framework_family(run.framework);
      break;
    case HoldoutKey::kGpu:
      f = gpu_family(run.gpu);
      break;
    case HoldoutKey::kSource:
      f = source_family(run.source_url);
      break;
  }
  return f.empty() ? "(unstated)" : f;
}

namespace {

struct Families {
  std::vector<std::string> names;                      // order of first appearance
  std::map<std::string, std::vector<size_t>> members;  // indices into the runs
};

Families group(const std::vector<PublishedRun>& runs, HoldoutKey key) {
  Families f;
  for (size_t i = 0; i < runs.size(); ++i) {
    // A case that cannot be read has no trustworthy family; it is reported, never fitted.
    const std::string name = runs[i].skipped.empty() ? family_of(runs[i], key) : "(unread)";
    if (!f.members.count(name)) f.names.push_back(name);
    f.members[name].push_back(i);
  }
  return f;
}

// The usable runs outside `left_out` ("" leaves none out).
std::vector<const PublishedRun*> fit_set(const std::vector<PublishedRun>& runs, const Families& f,
                                         const std::string& left_out) {
  std::vector<const PublishedRun*> out;
  for (const auto& name : f.names) {
    if (name == left_out || name == "(unread)") continue;
    for (size_t i : f.members.at(name)) {
      if (usable(runs[i])) out.push_back(&runs[i]);
    }
  }
  return out;
}

void check_families(const std::filesystem::path& file, const std::vector<PublishedRun>& runs,
                    const Families& f, HoldoutKey key) {
  int with_cases = 0;
  for (const auto& name : f.names) {
    bool any = false;
    for (size_t i : f.members.at(name)) any = any || usable(runs[i]);
    with_cases += any && name != "(unread)";
  }
  if (with_cases < 2) {
    throw base::InputError(file.string(), 0, "",
                           std::string("--holdout-by ") + to_string(key) +
                               ": its readable cases form " + std::to_string(with_cases) +
                               " family; leaving one out needs at least two");
  }
}

HoldoutFamily hold_out(const std::vector<PublishedRun>& runs, const Families& f,
                       const std::string& name, sim::EngineKind engine) {
  HoldoutFamily h;
  h.family = name;
  const auto fit = fit_set(runs, f, name);
  h.fit_cases = static_cast<int>(fit.size());
  h.kernel_scale = fit_scale(fit, engine);
  for (size_t i : f.members.at(name)) {
    const PublishedRun& r = runs[i];
    RunCase skipped;
    skipped.id = r.id;
    skipped.skipped = r.skipped.empty() ? "no measured or derived step time" : r.skipped;
    h.cases.push_back(usable(r) ? predict(r, engine, h.kernel_scale) : skipped);
    h.shipped.push_back(usable(r) ? simulate_run(r, engine, nullptr) : skipped);
  }
  std::tie(h.median_abs_error, h.p90_abs_error) = median_p90(abs_errors(h.cases));
  std::tie(h.shipped_median_abs_error, h.shipped_p90_abs_error) = median_p90(abs_errors(h.shipped));
  return h;
}

}  // namespace

RunHoldout holdout_runs(const std::filesystem::path& file, sim::EngineKind engine, HoldoutKey key,
                        const HoldoutProgress& progress, bool framework_profiles) {
  const std::vector<PublishedRun> runs = published_runs(file, framework_profiles);
  const Families f = group(runs, key);
  check_families(file, runs, f, key);
  RunHoldout out;
  out.key = key;
  std::vector<std::string> names;
  for (const auto& name : f.names) {
    if (name != "(unread)") names.push_back(name);
  }
  if (f.members.count("(unread)")) {
    for (size_t i : f.members.at("(unread)")) {
      RunCase c;
      c.id = runs[i].id;
      c.skipped = runs[i].skipped;
      out.unread.push_back(c);
      ++out.skipped;
    }
  }
  const int fits = static_cast<int>(names.size()) + 1;
  std::vector<double> held, shipped;
  for (size_t k = 0; k < names.size(); ++k) {
    if (progress) progress(names[k], static_cast<int>(k), fits);
    HoldoutFamily h = hold_out(runs, f, names[k], engine);
    for (const auto& c : h.cases) (c.skipped.empty() ? out.simulated : out.skipped) += 1;
    for (double e : abs_errors(h.cases)) held.push_back(e);
    for (double e : abs_errors(h.shipped)) shipped.push_back(e);
    out.families.push_back(std::move(h));
  }
  std::tie(out.median_abs_error, out.p90_abs_error) = median_p90(held);
  std::tie(out.shipped_median_abs_error, out.shipped_p90_abs_error) = median_p90(shipped);
  if (progress) progress("", fits - 1, fits);
  const auto all = fit_set(runs, f, "");
  out.in_sample_scale = fit_scale(all, engine);
  std::vector<double> in_sample;
  for (const PublishedRun* r : all) {
    const RunCase c = predict(*r, engine, out.in_sample_scale);
    if (c.skipped.empty()) in_sample.push_back(std::fabs(c.error));
  }
  std::tie(out.in_sample_median_abs_error, out.in_sample_p90_abs_error) = median_p90(in_sample);
  return out;
}

}  // namespace orrery::validation
