// `orrery goodput --json`: SI units throughout, keys in a fixed order.
#include "goodput_report.hpp"

namespace orrery::cli {
namespace {

using Json = nlohmann::ordered_json;

Json failures_json(const sim::FailureRates& r) {
  Json components = Json::array();
  for (const auto& c : r.components) {
    components.push_back({{"component", c.component},
                          {"count", c.count},
                          {"mtbf_s", c.mtbf_s},
                          {"rate_per_s", c.rate_per_s}});
  }
  return {{"components", components},
          {"total_rate_per_s", r.total_rate_per_s},
          {"hang_detection_s", r.hang_detection_s}};
}

Json degradations_json(const GoodputFigures& f) {
  Json episodes = Json::array();
  for (const auto& d : f.run.degradations) {
    const double cost = degradation_cost_s(f.run, d);
    episodes.push_back({{"component", d.component},
                        {"count", d.count},
                        {"mean_interval_s", d.mean_interval_s},
                        {"rate_per_s", d.rate_per_s},
                        {"step_ratio", d.step_ratio},
                        {"detect_steps", d.detect_steps > 0 ? Json(d.detect_steps) : Json(nullptr)},
                        {"duration_s", d.detect_steps > 0 ? Json(nullptr) : Json(d.duration_s)},
                        {"cost_s", cost},
                        {"loss_fraction", d.rate_per_s * cost},
                        {"source", degradation_source(f, d.component)}});
  }
  const bool none = f.run.degradations.empty();
  return {{"modelled", !none},
          {"why_none", none ? Json(kNoDegradations) : Json(nullptr)},
          {"loss_fraction", sim::degradation_loss_fraction(f.run)},
          {"episodes", episodes}};
}

Json checkpoint_json(const sim::CheckpointModel& c) {
  return {{"total_bytes", c.total_bytes},
          {"rank_bytes", c.rank_bytes},
          {"node_bytes", c.node_bytes},
          {"async", c.async},
          {"snapshot_s", c.snapshot_s},
          {"local_s", c.local_s},
          {"remote_s", c.remote_s},
          {"blocking_s", c.blocking_s},
          {"background_s", c.background_s},
          {"load_s", c.load_s},
          {"load_local_s", c.load_local_s},
          {"restart_in_place_s", c.restart_s(false, false)},
          {"restart_node_lost_s", c.restart_s(true, c.spare_nodes > 0)},
          {"process_group_init_s", c.process_group_init_s}};
}

Json restarts_json(const sim::RunModel& run) {
  const sim::ReplicaRestarts& r = run.replicas;
  const bool replica = run.restart_replicas && r.possible();
  return {{"scope", replica ? "replica" : "job"},
          {"replicas", r.replicas},
          {"ranks_per_replica", r.ranks_per_replica},
          {"replicas_per_node", r.replicas_per_node},
          {"recovery_s", r.recovery_s},
          {"regroup_s", r.regroup_s},
          {"why_not", r.possible() ? Json(nullptr) : Json(r.why_not)},
          {"job_failure_rate_per_s", sim::job_failure_rate_per_s(run)}};
}

Json interval_json(const sim::CheckpointInterval& i) {
  return {{"steps", i.steps}, {"interval_s", i.interval_s}, {"goodput", i.goodput}};
}

Json monte_carlo_json(const GoodputFigures& f) {
  const auto& mc = f.monte_carlo;
  return {{"trials", mc.trials},
          {"seed", f.seed},
          {"target_tokens", f.target_tokens},
          {"target_work_s", mc.target_work_s},
          {"wall_p10_s", sim::quantile(mc.wall_s, 0.1)},
          {"wall_p50_s", sim::quantile(mc.wall_s, 0.5)},
          {"wall_p90_s", sim::quantile(mc.wall_s, 0.9)},
          {"mean_wall_s", mc.mean_wall_s},
          {"goodput", mc.goodput},
          {"mean_interruptions", mc.mean_interruptions},
          {"mean_lost_work_s", mc.mean_lost_work_s},
          {"mean_spares_missed", mc.mean_spares_missed},
          {"mean_replica_restarts", mc.mean_replica_restarts},
          {"mean_degradations", mc.mean_degradations},
          {"mean_slow_s", mc.mean_slow_s},
          {"mean_drain_s", mc.mean_drain_s}};
}

Json settings_json(const GoodputFigures& f) {
  Json out = Json::array();
  for (const auto* list : {&f.run.failures.settings, &f.run.checkpoint.settings}) {
    for (const auto& s : *list) {
      out.push_back({{"field", s.field}, {"value", s.value}, {"source", s.source}});
    }
  }
  return out;
}

}  // namespace

Json goodput_json(const GoodputFigures& f) {
  const auto& fp = f.footprint;
  return {{"model", f.model},
          {"cluster", f.cluster},
          {"footprint",
           {{"gpus", fp.gpus},
            {"hosts", fp.hosts},
            {"nics", fp.nics},
            {"links", fp.links},
            {"switches", fp.switches}}},
          {"analytic_step_s", f.analytic_step_s},
          {"engine", f.engine},
          {"straggler_factor", f.straggler_factor},
          {"straggler_source", f.straggler_source},
          {"step_s", f.run.step_s},
          {"tokens_per_step", f.tokens_per_step},
          {"failures", failures_json(f.run.failures)},
          {"degradations", degradations_json(f)},
          {"checkpoint", checkpoint_json(f.run.checkpoint)},
          {"mean_restart_s", sim::mean_restart_s(f.run)},
          {"restarts", restarts_json(f.run)},
          {"interval", interval_json(f.chosen)},
          {"optimal_interval", interval_json(f.optimal)},
          {"monte_carlo", monte_carlo_json(f)},
          {"settings", settings_json(f)}};
}

}  // namespace orrery::cli
