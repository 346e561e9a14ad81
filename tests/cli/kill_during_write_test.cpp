// A kill during every kind of write the `orrery` front makes (issue #28, item 8): the real binary
// is signalled at seeded random points of a run that writes a file, then run again cleanly.
// SIGKILL: each target is absent, its previous content, or whole (the clean run's bytes: same
// inputs, same output), and the next run names the temporary the killed one left and removes it.
// SIGINT/SIGTERM: the process ends by the signal (or finished first), the target is previous or
// whole, and no temporary is left. A clean run leaves no temporary. Checkpoints are covered by
// tests/executor/checkpoint_kill_test.cpp; `run --out` step files and traces go through the same
// writer (write_file_atomically) and are exercised by the executor's tests.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "run_command.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::run_command;

struct WriteKind {
  const char* name;
  std::string args;                  // "{OUT}" stands for the target's path prefix
  std::vector<std::string> targets;  // file names in the folder; empty: all the clean run wrote
};

const std::string kJob =
    "--model llama3-8b --cluster dgx-h100 --nodes 1 --tp 2 --pp 2 --global-batch 64 --seq 4096";

std::vector<WriteKind> kinds() {
  return {
      {"plan --out", "plan " + kJob + " --out {OUT}/plan.yaml --force", {"plan.yaml"}},
      {"simulate --graph",
       "simulate " + kJob + " --graph {OUT}/graph.json --force",
       {"graph.json"}},
      {"simulate --trace",
       "simulate " + kJob + " --engine des --trace {OUT}/trace.json --force",
       {"trace.json"}},
      // The folder et/ (every rank's file and comm_groups.json, written whole): the targets are
      // the files the clean run wrote in it.
      {"simulate --chakra", "simulate " + kJob + " --engine des --chakra {OUT}/et --force", {}},
      {"simulate --html", "simulate " + kJob + " --html {OUT}/page.html --force", {"page.html"}},
  };
}

std::string command_of(const WriteKind& k, const fs::path& dir) {
  std::string args = k.args;
  for (size_t at; (at = args.find("{OUT}")) != std::string::npos;)
    args.replace(at, 5, dir.string());
  return std::string(ORRERY_BIN) + " " + args;
}

// Temporaries of any output in `dir` (".NAME.tmp<pid>").
std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(".") && name.find(".tmp") != std::string::npos) out.push_back(name);
  }
  return out;
}

// Starts `command` (through sh's exec, so the pid is orrery's), signals it after `delay`, and
// returns its wait status.
int signalled_run(const std::string& command, std::chrono::microseconds delay, int sig) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + command + " >/dev/null 2>&1").c_str(), nullptr);
    ::_exit(127);
  }
  std::this_thread::sleep_for(delay);
  ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

class KillDuringWrite : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("orrery_kill_write_" + std::to_string(::getpid()));
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // The clean run's bytes of each target, and how long the run took.
  std::vector<std::string> reference(WriteKind& k, std::chrono::microseconds& took) {
    const fs::path dir = root_ / "reference";
    fs::remove_all(dir);
    fs::create_directories(dir);
    const auto start = std::chrono::steady_clock::now();
    const auto r = run_command(command_of(k, dir));
    took = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                 start);
    EXPECT_EQ(r.exit_code, 0) << k.name << ": " << r.err;
    EXPECT_TRUE(temporaries(dir).empty()) << k.name << ": a clean run left a temporary";
    if (k.targets.empty()) {
      for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file()) k.targets.push_back(e.path().lexically_relative(dir).string());
      std::sort(k.targets.begin(), k.targets.end());
    }
    EXPECT_FALSE(k.targets.empty()) << k.name;
    std::vector<std::string> bytes;
    for (const auto& t : k.targets) bytes.push_back(read_file((dir / t).string()));
    for (const auto& b : bytes) EXPECT_FALSE(b.empty()) << k.name;
    return bytes;
  }

  void expect_previous_or_whole(const WriteKind& k, const fs::path& dir,
                                const std::vector<std::string>& whole, const std::string& what) {
    for (size_t i = 0; i < k.targets.size(); ++i) {
      const std::string now = read_file((dir / k.targets[i]).string());
      EXPECT_TRUE(now == "previous\n" || now == whole[i])
          << what << ": " << k.targets[i] << " is neither its previous content nor whole ("
          << now.size() << " bytes of " << whole[i].size() << ")";
    }
  }

  fs::path root_;
};

TEST_P(KillDuringWrite, EveryKindOfWrite) {
  std::mt19937_64 rng(static_cast<uint64_t>(GetParam()));
  for (WriteKind& k : kinds()) {
    std::chrono::microseconds took{};
    const auto whole = reference(k, took);
    for (const int sig : {SIGKILL, SIGTERM, SIGINT}) {
      const fs::path dir = root_ / (std::string("run") + std::to_string(sig));
      fs::remove_all(dir);
      fs::create_directories(dir);
      for (const auto& t : k.targets) {
        fs::create_directories((dir / t).parent_path());
        std::ofstream(dir / t) << "previous\n";
      }
      // Anywhere in the run, the last tenth (where the writes happen) twice as often.
      std::uniform_int_distribution<int64_t> anywhere(0, took.count());
      std::uniform_int_distribution<int64_t> late(took.count() * 9 / 10, took.count());
      const std::chrono::microseconds delay(rng() % 2 ? anywhere(rng) : late(rng));
      const std::string what = std::string(k.name) + " signal " + std::to_string(sig) + " at " +
                               std::to_string(delay.count()) + " us of " +
                               std::to_string(took.count());
      const int status = signalled_run(command_of(k, dir), delay, sig);
      const bool finished = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      EXPECT_TRUE(finished || (WIFSIGNALED(status) && WTERMSIG(status) == sig))
          << what << ": wait status " << status;
      expect_previous_or_whole(k, dir, whole, what);
      const auto left = temporaries(dir);
      if (sig != SIGKILL) EXPECT_TRUE(left.empty()) << what << ": left " << left.front();
      // The next run replaces the outputs whole and names what the killed run left.
      const auto again = run_command(command_of(k, dir));
      EXPECT_EQ(again.exit_code, 0) << what << ": " << again.err;
      for (const auto& t : left)
        EXPECT_NE(again.err.find("note: removed " + (dir / t).string()), std::string::npos)
            << what << ": the rerun did not name " << t << "\n"
            << again.err;
      EXPECT_TRUE(temporaries(dir).empty()) << what << ": a temporary survived the rerun";
      for (size_t i = 0; i < k.targets.size(); ++i)
        EXPECT_EQ(read_file((dir / k.targets[i]).string()), whole[i]) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, KillDuringWrite, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace orrery
