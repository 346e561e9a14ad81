#include "orrery/calibration/checkpoint_fit.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "orrery/base/filesystem_type.hpp"
#include "orrery/base/statistics.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::calibration {
namespace {

using Key = std::tuple<int, int64_t, int64_t>;  // op, step, node

struct NodeEvent {
  CheckpointSample sample;
  std::vector<double> host_rates;
};

std::string tier_name(base::StorageTier tier) {
  switch (tier) {
    case base::StorageTier::kLocalDisk:
      return "local disk";
    case base::StorageTier::kNetwork:
      return "network file system";
    case base::StorageTier::kMemory:
      return "memory";
    case base::StorageTier::kUnknown:
      break;
  }
  return "unknown";
}

// The CheckpointStorage field a save or load on `tier` measures; "" for none.
std::string field_for(pb::CheckpointOp op, base::StorageTier tier) {
  const bool save = op == pb::CHECKPOINT_OP_SAVE;
  if (tier == base::StorageTier::kLocalDisk)
    return save ? "local_write_bytes_per_s" : "local_read_bytes_per_s";
  if (tier == base::StorageTier::kNetwork)
    return save ? "remote_node_bytes_per_s" : "remote_node_read_bytes_per_s";
  return "";
}

CheckpointFitLine line_of(const std::string& field, std::vector<double> values,
                          const std::string& what) {
  std::sort(values.begin(), values.end());
  CheckpointFitLine l;
  l.field = field;
  l.value = base::median(values);
  l.min = values.front();
  l.max = values.back();
  l.samples = static_cast<int64_t>(values.size());
  l.what = what;
  return l;
}

void set_field(pb::CheckpointStorage& storage, const std::string& field, double value) {
  const auto* f = pb::CheckpointStorage::descriptor()->FindFieldByName(field);
  pb::CheckpointStorage::GetReflection()->SetDouble(&storage, f, value);
}

}  // namespace

void add_checkpoint_samples(const pb::ExecGraph& trace, const std::string& file,
                            std::vector<CheckpointSample>& samples,
                            std::vector<std::string>& notes) {
  bool any = false;
  for (const auto& rank : trace.ranks()) any = any || rank.checkpoint_io_size() > 0;
  if (!any) return;
  if (!trace.has_cluster_spec()) {
    notes.push_back(file +
                    ": checkpoint saves and loads left out: the trace has no cluster_spec "
                    "to place its ranks on nodes");
    return;
  }
  const topologies::Topology topology(trace.cluster_spec());
  std::map<Key, NodeEvent> events;
  for (const auto& rank : trace.ranks()) {
    if (rank.device() < 0 || rank.device() >= topology.num_devices()) {
      notes.push_back(file + ": rank " + std::to_string(rank.rank()) +
                      "'s checkpoint times left out: its device is not in the trace's cluster");
      continue;
    }
    const int64_t node = topology.device(rank.device()).node;
    for (const auto& io : rank.checkpoint_io()) {
      if (io.bytes() <= 0 || io.file_s() <= 0) {
        notes.push_back(file + ": rank " + std::to_string(rank.rank()) + "'s checkpoint of step " +
                        std::to_string(io.step()) + " left out: no bytes or no file time");
        continue;
      }
      NodeEvent& e = events[{io.op(), io.step(), node}];
      CheckpointSample& s = e.sample;
      s.op = io.op();
      s.step = io.step();
      if (s.filesystem.empty()) s.filesystem = io.filesystem();
      s.ranks += 1;
      s.node_bytes += io.bytes();
      s.file_s = std::max(s.file_s, io.file_s());
      if (io.host_s() > 0) e.host_rates.push_back(io.bytes() / io.host_s());
      s.source = file + ": node " + std::to_string(node) +
                 (io.op() == pb::CHECKPOINT_OP_SAVE ? ", save after step " : ", load of step ") +
                 std::to_string(io.step());
    }
  }
  for (auto& [key, e] : events) {
    if (!e.host_rates.empty()) e.sample.host_bytes_per_s = base::median(e.host_rates);
    samples.push_back(std::move(e.sample));
  }
}

CheckpointFit fit_checkpoint_storage(const std::vector<CheckpointSample>& samples) {
  CheckpointFit fit;
  std::map<std::string, std::vector<double>> by_field;
  std::map<std::string, std::string> what;
  std::map<std::string, int64_t> left_out;  // "tmpfs (memory)" -> samples
  std::vector<double> host;
  for (const auto& s : samples) {
    const base::StorageTier tier = base::storage_tier(s.filesystem);
    if (s.op == pb::CHECKPOINT_OP_SAVE && s.host_bytes_per_s > 0)
      host.push_back(s.host_bytes_per_s);
    const std::string field = field_for(s.op, tier);
    const std::string fs =
        (s.filesystem.empty() ? std::string("no file system recorded") : s.filesystem) + " (" +
        tier_name(tier) + ")";
    if (field.empty()) {
      left_out[fs] += 1;
      continue;
    }
    by_field[field].push_back(s.node_bytes / s.file_s);
    what[field] = std::string(s.op == pb::CHECKPOINT_OP_SAVE ? "saves" : "loads") + " on " + fs +
                  ": a node's shards over its slowest rank's file time";
  }
  if (!host.empty()) {
    fit.lines.push_back(line_of("host_copy_bytes_per_s", host,
                                "saves: a rank's shard over its time to serialize it to host "
                                "memory"));
  }
  for (const auto& [field, values] : by_field)
    fit.lines.push_back(line_of(field, values, what[field]));
  for (const auto& l : fit.lines) set_field(fit.storage, l.field, l.value);
  for (const auto& [fs, count] : left_out) {
    CheckpointFitLine l;
    l.samples = count;
    l.what = std::to_string(count) + " node save(s)/load(s) on " + fs + " left out: " +
             (fs.find("(memory)") != std::string::npos
                  ? "a memory file system measures RAM, not a disk or a remote store"
                  : "the file system's kind (local disk or remote store) is unknown; checkpoint "
                    "to a local disk or a network file system to measure them");
    fit.lines.push_back(l);
  }
  return fit;
}

}  // namespace orrery::calibration
