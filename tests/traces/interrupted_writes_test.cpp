// Outputs after a failure or a signal in the middle of a write: no temporary left behind, the
// previous output intact, and the temporary of a run killed outright (SIGKILL: nothing can clean
// up) removed and named by the next write.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/base/temp_files.hpp"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/traces/chakra.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;

class InterruptedWrites : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("orrery_interrupted_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

std::string read_all(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The pid of a process that has ended (a child already reaped).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

TEST_F(InterruptedWrites, SignalRemovesTheTemporaryAndStillEndsTheProcess) {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const fs::path temp = dir_ / (".out.json.tmp" + std::to_string(sig));
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      base::remove_temporaries_on_signals();
      base::TempPath registered(temp);
      std::ofstream(temp) << "half of a file";
      ::raise(sig);
      ::_exit(0);  // not reached: the signal ends the process
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << ": status " << status;
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_FALSE(fs::exists(temp)) << "signal " << sig << " left " << temp;
  }
}

TEST_F(InterruptedWrites, KillDuringALargeWriteLeavesNoTemporaryAndAWholeFile) {
  const fs::path file = dir_ / "graph.json";
  write_file_atomically(file, "previous\n", false);
  const std::string big(64 << 20, 'x');
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    for (;;) write_file_atomically(file, big, true);
  }
  ::usleep(300 * 1000);
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_EQ(entries(), std::vector<std::string>{"graph.json"});
  const auto size = fs::file_size(file);
  EXPECT_TRUE(size == big.size() || read_all(file) == "previous\n") << size << " bytes";
}

TEST_F(InterruptedWrites, TemporaryOfAKilledRunIsRemovedAndNamed) {
  const fs::path file = dir_ / "plan.yaml";
  write_file_atomically(file, "a: 1\n", false);
  const pid_t killed = dead_pid();
  const fs::path stale = dir_ / (".plan.yaml.tmp" + std::to_string(killed));
  std::ofstream(stale) << "a: half";
  // pid 1 always runs: its temporary may belong to a write in progress and is left alone.
  const fs::path live = dir_ / ".plan.yaml.tmp1";
  std::ofstream(live) << "a: in progress";
  ::testing::internal::CaptureStderr();
  write_file_atomically(file, "a: 2\n", true);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(read_all(file), "a: 2\n");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_NE(err.find("removed " + stale.string()), std::string::npos) << err;
  EXPECT_NE(err.find("(pid " + std::to_string(killed) + ") that was killed"), std::string::npos)
      << err;
}

pb::ExecGraph ranks(int count, const std::string& node) {
  pb::ExecGraph g;
  g.set_world_size(count);
  for (int r = 0; r < count; ++r) {
    auto* rank = g.add_ranks();
    rank->set_rank(r);
    rank->add_streams("compute");
    auto* n = rank->add_nodes();
    n->set_name(node);
    n->set_kind(pb::NODE_KIND_COMPUTE);
    n->set_op_class(pb::OP_CLASS_GEMM);
    n->set_duration_s(1e-3);
  }
  return g;
}

TEST_F(InterruptedWrites, ChakraExportThatFailsHalfwayKeepsThePreviousSet) {
  const auto before = write_chakra(ranks(3, "old"), dir_ / "trace", false);
  ASSERT_EQ(before.size(), 4u);  // three ranks and the comm-group file
  const std::string rank0 = read_all(before[0]);
  // Rank 2's temporary cannot be created (a folder has its name): the export fails after ranks 0
  // and 1 were written, and none of the three files may change.
  fs::create_directory(base::temp_path_for(dir_ / "trace.2.et"));
  EXPECT_THROW(write_chakra(ranks(3, "new"), dir_ / "trace", true), base::EnvironmentError);
  fs::remove(base::temp_path_for(dir_ / "trace.2.et"));
  EXPECT_EQ(read_all(before[0]), rank0);
  EXPECT_EQ(entries(), (std::vector<std::string>{"trace.0.et", "trace.1.et", "trace.2.et",
                                                 "trace.comm_groups.json"}));
}

}  // namespace
}  // namespace orrery
