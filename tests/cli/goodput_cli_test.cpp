// `orrery goodput` end to end: the report, --json, same seed same bytes, bad input.
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

const std::string kJob = std::string(ORRERY_BIN) +
                         " goodput --model llama3-8b --cluster dgx-h100 --nodes 2 --tp 8"
                         " --global-batch 16 --seq 2048 --trials 200";

TEST(GoodputCli, ReportListsFailuresCheckpointGoodputAndEveryDefault) {
  const auto r = run_command(kJob);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"16 GPUs, 2 hosts, 16 NICs", "Failures", "hbm", "Checkpoint",
                           "goodput (closed form)", "goodput (Monte Carlo)", "time to target",
                           "failures.gpu_mtbf_s", "storage.requeue_s", "default: assumed"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
}

TEST(GoodputCli, JsonIsTheSameForTheSameSeed) {
  const auto a = run_command(kJob + " --json --seed 5");
  const auto b = run_command(kJob + " --json --seed 5");
  const auto c = run_command(kJob + " --json --seed 6");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  const auto j = nlohmann::json::parse(a.out);
  const auto& mc = j["monte_carlo"];
  EXPECT_GT(mc["goodput"].get<double>(), 0.5);
  EXPECT_LE(mc["goodput"].get<double>(), 1.0);
  EXPECT_LE(mc["wall_p10_s"].get<double>(), mc["wall_p50_s"].get<double>());
  EXPECT_LE(mc["wall_p50_s"].get<double>(), mc["wall_p90_s"].get<double>());
  // The target is 30 failure-free days (the default), so every run takes longer.
  EXPECT_DOUBLE_EQ(mc["target_work_s"].get<double>(), 30 * 86400.0);
  EXPECT_GT(mc["wall_p10_s"].get<double>(), 30 * 86400.0);
  EXPECT_EQ(j["footprint"]["gpus"], 16);
}

TEST(GoodputCli, CheckpointEveryTakesStepsOrAuto) {
  const auto r = run_command(kJob + " --json --checkpoint-every 100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["interval"]["steps"], 100);
  const auto bad = run_command(kJob + " --checkpoint-every often");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--checkpoint-every: got 'often', expected auto or a positive number"),
            std::string::npos)
      << bad.err;
}

// A calibration profile's measured checkpoint storage (`orrery calibrate` on a run that saved
// checkpoints) prices the save: local NVMe at 1 GB/s instead of the assumed 20 GB/s.
TEST(GoodputCli, CalibrationsMeasuredStoragePricesTheSave) {
  const fs::path file = fs::temp_directory_path() /
                        ("orrery_goodput_storage_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(file) << "name: measured\ncheckpoint_storage:\n  local_write_bytes_per_s: 1e9\n";
  const auto plain = run_command(kJob + " --json");
  const auto measured = run_command(kJob + " --json --calibration " + file.string());
  fs::remove(file);
  ASSERT_EQ(measured.exit_code, 0) << measured.err;
  const auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(measured.out);
  const double node_bytes = b["checkpoint"]["node_bytes"].get<double>();
  EXPECT_NEAR(b["checkpoint"]["local_s"].get<double>(), node_bytes / 1e9, 1e-6 * node_bytes / 1e9);
  EXPECT_NEAR(a["checkpoint"]["local_s"].get<double>(), node_bytes / 20e9,
              1e-6 * node_bytes / 20e9);
  bool named = false;
  for (const auto& s : b["settings"]) {
    if (s["field"] == "storage.local_write_bytes_per_s") {
      named = s["source"] == "measured: " + file.string();
    }
  }
  EXPECT_TRUE(named) << measured.out;
}

// Targets too large to simulate are refused at once, naming the flag, instead of running for
// ever: an overflowing --days, and a Monte Carlo over its event limit.
TEST(GoodputCli, AbsurdTargetsAreRefusedNotRun) {
  const auto days = run_command(kJob + " --days 1e308");
  EXPECT_EQ(days.exit_code, 2);
  EXPECT_NE(days.err.find("--days: 1e+308 days of training do not fit"), std::string::npos)
      << days.err;
  const auto every = run_command(kJob + " --days 3000 --checkpoint-every 1");
  EXPECT_EQ(every.exit_code, 2);
  EXPECT_NE(every.err.find("is over the Monte Carlo limit of 2e+08: lower --trials"),
            std::string::npos)
      << every.err;
}

// --restart-scope replica: two full replicas (tp8 on each of 2 nodes, no sharding) ride out each
// other's failures; a ZeRO plan has no whole replica and is refused with the reason.
TEST(GoodputCli, ReplicaRestartsKeepTheOthersTraining) {
  const auto job = run_command(kJob + " --json");
  const auto replica = run_command(kJob + " --json --restart-scope replica");
  ASSERT_EQ(replica.exit_code, 0) << replica.err;
  const auto a = nlohmann::json::parse(job.out), b = nlohmann::json::parse(replica.out);
  EXPECT_EQ(a["restarts"]["scope"], "job");
  EXPECT_EQ(b["restarts"]["scope"], "replica");
  EXPECT_EQ(b["restarts"]["replicas"], 2);
  EXPECT_EQ(b["restarts"]["ranks_per_replica"], 8);
  EXPECT_TRUE(b["restarts"]["why_not"].is_null());
  EXPECT_GT(b["monte_carlo"]["goodput"].get<double>(), a["monte_carlo"]["goodput"].get<double>());
  EXPECT_GT(b["monte_carlo"]["mean_replica_restarts"].get<double>(), 0);
  EXPECT_EQ(a["monte_carlo"]["mean_replica_restarts"].get<double>(), 0);
  const auto text = run_command(kJob + " --restart-scope replica");
  EXPECT_NE(text.out.find("replica: a failure restarts its replica"), std::string::npos)
      << text.out;
  const auto zero = run_command(kJob + " --sharding zero1 --restart-scope replica");
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--restart-scope: replica: sharding zero1 spreads the training state"),
            std::string::npos)
      << zero.err;
  const auto bad = run_command(kJob + " --restart-scope node");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--restart-scope: got 'node', expected job or replica"), std::string::npos)
      << bad.err;
}

