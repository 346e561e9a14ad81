// Plan resolution: the bad-plan corpus (tests/inputs/sim/bad_plans/*.yaml, one file per call
// site of a rule in plan/src/resolved_plan.cpp, each with the exact InputError it must produce)
// and the defaults resolve_plan fills in.
//
// Corpus format: the first line is `# expect: <exact what()>`; the file name in the message is
// the file's path relative to tests/inputs. A `model:` naming a file is relative to tests/inputs
// too. Files ending in .model.yaml are models the plans point at, not plans.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "orrery/base/error.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/traces/spec_io.hpp"
#include "test_paths.hpp"

namespace orrery::sim {
namespace {

namespace fs = std::filesystem;

const fs::path kInputs = ORRERY_TEST_INPUTS;

bool is_model_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.size() > 11 && name.compare(name.size() - 11, 11, ".model.yaml") == 0;
}

std::vector<fs::path> corpus() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kInputs / "sim" / "bad_plans")) {
    if (e.path().extension() == ".yaml" && !is_model_file(e.path())) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string expectation(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  const std::string prefix = "# expect: ";
  return line.rfind(prefix, 0) == 0 ? line.substr(prefix.size()) : std::string();
}

// Reads a plan file the way `orrery simulate --plan` does and resolves it; returns the
// InputError's message, or "accepted".
std::string resolve_file(const fs::path& file) {
  pb::Plan plan;
  SourceMap where;
  read_spec_file(file, &plan, &where);
  where.set_file(fs::relative(file, kInputs).string());
  const std::string model_name = plan.model().find('/') != std::string::npos
                                     ? (kInputs / plan.model()).string()
                                     : plan.model();
  const pb::ModelSpec model = models::load_model(model_name);
  const pb::ClusterSpec cluster = topologies::load_cluster(
      plan.cluster(), plan.has_nodes() ? std::optional<int64_t>(plan.nodes()) : std::nullopt);
  try {
    plan::resolve_plan(plan, model, cluster, where);
  } catch (const base::InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(BadPlans, EveryFileFailsWithItsExactMessage) {
  const auto files = corpus();
  ASSERT_GE(files.size(), 27u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.filename().string());
    const std::string expect = expectation(file);
    ASSERT_FALSE(expect.empty()) << "first line must be '# expect: <message>'";
    EXPECT_EQ(resolve_file(file), expect);
  }
}

// Every call site of every rule has a file: the rule names are the string literals shaped like
// "tp-divides-heads" in resolved_plan.cpp and fp8.cpp (the fp8 rules), counted once per call
// site (layers-cover-stages has four: even split, entry count, an empty stage, the sum).
TEST(BadPlans, EveryRuleCallSiteHasAFile) {
  std::string text;
  for (const char* file : {"resolved_plan.cpp", "fp8.cpp"}) {
    std::ifstream src(fs::path(ORRERY_SOURCE_DIR) / "plan" / "src" / file);
    const std::string part((std::istreambuf_iterator<char>(src)), {});
    ASSERT_FALSE(part.empty()) << file;
    text += part;
  }
  std::map<std::string, int> sites;
  const std::regex literal("\"([a-z0-9]+(-[a-z0-9]+)+)\"");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), literal);
       it != std::sregex_iterator(); ++it) {
    ++sites[(*it)[1].str()];
  }
  ASSERT_GE(sites.size(), 21u);
  std::map<std::string, int> files;
  for (const auto& file : corpus()) {
    const std::string expect = expectation(file);
    const auto at = expect.find(": rule ");
    if (at == std::string::npos) continue;
    const auto start = at + 7;
    ++files[expect.substr(start, expect.find(':', start) - start)];
  }
  for (const auto& [rule, count] : sites) {
    EXPECT_GE(files[rule], count) << "rule " << rule << " has " << count
                                  << " call sites in resolved_plan.cpp but fewer corpus files";
  }
  for (const auto& [rule, count] : files) {
    EXPECT_TRUE(sites.count(rule)) << "corpus names rule " << rule << ", which the source lacks";
  }
}

// A plan made in code, with only what the schema requires.
pb::Plan minimal(const std::string& model, int64_t global_batch, int64_t seq) {
  pb::Plan p;
  p.set_model(model);
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(global_batch);
  p.mutable_job()->set_seq_len(seq);
  p.set_micro_batch_size(1);
  return p;
}

