// `orrery plan`: the fastest ways to train a model on a cluster, ranked and explained.
//   orrery plan --model llama3-70b --cluster dgx-h100 --nodes 128 --global-batch 1024 --seq 8192
//               [--top 5] [--json] [--out best-plan.yaml] [--threads N] [--tp 4,8 ...]
// The table goes to stdout and is the same bytes for any --threads; progress and the search
// summary (with its wall time) go to stderr.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "csv.hpp"
#include "number_flags.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/plan_defaults.hpp"
#include "orrery/planner/explain.hpp"
#include "orrery/planner/search.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/traces/spec_io.hpp"
#include "output.hpp"
#include "plan_args.hpp"
#include "plan_goodput.hpp"
#include "report_pages.hpp"
#include "table.hpp"
#include "text.hpp"

namespace orrery::cli {
namespace {

// --objective goodput ranks at least this many searched plans by tokens per day.
constexpr int64_t kGoodputCandidates = 20;

struct PlanCommandArgs {
  std::string model, cluster, calibration_file, out_file, html_file;
  std::optional<int64_t> nodes, seq;
  int64_t global_batch = 0;
  std::optional<std::string> precision;
  std::string grad_reduce_dtype;      // empty: the precision table's
  std::string optimizer_state_dtype;  // empty: fp32
  // MoE: given to every candidate, not searched (empty / absent: as the plan fields' defaults).
  std::optional<double> moe_capacity_factor;
  bool moe_pad_to_capacity = false;
  std::string moe_expert_gemm;
  std::string tp, pp, cp, ep, etp, vp, micro_batch, sharding, recompute;
  int64_t max_micro_batch = 8, top = 5, exhaustive_limit = 4000, beam = 16;
  int threads = 0;
  bool exhaustive = false, all_variants = false, tp_across_nvlink = false, sp_both_ways = false;
  bool force = false, quiet = false;
  std::string rerank = "des";
  std::string objective = "step";
  std::string restart_scope = "job";
  std::vector<std::string> degradations;  // --degradation, for --objective goodput
  int64_t rerank_k = 0;
  double rerank_budget = 60000;
};

// A comma list of the values a plan field may take, each with the field's checks.
std::vector<int64_t> int_list(const std::string& flag, const std::string& text,
                              const google::protobuf::Descriptor* message,
                              const std::string& field) {
  std::vector<int64_t> out;
  for (const auto& item : split_commas(text)) {
    if (item.empty()) continue;
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 1) {
      throw base::InputError(
          "", 0, flag, "got '" + item + "', expected a comma-separated list of positive integers");
    }
    check_flag(flag, message, field, v);
    out.push_back(v);
  }
  return out;
}

template <class E>
std::vector<E> enum_list(const std::string& flag, const std::string& text,
                         const google::protobuf::EnumDescriptor* e) {
  std::vector<E> out;
  for (const auto& item : split_commas(text)) {
    if (item.empty()) continue;
    std::vector<std::string> names;
    bool found = false;
    for (int i = 0; i < e->value_count(); ++i) {
      if (e->value(i)->number() == 0) continue;
      const std::string name = enum_value_name(*e->value(i));
      if (name == item) out.push_back(static_cast<E>(e->value(i)->number())), found = true;
      names.push_back(name);
    }
    if (!found)
      throw base::InputError("", 0, flag, "got '" + item + "'" + base::suggest(item, names));
  }
  return out;
}

// A flag that gives every candidate one value (not a list to search): exactly one of `expected`.
template <class E>
E one_enum(const std::string& flag, const std::string& text,
           const google::protobuf::EnumDescriptor* e, const std::string& expected) {
  const auto values = enum_list<E>(flag, text, e);
  if (values.size() != 1)
    throw base::InputError("", 0, flag, "got '" + text + "', expected one of: " + expected);
  return values.front();
}

// Progress on stderr: a redrawn bar when stderr is a terminal (at most ~10 times a second).
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  void update(const planner::Progress& p) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (p.done != p.total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled = p.total > 0 ? static_cast<int>(kWidth * p.done / p.total) : kWidth;
    std::fprintf(stderr, "\r%-16s [%s%s] %lld/%lld  (%lld evaluations so far)", p.phase.c_str(),
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(kWidth - filled), '.').c_str(),
                 static_cast<long long>(p.done), static_cast<long long>(p.total),
                 static_cast<long long>(p.evaluated));
    drawn_ = true;
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

// Token dropping changes what is trained and grouped GEMMs never cost more than per-expert ones
// in the simulator, so these are stated for every candidate, never searched (docs/planner.md).
// Refused here, by flag, rather than as the same rule on every candidate.
void apply_moe_flags(const PlanCommandArgs& a, const pb::ModelSpec& model, pb::Plan& base) {
  const bool any = a.moe_capacity_factor || a.moe_pad_to_capacity || !a.moe_expert_gemm.empty();
  if (any && !model.has_moe()) {
    throw base::InputError("", 0, "--moe-capacity-factor/--moe-pad-to-capacity/--moe-expert-gemm",
                           "the dense model " + model.name() + " has no experts");
  }
  if (a.moe_pad_to_capacity && !a.moe_capacity_factor) {
    throw base::InputError("", 0, "--moe-pad-to-capacity",
                           "needs --moe-capacity-factor (the capacity to pad to)");
  }
  if (a.moe_capacity_factor) base.set_moe_capacity_factor(*a.moe_capacity_factor);
  if (a.moe_pad_to_capacity) base.set_moe_pad_to_capacity(true);
  if (a.moe_expert_gemm.empty()) return;
  base.set_moe_expert_gemm(one_enum<pb::MoeExpertGemm>("--moe-expert-gemm", a.moe_expert_gemm,
                                                       pb::MoeExpertGemm_descriptor(),
                                                       "grouped, per_expert"));
}

// Numerical choices, like the precision: given to every candidate, not searched.
void apply_dtype_flags(const PlanCommandArgs& a, pb::Plan& base) {
  if (!a.grad_reduce_dtype.empty()) {
    base.set_grad_reduce_dtype(
        one_enum<pb::GradReduceDtype>("--grad-reduce-dtype", a.grad_reduce_dtype,
                                      pb::GradReduceDtype_descriptor(), "fp32, bf16"));
  }
  if (!a.optimizer_state_dtype.empty()) {
    base.set_optimizer_state_dtype(
        one_enum<pb::OptimizerStateDtype>("--optimizer-state-dtype", a.optimizer_state_dtype,
                                          pb::OptimizerStateDtype_descriptor(), "fp32, bf16"));
  }
}

planner::PlanningJob load(const PlanCommandArgs& a) {
  planner::PlanningJob job;
  if (a.global_batch <= 0) throw base::InputError("", 0, "--global-batch", "required");
  check_flag("--nodes", pb::Plan::descriptor(), "nodes", a.nodes);
  check_flag("--global-batch", pb::Job::descriptor(), "global_batch_size", a.global_batch);
  check_flag("--seq", pb::Job::descriptor(), "seq_len", a.seq);
  job.model = models::load_model(a.model);
  job.cluster = topologies::load_cluster(a.cluster, a.nodes);
  apply_degradations(job.cluster, a.degradations);
  job.base.set_model(a.model);
  job.base.set_cluster(a.cluster);
  if (a.nodes) job.base.set_nodes(*a.nodes);
  auto* j = job.base.mutable_job();
  j->set_global_batch_size(a.global_batch);
  if (a.seq) j->set_seq_len(*a.seq);
  if (a.precision) {
    // One precision: the search does not range over it, so a list must not lose its tail.
    const auto precision =
        enum_list<pb::Precision>("--precision", *a.precision, pb::Precision_descriptor());
    if (precision.size() != 1) {
      throw base::InputError("", 0, "--precision",
                             "got '" + *a.precision + "', expected one of: fp32, bf16, fp16, fp8");
    }
    j->set_precision(precision.front());
  }
  apply_dtype_flags(a, job.base);
  apply_moe_flags(a, job.model, job.base);
  plan::fill_unstated_job(*j, job.model, job.cluster);
  return job;
}

planner::SpaceOptions space_options(const PlanCommandArgs& a) {
  planner::SpaceOptions o;
  o.tp = int_list("--tp", a.tp, pb::Parallelism::descriptor(), "tp");
  o.pp = int_list("--pp", a.pp, pb::Parallelism::descriptor(), "pp");
  o.cp = int_list("--cp", a.cp, pb::Parallelism::descriptor(), "cp");
  o.ep = int_list("--ep", a.ep, pb::Parallelism::descriptor(), "ep");
  o.etp = int_list("--etp", a.etp, pb::Parallelism::descriptor(), "etp");
  o.vp = int_list("--vp", a.vp, pb::Parallelism::descriptor(), "vp");
  o.micro_batch =
      int_list("--micro-batch", a.micro_batch, pb::Plan::descriptor(), "micro_batch_size");
  if (!a.sharding.empty())
    o.sharding = enum_list<pb::Sharding>("--sharding", a.sharding, pb::Sharding_descriptor());
  if (!a.recompute.empty())
    o.recompute = enum_list<pb::Recompute>("--recompute", a.recompute, pb::Recompute_descriptor());
  o.max_micro_batch = a.max_micro_batch;
  o.tp_across_nvlink = a.tp_across_nvlink;
  o.sp_both_ways = a.sp_both_ways;
  return o;
}

double peak_memory(const pb::SimResult& r) {
  double peak = 0;
  for (const auto& m : r.memory()) peak = std::max(peak, m.peak_bytes());
  return peak;
}

std::string breakdown(const pb::SimResult& r) {
  std::string s;
  for (const auto& t : planner::step_terms(r)) {
    if (t.share < 0.005) continue;
    std::string name = t.name.rfind("exposed ", 0) == 0 ? t.name.substr(8) : t.name;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.0f%%", s.empty() ? "" : " ", name.c_str(),
                  100 * t.share);
    s += buf;
  }
  return s;
}

