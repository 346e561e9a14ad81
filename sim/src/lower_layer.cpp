// One layer's steps (layer_program.cpp) turned into graph nodes, and ring attention as the
// cp pieces of the attention core with the KV exchange on its own streams.
#include <algorithm>

#include "layer_program.hpp"
#include "lower_rank.hpp"
#include "orrery/sim/lower.hpp"

namespace orrery::sim::detail {
namespace {

double params_of(const std::vector<models::LayerOp>& ops) {
  double p = 0;
  for (const auto& op : ops) p += op.parameters;
  return p;
}

}  // namespace

int64_t RankLowering::run_program(const std::vector<models::LayerOp>& ops, Site site,
                                  int64_t input) {
  int64_t last = input;
  // Every part with weights is an FSDP unit: decoder layers, and the embedding and head.
  const bool unit = fsdp() && params_of(ops) > 0;
  // With full recomputation the recompute pass already gathered a decoder layer for its backward.
  const bool regathered = site.phase == pb::PHASE_BACKWARD && site.layer >= 0 &&
                          plan_.recompute() == pb::RECOMPUTE_FULL;
  if (unit && !regathered) last = fsdp_gather(site, params_of(ops), last);
  // ZeRO-1/2 with overlapped parameter gathers: the first forward of a layer waits for its
  // parameters, all-gathered after the previous step's optimizer.
  int64_t gathered = -1;
  if (site.phase == pb::PHASE_FORWARD && site.micro_batch == 0) {
    const int64_t key = &ops == &ops_.head ? -2 : site.layer;  // -1 embedding, -2 head
    if (auto it = param_gather_.find(key); it != param_gather_.end()) gathered = it->second;
  }
  for (const Step& step : layer_program(ops, plan_, site.phase)) {
    switch (step.kind) {
      case Step::Kind::kCompute: {
        Site s = site;
        s.phase = step.phase;
        last = b_.compute(s, *step.op, 1.0, {last, gathered});
        gathered = -1;
        break;
      }
      case Step::Kind::kRing: {
        Site s = site;
        s.phase = step.phase;  // selective recomputation re-runs the ring inside a backward
        last = ring_attention(*step.op, step.ring_bytes, s, last);
        break;
      }
      case Step::Kind::kCollective: {
        const int64_t group = step.expert_group ? ep_group_ : tp_group_;
        if (group >= 0) {
          last = b_.collective(site, kCompute, step.name, step.collective, group, step.bytes, {last});
        }
        break;
      }
    }
  }
  if (unit && site.phase == pb::PHASE_BACKWARD) fsdp_reduce(site, params_of(ops), last);
  return last;
}

int64_t RankLowering::ring_attention(const models::LayerOp& op, double bytes, const Site& site,
                                     int64_t input) {
  const int64_t cp = plan_.degrees.cp;
  const auto ring = layout_.group(GroupKind::kCp, rank_);
  const int64_t me = layout_.index_in_group(GroupKind::kCp, rank_);
  const int64_t next = ring[static_cast<size_t>((me + 1) % cp)];
  const int64_t prev = ring[static_cast<size_t>((me + cp - 1) % cp)];
  int64_t last = input;
  int64_t arrived = input;  // the KV block the next piece works on
  for (int64_t step = 0; step < cp; ++step) {
    const std::string suffix = ".ring" + std::to_string(step);
    int64_t received = -1;
    if (step + 1 < cp) {
      // Pass the block just used on while computing with it; ring traffic shares one tag space
      // per (layer, micro-batch, phase, step) so sends and receives pair up in order.
      const int64_t t = ((site.layer * plan_.num_micro_batches + site.micro_batch) * 4 +
                         static_cast<int64_t>(site.phase)) * cp + step;
      b_.send(site, kCommCpSend, op.name + suffix + ".send", next, t, bytes, {arrived});
      received = b_.recv(site, kCommCpRecv, op.name + suffix + ".recv", prev, t, bytes, {});
    }
    last = b_.compute(site, op, 1.0 / static_cast<double>(cp), {last, arrived}, suffix);
    arrived = received;
  }
  return last;
}

}  // namespace orrery::sim::detail
