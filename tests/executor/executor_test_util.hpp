// Helpers for the executor's multi-process tests: a fresh output directory and a job of the rank
// program (tests/executor/rank_main.cpp) launched through the executor's launcher.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "orrery/executor/launcher.hpp"
#include "orrery/executor/results.hpp"
#include "test_paths.hpp"

namespace orrery::executor::test {

inline std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("orrery-executor-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Runs the rank program on `world_size` local ranks with `args`; returns rank 0's output.
inline std::string launch(int64_t world_size, const std::vector<std::string>& args,
                          double timeout_s = 120) {
  LaunchOptions o;
  o.argv = {ORRERY_EXECUTOR_RANK_BIN};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.world_size = world_size;
  o.timeout_s = timeout_s;
  std::ostringstream out;
  o.out = &out;
  launch_local(o);
  return out.str();
}

// A command's exit status and its standard output and error together.
struct Ran {
  int status = -1;
  std::string out;
};

// Runs a shell command line, stdout and stderr together; status -1 unless it exited.
inline Ran run_shell(const std::string& command) {
  Ran r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs `binary run args` under a 180 s `timeout`.
inline Ran run_cli(const std::string& binary, const std::string& args) {
  return run_shell("timeout 180 " + binary + " run " + args);
}

// `mpirun -np 2` on loopback as root (CI containers), under a `timeout` of `seconds`; the
// command to run and its arguments follow.
inline std::string mpirun_two_ranks(const std::string& mpirun, int seconds) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout " +
         std::to_string(seconds) + " " + mpirun +
         " --allow-run-as-root --oversubscribe -np 2 --mca btl self,tcp --mca btl_tcp_if_include "
         "lo" +
         " --mca oob_tcp_if_include lo ";
}

// What a training run left under its directory: every step's results and the saved parameters.
struct Outcome {
  std::vector<StepResult> steps;
  std::vector<NamedArray> params;
};

inline Outcome read_outcome(const std::string& dir, int64_t steps) {
  Outcome o;
  for (int64_t s = 1; s <= steps; ++s) o.steps.push_back(read_step_result(step_file(dir, s)));
  o.params = read_parameters(params_file(dir));
  return o;
}

// A dense plan of the correctness tests: degrees and extra flags of the rank program.
struct Plan {
  std::string name;
  int64_t tp = 1, dp = 1, pp = 1;
  std::vector<std::string> extra;  // --placement, --sharding, --bucket-bytes, ...
  int64_t cp = 1;
};

// Trains `plan` for `steps` steps (global batch 4, micro-batch 1, seq 32, seed 7) on real ranks
// and returns what it left; `prefix` keeps the test programs' directories apart.
inline Outcome train(const std::string& prefix, const std::string& model, const Plan& plan,
                     int64_t steps) {
  const std::string dir = fresh_dir(prefix + plan.name);
  std::vector<std::string> args = {"--model",        model,
                                   "--tp",           std::to_string(plan.tp),
                                   "--dp",           std::to_string(plan.dp),
                                   "--pp",           std::to_string(plan.pp),
                                   "--cp",           std::to_string(plan.cp),
                                   "--global-batch", "4",
                                   "--micro-batch",  "1",
                                   "--seq",          "32",
                                   "--steps",        std::to_string(steps),
                                   "--seed",         "7",
                                   "--out",          dir,
                                   "--save-params"};
  args.insert(args.end(), plan.extra.begin(), plan.extra.end());
  const std::string out = launch(plan.tp * plan.cp * plan.dp * plan.pp, args);
  EXPECT_NE(out.find("step " + std::to_string(steps) + " loss"), std::string::npos) << out;
  Outcome o = read_outcome(dir, steps);
  std::filesystem::remove_all(dir);
  return o;
}

// The one-process run of `model` (plan `name`, with `extra` flags such as a precision) that the
// correctness tests compare their plans with, trained once per test program.
inline const Outcome& one_process(const std::string& prefix, const std::string& model,
                                  int64_t steps, const std::vector<std::string>& extra = {},
                                  const std::string& name = "single") {
  static std::map<std::string, Outcome> cache;
  std::string key = prefix + name + "|" + model;
  for (const auto& e : extra) key += "|" + e;
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(key, train(prefix, model, {name, 1, 1, 1, extra}, steps)).first;
  return it->second;
}

// The same losses (absolute `loss_tolerance`), gradient norms (`grad_norm_tolerance` relative) and
// parameters (absolute `param_tolerance`) as the reference run; prints the largest differences.
inline void expect_matches(const Outcome& ref, const Outcome& got, double loss_tolerance,
                           double param_tolerance, double grad_norm_tolerance = 1e-4) {
  ASSERT_EQ(ref.steps.size(), got.steps.size());
  double loss_diff = 0, param_diff = 0, norm_diff = 0;
  for (size_t s = 0; s < ref.steps.size(); ++s) {
    loss_diff = std::max(loss_diff, std::abs(ref.steps[s].loss - got.steps[s].loss));
    norm_diff = std::max(norm_diff, std::abs(ref.steps[s].grad_norm - got.steps[s].grad_norm) /
                                        ref.steps[s].grad_norm);
    EXPECT_NEAR(ref.steps[s].loss, got.steps[s].loss, loss_tolerance) << "step " << s + 1;
    EXPECT_NEAR(ref.steps[s].grad_norm, got.steps[s].grad_norm,
                grad_norm_tolerance * ref.steps[s].grad_norm)
        << "step " << s + 1;
  }
  ASSERT_EQ(ref.params.size(), got.params.size());
  std::string worst;
  for (size_t i = 0; i < ref.params.size(); ++i) {
    const auto& a = ref.params[i];
    const auto& b = got.params[i];
    ASSERT_EQ(a.name, b.name);
    ASSERT_EQ(a.shape, b.shape) << a.name;
    for (size_t k = 0; k < a.values.size(); ++k) {
      const double d = std::abs(a.values[k] - b.values[k]);
      if (d > param_diff) param_diff = d, worst = a.name;
    }
  }
  EXPECT_LE(param_diff, param_tolerance) << "worst: " << worst;
  std::cout << "max |loss diff| " << loss_diff << ", max relative grad norm diff " << norm_diff
            << ", max |param diff| " << param_diff << " (" << worst << ")\n";
}

}  // namespace orrery::executor::test