plan::ResolvedPlan resolve(const pb::Plan& p, int64_t nodes) {
  return plan::resolve_plan(p, models::load_model(p.model()),
                            topologies::load_cluster(p.cluster(), nodes));
}

TEST(PlanDefaults, AbsentFieldsBecomeExplicit) {
  pb::Plan p = minimal("llama3-8b", 16, 2048);
  p.mutable_parallel()->set_dp(8);
  const plan::ResolvedPlan r = resolve(p, 1);
  // Degrees left out are 1, and written back into the plan.
  EXPECT_EQ(r.degrees.tp, 1);
  EXPECT_EQ(r.degrees.pp, 1);
  EXPECT_EQ(r.degrees.cp, 1);
  EXPECT_EQ(r.degrees.ep, 1);
  EXPECT_EQ(r.degrees.vp, 1);
  EXPECT_EQ(r.degrees.dp, 8);
  EXPECT_TRUE(r.plan.parallel().has_tp());
  EXPECT_EQ(r.plan.parallel().tp(), 1);
  EXPECT_EQ(r.plan.parallel().vp(), 1);
  EXPECT_EQ(r.world_size(), 8);
  // vp 1: plain 1F1B; DDP; no recomputation; a balanced MoE; flash attention.
  EXPECT_EQ(r.schedule(), pb::PIPELINE_SCHEDULE_ONE_F_ONE_B);
  EXPECT_EQ(r.sharding(), pb::SHARDING_NONE);
  EXPECT_EQ(r.recompute(), pb::RECOMPUTE_NONE);
  EXPECT_EQ(r.plan.moe_imbalance(), 1.0);
  EXPECT_EQ(r.plan.attention_kernel(), pb::ATTENTION_KERNEL_FLASH);
  // Megatron's order: TP innermost.
  EXPECT_EQ(r.placement, (std::vector<plan::Dim>{plan::Dim::kTp, plan::Dim::kCp, plan::Dim::kDp,
                                                 plan::Dim::kPp}));
  // 16 sequences / (dp 8 x micro-batch 1) = 2 micro-batches; one stage of all 32 layers.
  EXPECT_EQ(r.num_micro_batches, 2);
  EXPECT_EQ(r.layers_per_stage, (std::vector<int64_t>{32}));
  EXPECT_EQ(r.seq_len, 2048);
  EXPECT_EQ(r.micro_batch_size, 1);
  // Ranks sit on devices in order.
  EXPECT_EQ(r.device_of_rank, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(plan::device_of(r, 7).name(), "H100-SXM");
}

TEST(PlanDefaults, PrecisionUnspecifiedIsBf16MixedPrecision) {
  pb::Plan p = minimal("tiny", 8, 64);
  p.mutable_parallel()->set_dp(8);
  const plan::ResolvedPlan r = resolve(p, 1);
  // Megatron mixed precision: bf16 activations and weights, fp32 grads, fp32 master + Adam m, v.
  EXPECT_EQ(r.precision.dtype, "bf16");
  EXPECT_EQ(r.precision.activation_bytes, 2);
  EXPECT_EQ(r.precision.param_bytes, 2);
  EXPECT_EQ(r.precision.grad_bytes, 4);
  EXPECT_EQ(r.precision.master_param_bytes, 4);
  EXPECT_EQ(r.precision.optimizer_state_bytes, 8);

  p.mutable_job()->set_precision(pb::PRECISION_FP32);
  const plan::ResolvedPlan f = resolve(p, 1);
  // fp32: the compute copy is the master copy.
  EXPECT_EQ(f.precision.dtype, "fp32");
  EXPECT_EQ(f.precision.activation_bytes, 4);
  EXPECT_EQ(f.precision.param_bytes, 4);
  EXPECT_EQ(f.precision.grad_bytes, 4);
  EXPECT_EQ(f.precision.master_param_bytes, 0);

  p.mutable_job()->set_precision(pb::PRECISION_FP16);
  const plan::ResolvedPlan h = resolve(p, 1);
  EXPECT_EQ(h.precision.dtype, "fp16");
  EXPECT_EQ(h.precision.grad_bytes, 2);  // reduced in fp16
}

TEST(PlanDefaults, VirtualStagesDefaultToInterleavedAndSplitEvenly) {
  pb::Plan p = minimal("llama3-8b", 8, 2048);
  p.mutable_parallel()->set_pp(4);
  p.mutable_parallel()->set_vp(2);
  p.mutable_parallel()->set_dp(2);
  const plan::ResolvedPlan r = resolve(p, 1);
  EXPECT_EQ(r.schedule(), pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B);
  // 32 layers over pp 4 x vp 2 = 8 virtual stages of 4; stage s starts at layer 4 s.
  EXPECT_EQ(r.layers_per_stage, std::vector<int64_t>(8, 4));
  EXPECT_EQ(r.first_layer(0), 0);
  EXPECT_EQ(r.first_layer(5), 20);
  // 8 / (dp 2 x 1) = 4 micro-batches, a multiple of pp.
  EXPECT_EQ(r.num_micro_batches, 4);
}

TEST(PlanDefaults, GivenLayersPerStageAreKept) {
  pb::Plan p = minimal("llama3-8b", 8, 2048);
  p.mutable_parallel()->set_pp(2);
  p.mutable_parallel()->set_dp(4);
  p.add_layers_per_stage(15);
  p.add_layers_per_stage(17);
  const plan::ResolvedPlan r = resolve(p, 1);
  EXPECT_EQ(r.layers_per_stage, (std::vector<int64_t>{15, 17}));
  EXPECT_EQ(r.first_layer(1), 15);
}

TEST(PlanDefaults, PlacementOrderIsCompletedAndEpIsIgnored) {
  pb::Plan p = minimal("mixtral-8x7b", 8, 2048);
  p.mutable_parallel()->set_dp(8);
  p.mutable_parallel()->set_ep(4);
  // Megatron's spelling with ep; the missing dimensions follow in tp, cp, dp, pp order.
  p.set_placement_order("dp, ep, tp");
  const plan::ResolvedPlan r = resolve(p, 1);
  EXPECT_EQ(r.placement, (std::vector<plan::Dim>{plan::Dim::kDp, plan::Dim::kTp, plan::Dim::kCp,
                                                 plan::Dim::kPp}));
}

TEST(PlanDefaults, StageNodeGroupsPlaceStagesOnTheirGroups) {
  // mixed-a100-h100 at its 32 nodes: devices 0..127 are A100 (group a100), 128..255 H100.
  pb::Plan p = minimal("llama3-8b", 16, 2048);
  p.set_cluster("mixed-a100-h100");
  p.mutable_parallel()->set_tp(8);
  p.mutable_parallel()->set_dp(16);
  p.mutable_parallel()->set_pp(2);
  p.add_stage_node_groups("h100");
  p.add_stage_node_groups("a100");
  const plan::ResolvedPlan r = resolve(p, 32);
  ASSERT_EQ(r.device_of_rank.size(), 256u);
  // With tp,cp,dp,pp the first 128 ranks are stage 0, which goes to the H100s, in order.
  EXPECT_EQ(r.device_of_rank[0], 128);
  EXPECT_EQ(r.device_of_rank[127], 255);
  EXPECT_EQ(r.device_of_rank[128], 0);
  EXPECT_EQ(r.device_of_rank[255], 127);
  EXPECT_EQ(plan::device_of(r, 0).name(), "H100-SXM");
  EXPECT_EQ(plan::device_of(r, 200).name(), "A100-SXM-80GB");
}

TEST(PlanDefaults, StageNodeGroupsKeepTpConsecutiveUnderPpInnerPlacement) {
  // Placement pp innermost: rank = pp + 2 (tp + 8 dp). Stage 0 ranks are the even ones; they
  // take the h100 devices 128, 129, ... in rank order, stage 1's odd ranks the a100 ones.
  pb::Plan p = minimal("llama3-8b", 16, 2048);
  p.set_cluster("mixed-a100-h100");
  p.mutable_parallel()->set_tp(8);
  p.mutable_parallel()->set_dp(16);
  p.mutable_parallel()->set_pp(2);
  p.set_placement_order("pp,tp,cp,dp");
  p.add_stage_node_groups("h100");
  p.add_stage_node_groups("a100");
  const plan::ResolvedPlan r = resolve(p, 32);
  EXPECT_EQ(r.device_of_rank[0], 128);
  EXPECT_EQ(r.device_of_rank[1], 0);
  EXPECT_EQ(r.device_of_rank[2], 129);
  EXPECT_EQ(r.device_of_rank[3], 1);
  EXPECT_EQ(r.device_of_rank[255], 127);
}

}  // namespace
}  // namespace orrery::sim
