// des at scale: `simulate --engine des` on every published run, at its published size (or
// scaled to --gpus), with its wall time and peak resident memory. A plain program printing a
// Markdown table (docs/simulator.md records the figures):
//   orrery_des_bench [--runs FILE]... [--only TEXT] [--gpus N] [--all-ranks] [--limit S]
//                    [--cpu-limit S] [--budget NODES] [--node-by-node]
// --runs: published-runs files (default: ../shared/validation/public_runs.json next to the
//   repository and validation/data/runs.json); --only: cases whose id contains TEXT;
// --gpus N: the data-parallel degree raised (or lowered) so that the plan fills N GPUs, the
//   global batch scaled with it (micro-batches per replica unchanged); --all-ranks: every rank
//   simulated; --limit: the engine's wall-time limit per case (default 120 s); --cpu-limit: the
//   CPU time each of the case's processes may take (default 120 s; RLIMIT_CPU, so a loaded
//   machine does not stop a case that a quiet one completes); --budget: the des budget in
//   graph nodes (default DesOptions' own; 0: none); --node-by-node: DesOptions::chain_compute
//   off (one engine activity per compute node), to compare with the default.
// Each case runs in a child process of its own, so that its peak RSS (the child's and the des
// engine's, which simulate_des forks) is its own: wait4 reports the largest of both. The
// estimate is made before the fork, so the CPU time is what `simulate --engine des` spends
// (which checks a symmetric run's budget on the graph its engine lowers, and lowers an
// all-ranks run's one rank per stage for it). Each case is named on standard error when it
// starts, and a case stopped by a limit says which one in its row: a run never stops silently.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "orrery/base/error.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/validation/run_validation.hpp"
#include "plan_label.hpp"

