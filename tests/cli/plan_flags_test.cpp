// A flag left out never overrides a plan file's field; a flag given wins (`simulate --plan`, and
// `plan`'s single-valued flags). Each field is checked both ways on a plan that states a value
// other than the flag's default: the plan alone simulates as the plan with its own value given as
// a flag, and not as the plan with the default given, so an absent flag that quietly applied its
// default would fail here.
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "run_command.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

std::string orrery(const std::string& args) { return std::string(ORRERY_BIN) + " " + args; }

struct FieldCase {
  const char* name;
  const char* plan_lines;    // the field, as the plan file states it
  const char* as_flag;       // the same value as a flag
  const char* default_flag;  // the default, or another value where the cluster rules it out
};

// On llama3-8b, one dgx-h100 node: the fields below the base plan leaves to them.
const char* kBase = "model: llama3-8b\ncluster: dgx-h100\n";

std::string plan_text(const FieldCase& c) {
  std::string text = kBase;
  std::string lines = c.plan_lines;
  // Job and parallel fields nest; the case overrides the base's block when it names one.
  if (lines.find("job:") == std::string::npos)
    text += "job: {global_batch_size: 64, seq_len: 4096, precision: bf16}\n";
  if (lines.find("parallel:") == std::string::npos) text += "parallel: {tp: 2, pp: 2, dp: 2}\n";
  if (lines.find("nodes:") == std::string::npos) text += "nodes: 1\n";
  if (lines.find("micro_batch_size:") == std::string::npos) text += "micro_batch_size: 1\n";
  return text + lines + "\n";
}

class PlanFieldWins : public ::testing::TestWithParam<FieldCase> {};

