#include "op_trace.hpp"

namespace orrery::executor {
namespace {

OpTrace* g_trace = nullptr;
int64_t g_micro_batch = 0;

double seconds(OpTrace::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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

void OpTrace::begin_step() {
  timings_.clear();
  dtypes_.clear();
  open_.clear();
  step_start_ = Clock::now();
}

std::map<std::string, OpTiming> OpTrace::end_step() {
  while (!open_.empty()) pop();
  for (const auto& [name, dtype] : dtypes_) {
    if (auto it = timings_.find(name); it != timings_.end()) it->second.dtype = dtype;
  }
  dtypes_.clear();
  return std::exchange(timings_, {});
}

void OpTrace::add(const std::string& name, Clock::time_point start, Clock::time_point end) {
  OpTiming& t = timings_[name];
  const double s = seconds(start - step_start_);
  t.start_s = t.pieces == 0 ? s : std::min(t.start_s, s);
  t.duration_s += seconds(end - start);
  ++t.pieces;
}

void OpTrace::set_algorithm(const std::string& name, const std::string& algorithm) {
  timings_[name].algorithm = algorithm;
}

void OpTrace::push(std::string name, bool segment) {
  const auto now = Clock::now();
  if (!open_.empty()) add(open_.back().name, open_.back().start, now);
  open_.push_back({std::move(name), now, segment});
}

void OpTrace::pop() {
  const auto now = Clock::now();
  add(open_.back().name, open_.back().start, now);
  open_.pop_back();
  if (!open_.empty()) open_.back().start = now;
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

torch::Tensor backward_mark(const torch::Tensor& x, const std::string& name) {
  if (current_trace() == nullptr || !x.requires_grad()) return x;
  return BackwardMark::apply(x, name);
}

}  // namespace orrery::executor