// Why the search ranked nothing, with what the user can change: a search without a plan is an
// answer the user must see as a failure, not an empty table.
std::string no_plan_reason(const planner::PlanningJob& job, const planner::SearchResult& r) {
  const std::string devices = std::to_string(topologies::total_devices(job.cluster));
  if (r.stats.shapes == 0) {
    return "no tp x cp x pp x dp shape of the allowed degrees (--tp, --pp, --cp, --vp) divides "
           "the cluster's " +
           devices + " devices";
  }
  if (!r.closest_oom_plan.empty() && r.stats.out_of_memory > 0) {
    return "no plan fits in memory; closest: " + r.closest_oom_plan + " needs " +
           base::units::bytes(r.closest_oom_peak_bytes) + " of " +
           base::units::bytes(r.closest_oom_capacity_bytes);
  }
  std::string why =
      "every one of the " + std::to_string(r.stats.checked) + " plans checked broke a rule";
  if (!r.rules_hit.empty()) {
    why += ", most often: " + r.rules_hit.front().first + " (" +
           std::to_string(r.rules_hit.front().second) + " plans)";
  }
  return why;
}

// "analytic", or "analytic, best 5 ranked with des".
std::string engines(const planner::SearchResult& r, const planner::SearchOptions& o) {
  if (o.rerank == nullptr || r.ranked.empty()) return "analytic";
  if (!r.rerank_skipped.empty()) {
    return "analytic (" + o.rerank->name() + " ranking skipped: " + r.rerank_skipped +
           " (--rerank-budget))";
  }
  return "analytic, best " +
         std::to_string(std::min<int64_t>(o.rerank_k, static_cast<int64_t>(r.stats.timed))) +
         " ranked with " + o.rerank->name();
}

