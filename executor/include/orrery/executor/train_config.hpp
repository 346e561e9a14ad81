// What one training run is: the model, the plan, and the run's own settings. Torch-free, so the
// CLI can fill it without compiling libtorch headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"

namespace orrery::executor {

// fp16's dynamic loss scaling, torch.cuda.amp.GradScaler's rule with its published defaults: the
// loss is multiplied by the scale before backward, the gradients divided by it before the
// optimizer; a step whose gradients hold an inf or nan on any rank is skipped and the scale
// multiplied by backoff_factor, and after growth_interval steps in a row without one it is
// multiplied by growth_factor. Plans have no field for these; `orrery run` states them.
struct LossScaling {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

struct TrainConfig {
  pb::ModelSpec model;
  // Read: job (global batch, seq_len, precision), parallel (tp, dp, pp, cp, sp), micro_batch_size,
  // bucket_bytes, placement_order, sharding.
  pb::Plan plan;
  // The kind of the cluster's devices: CPU trains on the CPU with Gloo, GPU on cuda:LOCAL_RANK
  // with NCCL (an error when that device is missing), unspecified on this machine's GPUs when it
  // has any, else its CPU (executor/src/run_device.hpp).
  pb::DeviceKind device_kind = pb::DEVICE_KIND_UNSPECIFIED;
  int64_t steps = 1;
  uint64_t seed = 0;
  // AdamW, then gradient clipping by global norm (torch semantics).
  double learning_rate = 1e-3;
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double weight_decay = 0.1;
  double clip_grad_norm = 1.0;  // 0: no clipping
  LossScaling loss_scaling;     // read only when the plan's precision is fp16
  // A collective or rendezvous waiting longer than this fails the rank.
  double timeout_s = 60;
  // Per-step results (step_NNNNNN.json) and, with save_parameters, params.bin, go here (may be
  // empty: nothing written).
  std::string out_dir;
  bool save_parameters = false;
  // The simulator's graph of this rank for the same plan (the CLI lowers it; the executor never
  // links the simulator). When set with out_dir, every op is timed under its node's name and the
  // rank writes trace_rank_file(out_dir, rank): the same nodes with measured start_s/duration_s
  // (mean over the steps after the first). An op the executor ran that the graph lacks, or a node
  // it never ran, is an internal error: simulator and executor disagree about the plan.
  std::optional<pb::RankGraph> trace_graph;
};

// Why the executor cannot run `config` (a feature it does not implement yet, or degrees that do
// not divide the model or batch), or empty when it can. Run before spawning ranks.
std::string unsupported_reason(const TrainConfig& config);

// Decoder layers of each virtual pipeline stage (pp x vp entries, virtual stage c x pp + r being
// chunk c of pipeline rank r): the plan's layers_per_stage, else an even split. Valid once
// unsupported_reason is empty.
std::vector<int64_t> layers_per_stage(const pb::Plan& plan, const pb::ModelSpec& model);

// The whole-job results of one step, as rank 0 reports them.
struct StepResult {
  int64_t step = 0;      // 1-based
  double loss = 0;       // mean token cross-entropy over the global batch
  double grad_norm = 0;  // global L2 norm of the gradients before clipping (NaN when skipped)
  // fp16: the scale this step's loss was multiplied by (0 without loss scaling), and whether its
  // gradients held an inf or nan, so that the optimizer skipped it.
  double loss_scale = 0;
  bool skipped = false;
  double seconds = 0;  // wall time of the step on rank 0
};

}  // namespace orrery::executor
