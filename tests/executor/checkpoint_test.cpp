// Checkpoints through `orrery run` (cli/src/cmd_run.cpp): a run resumed from a checkpoint ends
// with the losses of an uninterrupted one, bit for bit, under DP, TP, PP, ZeRO and FSDP; a
// checkpoint of another plan is refused; a rank killed while saving leaves the previous
// checkpoint whole; --max-restarts carries a job past an injected failure. Saves and loads are
// timed in the measured trace.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "executor_test_util.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/filesystem_type.hpp"
#include "orrery/executor/checkpoint.hpp"
#include "orrery/executor/results.hpp"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/traces/spec_io.hpp"

namespace orrery::executor {
namespace {

using test::Ran;

Ran run_cli(const std::string& args) { return test::run_cli(ORRERY_RUN_CLI_BIN, args); }

// A tiny model on local ranks, 4 sequences of 32 tokens a step, plus `plan`'s flags.
std::string job(const std::string& plan, int64_t steps, int seed = 3) {
  return "--model tiny --cluster local --global-batch 4 --micro-batch 1 --seq 32 --seed " +
         std::to_string(seed) + " " + plan + " --steps " + std::to_string(steps);
}

std::vector<StepResult> steps_of(const std::string& dir, int64_t first, int64_t last) {
  std::vector<StepResult> out;
  for (int64_t s = first; s <= last; ++s) out.push_back(read_step_result(step_file(dir, s)));
  return out;
}

// Bit for bit: the same doubles, not close ones.
void expect_same_losses(const std::vector<StepResult>& got, const std::vector<StepResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].step, want[i].step);
    EXPECT_EQ(got[i].loss, want[i].loss) << "step " << got[i].step;
    EXPECT_EQ(got[i].grad_norm, want[i].grad_norm) << "step " << got[i].step;
  }
}

struct Dirs {
  std::string base, ckpt, first, resumed;
  explicit Dirs(const std::string& name)
      : base(test::fresh_dir("ckpt-" + name)),
        ckpt(base + "/ckpt"),
        first(base + "/first"),
        resumed(base + "/resumed") {}
  ~Dirs() { std::filesystem::remove_all(base); }
};

// The measured trace holds every rank's save (or load) of its shard: the manifest's bytes, timed,
// on the file system the checkpoint folder is on (`orrery calibrate` fits storage from them).
void expect_timed_io(const std::string& trace_file, pb::CheckpointOp op, const Manifest& m,
                     const std::string& dir) {
  pb::ExecGraph trace;
  read_spec_file(trace_file, &trace);
  ASSERT_EQ(trace.ranks_size(), m.world_size);
  for (const auto& rank : trace.ranks()) {
    ASSERT_EQ(rank.checkpoint_io_size(), 1) << trace_file << " rank " << rank.rank();
    const pb::CheckpointIo& io = rank.checkpoint_io(0);
    EXPECT_EQ(io.op(), op);
    EXPECT_EQ(io.step(), 2);
    EXPECT_EQ(io.bytes(), static_cast<double>(m.shards[static_cast<size_t>(rank.rank())].bytes));
    EXPECT_GT(io.file_s(), 0);
    EXPECT_GT(io.host_s(), 0);
    EXPECT_EQ(io.filesystem(), base::filesystem_type(dir));
  }
}

// Uninterrupted: steps 1..4 (without checkpoint flags). Interrupted: steps 1..2 with a checkpoint
// after step 2, then a second run resumed from it to step 4.
void check_resume_is_bit_identical(const std::string& name, const std::string& plan) {
  SCOPED_TRACE(name);
  const Dirs d(name);
  const Ran whole = run_cli(job(plan, 4) + " --out " + d.base + "/whole");
  ASSERT_EQ(whole.status, 0) << whole.out;
  const Ran first = run_cli(job(plan, 2) + " --checkpoint-every 2 --checkpoint-dir " + d.ckpt +
                            " --out " + d.first);
  ASSERT_EQ(first.status, 0) << first.out;
  const auto folder = checkpoint_folder(d.ckpt, 2);
  const Manifest m = read_manifest(manifest_file(folder));
  EXPECT_EQ(m.step, 2);
  verify_checkpoint(folder, m);
  const Ran resumed = run_cli(job(plan, 4) + " --resume " + d.ckpt + " --out " + d.resumed);
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("resumed from"), std::string::npos) << resumed.out;
  EXPECT_FALSE(std::filesystem::exists(step_file(d.resumed, 2)));  // it ran steps 3 and 4 only
  EXPECT_TRUE(std::filesystem::exists(d.resumed + "/trace.json"));
  expect_same_losses(steps_of(d.first, 1, 2), steps_of(d.base + "/whole", 1, 2));
  expect_same_losses(steps_of(d.resumed, 3, 4), steps_of(d.base + "/whole", 3, 4));
  expect_timed_io(d.first + "/trace.json", pb::CHECKPOINT_OP_SAVE, m, d.ckpt);
  expect_timed_io(d.resumed + "/trace.json", pb::CHECKPOINT_OP_LOAD, m, d.ckpt);
}

TEST(Checkpoint, ResumedDataParallelRunIsBitIdentical) {
  check_resume_is_bit_identical("dp", "--dp 2");
}

