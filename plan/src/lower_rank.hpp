// Lowering of one rank: the pipeline schedule drives forward and backward passes of model chunks;
// each layer becomes its ops plus the TP/SP/CP/EP communication they imply (lower_layer.cpp); the
// data-parallel part (gradient buckets, ZeRO/FSDP gathers, optimizer) is lower_data_parallel.cpp.
#pragma once

#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "orrery/models/layer_ops.hpp"
#include "orrery/plan/graph_builder.hpp"
#include "orrery/plan/layer_program.hpp"
#include "orrery/plan/op_tables.hpp"
#include "orrery/plan/pipeline_schedule.hpp"
#include "orrery/plan/rank_layout.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/plan/stage_redistribution.hpp"

namespace orrery::plan::detail {

// Gradients of one unit of parameters that become final at `ready` (a node id).
struct GradReady {
  std::string name;  // "L12", "embed", "head"
  int64_t ready = -1;
  double dense_params = 0;   // reduced over dp (x cp)
  double expert_params = 0;  // reduced over the expert-data-parallel group
};

class RankLowering {
 public:
  // `plan`: the plan as this rank's stage sees it (ResolvedPlan::for_stage when the stages
  // differ), `ops` that stage's op tables; `layout` the whole plan's.
  RankLowering(const ResolvedPlan& plan, const RankLayout& layout, const OpTables& ops,
               int64_t rank, pb::RankGraph* out);
  void run();

 private:
  // Pipeline steps: a chunk's pass is its entry (a receive, or the embedding; the head's
  // backward), its layers and its exit (a send, or the head; the embedding's backward).
  void forward_chunk(int64_t mb, int64_t chunk);
  void backward_chunk(int64_t mb, int64_t chunk);
  int64_t forward_begin(int64_t mb, int64_t chunk);
  void forward_end(int64_t mb, int64_t chunk, int64_t last);
  int64_t backward_begin(int64_t mb, int64_t chunk);
  int64_t backward_layer(int64_t mb, int64_t stage, int64_t l, int64_t last);
  void backward_end(int64_t mb, int64_t chunk, int64_t last);
  // moe_a2a_overlap (lower.cpp, lower_layer.cpp): a steady forward/backward pair merged, and
  // within it one forward layer with one backward layer: their expert all-to-alls on kCommEp,
  // each beside the other pass's compute.
  void merged_pair(const PipeStep& f, const PipeStep& b);
  void merged_layer(const Site& f, int64_t& f_last, const Site& b, int64_t& b_last);
  // Steps [from, to) of a layer program as graph nodes, after `last`; the first compute waits
  // for `gathered` too (a ZeRO copy-out) when it is not -1. Returns the last node.
  int64_t run_steps(const std::vector<Step>& steps, size_t from, size_t to, const Site& site,
                    int64_t last, int64_t gathered = -1);
  // One layer (or embedding/head part) in site.phase: returns the id of its last node.
  int64_t run_program(const std::vector<models::LayerOp>& ops, Site site, int64_t input);
  int64_t ring_attention(const models::LayerOp& op, double bytes, const Site& site, int64_t input);
  // tp_comm_overlap: the GEMM and its TP collective in step.chunks pipelined pieces, the
  // collective's on kCommTp (layer_program.hpp); returns the node what follows waits for.
  int64_t overlapped_gemm(const Step& step, const Site& site, int64_t input, int64_t gathered);
  // Data parallelism (lower_data_parallel.cpp).
  // `key`: the part the site is in (part_key); embedding and head (both layer -1) put their part
  // name in the node name, "mb0.fwd.embed.fsdp.all_gather", so names stay unique in a rank.
  // fsdp_reduce packs the gradients (copy-in) and reduce-scatters them.
  void fsdp_reduce(const Site& site, int64_t key, double params, int64_t input);
  void record_grads(const std::string& name, const std::vector<models::LayerOp>& ops,
                    int64_t ready);
  // ZeRO-1/2: a part's updated shards all-gathered (dense over the gradient group, experts over
  // the expert-data-parallel group), then copied into the part's parameters on the compute
  // stream (copy_part, the executor's copy-out; returns the last copy, or -1 when none).
  struct PartGather {
    std::string name;
    int64_t dense = -1, expert = -1;  // the gathers' nodes (-1: none)
    double dense_params = 0, expert_params = 0;
  };
  PartGather gather_part(const std::string& name, const std::vector<models::LayerOp>& ops,
                         std::vector<int64_t> deps);
  int64_t copy_part(const PartGather& g, int64_t after);
  // Calls f(key, name, ops) for this rank's parts in forward order (key: layer, -1 embedding,
  // -2 head).
  void for_each_part(const std::function<void(int64_t, const std::string&,
                                              const std::vector<models::LayerOp>&)>& f);
  void start_step();
  void finish_step();

