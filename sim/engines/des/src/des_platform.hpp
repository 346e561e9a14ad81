// The SimGrid side of the des engine: configuration and platform (des_platform.cpp).
#pragma once

#include <simgrid/s4u.hpp>

#include "des_internal.hpp"

namespace orrery::sim::des {

// Hosts run compute at this nominal speed: an op of d seconds is an Exec of d * 1e12 flops
// (SimGrid's work-amount precision is absolute, 1e-5, so seconds would be lost).
inline constexpr double kFlopsPerSecond = 1e12;

// SimGrid's precision/timing (its default): a sleep lasts at least this long.
inline constexpr double kSleepPrecisionS = 1e-9;

class FlowZone;

// Hosts (one per simulated rank, with a slowed-down pstate for compute under overlapping
// communication; one flow endpoint per actor and a common sink), one SimGrid link per topology
// edge that some operation uses, and the zone that routes each operation over its links.
class Platform {
 public:
  // Configures SimGrid; call once, right after constructing the Engine.
  Platform(const Model& model, const Router& router, double overlap_slowdown, size_t actors);
  simgrid::s4u::Host* rank_host(size_t rank) const { return ranks_[rank]; }
  simgrid::s4u::Host* endpoint(size_t actor) const { return endpoints_[actor]; }
  // Starts `site`'s action from `actor`'s endpoint: flow_bytes over the site's links, capped at
  // `rate_bytes_per_s` by the actor's private cap link.
  simgrid::s4u::CommPtr start(size_t actor, int32_t site, double bytes, double rate_bytes_per_s);
  // Changes the cap of `actor`'s transfer in flight (SimGrid shares its links anew). At most
  // the rate it started with: SimGrid 3.32 bounds a transfer by its links' bandwidth at its start.
  void set_rate(size_t actor, double rate_bytes_per_s) {
    caps_[actor]->set_bandwidth(rate_bytes_per_s);
  }
  bool slowed() const { return slowdown_ != 1.0; }

 private:
  FlowZone* zone_ = nullptr;
  double slowdown_ = 1.0;
  std::vector<simgrid::s4u::Host*> ranks_, endpoints_;
  simgrid::s4u::Host* sink_ = nullptr;
  std::vector<simgrid::s4u::Link*> caps_;
};

}  // namespace orrery::sim::des
