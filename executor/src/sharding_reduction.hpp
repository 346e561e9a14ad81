// Gradient buckets reduced over the data-parallel groups, as sharding none (all-reduced into the
// full gradients) and ZeRO-1/2 (reduce-scattered into each part's flat chunk) run them: the
// buckets of data_parallel.hpp, all in flight before the first wait, or launched during the last
// backward with overlap_grad_reduce (grad_ready.hpp); the finalize-gradient sums (SP over TP, the
// tied embedding over its two stages) around them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "grad_ready.hpp"
#include "model.hpp"
#include "orrery/executor/train_config.hpp"
#include "process_group.hpp"
#include "sharding_flat.hpp"
#include "sharding_parts.hpp"

namespace orrery::executor {

// A set of parameters reduced over one group (dense over dp, routed experts over edp).
struct Reduction : FlatGroup {  // flats: ZeRO only, one per part, parts order
  bool experts = false;
  std::string group_name;  // "dp", "edp"
  std::vector<ModelPart> parts;
  std::vector<GradBucket> buckets;
  std::vector<std::unique_ptr<Pending>> inflight;  // per bucket, launched and not yet waited
  std::unique_ptr<BucketReadiness> readiness;      // overlap_grad_reduce: launches them in backward
};

class BucketReduction {
 public:
  // `sharded`: ZeRO-1/2, each part's parameters as a flat vector of which this rank owns a chunk.
  BucketReduction(Transformer& model, const RankGroups& groups, const TrainConfig& config,
                  int64_t ep_size, bool sharded);
  BucketReduction(const BucketReduction&) = delete;
  BucketReduction& operator=(const BucketReduction&) = delete;

  // The tensors AdamW updates: per reduction (dense, then experts) the chunks (sharded) or the
  // parameters, then the last stage's copy of a tied embedding (full, never sharded).
  const std::vector<torch::Tensor>& optimized() const { return optimized_; }
  // Dense first, then experts; those with no parameters on this rank left out.
  const std::vector<std::unique_ptr<Reduction>>& reductions() const { return reductions_; }
  std::vector<FlatGroup*> flat_groups() const;

  void zero_grad();
  // After the last backward: every bucket reduced, with the finalize-gradient sums.
  void reduce_gradients();

 private:
  void add_reduction(const RankGroups& groups, bool experts, double divisor, double bucket_params);
  void watch_gradients(const GroupPtr& embedding);  // overlap_grad_reduce's readiness hooks
  void sum_tied_embedding();                        // tied embeddings over the first and last stage
  void reduce(Reduction& r);  // launches the buckets not launched yet, waits for all
  void launch_bucket(Reduction& r, size_t k);  // all-reduce or reduce-scatter bucket k, not waited
  void finish_bucket(Reduction& r, size_t k);  // waits for bucket k and stores its result
  void launch_reduce_scatter(Reduction& r, const GradBucket& b, Pending& p);
  void launch_all_reduce(Reduction& r, const GradBucket& b, Pending& p);

  Transformer& model_;
  std::vector<ShardedParam>& params_;
  GroupPtr tp_, embedding_, dp_;
  bool sharded_ = false;
  bool bf16_grads_ = false;       // grad_reduce_dtype bf16: buckets reduced as bf16 copies
  bool drop_grads_ = false;       // zero2: gradients dropped rather than zeroed between steps
  bool overlap_grad_ = false;     // buckets launched during the last backward (grad_ready.hpp)
  int64_t last_micro_batch_ = 0;  // that backward's micro-batch
  std::vector<std::unique_ptr<Reduction>> reductions_;
  std::vector<torch::Tensor> optimized_;
};

}  // namespace orrery::executor
