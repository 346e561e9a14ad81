#include "python_results.hpp"

#include <pybind11/stl.h>

#include <map>
#include <string>

#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/sim_result.pb.h"
#include "orrery/planner/search.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/traces/spec_io.hpp"

namespace py = pybind11;

namespace orrery::python {
namespace {

// Where a step's time goes, as the JSON names the terms (every term, zeros included).
std::map<std::string, double> breakdown(const pb::SimResult& r) {
  std::map<std::string, double> out;
  const auto& b = r.breakdown();
  const auto* d = b.GetDescriptor();
  const auto* reflection = b.GetReflection();
  for (int f = 0; f < d->field_count(); ++f) {
    const auto* field = d->field(f);
    if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE)
      out[field->name()] = reflection->GetDouble(b, field);
  }
  return out;
}

void add_sim_result(py::module_& m) {
  py::class_<pb::SimResult>(m, "SimResult", "A simulated step (SimResult, docs/formats.md)")
      .def_property_readonly("engine", &pb::SimResult::engine)
      .def_property_readonly("step_time_s", &pb::SimResult::step_time_s)
      .def_property_readonly("tokens_per_s", &pb::SimResult::tokens_per_s)
      .def_property_readonly("mfu", &pb::SimResult::mfu)
      .def_property_readonly("hfu", &pb::SimResult::hfu)
      .def_property_readonly("breakdown", &breakdown, "Seconds of the step by term")
      .def_property_readonly(
          "peak_memory_bytes",
          [](const pb::SimResult& r) {
            double peak = 0;
            for (const auto& rank : r.memory()) peak = std::max(peak, rank.peak_bytes());
            return peak;
          },
          "The highest peak memory of any rank")
      .def("to_json", [](const pb::SimResult& r) { return to_json_every_field(r); })
      .def("__repr__", [](const pb::SimResult& r) {
        return "<orrery.SimResult " + r.engine() + " step " + std::to_string(r.step_time_s()) +
               " s>";
      });
}

void add_ranked_plan(py::module_& m) {
  using planner::RankedPlan;
  py::class_<RankedPlan>(m, "RankedPlan", "One plan of orrery.plan's ranking")
      .def_property_readonly("tp", [](const RankedPlan& p) { return p.knobs.tp; })
      .def_property_readonly("pp", [](const RankedPlan& p) { return p.knobs.pp; })
      .def_property_readonly("dp", [](const RankedPlan& p) { return p.knobs.dp; })
      .def_property_readonly("cp", [](const RankedPlan& p) { return p.knobs.cp; })
      .def_property_readonly("ep", [](const RankedPlan& p) { return p.knobs.ep; })
      .def_property_readonly("vp", [](const RankedPlan& p) { return p.knobs.vp; })
      .def_property_readonly("sp", [](const RankedPlan& p) { return p.knobs.sp; })
      .def_property_readonly("micro_batch", [](const RankedPlan& p) { return p.knobs.micro_batch; })
      .def_property_readonly("step_time_s",
                             [](const RankedPlan& p) { return p.eval.step_time_s(); })
      .def_property_readonly("result", [](const RankedPlan& p) { return p.eval.result; })
      .def(
          "plan_yaml", [](const RankedPlan& p) { return to_yaml(p.plan); },
          "The plan as `orrery plan --out` writes it");
}

}  // namespace

void add_result_classes(py::module_& m) {
  py::class_<pb::ModelSpec>(m, "Model", "A model spec (a preset or a file; docs/models.md)")
      .def_property_readonly("name", &pb::ModelSpec::name)
      .def_property_readonly("num_layers", &pb::ModelSpec::num_layers)
      .def("to_json", [](const pb::ModelSpec& s) { return to_json(s); });
  py::class_<pb::ClusterSpec>(m, "Cluster", "A cluster spec (a preset or a file)")
      .def_property_readonly("name", &pb::ClusterSpec::name)
      .def_property_readonly("devices",
                             [](const pb::ClusterSpec& c) { return topologies::total_devices(c); })
      .def("to_json", [](const pb::ClusterSpec& s) { return to_json(s); });
  add_sim_result(m);
  add_ranked_plan(m);
}

}  // namespace orrery::python
