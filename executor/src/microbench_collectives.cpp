// The Gloo collective microbenchmarks (see microbench.hpp). One thread per rank, each with its
// own ProcessGroupGloo over loopback TCP, rendezvousing in an in-process HashStore: the same
// transport as `orrery run`'s ranks, without processes to launch. Each repetition starts after
// a barrier; a repetition's time is its slowest rank's, and the median over repetitions is kept
// (nccl-tests times the whole group too).
//
// Algorithms, from Gloo's sources as ProcessGroupGloo 1.13 calls them: allreduce leaves
// gloo::AllreduceOptions' algorithm unset, which runs the ring; allgather is a ring; alltoall
// exchanges directly between every pair; reduce_scatter does not exist in Gloo 1.13 and runs
// as alltoall_base (each rank receives every rank's copy of its chunk, the bytes a direct
// reduce-scatter moves) followed by a local sum.
#include <exception>
#include <mutex>
#include <thread>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "microbench_timing.hpp"
#include "orrery/base/error.hpp"
#include "orrery/executor/microbench.hpp"
#include "process_group.hpp"  // GroupPtr: a ProcessGroup (1.13) or a Backend (2.x)

namespace orrery::executor {
namespace {

constexpr double kFloatBytes = 4;

struct Kind {
  pb::CollectiveKind collective;
  const char* name;
  const char* algorithm;
};
constexpr Kind kKinds[] = {
    {pb::COLLECTIVE_KIND_ALL_REDUCE, "all_reduce", "ring"},
    {pb::COLLECTIVE_KIND_ALL_GATHER, "all_gather", "ring"},
    {pb::COLLECTIVE_KIND_ALL_TO_ALL, "all_to_all", "direct"},
    {pb::COLLECTIVE_KIND_REDUCE_SCATTER, "reduce_scatter", "alltoall+sum"},
};

std::vector<double> message_bytes(bool quick) {
  if (quick) return {4096, 262144, 4194304};
  std::vector<double> out;
  for (double b = 4096; b <= 64.0 * 1024 * 1024; b *= 4) out.push_back(b);
  return out;
}

std::vector<int64_t> group_sizes(int64_t max_ranks) {
  std::vector<int64_t> out;
  for (int64_t n = 2; n < max_ranks; n *= 2) out.push_back(n);
  if (max_ranks >= 2) out.push_back(max_ranks);
  return out;
}

// One collective call on `pg` with buffers set up for `bytes`; returns the call to time.
class Call {
 public:
  Call(const GroupPtr& pg, pb::CollectiveKind kind, int64_t ranks, int64_t elements)
      : pg_(pg), kind_(kind) {
    const int64_t chunk = elements / ranks;
    switch (kind) {
      case pb::COLLECTIVE_KIND_ALL_REDUCE:
        in_ = {torch::ones({elements})};
        break;
      case pb::COLLECTIVE_KIND_ALL_GATHER:
        in_ = {torch::ones({chunk})};
        out_.assign(1, std::vector<at::Tensor>(static_cast<size_t>(ranks)));
        for (auto& t : out_[0]) t = torch::empty({chunk});
        break;
      default:  // all_to_all, reduce_scatter: the whole buffer in, as much out
        in_ = {torch::ones({elements})};
        flat_out_ = torch::empty({elements});
        ranks_ = ranks;
        break;
    }
  }

  void operator()() {
    switch (kind_) {
      case pb::COLLECTIVE_KIND_ALL_REDUCE:
        pg_->allreduce(in_)->wait();
        break;
      case pb::COLLECTIVE_KIND_ALL_GATHER:
        pg_->allgather(out_, in_)->wait();
        break;
      case pb::COLLECTIVE_KIND_ALL_TO_ALL:
        pg_->alltoall_base(flat_out_, in_[0], no_split_, no_split_)->wait();
        break;
      default:
        pg_->alltoall_base(flat_out_, in_[0], no_split_, no_split_)->wait();
        reduced_ = flat_out_.view({ranks_, -1}).sum(0);
        break;
    }
  }

 private:
  GroupPtr pg_;
  pb::CollectiveKind kind_;
  std::vector<at::Tensor> in_;
  std::vector<std::vector<at::Tensor>> out_;
  at::Tensor flat_out_, reduced_;
  std::vector<int64_t> no_split_;
  int64_t ranks_ = 1;
};

class CollectiveBench {
 public:
  explicit CollectiveBench(const BenchOptions& options)
      : options_(options), origin_(detail::BenchClock::now()) {}

