// validate --runs reads published runs as written: precision, architecture, MoE block, model by
// preset name, attention kernel and pipeline layout (tests/inputs/sim/runs/readers.json), skips
// what it cannot read with the field and the reason, and predicts every public run to fit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "orrery/validation/run_validation.hpp"
#include "test_paths.hpp"

namespace orrery::sim {
namespace {

namespace fs = std::filesystem;

const fs::path kReaders = fs::path(ORRERY_TEST_INPUTS) / "sim" / "runs" / "readers.json";
const fs::path kPublicRuns = fs::path(ORRERY_SOURCE_DIR) / "../shared/validation/public_runs.json";

// A skip reason as the reader writes it: the file, then the field path and the reason.
std::string in_file(const std::string& field_and_reason) {
  return kReaders.string() + ": " + field_and_reason;
}

std::map<std::string, validation::PublishedRun> runs_by_id() {
  std::map<std::string, validation::PublishedRun> out;
  for (auto& run : validation::published_runs(kReaders)) out[run.id] = std::move(run);
  return out;
}

// The case reads and simulates to a step time.
void expect_simulates(const validation::PublishedRun& run) {
  const validation::RunCase r = validation::simulate_run(run, EngineKind::kAnalytic, nullptr);
  EXPECT_EQ(r.skipped, "") << run.id;
  EXPECT_GT(r.predicted_s, 0) << run.id;
}

TEST(RunValidation, PrecisionIsReadAsWritten) {
  auto runs = runs_by_id();
  EXPECT_EQ(runs.at("bf16-dense").plan.job().precision(), pb::PRECISION_BF16);
  EXPECT_EQ(runs.at("fp8-dense").plan.job().precision(), pb::PRECISION_FP8);
  // The recipe as the precision text names it ("FP8 (delayed scaling, ...)", "MXFP8 (...)").
  EXPECT_EQ(runs.at("fp8-dense").plan.job().fp8_recipe(), pb::FP8_RECIPE_DELAYED);
  EXPECT_EQ(runs.at("mxfp8-on-h100").plan.job().fp8_recipe(), pb::FP8_RECIPE_MXFP8);
  EXPECT_EQ(runs.at("bf16-dense").plan.job().fp8_recipe(), pb::FP8_RECIPE_UNSPECIFIED);
  EXPECT_EQ(runs.at("fp8-unknown-recipe").skipped,
            in_file("cases[17].fp8_recipe: got 'nvfp4', expected one of delayed, current, "
                    "tensorwise, blockwise, mxfp8, rowwise"));
  EXPECT_EQ(
      runs.at("unknown-precision").skipped,
      in_file("cases[7].precision: got 'int4 QAT', which names none of fp8, mxfp8, e4m3, bf16, "
              "bfloat16, fp16, float16, fp32, tf32, float32"));
}

TEST(RunValidation, Fp8RunsTakeTheFp8Path) {
  const validation::RunValidation v = validation::validate_runs(kReaders, EngineKind::kAnalytic);
  const validation::RunCase* bf16 = nullptr;
  const validation::RunCase* fp8 = nullptr;
  for (const auto& c : v.cases) {
    if (c.id == "bf16-dense") bf16 = &c;
    if (c.id == "fp8-dense") fp8 = &c;
  }
  ASSERT_TRUE(bf16 && fp8);
  ASSERT_TRUE(bf16->skipped.empty()) << bf16->skipped;
  ASSERT_TRUE(fp8->skipped.empty()) << fp8->skipped;
  // Same model and plan: fp8 GEMMs at twice the bf16 peak make the step shorter.
  EXPECT_LT(fp8->predicted_s, bf16->predicted_s);
}

TEST(RunValidation, ArchitectureFieldsAreExplicit) {
  auto runs = runs_by_id();
  const pb::ModelSpec& llama = runs.at("bf16-dense").model;
  EXPECT_EQ(llama.activation(), pb::ACTIVATION_SWIGLU);
  EXPECT_EQ(llama.norm(), pb::NORM_RMSNORM);
  EXPECT_EQ(llama.position_embedding(), pb::POSITION_EMBEDDING_ROPE);
  EXPECT_FALSE(llama.linear_bias());
  const pb::ModelSpec& gpt = runs.at("gpt-alibi-eager").model;
  EXPECT_EQ(gpt.activation(), pb::ACTIVATION_GELU);
  EXPECT_EQ(gpt.norm(), pb::NORM_LAYERNORM);
  EXPECT_EQ(gpt.position_embedding(), pb::POSITION_EMBEDDING_ALIBI);
  EXPECT_TRUE(gpt.linear_bias());
  EXPECT_EQ(
      runs.at("no-architecture").skipped,
      in_file("cases[9].model.activation: missing, and the notes name no family (give activation, "
              "norm, position)"));
  const pb::ModelSpec& parallel = runs.at("parallel-block").model;
  EXPECT_TRUE(runs.at("parallel-block").skipped.empty()) << runs.at("parallel-block").skipped;
  EXPECT_TRUE(parallel.parallel_block());
  EXPECT_FALSE(llama.parallel_block());
  const pb::ModelSpec& local = runs.at("sliding-window").model;
  EXPECT_TRUE(runs.at("sliding-window").skipped.empty()) << runs.at("sliding-window").skipped;
  EXPECT_EQ(local.sliding_window(), 512);
  EXPECT_EQ(local.sliding_window_pattern(), 2);
  EXPECT_DOUBLE_EQ(local.attn_logit_softcapping(), 50);
  EXPECT_DOUBLE_EQ(local.final_logit_softcapping(), 30);
  EXPECT_TRUE(local.post_block_norm());
  EXPECT_EQ(llama.sliding_window(), 0);
  EXPECT_EQ(runs.at("window-pattern-without-window").skipped,
            in_file("cases[19].model.sliding_window_pattern: got 2, but sliding_window is 0 (no "
                    "layer is local)"));
  EXPECT_EQ(runs.at("softcap-not-a-number").skipped,
            in_file("cases[20].model.attn_logit_softcapping: expected a number >= 0 (0: no "
                    "soft-capping), got \"fifty\""));
}

TEST(RunValidation, MoeBlockAndPresetNames) {
  auto runs = runs_by_id();
  const pb::ModelSpec& moe = runs.at("moe").model;
  ASSERT_TRUE(moe.has_moe());
  EXPECT_EQ(moe.moe().num_experts(), 8);
  EXPECT_EQ(moe.moe().top_k(), 2);
  EXPECT_EQ(moe.moe().expert_ffn_hidden_size(), 1024);
  EXPECT_EQ(moe.moe().num_shared_experts(), 1);
  EXPECT_EQ(moe.moe().first_dense_layers(), 1);
  EXPECT_EQ(runs.at("moe").plan.parallel().ep(), 8);
  EXPECT_EQ(runs.at("unknown-moe-field").skipped,
            in_file("cases[8].model.moe.capacity_factor: unknown field (expected one of: experts, "
                    "top_k, expert_ffn, shared_experts, shared_expert_ffn, dense_layers)"));
  EXPECT_EQ(runs.at("preset-by-name").model_label, "llama3-8b");
  EXPECT_EQ(runs.at("preset-by-name").plan.job().seq_len(), 4096);
  EXPECT_NE(
      runs.at("unknown-preset").skipped.find("cases[16].model: 'llama9-1t' is not a model preset"),
      std::string::npos)
      << runs.at("unknown-preset").skipped;
}

TEST(RunValidation, AttentionKernelFromItsFieldOrTheFrameworksDate) {
  auto runs = runs_by_id();
  EXPECT_EQ(runs.at("gpt-alibi-eager").plan.attention_kernel(), pb::ATTENTION_KERNEL_MATERIALIZED);
  // "FlashAttention-2" names the generation; "torchtitan" with no release applies no profile
  // and is dated to a generic flash kernel.
  EXPECT_EQ(runs.at("preset-by-name").plan.attention_kernel(), pb::ATTENTION_KERNEL_FLASH_2);
  EXPECT_EQ(runs.at("bf16-dense").plan.attention_kernel(), pb::ATTENTION_KERNEL_FLASH);
  EXPECT_EQ(runs.at("fa3-text").plan.attention_kernel(), pb::ATTENTION_KERNEL_FLASH_3);
  EXPECT_NE(runs.at("two-generations")
                .skipped.find("cases[22].attention_kernel: got 'FA2 or FA3, whichever imports', "
                              "which names two flash generations"),
            std::string::npos)
      << runs.at("two-generations").skipped;
  EXPECT_NE(runs.at("unknown-kernel")
                .skipped.find("cases[12].attention_kernel: got 'fused kernels', "
                              "which names neither kind"),
            std::string::npos)
      << runs.at("unknown-kernel").skipped;
  EXPECT_EQ(runs.at("undated-framework").skipped,
            in_file("cases[13].attention_kernel: missing, and framework 'DeepSpeed 0.9' has "
                    "no year, NeMo version or name that dates its kernel"));
}

// The readers' file's first case once per text, with `field` set to the text, read back.
std::vector<validation::PublishedRun> runs_with(const std::string& field,
                                                const std::vector<std::string>& texts) {
  nlohmann::json file = nlohmann::json::parse(std::ifstream(kReaders));
  const nlohmann::json base = file["cases"][0];
  file["cases"] = nlohmann::json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    nlohmann::json c = base;
    c["id"] = field + std::to_string(i);
    c[field] = texts[i];
    file["cases"].push_back(c);
  }
  const fs::path path = fs::temp_directory_path() / ("orrery-" + field + "-runs.json");
  std::ofstream(path) << file.dump();
  auto runs = validation::published_runs(path);
  fs::remove(path);
  return runs;
}

// NeMo's recipe suffixes after fp8 (FP8-CS, FP8-MX, FP8-DS, FP8-SS) name the recipe; a suffix
// elsewhere in the text does not.
TEST(RunValidation, Fp8RecipeSuffixesAreRead) {
  const std::vector<std::pair<std::string, pb::Fp8Recipe>> texts = {
      {"FP8-CS", pb::FP8_RECIPE_CURRENT},
      {"FP8-MX", pb::FP8_RECIPE_MXFP8},
      {"fp8_ds", pb::FP8_RECIPE_DELAYED},
      {"FP8 SS (subchannel)", pb::FP8_RECIPE_BLOCKWISE},
      {"FP8 on the CS cluster", pb::FP8_RECIPE_UNSPECIFIED}};
  std::vector<std::string> precisions;
  for (const auto& t : texts) precisions.push_back(t.first);
  const auto runs = runs_with("precision", precisions);
  ASSERT_EQ(runs.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(runs[i].plan.job().precision(), pb::PRECISION_FP8) << texts[i].first;
    EXPECT_EQ(runs[i].plan.job().fp8_recipe(), texts[i].second) << texts[i].first;
  }
}

// Adam's moments' dtype as stated (fp32 or bf16); any other skips the case naming the field.
TEST(RunValidation, OptimizerStateDtypeIsRead) {
  const auto runs = runs_with("optimizer_state_dtype", {"bf16", "fp32", "fp8"});
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].plan.optimizer_state_dtype(), pb::OPTIMIZER_STATE_DTYPE_BF16);
  EXPECT_EQ(runs[1].plan.optimizer_state_dtype(), pb::OPTIMIZER_STATE_DTYPE_FP32);
  EXPECT_NE(runs[2].skipped.find("cases[2].optimizer_state_dtype: got 'fp8', expected one of "
                                 "fp32, bf16"),
            std::string::npos)
      << runs[2].skipped;
}