std::string render_text(const planner::PlanningJob& job, const planner::SearchResult& r,
                        const planner::SearchOptions& o, const std::vector<PlanGoodput>& goodput,
                        const planner::SpaceOptions& space) {
  std::string out;
  out += job.model.name() + " on " + job.cluster.name() + " (" +
         std::to_string(topologies::total_nodes(job.cluster)) + " nodes, " +
         std::to_string(topologies::total_devices(job.cluster)) + " devices), global batch " +
         std::to_string(job.base.job().global_batch_size()) + " x seq " +
         std::to_string(job.base.job().seq_len()) + ", engine " + engines(r, o) + "\n\n";
  std::vector<std::string> columns = {
      "#", "plan", "step", "tokens/s", "MFU", "mem/GPU", "breakdown (share of step)", "limited by"};
  if (!goodput.empty()) {
    columns.insert(columns.begin() + 4, "goodput");
    columns.insert(columns.begin() + 5, "tokens/day");
    columns.insert(columns.begin() + 6, "restarts");
  }
  Table table(columns);
  const auto& best = r.ranked.front();
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const auto& p = r.ranked[i];
    const auto& res = p.eval.result;
    std::vector<std::string> row = {std::to_string(i + 1),
                                    planner::plan_label(p),
                                    base::units::seconds(res.step_time_s()),
                                    base::units::number(std::round(res.tokens_per_s())),
                                    percent(res.mfu()),
                                    base::units::bytes(peak_memory(res)),
                                    breakdown(res),
                                    planner::what_limits(p, best)};
    if (!goodput.empty()) {
      row.insert(row.begin() + 4, percent(goodput[i].goodput));
      row.insert(row.begin() + 5, base::units::number(std::round(goodput[i].tokens_per_day)));
      row.insert(row.begin() + 6, goodput[i].replicas > 1
                                      ? "1 of " + std::to_string(goodput[i].replicas)
                                      : std::string("job"));
    }
    table.add_row(row);
  }
  out += table.render();
  if (!goodput.empty()) {
    out +=
        "\nranked by tokens per day (--objective goodput): failure-free tokens/s, stragglers, "
        "then the goodput at each plan's optimal checkpoint interval (orrery goodput)";
    if (std::any_of(goodput.begin(), goodput.end(), [](const auto& g) { return g.replicas > 1; })) {
      out +=
          "; restarts: a failure restarts only its replica (1 of R) where a plan's replicas "
          "each hold the whole state (--restart-scope replica), the job elsewhere";
    }
  }
  out +=
      "\nwhy #1: " + planner::why_best(best, r.ranked.size() > 1 ? &r.ranked[1] : nullptr) + "\n";
  const auto& s = r.stats;
  out += "searched " + std::to_string(s.space_size) + " plans in " + std::to_string(s.shapes) +
         " shapes (" + (s.exhaustive ? std::string("exhaustive") : "screened, then local search") +
         "): " + std::to_string(s.checked) + " checked, " + std::to_string(s.invalid) +
         " broke a rule, " + std::to_string(s.out_of_memory) + " out of memory, " +
         std::to_string(s.timed) + " timed\n";
  if (auto note = planner::expert_layouts_note(job.model, space); !note.empty()) out += note + "\n";
  if (!r.closest_oom_plan.empty()) {
    out += "closest plan over memory: " + r.closest_oom_plan + " (OOM at " +
           base::units::bytes(r.closest_oom_peak_bytes) + " of " +
           base::units::bytes(r.closest_oom_capacity_bytes) + ", " +
           percent(r.closest_oom_peak_bytes / r.closest_oom_capacity_bytes - 1) + " over)\n";
  }
  return out;
}