namespace orrery {
namespace {

struct Args {
  std::vector<std::string> runs;
  std::string only;
  int64_t gpus = 0;
  bool all_ranks = false;
  double limit_s = 120;
  double cpu_limit_s = 120;
  bool node_by_node = false;
  int64_t budget = sim::DesOptions::kDefaultDesBudget;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool value = i + 1 < argc;
    if (flag == "--runs" && value) {
      a.runs.emplace_back(argv[++i]);
    } else if (flag == "--only" && value) {
      a.only = argv[++i];
    } else if (flag == "--gpus" && value) {
      a.gpus = std::atoll(argv[++i]);
    } else if (flag == "--budget" && value) {
      a.budget = std::atoll(argv[++i]);
    } else if (flag == "--limit" && value) {
      a.limit_s = std::atof(argv[++i]);
    } else if (flag == "--cpu-limit" && value) {
      a.cpu_limit_s = std::atof(argv[++i]);
    } else if (flag == "--node-by-node") {
      a.node_by_node = true;
    } else if (flag == "--all-ranks") {
      a.all_ranks = true;
    } else {
      throw base::InputError(
          "", 0, flag,
          "expected --runs FILE, --only TEXT, --gpus N, --limit S, --cpu-limit S, --budget N, "
          "--node-by-node or --all-ranks");
    }
  }
  if (a.runs.empty()) {
    a.runs = {std::string(ORRERY_SOURCE_DIR) + "/../shared/validation/public_runs.json",
              std::string(ORRERY_SOURCE_DIR) + "/validation/data/runs.json"};
  }
  return a;
}

// "tp4 pp8 dp336 vp12": the degrees that shape a des run.
std::string label(const pb::Plan& p) { return bench::degrees_label(p); }

// The run with its data-parallel degree changed to fill `gpus` GPUs (false: it cannot be).
bool scale(validation::PublishedRun& run, int64_t gpus) {
  pb::Parallelism& q = *run.plan.mutable_parallel();
  const int64_t replica = q.tp() * q.pp() * q.cp();
  if (gpus % replica != 0 || q.dp() <= 0) return false;
  const int64_t dp = gpus / replica;
  pb::Job& job = *run.plan.mutable_job();
  if (job.global_batch_size() % q.dp() != 0) return false;
  job.set_global_batch_size(job.global_batch_size() / q.dp() * dp);
  q.set_dp(dp);
  const int64_t per_node =
      topologies::total_devices(run.cluster) / topologies::total_nodes(run.cluster);
  const int64_t nodes = (gpus + per_node - 1) / per_node;
  topologies::resize(run.cluster, nodes);
  run.plan.set_nodes(nodes);
  return true;
}

// The case's des options from the arguments.
sim::DesOptions options_of(const Args& a) {
  sim::DesOptions o;
  o.timeline = false;
  o.all_ranks = a.all_ranks;
  o.time_limit_s = a.limit_s;
  o.max_nodes = a.budget;
  o.chain_compute = !a.node_by_node;
  return o;
}

// Runs in the case's child: the last columns of the table's row, or why it did not run.
std::string run_case(const plan::ResolvedPlan& resolved, const sim::CostModels& costs,
                     const Args& a) {
  try {
    sim::SimOutput out = sim::simulate_des(resolved, costs, options_of(a));
    out.result.clear_wall_time_s();
    // A digest of the whole result, to compare runs byte for byte across engine changes.
    const size_t digest = std::hash<std::string>()(out.result.SerializeAsString());
    char line[160];
    std::snprintf(line, sizeof line, "%lld | %.4f s | ok %016zx",
                  static_cast<long long>(out.result.events()), out.result.step_time_s(), digest);
    return line;
  } catch (const std::exception& x) {
    return std::string(" | | ") + x.what();
  }
}

// Why a case's child ended without a row: the CPU-time limit (SIGXCPU, SIGKILL past it) or
// anything else.
std::string died(int status, const Args& a) {
  if (WIFSIGNALED(status) && (WTERMSIG(status) == SIGXCPU || WTERMSIG(status) == SIGKILL)) {
    char why[96];
    std::snprintf(why, sizeof why, " | | stopped: over --cpu-limit %.0f s of CPU time",
                  a.cpu_limit_s);
    return why;
  }
  return " | | died (status " + std::to_string(status) + ")";
}

// The case in a child process: its wall and CPU time and peak RSS (its own and the engine's).
// `est`: the estimate's columns, made before the fork.
void bench_case(const validation::PublishedRun& run, const plan::ResolvedPlan& resolved,
                const sim::CostModels& costs, const std::string& est, const Args& a) {
  int fds[2];
  if (::pipe(fds) != 0) throw base::EnvironmentError("pipe failed");
  std::fflush(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    if (a.cpu_limit_s > 0) {
      // Inherited by the engine process, which gets its own allowance of the same size.
      const auto soft = static_cast<rlim_t>(a.cpu_limit_s);
      const rlimit cpu{soft, soft + 5};
      ::setrlimit(RLIMIT_CPU, &cpu);
    }
    const std::string line = run_case(resolved, costs, a);
    (void)!::write(fds[1], line.data(), line.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string line;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    line.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (line.empty()) line = died(status, a);
  const double cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                     1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  std::printf("| %s | %lld | %s | %.2f s | %.2f s | %.2f GiB | %s%s |\n", run.id.c_str(),
              static_cast<long long>(topologies::total_devices(run.cluster)),
              label(run.plan).c_str(), wall, cpu, static_cast<double>(usage.ru_maxrss) / (1 << 20),
              est.c_str(), line.c_str());
  std::fflush(stdout);
}

// Resolves the case and estimates its des run here, then benches it in a child.
void bench_run(const validation::PublishedRun& run, const Args& a) {
  std::fprintf(stderr, "orrery_des_bench: %s\n", run.id.c_str());
  try {
    const plan::ResolvedPlan resolved = plan::resolve_plan(run.plan, run.model, run.cluster);
    const topologies::Topology topology(run.cluster);
    const sim::CostModels costs(topology, resolved.precision.dtype);
    const sim::DesEstimate e = sim::des_estimate(resolved, costs, options_of(a));
    char est[128];
    std::snprintf(est, sizeof est, "%lld | %lld | %.2f GiB | ",
                  static_cast<long long>(e.simulated_ranks), static_cast<long long>(e.nodes),
                  e.memory_bytes / (1 << 30));
    bench_case(run, resolved, costs, est, a);
  } catch (const std::exception& x) {
    std::printf("| %s | %lld | %s | | | | | | | | | %s |\n", run.id.c_str(),
                static_cast<long long>(topologies::total_devices(run.cluster)),
                label(run.plan).c_str(), x.what());
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace orrery

int main(int argc, char** argv) {
  using namespace orrery;
  try {
    const Args a = parse(argc, argv);
    std::printf(
        "| case | GPUs | plan | wall | CPU | peak RSS | simulated ranks | estimated nodes | "
        "estimated memory | events | step | status |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& file : a.runs) {
      for (validation::PublishedRun run : validation::published_runs(file)) {
        if (!a.only.empty() && run.id.find(a.only) == std::string::npos) continue;
        if (!run.skipped.empty()) {
          std::printf("| %s | | | | | | | | | | | skipped: %s |\n", run.id.c_str(),
                      run.skipped.c_str());
          continue;
        }
        if (a.gpus > 0 && !scale(run, a.gpus)) {
          std::printf("| %s | | %s | | | | | | | | | does not fill %lld GPUs |\n", run.id.c_str(),
                      label(run.plan).c_str(), static_cast<long long>(a.gpus));
          continue;
        }
        bench_run(run, a);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orrery_des_bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
