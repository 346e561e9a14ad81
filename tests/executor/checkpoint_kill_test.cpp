// A process killed (SIGKILL: nothing runs after it) at random points of a checkpoint save: the
// shards and the manifest written as a rank writes them (base::write_file_durably per shard, the
// manifest last), killed after seeded random delays spanning the whole save. Whatever the point,
// the newest checkpoint with a manifest is whole (every shard of its size and checksum) and is
// either the previous one or the new one: never a half-written one.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "executor_test_util.hpp"
#include "orrery/base/temp_files.hpp"
#include "orrery/executor/checkpoint.hpp"

namespace orrery::executor {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kRanks = 4;
constexpr size_t kShardBytes = 2 << 20;

// Rank r's shard after `step`: distinct bytes per rank and step, so a stale shard fails its
// checksum.
std::string shard(int64_t rank, int64_t step) {
  std::string bytes(kShardBytes, '\0');
  std::mt19937_64 gen(static_cast<uint64_t>(rank * 1000 + step));
  for (auto& c : bytes) c = static_cast<char>(gen());
  return bytes;
}

// Every rank's shard, durably, then the manifest: the order train_rank's save keeps (the manifest
// is written once the ranks' all-reduce says every shard is on disk).
void save(const std::string& dir, int64_t step) {
  const fs::path folder = checkpoint_folder(dir, step);
  fs::create_directories(folder);
  Manifest m;
  m.step = step;
  m.world_size = kRanks;
  m.layout = "tp 1 cp 1 dp 4 pp 1 ep 1 sharding none";
  m.model_digest = m.plan_digest = m.run_digest = "test";
  for (int64_t r = 0; r < kRanks; ++r) {
    const std::string bytes = shard(r, step);
    base::write_file_durably(folder / shard_file_name(r), bytes);
    m.shards.push_back({r, shard_file_name(r), bytes.size(), checksum(bytes)});
  }
  write_manifest(folder, m);
}

TEST(CheckpointKill, KilledAtRandomPointsOfASaveLeavesAWholeNewestCheckpoint) {
  const std::string dir = test::fresh_dir("ckpt-kill");
  save(dir, 2);
  // How long one save of step 4 takes here, so the kills span all of it (and a little after).
  const auto start = std::chrono::steady_clock::now();
  save(dir, 4);
  const double save_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::mt19937_64 gen(20261127);
  std::uniform_real_distribution<double> when(0, 1.2 * save_s);
  int saw_previous = 0, saw_new = 0;
  for (int round = 0; round < 12; ++round) {
    fs::remove_all(checkpoint_folder(dir, 4));
    const double delay = when(gen);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      save(dir, 4);
      ::_exit(0);
    }
    ::usleep(static_cast<useconds_t>(delay * 1e6));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    const auto newest = newest_checkpoint(dir);
    ASSERT_TRUE(newest.has_value()) << "round " << round;
    const Manifest m = read_manifest(manifest_file(*newest));
    EXPECT_NO_THROW(verify_checkpoint(*newest, m))
        << "round " << round << ", killed after " << delay << " s of a " << save_s << " s save";
    ASSERT_TRUE(m.step == 2 || m.step == 4) << m.step;
    (m.step == 2 ? saw_previous : saw_new) += 1;
  }
  // The delays span the save, so some kills land before its manifest (whether a kill also
  // landed after it depends on this machine's timing; either outcome is checked above).
  EXPECT_GT(saw_previous, 0) << saw_new << " kills found the new checkpoint complete";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace orrery::executor
