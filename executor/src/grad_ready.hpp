// When a gradient bucket may be reduced while backward still runs (overlap_grad_reduce), the way
// PyTorch DDP's reducer decides it: a post-hook on each parameter's gradient accumulator (the
// autograd node that adds a backward pass's gradient into .grad) marks the parameter ready; a
// bucket is ready once all its parameters are, and buckets are launched strictly in order (bucket
// i only after 0..i-1), so every rank issues its collectives on a group in the same sequence,
// which Gloo and NCCL match by order.
//
// Only the last backward pass of the step counts (`final_pass()` true: the last micro-batch on
// this stage), since gradients are final only once every micro-batch has accumulated into them.
// A parameter that gets no gradient in that pass (an expert no token was routed to) keeps its
// bucket, and every later one, for launch_rest() after backward. Deferred buckets are never
// launched by the hooks (their gradients need a sum that only runs after backward).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

namespace orrery::executor {

class BucketReadiness {
 public:
  // buckets[i]: the leaf tensors of bucket i (each in one bucket at most). `launch(i)` starts
  // bucket i's collective; it is called at most once per step, in order.
  BucketReadiness(const std::vector<std::vector<torch::Tensor>>& buckets,
                  std::vector<bool> deferred, std::function<bool()> final_pass,
                  std::function<void(size_t)> launch);
  ~BucketReadiness();
  BucketReadiness(const BucketReadiness&) = delete;
  BucketReadiness& operator=(const BucketReadiness&) = delete;

  // Before a step's first backward: nothing ready, nothing launched.
  void reset();
  // After the step's last backward: launches, in order, every bucket not launched yet.
  void launch_rest();
  // Called by the hooks (grad_ready.cpp).
  void ready(size_t param);

 private:
  void launch_ready();

  struct Hooked {
    std::shared_ptr<torch::autograd::Node> accumulator;  // kept alive: the variable holds it weakly
    uintptr_t key = 0;
    size_t bucket = 0;
  };
  std::vector<Hooked> hooked_;
  std::vector<bool> seen_;
  std::vector<int64_t> size_, pending_;
  std::vector<bool> deferred_;
  size_t next_ = 0;  // the first bucket not launched yet
  std::function<bool()> final_pass_;
  std::function<void(size_t)> launch_;
};

}  // namespace orrery::executor
