// What a node's scale-out NICs give the collectives once the transport is applied
// (NicSpec.transport, docs/formats.md#transport): how many network devices NCCL sees, what one
// of them carries and what a message pays to cross the network. The topology graph (and so the
// des engine's links and every route's latency) and the collective cost model both read NICs
// through net_devices(), so the two engines cannot disagree about them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "orrery/pb/cluster.pb.h"

namespace orrery::topologies {

struct NetDevices {
  // Network devices per node: the graph's NIC vertices (active NICs / rails).
  int64_t count = 0;
  // NICs striped into one device (a p5 GPU's four EFA NICs); 1 without a transport.
  int64_t rails = 1;
  // One device, per direction: rails x port rate x bandwidth efficiency.
  double bytes_per_s = 0;
  // One message, end to end: the port's latency plus the transport's message latency.
  double latency_s = 0;
};

// The type's NICs as the collectives use them. Without nic.transport: count, port rate and
// latency exactly as written. The type must have been validated (validate_cluster).
NetDevices net_devices(const pb::NodeType& type);

// A transport kind's published default for message_latency_s and bandwidth_efficiency, with
// where it comes from; nullopt when the kind has none (the field is then required).
struct TransportDefault {
  double message_latency_s = 0;
  double bandwidth_efficiency = 1;
  std::string_view source;
};
std::optional<TransportDefault> transport_default(pb::TransportKind kind);

}  // namespace orrery::topologies
