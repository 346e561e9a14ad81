// The `orrery` Python module: orrery's libraries seen from Python (README, "orrery as a
// library"). Errors keep their kinds: an InputError (the caller's mistake) is a ValueError, an
// EnvironmentError (a missing file) an OSError, anything else a RuntimeError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "orrery/base/error.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/plan_defaults.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/planner/evaluator.hpp"
#include "orrery/planner/plan_space.hpp"
#include "orrery/planner/search.hpp"
#include "orrery/sim/cost_models.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"
#include "python_results.hpp"

namespace py = pybind11;

namespace orrery::python {
namespace {

// "bf16" -> PRECISION_BF16; "" leaves the job's default (default_precision of the cluster).
void set_precision(pb::Job& job, const std::string& name) {
  if (name.empty()) return;
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
  const auto* value = pb::Precision_descriptor()->FindValueByName("PRECISION_" + upper);
  if (value == nullptr || value->number() == 0)
    throw base::InputError("", 0, "precision",
                           "got '" + name + "', expected one of: fp32, bf16, fp16, fp8");
  job.set_precision(static_cast<pb::Precision>(value->number()));
}

pb::Job make_job(int64_t global_batch, std::optional<int64_t> seq, const std::string& precision) {
  pb::Job job;
  job.set_global_batch_size(global_batch);
  if (seq) job.set_seq_len(*seq);
  set_precision(job, precision);
  return job;
}

// The analytic engine on one plan; dp and micro_batch 0: derived as the CLI derives them.
pb::SimResult simulate(const pb::ModelSpec& model, const pb::ClusterSpec& cluster,
                       int64_t global_batch, std::optional<int64_t> seq, int64_t tp, int64_t pp,
                       int64_t dp, int64_t cp, int64_t micro_batch, bool sp,
                       const std::string& precision) {
  pb::Plan p;
  *p.mutable_job() = make_job(global_batch, seq, precision);
  auto* parallel = p.mutable_parallel();
  parallel->set_tp(tp);
  parallel->set_pp(pp);
  parallel->set_cp(cp);
  if (dp > 0) parallel->set_dp(dp);
  if (sp) parallel->set_sequence_parallel(true);
  if (micro_batch > 0) p.set_micro_batch_size(micro_batch);
  plan::fill_unstated_job(*p.mutable_job(), model, cluster);
  plan::fill_unstated(p, model, cluster);
  const plan::ResolvedPlan resolved = plan::resolve_plan(p, model, cluster);
  const topologies::Topology topology(resolved.cluster);
  const sim::CostModels costs(topology, resolved.precision.dtype);
  return sim::simulate(resolved, costs, sim::EngineKind::kAnalytic).result;
}

// The planner's search with the analytic engine: the best `top` plans, best first.
std::vector<planner::RankedPlan> plan_job(const pb::ModelSpec& model,
                                          const pb::ClusterSpec& cluster, int64_t global_batch,
                                          std::optional<int64_t> seq, const std::string& precision,
                                          int64_t top, int threads) {
  planner::PlanningJob job{model, cluster, {}};
  *job.base.mutable_job() = make_job(global_batch, seq, precision);
  plan::fill_unstated_job(*job.base.mutable_job(), job.model, job.cluster);
  const planner::PlanSpace space(job, planner::SpaceOptions{});
  const topologies::Topology topology(job.cluster);
  const sim::CostModels costs(topology, planner::precision_dtype(job.base.job().precision()));
  const planner::AnalyticEngine engine(costs);
  planner::SearchOptions options;
  options.top_k = top;
  options.threads = threads;
  options.use_mpi_world = false;
  return planner::search(space, engine, options).ranked;
}

}  // namespace
}  // namespace orrery::python

PYBIND11_MODULE(orrery, m) {
  using namespace orrery;
  m.doc() = "orrery: predict and plan large-model training on GPU clusters (analytic engine)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const base::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const base::EnvironmentError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    }
  });
  python::add_result_classes(m);
  m.def(
      "load_model", [](const std::string& name) { return models::load_model(name); },
      py::arg("name_or_file"), "A model preset's name or a YAML/JSON model file");
  m.def(
      "load_cluster",
      [](const std::string& name, std::optional<int64_t> nodes) {
        return topologies::load_cluster(name, nodes);
      },
      py::arg("name_or_file"), py::arg("nodes") = py::none(),
      "A cluster preset's name or a YAML/JSON cluster file, resized to `nodes`");
  m.def("simulate", &python::simulate, py::arg("model"), py::arg("cluster"), py::kw_only(),
        py::arg("global_batch"), py::arg("seq") = py::none(), py::arg("tp") = 1, py::arg("pp") = 1,
        py::arg("dp") = 0, py::arg("cp") = 1, py::arg("micro_batch") = 0, py::arg("sp") = false,
        py::arg("precision") = "",
        "One plan's step with the analytic engine, as `orrery simulate` (dp, micro_batch 0 and "
        "seq, precision unset: derived as the CLI derives them)");
  m.def("plan", &python::plan_job, py::arg("model"), py::arg("cluster"), py::kw_only(),
        py::arg("global_batch"), py::arg("seq") = py::none(), py::arg("precision") = "",
        py::arg("top") = 5, py::arg("threads") = 1,
        "The best plans by the analytic engine, best first, as `orrery plan --rerank none`");
}
