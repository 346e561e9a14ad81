#include "chakra_nodes.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "orrery/base/error.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::detail {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

std::string where(const pb::RankGraph& rank, const pb::ExecNode& n) {
  return "rank " + std::to_string(rank.rank()) + ", node " + std::to_string(n.id()) + " '" +
         n.name() + "'";
}

[[noreturn]] void refuse(const pb::RankGraph& rank, const pb::ExecNode& n,
                         const std::string& reason) {
  throw base::InputError("", 0, "", "Chakra export: " + where(rank, n) + ": " + reason);
}

// ASTRA-sim's workload layer runs these five; REDUCE and BARRIER exist in the Chakra schema but
// ASTRA-sim stops on them ("Unsupported collective comm type"), so they are refused here, before
// a file is written, rather than in the middle of someone's ASTRA-sim run.
chakra::CollectiveCommType comm_type(const pb::RankGraph& rank, const pb::ExecNode& n) {
  switch (n.collective()) {
    case pb::COLLECTIVE_KIND_ALL_REDUCE:
      return chakra::ALL_REDUCE;
    case pb::COLLECTIVE_KIND_ALL_GATHER:
      return chakra::ALL_GATHER;
    case pb::COLLECTIVE_KIND_REDUCE_SCATTER:
      return chakra::REDUCE_SCATTER;
    case pb::COLLECTIVE_KIND_ALL_TO_ALL:
      return chakra::ALL_TO_ALL;
    case pb::COLLECTIVE_KIND_BROADCAST:
      return chakra::BROADCAST;
    default:
      refuse(
          rank, n,
          "collective '" +
              enum_value_name(*pb::CollectiveKind_descriptor()->FindValueByNumber(n.collective())) +
              "' has no ASTRA-sim implementation (its workload layer runs all-reduce, "
              "all-gather, reduce-scatter, all-to-all and broadcast)");
  }
}

void attr_int32(chakra::Node& c, const std::string& name, int64_t v) {
  auto* a = c.add_attr();
  a->set_name(name);
  a->set_int32_val(static_cast<int32_t>(v));
}
void attr_int64(chakra::Node& c, const std::string& name, int64_t v) {
  auto* a = c.add_attr();
  a->set_name(name);
  a->set_int64_val(v);
}
void attr_uint64(chakra::Node& c, const std::string& name, uint64_t v) {
  auto* a = c.add_attr();
  a->set_name(name);
  a->set_uint64_val(v);
}
void attr_string(chakra::Node& c, const std::string& name, const std::string& v) {
  auto* a = c.add_attr();
  a->set_name(name);
  a->set_string_val(v);
}

int64_t rounded(double v) { return static_cast<int64_t>(std::llround(v)); }

// Chakra times are whole microseconds. A node that took any time is written as at least 1 us:
// ASTRA-sim reads 0 as "no duration" and replays it in 1 ns.
uint64_t micros(double seconds) {
  const auto us = static_cast<uint64_t>(std::llround(seconds * 1e6));
  return seconds > 0 ? std::max<uint64_t>(us, 1) : us;
}

void set_times(chakra::Node& c, const pb::RankGraph& rank, const pb::ExecNode& n,
               bool needs_duration) {
  if (n.has_start_s()) c.set_start_time_micros(micros(n.start_s()));
  if (n.has_duration_s()) {
    c.set_duration_micros(micros(n.duration_s()));
  } else if (needs_duration) {
    refuse(rank, n,
           "has no duration_s, and ASTRA-sim would replay it in 1 ns; export a graph with a "
           "timeline (`orrery simulate --engine des --chakra`)");
  }
}

void compute(chakra::Node& c, const pb::ExecNode& n) {
  c.set_type(chakra::COMP_NODE);
  attr_int64(c, "num_ops", rounded(n.flops()));
  attr_uint64(c, "tensor_size", static_cast<uint64_t>(rounded(n.bytes_read() + n.bytes_written())));
  attr_string(c, "op_class",
              enum_value_name(*pb::OpClass_descriptor()->FindValueByNumber(n.op_class())));
}