nlohmann::ordered_json render_json(const planner::PlanningJob& job, const planner::SearchResult& r,
                                   const planner::SearchOptions& o,
                                   const std::vector<PlanGoodput>& goodput) {
  using nlohmann::ordered_json;
  ordered_json j = json_header("orrery.plan");
  j["model"] = job.model.name();
  j["cluster"] = job.cluster.name();
  j["devices"] = topologies::total_devices(job.cluster);
  j["objective"] = goodput.empty() ? "step" : "goodput";
  j["engine"] = "analytic";
  // The re-ranking engine, how many plans it ranked and, when it did not run, why (null: none).
  j["rerank"] = nullptr;
  if (o.rerank != nullptr) {
    j["rerank"] = {
        {"engine", o.rerank->name()},
        {"plans", r.rerank_skipped.empty() && !r.ranked.empty()
                      ? std::min<int64_t>(o.rerank_k, static_cast<int64_t>(r.stats.timed))
                      : 0},
        {"skipped", r.rerank_skipped}};
  }
  const auto& s = r.stats;
  j["search"] = {{"exhaustive", s.exhaustive}, {"space_size", s.space_size},
                 {"shapes", s.shapes},         {"checked", s.checked},
                 {"invalid", s.invalid},       {"out_of_memory", s.out_of_memory},
                 {"timed", s.timed},           {"local_rounds", s.local_rounds}};
  ordered_json plans = ordered_json::array();
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const auto& p = r.ranked[i];
    const auto limit = planner::limiting_term(p.eval.result);
    plans.push_back({{"rank", i + 1},
                     {"label", planner::plan_label(p)},
                     {"limited_by", {{"term", limit.name}, {"share", limit.share}}},
                     {"note", planner::what_limits(p, r.ranked.front())},
                     {"plan", ordered_json::parse(to_json(p.plan))},
                     {"result", ordered_json::parse(to_json_every_field(p.eval.result))},
                     {"goodput", nullptr}});
    if (!goodput.empty()) {
      plans.back()["goodput"] = {{"goodput", goodput[i].goodput},
                                 {"checkpoint_interval_steps", goodput[i].interval_steps},
                                 {"tokens_per_day", goodput[i].tokens_per_day},
                                 {"replicas", goodput[i].replicas}};
    }
  }
  j["plans"] = plans;
  // Present either way (null when there is nothing to say), so the shape never depends on them.
  j["why_best"] = nullptr;
  if (!r.ranked.empty()) {
    j["why_best"] = planner::why_best(r.ranked[0], r.ranked.size() > 1 ? &r.ranked[1] : nullptr);
  }
  j["closest_out_of_memory"] = nullptr;
  if (!r.closest_oom_plan.empty()) {
    j["closest_out_of_memory"] = {{"label", r.closest_oom_plan},
                                  {"peak_bytes", r.closest_oom_peak_bytes},
                                  {"capacity_bytes", r.closest_oom_capacity_bytes}};
  }
  return j;
}

