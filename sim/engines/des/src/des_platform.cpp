// SimGrid configuration and platform for the des engine.
//
// Configuration (set in code; FIELD-NOTES.md has the measurements behind each):
//   network/model CM02        no LV08 latency x13.01 and bandwidth x0.97 factors
//   network/weight-S 0        flows share a link equally, not weighted by route latency
//   network/TCP-gamma 1e15    no TCP window cap on a flow's rate
//   network/crosstraffic 0    no 5% reverse traffic per flow
//   contexts/stack-size 64 KiB, guard-size 0: thousands of actors
//   logs at critical only (run_engine checks completion itself; a deadlock also makes SimGrid
//   print its one-line critical report)
// Latency is not carried by links (they have none): each operation's alpha comes from the
// collective cost model and is simulated as a sleep, so routes only share bandwidth.
//
// Routing: one zone, the root, whose routes are the operations' own link multisets. SimGrid's
// FullZone keeps an n x n table (2 GB of pointers at 16K hosts) and one route per host pair,
// whereas an operation is many flows; FlowZone instead answers each communication with the
// links of the operation its sender's endpoint is starting (every actor has its own endpoint
// host, and starts one operation at a time).
#include "des_platform.hpp"

#include <xbt/log.h>
#include <simgrid/kernel/routing/NetPoint.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>

#include <cstdlib>
#include <iostream>

namespace orrery::sim::des {

namespace sgr = simgrid::kernel::routing;
using LinkImpl = simgrid::kernel::resource::StandardLinkImpl;

class FlowZone : public sgr::NetZoneImpl {
 public:
  explicit FlowZone(const std::string& name) : NetZoneImpl(name) {}
  struct Next {
    const std::vector<LinkImpl*>* links = nullptr;
    LinkImpl* cap = nullptr;
  };
  std::vector<Next> next;  // by the sender's netpoint id
  std::vector<std::vector<LinkImpl*>> site_links;

  void get_local_route(const sgr::NetPoint* src, const sgr::NetPoint* /*dst*/, sgr::Route* into,
                       double* /*latency*/) override {
    const Next* n = src->id() < next.size() ? &next[src->id()] : nullptr;
    if (n == nullptr || n->links == nullptr) {
      // Only the engine's own endpoints send; anything else is a bug in this file.
      std::cerr << "orrery des: a communication from an unexpected host\n";
      std::abort();
    }
    into->link_list_.insert(into->link_list_.end(), n->links->begin(), n->links->end());
    into->link_list_.push_back(n->cap);
  }
};

namespace {

void configure() {
  using simgrid::s4u::Engine;
  xbt_log_control_set("root.thres:critical");
  Engine::set_config("network/model:CM02");
  Engine::set_config("network/weight-S:0");
  Engine::set_config("network/TCP-gamma:1e15");
  Engine::set_config("network/crosstraffic:0");
  Engine::set_config("contexts/stack-size:64");
  Engine::set_config("contexts/guard-size:0");
}

}  // namespace

Platform::Platform(const Model& model, const Router& router, double overlap_slowdown, size_t actors)
    : slowdown_(overlap_slowdown > 0 ? overlap_slowdown : 1.0) {
  configure();
  zone_ = new FlowZone("orrery");  // the root zone; SimGrid owns it
  simgrid::s4u::NetZone* z = zone_->get_iface();
  std::vector<double> speeds{kFlopsPerSecond};
  if (slowed()) speeds.push_back(kFlopsPerSecond / slowdown_);
  for (int i = 0; i < model.graph.ranks_size(); ++i) {
    ranks_.push_back(
        z->create_host("rank" + std::to_string(model.graph.ranks(i).rank()), speeds)->seal());
  }
  for (size_t a = 0; a < actors; ++a) {
    endpoints_.push_back(z->create_host("endpoint" + std::to_string(a), 1.0)->seal());
    caps_.push_back(z->create_link("cap" + std::to_string(a), 1.0)->set_latency(0)->seal());
  }
  sink_ = z->create_host("sink", 1.0)->seal();
  std::unordered_map<int32_t, LinkImpl*> links;
  for (const Site& s : model.sites) {
    auto& out = zone_->site_links.emplace_back();
    for (int32_t e : s.links) {
      auto it = links.find(e);
      if (it == links.end()) {
        auto* l = z->create_link("edge" + std::to_string(e), router.link(e).bandwidth_bytes_per_s)
                      ->set_latency(0)
                      ->set_sharing_policy(simgrid::s4u::Link::SharingPolicy::SHARED)
                      ->seal();
        it = links.emplace(e, l->get_impl()).first;
      }
      out.push_back(it->second);
    }
  }
  z->seal();
  size_t max_id = 0;
  for (auto* h : endpoints_) max_id = std::max<size_t>(max_id, h->get_netpoint()->id());
  zone_->next.resize(max_id + 1);
}

simgrid::s4u::CommPtr Platform::start(size_t actor, int32_t site, double bytes,
                                      double rate_bytes_per_s) {
  caps_[actor]->set_bandwidth(rate_bytes_per_s);
  auto& next = zone_->next[endpoints_[actor]->get_netpoint()->id()];
  next.links = &zone_->site_links[static_cast<size_t>(site)];
  next.cap = caps_[actor]->get_impl();
  auto comm = simgrid::s4u::Comm::sendto_init(endpoints_[actor], sink_);
  comm->set_payload_size(static_cast<uint64_t>(bytes));
  comm->start();
  return comm;
}

}  // namespace orrery::sim::des