void collective(chakra::Node& c, const pb::RankGraph& rank, const pb::ExecNode& n,
                const std::map<int64_t, ChakraGroup>& groups) {
  c.set_type(chakra::COMM_COLL_NODE);
  attr_int64(c, "comm_type", comm_type(rank, n));
  attr_int64(c, "comm_size", rounded(n.comm_bytes()));
  const auto group = groups.find(n.process_group());
  const std::string pg = "its process group " + std::to_string(n.process_group());
  if (group == groups.end()) refuse(rank, n, pg + " is not in the graph");
  const auto& members = group->second.ranks;
  if (!std::binary_search(members.begin(), members.end(), rank.rank())) {
    refuse(rank, n, pg + " does not hold the rank");
  }
  attr_string(c, "pg_name", std::to_string(group->second.id));
}

void point_to_point(chakra::Node& c, const pb::RankGraph& rank, const pb::ExecNode& n) {
  const bool send = n.kind() == pb::NODE_KIND_SEND;
  if (n.peer() < 0 || n.peer() > kInt32Max || n.tag() < 0 || n.tag() > kInt32Max) {
    refuse(rank, n, "peer and tag must lie in 0..2^31-1 (Chakra stores them as int32)");
  }
  c.set_type(send ? chakra::COMM_SEND_NODE : chakra::COMM_RECV_NODE);
  attr_int32(c, "comm_src", send ? rank.rank() : n.peer());
  attr_int32(c, "comm_dst", send ? n.peer() : rank.rank());
  attr_int32(c, "comm_tag", n.tag());
  attr_int64(c, "comm_size", rounded(n.comm_bytes()));
}

}  // namespace

std::map<int64_t, ChakraGroup> chakra_groups(const pb::ExecGraph& graph) {
  std::map<int64_t, ChakraGroup> groups;
  for (const auto& pg : graph.process_groups()) {
    ChakraGroup g{pg.id() + 1, {pg.ranks().begin(), pg.ranks().end()}};
    std::sort(g.ranks.begin(), g.ranks.end());
    if (pg.id() < 0 || pg.id() >= kInt32Max || !groups.emplace(pg.id(), std::move(g)).second) {
      throw base::InputError("", 0, "process_groups",
                             "Chakra export: process group id " + std::to_string(pg.id()) +
                                 " is negative, repeated or past the int32 range ASTRA-sim reads");
    }
  }
  return groups;
}

std::vector<chakra::Node> chakra_nodes(const pb::RankGraph& rank,
                                       const std::map<int64_t, ChakraGroup>& groups) {
  std::vector<int64_t> last_on_stream(static_cast<size_t>(rank.streams_size()), -1);
  std::vector<chakra::Node> out;
  out.reserve(static_cast<size_t>(rank.nodes_size()));
  for (const auto& n : rank.nodes()) {
    if (n.stream() < 0 || n.stream() >= rank.streams_size()) {
      refuse(rank, n,
             "its stream " + std::to_string(n.stream()) + " is not one of the rank's " +
                 std::to_string(rank.streams_size()) + " streams");
    }
    chakra::Node c;
    c.set_id(static_cast<uint64_t>(n.id()));
    c.set_name(n.name());
    for (int64_t d : n.data_deps()) c.add_data_deps(static_cast<uint64_t>(d));
    for (int64_t d : n.ctrl_deps()) c.add_ctrl_deps(static_cast<uint64_t>(d));
    // Chakra has no streams: a node follows its stream predecessor.
    auto& prev = last_on_stream[static_cast<size_t>(n.stream())];
    if (prev >= 0) c.add_ctrl_deps(static_cast<uint64_t>(prev));
    prev = n.id();
    c.add_attr()->set_name("is_cpu_op");
    c.mutable_attr(0)->set_bool_val(false);
    const bool compute_node = n.kind() == pb::NODE_KIND_COMPUTE;
    set_times(c, rank, n,
              compute_node || (n.kind() == pb::NODE_KIND_COLLECTIVE &&
                               n.collective() == pb::COLLECTIVE_KIND_BROADCAST));
    if (compute_node) {
      compute(c, n);
    } else if (n.kind() == pb::NODE_KIND_COLLECTIVE) {
      collective(c, rank, n, groups);
    } else if (n.kind() == pb::NODE_KIND_SEND || n.kind() == pb::NODE_KIND_RECV) {
      point_to_point(c, rank, n);
    } else {
      refuse(rank, n, "has no node kind");
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace orrery::detail