// The --html page: the winner's timeline comes from the des engine when it ranked the plans (it
// simulates the winner again, the same step, with its timeline kept).
void write_plan_page(const PlanCommandArgs& a, const planner::PlanningJob& job,
                     const planner::SearchResult& r, const planner::SearchOptions& o,
                     const sim::CostModels& costs, const nlohmann::ordered_json& json) {
  std::optional<pb::ExecGraph> timeline;
  if (o.rerank != nullptr && r.rerank_skipped.empty()) {
    sim::DesOptions options;
    options.timeline = true;
    const plan::ResolvedPlan best =
        plan::resolve_plan(r.ranked.front().plan, job.model, job.cluster);
    timeline = sim::simulate(best, costs, sim::EngineKind::kDes, options).timeline;
  }
  write_file_atomically(a.html_file, plan_page(json, timeline ? &*timeline : nullptr), a.force);
  std::cerr << "wrote " << a.html_file << " (open it in a browser)\n";
}

// The ranked table as CSV: the same rows, figures in base units, the limiting term split out.
std::string render_csv(const planner::SearchResult& r, const std::vector<PlanGoodput>& goodput) {
  std::vector<std::string> header = {"rank",          "plan",       "step_time_s", "tokens_per_s",
                                     "mfu",           "peak_bytes", "breakdown",   "limited_by",
                                     "limited_share", "note"};
  if (!goodput.empty()) {
    header.insert(header.begin() + 5, "goodput");
    header.insert(header.begin() + 6, "tokens_per_day");
    header.insert(header.begin() + 7, "replicas");
  }
  std::string out = csv_line(header);
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const auto& p = r.ranked[i];
    const auto& res = p.eval.result;
    const auto limit = planner::limiting_term(res);
    std::vector<std::string> row = {std::to_string(i + 1),
                                    planner::plan_label(p),
                                    csv_number(res.step_time_s()),
                                    csv_number(res.tokens_per_s()),
                                    csv_number(res.mfu()),
                                    csv_number(peak_memory(res)),
                                    breakdown(res),
                                    limit.name,
                                    csv_number(limit.share),
                                    planner::what_limits(p, r.ranked.front())};
    if (!goodput.empty()) {
      row.insert(row.begin() + 5, csv_number(goodput[i].goodput));
      row.insert(row.begin() + 6, csv_number(goodput[i].tokens_per_day));
      row.insert(row.begin() + 7, std::to_string(goodput[i].replicas));
    }
    out += csv_line(row);
  }
  return out;
}

