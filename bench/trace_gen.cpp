// A large measured trace for the memory benchmark of `validate --trace` and `calibrate`
// (docs/benchmarks.md "Large traces"): a real trace of `orrery run --out` with its plan's global
// batch raised to M micro-batches, lowered again, every node of micro-batch K timed as the
// template's node of micro-batch 0 (the gaps between ops kept). Input for a resource
// measurement, not a measurement: the timings repeat the template's.
//
//   orrery_trace_gen TEMPLATE.json MICRO_BATCHES OUT.json
#include <algorithm>
#include <charconv>
#include <cstring>
#include <iostream>
#include <map>
#include <regex>
#include <string>

#include "orrery/base/error.hpp"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/traces/spec_io.hpp"

namespace {

using namespace orrery;

struct Timing {
  double duration_s = 0;
  double gap_before_s = 0;  // idle time between the previous op's end and this op's start
};

// Template timings by node name with the micro-batch index as 0 ("mb7.fwd..." -> "mb0.fwd...").
std::string as_micro_batch_0(const std::string& name) {
  static const std::regex mb("(^|\\.)mb[0-9]+\\.");
  return std::regex_replace(name, mb, "$1mb0.");
}

std::map<std::string, Timing> template_timings(const pb::RankGraph& rank) {
  std::map<std::string, Timing> out;
  double previous_end = rank.nodes_size() > 0 ? rank.nodes(0).start_s() : 0;
  for (const auto& n : rank.nodes()) {
    const double gap = std::max(0.0, n.start_s() - previous_end);
    out.emplace(as_micro_batch_0(n.name()), Timing{n.duration_s(), gap});
    previous_end = std::max(previous_end, n.start_s() + n.duration_s());
  }
  return out;
}

pb::ExecGraph generate(const pb::ExecGraph& tmpl, int64_t micro_batches) {
  pb::ExecGraph out = tmpl;
  const int64_t per_step = tmpl.plan().job().global_batch_size();
  out.mutable_plan()->mutable_job()->set_global_batch_size(per_step * micro_batches);
  const plan::ResolvedPlan resolved =
      plan::resolve_plan(out.plan(), out.model_spec(), out.cluster_spec(), SourceMap("generated"));
  plan::LowerOptions options;
  for (const auto& r : tmpl.ranks()) options.ranks.push_back(r.rank());
  const pb::ExecGraph lowered = plan::lower(resolved, options);
  out.clear_ranks();
  double span = 0;
  for (int r = 0; r < lowered.ranks_size(); ++r) {
    const auto timings = template_timings(tmpl.ranks(r));
    pb::RankGraph* rank = out.add_ranks();
    *rank = lowered.ranks(r);
    double cursor = tmpl.ranks(r).nodes_size() > 0 ? tmpl.ranks(r).nodes(0).start_s() : 0;
    for (auto& n : *rank->mutable_nodes()) {
      const auto it = timings.find(as_micro_batch_0(n.name()));
      if (it == timings.end()) throw std::runtime_error("no template node for " + n.name());
      cursor += it->second.gap_before_s;
      n.set_start_s(cursor);
      n.set_duration_s(it->second.duration_s);
      cursor += it->second.duration_s;
    }
    span = std::max(span, cursor);
  }
  out.clear_step_seconds();
  out.add_step_seconds(span);
  out.set_measured_step_s(span);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t micro_batches = 0;
  if (argc != 4 ||
      std::from_chars(argv[2], argv[2] + std::strlen(argv[2]), micro_batches).ec != std::errc() ||
      micro_batches < 1) {
    std::cerr << "usage: orrery_trace_gen TEMPLATE.json MICRO_BATCHES OUT.json\n";
    return 2;
  }
  try {
    pb::ExecGraph tmpl;
    read_spec_file(argv[1], &tmpl);
    write_file_atomically(argv[3], to_json(generate(tmpl, micro_batches)), true);
  } catch (const std::exception& e) {
    std::cerr << "orrery_trace_gen: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
