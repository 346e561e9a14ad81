// The lowering driver: sets up each rank and walks its pipeline schedule.
#include "orrery/plan/lower.hpp"

#include <algorithm>

#include "lower_rank.hpp"
#include "orrery/base/error.hpp"
#include "orrery/plan/fp8.hpp"
#include "orrery/plan/moe_routing.hpp"
#include "orrery/plan/pipeline_schedule.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::plan {
namespace detail {

models::ShardContext shard_context(const ResolvedPlan& plan) {
  models::ShardContext ctx;
  ctx.micro_batch = plan.micro_batch_size;
  ctx.seq_len = plan.seq_len;
  ctx.tp = plan.degrees.tp;
  ctx.sequence_parallel = plan.sequence_parallel();
  ctx.cp = plan.degrees.cp;
  ctx.ep = plan.degrees.ep;
  ctx.etp = plan.degrees.etp;
  ctx.ep_dispatch_copies = dispatch_copies(plan);
  ctx.activation_bytes = plan.precision.activation_bytes;
  ctx.param_bytes = plan.precision.param_bytes;
  ctx.moe_imbalance = plan.plan.moe_imbalance();
  ctx.moe_capacity_factor = plan.plan.moe_capacity_factor();
  ctx.moe_pad_to_capacity = plan.plan.moe_pad_to_capacity();
  ctx.flash_attention = plan.plan.attention_kernel() != pb::ATTENTION_KERNEL_MATERIALIZED;
  if (ctx.flash_attention) ctx.attention_kernel = plan.plan.attention_kernel();
  return ctx;
}

namespace {

// The table of layer l's kind, for a const or a mutable OpTables.
template <typename Tables>
auto& table_of(Tables& t, const pb::ModelSpec& m, int64_t l) {
  const bool moe = models::is_moe_layer(m, l);
  if (models::is_local_attention_layer(m, l)) return moe ? t.moe_local_layer : t.dense_local_layer;
  return moe ? t.moe_layer : t.dense_layer;
}

}  // namespace

OpTables make_op_tables(const ResolvedPlan& plan) {
  const auto ctx = shard_context(plan);
  const auto& m = plan.model;
  OpTables t;
  t.embedding = models::layer_ops(m, models::LayerPart::kEmbedding, 0, ctx);
  t.head = models::layer_ops(m, models::LayerPart::kHead, 0, ctx);
  // The first layer of each kind stands for all of them.
  for (int64_t l = 0; l < m.num_layers(); ++l) {
    auto& table = table_of(t, m, l);
    if (table.empty()) table = models::layer_ops(m, models::LayerPart::kDecoder, l, ctx);
  }
  for (auto* ops : {&t.embedding, &t.head, &t.dense_layer, &t.moe_layer, &t.dense_local_layer,
                    &t.moe_local_layer})
    apply_fp8(plan.precision, *ops);
  return t;
}

const std::vector<models::LayerOp>& OpTables::layer(const pb::ModelSpec& m, int64_t l) const {
  return table_of(*this, m, l);
}

RankLowering::RankLowering(const ResolvedPlan& plan, const RankLayout& layout, const OpTables& ops,
                           int64_t rank, pb::RankGraph* out)
    : plan_(plan),
      layout_(layout),
      ops_(ops),
      rank_(rank),
      coord_(layout.coord(rank)),
      b_(out),
      stages_(plan.degrees.pp * plan.degrees.vp) {
  out->set_rank(rank);
  out->set_device(plan.device_of_rank[static_cast<size_t>(rank)]);
  for (auto s : kStreams) out->add_streams(std::string(s));
  if (plan.plan.tp_comm_overlap() || plan.plan.moe_a2a_overlap())
    out->add_streams(std::string(kCommTpName));
  if (plan.plan.moe_a2a_overlap()) out->add_streams(std::string(kCommEpName));
  const auto& d = plan.degrees;
  tp_group_ = layout.group_id(GroupKind::kTp, rank);
  cp_group_ = layout.group_id(GroupKind::kCp, rank);
  ep_group_ = d.ep > 1 ? layout.group_id(GroupKind::kEp, rank) : -1;
  etp_group_ = d.folded() ? layout.group_id(GroupKind::kEtp, rank) : -1;
  // Dense gradients are reduced over every replica of the weights: dp, and cp ranks (which hold
  // the same weights and see different tokens).
  grad_group_ = layout.group_id(d.cp > 1 ? GroupKind::kDpCp : GroupKind::kDp, rank);
  expert_grad_group_ = plan.model.has_moe() ? layout.group_id(GroupKind::kEdp, rank) : -1;
  fsdp_group_ = -1;
  if (fsdp()) {
    const bool hsdp = plan.sharding() == pb::SHARDING_HSDP;
    // FSDP shards over every replica of the weights, as it reduces over them (torchtitan's
    // dp_shard x cp mesh); HSDP over its shard group (dp ranks with their CP ranks too).
    fsdp_group_ = layout.group_id(
        hsdp ? GroupKind::kDpShard : (d.cp > 1 ? GroupKind::kDpCp : GroupKind::kDp), rank);
    if (hsdp) replica_group_ = layout.group_id(GroupKind::kDpReplica, rank);
  }
  if (!plan.uniform_stages()) {
    const int64_t p = coord_.pp;
    if (p > 0)
      act_in_ = redistribute(plan, layout, p - 1, p),
      grad_out_ = redistribute(plan, layout, p, p - 1);
    if (p + 1 < d.pp)
      act_out_ = redistribute(plan, layout, p, p + 1),
      grad_in_ = redistribute(plan, layout, p + 1, p);
  }
}

int64_t RankLowering::receive_moved(const Site& site, bool forward) {
  const Redistribution& move = forward ? act_in_ : grad_in_;
  const std::string what = forward ? "recv.act" : "recv.grad";
  int64_t last = -1;
  for (const auto& t : move.receives_of(rank_)) {
    last = b_.recv(site, forward ? kRecvPrev : kRecvNext, what + ".from" + std::to_string(t.from),
                   t.from, tag(site.micro_batch, site.stage, forward), t.bytes,
                   receive_posted_after());
  }
  // Same-stream receives finish in order, so the all-gather waits for the last one.
  if (move.gather_bytes > 0 && tp_group_ >= 0) {
    last = b_.collective(site, kCompute, what + ".all_gather", pb::COLLECTIVE_KIND_ALL_GATHER,
                         tp_group_, move.gather_bytes, {last});
  }
  return last;
}

void RankLowering::send_moved(const Site& site, bool forward, int64_t input) {
  const Redistribution& move = forward ? act_out_ : grad_out_;
  const int64_t to_stage = site.stage + (forward ? 1 : -1);
  for (const auto& t : move.sends_of(rank_)) {
    b_.send(site, forward ? kSendNext : kSendPrev,
            std::string(forward ? "send.act" : "send.grad") + ".to" + std::to_string(t.to), t.to,
            tag(site.micro_batch, to_stage, forward), t.bytes, {input});
  }
}

bool RankLowering::fsdp() const { return shards_parameters(plan_.sharding()); }

double RankLowering::activation_bytes_per_mb() const {
  const auto& d = plan_.degrees;
  double tokens = static_cast<double>(plan_.micro_batch_size * plan_.seq_len / d.cp);
  if (plan_.sequence_parallel()) tokens /= static_cast<double>(d.tp);
  return tokens * static_cast<double>(plan_.model.hidden_size()) * plan_.precision.activation_bytes;
}

std::vector<int64_t> RankLowering::receive_posted_after() const {
  const int64_t last = b_.last_on(kCompute);
  return last >= 0 ? std::vector<int64_t>{last} : std::vector<int64_t>{};
}

int64_t RankLowering::stage_of(int64_t chunk) const { return chunk * plan_.degrees.pp + coord_.pp; }

int64_t RankLowering::pipeline_peer(int64_t pp) const {
  RankCoord c = coord_;
  c.pp = (pp + plan_.degrees.pp) % plan_.degrees.pp;
  return layout_.rank(c);
}

int64_t RankLowering::tag(int64_t mb, int64_t stage, bool forward) const {
  return (mb * stages_ + stage) * 2 + (forward ? 0 : 1);
}

int64_t RankLowering::forward_begin(int64_t mb, int64_t chunk) {
  const int64_t s = stage_of(chunk);
  Site site{pb::PHASE_FORWARD, -1, mb, s};
  if (s == 0) return run_program(ops_.embedding, site, -1);
  if (!plan_.uniform_stages()) return receive_moved(site, true);
  return b_.recv(site, kRecvPrev, pipeline_transfer_name("recv.act", s, plan_.degrees.vp),
                 pipeline_peer(coord_.pp - 1), tag(mb, s, true), activation_bytes_per_mb(),
                 receive_posted_after());
}

void RankLowering::forward_end(int64_t mb, int64_t chunk, int64_t last) {
  const int64_t s = stage_of(chunk);
  Site site{pb::PHASE_FORWARD, -1, mb, s};
  if (s == stages_ - 1) {
    run_program(ops_.head, site, last);
  } else if (!plan_.uniform_stages()) {
    send_moved(site, true, last);
  } else {
    b_.send(site, kSendNext, pipeline_transfer_name("send.act", s, plan_.degrees.vp),
            pipeline_peer(coord_.pp + 1), tag(mb, s + 1, true), activation_bytes_per_mb(), {last});
  }
}

void RankLowering::forward_chunk(int64_t mb, int64_t chunk) {
  const int64_t s = stage_of(chunk);
  int64_t last = forward_begin(mb, chunk);
  Site site{pb::PHASE_FORWARD, -1, mb, s};
  const int64_t first = plan_.first_layer(s);
  for (int64_t l = first; l < first + plan_.layers_per_stage[static_cast<size_t>(s)]; ++l) {
    site.layer = l;
    last = run_program(ops_.layer(plan_.model, l), site, last);
  }
  forward_end(mb, chunk, last);
}

int64_t RankLowering::backward_begin(int64_t mb, int64_t chunk) {
  const int64_t s = stage_of(chunk);
  Site site{pb::PHASE_BACKWARD, -1, mb, s};
  if (s == stages_ - 1) {
    const int64_t last = run_program(ops_.head, site, b_.last_on(kCompute));
    if (mb == plan_.num_micro_batches - 1) record_grads("head", ops_.head, last);
    return last;
  }
  if (!plan_.uniform_stages()) return receive_moved(site, false);
  return b_.recv(site, kRecvNext, pipeline_transfer_name("recv.grad", s, plan_.degrees.vp),
                 pipeline_peer(coord_.pp + 1), tag(mb, s, false), activation_bytes_per_mb(),
                 receive_posted_after());
}

int64_t RankLowering::backward_layer(int64_t mb, int64_t stage, int64_t l, int64_t last) {
  const auto& ops = ops_.layer(plan_.model, l);
  if (plan_.recomputes_layer(l)) {
    // Re-run the layer's forward from its saved input just before its backward.
    last = run_program(ops, {pb::PHASE_RECOMPUTE, l, mb, stage}, last);
  }
  last = run_program(ops, {pb::PHASE_BACKWARD, l, mb, stage}, last);
  if (mb == plan_.num_micro_batches - 1) record_grads("L" + std::to_string(l), ops, last);
  return last;
}

void RankLowering::backward_end(int64_t mb, int64_t chunk, int64_t last) {
  const int64_t s = stage_of(chunk);
  Site site{pb::PHASE_BACKWARD, -1, mb, s};
  if (s == 0) {
    last = run_program(ops_.embedding, site, last);
    if (mb == plan_.num_micro_batches - 1) record_grads("embed", ops_.embedding, last);
  } else if (!plan_.uniform_stages()) {
    send_moved(site, false, last);
  } else {
    b_.send(site, kSendPrev, pipeline_transfer_name("send.grad", s, plan_.degrees.vp),
            pipeline_peer(coord_.pp - 1), tag(mb, s - 1, false), activation_bytes_per_mb(), {last});
  }
  last_backward_ = last;
}

void RankLowering::backward_chunk(int64_t mb, int64_t chunk) {
  const int64_t s = stage_of(chunk);
  int64_t last = backward_begin(mb, chunk);
  const int64_t first = plan_.first_layer(s);
  for (int64_t l = first + plan_.layers_per_stage[static_cast<size_t>(s)] - 1; l >= first; --l)
    last = backward_layer(mb, s, l, last);
  backward_end(mb, chunk, last);
}

// moe_a2a_overlap: a steady forward and the backward after it, merged as Megatron-core's
// combined 1F1B runs them (schedule_chunk_1f1b): both passes' entries (receives, or the embedding
// and the head's backward), then layer i of the forward with layer n - 1 - i of the backward
// (merged_layer) for as many layers as both chunks have, the rest of the backward's layers and
// of the forward's alone, then both passes' exits.
void RankLowering::merged_pair(const PipeStep& f, const PipeStep& b) {
  const int64_t fs = stage_of(f.chunk), bs = stage_of(b.chunk);
  int64_t f_last = forward_begin(f.micro_batch, f.chunk);
  int64_t b_last = backward_begin(b.micro_batch, b.chunk);
  const int64_t f_first = plan_.first_layer(fs), b_first = plan_.first_layer(bs);
  const int64_t nf = plan_.layers_per_stage[static_cast<size_t>(fs)];
  const int64_t nb = plan_.layers_per_stage[static_cast<size_t>(bs)];
  const int64_t both = std::min(nf, nb);
  for (int64_t i = 0; i < both; ++i) {
    merged_layer({pb::PHASE_FORWARD, f_first + i, f.micro_batch, fs}, f_last,
                 {pb::PHASE_BACKWARD, b_first + nb - 1 - i, b.micro_batch, bs}, b_last);
  }
  for (int64_t i = both; i < nb; ++i)
    b_last = backward_layer(b.micro_batch, bs, b_first + nb - 1 - i, b_last);
  for (int64_t i = both; i < nf; ++i) {
    const int64_t l = f_first + i;
    f_last =
        run_program(ops_.layer(plan_.model, l), {pb::PHASE_FORWARD, l, f.micro_batch, fs}, f_last);
  }
  forward_end(f.micro_batch, f.chunk, f_last);
  backward_end(b.micro_batch, b.chunk, b_last);
}

void RankLowering::run() {
  const auto& d = plan_.degrees;
  const bool combined = plan_.plan.moe_a2a_overlap();
  const auto order =
      pipeline_order(plan_.schedule(), d.pp, d.vp, coord_.pp, plan_.num_micro_batches, combined);
  const int64_t warm_up = combined ? warmup_passes(plan_.schedule(), d.pp, d.vp, coord_.pp,
                                                   plan_.num_micro_batches, true)
                                   : 0;
  start_step();
  for (size_t i = 0; i < order.size(); ++i) {
    const PipeStep& step = order[i];
    // The combined schedule's steady state: each forward after the warm-up with the backward
    // listed right after it.
    if (combined && static_cast<int64_t>(i) >= warm_up && step.forward && i + 1 < order.size() &&
        !order[i + 1].forward) {
      merged_pair(step, order[i + 1]);
      ++i;
    } else if (step.forward) {
      forward_chunk(step.micro_batch, step.chunk);
    } else {
      backward_chunk(step.micro_batch, step.chunk);
    }
  }
  finish_step();
}

}  // namespace detail