TEST_P(PlanFieldWins, OverAnAbsentFlagButNotAGivenOne) {
  const FieldCase& c = GetParam();
  const fs::path plan = fs::temp_directory_path() / ("orrery_plan_flags_" + std::string(c.name) +
                                                     "_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(plan) << plan_text(c);
  // --allow-oom: some of these plans do not fit on one node; the fields are what is compared.
  const std::string sim = "simulate --json --allow-oom --plan " + plan.string();
  const auto alone = run_command(orrery(sim));
  const auto same = run_command(orrery(sim + " " + c.as_flag));
  const auto other = run_command(orrery(sim + " " + c.default_flag));
  fs::remove(plan);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(alone.out, same.out) << c.name << ": the plan alone is not the plan's value";
  EXPECT_NE(alone.out, other.out) << c.name << ": the flag's default would make no difference";
}

INSTANTIATE_TEST_SUITE_P(
    SimulatePlanFile, PlanFieldWins,
    ::testing::Values(
        FieldCase{"precision", "job: {global_batch_size: 64, seq_len: 4096, precision: fp32}",
                  "--precision fp32", "--precision bf16"},
        FieldCase{"seq", "job: {global_batch_size: 64, seq_len: 2048, precision: bf16}",
                  "--seq 2048", "--seq 8192"},
        FieldCase{"nodes", "nodes: 2\nparallel: {tp: 2, pp: 2}", "--nodes 2", "--nodes 1"},
        FieldCase{"dp", "parallel: {tp: 1, pp: 2, dp: 4}", "--dp 4", "--dp 2 --tp 2"},
        FieldCase{"tp", "parallel: {tp: 4, pp: 2, dp: 1}", "--tp 4", "--tp 2 --dp 2"},
        FieldCase{"schedule", "parallel: {tp: 2, pp: 2, dp: 2, schedule: gpipe}",
                  "--schedule gpipe", "--schedule one_f_one_b"},
        FieldCase{"sharding", "sharding: zero1", "--sharding zero1", "--sharding none"},
        FieldCase{"recompute", "recompute: full", "--recompute full", "--recompute none"},
        FieldCase{"micro_batch", "micro_batch_size: 2", "--micro-batch 2", "--micro-batch 1"},
        FieldCase{"attention", "attention_kernel: materialized", "--attention materialized",
                  "--attention flash"},
        FieldCase{"layers_per_stage", "layers_per_stage: [20, 12]", "--layers-per-stage 20,12",
                  "--layers-per-stage 16,16"}),
    [](const ::testing::TestParamInfo<FieldCase>& info) { return std::string(info.param.name); });

// Flags that only switch on: absent, a plan's true stays on.
TEST(PlanFlags, SwitchesLeftOutKeepThePlansTrue) {
  for (const auto& [field, flag] :
       {std::pair<std::string, std::string>{"sequence_parallel", "--sp"},
        {"overlap_grad_reduce", "--overlap-grad-reduce"}}) {
    std::string outputs[3];
    for (int i = 0; i < 2; ++i) {
      const fs::path plan = fs::temp_directory_path() /
                            ("orrery_plan_switch_" + std::to_string(::getpid()) + ".yaml");
      const std::string value = i == 0 ? "true" : "false";
      std::ofstream(plan) << kBase
                          << "nodes: 1\nmicro_batch_size: 1\njob: {global_batch_size: 64, seq_len: "
                             "4096, precision: bf16}\n"
                          << "parallel: {tp: 2, pp: 2, dp: 2"
                          << (field == "sequence_parallel" ? ", sequence_parallel: " + value : "")
                          << "}\n"
                          << (field == "overlap_grad_reduce" ? field + ": " + value + "\n" : "");
      // --allow-oom: some of these plans do not fit on one node; the fields are what is compared.
      const std::string sim = "simulate --json --allow-oom --plan " + plan.string();
      outputs[i] = run_command(orrery(sim)).out;
      if (i == 0) outputs[2] = run_command(orrery(sim + " " + flag)).out;
      fs::remove(plan);
    }
    EXPECT_FALSE(outputs[0].empty()) << field;
    EXPECT_EQ(outputs[0], outputs[2]) << field;
    EXPECT_NE(outputs[0], outputs[1]) << field << ": the switch makes no difference";
  }
}

// `simulate --json` of a plan file with `field_line` appended equals that of the file without it
// plus `flag`, and differs from the file alone (the field makes a difference).
void expect_flag_is_field(const std::string& plan_base, const std::string& field_line,
                          const std::string& flag, const std::string& tag) {
  std::array<std::string, 3> outputs;
  for (int i = 0; i < 2; ++i) {
    const fs::path plan =
        fs::temp_directory_path() / ("orrery_plan_" + tag + std::to_string(::getpid()) + ".yaml");
    std::ofstream(plan) << plan_base << (i == 0 ? field_line : "");
    const std::string sim = "simulate --json --allow-oom --plan " + plan.string();
    const auto r = run_command(orrery(sim));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    outputs[static_cast<size_t>(i)] = r.out;
    if (i == 1) outputs[2] = run_command(orrery(sim + " " + flag)).out;
    fs::remove(plan);
  }
  EXPECT_FALSE(outputs[0].empty()) << flag;
  EXPECT_EQ(outputs[0], outputs[2]) << flag << " is not the plan's " << field_line;
  EXPECT_NE(outputs[0], outputs[1]) << field_line << " makes no difference";
}

// --moe-a2a-overlap switches moe_a2a_overlap on (mixtral-8x7b, ep 8 on 2 DGX H100 nodes): a plan
// file's true without the flag simulates as the plan without it plus the flag, and the overlap
// makes a difference.
TEST(PlanFlags, MoeA2aOverlapSwitchesOn) {
  expect_flag_is_field(
      "model: mixtral-8x7b\ncluster: dgx-h100\nnodes: 2\nmicro_batch_size: 1\n"
      "job: {global_batch_size: 32, seq_len: 4096, precision: bf16}\n"
      "parallel: {tp: 1, pp: 1, dp: 16, ep: 8}\nsharding: zero1\n",
      "moe_a2a_overlap: true\n", "--moe-a2a-overlap", "a2a_");
}

// --moe-capacity-factor, --moe-pad-to-capacity and --moe-expert-gemm are the plan's fields
// (mixtral-8x7b, ep 8 on 2 DGX H100 nodes, experts 1.5x over the mean): a capacity of 1.25 caps
// the busiest experts' work, padding fills every expert to it, per-expert GEMMs pay more launches.
TEST(PlanFlags, MoeFlagsAreThePlanFields) {
  const std::string plan =
      "model: mixtral-8x7b\ncluster: dgx-h100\nnodes: 2\nmicro_batch_size: 1\n"
      "job: {global_batch_size: 32, seq_len: 4096, precision: bf16}\n"
      "parallel: {tp: 1, pp: 1, dp: 16, ep: 8}\nsharding: zero1\nmoe_imbalance: 1.5\n";
  expect_flag_is_field(plan, "moe_capacity_factor: 1.25\n", "--moe-capacity-factor 1.25", "cap_");
  expect_flag_is_field(plan + "moe_capacity_factor: 1.25\n", "moe_pad_to_capacity: true\n",
                       "--moe-pad-to-capacity", "pad_");
  // ep 4: two local experts, so two GEMMs per kernel instead of one.
  std::string ep4 = plan;
  ep4.replace(ep4.find("ep: 8"), 5, "ep: 4");
  expect_flag_is_field(ep4, "moe_expert_gemm: per_expert\n", "--moe-expert-gemm per_expert",
                       "gemm_");
}

// --optimizer-state-dtype bf16 is the plan's `optimizer_state_dtype: bf16` (same output bytes),
// shrinks the optimizer state, and `plan` gives it to every candidate.
TEST(PlanFlags, OptimizerStateDtypeIsThePlanField) {
  expect_flag_is_field(
      "model: llama3-8b\ncluster: dgx-h100\nnodes: 1\nmicro_batch_size: 1\n"
      "job: {global_batch_size: 16, seq_len: 2048, precision: bf16}\n"
      "parallel: {tp: 1, pp: 1, dp: 8}\nsharding: zero1\n",
      "optimizer_state_dtype: bf16\n", "--optimizer-state-dtype bf16", "osd_");
  const auto p = run_command(orrery(
      "plan --model llama3-8b --cluster dgx-h100 --nodes 1 --global-batch 16 --seq 2048 --quiet "
      "--json --top 1 --optimizer-state-dtype bf16"));
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("\"optimizer_state_dtype\": \"bf16\""), std::string::npos)
      << p.out.substr(0, 400);
}

