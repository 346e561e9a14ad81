// Flat shards and the collectives in flight over them, shared by the three data-parallel
// strategies (sharding_strategy.hpp): the flat vectors ZeRO and FSDP shard parameters into, the
// parameter all-gathers and their copy-outs, a collective's timing from launch to wait, and the
// storage tricks FSDP frees and refills its gathered parameters with.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model.hpp"
#include "op_trace.hpp"
#include "process_group.hpp"

namespace orrery::executor {

using Clock = TraceClock;  // op_trace.hpp: the trace's clock (CUDA events on a GPU)

// What a reduce-scatter really runs on Gloo 1.13 (recorded in the measured trace).
inline constexpr const char* kReduceScatterAlgorithm = "alltoall+sum";

// A collective launched and not waited for yet.
struct Pending {
  c10::intrusive_ptr<c10d::Work> work;
  std::vector<std::vector<torch::Tensor>> outputs;
  std::vector<torch::Tensor> inputs;
  Clock::time_point launched;
  // Polled at every op boundary while it is in flight (OpTrace::watch): where it was first seen
  // complete, when that was before the rank waited for it.
  std::shared_ptr<const OpTrace::Watch> watch;

  // Once `work` and `launched` are set: polls the work from the next boundary on.
  void watch_work();
};

// Waits for `p`, then runs `then` (the local part of the collective), and times it as `name`:
// from its launch to the first op boundary it was seen complete at (or to now, when it was not),
// then the wait and `then` as a scope (which pauses an open backward segment).
void wait_timed(Pending& p, const std::string& name, const std::function<void()>& then = {});

// What a bf16 gradient all-reduce runs on Gloo 1.13 (recorded in the measured trace).
inline constexpr const char* kBf16AllReduceAlgorithm = "alltoall+sum+allgather";

// Starts a reduce-scatter of `input` (contiguous fp32 [size, width], row j to rank j) as
// alltoall_base into `p` (Gloo 1.13 has no reduce-scatter): the caller sums the size rows
// received (received_rows) once it finished, which moves the same bytes as a direct
// reduce-scatter. `bf16` (grad_reduce_dtype bf16): the rows travel as bf16 copies (carried as fp16
// bytes, mixed_precision.hpp), half the bytes, as the lowering's grad_reduce_bytes 2 has it.
// Stamps and watches nothing.
void start_reduce_scatter(Pending& p, const GroupPtr& group, const torch::Tensor& input,
                          bool bf16 = false);
// The [size, width] rows a finished reduce-scatter received, in fp32 (bf16 ones upcast): summed
// in fp32, so bf16 reduction rounds each rank's contribution once and accumulates in fp32.
torch::Tensor received_rows(const Pending& p);

// Starts an all-reduce (sum) of the flat fp32 vector `input` over `group` into `p`: Gloo's
// all-reduce, or (`bf16`) a ring all-reduce's two halves on bf16 copies, of which this starts the
// first (an alltoall of `input` padded to size equal pieces). all_reduced finishes it.
void start_all_reduce(Pending& p, const GroupPtr& group, const torch::Tensor& input, bool bf16);
// The finished all-reduce's sum in fp32. bf16: the pieces received summed in fp32, this rank's
// piece rounded to bf16 once and all-gathered (the second half, 2 (n - 1) / n of the bf16 bytes in
// all, as NCCL's bf16 ring), upcast.
// `numel`: the input's.
torch::Tensor all_reduced(Pending& p, const GroupPtr& group, int64_t numel, bool bf16);

// One flat vector of parameters, padded to a multiple of the group size; this rank owns chunk
// `rank` of it (a leaf the AdamW updates).
struct Flat {
  // A run of the chunk for the gradient norm: [start, start + length) of the chunk, `kind` as
  // clip_gradients sums it (0 TP-split, 1 replicated, 2 expert TP-split, 3 expert replicated).
  struct Segment {
    int64_t start = 0, length = 0;
    int kind = 0;
  };
  std::vector<size_t> params;  // model indices, in flat order
  std::vector<int64_t> offsets;
  std::vector<std::vector<int64_t>> shapes;
  int64_t numel = 0, chunk = 0, size = 1, rank = 0;
  torch::Tensor shard;             // this rank's chunk: the leaf AdamW updates
  std::vector<Segment> segments;   // counted in the norm (pipeline copies left out)
  std::vector<Segment> tp_summed;  // gradients summed over TP (SP norms, MoE partial sums)