  std::vector<CollectiveMeasurement> run() {
    const auto sizes = message_bytes(options_.quick);
    for (int64_t n : group_sizes(options_.max_ranks)) run_group(n, sizes);
    return std::move(out_);
  }

 private:
  // What rank r measured: per (kind, size), the seconds of each repetition.
  using RankTimes = std::vector<std::vector<double>>;

  void run_group(int64_t n, const std::vector<double>& sizes) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::vector<RankTimes> times(static_cast<size_t>(n));
    std::vector<double> starts;  // per (kind, size), rank 0's clock
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int64_t r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          times[static_cast<size_t>(r)] = run_rank(store, n, r, sizes, r == 0 ? &starts : nullptr);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int64_t r = 0; r < n; ++r) {
      if (errors[static_cast<size_t>(r)]) rethrow(r, n, errors[static_cast<size_t>(r)]);
    }
    size_t i = 0;
    for (const Kind& kind : kKinds) {
      for (double bytes : sizes) {
        std::vector<double> slowest(times[0][i].size(), 0.0);
        for (const RankTimes& rank : times) {
          for (size_t rep = 0; rep < slowest.size(); ++rep)
            slowest[rep] = std::max(slowest[rep], rank[i][rep]);
        }
        CollectiveMeasurement m;
        m.collective = kind.collective;
        m.algorithm = kind.algorithm;
        m.ranks = n;
        m.bytes = buffer_bytes(bytes, n);
        m.name = std::string(kind.name) + ".n" + std::to_string(n) + "." +
                 std::to_string(static_cast<int64_t>(m.bytes));
        m.seconds = orrery::base::median(slowest);
        m.start_s = starts[i];
        out_.push_back(std::move(m));
        ++i;
      }
    }
  }

  // Whole float elements, a multiple of the group size (every rank gets an equal chunk).
  static int64_t elements(double bytes, int64_t n) {
    const auto e = static_cast<int64_t>(bytes / kFloatBytes);
    return std::max<int64_t>(n, e / n * n);
  }
  static double buffer_bytes(double bytes, int64_t n) {
    return static_cast<double>(elements(bytes, n)) * kFloatBytes;
  }

  RankTimes run_rank(const c10::intrusive_ptr<c10d::Store>& store, int64_t n, int64_t r,
                     const std::vector<double>& sizes, std::vector<double>* starts) {
    torch::NoGradGuard no_grad;
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options_.timeout_s * 1000));
    auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("bench/n" + std::to_string(n), store);
    GroupPtr pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, static_cast<int>(r),
                                                              static_cast<int>(n), gloo);
    RankTimes out;
    size_t step = 0;
    for (const Kind& kind : kKinds) {
      for (double bytes : sizes) {
        ++step;
        if (starts != nullptr && options_.progress) {
          options_.progress(std::string(kind.name) + " on " + std::to_string(n) + " ranks, " +
                            std::to_string(static_cast<int64_t>(buffer_bytes(bytes, n))) +
                            " bytes (" + std::to_string(step) + "/" +
                            std::to_string(std::size(kKinds) * sizes.size()) + ")");
        }
        Call call(pg, kind.collective, n, elements(bytes, n));
        for (int64_t w = 0; w < options_.warmup; ++w) call();
        if (starts != nullptr)
          starts->push_back(detail::seconds_between(origin_, detail::BenchClock::now()));
        std::vector<double> reps;
        for (int64_t rep = 0; rep < options_.repetitions; ++rep) {
          pg->barrier()->wait();
          const auto t0 = detail::BenchClock::now();
          call();
          reps.push_back(detail::seconds_between(t0, detail::BenchClock::now()));
        }
        out.push_back(std::move(reps));
      }
    }
    pg->barrier()->wait();
    return out;
  }

  [[noreturn]] static void rethrow(int64_t r, int64_t n, const std::exception_ptr& e) {
    const std::string where =
        "orrery bench: rank " + std::to_string(r) + " of " + std::to_string(n) + ": ";
    try {
      std::rethrow_exception(e);
    } catch (const c10::Error& err) {
      throw base::EnvironmentError(where + "Gloo failed: " + err.what_without_backtrace());
    } catch (const std::exception& err) {
      throw base::EnvironmentError(where + err.what());
    }
  }

  const BenchOptions& options_;
  detail::BenchClock::time_point origin_;
  std::vector<CollectiveMeasurement> out_;
};

}  // namespace

std::vector<CollectiveMeasurement> bench_collectives(const BenchOptions& options) {
  if (options.max_ranks < 2) return {};
  return CollectiveBench(options).run();
}

}  // namespace orrery::executor
