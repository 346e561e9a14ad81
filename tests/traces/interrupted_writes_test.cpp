// Outputs after a failure or a signal in the middle of a write: no temporary left behind, the
// previous output intact, and the temporary of a run killed outright (SIGKILL: nothing can clean
// up) removed and named by the next write.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
  // The temporary folder cannot be created (a file has its name): nothing may change.
  std::ofstream(base::temp_path_for(dir_ / "trace")) << "in the way";
  EXPECT_THROW(write_chakra(ranks(3, "new"), dir_ / "trace", true), base::EnvironmentError);
  fs::remove(base::temp_path_for(dir_ / "trace"));
  EXPECT_EQ(read_all(before[0]), rank0);
  EXPECT_EQ(entries(), std::vector<std::string>{"trace"});
}

// A re-export replaces the whole folder: a rank file of the earlier, larger export is gone too,
// so the folder never mixes two exports.
TEST_F(InterruptedWrites, ChakraReExportReplacesTheFolderWhole) {
  write_chakra(ranks(4, "old"), dir_ / "trace", false);
  const auto after = write_chakra(ranks(2, "new"), dir_ / "trace", true);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_ / "trace")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"comm_groups.json", "trace.0.et", "trace.1.et"}));
  EXPECT_EQ(read_chakra(after[1]).nodes.at(0).name(), "new");
  EXPECT_EQ(entries(), std::vector<std::string>{"trace"});  // no temporary or old set left
}

// A folder of the user's own is never replaced, even with overwrite.
TEST_F(InterruptedWrites, ChakraExportNeverReplacesAFolderOfOtherFiles) {
  fs::create_directories(dir_ / "results");
  std::ofstream(dir_ / "results" / "notes.txt") << "mine";
  try {
    write_chakra(ranks(2, "new"), dir_ / "results", true);
    ADD_FAILURE() << "replaced a folder holding notes.txt";
  } catch (const base::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("holds notes.txt, which a Chakra export does not write"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_all(dir_ / "results" / "notes.txt"), "mine");
}

// A signal in the middle of an export removes the temporary folder and every file in it.
TEST_F(InterruptedWrites, SignalRemovesATemporaryFolderWithItsFiles) {
  const fs::path temp = base::temp_path_for(dir_ / "trace");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    base::remove_temporaries_on_signals();
    base::TempPath registered(temp);
    fs::create_directory(temp);
    for (int r = 0; r < 300; ++r) std::ofstream(temp / ("trace." + std::to_string(r) + ".et")) << r;
    ::raise(SIGTERM);
    ::_exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_TRUE(entries().empty());
}

// A temporary folder left by an export killed outright is removed and named by the next one.
TEST_F(InterruptedWrites, ChakraTemporaryFolderOfAKilledRunIsRemovedAndNamed) {
  const pid_t killed = dead_pid();
  const fs::path stale = dir_ / (".trace.tmp" + std::to_string(killed));
  fs::create_directory(stale);
  std::ofstream(stale / "trace.0.et") << "half";
  ::testing::internal::CaptureStderr();
  write_chakra(ranks(2, "new"), dir_ / "trace", false);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_NE(err.find("removed " + stale.string()), std::string::npos) << err;
  EXPECT_EQ(entries(), std::vector<std::string>{"trace"});
}

}  // namespace
}  // namespace orrery
