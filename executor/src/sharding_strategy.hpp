// The three ways DataParallelOptimizer (parallel_sharding.hpp) runs data parallelism, behind one
// interface, so that the façade only picks one and runs a step's phases in order:
//   replicated (sharding none, or no dp group): gradient buckets all-reduced, AdamW on the full
//     tensors (sharding_reduction.cpp);
//   ZeRO-1/2: buckets reduce-scattered into flat chunks, AdamW on the chunks, parameters
//     all-gathered and copied out (sharding_zero.cpp);
//   FSDP/ZeRO-3: parameters live as chunks only, gathered around each part's forward and backward,
//     gradients reduce-scattered during backward (sharding_fsdp.cpp).
// Buckets and flat shards they share are in sharding_reduction.hpp and sharding_flat.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model.hpp"
#include "orrery/executor/train_config.hpp"
#include "process_group.hpp"

namespace orrery::executor {

class ShardingStrategy {
 public:
  virtual ~ShardingStrategy() = default;

  // The tensors AdamW updates, in the order it holds them (its state follows that order).
  virtual std::vector<torch::Tensor> optimized() const = 0;
  // Whether the model must call before_forward/after_forward around each part.
  virtual bool uses_part_hooks() const = 0;

  // Before a step's first forward.
  virtual void zero_grad() = 0;
  // After the step's last backward: every gradient AdamW reads reduced over its data-parallel
  // group and summed where its partial sums live (TP, the tied embedding's two stages).
  virtual void reduce_gradients() = 0;
  // The global gradient norm before clipping; the gradients scaled down to `max_norm`.
  virtual double clip(double max_norm) = 0;
  // After AdamW's step.
  virtual void after_update() {}
  // Puts the full fp32 parameters back into the model (every DP rank calls it), for saving.
  virtual void gather_parameters() = 0;

  virtual void before_forward(const std::string& part) { (void)part; }
  virtual torch::Tensor after_forward(const std::string& part, const torch::Tensor& output) {
    (void)part;
    return output;
  }
};

// The strategies, over `model`'s parameters and `groups` (tp, pp, dp, ep/edp, embedding as
// make_groups built them).
std::unique_ptr<ShardingStrategy> make_replicated_strategy(Transformer& model,
                                                           const RankGroups& groups,
                                                           const TrainConfig& config,
                                                           int64_t ep_size);
std::unique_ptr<ShardingStrategy> make_zero_strategy(Transformer& model, const RankGroups& groups,
                                                     const TrainConfig& config, int64_t ep_size);
std::unique_ptr<ShardingStrategy> make_fsdp_strategy(Transformer& model, const RankGroups& groups,
                                                     const TrainConfig& config);

}  // namespace orrery::executor
