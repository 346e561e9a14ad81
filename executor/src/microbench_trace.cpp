// Bench results as a measured trace (see microbench.hpp), and nccl-tests' bus factor.
#include <algorithm>
#include <map>

#include "orrery/executor/microbench.hpp"

namespace orrery::executor {

double bus_factor(pb::CollectiveKind kind, int64_t ranks) {
  const double n = static_cast<double>(ranks);
  switch (kind) {
    case pb::COLLECTIVE_KIND_ALL_REDUCE:
      return 2 * (n - 1) / n;
    case pb::COLLECTIVE_KIND_ALL_GATHER:
    case pb::COLLECTIVE_KIND_REDUCE_SCATTER:
    case pb::COLLECTIVE_KIND_ALL_TO_ALL:
      return (n - 1) / n;
    default:
      return 1;
  }
}

double CollectiveMeasurement::busbw() const { return algbw() * bus_factor(collective, ranks); }

pb::ExecGraph bench_trace(const BenchResults& results, const pb::ClusterSpec& cluster,
                          const std::string& device, const std::string& blas) {
  pb::ExecGraph g;
  g.set_cluster(cluster.name());
  g.set_producer("orrery bench (" + blas + ")");
  g.set_device(device);
  *g.mutable_cluster_spec() = cluster;
  int64_t world = 1;
  for (const auto& c : results.collectives) world = std::max(world, c.ranks);
  g.set_world_size(world);
  // One process group per group size: the first n ranks.
  std::map<int64_t, int64_t> group_of_size;
  for (const auto& c : results.collectives) {
    if (group_of_size.count(c.ranks)) continue;
    pb::ProcessGroup& pg = *g.add_process_groups();
    pg.set_id(static_cast<int64_t>(group_of_size.size()));
    pg.set_dim("bench");
    for (int64_t r = 0; r < c.ranks; ++r) pg.add_ranks(r);
    group_of_size[c.ranks] = pg.id();
  }
  for (int64_t r = 0; r < world; ++r) {
    pb::RankGraph& rank = *g.add_ranks();
    rank.set_rank(r);
    rank.set_device(r);
    if (r > 0) continue;
    rank.add_streams("compute");
    rank.add_streams("comm");
    int64_t id = 0;
    double compute_end = 0;
    for (const auto& m : results.compute) {
      pb::ExecNode& n = *rank.add_nodes();
      n.set_id(id++);
      n.set_name(m.name);
      n.set_kind(pb::NODE_KIND_COMPUTE);
      n.set_stream(0);
      n.set_layer(-1);
      n.set_micro_batch(-1);
      n.set_stage(-1);
      n.set_op_class(m.op_class);
      n.set_op(m.op);
      n.set_flops(m.flops);
      n.set_bytes_read(m.bytes_read);
      n.set_bytes_written(m.bytes_written);
      for (int64_t d : m.shape) n.add_shape(d);
      n.set_dtype("fp32");
      n.set_start_s(m.start_s);
      n.set_duration_s(m.seconds);
      compute_end = std::max(compute_end, m.start_s + m.seconds);
    }
    // The collectives ran after the compute ops; their clock started again.
    for (const auto& c : results.collectives) {
      pb::ExecNode& n = *rank.add_nodes();
      n.set_id(id++);
      n.set_name(c.name);
      n.set_kind(pb::NODE_KIND_COLLECTIVE);
      n.set_stream(1);
      n.set_layer(-1);
      n.set_micro_batch(-1);
      n.set_stage(-1);
      n.set_collective(c.collective);
      n.set_process_group(group_of_size.at(c.ranks));
      n.set_comm_bytes(c.bytes);
      n.set_algorithm(c.algorithm);
      n.set_start_s(compute_end + c.start_s);
      n.set_duration_s(c.seconds);
    }
  }
  return g;
}

}  // namespace orrery::executor
