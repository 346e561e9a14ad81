// Framework profiles (plan/frameworks/*.yaml): every shipped profile reads and sources each value,
// a name or version no profile covers is refused naming the file, the field and the known values,
// a profile fills only what the plan leaves unstated, and validate --runs applies the profile a
// case's framework text names (and none where the text names no release, unless the profile is
// unversioned).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "orrery/base/error.hpp"
#include "orrery/plan/framework_profile.hpp"
#include "orrery/validation/run_validation.hpp"
#include "test_paths.hpp"

namespace orrery::plan {
namespace {

namespace fs = std::filesystem;

const fs::path kPublicRuns = fs::path(ORRERY_SOURCE_DIR) / "../shared/validation/public_runs.json";

std::string refusal(std::string_view text) {
  try {
    find_framework_profile(text, "plan.yaml", "framework", 7);
  } catch (const base::InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(FrameworkProfiles, EveryShippedProfileReadsWithASourcePerValue) {
  // framework_profiles() refuses a setting without a source and a source without a setting.
  ASSERT_GE(framework_profiles().size(), 6U);
  for (const auto& p : framework_profiles()) {
    EXPECT_FALSE(p.description().empty()) << p.name();
    EXPECT_EQ(static_cast<size_t>(p.sources_size()), [&] {
      std::vector<const google::protobuf::FieldDescriptor*> set;
      p.settings().GetReflection()->ListFields(p.settings(), &set);
      return set.size();
    }()) << p.name();
    for (const auto& s : p.sources()) EXPECT_NE(s.source().find("https://"), std::string::npos);
  }
  const auto known = known_frameworks();
  for (const char* k : {"megatron-lm@2021", "megatron-core@0.6", "nemo@24.09", "torchtitan@2024-12",
                        "pytorch-fsdp1@2.4", "pytorch-fsdp2@2.4"}) {
    EXPECT_NE(std::find(known.begin(), known.end(), k), known.end()) << k;
  }
}

TEST(FrameworkProfiles, AnUnknownNameOrVersionIsRefusedWithTheKnownValues) {
  const std::string name = refusal("megatron@0.6");
  EXPECT_NE(name.find("plan.yaml:7: framework: got 'megatron@0.6', a framework no profile "
                      "describes; known: "),
            std::string::npos)
      << name;
  EXPECT_NE(name.find("megatron-core@0.6, megatron-core@0.6.0"), std::string::npos) << name;
  const std::string version = refusal("megatron-core@0.9");
  EXPECT_NE(version.find("got 'megatron-core@0.9', a version no megatron-core profile covers"),
            std::string::npos)
      << version;
  EXPECT_NE(refusal("torchtitan").find("expected NAME@VERSION"), std::string::npos);
  EXPECT_EQ(refusal("megatron-core@0.6"), "accepted");
  // PyTorch FSDP's profiles are unversioned: their name alone is enough, and listed as known.
  EXPECT_EQ(refusal("pytorch-fsdp1"), "accepted");
  EXPECT_EQ(find_framework_profile("pytorch-fsdp2", "", "framework").name(), "pytorch-fsdp2");
  EXPECT_NE(name.find("pytorch-fsdp1, pytorch-fsdp1@2.0"), std::string::npos) << name;
}

TEST(FrameworkProfiles, TheProfileFillsOnlyWhatThePlanLeavesUnstated) {
  pb::Plan plan;
  plan.set_overlap_grad_reduce(true);  // stated: Megatron's flag passed on the command line
  plan.set_tp_comm_overlap(true);      // unstated: the profile's false replaces it
  const auto& profile = find_framework_profile("megatron-core@0.6", "", "framework");
  const AppliedProfile applied = apply_framework_profile(
      plan, profile, "megatron-core@0.6",
      [](const std::string& field) { return field == "overlap_grad_reduce"; });
  EXPECT_TRUE(plan.overlap_grad_reduce());
  EXPECT_FALSE(plan.tp_comm_overlap());
  EXPECT_FALSE(plan.overlap_param_gather());
  EXPECT_EQ(plan.grad_reduce_dtype(), pb::GRAD_REDUCE_DTYPE_FP32);
  ASSERT_EQ(applied.stated.size(), 1U);
  EXPECT_EQ(applied.stated[0].field, "overlap_grad_reduce");
  EXPECT_EQ(applied.stated[0].value, "false");
  std::map<std::string, std::string> filled;
  for (const auto& v : applied.filled) {
    filled[v.field] = v.value;
    EXPECT_NE(v.source.find("core_v0.6.0"), std::string::npos) << v.field;
  }
  EXPECT_EQ(filled, (std::map<std::string, std::string>{{"overlap_param_gather", "false"},
                                                        {"tp_comm_overlap", "false"},
                                                        {"grad_reduce_dtype", "fp32"}}));
}

// torchtitan attends with PyTorch's SDPA, whose flash backend is FlashAttention-2: the profile
// names flash_2 for a plan that does not state its kernel, and leaves a stated one alone.
TEST(FrameworkProfiles, TorchtitanRunsFlashAttention2) {
  const auto& profile = find_framework_profile("torchtitan@2024-12", "", "framework");
  pb::Plan unstated;
  const AppliedProfile applied = apply_framework_profile(unstated, profile, "torchtitan@2024-12",
                                                         [](const std::string&) { return false; });
  EXPECT_EQ(unstated.attention_kernel(), pb::ATTENTION_KERNEL_FLASH_2);
  bool sourced = false;
  for (const auto& v : applied.filled) {
    if (v.field != "attention_kernel") continue;
    EXPECT_EQ(v.value, "flash_2");
    sourced = v.source.find("scaled_dot_product_attention") != std::string::npos;
  }
  EXPECT_TRUE(sourced);
  pb::Plan stated;
  stated.set_attention_kernel(pb::ATTENTION_KERNEL_FLASH_3);
  apply_framework_profile(stated, profile, "torchtitan@2024-12",
                          [](const std::string& field) { return field == "attention_kernel"; });
  EXPECT_EQ(stated.attention_kernel(), pb::ATTENTION_KERNEL_FLASH_3);
}

TEST(FrameworkProfiles, ValidateRunsAppliesTheProfileTheFrameworkTextNames) {
  std::map<std::string, validation::PublishedRun> runs, without;
  for (auto& r : validation::published_runs(kPublicRuns)) runs[r.id] = std::move(r);
  for (auto& r : validation::published_runs(kPublicRuns, false)) without[r.id] = std::move(r);
  // "Megatron-LM @6985e58": the SC'21 commit, whose DDP all-reduces after the backward.
  EXPECT_EQ(runs.at("SC21-T1-1.7B").profile, "megatron-lm@6985e58");
  EXPECT_FALSE(runs.at("SC21-T1-1.7B").plan.overlap_grad_reduce());
  EXPECT_TRUE(without.at("SC21-T1-1.7B").plan.overlap_grad_reduce());
  EXPECT_EQ(runs.at("SC21-T1-1.7B").plan.attention_kernel(), pb::ATTENTION_KERNEL_MATERIALIZED);
  EXPECT_EQ(without.at("SC21-T1-1.7B").plan.attention_kernel(), pb::ATTENTION_KERNEL_MATERIALIZED);
  EXPECT_EQ(runs.at("KORT-T5-22B-full").profile, "megatron-lm@2022");
  // NeMo 24.09: the recipes' overlaps, which the reader assumed before profiles too.
  EXPECT_EQ(runs.at("DGXC-L70B-BF16-64").profile, "nemo@24.09");
  EXPECT_TRUE(runs.at("DGXC-L70B-BF16-64").plan.overlap_param_gather());
  EXPECT_EQ(runs.at("DGXC-L70B-BF16-64").plan.grad_reduce_dtype(), pb::GRAD_REDUCE_DTYPE_FP32);
  EXPECT_EQ(without.at("DGXC-L70B-BF16-64").profile, "");
  for (const auto& [id, run] : runs) EXPECT_FALSE(run.profile.empty()) << id;
}

// The assembled runs: "fms-fsdp 3b1ce15 (2024-05, PyTorch FSDP1)" names FSDP1 (hyphen as a space)
// and no release, which its unversioned profile does not need; "torchtitan 6fc499f (2025-08, ...)"
// names a release the torchtitan profile does not cover, and Megatron-Core's MoE runs name no
// megatron-core release: neither gets a profile.
TEST(FrameworkProfiles, AnUnversionedProfileNeedsNoRelease) {
  std::map<std::string, validation::PublishedRun> runs;
  for (auto& r :
       validation::published_runs(fs::path(ORRERY_SOURCE_DIR) / "validation/data/runs.json"))
    runs[r.id] = std::move(r);
  EXPECT_EQ(runs.at("FMSFSDP-L2-7B-A100-128-hsdp").profile, "pytorch-fsdp1");
  EXPECT_EQ(runs.at("FMSFSDP-L2-7B-A100-128-hsdp").plan.prefetch_buckets(), 1);
  EXPECT_EQ(runs.at("TTAO-B200-L3-8B-8-bf16").profile, "");
  EXPECT_EQ(runs.at("MOEZOO-QWEN3-235B-H100-256-tp2ep8dp128-fsdp").profile, "");
  EXPECT_EQ(runs.at("TT24-T1-8B-8-FSDP").profile, "torchtitan@2024-12");
}

}  // namespace
}  // namespace orrery::plan
