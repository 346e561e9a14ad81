
#include "op_trace.hpp"
#include "orrery/plan/pipeline_schedule.hpp"
#include "pipeline.hpp"

namespace orrery::executor {
namespace {

constexpr bool kForward = true, kBackward = false;

class Schedule {
 public:
  Schedule(const PipelineStage& stage, int64_t micro_batches, const ChunkForward& forward)
      : s_(stage),
        micro_batches_(micro_batches),
        forward_(forward),
        inputs_(static_cast<size_t>(micro_batches * stage.chunks)),
        outputs_(static_cast<size_t>(micro_batches * stage.chunks)),
        loss_(torch::zeros({1}, torch::dtype(torch::kFloat64).device(stage.device))) {}

  // Transfers are timed under the lowering's names: "mb<m>.fwd.recv.act", "mb<m>.fwd.send.act",
  // "mb<m>.bwd.recv.grad", "mb<m>.bwd.send.grad", with vp > 1 each with its virtual stage
  // (plan::pipeline_transfer_name), so every chunk's transfer has its own time.
  void forward(int64_t m, int64_t chunk) {
    poll_sends();
    set_current_micro_batch(m);
    const int64_t v = s_.virtual_stage(chunk);
    torch::Tensor input;
    if (v > 0) {
      input =
          receive(previous(), tag(m, v, kForward), site_name(-1, m, "fwd", transfer("recv.act", v)))
              .requires_grad_(true);
    }
    // The cast (a no-op in fp32) is in the graph, so input.grad() comes back in the wire type.
    torch::Tensor out = forward_(m, chunk, input.defined() ? input.to(torch::kFloat32) : input);
    if (s_.ends_model(chunk)) {
      // Summed on the device in fp64 (the sum of the losses read back as doubles: the same
      // values in the same order), not read: on a GPU that would stall the host, and with it
      // the queueing of the next passes.
      loss_ += out.detach().to(torch::kFloat64);
    } else {
      send(out.detach().to(s_.wire_dtype), next(), tag(m, v + 1, kForward),
           site_name(-1, m, "fwd", transfer("send.act", v)));
    }
    inputs_[slot(m, chunk)] = input;
    outputs_[slot(m, chunk)] = out;
  }

  void backward(int64_t m, int64_t chunk) {
    poll_sends();
    set_current_micro_batch(m);
    const int64_t v = s_.virtual_stage(chunk);
    auto& out = outputs_[slot(m, chunk)];
    if (s_.ends_model(chunk)) {
      out.backward();
    } else {
      out.backward(
          receive(next(), tag(m, v, kBackward), site_name(-1, m, "bwd", transfer("recv.grad", v)))
              .to(out.scalar_type()));
    }
    if (OpTrace* t = current_trace()) t->close_segment();  // the last backward op ends here
    auto& input = inputs_[slot(m, chunk)];
    if (v > 0)
      send(input.grad(), previous(), tag(m, v - 1, kBackward),
           site_name(-1, m, "bwd", transfer("send.grad", v)));
    out = torch::Tensor();  // free the micro-batch's activations
    input = torch::Tensor();
  }

  std::string transfer(const char* what, int64_t v) const {
    return plan::pipeline_transfer_name(what, v, s_.chunks);
  }

  // Waits for the sends still in flight; returns the stage's summed loss.
  torch::Tensor finish() {
    for (auto& s : sends_) {
      s.work->wait();
      record(s);
    }
    sends_.clear();
    return loss_;
  }

 private:
  // The lowering's tag (plan/src/lower.cpp): the micro-batch, the receiving virtual stage and the
  // direction.
  int tag(int64_t m, int64_t receiver, bool forward) const {
    return static_cast<int>((m * s_.stages * s_.chunks + receiver) * 2 + (forward ? 0 : 1));
  }
  // Neighbouring ranks; the last rank's chunk c feeds the first rank's chunk c + 1.
  int64_t next() const { return (s_.stage + 1) % s_.stages; }
  int64_t previous() const { return (s_.stage + s_.stages - 1) % s_.stages; }
  size_t slot(int64_t m, int64_t chunk) const {
    return static_cast<size_t>(chunk * micro_batches_ + m);
  }

  torch::Tensor receive(int64_t from, int t, const std::string& name) {
    OpTrace::Scope scope(current_trace(), name);
    std::vector<torch::Tensor> buf{
        torch::empty(s_.activation_shape, torch::dtype(s_.wire_dtype).device(s_.device))};
    s_.pp->recv(buf, static_cast<int>(from), t)->wait();
    return buf[0];
  }

  // A send in flight: its buffer is kept alive until it completes; its end is the first op
  // boundary at which it is seen completed (OpTrace::watch) or when waited at the end of the
  // step. On a GPU both ends are events on the compute stream (op_trace.hpp): the start is before
  // the send is queued, the end where the compute stream is when the host sees the send
  // complete, so no earlier than its completion, as on the CPU.
  struct Pending {
    c10::intrusive_ptr<c10d::Work> work;
    torch::Tensor buffer;
    std::string name;
    TraceClock::time_point start;
    std::shared_ptr<const OpTrace::Watch> watch;
    bool recorded = false;
  };

  void send(const torch::Tensor& t, int64_t to, int tg, const std::string& name) {
    std::vector<torch::Tensor> buf{t.contiguous()};
    const auto start = TraceClock::now();
    auto work = s_.pp->send(buf, static_cast<int>(to), tg);
    std::shared_ptr<const OpTrace::Watch> watch;
    if (OpTrace* t = current_trace()) watch = t->watch([work] { return work->isCompleted(); });
    sends_.push_back({std::move(work), buf[0], name, start, std::move(watch)});
  }

  void record(Pending& s) {
    if (s.recorded) return;
    s.recorded = true;
    if (OpTrace* t = current_trace()) {
      t->add(s.name, s.start, s.watch ? s.watch->end_or_now() : TraceClock::now());
    }
  }

  void poll_sends() {
    for (auto& s : sends_) {
      if (!s.recorded && s.work->isCompleted()) record(s);
    }
  }

  const PipelineStage& s_;
  int64_t micro_batches_;
  const ChunkForward& forward_;
  std::vector<torch::Tensor> inputs_, outputs_;
  std::vector<Pending> sends_;
  torch::Tensor loss_;  // the summed micro-batch losses, fp64 [1] (zero but on the last stage)
};

}  // namespace

torch::Tensor run_pipeline(const PipelineStage& stage, int64_t micro_batches,
                           pb::PipelineSchedule schedule, const ChunkForward& forward) {
  Schedule s(stage, micro_batches, forward);
  // A plan that states no schedule gets the one plan::resolve_plan gives it for the lowering
  // (`orrery run` passes the plan as stated): interleaved with vp > 1, else 1F1B.
  if (schedule == pb::PIPELINE_SCHEDULE_UNSPECIFIED && stage.chunks > 1)
    schedule = pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B;
  // The lowering's order (with one stage, 1F1B runs forward and backward of each micro-batch in
  // turn).
  for (const plan::PipeStep& step :
       plan::pipeline_order(schedule, stage.stages, stage.chunks, stage.stage, micro_batches)) {
    if (step.forward) {
      s.forward(step.micro_batch, step.chunk);
    } else {
      s.backward(step.micro_batch, step.chunk);
    }
  }
  return s.finish();
}

}  // namespace orrery::executor
