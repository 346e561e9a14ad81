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
//                   its first forward (Megatron's --overlap-param-gather, as the lowering has it).
//                   zero2 also drops the full gradients once reduced; zero1 keeps them to the next
//                   step (the executor reduces after backward, so the two differ in memory after
//                   backward only).
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
//   hsdp:           zero3/fsdp inside each shard group (shard_group_size consecutive dp ranks,
//                   the plan's rank layout's dp_shard groups, as the lowering's): the chunks are
//                   1/shard_group_size of each bucket, gathered and reduce-scattered over the
//                   shard group; after the step's last reduce-scatter the chunks' gradients are
//                   all-reduced across the replica group (the dp ranks holding the same chunk) in
//                   one collective, "opt.hsdp.replica_all_reduce", as the lowering has it, so
//                   they are averaged over all of dp.
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
//
// Where each piece lives: the façade here (parallel_sharding.cpp) picks one strategy
// (sharding_strategy.hpp); grouping into parts and buckets: sharding_parts; flat shards, their
// gathers and copies, the chunks' norm: sharding_flat; gradient buckets and sharding none:
// sharding_reduction; ZeRO-1/2: sharding_zero; FSDP/ZeRO-3: sharding_fsdp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "model.hpp"
#include "orrery/executor/train_config.hpp"
#include "process_group.hpp"
#include "sharding_parts.hpp"

namespace orrery::executor {

class ShardingStrategy;  // sharding_strategy.hpp

struct OptimizerSettings {
  double learning_rate = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double clip_grad_norm = 1.0;
};

// A thin façade: it picks the plan's strategy (sharding_strategy.hpp: replicated, ZeRO-1/2 or
// FSDP), owns the AdamW over the tensors the strategy hands it, and runs a step's phases in order.
class DataParallelOptimizer final : public PartHooks {
 public:
  // Takes over `model`'s parameters (FSDP: replaces them by their chunks and installs itself as
  // the model's part hooks). `groups`: tp, pp, dp, ep/edp, embedding as make_groups built them.
  DataParallelOptimizer(Transformer& model, const RankGroups& groups, const TrainConfig& config,
                        int64_t ep_size);
  ~DataParallelOptimizer() override;
  DataParallelOptimizer(const DataParallelOptimizer&) = delete;
  DataParallelOptimizer& operator=(const DataParallelOptimizer&) = delete;

  // Before a step's first forward.
  void zero_grad();
  // After the step's last backward: gradient reduction, clipping, AdamW, parameter gathers.
  // Returns the global gradient norm before clipping. With `loss_scale` (fp16, loss_scaler.hpp)
  // the reduced gradients are first divided by it and checked for inf/nan on every rank: when
  // any has one, clipping and AdamW are skipped on every rank and the result is nullopt.
  std::optional<double> step(std::optional<double> loss_scale = std::nullopt);
  // FSDP: puts the full parameters back into the model (every DP rank must call it), for saving.
  void gather_parameters();

  // This rank's part of a checkpoint (checkpoint.hpp): the model's parameters as this rank holds
  // them (TP and EP shards, its stage's layers, bf16 runs' rounded copies; none under FSDP, whose
  // parameters live as chunks only), the tensors AdamW updates (full tensors, ZeRO's or FSDP's
  // chunks, bf16 runs' fp32 masters) and AdamW's state (step count, moments). Between steps
  // only; load takes what save wrote under the same plan.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

  // PartHooks (FSDP; ZeRO with overlap_param_gather: waits for the part's parameter gather).
  void before_forward(const std::string& part) override;
  torch::Tensor after_forward(const std::string& part, const torch::Tensor& output) override;

 private:
  Transformer& model_;
  OptimizerSettings opt_;
  GroupPtr world_;  // every rank: where the loss scaler's inf/nan flag is summed
  std::unique_ptr<ShardingStrategy> strategy_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
  bool parameters_are_chunks_ = false;  // FSDP/ZeRO-3: the model's tensors are freed between steps
};

}  // namespace orrery::executor
