// libFuzzer targets for the spec reader (traces/src/spec_reader.cpp) and the semantic checks of
// each spec kind on top of it: every input is read as YAML and as JSON. ORRERY_FUZZ_SPEC picks
// the kind (1 cluster, 2 model, 3 plan) at build time, one binary per kind so that each keeps a
// corpus of its own.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "fuzz_input.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/traces/spec_io.hpp"

namespace {

using orrery::SpecFormat;
namespace pb = orrery::pb;

[[maybe_unused]] void read_cluster(std::string_view text, SpecFormat format) {
  pb::ClusterSpec spec;
  orrery::SourceMap where("fuzz");
  orrery::parse_spec(text, "fuzz", format, &spec, &where);
  orrery::topologies::validate_cluster(spec, where);
}

[[maybe_unused]] void read_model(std::string_view text, SpecFormat format) {
  pb::ModelSpec spec;
  orrery::SourceMap where("fuzz");
  orrery::parse_spec(text, "fuzz", format, &spec, &where);
  orrery::models::validate_model(spec, where);
}

// A plan resolves against the presets it names (llama3-8b and dgx-h100 when it names none or a
// file), so that the fuzzer reaches the plan rules (degrees, stages, layouts) without reading
// files. Presets are parsed once: the cache keeps the fuzzer fast.
template <typename Spec, typename Preset>
const Spec& cached_preset(const std::string& name, const char* fallback, Preset preset) {
  static std::map<std::string, Spec> cache;
  const auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  try {
    return cache.emplace(name, preset(name)).first->second;
  } catch (const orrery::base::InputError&) {
    return cached_preset<Spec>(fallback, fallback, preset);
  }
}

[[maybe_unused]] void read_plan(std::string_view text, SpecFormat format) {
  pb::Plan plan;
  orrery::SourceMap where("fuzz");
  orrery::parse_spec(text, "fuzz", format, &plan, &where);
  const auto& model = cached_preset<pb::ModelSpec>(
      plan.model(), "llama3-8b", [](const std::string& n) { return orrery::models::preset(n); });
  pb::ClusterSpec cluster = cached_preset<pb::ClusterSpec>(
      plan.cluster(), "dgx-h100",
      [](const std::string& n) { return orrery::topologies::preset(n); });
  // Up to 1024 nodes: larger clusters are what the resource guards are for, not the reader.
  if (plan.has_nodes() && plan.nodes() <= 1024) orrery::topologies::resize(cluster, plan.nodes());
  orrery::plan::resolve_plan(plan, model, cluster, where);
}

void read(std::string_view text, SpecFormat format) {
  constexpr int kKind = ORRERY_FUZZ_SPEC;
  if constexpr (kKind == 1) {
    read_cluster(text, format);
  } else if constexpr (kKind == 2) {
    read_model(text, format);
  } else {
    read_plan(text, format);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = orrery::fuzz::as_text(data, size);
  orrery::fuzz::refuse_or_read([&] { read(text, SpecFormat::kYaml); });
  orrery::fuzz::refuse_or_read([&] { read(text, SpecFormat::kJson); });
  return 0;
}
