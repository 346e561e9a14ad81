// One layer's steps (layer_program.cpp) turned into graph nodes, and ring attention as the
// cp pieces of the attention core with the KV exchange on its own streams.
#include <algorithm>

#include "lower_rank.hpp"
#include "orrery/base/error.hpp"
#include "orrery/plan/layer_program.hpp"
#include "orrery/plan/lower.hpp"

namespace orrery::plan::detail {
namespace {}  // namespace

int64_t RankLowering::run_program(const std::vector<models::LayerOp>& ops, Site site,
                                  int64_t input) {
  int64_t last = input;
  // FSDP: every part with weights is a unit, grouped into buckets (plan_fsdp_buckets). A bucket
  // is gathered at its first unit in forward order before the forward, and at its first unit in
  // backward order before the backward pass touches it (the recompute, under full
  // recomputation, for decoder layers); it is reduce-scattered after its last unit's backward.
  const FsdpBucket* bucket = nullptr;
  if (fsdp()) {
    if (auto it = fsdp_bucket_of_.find(part_key(ops, site)); it != fsdp_bucket_of_.end())
      bucket = &it->second;
  }
  if (bucket != nullptr) {
    const int64_t key = part_key(ops, site);
    const bool recomputed = site.layer >= 0 && plan_.recomputes_layer(site.layer);
    const bool gather = site.phase == pb::PHASE_FORWARD ? key == bucket->first
                        : site.phase == pb::PHASE_RECOMPUTE
                            ? key == bucket->last && !bucket->resident
                            : key == bucket->last && !recomputed && !bucket->resident;
    if (gather) last = fsdp_gather(site, *bucket, last);
  }
  // ZeRO-1/2 with overlapped parameter gathers: the first forward of a part copies out its
  // parameters, all-gathered after the previous step's optimizer, and waits for them.
  int64_t gathered = -1;
  if (site.phase == pb::PHASE_FORWARD && site.micro_batch == 0) {
    if (auto it = param_gather_.find(part_key(ops, site)); it != param_gather_.end())
      gathered = copy_part(it->second, last);
  }
  const std::vector<Step> steps = layer_program(ops, plan_, site.phase);
  last = run_steps(steps, 0, steps.size(), site, last, gathered);
  if (bucket != nullptr && site.phase == pb::PHASE_BACKWARD &&
      part_key(ops, site) == bucket->first) {
    fsdp_reduce(site, part_key(ops, site), bucket->params, last);
  }
  return last;
}

int64_t RankLowering::run_steps(const std::vector<Step>& steps, size_t from, size_t to,
                                const Site& site, int64_t last, int64_t gathered) {
  for (size_t i = from; i < to; ++i) {
    const Step& step = steps[i];
    switch (step.kind) {
      case Step::Kind::kCompute: {
        Site s = site;
        s.phase = step.phase;
        last = b_.compute(s, *step.op, step.work_fraction, {last, gathered}, step.name);
        gathered = -1;
        break;
      }
      case Step::Kind::kRing: {
        Site s = site;
        s.phase = step.phase;  // selective recomputation re-runs the ring inside a backward
        last = ring_attention(*step.op, step.ring_bytes, s, last);
        break;
      }
      case Step::Kind::kOverlapped: {
        last = overlapped_gemm(step, site, last, gathered);
        gathered = -1;
        break;
      }
      case Step::Kind::kCollective: {
        const int64_t group = step.group == Step::Group::kEp    ? ep_group_
                              : step.group == Step::Group::kEtp ? etp_group_
                                                                : tp_group_;
        if (group >= 0) {
          Site s = site;
          if (step.phase == pb::PHASE_RECOMPUTE) s.phase = step.phase;
          last = b_.collective(s, kCompute, step.name, step.collective, group, step.bytes, {last});
        }
        break;
      }
    }
  }
  return last;
}

// moe_a2a_overlap: forward layer `f` and backward layer `b` in Megatron-core's four steps
// (combined_1f1b.py, schedule_layer_1f1b): on the compute stream the backward's part after its
// combine (residual), the forward's attention (up to its dispatch), the backward's experts, the
// forward's experts, the backward's attention, the forward's part after its combine; on kCommEp
// the backward's combine all-to-all, the forward's dispatch, the backward's dispatch and the
// forward's combine, each after its own pass's compute before it and waited for by its own
// pass's compute after it. So each all-to-all runs beside the other pass's compute piece. A layer
// without both all-to-alls (a dense layer, or no expert parallelism) runs its forward, then its
// backward.
void RankLowering::merged_layer(const Site& f, int64_t& f_last, const Site& b, int64_t& b_last) {
  const auto& f_ops = ops_.layer(plan_.model, f.layer);
  const auto& b_ops = ops_.layer(plan_.model, b.layer);
  // Neither pass of a steady pair is a part's first forward, the one that copies out ZeRO's
  // gathered parameters, nor a recomputed layer (a rule refuses full recomputation).
  ORRERY_CHECK(f.micro_batch > 0 || param_gather_.count(f.layer) == 0,
               "a merged forward copies out gathered parameters");
  ORRERY_CHECK(!plan_.recomputes_layer(b.layer), "a merged backward recomputes its layer");
  const std::vector<Step> fs = layer_program(f_ops, plan_, pb::PHASE_FORWARD);
  const std::vector<Step> bs = layer_program(b_ops, plan_, pb::PHASE_BACKWARD);
  auto all_to_alls = [&](const std::vector<Step>& steps) {
    std::vector<size_t> at;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].kind == Step::Kind::kCollective && steps[i].group == Step::Group::kEp)
        at.push_back(i);
    }
    return at;
  };
  const std::vector<size_t> fa = all_to_alls(fs), ba = all_to_alls(bs);
  if (ep_group_ < 0 || fa.size() != 2 || ba.size() != 2) {
    f_last = run_steps(fs, 0, fs.size(), f, f_last);
    b_last = run_steps(bs, 0, bs.size(), b, b_last);
  } else {
    auto a2a = [&](const Step& step, const Site& site, int64_t after) {
      return b_.collective(site, kCommEp, step.name, step.collective, ep_group_, step.bytes,
                           {after});
    };
    b_last = run_steps(bs, 0, ba[0], b, b_last);
    const int64_t b_combine = a2a(bs[ba[0]], b, b_last);
    f_last = run_steps(fs, 0, fa[0], f, f_last);
    const int64_t f_dispatch = a2a(fs[fa[0]], f, f_last);
    b_last = run_steps(bs, ba[0] + 1, ba[1], b, b_combine);
    const int64_t b_dispatch = a2a(bs[ba[1]], b, b_last);
    f_last = run_steps(fs, fa[0] + 1, fa[1], f, f_dispatch);
    const int64_t f_combine = a2a(fs[fa[1]], f, f_last);
    b_last = run_steps(bs, ba[1] + 1, bs.size(), b, b_dispatch);
    f_last = run_steps(fs, fa[1] + 1, fs.size(), f, f_combine);
  }
  if (b.micro_batch == plan_.num_micro_batches - 1)
    record_grads("L" + std::to_string(b.layer), b_ops, b_last);
}

