// Data parallelism and the optimizer step, as the simulator's lowering runs them
// (plan/src/lower_data_parallel.cpp), each collective timed under its node's name (op_trace.hpp).
// Buckets and parts follow orrery/executor/data_parallel.hpp.
//
//   sharding none:  after the last backward, an all-reduce per gradient bucket
//                   ("opt.dp.bucket<i>.all_reduce"), all in flight before the first wait; AdamW
//                   on the full tensors. With overlap_grad_reduce each bucket is launched during
//                   the last micro-batch's backward as soon as its gradients are final
//                   (grad_ready.hpp, DDP's rule), and waited before the optimizer; the same
//                   holds for zero1/zero2's reduce-scatters.
//   zero1 / zero2:  a reduce-scatter per gradient bucket ("opt.dp.bucket<i>.reduce_scatter"); each
//                   part's parameters are one flat vector padded to a multiple of dp, of which
//                   rank r owns the r-th chunk: it keeps the AdamW state of that chunk only and
//                   updates it (elementwise, so the same numbers as AdamW on the full tensors);
//                   then every part's updated chunks are all-gathered in forward order
//                   ("opt.<part>.param_all_gather"); with overlap_param_gather they are launched
//                   at the start of the next step instead and each part waits for its own before
//                   its first forward (Megatron's --overlap-param-gather, as the lowering has it). zero2 also drops the full gradients once
//                   reduced; zero1 keeps them to the next step (the executor reduces after
//                   backward, so the two differ in memory after backward only).
//   zero3 / fsdp:   the parameters live only as flat chunks (one flat vector per FSDP bucket);
//                   a bucket is all-gathered before its first part's forward and again before
//                   its last part's backward, its gathered copy freed after its last part's
//                   forward and after its gradient is reduce-scattered, which happens after its
//                   first part's backward in every micro-batch ("<site>.fsdp.all_gather",
//                   "<site>.fsdp.reduce_scatter", sites as the lowering names them); FSDP2's
//                   copy-out follows each gather ("<site>.fsdp.copy_out") and its copy-in
//                   precedes each reduce-scatter ("<site>.fsdp.copy_in"), which is left in
//                   flight and waited for before the next one's copy-in or the optimizer. With
//                   prefetch_buckets k, the next k buckets' gathers of the same pass are launched
//                   before a bucket's own gather is waited for. Tied embeddings with the head on
//                   the same rank: the embedding's bucket stays gathered from its forward to its
//                   backward (the LM head reads it), with no backward gather.
//
// Gloo 1.13 has no reduce-scatter: each one runs as alltoall_base (row j of a [dp, n] buffer to
// rank j) followed by a local sum of the dp rows received, which moves the same bytes as a direct
// reduce-scatter; the trace records it as the node's algorithm, "alltoall+sum". Gradients are
// averaged: dense ones over dp, routed experts' over the expert-data-parallel group and then by
// ep (model_moe.hpp), i.e. over dp as well. With pp > 1 and tied embeddings the last stage's copy
// of the embedding matrix is in no bucket (data_parallel.hpp): after the two stages sum its
// gradient it is averaged over dp with its own all-reduce and updated whole, never sharded.
//
// bf16 mixed precision (mixed_precision.hpp), as Megatron's distributed optimizer with bf16 and
// the lowering (grad_bytes 4, param_bytes 2): gradients are reduced in fp32 as in fp32 runs; the
// chunks AdamW updates are fp32 masters (its state fp32 too); the parameter gathers (ZeRO's
// "opt.<part>.param_all_gather", FSDP's "fsdp.all_gather") carry the chunks' bf16 copies, and the
// model computes with those bf16-rounded values (in its fp32 tensors, so that autocast's casts are
// exact and the norms still run in fp32), from the first step on. FSDP buckets are measured in
// bf16 bytes (bucket_bytes / 2 parameters, the lowering's rule). The trace marks those gathers
// "bf16". Saved parameters are the fp32 masters.
//
// The gradient norm for clipping comes from the reduced gradients (the chunks when sharded): sums
// of squares over the data-parallel group, TP-split tensors summed over TP, experts over EP,
// stages over PP; clipping, the norm's all-reduces and AdamW are timed together as "opt.adamw".
// With overlapped reduction the gradients that are partial sums over TP (SP norms, the MoE
// router) are summed over TP after their DP reduction instead of before (sums commute), on the
// chunks when sharded; the first stage's tied embedding (pp > 1) still needs the last stage's
// copy added first, so its bucket is launched only after backward.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model.hpp"
#include "orrery/executor/train_config.hpp"
#include "process_group.hpp"

namespace orrery::executor {

// The parameters of one part ("embed", "L<i>", "head") that a collective covers.
struct ModelPart {
  std::string name;
  int64_t layer = -1;          // decoder layer; -1: embed or head
  std::vector<size_t> params;  // indices into the model's parameters, in model order
  int64_t numel = 0;
};

// This rank's parts in forward order, over its routed-expert parameters (`experts`) or the others.
std::vector<ModelPart> model_parts(const std::vector<ShardedParam>& params, bool experts);

// Gradient buckets: indices into `parts` in backward order, named
// "opt.<group_name>.bucket<i>.<all_reduce|reduce_scatter>".
struct GradBucket {
  std::string name;
  std::vector<size_t> parts;
  int64_t numel = 0;
};
std::vector<GradBucket> gradient_buckets(const std::vector<ModelPart>& parts, double bucket_params,
                                         const std::string& group_name, bool reduce_scatter);

// The lowering's node name of FSDP collective `op` ("fsdp.all_gather") of `part` in micro-batch
// `micro_batch`, phase "fwd" or "bwd": "L3.mb0.fwd.fsdp.all_gather", "mb1.bwd.embed.fsdp.reduce_scatter".
std::string fsdp_node_name(const ModelPart& part, int64_t micro_batch, const char* phase, const std::string& op);

struct OptimizerSettings {
  double learning_rate = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double clip_grad_norm = 1.0;
};

class DataParallelOptimizer final : public PartHooks {
 public:
  // Takes over `model`'s parameters (FSDP: replaces them by their chunks and installs itself as
  // the model's part hooks). `groups`: tp, pp, dp, ep/edp, embedding as make_groups built them.
  DataParallelOptimizer(Transformer& model, const RankGroups& groups, const TrainConfig& config, int64_t ep_size);
  ~DataParallelOptimizer() override;
  DataParallelOptimizer(const DataParallelOptimizer&) = delete;
  DataParallelOptimizer& operator=(const DataParallelOptimizer&) = delete;

