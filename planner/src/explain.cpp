#include "orrery/planner/explain.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "orrery/base/units.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::planner {
namespace {

std::string percent(double fraction, int decimals = 0) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f%%", decimals, 100.0 * fraction);
  return buf;
}

double term_seconds(const std::vector<Term>& terms, const std::string& name) {
  for (const auto& t : terms) {
    if (t.name == name) return t.seconds;
  }
  return 0;
}

std::string enum_name(const google::protobuf::EnumDescriptor* e, int v) {
  return enum_value_name(*e->FindValueByNumber(v));
}

}  // namespace

std::vector<Term> step_terms(const pb::SimResult& r) {
  const auto& b = r.breakdown();
  const double step = r.step_time_s();
  std::vector<Term> terms;
  auto add = [&](std::string name, double s) {
    if (s > 0) terms.push_back({std::move(name), s, step > 0 ? s / step : 0});
  };
  add("compute", b.compute_s() - b.recompute_s());
  add("recompute", b.recompute_s());
  for (const auto& c : b.exposed_comm()) add("exposed " + c.name(), c.seconds());
  add("bubble", b.pipeline_bubble_s());
  add("optimizer", b.optimizer_s());
  add("dispatch", b.dispatch_s());
  std::stable_sort(terms.begin(), terms.end(), [](const Term& a, const Term& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.name < b.name;
  });
  return terms;
}

Term limiting_term(const pb::SimResult& r) {
  for (const auto& t : step_terms(r)) {
    if (t.name != "compute") return t;
  }
  return {};
}

std::string describe(const Term& t) {
  return t.name.empty() ? "none" : t.name + " " + percent(t.share);
}

std::string plan_label(const RankedPlan& p) {
  const Knobs& k = p.knobs;
  // Per-stage degrees read stage by stage: "tp4|8 pp2 dp2|1".
  auto per_stage = [](const std::vector<int64_t>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "|" : "") + std::to_string(v[i]);
    return out;
  };
  std::string s = k.stage_tp.empty() ? "tp" + std::to_string(k.tp) + " pp" + std::to_string(k.pp) +
                                           " dp" + std::to_string(k.dp)
                                     : "tp" + per_stage(k.stage_tp) + " pp" + std::to_string(k.pp) +
                                           " dp" + per_stage(k.stage_dp);
  if (k.cp > 1) s += " cp" + std::to_string(k.cp);
  if (k.ep > 1) s += " ep" + std::to_string(k.ep);
  if (k.etp > 0) s += " etp" + std::to_string(k.etp);
  if (k.vp > 1) s += " vp" + std::to_string(k.vp);
  if (k.sp) s += " sp";
  if (k.tp_overlap) s += " tp-overlap";
  if (k.a2a_overlap) s += " a2a-overlap";
  const int64_t gbs = p.plan.job().global_batch_size();
  s += " mbs" + std::to_string(k.micro_batch) + " x" + std::to_string(gbs / (k.dp * k.micro_batch));
  if (k.pp > 1 && k.schedule != pb::PIPELINE_SCHEDULE_UNSPECIFIED) {
    s += " " + enum_name(pb::PipelineSchedule_descriptor(), k.schedule);
  }
  if (k.sharding != pb::SHARDING_NONE) s += " " + enum_name(pb::Sharding_descriptor(), k.sharding);
  if (k.sharding == pb::SHARDING_HSDP) s += "/" + std::to_string(k.shard_group);
  if (k.recompute != pb::RECOMPUTE_NONE)
    s += " recompute=" + enum_name(pb::Recompute_descriptor(), k.recompute);
  if (k.recompute == pb::RECOMPUTE_FULL && k.recompute_every > 1)
    s += "/every" + std::to_string(k.recompute_every);
  if (!k.placement.empty()) s += " placement=" + k.placement;
  if (k.bucket_bytes > 0) s += " bucket=" + base::units::bytes(k.bucket_bytes);
  if (p.plan.layers_per_stage_size() > 0) {
    // Runs of equal counts as "count*n": 1,2*62,1.
    s += " layers=";
    const auto& l = p.plan.layers_per_stage();
    for (int i = 0; i < l.size();) {
      int j = i;
      while (j < l.size() && l[j] == l[i]) ++j;
      s += (i ? "," : "") + std::to_string(l[i]) + (j - i > 1 ? "*" + std::to_string(j - i) : "");
      i = j;
    }
  }
  if (!k.stage_groups.empty()) {
    s += " stages=";
    for (size_t i = 0; i < k.stage_groups.size(); ++i) s += (i ? "," : "") + k.stage_groups[i];
  }
  return s;
}

std::string why_best(const RankedPlan& best, const RankedPlan* second) {
  const auto terms = step_terms(best.eval.result);
  const Term limit = limiting_term(best.eval.result);
  std::string s = "useful compute is " +
                  percent(term_seconds(terms, "compute") / best.eval.step_time_s()) +
                  " of its step; its largest overhead is " + describe(limit);
  if (second == nullptr) return s + ".";
  const auto other = step_terms(second->eval.result);
  // The term where the runner-up loses most time against the winner.
  std::string name;
  double gap = 0;
  std::vector<std::string> names;
  for (const auto& t : terms) names.push_back(t.name);
  for (const auto& t : other) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (const auto& n : names) {
    const double d = term_seconds(other, n) - term_seconds(terms, n);
    if (d > gap) gap = d, name = n;
  }
  const double margin = second->eval.step_time_s() / best.eval.step_time_s() - 1;
  s += "; it beats #2 by " + percent(margin, 1);
  if (!name.empty()) {
    s += ", mostly on " + name + " (" + base::units::seconds(term_seconds(terms, name)) + " vs " +
         base::units::seconds(term_seconds(other, name)) + ")";
  }
  return s + ".";
}

std::string what_limits(const RankedPlan& plan, const RankedPlan& best) {
  const Term limit = limiting_term(plan.eval.result);
  const double margin = plan.eval.step_time_s() / best.eval.step_time_s() - 1;
  const double winner =
      term_seconds(step_terms(best.eval.result), limit.name) / best.eval.step_time_s();
  std::string s = margin > 0 ? "+" + percent(margin, 1) + ": " : "";
  s += describe(limit);
  if (!limit.name.empty() && &plan != &best) s += " (winner " + percent(winner) + ")";
  return s;
}

std::string expert_layouts_note(const pb::ModelSpec& model, const SpaceOptions& options) {
  if (!model.has_moe()) return "";
  std::string etps;
  for (int64_t e : options.etp) etps += (etps.empty() ? "" : ",") + std::to_string(e);
  if (!etps.empty()) {
    return "expert layouts: folded only (--etp " + etps +
           "), ep drawn from tp x cp x dp, expert TP as listed";
  }
  return "expert layouts: unfolded (ep from dp x cp, experts split by tp) and folded "
         "(parallel.etp 1 or tp, ep drawn from tp x cp x dp)";
}

}  // namespace orrery::planner
