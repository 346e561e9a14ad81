#include "orrery/sim/engine.hpp"

#include "orrery/base/error.hpp"

namespace orrery::sim {

const char* to_string(EngineKind kind) {
  return kind == EngineKind::kAnalytic ? "analytic" : "des";
}

EngineKind parse_engine(const std::string& name, const std::string& flag) {
  if (name == "analytic") return EngineKind::kAnalytic;
  if (name == "des") return EngineKind::kDes;
  throw base::InputError("", 0, flag,
                         "got '" + name + "'" + base::suggest(name, {"analytic", "des"}));
}

SimOutput simulate(const plan::ResolvedPlan& plan, const CostModels& costs, EngineKind engine,
                   const DesOptions& des) {
  return engine == EngineKind::kAnalytic ? simulate_analytic(plan, costs)
                                         : simulate_des(plan, costs, des);
}

}  // namespace orrery::sim