  // Before a step's first forward.
  void zero_grad();
  // After the step's last backward: gradient reduction, clipping, AdamW, parameter gathers.
  // Returns the global gradient norm before clipping.
  double step();
  // FSDP: puts the full parameters back into the model (every DP rank must call it), for saving.
  void gather_parameters();

  // PartHooks (FSDP; ZeRO with overlap_param_gather: waits for the part's parameter gather).
  void before_forward(const std::string& part) override;
  torch::Tensor after_forward(const std::string& part, const torch::Tensor& output) override;

  // The autograd functions' entry points (parallel_sharding.cpp).
  std::vector<torch::Tensor> fsdp_forward_gather(int64_t bucket, int64_t instance);
  torch::Tensor fsdp_reduce_scatter(int64_t bucket, int64_t instance, const std::vector<torch::Tensor>& grads);
  void fsdp_backward_gather(int64_t bucket, int64_t instance);

  enum class Mode { kReplicated, kZero, kFsdp };
  // One flat vector of parameters, padded to a multiple of the group size; this rank owns chunk
  // `rank` of it (a leaf the AdamW updates), except in kReplicated mode.
  struct Flat;
  // A set of parameters reduced over one group (dense over dp, routed experts over edp).
  struct Reduction;
  struct Instance;
  struct Pending;
  struct FsdpReduce;

 private:
  void finish_gradients();                    // SP/router gradients over TP, tied embeddings over stages
  void sum_tied_embedding();                  // tied embeddings over the first and last stage
  void sum_tp_partial_chunks();               // SP/router gradients over TP, on the chunks
  void launch_bucket(Reduction& r, size_t k); // all-reduce or reduce-scatter bucket k, not waited
  void finish_bucket(Reduction& r, size_t k); // waits for bucket k and stores its result
  void reduce(Reduction& r);                  // launches the buckets not launched yet, waits all
  void gather_zero();                         // all-gather every part's updated chunks
  void launch_zero_gathers();                 // ... launched, parts in forward order
  void finish_zero_gathers(const std::string& part);  // waits for `part`'s ("": all of them)
  double clip_chunks(double max_norm);        // global norm from the chunks, clipped
  torch::TensorOptions sum_options() const;   // fp64 on the chunks' device, for the norm's sums
  void launch_fsdp_gather(Instance& inst, size_t bucket, bool backward);
  // Waits for (and times) a bucket's gather; returns it, for the copy-out.
  std::unique_ptr<Pending> finish_fsdp_gather(Instance& inst, size_t bucket, bool backward);
  void finish_fsdp_reduce();  // waits for the reduce-scatter in flight, into its shard's gradient
  // The lowering's node name of FSDP node `op` ("fsdp.all_gather", "fsdp.copy_out", ...) of a
  // bucket, at the part where the lowering puts it: the bucket's first part in forward, its last
  // (the first to run) for the backward gather, its first again for the gradients' reduction.
  enum class Site { kForward, kBackwardGather, kReduction };
  std::string fsdp_name(const Instance& inst, size_t bucket, Site site, const char* op) const;

  Transformer& model_;
  std::vector<ShardedParam>& params_;
  GroupPtr tp_, pp_, embedding_, ep_, dp_;
  Mode mode_ = Mode::kReplicated;
  bool zero2_ = false;
  bool bf16_ = false;            // sharded bf16: parameters gathered and computed with as bf16 copies
  bool overlap_grad_ = false;    // buckets launched during the last backward (grad_ready.hpp)
  int64_t last_micro_batch_ = 0; // that backward's micro-batch
  bool overlap_param_gather_ = false;  // ZeRO: gathers launched at the step's start
  struct ZeroGather;
  std::vector<ZeroGather> zero_gathers_;  // launched, not waited for yet
  OptimizerSettings opt_;
  int64_t prefetch_ = 0;
  std::vector<std::unique_ptr<Reduction>> reductions_;  // dense first, then experts
  std::unique_ptr<torch::optim::AdamW> adamw_;
  // FSDP: parts of this stage in forward order, their bucket, and per-micro-batch state.
  std::vector<ModelPart> fsdp_parts_;
  std::map<std::string, size_t> fsdp_part_index_;
  std::vector<size_t> fsdp_bucket_of_part_;
  std::vector<std::pair<size_t, size_t>> fsdp_buckets_;  // [first part, last part]
  std::vector<bool> fsdp_resident_;                      // stays gathered to its backward
  std::vector<std::unique_ptr<Instance>> instances_;     // one per forward of the step
  std::unique_ptr<FsdpReduce> fsdp_reduce_;              // the reduce-scatter in flight, if any
};

}  // namespace orrery::executor