int64_t RankLowering::overlapped_gemm(const Step& step, const Site& site, int64_t input,
                                      int64_t gathered) {
  Site s = site;
  s.phase = step.phase;
  const int64_t n = step.chunks;
  const double piece = 1.0 / static_cast<double>(n);
  auto comm = [&](int64_t i, int64_t after) {
    return b_.collective(s, kCommTp, step.name + ".chunk" + std::to_string(i), step.collective,
                         tp_group_, step.bytes * piece, {after});
  };
  auto gemm = [&](int64_t i, std::vector<int64_t> deps) {
    return b_.compute(s, *step.op, piece, std::move(deps), ".chunk" + std::to_string(i));
  };
  int64_t last = input;
  if (step.comm_first) {
    // All pieces of the all-gather launched at once (in order on their stream); GEMM piece i
    // waits for gathered piece i.
    std::vector<int64_t> pieces;
    for (int64_t i = 0; i < n; ++i) pieces.push_back(comm(i, input));
    for (int64_t i = 0; i < n; ++i)
      last = gemm(i, {last, pieces[static_cast<size_t>(i)], gathered});
    return last;
  }
  // Reduce-scatter piece i as soon as GEMM piece i is done; what follows waits for the last.
  int64_t computed = input;
  for (int64_t i = 0; i < n; ++i) {
    computed = gemm(i, {computed, gathered});
    last = comm(i, computed);
  }
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
                         static_cast<int64_t>(site.phase)) *
                            cp +
                        step;
      b_.send(site, kCommCpSend, op.name + suffix + ".send", next, t, bytes, {arrived});
      received = b_.recv(site, kCommCpRecv, op.name + suffix + ".recv", prev, t, bytes, {});
    }
    last = b_.compute(site, op, 1.0 / static_cast<double>(cp), {last, arrived}, suffix);
    arrived = received;
  }
  return last;
}

}  // namespace orrery::plan::detail
