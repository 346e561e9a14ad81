#include "op_trace.hpp"

#include "orrery/traces/error.hpp"

namespace orrery::executor {
namespace {

OpTrace* g_trace = nullptr;
int64_t g_micro_batch = 0;

double seconds(HostClock::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Identity forward; its backward opens the segment named at forward time.
class BackwardMark : public torch::autograd::Function<BackwardMark> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const std::string& name) {
    ctx->saved_data["name"] = name;
    return x.view_as(x);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    if (OpTrace* t = current_trace()) t->open_segment(ctx->saved_data["name"].toStringRef());
    return {grads[0], torch::Tensor()};
  }
};

}  // namespace

OpTrace* current_trace() { return g_trace; }
void set_current_trace(OpTrace* trace) { g_trace = trace; }
int64_t current_micro_batch() { return g_micro_batch; }
void set_current_micro_batch(int64_t micro_batch) { g_micro_batch = micro_batch; }

std::string site_name(int64_t layer, int64_t micro_batch, const char* phase, const std::string& op) {
  std::string out;
  if (layer >= 0) out += "L" + std::to_string(layer) + ".";
  if (micro_batch >= 0) out += "mb" + std::to_string(micro_batch) + ".";
  return out + phase + "." + op;
}

void HostClock::begin_step() {
  marks_.clear();
  origin_ = Clock::now();
}

size_t HostClock::mark() {
  marks_.push_back(Clock::now());
  return marks_.size() - 1;
}

double HostClock::since_origin(size_t i) const { return seconds(marks_[i] - origin_); }
double HostClock::between(size_t a, size_t b) const { return seconds(marks_[b] - marks_[a]); }

OpTrace::OpTrace(std::unique_ptr<StepClock> clock) : clock_(std::move(clock)) {}

void OpTrace::begin_step() {
  timings_.clear();
  pieces_.clear();
  dtypes_.clear();
  open_.clear();
  ++step_;
  clock_->begin_step();
}

std::map<std::string, OpTiming> OpTrace::end_step() {
  while (!open_.empty()) pop();
  // Pieces in the order they were added, each op's summed as it was timed.
  clock_->resolve();
  for (const Piece& p : pieces_) {
    OpTiming& t = *p.timing;
    const double s = clock_->since_origin(p.start);
    t.start_s = t.pieces == 0 ? s : std::min(t.start_s, s);
    t.duration_s += clock_->between(p.start, p.end);
    ++t.pieces;
  }
  pieces_.clear();
  for (const auto& [name, dtype] : dtypes_) {
    if (auto it = timings_.find(name); it != timings_.end()) it->second.dtype = dtype;
  }
  dtypes_.clear();
  return std::exchange(timings_, {});
}

OpTrace::Stamp OpTrace::now() { return {clock_->mark(), step_}; }

void OpTrace::add(const std::string& name, Stamp start, Stamp end) {
  ORRERY_CHECK(start.step == step_ && end.step == step_,
               "op " + name + " timed with a timestamp from another step (or taken while not tracing)");
  pieces_.push_back({&timings_[name], start.mark, end.mark});
}

void OpTrace::set_algorithm(const std::string& name, const std::string& algorithm) {
  timings_[name].algorithm = algorithm;
}

// One timestamp per boundary: it ends the piece below and starts the new one.
void OpTrace::push(std::string name, bool segment) {
  const Stamp t = now();
  if (!open_.empty()) add(open_.back().name, open_.back().start, t);
  open_.push_back({std::move(name), t, segment});
}

void OpTrace::pop() {
  const Stamp t = now();
  add(open_.back().name, open_.back().start, t);
  open_.pop_back();
  if (!open_.empty()) open_.back().start = t;
}

void OpTrace::open_segment(const std::string& name) {
  // The previous backward op ends where the next one starts.
  if (!open_.empty() && open_.back().segment) pop();
  push(name, true);
}

void OpTrace::close_segment() {
  if (!open_.empty() && open_.back().segment) pop();
}

OpTrace::Scope::Scope(OpTrace* trace, std::string name) : trace_(trace) {
  if (trace_ != nullptr) trace_->push(std::move(name), false);
}

OpTrace::Scope::~Scope() {
  if (trace_ != nullptr) trace_->pop();
}

OpTrace::Stamp TraceClock::now() {
  OpTrace* t = current_trace();
  return t != nullptr ? t->now() : OpTrace::Stamp{};
}

torch::Tensor backward_mark(const torch::Tensor& x, const std::string& name) {
  if (current_trace() == nullptr || !x.requires_grad()) return x;
  return BackwardMark::apply(x, name);
}

}  // namespace orrery::executor