  bool fsdp() const;
  double activation_bytes_per_mb() const;  // one micro-batch's hidden states on this rank
  int64_t stage_of(int64_t chunk) const;
  int64_t pipeline_peer(int64_t pp) const;
  int64_t tag(int64_t mb, int64_t stage, bool forward) const;
  // What a pipeline receive waits for before it is posted: the compute stream's last node. A rank
  // posts a receive when its schedule reaches it (Megatron's batched send/recv pairs, the
  // executor's blocking recv), and a transfer starts only once both ends are posted, so the
  // receive of the next micro-batch is exposed on the stage that waits for it.
  std::vector<int64_t> receive_posted_after() const;
  // Stages with their own degrees: this rank's receives of a redistribution (then the
  // all-gather in its TP group when there is one), returning the last node; and its sends.
  int64_t receive_moved(const Site& site, bool forward);
  void send_moved(const Site& site, bool forward, int64_t input);

  const ResolvedPlan& plan_;
  const RankLayout& layout_;
  const OpTables& ops_;
  int64_t rank_;
  RankCoord coord_;
  GraphBuilder b_;
  int64_t stages_;
  // Process-group ids of this rank (-1 when the group has one member).
  int64_t tp_group_, cp_group_, ep_group_, etp_group_, grad_group_, expert_grad_group_, fsdp_group_;
  int64_t replica_group_ = -1;    // HSDP: across shard groups
  std::vector<GradReady> grads_;  // in the order they become final
  // Stages with their own degrees (stage_redistribution.hpp): activations from the previous
  // stage and to the next, gradients from the next and to the previous.
  Redistribution act_in_, act_out_, grad_in_, grad_out_;
  int64_t last_backward_ = -1;
  // ZeRO-1/2 with overlap_param_gather: parameter all-gathers of the previous step, which the
  // first forward of each part copies out and waits for, by part key (part_key).
  std::map<int64_t, PartGather> param_gather_;
  // FSDP: the reduce-scatters so far, in issue order.
  std::vector<int64_t> fsdp_reduces_;
  // FSDP buckets: consecutive units (parts with weights, in forward order within a chunk)
  // gathered and reduced together, up to bucket_bytes (one unit per bucket when it is 0). Keyed
  // by part key (layer, -1 embedding, -2 head).
  struct FsdpBucket {
    double params = 0;
    // What its all-gather carries: params at the compute dtype, fp8 GEMM weights at one byte
    // under fp8_param_gather (torchao's float8 all-gather; plan/fp8.hpp param_gather_bytes).
    double gather_bytes = 0;
    int64_t first =
        0;  // first part in forward order: gathered before its forward, reduced after its backward
    int64_t last = 0;  // last part in forward order: gathered before its backward
    int64_t chunk = 0;
    size_t index = 0;       // in its chunk's buckets, forward order
    bool resident = false;  // stays gathered from its forward to its backward: no backward gather
  };
  std::map<int64_t, FsdpBucket> fsdp_bucket_of_;
  std::vector<std::vector<FsdpBucket>> fsdp_chunks_;  // per chunk, forward order
  // Gathers issued so far: (forward, micro-batch, chunk, bucket index) -> the all-gather's node.
  std::map<std::tuple<bool, int64_t, int64_t, size_t>, int64_t> fsdp_gathers_;
  int64_t issue_fsdp_gather(const FsdpBucket& b, bool forward, const Site& at, int64_t gate);
  // Before a part's pass (site.phase) over `bucket`, at the part where the bucket is gathered:
  // issues its gather and the next prefetch_buckets gathers of the same pass and chunk that are
  // not issued yet (as the executor launches them), and returns the bucket's copy-out.
  int64_t fsdp_gather(const Site& site, const FsdpBucket& bucket, int64_t input);
  void plan_fsdp_buckets();
  int64_t part_key(const std::vector<models::LayerOp>& ops, const Site& site) const;
};

}  // namespace orrery::plan::detail
