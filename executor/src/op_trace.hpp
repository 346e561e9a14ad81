// Times what one rank runs under the names the simulator's lowering gives its graph nodes
// ("L3.mb2.fwd.attn.qkv", "mb0.bwd.head.lm", "opt.dp.bucket0.all_reduce"), so a measured trace
// and a predicted one can be compared node by node (DESIGN.md: if they disagree about what a plan
// does, one of them has a bug).
//
// Forward ops and collectives are timed as scopes. Backward ops run inside libtorch's autograd
// engine, which on CPU executes one node at a time on the calling thread; the model marks each
// op's output with backward_mark(), whose backward fires when that op's backward is about to run.
// The time between consecutive marks is the backward of the op that opened the segment. Scopes
// nest: an inner scope (a collective inside an op, or inside a backward function) pauses whatever
// is open around it, and time is summed per name, so an op split around a collective still gets
// one duration that excludes the collective.
//
// Timestamps come from the trace's StepClock: the host's steady clock on the CPU, where an op
// has finished when its call returns; on a GPU (cuda_runtime.hpp, EventClock) a CUDA event
// recorded on the current stream at each scope boundary, because there a call only queues the
// kernels and a host clock would measure the launch. An event completes when the stream reaches
// it, so the time between two boundaries is the GPU time of the kernels queued between them
// (plus any time the stream sat idle waiting for the host to queue more). The events are read
// once per step, in end_step(), after waiting for the last one. Autograd runs CUDA backward
// functions on its own device thread, but one node at a time and in the same order as on the
// CPU, and it makes the forward op's stream current there, so the backward marks land on the
// same stream in op order. Collectives are timed from the boundary before they are queued to the
// one after the compute stream has been made to wait for them (NCCL's wait()), so on a GPU too
// they include the wait for the slowest peer.
//
// One OpTrace per rank process, reached through current_trace() so the model and the collective
// helpers need no extra parameters; null when the run records no trace.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "measured_trace.hpp"
#include "mixed_precision.hpp"

namespace orrery::executor {

// Where an OpTrace's timestamps come from, one step at a time: mark() takes a timestamp (an
// index into the step's marks); resolve(), once after the step's last mark, makes them readable
// as seconds. Marks are only meaningful within the step that took them.
class StepClock {
 public:
  virtual ~StepClock() = default;
  virtual void begin_step() = 0;  // the step's time origin; forgets the previous step's marks
  virtual size_t mark() = 0;
  virtual void resolve() = 0;
  // Seconds from the step's origin to mark i, and from mark a to mark b (after resolve()).
  virtual double since_origin(size_t i) const = 0;
  virtual double between(size_t a, size_t b) const = 0;
};

// The host's steady clock: on the CPU an op has finished when its call returns.
class HostClock final : public StepClock {
 public:
  using Clock = std::chrono::steady_clock;
  void begin_step() override;
  size_t mark() override;
  void resolve() override {}
  double since_origin(size_t i) const override;
  double between(size_t a, size_t b) const override;

 private:
  Clock::time_point origin_{};
  std::vector<Clock::time_point> marks_;
};

class OpTrace {
 public:
  // A timestamp of the current step on this trace's clock.
  struct Stamp {
    size_t mark = 0;
    uint64_t step = 0;  // 0: taken with no trace recording (never added)
  };

  explicit OpTrace(std::unique_ptr<StepClock> clock = std::make_unique<HostClock>());

  void begin_step();
  // The timings of the step that just ended; clears them. Reads the clock once (on a GPU: waits
  // for the step's last event).
  std::map<std::string, OpTiming> end_step();
  // The seconds of the step end_step() ended that no timed piece covers (from begin_step() to
  // end_step(): dispatch between ops, autograd bookkeeping, drawing the batch, zeroing gradients).
  double untimed_s() const { return untimed_s_; }