// `recompute` by its first word and the policy its words name; what no plan field expresses is
// refused naming the field, and "not stated" is read as none and said in the plan column.
TEST(RunValidation, RecomputeIsReadByItsPolicy) {
  const std::vector<std::string> texts = {"none (the recompute column is empty)",
                                          "not stated in README (recipe defaults)",
                                          "full (block, 80 of 80 layers)",
                                          "full (block, 40 of 80 layers)",
                                          "selective (attention core) + sequence parallelism",
                                          "selective (per op)",
                                          "selective (op) (llama3_8b.toml default)",
                                          "selective (layer)",
                                          "selective (--recompute-modules: norm, act)",
                                          "selective (--recompute-modules: core_attn)",
                                          "offloaded",
                                          "selective (layer, every 2nd block)",
                                          "selective (--recompute-modules: layernorm, core_attn)",
                                          "selective (--recompute-modules: core_attn, mlp)",
                                          "selective (--recompute-modules: norm, fused)",
                                          "selective (--recompute-modules: mla_up_proj, moe, "
                                          "shared_experts)",
                                          "selective (recompute_modules: [mlp])"};
  const auto runs = runs_with("recompute", texts);
  ASSERT_EQ(runs.size(), texts.size());
  const auto reads = [&](size_t i, pb::Recompute want) {
    EXPECT_EQ(runs[i].skipped, "") << texts[i];
    EXPECT_EQ(runs[i].plan.recompute(), want) << texts[i];
  };
  const auto refuses = [&](size_t i, const std::string& why) {
    EXPECT_NE(runs[i].skipped.find("cases[" + std::to_string(i) + "].recompute: got '" + texts[i] +
                                   "'" + why),
              std::string::npos)
        << runs[i].skipped;
  };
  reads(0, pb::RECOMPUTE_NONE);
  EXPECT_EQ(runs[0].assumed, "");
  reads(1, pb::RECOMPUTE_NONE);
  EXPECT_EQ(runs[1].assumed, " (assumed: no recomputation; `recompute` not stated)");
  reads(2, pb::RECOMPUTE_FULL);
  refuses(3, ": full recomputation of 40 of 80 layers; a partial layer count is not modelled");
  reads(4, pb::RECOMPUTE_SELECTIVE);
  reads(5, pb::RECOMPUTE_SELECTIVE_OP);
  reads(6, pb::RECOMPUTE_SELECTIVE_OP);
  refuses(7, ": torchtitan's layer-level selective checkpointing needs its frequency");
  // The ModelZoo tables' norm and act are Megatron's layernorm and moe_act (the dense model of
  // this file then fails the plan's moe-act-needs-moe rule when simulated).
  reads(8, pb::RECOMPUTE_SELECTIVE);
  ASSERT_EQ(runs[8].plan.recompute_modules_size(), 2);
  EXPECT_EQ(runs[8].plan.recompute_modules(0), pb::RECOMPUTE_MODULE_LAYERNORM);
  EXPECT_EQ(runs[8].plan.recompute_modules(1), pb::RECOMPUTE_MODULE_MOE_ACT);
  reads(9, pb::RECOMPUTE_SELECTIVE);
  ASSERT_EQ(runs[9].plan.recompute_modules_size(), 1);
  EXPECT_EQ(runs[9].plan.recompute_modules(0), pb::RECOMPUTE_MODULE_CORE_ATTN);
  refuses(10,
          ", which begins with none of none, no, off, false, disabled, not stated, full, "
          "selective");
  reads(11, pb::RECOMPUTE_FULL);
  EXPECT_EQ(runs[11].plan.recompute_every(), 2);
  reads(12, pb::RECOMPUTE_SELECTIVE);
  ASSERT_EQ(runs[12].plan.recompute_modules_size(), 2);
  EXPECT_EQ(runs[12].plan.recompute_modules(0), pb::RECOMPUTE_MODULE_LAYERNORM);
  EXPECT_EQ(runs[12].plan.recompute_modules(1), pb::RECOMPUTE_MODULE_CORE_ATTN);
  reads(13, pb::RECOMPUTE_SELECTIVE);
  ASSERT_EQ(runs[13].plan.recompute_modules_size(), 2);
  EXPECT_EQ(runs[13].plan.recompute_modules(1), pb::RECOMPUTE_MODULE_MLP);
  refuses(14, ": 'fused' is none of Megatron-core's --recompute-modules");
  reads(15, pb::RECOMPUTE_SELECTIVE);
  const auto& m15 = runs[15].plan.recompute_modules();
  EXPECT_EQ(std::vector<int>(m15.begin(), m15.end()),
            (std::vector<int>{pb::RECOMPUTE_MODULE_MLA_UP_PROJ, pb::RECOMPUTE_MODULE_MOE,
                              pb::RECOMPUTE_MODULE_SHARED_EXPERTS}));
  // The config key's spelling, as Megatron-core's TransformerConfig writes it.
  reads(16, pb::RECOMPUTE_SELECTIVE);
  ASSERT_EQ(runs[16].plan.recompute_modules_size(), 1);
  EXPECT_EQ(runs[16].plan.recompute_modules(0), pb::RECOMPUTE_MODULE_MLP);
}

