#include "orrery/sim/checkpoint_model.hpp"
#include "orrery/base/units.hpp"

#include <algorithm>

#include "orrery/sim/memory_model.hpp"
#include "settings.hpp"

namespace orrery::sim {
namespace {

constexpr const char* kAssumed = "default: assumed (docs/goodput.md)";

// Bytes one rank of this stage writes: the optimizer state as the memory model shards it, which
// holds the fp32 master weights under mixed precision; without master weights (fp32 training) the
// weights themselves, sharded as the optimizer state is.
double rank_checkpoint_bytes(const plan::ResolvedPlan& plan, const pb::RankMemory& m) {
  const auto& prec = plan.precision;
  double bytes = m.optimizer_bytes();
  if (prec.master_param_bytes == 0 && prec.optimizer_state_bytes > 0) {
    bytes += m.optimizer_bytes() * prec.param_bytes / prec.optimizer_state_bytes;
  }
  return bytes;
}

// Data-parallel replicas holding the same state: all of dp without sharding, dp / shard group
// with HSDP, one with ZeRO and FSDP (each holds a distinct shard).
double identical_copies(const plan::ResolvedPlan& plan, int64_t dp) {
  switch (plan.sharding()) {
    case pb::SHARDING_NONE:
      return static_cast<double>(dp);
    case pb::SHARDING_HSDP:
      return static_cast<double>(dp) / static_cast<double>(plan.plan.shard_group_size());
    default:
      return 1;
  }
}

// A storage field: the cluster file's, else the calibration's measurement, else the default.
struct Storage {
  std::vector<Setting>& settings;
  const MeasuredStorage& measured;