std::vector<int64_t> representative_ranks(const ResolvedPlan& plan) {
  const RankLayout layout = rank_layout(plan);
  std::vector<int64_t> out;
  for (int64_t p = 0; p < plan.degrees.pp; ++p) out.push_back(layout.rank({0, 0, 0, p}));
  return out;
}

pb::ExecGraph lower(const ResolvedPlan& plan, const LowerOptions& options) {
  // moe_a2a_overlap's merged pairs are built from the layer programs alone (merged_layer); FSDP's
  // per-bucket gathers and reductions hang on whole passes and are not placed in the merged
  // order yet, so such a graph would not be the plan: refused, naming the field.
  const auto sharding = plan.sharding();
  if (plan.plan.moe_a2a_overlap() && shards_parameters(sharding)) {
    throw base::InputError(
        "", 0, "moe_a2a_overlap",
        "the execution graph does not merge forward/backward pairs under "
        "sharding " +
            enum_value_name(*pb::Sharding_descriptor()->FindValueByNumber(sharding)) +
            " (FSDP's gathers) yet; the analytic engine prices the plan");
  }
  const RankLayout layout = rank_layout(plan);
  const detail::OpTables ops = detail::make_op_tables(plan);
  // Stages with their own degrees: each stage's view of the plan and its ops, made once.
  std::vector<ResolvedPlan> views;
  std::vector<detail::OpTables> view_ops;
  if (!plan.uniform_stages()) {
    for (int64_t p = 0; p < plan.degrees.pp; ++p) {
      views.push_back(plan.for_stage(p));
      view_ops.push_back(detail::make_op_tables(views.back()));
    }
  }
  pb::ExecGraph g;
  g.set_model(plan.model.name());
  g.set_cluster(plan.cluster.name());
  g.set_producer("orrery sim lowering");
  g.set_world_size(plan.world_size());
  g.set_steps(1);
  for (auto& pg : layout.process_groups()) *g.add_process_groups() = std::move(pg);
  std::vector<int64_t> ranks = options.ranks;
  if (ranks.empty()) {
    for (int64_t r = 0; r < plan.world_size(); ++r) ranks.push_back(r);
  }
  for (int64_t r : ranks) {
    ORRERY_CHECK(r >= 0 && r < plan.world_size(), "rank to lower out of range");
    if (plan.uniform_stages()) {
      detail::RankLowering(plan, layout, ops, r, g.add_ranks()).run();
    } else {
      const auto p = static_cast<size_t>(layout.coord(r).pp);
      detail::RankLowering(views[p], layout, view_ops[p], r, g.add_ranks()).run();
    }
  }
  return g;
}

}  // namespace orrery::plan