TEST(RunValidation, PipelineLayoutGivesUnevenStages) {
  auto runs = runs_by_id();
  const auto& ends = runs.at("pipeline-first-last").plan.layers_per_stage();
  EXPECT_EQ(std::vector<int64_t>(ends.begin(), ends.end()), (std::vector<int64_t>{1, 3, 3, 3}));
  const auto& listed = runs.at("pipeline-list").plan.layers_per_stage();
  EXPECT_EQ(std::vector<int64_t>(listed.begin(), listed.end()), (std::vector<int64_t>{2, 3, 3, 2}));
  EXPECT_EQ(
      runs.at("uneven-remainder").skipped,
      in_file(
          "cases[14].parallel.pipeline_layout: 8 layers do not split evenly over the other 3 of "
          "pp x vp = 4 stages"));
}

// HSDP (FSDP's HYBRID_SHARD) is read with the shard group the case states; without one the case
// is skipped (no default group), and a shard group beside another sharding is refused, not
// ignored.
TEST(RunValidation, HsdpNeedsItsShardGroup) {
  auto runs = runs_by_id();
  const auto& hsdp = runs.at("hsdp-shard-group");
  ASSERT_EQ(hsdp.skipped, "");
  EXPECT_EQ(hsdp.plan.sharding(), pb::SHARDING_HSDP);
  EXPECT_EQ(hsdp.plan.shard_group_size(), 8);
  expect_simulates(hsdp);
  EXPECT_EQ(runs.at("hsdp-without-group").skipped,
            in_file("cases[25].parallel.shard_group: missing: zero_fsdp 'HSDP' names HSDP, which "
                    "shards each parameter over a group of ranks; give the group's size"));
  EXPECT_EQ(runs.at("shard-group-without-hsdp").skipped,
            in_file("cases[26].parallel.shard_group: given, but zero_fsdp 'FSDP' names no HSDP "
                    "(hsdp, hybrid shard)"));
  // A case that names no sharding stays unsharded.
  EXPECT_EQ(runs.at("bf16-dense").plan.sharding(), pb::SHARDING_NONE);
}