TEST(PlanFlags, PlanTakesExactlyOnePrecision) {
  const std::string job =
      "plan --model llama3-8b --cluster dgx-h100 --nodes 1 --global-batch 64 --quiet";
  const auto r = run_command(orrery(job + " --precision bf16,fp32"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--precision: got 'bf16,fp32', expected one of: fp32, bf16, fp16, fp8"),
            std::string::npos)
      << r.err;
}

// One rule for an unstated precision (plan::default_precision), whichever command reads the plan:
// fp32 where the devices are CPU cores, bf16 on GPUs.
TEST(PlanFlags, UnstatedPrecisionFollowsTheDevices) {
  const auto cpu = run_command(orrery("simulate --model tiny --cluster local --global-batch 4"));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_NE(cpu.out.find("x seq 64, fp32"), std::string::npos) << cpu.out;
  const auto gpu = run_command(
      orrery("simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --global-batch 8 --seq 2048 "
             "--sharding zero1"));
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_NE(gpu.out.find("x seq 2048, bf16"), std::string::npos) << gpu.out;
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("orrery-plan-" + std::to_string(::getpid()) + ".yaml"))
                              .string();
  const auto planned =
      run_command(orrery("plan --model tiny --cluster local --global-batch 4 "
                         "--rerank none --quiet --top 1 --out " +
                         out));
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  std::ifstream in(out);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(file.find("precision: fp32"), std::string::npos) << file;
  std::filesystem::remove(out);
}

TEST(PlanFlags, HelpStatesTheDefaults) {
  const auto r = run_command(orrery("simulate --help"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"a flag left out never does", "else bf16 on GPUs, fp32 on CPUs",
                           "default one_f_one_b", "default none", "the default) or des"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
}

}  // namespace
}  // namespace orrery
