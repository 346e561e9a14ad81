// The rank's device (executor/src/run_device.hpp) and OpTrace's pluggable clock
// (executor/src/op_trace.hpp), on a machine without a GPU: the device rule for every combination
// of request and CUDA availability (the CUDA ones described, not real), this build's own choice,
// and OpTrace timing scopes, backward segments and asynchronous ops from a scripted clock the way
// it times them from CUDA events: marks taken during the step, read once at its end.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "op_trace.hpp"
#include "orrery/base/error.hpp"
#include "run_device.hpp"

namespace orrery::executor {
namespace {

// The message of the EnvironmentError `fn` throws ("" when it throws none).
template <typename Fn>
std::string environment_error(Fn&& fn) {
  try {
    fn();
  } catch (const base::EnvironmentError& e) {
    return e.what();
  }
  return "";
}

constexpr CudaAvailability kNoCudaBuild{false, 0};
constexpr CudaAvailability kCudaBuildNoDevice{true, 0};
constexpr CudaAvailability kTwoGpus{true, 2};

TEST(RunDevice, ClusterDeviceKindsAreRequests) {
  EXPECT_EQ(device_request(pb::DEVICE_KIND_GPU), DeviceRequest::kGpu);
  EXPECT_EQ(device_request(pb::DEVICE_KIND_CPU), DeviceRequest::kCpu);
  EXPECT_EQ(device_request(pb::DEVICE_KIND_UNSPECIFIED), DeviceRequest::kThisMachine);
}

TEST(RunDevice, CpuClusterRunsOnTheCpuEvenWithGpus) {
  for (const auto& cuda : {kNoCudaBuild, kCudaBuildNoDevice, kTwoGpus}) {
    EXPECT_EQ(choose_run_device(DeviceRequest::kCpu, 1, cuda).str(), "cpu");
  }
}

TEST(RunDevice, ThisMachineIsItsGpusWhenItHasAny) {
  EXPECT_EQ(choose_run_device(DeviceRequest::kThisMachine, 0, kNoCudaBuild).str(), "cpu");
  EXPECT_EQ(choose_run_device(DeviceRequest::kThisMachine, 0, kCudaBuildNoDevice).str(), "cpu");
  EXPECT_EQ(choose_run_device(DeviceRequest::kThisMachine, 1, kTwoGpus).str(), "cuda:1");
  // A third rank would be the only one on the CPU, with Gloo groups against its peers' NCCL ones.
  EXPECT_EQ(environment_error([] { choose_run_device(DeviceRequest::kThisMachine, 2, kTwoGpus); }),
            "this machine has CUDA devices, but LOCAL_RANK 2 needs cuda:2 but libtorch sees 2 CUDA "
            "device(s): start at "
            "most one rank per GPU on each host");
}

TEST(RunDevice, GpuClusterTakesTheLocalRanksGpuOrSaysWhyNot) {
  EXPECT_EQ(choose_run_device(DeviceRequest::kGpu, 0, kTwoGpus).str(), "cuda:0");
  EXPECT_EQ(choose_run_device(DeviceRequest::kGpu, 1, kTwoGpus).str(), "cuda:1");
  EXPECT_EQ(environment_error([] { choose_run_device(DeviceRequest::kGpu, 0, kNoCudaBuild); }),
            "the cluster's devices are GPUs, but this orrery's executor was built against a "
            "libtorch without CUDA; "
            "build it against a CUDA libtorch (docs/executor.md, \"On a GPU\")");
  EXPECT_EQ(
      environment_error([] { choose_run_device(DeviceRequest::kGpu, 0, kCudaBuildNoDevice); }),
      "the cluster's devices are GPUs, but libtorch sees no CUDA device (no driver, or "
      "CUDA_VISIBLE_DEVICES "
      "hides them)");
  EXPECT_NE(environment_error([] {
              choose_run_device(DeviceRequest::kGpu, 2, kTwoGpus);
            }).find("LOCAL_RANK 2 needs cuda:2 but libtorch sees 2 CUDA device(s)"),
            std::string::npos);
}

// This build, on this machine: without CUDA the rank stays on the CPU with the host clock, and a
// GPU cluster is refused rather than trained on the CPU.
TEST(RunDevice, ThisBuildWithoutCuda) {
  if (cuda_availability().built && cuda_availability().devices > 0)
    GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(select_run_device(DeviceRequest::kThisMachine, 0).str(), "cpu");
  EXPECT_EQ(select_run_device(DeviceRequest::kCpu, 0).str(), "cpu");
  EXPECT_NE(environment_error([] { select_run_device(device_request(pb::DEVICE_KIND_GPU), 0); }),
            "");
  const auto clock = make_step_clock(RunDevice{});
  EXPECT_NE(dynamic_cast<HostClock*>(clock.get()), nullptr);
}

// A clock read from a script: each mark is the time `*now` holds when it is taken, readable only
// after resolve(), which must come once per step (as EventClock's wait for its events).
class ScriptedClock final : public StepClock {
 public:
  ScriptedClock(const double* now, int* resolves) : now_(now), resolves_(resolves) {}
  void begin_step() override {
    origin_ = *now_;
    marks_.clear();
    resolved_ = false;
  }
  size_t mark() override {
    EXPECT_FALSE(resolved_) << "marked after the step was read";
    marks_.push_back(*now_);
    return marks_.size() - 1;
  }
  void resolve() override {
    ++*resolves_;
    resolved_ = true;
  }
  double since_origin(size_t i) const override {
    EXPECT_TRUE(resolved_);
    return marks_.at(i) - origin_;
  }
  double between(size_t a, size_t b) const override {
    EXPECT_TRUE(resolved_);
    return marks_.at(b) - marks_.at(a);
  }

