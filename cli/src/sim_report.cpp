#include "sim_report.hpp"
#include "text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "csv.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "orrery/plan/fp8.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/traces/spec_io.hpp"
#include "table.hpp"

namespace orrery::cli {
namespace {

std::string enum_name(const google::protobuf::EnumDescriptor* e, int v) {
  return enum_value_name(*e->FindValueByNumber(v));
}

}  // namespace

std::string plan_summary(const plan::ResolvedPlan& r) {
  const auto& d = r.degrees;
  std::string s =
      "tp" + std::to_string(d.tp) + " pp" + std::to_string(d.pp) + " dp" + std::to_string(d.dp);
  if (!r.uniform_stages()) {
    // Stages with their own degrees, stage by stage: "tp4|8 pp2 dp2|1" (mbs stays the
    // plan's: a pipeline micro-batch is mbs x parallel.dp sequences, split over each stage's dp).
    std::string tps, dps;
    for (int64_t p = 0; p < d.pp; ++p) {
      tps += (p ? "|" : "") + std::to_string(r.stage(p).tp);
      dps += (p ? "|" : "") + std::to_string(r.stage(p).dp);
    }
    s = "tp" + tps + " pp" + std::to_string(d.pp) + " dp" + dps;
  }
  if (d.cp > 1) s += " cp" + std::to_string(d.cp);
  if (d.ep > 1) s += " ep" + std::to_string(d.ep);
  if (d.folded()) s += " etp" + std::to_string(d.etp);
  if (d.vp > 1) s += " vp" + std::to_string(d.vp);
  if (r.sequence_parallel()) s += " sp";
  s += " mbs" + std::to_string(r.micro_batch_size) + " x" + std::to_string(r.num_micro_batches);
  if (d.pp > 1) s += " " + enum_name(pb::PipelineSchedule_descriptor(), r.schedule());
  if (r.sharding() != pb::SHARDING_NONE)
    s += " " + enum_name(pb::Sharding_descriptor(), r.sharding());
  if (r.recompute() != pb::RECOMPUTE_NONE)
    s += " recompute=" + enum_name(pb::Recompute_descriptor(), r.recompute());
  if (r.plan.has_recompute_every()) s += "/every" + std::to_string(r.plan.recompute_every());
  for (int i = 0; i < r.plan.recompute_modules_size(); ++i) {
    s += (i == 0 ? "(" : ",") +
         enum_name(pb::RecomputeModule_descriptor(), r.plan.recompute_modules(i)) +
         (i + 1 == r.plan.recompute_modules_size() ? ")" : "");
  }
  if (r.plan.attention_kernel() != pb::ATTENTION_KERNEL_FLASH)
    s += " attention=" + enum_name(pb::AttentionKernel_descriptor(), r.plan.attention_kernel());
  return s;
}

const pb::RankMemory* tightest_rank(const pb::SimResult& r) {
  const pb::RankMemory* worst = nullptr;
  for (const auto& m : r.memory()) {
    if (worst == nullptr ||
        m.peak_bytes() / m.capacity_bytes() > worst->peak_bytes() / worst->capacity_bytes())
      worst = &m;
  }
  return worst;
}

std::string out_of_memory(const pb::SimResult& r) {
  const pb::RankMemory* worst = tightest_rank(r);
  if (worst == nullptr || !worst->oom()) return "";
  return "rank " + std::to_string(worst->rank()) + " peaks at " +
         base::units::bytes(worst->peak_bytes()) + " of " +
         base::units::bytes(worst->capacity_bytes());
}

// The precision, and for fp8 its recipe, saying when the recipe is the default rather than the
// plan's (plan/fp8.hpp: never a silent choice).
std::string precision_summary(const plan::ResolvedPlan& plan) {
  const auto& p = plan.precision;
  if (p.dtype != plan::kFp8Dtype) return p.dtype;
  std::string s = p.dtype + " (" + plan::fp8_recipe_name(p.fp8_recipe) + " scaling";
  if (p.fp8_recipe_defaulted) s += ", Transformer Engine's default here: set job.fp8_recipe";
  s += ")";
  if (p.fp8_attention) s += ", fp8 attention";
  if (p.fp8_param_gather) s += ", fp8 parameter gather";
  return s;
}

std::string render_result(const plan::ResolvedPlan& plan, const pb::SimResult& r) {
  const double step = r.step_time_s();
  std::string out;
  // First, before any figure: a step time of a plan that cannot run is not a prediction.
  if (const std::string oom = out_of_memory(r); !oom.empty())
    out += "OUT OF MEMORY: " + oom + "; the figures below assume it fit\n\n";
  out += render_fields({
      {"model", plan.model.name()},
      {"cluster", plan.cluster.name() + ", " +
                      std::to_string(topologies::total_nodes(plan.cluster)) + " nodes, " +
                      std::to_string(plan.world_size()) + " devices"},
      {"job", "global batch " + std::to_string(plan.plan.job().global_batch_size()) + " x seq " +
                  std::to_string(plan.seq_len) + ", " + precision_summary(plan)},
      {"plan", plan_summary(plan)},
      {"engine", r.engine()},
      {"step time", base::units::seconds(step)},
      {"tokens/s", base::units::number(std::round(r.tokens_per_s()))},
      {"MFU / HFU", percent(r.mfu()) + " / " + percent(r.hfu())},
  });
  Table breakdown({"where the step goes", "time", "share"});
  const auto& b = r.breakdown();
  auto row = [&](const std::string& name, double s) {
    if (s <= 0) return;
    breakdown.add_row({name, base::units::seconds(s), percent(step > 0 ? s / step : 0)});
  };
  row("compute", b.compute_s());
  row("  of which recomputation", b.recompute_s());
  for (const auto& c : b.exposed_comm()) row("exposed " + c.name() + " communication", c.seconds());
  row("pipeline bubble", b.pipeline_bubble_s());
  row("optimizer", b.optimizer_s());
  row("dispatch between ops (calibrated)", b.dispatch_s());
  out += "\n" + breakdown.render();
  Table memory(
      {"rank", "params", "grads", "optimizer", "activations", "other", "peak", "capacity", "fits"});
  for (const auto& m : r.memory()) {
    memory.add_row({std::to_string(m.rank()), base::units::bytes(m.parameters_bytes()),
                    base::units::bytes(m.gradients_bytes()),
                    base::units::bytes(m.optimizer_bytes()),
                    base::units::bytes(m.activations_bytes()),
                    base::units::bytes(m.comm_buffers_bytes() + m.allocator_overhead_bytes()),
                    base::units::bytes(m.peak_bytes()), base::units::bytes(m.capacity_bytes()),
                    m.oom() ? "OOM" : "yes"});
  }
  out += "\nmemory per pipeline rank (all ranks of a stage hold the same)\n" + memory.render();
  return out;
}

namespace {

// The exposed communication kinds both engines report, in the CSV's column order.
constexpr const char* kCommKinds[] = {"tp", "cp", "ep", "pp", "dp"};

}  // namespace

std::vector<std::string> sim_csv_header() {
  std::vector<std::string> h = {"model",        "cluster",   "nodes", "devices",   "global_batch",
                                "seq_len",      "precision", "plan",  "engine",    "step_time_s",
                                "tokens_per_s", "mfu",       "hfu",   "compute_s", "recompute_s"};
  for (const char* kind : kCommKinds) h.push_back(std::string("exposed_") + kind + "_s");
  for (const char* name : {"pipeline_bubble_s", "optimizer_s", "dispatch_s", "peak_rank",
                           "peak_bytes", "capacity_bytes", "oom"})
    h.emplace_back(name);
  return h;
}

std::vector<std::string> sim_csv_row(const plan::ResolvedPlan& plan, const pb::SimResult& r) {
  const auto& b = r.breakdown();
  std::vector<std::string> row = {plan.model.name(),
                                  plan.cluster.name(),
                                  csv_number(topologies::total_nodes(plan.cluster)),
                                  csv_number(plan.world_size()),
                                  csv_number(plan.plan.job().global_batch_size()),
                                  csv_number(plan.seq_len),
                                  plan.precision.dtype,
                                  plan_summary(plan),
                                  r.engine(),
                                  csv_number(r.step_time_s()),
                                  csv_number(r.tokens_per_s()),
                                  csv_number(r.mfu()),
                                  csv_number(r.hfu()),
                                  csv_number(b.compute_s()),
                                  csv_number(b.recompute_s())};
  for (const char* kind : kCommKinds) {
    double s = 0;
    for (const auto& c : b.exposed_comm()) s += c.name() == kind ? c.seconds() : 0;
    row.push_back(csv_number(s));
  }
  for (const auto& c : b.exposed_comm()) {
    ORRERY_CHECK(
        std::find(std::begin(kCommKinds), std::end(kCommKinds), c.name()) != std::end(kCommKinds),
        "exposed communication kind '" + c.name() + "' has no CSV column");
  }
  const pb::RankMemory* m = tightest_rank(r);
  const pb::RankMemory none;
  if (m == nullptr) m = &none;
  for (double s : {b.pipeline_bubble_s(), b.optimizer_s(), b.dispatch_s()})
    row.push_back(csv_number(s));
  row.push_back(csv_number(m->rank()));
  row.push_back(csv_number(m->peak_bytes()));
  row.push_back(csv_number(m->capacity_bytes()));
  row.emplace_back(m->oom() ? "true" : "false");
  return row;
}

std::string render_profile(const plan::AppliedProfile& profile) {
  if (profile.framework.empty()) return {};
  std::string out = "\nframework " + profile.framework + " (plan/frameworks profile)\n";
  if (profile.filled.empty()) out += "  no field from the profile: the plan states every one\n";
  for (const auto& v : profile.filled) {
    out += "  from the profile  " + v.field + ": " + v.value + "  [" + v.source + "]\n";
  }
  for (const auto& v : profile.stated) {
    out += "  stated by plan    " + v.field + " (the profile says " + v.value + ")\n";
  }
  return out;
}

pb::FrameworkApplied profile_message(const plan::AppliedProfile& profile) {
  pb::FrameworkApplied out;
  out.set_name(profile.framework);
  for (const auto& [list, values] : {std::pair{out.mutable_from_profile(), &profile.filled},
                                     std::pair{out.mutable_stated_by_plan(), &profile.stated}}) {
    for (const auto& v : *values) {
      pb::ProfileValue* m = list->Add();
      m->set_field(v.field);
      m->set_value(v.value);
      m->set_source(v.source);
    }
  }
  return out;
}

}  // namespace orrery::cli