  // Now, on this trace's clock.
  Stamp now();
  // Adds [start, end) to `name`; both stamps of the current step.
  void add(const std::string& name, Stamp start, Stamp end);
  // An asynchronous op in flight (an overlapped collective, a pipeline send): `ended` is the
  // first op boundary (a scope's start or end, a backward segment's) at which `done()` returned
  // true, so its end is when the rank could first have seen it finish, not when it waited for it.
  struct Watch {
    std::function<bool()> done;
    std::optional<Stamp> ended;
    Stamp end_or_now() const;  // where the op ended as far as the trace knows
  };
  // Polls `done` at every boundary from now until the handle is dropped or the step ends.
  std::shared_ptr<const Watch> watch(std::function<bool()> done);

  // The algorithm collective `name` really ran (OpTiming::algorithm).
  void set_algorithm(const std::string& name, const std::string& algorithm);
  // The element type op `name` computed in (OpTiming::dtype), kept only if `name` runs.
  void set_dtype(const std::string& name, const std::string& dtype) { dtypes_[name] = dtype; }

  // Backward segments (see the file comment). close_segment() ends the open one (end of a
  // backward pass, or before a scope).
  void open_segment(const std::string& name);
  void close_segment();

  // RAII: times its own lifetime as `name`, pausing whatever is open around it meanwhile. A null
  // trace makes it a no-op.
  class Scope {
   public:
    Scope(OpTrace* trace, std::string name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpTrace* trace_;
  };

 private:
  struct Open {
    std::string name;
    Stamp start;
    bool segment;
  };
  // A timed interval of `timing`'s op, read from the clock at end_step().
  struct Piece {
    OpTiming* timing;
    size_t start, end;
  };
  void push(std::string name, bool segment);
  void poll(Stamp boundary);  // the watches still waiting
  void pop();                 // adds the top's last piece, resumes the one below

  std::unique_ptr<StepClock> clock_;
  double untimed_s_ = 0;
  uint64_t step_ = 0;  // steps begun, so stamps from an earlier step are caught
  std::map<std::string, OpTiming> timings_;  // std::map: Piece::timing stays valid
  std::vector<Piece> pieces_;
  std::map<std::string, std::string> dtypes_;
  std::vector<Open> open_;
  std::vector<std::weak_ptr<Watch>> watches_;
};

// The current trace's clock, shaped like a std::chrono clock for code that keeps a start time
// and adds [start, now) later (asynchronous sends and collectives): TraceClock::now() is a stamp
// on current_trace()'s clock, or an inert one when nothing is recorded.
struct TraceClock {
  using time_point = OpTrace::Stamp;
  static time_point now();
};

// This process's trace (null: not recording).
OpTrace* current_trace();
void set_current_trace(OpTrace* trace);

// Where the op being run sits, prefixed to op names as the lowering does ("L3.mb2.fwd.").
// layer -1: embeddings/head/pipeline transfers; micro_batch -1: optimizer.
std::string site_name(int64_t layer, int64_t micro_batch, const char* phase, const std::string& op);

// Current micro-batch, set by the pipeline before each forward or backward pass.
int64_t current_micro_batch();
void set_current_micro_batch(int64_t micro_batch);

// Identity whose backward opens the backward segment `name` (no-op when not recording).
torch::Tensor backward_mark(const torch::Tensor& x, const std::string& name);

// Times `fn()` as the forward op `op` of `layer` in the current micro-batch, and marks its
// result so that its backward is timed as the same op in phase "bwd"; both record the result's
// element type (under bf16 autocast: bf16 for GEMMs and attention, fp32 for norms and residuals).
template <typename Fn>
torch::Tensor timed_op(int64_t layer, const std::string& op, Fn&& fn) {
  OpTrace* trace = current_trace();
  if (trace == nullptr) return fn();
  const int64_t mb = current_micro_batch();
  torch::Tensor out;
  const std::string name = site_name(layer, mb, "fwd", op),
                    backward = site_name(layer, mb, "bwd", op);
  {
    OpTrace::Scope scope(trace, name);
    out = fn();
  }
  const std::string dtype = dtype_name(out.scalar_type());
  trace->set_dtype(name, dtype);
  trace->set_dtype(backward, dtype);
  return backward_mark(out, backward);
}

}  // namespace orrery::executor