 private:
  const double* now_;
  int* resolves_;
  double origin_ = 0;
  std::vector<double> marks_;
  bool resolved_ = false;
};

TEST(OpTraceClock, ScopesSegmentsAndAsyncOpsReadTheClockOnceAtTheEnd) {
  double now = 10;
  int resolves = 0;
  OpTrace trace(std::make_unique<ScriptedClock>(&now, &resolves));
  trace.begin_step();
  now = 11;
  {
    OpTrace::Scope op(&trace, "fwd.attn.out");
    now = 13;
    {
      OpTrace::Scope collective(&trace, "fwd.attn.out.all_reduce");  // pauses the op
      now = 14;
    }
    now = 16;
  }
  now = 17;
  trace.open_segment("bwd.mlp.down");
  now = 19;
  trace.open_segment("bwd.mlp.up");  // ends the previous segment
  now = 20;
  trace.close_segment();
  const OpTrace::Stamp sent = trace.now();  // an asynchronous op: launched now, seen done later
  now = 22;
  trace.add("send.act", sent, trace.now());
  EXPECT_EQ(resolves, 0);
  const auto t = trace.end_step();
  EXPECT_EQ(resolves, 1);
  ASSERT_EQ(t.size(), 5u);
  EXPECT_DOUBLE_EQ(t.at("fwd.attn.out").start_s, 1);
  EXPECT_DOUBLE_EQ(t.at("fwd.attn.out").duration_s, 4);  // [11, 13) + [14, 16)
  EXPECT_EQ(t.at("fwd.attn.out").pieces, 2);
  EXPECT_DOUBLE_EQ(t.at("fwd.attn.out.all_reduce").start_s, 3);
  EXPECT_DOUBLE_EQ(t.at("fwd.attn.out.all_reduce").duration_s, 1);
  EXPECT_DOUBLE_EQ(t.at("bwd.mlp.down").duration_s, 2);
  EXPECT_DOUBLE_EQ(t.at("bwd.mlp.up").start_s, 9);
  EXPECT_DOUBLE_EQ(t.at("bwd.mlp.up").duration_s, 1);
  EXPECT_DOUBLE_EQ(t.at("send.act").start_s, 10);
  EXPECT_DOUBLE_EQ(t.at("send.act").duration_s, 2);
  // From the origin (10) to end_step (22) only [10, 11) and [16, 17) had no op running.
  EXPECT_DOUBLE_EQ(trace.untimed_s(), 2);
}

TEST(OpTraceClock, AnOpTimedInPiecesSitsAtItsLongestPiece) {
  // An optimizer step with a tiny first piece before the gradient reduction it waits for: placed
  // at its first start, it would seem to run beside the reduction.
  double now = 0;
  int resolves = 0;
  OpTrace trace(std::make_unique<ScriptedClock>(&now, &resolves));
  trace.begin_step();
  {
    OpTrace::Scope step(&trace, "opt.adamw");
    now = 0.5;
  }
  {
    OpTrace::Scope reduce(&trace, "opt.dp.bucket0.all_reduce");
    now = 10;
  }
  {
    OpTrace::Scope step(&trace, "opt.adamw");
    now = 14;
  }
  now = 15;
  const auto t = trace.end_step();
  EXPECT_DOUBLE_EQ(t.at("opt.adamw").duration_s, 4.5);
  EXPECT_DOUBLE_EQ(t.at("opt.adamw").start_s, 9.5);  // ends where its longest piece ended
  EXPECT_DOUBLE_EQ(t.at("opt.dp.bucket0.all_reduce").start_s, 0.5);
  EXPECT_DOUBLE_EQ(trace.untimed_s(), 1);  // [14, 15)
}

TEST(OpTraceClock, AWatchedOpEndsAtTheFirstBoundaryItIsSeenDone) {
  double now = 0;
  int resolves = 0;
  bool done = false;
  OpTrace trace(std::make_unique<ScriptedClock>(&now, &resolves));
  trace.begin_step();
  const OpTrace::Stamp launched = trace.now();
  const auto w = trace.watch([&] { return done; });
  int polls = 0;
  const auto counted = trace.watch([&] { return ++polls, false; });
  now = 1;
  {
    OpTrace::Scope op(&trace, "fwd.a");
    now = 3;
  }             // boundaries at 1 and 3: still running
  done = true;  // finishes during the gap before the next op
  now = 4;
  {
    OpTrace::Scope op(&trace, "fwd.b");
    now = 6;
  }  // seen at 4
  now = 9;
  ASSERT_TRUE(w->ended.has_value());
  trace.add("bucket0.all_reduce", launched, *w->ended);  // waited for at 9, ended at 4
  const auto t = trace.end_step();
  EXPECT_DOUBLE_EQ(t.at("bucket0.all_reduce").duration_s, 4);
  EXPECT_EQ(polls, 4);  // every boundary while watched
  EXPECT_FALSE(counted->ended.has_value());
  // A new step forgets the watches of the last one.
  trace.begin_step();
  { OpTrace::Scope op(&trace, "fwd.a"); }
  EXPECT_EQ(polls, 4);
  trace.end_step();
}

TEST(OpTraceClock, StampsBelongToTheirStep) {
  double now = 0;
  int resolves = 0;
  OpTrace trace(std::make_unique<ScriptedClock>(&now, &resolves));
  trace.begin_step();
  const OpTrace::Stamp old = trace.now();
  trace.end_step();
  trace.begin_step();
  EXPECT_THROW(trace.add("late", old, trace.now()), base::InternalError);
}

TEST(OpTraceClock, TraceClockIsInertWithoutATrace) {
  set_current_trace(nullptr);
  EXPECT_EQ(TraceClock::now().step, 0u);
  OpTrace trace;  // the host clock
  set_current_trace(&trace);
  trace.begin_step();
  const auto start = TraceClock::now();
  EXPECT_EQ(start.step, 1u);
  trace.add("op", start, TraceClock::now());
  set_current_trace(nullptr);
  const auto t = trace.end_step();
  EXPECT_GE(t.at("op").duration_s, 0);
  EXPECT_EQ(t.at("op").pieces, 1);
}

}  // namespace
}  // namespace orrery::executor