  double take(const char* name, bool has, double value, double fallback, base::units::Unit unit,
              const char* source) {
    const std::string field = std::string("storage.") + name;
    if (!has && measured.storage != nullptr) {
      const auto* f = pb::CheckpointStorage::descriptor()->FindFieldByName(name);
      const auto* reflection = pb::CheckpointStorage::GetReflection();
      if (f != nullptr && f->type() == google::protobuf::FieldDescriptor::TYPE_DOUBLE &&
          reflection->HasField(*measured.storage, f)) {
        const double v = reflection->GetDouble(*measured.storage, f);
        settings.push_back({field, v, unit, "measured: " + measured.source});
        return v;
      }
    }
    return detail::take_setting(settings, field, has, value, fallback, unit, source);
  }
};

double pcie_bandwidth(const plan::ResolvedPlan& plan) {
  const std::string& type = plan.cluster.node_groups(0).node_type();
  for (const auto& t : plan.cluster.node_types()) {
    if (t.name() == type) return t.intra().pcie_link().bandwidth_bytes_per_s();
  }
  return 0;
}

void fill_sizes(const plan::ResolvedPlan& plan, const Footprint& fp, CheckpointModel& c) {
  const auto memory = memory_per_stage(plan);
  for (int64_t p = 0; p < plan.degrees.pp; ++p) {
    const plan::Degrees& d = plan.stage(p);
    const double rank = rank_checkpoint_bytes(plan, memory[static_cast<size_t>(p)]);
    c.rank_bytes = std::max(c.rank_bytes, rank);
    c.total_bytes += rank * static_cast<double>(d.tp * d.cp * d.dp) / identical_copies(plan, d.dp);
  }
  c.node_bytes = c.total_bytes / static_cast<double>(std::max<int64_t>(1, fp.hosts));
}

}  // namespace

double CheckpointModel::restart_s(bool node_lost, bool spare) const {
  const double reschedule = node_lost ? (spare ? spare_swap_s : requeue_s) : 0;
  return reschedule + process_group_init_s + (node_lost ? load_s : load_local_s) + warmup_s;
}

CheckpointModel checkpoint_model(const plan::ResolvedPlan& plan, const Footprint& fp,
                                 const MeasuredStorage& measured) {
  CheckpointModel c;
  fill_sizes(plan, fp, c);
  const pb::CheckpointStorage& s = plan.cluster.storage();
  Storage st{c.settings, measured};
  const auto bw = base::units::Unit::kBytesPerSecond;
  const auto sec = base::units::Unit::kSeconds;
  const double host_copy =
      st.take("host_copy_bytes_per_s", s.has_host_copy_bytes_per_s(), s.host_copy_bytes_per_s(),
              pcie_bandwidth(plan), bw, "default: the node's pcie_link");
  const double local = st.take("local_write_bytes_per_s", s.has_local_write_bytes_per_s(),
                               s.local_write_bytes_per_s(), 20e9, bw, kAssumed);
  const double node = st.take("remote_node_bytes_per_s", s.has_remote_node_bytes_per_s(),
                              s.remote_node_bytes_per_s(), 50e9, bw, kAssumed);
  const double aggregate = st.take(
      "remote_aggregate_bytes_per_s", s.has_remote_aggregate_bytes_per_s(),
      s.remote_aggregate_bytes_per_s(), 2e12, bw, "default: Llama 3 paper, Tectonic sustained");
  // No request limit unless given: a parallel file system rather than an object store.
  const double requests =
      st.take("remote_requests_per_s", s.has_remote_requests_per_s(), s.remote_requests_per_s(), 0,
              base::units::Unit::kNone, "default: no limit (a file system)");
  const double part = st.take("request_bytes", s.has_request_bytes(), s.request_bytes(), 64e6,
                              base::units::Unit::kBytes, kAssumed);
  c.async = st.take("async_save", s.has_async_save(), s.async_save() ? 1 : 0, 0,
                    base::units::Unit::kNone, "default: blocking save") != 0;
  c.snapshot_s = c.rank_bytes / host_copy;
  c.local_s = c.node_bytes / local;
  const double local_read =
      st.take("local_read_bytes_per_s", s.has_local_read_bytes_per_s(), s.local_read_bytes_per_s(),
              local, bw, "default: local_write_bytes_per_s");
  const double node_read =
      st.take("remote_node_read_bytes_per_s", s.has_remote_node_read_bytes_per_s(),
              s.remote_node_read_bytes_per_s(), node, bw, "default: remote_node_bytes_per_s");
  c.remote_s = std::max(c.node_bytes / node, c.total_bytes / aggregate);
  double remote_read_s = std::max(c.node_bytes / node_read, c.total_bytes / aggregate);
  if (requests > 0) {
    c.remote_s = std::max(c.remote_s, c.total_bytes / part / requests);
    remote_read_s = std::max(remote_read_s, c.total_bytes / part / requests);
  }
  // Staged: written to local NVMe first, then uploaded from there.
  const double persist = c.local_s + c.remote_s;
  c.blocking_s = c.async ? c.snapshot_s : c.snapshot_s + persist;
  c.background_s = c.async ? persist : 0;
  // The staged save leaves the newest checkpoint on every node's NVMe: a restart on the same
  // nodes reads it there; a replacement node has no copy and reads from the remote store.
  c.load_local_s = c.node_bytes / local_read + c.snapshot_s;
  c.load_s = remote_read_s + c.snapshot_s;
  c.spare_nodes = static_cast<int64_t>(st.take("spare_nodes", s.has_spare_nodes(),
                                               static_cast<double>(s.spare_nodes()), 0,
                                               base::units::Unit::kNone, "default: none"));
  c.spare_swap_s =
      st.take("spare_swap_s", s.has_spare_swap_s(), s.spare_swap_s(), 300, sec, kAssumed);
  c.requeue_s = st.take("requeue_s", s.has_requeue_s(), s.requeue_s(), 600, sec, kAssumed);
  c.repair_s = st.take("repair_s", s.has_repair_s(), s.repair_s(), 2 * 86400.0, sec, kAssumed);
  const double pg = st.take("process_group_init_s", s.has_process_group_init_s(),
                            s.process_group_init_s(), 30, sec, kAssumed);
  const double pg_rank =
      st.take("process_group_init_per_rank_s", s.has_process_group_init_per_rank_s(),
              s.process_group_init_per_rank_s(), 2e-3, sec, kAssumed);
  c.process_group_init_s = pg + pg_rank * static_cast<double>(fp.gpus);
  c.process_group_init_fixed_s = pg;
  c.process_group_init_per_rank_s = pg_rank;
  c.warmup_s = st.take("warmup_s", s.has_warmup_s(), s.warmup_s(), 120, sec, kAssumed);
  return c;
}

}  // namespace orrery::sim