TEST(Checkpoint, ResumedTensorParallelRunIsBitIdentical) {
  check_resume_is_bit_identical("tp", "--tp 2");
}

TEST(Checkpoint, ResumedPipelineRunIsBitIdentical) {
  check_resume_is_bit_identical("pp", "--pp 2");
}

TEST(Checkpoint, ResumedZeroRunIsBitIdentical) {
  check_resume_is_bit_identical("zero1", "--dp 2 --sharding zero1");
}

TEST(Checkpoint, ResumedFsdpRunIsBitIdentical) {
  check_resume_is_bit_identical("fsdp", "--dp 2 --sharding fsdp");
}

TEST(Checkpoint, CheckpointOfAnotherPlanOrWithNoStepLeftIsRefused) {
  const Dirs d("other");
  const Ran first = run_cli(job("--dp 2", 2) + " --checkpoint-every 2 --checkpoint-dir " + d.ckpt);
  ASSERT_EQ(first.status, 0) << first.out;
  const Ran other = run_cli(job("--tp 2", 4) + " --resume " + d.ckpt);
  EXPECT_NE(other.status, 0) << other.out;
  EXPECT_NE(other.out.find("manifest.json"), std::string::npos) << other.out;
  EXPECT_NE(other.out.find("plan_digest"), std::string::npos) << other.out;
  const Ran seed = run_cli(job("--dp 2", 4, 4) + " --resume " + d.ckpt);
  EXPECT_NE(seed.status, 0) << seed.out;
  EXPECT_NE(seed.out.find("run_digest"), std::string::npos) << seed.out;
  // The checkpoint holds step 2 of 2: resuming it to --steps 2 would train nothing.
  const Ran done = run_cli(job("--dp 2", 2) + " --resume " + d.ckpt);
  EXPECT_EQ(done.status, 2) << done.out;
  EXPECT_NE(done.out.find("manifest.json: step: 2: the checkpoint already holds every step of "
                          "--steps 2, nothing left to train"),
            std::string::npos)
      << done.out;
}

TEST(Checkpoint, RankKilledWhileSavingLeavesThePreviousCheckpointWhole) {
  const Dirs d("killed");
  const Ran whole = run_cli(job("--dp 2", 6) + " --out " + d.base + "/whole");
  ASSERT_EQ(whole.status, 0) << whole.out;
  const Ran killed = run_cli(job("--dp 2", 6) + " --checkpoint-every 2 --checkpoint-dir " + d.ckpt +
                             " --inject-failure rank=1,step=4,at=save");
  EXPECT_NE(killed.status, 0) << killed.out;
  EXPECT_NE(killed.out.find("exits while saving the checkpoint of step 4"), std::string::npos)
      << killed.out;
  // The save after step 4 never finished: no manifest, and the newest checkpoint is step 2's.
  EXPECT_FALSE(std::filesystem::exists(manifest_file(checkpoint_folder(d.ckpt, 4))));
  const auto newest = newest_checkpoint(d.ckpt);
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(*newest, checkpoint_folder(d.ckpt, 2));
  const Manifest m = read_manifest(manifest_file(*newest));
  verify_checkpoint(*newest, m);
  const Ran resumed = run_cli(job("--dp 2", 6) + " --resume " + d.ckpt + " --out " + d.resumed);
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  expect_same_losses(steps_of(d.resumed, 3, 6), steps_of(d.base + "/whole", 3, 6));
}

TEST(Checkpoint, MaxRestartsCarriesTheJobPastAFailedRank) {
  const Dirs d("restart");
  const Ran whole = run_cli(job("--dp 2", 6) + " --out " + d.base + "/whole");
  ASSERT_EQ(whole.status, 0) << whole.out;
  const std::string failing = job("--dp 2", 6) + " --checkpoint-every 2 --checkpoint-dir " +
                              d.ckpt + " --inject-failure rank=1,step=5";
  const Ran no_restart = run_cli(failing + " --max-restarts 0");
  EXPECT_NE(no_restart.status, 0) << no_restart.out;
  std::filesystem::remove_all(d.ckpt);
  const Ran restarted = run_cli(failing + " --max-restarts 1 --out " + d.resumed);
  ASSERT_EQ(restarted.status, 0) << restarted.out;
  EXPECT_NE(restarted.out.find("restart 1 of 1"), std::string::npos) << restarted.out;
  EXPECT_NE(restarted.out.find("step_000004"), std::string::npos) << restarted.out;
  expect_same_losses(steps_of(d.resumed, 1, 6), steps_of(d.base + "/whole", 1, 6));
}

TEST(Checkpoint, FailureInjectionIsParsedOrRefused) {
  const FailureInjection f = parse_failure_injection("rank=1,step=4,at=save");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.step, 4);
  EXPECT_TRUE(f.during_save);
  EXPECT_FALSE(parse_failure_injection("step=2,rank=0").during_save);
  for (const char* bad :
       {"rank=1", "rank=x,step=2", "rank=1,step=0", "rank=1,step=2,at=later", "node=1,step=2"}) {
    EXPECT_THROW(parse_failure_injection(bad), base::InputError) << bad;
  }
}

}  // namespace
}  // namespace orrery::executor
