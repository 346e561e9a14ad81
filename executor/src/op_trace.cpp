#include "op_trace.hpp"

#include <algorithm>
#include <string_view>

#include "orrery/base/error.hpp"
#include "orrery/base/intervals.hpp"
#include "recompute.hpp"

namespace orrery::executor {
namespace {

OpTrace* g_trace = nullptr;
int64_t g_micro_batch = 0;

double seconds(HostClock::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Identity forward; its backward opens the segment named at forward time.
class BackwardMark : public torch::autograd::Function<BackwardMark> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const std::string& name) {
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

std::string site_name(int64_t layer, int64_t micro_batch, const char* phase,
                      const std::string& op) {
  std::string out;
  if (layer >= 0) out += "L" + std::to_string(layer) + ".";
  if (micro_batch >= 0) out += "mb" + std::to_string(micro_batch) + ".";
  const bool rcp = recomputing() && std::string_view(phase) == "fwd";
  return out + (rcp ? "rcp" : phase) + "." + op;
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
  watches_.clear();  // a watch's stamps belong to the step that took them
  ++step_;
  clock_->begin_step();
}

std::map<std::string, OpTiming> OpTrace::end_step() {
  while (!open_.empty()) pop();
  const size_t end =
      clock_->mark();  // the step's last boundary: what the rank did after its last op counts
  clock_->resolve();
  // Each op's pieces (an op split around a collective it issued has several) in time order, and
  // every piece as an interval for the untimed time below.
  std::map<OpTiming*, std::vector<std::pair<double, double>>> by_op;  // (start, duration)
  std::vector<std::pair<double, double>> intervals;                   // (start, end)
  for (const Piece& p : pieces_) {
    const double s = clock_->since_origin(p.start), d = clock_->between(p.start, p.end);
    by_op[p.timing].emplace_back(s, d);
    intervals.emplace_back(s, s + d);
  }
  pieces_.clear();
  // One interval per op in the trace: its summed duration, placed so that its longest piece sits
  // where it ran (the pieces before it just ahead). An optimizer step whose first piece is a few
  // microseconds before the gradient reduction then does not appear to run beside it.
  for (auto& [timing, pieces] : by_op) {
    std::sort(pieces.begin(), pieces.end());
    size_t longest = 0;
    double before = 0, total = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].second > pieces[longest].second) longest = i;
      total += pieces[i].second;
    }
    for (size_t i = 0; i < longest; ++i) before += pieces[i].second;
    timing->start_s = pieces[longest].first - before;
    timing->duration_s = total;
    timing->pieces = static_cast<int64_t>(pieces.size());
  }
  // The step's time that no piece covers: the host between ops.
  double covered = 0;
  for (const auto& [s, e] : base::merge_intervals(std::move(intervals))) covered += e - s;
  untimed_s_ = std::max(0.0, clock_->since_origin(end) - covered);
  for (const auto& [name, dtype] : dtypes_) {
    if (auto it = timings_.find(name); it != timings_.end()) it->second.dtype = dtype;
  }
  dtypes_.clear();
  return std::exchange(timings_, {});
}

OpTrace::Stamp OpTrace::now() { return {clock_->mark(), step_}; }

void OpTrace::add(const std::string& name, Stamp start, Stamp end) {
  ORRERY_CHECK(
      start.step == step_ && end.step == step_,
      "op " + name + " timed with a timestamp from another step (or taken while not tracing)");
  pieces_.push_back({&timings_[name], start.mark, end.mark});
}

void OpTrace::set_algorithm(const std::string& name, const std::string& algorithm) {
  timings_[name].algorithm = algorithm;
}

// One timestamp per boundary: it ends the piece below and starts the new one.
void OpTrace::push(std::string name, bool segment) {
  const Stamp t = now();
  poll(t);
  if (!open_.empty()) add(open_.back().name, open_.back().start, t);
  open_.push_back({std::move(name), t, segment});
}

void OpTrace::pop() {
  const Stamp t = now();
  poll(t);
  add(open_.back().name, open_.back().start, t);
  open_.pop_back();
  if (!open_.empty()) open_.back().start = t;
}

std::shared_ptr<const OpTrace::Watch> OpTrace::watch(std::function<bool()> done) {
  auto w = std::make_shared<Watch>();
  w->done = std::move(done);
  watches_.push_back(w);
  return w;
}

OpTrace::Stamp OpTrace::Watch::end_or_now() const { return ended ? *ended : TraceClock::now(); }

void OpTrace::poll(Stamp boundary) {
  std::erase_if(watches_, [&](const std::weak_ptr<Watch>& weak) {
    const auto w = weak.lock();
    if (w == nullptr) return true;  // its op was waited for and forgotten
    if (w->done()) {
      w->ended = boundary;
      return true;
    }
    return false;
  });
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