// parallel.moe_a2a_overlap is read only as stated: true sets Plan.moe_a2a_overlap (and the plan
// column says so), absent leaves it off, anything but a boolean skips the case naming the field.
TEST(RunValidation, MoeA2aOverlapIsReadOnlyAsStated) {
  auto runs = runs_by_id();
  const auto& over = runs.at("moe-a2a-overlap");
  ASSERT_EQ(over.skipped, "");
  EXPECT_TRUE(over.plan.moe_a2a_overlap());
  EXPECT_FALSE(runs.at("moe").plan.moe_a2a_overlap());
  EXPECT_EQ(runs.at("moe-a2a-overlap-not-bool").skipped,
            in_file("cases[28].parallel.moe_a2a_overlap: expected true or false, got \"+1f1b "
                    "overlap\""));
  const validation::RunCase with = validation::simulate_run(over, EngineKind::kAnalytic, nullptr);
  const validation::RunCase without =
      validation::simulate_run(runs.at("moe"), EngineKind::kAnalytic, nullptr);
  ASSERT_EQ(with.skipped, "");
  EXPECT_NE(with.plan.find("a2a-overlap"), std::string::npos) << with.plan;
  EXPECT_LT(with.predicted_s, without.predicted_s);
}

// hardware.cluster names the cluster (a preset, or a file beside the runs file) instead of the
// preset the GPU's generation picks; it must hold that generation. A PCIe part, which no preset
// has, needs it.
TEST(RunValidation, AStatedClusterReplacesTheGenerationsPreset) {
  auto runs = runs_by_id();
  const auto& p5 = runs.at("stated-cluster-preset");
  ASSERT_EQ(p5.skipped, "");
  EXPECT_EQ(p5.cluster_label, "aws-p5 x2");
  EXPECT_EQ(p5.cluster.node_types(0).nic().transport().kind(), pb::TRANSPORT_KIND_EFA);
  const auto& file = runs.at("stated-cluster-file");
  ASSERT_EQ(file.skipped, "");
  EXPECT_EQ(file.cluster.node_types(0).device(), "L40S");
  expect_simulates(file);
  EXPECT_EQ(
      runs.at("stated-cluster-mismatch").skipped,
      in_file("cases[31].hardware.cluster: its node type p5.48xlarge holds H100-SXM GPUs, but "
              "hardware.gpu names A100 80GB"));
  EXPECT_EQ(runs.at("pcie-without-cluster").skipped,
            in_file("cases[32].hardware.gpu: got 'H100 PCIe 80GB', a PCIe part, which no cluster "
                    "preset has: state hardware.cluster (a cluster file with its devices and "
                    "links)"));
  EXPECT_NE(runs.at("unknown-cluster").skipped.find("cases[33].hardware.cluster: "),
            std::string::npos)
      << runs.at("unknown-cluster").skipped;
  EXPECT_NE(runs.at("unknown-cluster").skipped.find("aws-p9"), std::string::npos);
}

