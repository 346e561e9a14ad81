// ZeRO-3 / FSDP (FSDP2's schedule, as the lowering has it): the parameters live only as flat
// chunks, one flat vector per FSDP bucket (sharding_parts.hpp). A bucket is all-gathered before
// its first part's forward (the next prefetch_buckets ones launched before it is waited for) and
// copied out into the parameters' tensors, which are freed after its last part's forward; it is
// gathered again into the same storages (saved by autograd) before its last part's backward, and
// its gradients are copied in and reduce-scattered after its first part's backward, in every
// micro-batch, one reduce-scatter in flight at a time. HSDP: the same over its shard group, then
// one all-reduce of every chunk's gradient across the replica group.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "sharding_flat.hpp"
#include "sharding_parts.hpp"
#include "sharding_strategy.hpp"

namespace orrery::executor {

// One forward pass of the stage (a micro-batch) and the gathers it launched.
struct FsdpInstance {
  int64_t micro_batch = 0;
  std::vector<std::vector<torch::Tensor>> gathered;  // per bucket: the parameters the forward used
  std::vector<std::unique_ptr<Pending>> forward, backward;
};

// The reduce-scatter in flight (at most one): node name, bucket, the work.
struct FsdpReduce {
  std::string name;
  size_t bucket = 0;
  Pending pending;
};

class FsdpStrategy final : public ShardingStrategy {
 public:
  FsdpStrategy(Transformer& model, const RankGroups& groups, const TrainConfig& c);

  std::vector<torch::Tensor> optimized() const override;
  bool uses_part_hooks() const override { return true; }
  void zero_grad() override;
  void reduce_gradients() override;
  double clip(double max_norm) override {
    return clip_chunks({&shards_}, params_, tp_, pp_, ep_, max_norm);
  }
  void gather_parameters() override;
  void before_forward(const std::string& part) override;
  torch::Tensor after_forward(const std::string& part, const torch::Tensor& output) override;

  // The autograd functions' entry points.
  std::vector<torch::Tensor> forward_gather(int64_t bucket, int64_t instance);
  torch::Tensor reduce_scatter(int64_t bucket, int64_t instance,
                               const std::vector<torch::Tensor>& grads);
  void backward_gather(int64_t bucket, int64_t instance);

 private:
  void add_buckets(const TrainConfig& c);
  void begin_micro_batch();
  void launch(FsdpInstance& inst, size_t bucket, bool backward);
  // Waits for (and times) a bucket's gather; returns it, for the copy-out.
  std::unique_ptr<Pending> finish(FsdpInstance& inst, size_t bucket, bool backward);
  void finish_reduce();       // waits for the reduce-scatter in flight, into its shard's gradient
  void replica_all_reduce();  // HSDP: the chunks' gradients averaged across the replica group
  torch::Tensor copy_in(const FsdpInstance& inst, size_t bucket,
                        const std::vector<torch::Tensor>& grads);
  // The lowering's node name of FSDP node `op` ("fsdp.all_gather", "fsdp.copy_out", ...) of a
  // bucket, at the part where the lowering puts it: the bucket's first part in forward, its last
  // (the first to run) for the backward gather, its first again for the gradients' reduction.
  enum class Site { kForward, kBackwardGather, kReduction };
  std::string node_name(const FsdpInstance& inst, size_t bucket, Site site, const char* op) const;

  std::vector<ShardedParam>& params_;
  GroupPtr tp_, pp_, ep_;
  GroupPtr replica_;   // HSDP: the ranks holding the same chunks (null: FSDP, or one shard group)
  bool bf16_ = false;  // parameters gathered and computed with as bf16 copies
  bool bf16_grads_ = false;  // grad_reduce_dtype bf16: gradients reduced as bf16 copies
  int64_t prefetch_ = 0;
  FlatGroup shards_;  // one flat per bucket, over dp (HSDP: over the shard group)
  // Parts of this stage in forward order, their bucket, and per-micro-batch state.
  std::vector<ModelPart> parts_;
  std::map<std::string, size_t> part_index_;
  std::vector<size_t> bucket_of_part_;
  std::vector<std::pair<size_t, size_t>> buckets_;        // [first part, last part]
  std::vector<bool> resident_;                            // stays gathered to its backward
  std::vector<std::unique_ptr<FsdpInstance>> instances_;  // one per forward of the step
  std::unique_ptr<FsdpReduce> reduce_;                    // the reduce-scatter in flight, if any
};

}  // namespace orrery::executor