// Storage so slow that no checkpoint interval ever completes between failures: refused with the
// figures that make it so, instead of a Monte Carlo simulation that never ends.
TEST(GoodputCli, ARunThatNeverFinishesIsRefused) {
  const fs::path dir = fs::temp_directory_path() / ("orrery_goodput_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto shown = run_command(std::string(ORRERY_BIN) + " topo show dgx-h100 --nodes 2 --yaml");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  const fs::path file = dir / "slow.yaml";
  std::ofstream(file) << shown.out << "storage:\n  warmup_s: 1e300\n";
  const auto r = run_command(std::string(ORRERY_BIN) + " goodput --model llama3-8b --cluster " +
                             file.string() + " --tp 8 --global-batch 16 --seq 2048 --trials 10");
  fs::remove_all(dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("slow.yaml: storage: the expected goodput is 0 at"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the run never reaches its target"), std::string::npos) << r.err;
}

TEST(GoodputCli, BadFailureFieldNamesFileFieldAndReason) {
  const fs::path dir = fs::temp_directory_path() / ("orrery_goodput_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto shown = run_command(std::string(ORRERY_BIN) + " topo show dgx-h100 --nodes 2 --yaml");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  const fs::path file = dir / "c.yaml";
  std::ofstream(file) << shown.out << "failures:\n  straggler_fraction: 2\n";
  const auto r = run_command(std::string(ORRERY_BIN) + " goodput --model llama3-8b --cluster " +
                             file.string() + " --tp 8 --global-batch 16 --seq 2048 --trials 10");
  fs::remove_all(dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("c.yaml: failures.straggler_fraction: must be between 0 and 1, got 2"),
            std::string::npos)
      << r.err;
}

// The dgx-h100 preset on 2 nodes as a cluster file in a fresh folder `dir`, with `degradation`
// (one YAML list entry) under failures.degradations; the `goodput` command on it.
std::string goodput_on_degraded_cluster(const fs::path& dir, const std::string& degradation) {
  fs::create_directories(dir);
  const auto shown = run_command(std::string(ORRERY_BIN) + " topo show dgx-h100 --nodes 2 --yaml");
  EXPECT_EQ(shown.exit_code, 0) << shown.err;
  const fs::path file = dir / "c.yaml";
  std::ofstream(file) << shown.out << "failures:\n  degradations:\n    - " << degradation << "\n";
  return std::string(ORRERY_BIN) + " goodput --model llama3-8b --cluster " + file.string() +
         " --tp 8 --global-batch 16 --seq 2048 --trials 200";
}

// Degradation episodes: none unless stated (and the output says so); stated in the cluster file
// or by --degradation, which replaces only its component's entry; a table row and a JSON entry
// each, their share of wall time in the closed form.
TEST(GoodputCli, DegradationsFromTheClusterFileAndTheFlag) {
  const fs::path dir = fs::temp_directory_path() / ("orrery_degrade_" + std::to_string(::getpid()));
  const std::string job = goodput_on_degraded_cluster(
      dir, "{component: gpu, mean_interval_s: 2000 h, step_ratio: 1.3, detect_steps: 20}");
  const std::string link = " --degradation link:mean_interval_s=1000h,step_ratio=1.1,duration_s=1h";
  const auto none = run_command(kJob);
  const auto table = run_command(job + link);
  const auto json = run_command(job + link + " --json");
  const auto plain = run_command(job + " --json");
  const auto replaced = run_command(
      job + " --json --degradation gpu:mean_interval_s=500h,step_ratio=1.3,detect_steps=20");
  fs::remove_all(dir);
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.out.find("Degradations\nnone modelled: no published rate"), std::string::npos)
      << none.out;
  ASSERT_EQ(table.exit_code, 0) << table.err;
  for (const char* text : {"wall time lost", "drained after 20 slow steps", "lasts 60 min",
                           "cluster file", "--degradation", "degradation episodes ("}) {
    EXPECT_NE(table.out.find(text), std::string::npos) << text << "\n" << table.out;
  }
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  const auto& d = j["degradations"];
  EXPECT_TRUE(d["modelled"].get<bool>());
  ASSERT_EQ(d["episodes"].size(), 2u);
  EXPECT_EQ(d["episodes"][0]["component"], "gpu");
  EXPECT_EQ(d["episodes"][0]["count"], 16);
  EXPECT_EQ(d["episodes"][0]["source"], "cluster file");
  EXPECT_DOUBLE_EQ(d["episodes"][0]["rate_per_s"].get<double>(), 16 / (2000 * 3600.0));
  EXPECT_EQ(d["episodes"][1]["source"], "--degradation");
  EXPECT_TRUE(d["episodes"][1]["detect_steps"].is_null());
  // The link episode: 1 h at 1.1x loses 1 h x (1 - 1 / 1.1) of wall time.
  EXPECT_NEAR(d["episodes"][1]["cost_s"].get<double>(), 3600 * (1 - 1 / 1.1), 1e-6);
  double sum = 0;
  for (const auto& e : d["episodes"]) sum += e["loss_fraction"].get<double>();
  EXPECT_NEAR(d["loss_fraction"].get<double>(), sum, 1e-12);
  EXPECT_GT(j["monte_carlo"]["mean_degradations"].get<double>(), 0);
  // The flag adds a share of wall time: the closed-form goodput at the same interval is lower.
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto p = nlohmann::json::parse(plain.out);
  EXPECT_EQ(p["degradations"]["episodes"].size(), 1u);
  EXPECT_LT(j["interval"]["goodput"].get<double>(), p["interval"]["goodput"].get<double>());
  ASSERT_EQ(replaced.exit_code, 0) << replaced.err;
  const auto r = nlohmann::json::parse(replaced.out)["degradations"]["episodes"];
  ASSERT_EQ(r.size(), 1u);
  EXPECT_DOUBLE_EQ(r[0]["mean_interval_s"].get<double>(), 500 * 3600.0);
  EXPECT_EQ(r[0]["source"], "--degradation");
}

TEST(GoodputCli, BadDegradationNamesFileOrFlagFieldAndReason) {
  const fs::path dir = fs::temp_directory_path() / ("orrery_baddeg_" + std::to_string(::getpid()));
  const auto r = run_command(goodput_on_degraded_cluster(
      dir, "{component: gpu, mean_interval_s: 2000 h, step_ratio: 1.3}"));
  const auto flag = run_command(kJob +
                                " --degradation gpu:mean_interval_s=2000h,step_ratio=0.9,"
                                "detect_steps=20");
  fs::remove_all(dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("c.yaml:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("failures.degradations[0]: give exactly one of detect_steps"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.err.find("--degradation: got 'gpu:mean_interval_s=2000h,step_ratio=0.9,"
                          "detect_steps=20': step_ratio: a degraded step is slower"),
            std::string::npos)
      << flag.err;
}

// Random stragglers: the closed form multiplies the whole step; --engine des simulates one slow
// GPU; either way the report says which. A known straggler (--straggler) is refused by the
// analytic engine and simulated by des.
TEST(GoodputCli, DesEngineSimulatesTheStragglerAndSaysSo) {
  const fs::path dir =
      fs::temp_directory_path() / ("orrery_straggle_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto shown = run_command(std::string(ORRERY_BIN) + " topo show dgx-h100 --nodes 2 --yaml");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  const fs::path file = dir / "c.yaml";
  std::ofstream(file) << shown.out
                      << "failures:\n  straggler_fraction: 0.01\n  straggler_slowdown: 1.5\n";
  const std::string job = std::string(ORRERY_BIN) + " goodput --model llama3-8b --cluster " +
                          file.string() + " --tp 8 --global-batch 16 --seq 2048 --trials 10";
  const auto closed = run_command(job);
  const auto des = run_command(job + " --engine des");
  const auto known = run_command(job + " --straggler gpu=3:1.2");
  const auto known_des = run_command(job + " --engine des --straggler gpu=3:1.2");
  fs::remove_all(dir);
  ASSERT_EQ(closed.exit_code, 0) << closed.err;
  EXPECT_NE(closed.out.find("stragglers: closed form: the whole step 1.5x slower"),
            std::string::npos)
      << closed.out;
  ASSERT_EQ(des.exit_code, 0) << des.err;
  EXPECT_NE(des.out.find("stragglers: des: GPU 0 at 1.5x makes the step "), std::string::npos)
      << des.out;
  EXPECT_EQ(known.exit_code, 2);
  EXPECT_NE(known.err.find("cluster.stragglers: the analytic engine does not simulate stragglers"),
            std::string::npos)
      << known.err;
  EXPECT_EQ(known_des.exit_code, 0) << known_des.err;
}

}  // namespace
}  // namespace orrery

namespace orrery {
namespace {

// plan --objective goodput: plans ranked by tokens per day, each with its goodput; the figures
// agree with `orrery goodput` on the winning plan.
TEST(GoodputCli, PlanRanksByTokensPerDay) {
  const std::string job = std::string(ORRERY_BIN) +
                          " plan --model llama3-8b --cluster dgx-h100 --nodes 4 --global-batch 64"
                          " --seq 4096 --rerank none --quiet --top 4";
  const auto r = testing::run_command(job + " --objective goodput --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["objective"], "goodput");
  ASSERT_EQ(j["plans"].size(), 4u);
  double previous = 1e300;
  for (const auto& p : j["plans"]) {
    const double per_day = p["goodput"]["tokens_per_day"].get<double>();
    const double g = p["goodput"]["goodput"].get<double>();
    EXPECT_GT(g, 0.5);
    EXPECT_LE(g, 1.0);
    EXPECT_LE(per_day, previous);  // best first
    // Never more than the failure-free throughput.
    EXPECT_LE(per_day, p["result"]["tokens_per_s"].get<double>() * 86400 * (1 + 1e-12));
    previous = per_day;
  }
  const auto step = nlohmann::json::parse(testing::run_command(job + " --json").out);
  EXPECT_EQ(step["objective"], "step");
  EXPECT_TRUE(step["plans"][0]["goodput"].is_null());
  // Replica restarts: the plans that can restart a replica say how many they have.
  const auto replica =
      testing::run_command(job + " --objective goodput --restart-scope replica --json");
  ASSERT_EQ(replica.exit_code, 0) << replica.err;
  for (const auto& p : nlohmann::json::parse(replica.out)["plans"]) {
    const auto replicas = p["goodput"]["replicas"].get<int64_t>();
    if (p["plan"]["sharding"] == "none") {
      EXPECT_EQ(replicas, p["plan"]["parallel"]["dp"].get<int64_t>()) << p.dump();
    } else if (p["plan"]["sharding"] != "hsdp") {
      EXPECT_EQ(replicas, 1) << p.dump();
    }
  }
  const auto needs = testing::run_command(job + " --restart-scope replica");
  EXPECT_EQ(needs.exit_code, 2);
  EXPECT_NE(needs.err.find("--restart-scope: replica changes how plans rank by goodput"),
            std::string::npos)
      << needs.err;
  const auto bad = testing::run_command(job + " --objective speed");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--objective: got 'speed', expected step or goodput"), std::string::npos)
      << bad.err;
}

// A degradation so heavy that no plan ever reaches its target: plan --objective goodput refuses
// it as `orrery goodput` refuses one plan (one rule, check_run_finishes), instead of ranking
// every plan at goodput 0 and exiting 0.
TEST(GoodputCli, PlanRefusesWhenNoPlanReachesItsTarget) {
  const std::string episode =
      " --degradation gpu:mean_interval_s=10s,step_ratio=1000,duration_s=1h";
  const std::string common =
      " --model llama3-8b --cluster dgx-h100 --nodes 2 --global-batch 16 --seq 2048";
  const auto plan =
      testing::run_command(std::string(ORRERY_BIN) + " plan" + common +
                           " --rerank none --quiet --top 3 --objective goodput" + episode);
  EXPECT_EQ(plan.exit_code, 2) << plan.out;
  EXPECT_EQ(plan.out, "");
  EXPECT_EQ(plan.err.rfind("error: dgx-h100: storage: no searched plan reaches its target "
                           "(--objective goodput): at best the expected goodput is 0 at",
                           0),
            0u)
      << plan.err;
  const auto goodput = testing::run_command(std::string(ORRERY_BIN) + " goodput" + common +
                                            " --tp 8 --trials 10" + episode);
  EXPECT_EQ(goodput.exit_code, 2);
  for (const auto* r : {&plan, &goodput}) {
    EXPECT_NE(r->err.find("the run never reaches its target; check the storage and failures "
                          "fields"),
              std::string::npos)
        << r->err;
  }
}

// plan --objective goodput --degradation: the same episode text as `orrery goodput` (one parser),
// priced in every ranked plan's goodput; a bad value is refused naming the flag, and without the
// goodput objective the flag is refused rather than ignored.
TEST(GoodputCli, PlanTakesDegradationEpisodes) {
  const std::string job = std::string(ORRERY_BIN) +
                          " plan --model llama3-8b --cluster dgx-h100 --nodes 4 --global-batch 64"
                          " --seq 4096 --rerank none --quiet --top 1 --objective goodput --json";
  const auto plain = testing::run_command(job);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  // Each of the 32 GPUs (4 nodes) slows the step to 2x for 1 h every 500 h: 32 / 500 h x 1 h x
  // (1 - 1/2) = 3.2% of the training lost, a factor 0.968 on the closed form's goodput.
  const std::string episode = " --degradation gpu:mean_interval_s=500h,step_ratio=2,duration_s=1h";
  const auto slowed = testing::run_command(job + episode);
  ASSERT_EQ(slowed.exit_code, 0) << slowed.err;
  const auto a = nlohmann::json::parse(plain.out)["plans"][0]["goodput"];
  const auto b = nlohmann::json::parse(slowed.out)["plans"][0]["goodput"];
  EXPECT_NEAR(b["goodput"].get<double>(), a["goodput"].get<double>() * 0.968, 1e-4);
  EXPECT_LT(b["tokens_per_day"].get<double>(), 0.97 * a["tokens_per_day"].get<double>());
  // `orrery goodput` on the winning plan with the same flag gives the same closed-form goodput
  // and interval: the two commands read the episode by one rule.
  const fs::path dir = fs::temp_directory_path() / ("orrery_plandeg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto out = testing::run_command(job + episode + " --out " + (dir / "best.yaml").string());
  ASSERT_EQ(out.exit_code, 0) << out.err;
  const auto g = testing::run_command(std::string(ORRERY_BIN) + " goodput --plan " +
                                      (dir / "best.yaml").string() + episode + " --json");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const auto optimal = nlohmann::json::parse(g.out)["optimal_interval"];
  EXPECT_NEAR(optimal["goodput"].get<double>(), b["goodput"].get<double>(), 1e-9);
  EXPECT_EQ(optimal["steps"].get<int64_t>(), b["checkpoint_interval_steps"].get<int64_t>());
  fs::remove_all(dir);
  const std::string bad_text = "gpu:mean_interval_s=2000h,step_ratio=0.9,detect_steps=5";
  const auto bad = testing::run_command(job + " --degradation " + bad_text);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--degradation: got '" + bad_text + "'"), std::string::npos) << bad.err;
  const auto nan = testing::run_command(job +
                                        " --degradation gpu:mean_interval_s=nan,step_ratio=2,"
                                        "duration_s=1h");
  EXPECT_EQ(nan.exit_code, 2);
  EXPECT_NE(nan.err.find("--degradation"), std::string::npos) << nan.err;
  const std::string step_job = std::string(ORRERY_BIN) +
                               " plan --model llama3-8b --cluster dgx-h100 --nodes 4"
                               " --global-batch 64 --seq 4096 --rerank none --quiet";
  const auto needs = testing::run_command(step_job + episode);
  EXPECT_EQ(needs.exit_code, 2);
  EXPECT_NE(needs.err.find("--degradation: degradation episodes change how plans rank by goodput"),
            std::string::npos)
      << needs.err;
}

}  // namespace
}  // namespace orrery