// A power limit the GPU's text states is not modelled, and the case's cluster label says so
// (with the limit when the text gives one), so no reader takes the prediction for a capped part.
TEST(RunValidation, AStatedPowerLimitIsNamedAsNotModelled) {
  std::map<std::string, validation::PublishedRun> runs;
  for (auto& r : validation::published_runs(fs::path(ORRERY_SOURCE_DIR) / "validation" / "data" /
                                            "runs.json"))
    runs[r.id] = std::move(r);
  EXPECT_EQ(runs.at("TT24-T1-8B-8-FSDP").cluster_label,
            "dgx-h100 x1 (the stated 500 W power limit not modelled: priced at the part's rated "
            "700 W)");
  EXPECT_EQ(runs.at("TTAO-B200-L3-8B-8-bf16").cluster_label,
            "hgx-b200 x1 (a stated power limit not modelled: priced at the part's rated 1000 W)");
  EXPECT_EQ(runs.at("TRAINY-H200-8B-32").cluster_label.find("power"), std::string::npos);
}

TEST(RunValidation, UnreadableCasesAreSkippedAndTheOthersRun) {
  const validation::RunValidation v = validation::validate_runs(kReaders, EngineKind::kAnalytic);
  ASSERT_EQ(v.cases.size(), 34u);
  // The first seven, the parallel block (10), the windowed model (11), FlashAttention-3 on H100
  // (21), 64 GB200 trays (23), HSDP with its shard group (24), the stated MoE all-to-all
  // overlap (27) and the two stated clusters (29, 30).
  for (size_t i : {0, 1, 2, 3, 4, 5, 6, 10, 11, 21, 23, 24, 27, 29, 30})
    EXPECT_TRUE(v.cases[i].skipped.empty()) << v.cases[i].id << ": " << v.cases[i].skipped;
  EXPECT_EQ(v.simulated, 15);
  EXPECT_EQ(v.skipped, 19);
  // An MXFP8 run on H100 is refused by the plan's rule, naming the field and the reason.
  EXPECT_NE(v.cases[18].skipped.find("job.fp8_recipe: rule mxfp8-needs-mx-formats"),
            std::string::npos)
      << v.cases[18].skipped;
  // 64 GB200 trays fill no whole number of 18-tray NVLink domains: they run as 4 domains of 16
  // (equal parts of racks, the largest up to 18 that divides 64), and the label says so.
  EXPECT_EQ(v.cases[23].cluster,
            "gb200-nvl72 x64 (assumed: 4 NVLink domains of 16 nodes, equal parts of 18-node "
            "domains)");
  EXPECT_EQ(v.cases[15].id, "malformed");
  EXPECT_EQ(v.cases[15].skipped,
            in_file("cases[15].hardware.num_gpus: expected a positive integer, got \"eight\""));
}

// Every published run trained, so the memory model must predict each to fit its device.
TEST(RunValidation, EveryPublicRunFitsInMemory) {
  if (!fs::exists(kPublicRuns)) GTEST_SKIP() << kPublicRuns << " is not checked out here";
  const validation::RunValidation v = validation::validate_runs(kPublicRuns, EngineKind::kAnalytic);
  EXPECT_EQ(v.skipped, 0);
  for (const auto& c : v.cases) {
    EXPECT_LE(c.peak_memory_bytes, c.memory_capacity_bytes) << c.id;
    EXPECT_GT(c.peak_memory_bytes, 0) << c.id;
  }
  EXPECT_EQ(v.out_of_memory, 0);
}

}  // namespace
}  // namespace orrery::sim
