
#include "op_trace.hpp"
#include "pipeline.hpp"

namespace orrery::executor {
namespace {

constexpr int kForwardTag = 0, kBackwardTag = 1;

class Schedule {
 public:
  Schedule(const PipelineStage& stage, int64_t micro_batches,
           const std::function<torch::Tensor(int64_t, const torch::Tensor&)>& forward)
      : s_(stage),
        forward_(forward),
        inputs_(static_cast<size_t>(micro_batches)),
        outputs_(static_cast<size_t>(micro_batches)),
        loss_(torch::zeros({1}, torch::dtype(torch::kFloat64).device(stage.device))) {}

  // Transfers are timed under the lowering's names: "mb<m>.fwd.recv.act", "mb<m>.fwd.send.act",
  // "mb<m>.bwd.recv.grad", "mb<m>.bwd.send.grad".
  void forward(int64_t m) {
    poll_sends();
    set_current_micro_batch(m);
    torch::Tensor input;
    if (!s_.first()) {
      input = receive(s_.stage - 1, tag(m, kForwardTag), site_name(-1, m, "fwd", "recv.act"))
                  .requires_grad_(true);
    }
    // The cast (a no-op in fp32) is in the graph, so input.grad() comes back in the wire type.
    torch::Tensor out = forward_(m, input.defined() ? input.to(torch::kFloat32) : input);
    if (s_.last()) {
      // Summed on the device in fp64 (the sum of the losses read back as doubles: the same
      // values in the same order), not read: on a GPU that would stall the host, and with it
      // the queueing of the next passes.
      loss_ += out.detach().to(torch::kFloat64);
    } else {
      send(out.detach().to(s_.wire_dtype), s_.stage + 1, tag(m, kForwardTag),
           site_name(-1, m, "fwd", "send.act"));
    }
    inputs_[static_cast<size_t>(m)] = input;
    outputs_[static_cast<size_t>(m)] = out;
  }

  void backward(int64_t m) {
    poll_sends();
    set_current_micro_batch(m);
    auto& out = outputs_[static_cast<size_t>(m)];
    if (s_.last()) {
      out.backward();
    } else {
      out.backward(receive(s_.stage + 1, tag(m, kBackwardTag), site_name(-1, m, "bwd", "recv.grad"))
                       .to(out.scalar_type()));
    }
    if (OpTrace* t = current_trace()) t->close_segment();  // the last backward op ends here
    auto& input = inputs_[static_cast<size_t>(m)];
    if (!s_.first())
      send(input.grad(), s_.stage - 1, tag(m, kBackwardTag), site_name(-1, m, "bwd", "send.grad"));
    out = torch::Tensor();  // free the micro-batch's activations
    input = torch::Tensor();
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
  static int tag(int64_t m, int direction) { return static_cast<int>(2 * m + direction); }

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
  const std::function<torch::Tensor(int64_t, const torch::Tensor&)>& forward_;
  std::vector<torch::Tensor> inputs_, outputs_;
  std::vector<Pending> sends_;
  torch::Tensor loss_;  // the summed micro-batch losses, fp64 [1] (zero but on the last stage)
};

}  // namespace

torch::Tensor run_pipeline(
    const PipelineStage& stage, int64_t micro_batches, pb::PipelineSchedule schedule,
    const std::function<torch::Tensor(int64_t, const torch::Tensor&)>& forward) {
  Schedule s(stage, micro_batches, forward);
  if (schedule == pb::PIPELINE_SCHEDULE_GPIPE) {
    for (int64_t m = 0; m < micro_batches; ++m) s.forward(m);
    for (int64_t m = 0; m < micro_batches; ++m) s.backward(m);
    return s.finish();
  }
  // 1F1B (PipeDream-flush); with one stage: forward and backward of each micro-batch in turn.
  const int64_t warmup = std::min(stage.stages - stage.stage - 1, micro_batches);
  for (int64_t m = 0; m < warmup; ++m) s.forward(m);
  for (int64_t m = warmup; m < micro_batches; ++m) {
    s.forward(m);
    s.backward(m - warmup);
  }
  for (int64_t m = micro_batches - warmup; m < micro_batches; ++m) s.backward(m);
  return s.finish();
}

}  // namespace orrery::executor