  // The parameters' gradients as one vector of size x chunk (zero padding at the end).
  torch::Tensor padded_grad(const std::vector<ShardedParam>& all) const;
  // Writes the full flat vector `values` ([>= numel]) into the parameters.
  void scatter_into(std::vector<ShardedParam>& all, const torch::Tensor& values) const;
};

// Lays `indices` of `params` out as one flat vector split into `size` chunks, and takes chunk
// `rank` as a leaf. `ep`: experts are split over EP (counted apart in the norm).
Flat make_flat(const std::vector<ShardedParam>& params, const std::vector<size_t>& indices,
               int64_t size, int64_t rank, bool ep);

// Launches the all-gather of `f`'s chunks over `group`: the fp32 masters as they are, or (`bf16`)
// their bf16 copies, carried as fp16 bytes (mixed_precision.hpp), as the lowering's param_bytes 2
// has it.
std::unique_ptr<Pending> launch_gather(const Flat& f, const GroupPtr& group, bool bf16);

// A finished gather's flat vector in the masters' type: under bf16 the bf16-rounded parameters,
// which the model computes with (autocast's casts of them to bf16 are then exact).
torch::Tensor gathered_flat(const Pending& p, const Flat& f, bool bf16);

// The copy-out of a finished gather: the gathered values [offset, offset + dst.numel()) of `f`
// written into `dst` (contiguous, the masters' type) straight from the gather's per-rank chunks,
// converted from bf16 on the way under `bf16`. One read and one write of the bytes, as the
// lowering's copy-out nodes count them; gathered_flat first would concatenate them, a second copy.
void copy_gathered(const Pending& p, const Flat& f, bool bf16, int64_t offset,
                   const torch::Tensor& dst);

// The values the model computes with for master values `t`: bf16-rounded under `bf16`.
torch::Tensor compute_copy(const torch::Tensor& t, bool bf16);

// Gradient of `p` flattened (zeros when it got none).
torch::Tensor flat_grad(const ShardedParam& p);

// Frees a tensor's memory, keeping its shape.
void free_storage(const torch::Tensor& t);
// Gives `t`'s freed storage its bytes back and returns a second tensor over it to write the
// values through: that one has a version counter of its own, so autograd, which saved `t` for
// backward, does not see it modified.
torch::Tensor refill_storage(const torch::Tensor& t);

// Flats whose chunks are spread over one group (dense parameters over dp, routed experts over
// edp), its ranks holding disjoint chunks.
struct FlatGroup {
  GroupPtr group;      // null: one member, nothing to reduce
  double divisor = 1;  // gradients are averaged by it
  std::vector<Flat> flats;
};

// SP norms and MoE partial sums: their chunk gradients summed over `tp` (the chunks line up on
// every TP rank: the same shapes give the same flat layout).
void sum_tp_partial_chunks(const std::vector<FlatGroup*>& groups, const GroupPtr& tp);

// The global gradient norm from the chunks (clip_gradients' rule: TP-split tensors summed over
// `tp`, routed experts over `ep`, stages over `pp`), then the chunks' gradients and the pipeline
// copies' in `params` scaled by max_norm / (norm + 1e-6) when that is below 1. Returns the norm.
double clip_chunks(const std::vector<FlatGroup*>& groups, std::vector<ShardedParam>& params,
                   const GroupPtr& tp, const GroupPtr& pp, const GroupPtr& ep, double max_norm);

inline int64_t group_size(const GroupPtr& g) { return g ? g->getSize() : 1; }
inline int64_t group_rank(const GroupPtr& g) { return g ? g->getRank() : 0; }

}  // namespace orrery::executor
