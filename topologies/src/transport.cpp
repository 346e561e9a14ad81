// net_devices and the transport kinds' defaults (see transport.hpp).
#include "orrery/topologies/transport.hpp"

#include <algorithm>

#include "orrery/base/error.hpp"

namespace orrery::topologies {

std::optional<TransportDefault> transport_default(pb::TransportKind kind) {
  switch (kind) {
    case pb::TRANSPORT_KIND_INFINIBAND:
      // The baseline: the collective model's network constants and NCCL's hardware latency
      // table (src/graph/tuning.cc, NET 2.7 us, in nic.link.latency_s) are InfiniBand's.
      return TransportDefault{0, 1, "the baseline the collective model was fitted on"};
    case pb::TRANSPORT_KIND_ROCE:
      // NCCL drives RoCE NICs with the same verbs transport and the same tuning table (NCCL's
      // environment docs: the NCCL_IB_* variables, NCCL_IB_GID_INDEX and
      // NCCL_IB_ROCE_VERSION_NUM, apply to RoCE).
      return TransportDefault{0, 1, "NCCL's IB verbs transport, the same on RoCE"};
    default:
      // EFA (SRD through aws-ofi-nccl) and GPUDirect-TCPX/TCPXO: no measurement outside the
      // sources reserved for blind testing was found, so the file must say.
      return std::nullopt;
  }
}

NetDevices net_devices(const pb::NodeType& type) {
  const pb::NicSpec& nic = type.nic();
  NetDevices out;
  out.count = nic.count();
  out.bytes_per_s = nic.link().bandwidth_bytes_per_s();
  out.latency_s = nic.link().latency_s();
  if (!nic.has_transport()) return out;
  const pb::TransportSpec& t = nic.transport();
  const std::optional<TransportDefault> fallback = transport_default(t.kind());
  ORRERY_CHECK(fallback || (t.has_message_latency_s() && t.has_bandwidth_efficiency()),
               "a validated transport without its required fields");
  const double latency =
      t.has_message_latency_s() ? t.message_latency_s() : fallback->message_latency_s;
  const double efficiency =
      t.has_bandwidth_efficiency() ? t.bandwidth_efficiency() : fallback->bandwidth_efficiency;
  const int64_t active = t.has_active_nics() ? t.active_nics() : nic.count();
  out.rails = t.has_nics_per_gpu() ? t.nics_per_gpu()
                                   : std::max<int64_t>(1, active / type.devices_per_node());
  out.count = active / out.rails;
  out.bytes_per_s *= static_cast<double>(out.rails) * efficiency;
  out.latency_s += latency;
  return out;
}

}  // namespace orrery::topologies