void run_plan(const PlanCommandArgs& a, const OutputFlags& flags) {
  const planner::PlanningJob job = load(a);
  const planner::PlanSpace space(job, space_options(a));
  pb::CalibrationProfile calibration;
  if (!a.calibration_file.empty()) read_spec_file(a.calibration_file, &calibration);
  const topologies::Topology topology(job.cluster);
  const sim::CostModels costs(topology, planner::precision_dtype(job.base.job().precision()),
                              a.calibration_file.empty() ? nullptr : &calibration);
  const planner::AnalyticEngine engine(costs);
  const planner::DesEngine des(costs);
  planner::SearchOptions o;
  if (a.rerank == "des") {
    // Prune and search with the analytic engine, then rank the best plans with the
    // discrete-event engine, which sees the contention between concurrent transfers.
    o.rerank = &des;
    o.rerank_k = a.rerank_k > 0 ? a.rerank_k : std::max<int64_t>(a.top, 5);
    o.rerank_budget = a.rerank_budget;
  } else if (a.rerank != "none") {
    throw base::InputError("", 0, "--rerank",
                           "got '" + a.rerank + "'" + base::suggest(a.rerank, {"des", "none"}));
  }
  o.threads = a.threads > 0 ? a.threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<PlanGoodput> goodput;
  const bool by_goodput = a.objective == "goodput";
  if (!by_goodput && a.objective != "step") {
    throw base::InputError("", 0, "--objective",
                           "got '" + a.objective + "', expected step or goodput");
  }
  if (parse_restart_scope(a.restart_scope) && !by_goodput) {
    throw base::InputError(
        "", 0, "--restart-scope",
        "replica changes how plans rank by goodput: it needs --objective goodput");
  }
  if (!a.degradations.empty() && !by_goodput) {
    throw base::InputError(
        "", 0, "--degradation",
        "degradation episodes change how plans rank by goodput: it needs --objective goodput");
  }
  // Tokens per day can reorder plans whose steps are close: the objective ranks more candidates
  // than it shows, every one of them timed by the same engines.
  o.top_k = by_goodput ? std::max<int64_t>(kGoodputCandidates, 4 * a.top) : a.top;
  if (by_goodput && o.rerank != nullptr) o.rerank_k = o.top_k;
  o.exhaustive_limit = a.exhaustive_limit;
  o.force_exhaustive = a.exhaustive;
  o.beam = a.beam;
  o.distinct = !a.all_variants;
  auto bar = std::make_shared<ProgressBar>(!a.quiet && isatty(STDERR_FILENO) != 0);
  o.progress = [bar](const planner::Progress& p) { bar->update(p); };
  planner::SearchResult r = planner::search(space, engine, o);
  bar->finish();
  if (r.ranked.empty()) throw base::InputError("", 0, "plan", no_plan_reason(job, r));
  if (by_goodput)
    goodput = rank_by_goodput(job, topology, a.cluster, r, static_cast<size_t>(a.top),
                              measured_storage(calibration, a.calibration_file),
                              parse_restart_scope(a.restart_scope));
  if (!a.quiet) {
    std::fprintf(stderr, "planned in %.2f s on %d threads: %lld plans checked, %lld timed (%s)\n",
                 r.stats.seconds, o.threads, static_cast<long long>(r.stats.checked),
                 static_cast<long long>(r.stats.timed),
                 r.stats.exhaustive ? "exhaustive" : "screen + local search");
  }
  const nlohmann::ordered_json json = render_json(job, r, o, goodput);
  if (flags.json) {
    std::cout << json.dump(2) << "\n";
  } else if (flags.csv) {
    std::cout << render_csv(r, goodput);
  } else {
    std::cout << render_text(job, r, o, goodput, space.options());
  }
  if (!a.html_file.empty()) write_plan_page(a, job, r, o, costs, json);
  if (!a.out_file.empty()) {
    // Paths as the plan file must hold them: relative to it, not to where `plan` ran.
    pb::Plan best = r.ranked.front().plan;
    best.set_model(path_for_plan_file(a.out_file, best.model()));
    best.set_cluster(path_for_plan_file(a.out_file, best.cluster()));
    write_file_atomically(a.out_file, to_yaml(best), a.force);
    std::cerr << "wrote " << a.out_file << " (run it with: orrery simulate --plan " << a.out_file
              << ")\n";
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto a = std::make_shared<PlanCommandArgs>();
  auto flags = std::make_shared<OutputFlags>();
  CLI::App* cmd = app.add_subcommand("plan", kPlanHelp);
  cmd->add_option("--model", a->model, "Model preset or file")->required();
  cmd->add_option("--cluster", a->cluster, "Cluster preset or file")->required();
  cmd->add_option("--nodes", a->nodes, "Size the cluster to this many nodes")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--global-batch", a->global_batch, "Sequences per step")
      ->required()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seq", a->seq, "Sequence length (default: the model's max)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--precision", a->precision,
                  "fp32 | bf16 | fp16 | fp8 (default bf16 on GPUs, fp32 on CPUs)");
  cmd->add_option("--grad-reduce-dtype", a->grad_reduce_dtype,
                  "fp32 | bf16: every candidate's gradient reduction dtype, not searched "
                  "(default: the precision's, fp32 for bf16)");
  cmd->add_option("--optimizer-state-dtype", a->optimizer_state_dtype,
                  "fp32 | bf16: every candidate's Adam moment dtype, not searched (default fp32)");
  cmd->add_option("--moe-capacity-factor", a->moe_capacity_factor,
                  "MoE: every candidate's expert capacity factor (tokens beyond it dropped), not "
                  "searched (default: no capacity)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--moe-pad-to-capacity", a->moe_pad_to_capacity,
                "MoE: pad every expert's input to its capacity (needs --moe-capacity-factor)");
  cmd->add_option("--moe-expert-gemm", a->moe_expert_gemm,
                  "grouped | per_expert: how every candidate's routed experts run, not searched "
                  "(default: grouped)");
  cmd->add_option("--tp", a->tp,
                  "Only these TP degrees, e.g. 4,8 (default: all up to one NVLink domain)");
  cmd->add_option("--pp", a->pp, "Only these PP degrees");
  cmd->add_option("--cp", a->cp, "Only these CP degrees");
  cmd->add_option("--ep", a->ep, "Only these EP degrees");
  cmd->add_option("--etp", a->etp,
                  "MoE: only folded plans (parallel.etp), with these expert TP degrees (default: "
                  "unfolded plans and folded ones with etp 1 or tp)");
  cmd->add_option("--vp", a->vp, "Only these virtual-stage counts");
  cmd->add_option("--micro-batch", a->micro_batch, "Only these micro-batch sizes");
  cmd->add_option("--max-micro-batch", a->max_micro_batch, "Largest micro-batch tried (default 8)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--sharding", a->sharding,
                  "Only these: none,zero1,zero2,zero3,fsdp,hsdp (default all but zero3)");
  cmd->add_option("--recompute", a->recompute,
                  "Only these: none,selective,selective_op,full (default all)");
  cmd->add_flag("--tp-across-nvlink", a->tp_across_nvlink,
                "Allow TP groups beyond one NVLink domain");
  cmd->add_flag("--sp-both-ways", a->sp_both_ways, "Try TP without sequence parallelism too");
  cmd->add_option("--top", a->top, "Plans to show (default 5)")->check(CLI::PositiveNumber);
  cmd->add_option("--objective", a->objective,
                  "step (the shortest step; default) or goodput (the most tokens per day once "
                  "failures, checkpoints and restarts are counted; docs/goodput.md)");
  cmd->add_option("--restart-scope", a->restart_scope,
                  "With --objective goodput: job (a failure restarts the job from its checkpoint; "
                  "default) or replica (only the failed data-parallel replica restarts, where the "
                  "plan's replicas each hold the whole state; docs/goodput.md)");
  add_degradation_flag(cmd, a->degradations);
  cmd->add_option(
      "--rerank", a->rerank,
      "Engine that ranks the best plans the analytic search found: des (default) or none");
  cmd->add_option("--rerank-k", a->rerank_k, "Plans to re-rank (default: max(--top, 5))")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option(
         "--rerank-budget", a->rerank_budget,
         "Most des work for the re-ranking, in simulated layer passes (cp x micro-batches x "
         "layers per plan; default 60000, about 20 s here); over it the analytic ranking "
         "stands and the output says so")
      ->check(finite_positive());
  cmd->add_option("--threads", a->threads,
                  "Worker threads (default: all cores); the result does not depend on it")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--exhaustive", a->exhaustive, "Evaluate every plan of the space, however large");
  cmd->add_option("--exhaustive-limit", a->exhaustive_limit,
                  "Evaluate the whole space when it has at most this many plans (default 4000)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--beam", a->beam, "Screened plans the local search starts from (default 16)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--all-variants", a->all_variants,
                "Rank plans that differ only in placement, buckets or layer split separately");
  cmd->add_option("--calibration", a->calibration_file, "Calibration profile (YAML/JSON)");
  cmd->add_option("--out", a->out_file,
                  "Write the best plan as a plan file for `orrery simulate --plan`");
  cmd->add_option("--html", a->html_file,
                  "Write an HTML page with charts: the ranked plans, the winner's breakdown, "
                  "memory and timeline (docs/report.md)");
  cmd->add_flag("--force", a->force, "Replace --out and --html if they exist");
  cmd->add_flag("--quiet", a->quiet, "No progress or summary on stderr");
  add_output_flags(cmd, *flags, false);
  add_csv_flag(cmd, *flags, "one row per ranked plan, as the table");
  cmd->callback([a, flags] { run_plan(*a, *flags); });
}

}  // namespace orrery::cli
