// The collective cost model against the measured nccl-tests tables of
// shared/validation/public_collectives.json, and the reader's messages for bad files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "orrery/base/error.hpp"
#include "orrery/validation/collective_validation.hpp"
#include "test_paths.hpp"

namespace orrery::sim {
namespace {

namespace fs = std::filesystem;

const fs::path kPublicTables =
    fs::path(ORRERY_SOURCE_DIR) / "../shared/validation/public_collectives.json";

fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("orrery_collectives_" + name + ".json");
  std::ofstream(p) << text;
  return p;
}

std::string message_of(const fs::path& file) {
  try {
    validation::validate_collectives(file);
  } catch (const base::InputError& e) {
    return e.what();
  }
  return "no error";
}

constexpr const char* kTableHead =
    R"json({"tables": [{"id": "t", "system": "s", "gpu": "H100 80GB HBM3 (SXM)", "collective": "all_reduce",
        "gpus": 8, "nodes": 1, "gpus_per_node": 8, "rows": )json";

TEST(CollectiveValidation, PublicTablesWithinTenPercentMedian) {
  if (!fs::exists(kPublicTables)) GTEST_SKIP() << kPublicTables << " is not checked out here";
  const validation::CollectiveValidation v = validation::validate_collectives(kPublicTables);
  ASSERT_EQ(v.tables.size(), 22u);
  for (const auto& t : v.tables) {
    EXPECT_FALSE(t.skipped) << t.id << ": " << t.skip_reason;
    std::printf("%-22s median %5.1f%%  p90 %5.1f%%\n", t.id.c_str(), 100 * t.median_abs_error,
                100 * t.p90_abs_error);
  }
  std::printf("overall %ld rows: median %.1f%%, p90 %.1f%%\n", static_cast<long>(v.rows),
              100 * v.median_abs_error, 100 * v.p90_abs_error);
  EXPECT_EQ(v.rows, 560);
  EXPECT_LE(v.median_abs_error, 0.10);
  EXPECT_LE(v.p90_abs_error,
            0.50);  // what the model reaches today (47.9%); see docs/collectives.md
}

TEST(CollectiveValidation, ForcedNvlsTablePinsNvls) {
  if (!fs::exists(kPublicTables)) GTEST_SKIP() << kPublicTables << " is not checked out here";
  const validation::CollectiveValidation v = validation::validate_collectives(kPublicTables);
  for (const auto& t : v.tables) {
    if (t.id != "azure-ndh100v5-ar-8") continue;
    EXPECT_TRUE(t.nvls_pinned);
    for (const auto& row : t.rows) EXPECT_EQ(row.algorithm, "nvls");
    return;
  }
  FAIL() << "table azure-ndh100v5-ar-8 not found";
}

TEST(CollectiveValidation, UnknownGpuIsSkippedWithTheReason) {
  const fs::path p =
      write_temp("unknown_gpu", R"({"tables": [{"id": "x", "system": "s", "gpu": "MI250X",
      "collective": "all_reduce", "gpus": 8, "nodes": 1, "gpus_per_node": 8,
      "rows": [{"bytes": 1024, "time_us": 10}]}]})");
  const validation::CollectiveValidation v = validation::validate_collectives(p);
  ASSERT_EQ(v.tables.size(), 1u);
  EXPECT_TRUE(v.tables[0].skipped);
  EXPECT_EQ(v.tables[0].skip_reason,
            "gpu: 'MI250X' names none of A100, A800, H100, H200, H800, B200, GB200, GB300, "
            "MI300X, MI325X");
  EXPECT_EQ(v.rows, 0);
}

// Each system of tests/inputs/sim/collectives/systems.json on the cluster its text names.
TEST(CollectiveValidation, SystemsAreMappedByTheirNamesAndNicText) {
  const validation::CollectiveValidation v = validation::validate_collectives(
      fs::path(ORRERY_TEST_INPUTS) / "sim" / "collectives" / "systems.json");
  std::map<std::string, const validation::CollectiveValidationTable*> by_id;
  for (const auto& t : v.tables) by_id[t.id] = &t;
  auto cluster = [&](const char* id) {
    const auto* t = by_id.at(id);
    EXPECT_FALSE(t->skipped) << id << ": " << t->skip_reason;
    EXPECT_EQ(t->rows.size(), 2u) << id;
    return t->cluster;
  };
  // A GB200 NVL72 rack is 18 trays of one NVLink domain, not 9 HGX B200 nodes over InfiniBand.
  EXPECT_EQ(cluster("gb200-rack"),
            "gb200-nvl72 x 18 (GB200, 4 x 400 Gb/s NICs per node; GPUs 0-3 of each node)");
  EXPECT_EQ(cluster("gb200-trays"),
            "gb200-nvl72 x 2 (GB200, 4 x 400 Gb/s NICs per node over infiniband; GPUs 0-3 of each "
            "node)");
  EXPECT_EQ(cluster("b200"),
            "hgx-b200 x 2 (B200, 8 x 400 Gb/s NICs per node over infiniband; GPUs 0-7 of each "
            "node)");
  // The NIC text applies to every family, written with or without spaces around the x, and
  // names the transport.
  EXPECT_EQ(cluster("h100-4x200"),
            "dgx-h100 x 2 (H100-SXM, 4 x 200 Gb/s NICs per node over roce; GPUs 0-7 of each node)");
  EXPECT_EQ(cluster("a100-4x100"),
            "dgx-a100 x 2 (A100-SXM-40GB, 4 x 100 Gb/s NICs per node over efa; GPUs 0-7 of each "
            "node)");
  EXPECT_EQ(cluster("h200-per-gpu"),
            "hgx-h200 x 2 (H200-SXM, 8 x 400 Gb/s NICs per node over infiniband; GPUs 0-7 of each "
            "node)");
  EXPECT_EQ(cluster("mi300x"),
            "mi300x x 1 (MI300X, 8 x 400 Gb/s NICs per node; GPUs 0-7 of each node)");
  EXPECT_EQ(cluster("mi325x"),
            "mi325x x 1 (MI325X, 8 x 400 Gb/s NICs per node over roce; GPUs 0-7 of each node)");
  EXPECT_EQ(cluster("gb300-rack"),
            "gb300-nvl72 x 18 (GB300, 4 x 800 Gb/s NICs per node over infiniband; GPUs 0-3 of "
            "each node)");
  // Cloud instances by the system's name, their transport by the NIC text.
  EXPECT_EQ(cluster("aws-p5"),
            "aws-p5 x 2 (H100-SXM, 32 x 100 Gb/s NICs per node over efa; GPUs 0-7 of each node)");
  EXPECT_EQ(cluster("gcp-a3-high"),
            "gcp-a3-high x 2 (H100-SXM, 4 x 200 Gb/s NICs per node over gpudirect_tcpx; GPUs 0-7 "
            "of each node)");
  EXPECT_EQ(cluster("azure-mi300x"),
            "azure-nd-mi300x-v5 x 2 (MI300X, 8 x 400 Gb/s NICs per node over infiniband; GPUs 0-7 "
            "of each node)");
  // A named instance fixes its NICs: EFA text without a rate keeps the p5's 32 x 100 Gb/s.
  EXPECT_EQ(cluster("aws-p5-no-rate"), cluster("aws-p5"));
  const auto* no_rate = by_id.at("aws-p5-no-rate");
  for (size_t i = 0; i < no_rate->rows.size(); ++i) {
    EXPECT_DOUBLE_EQ(no_rate->rows[i].predicted_s, by_id.at("aws-p5")->rows[i].predicted_s);
  }
  // 32 x 100 Gb/s EFA on an H100 node is striped four per GPU, as on a p5: the same times.
  const auto* p5 = by_id.at("aws-p5");
  const auto* striped = by_id.at("h100-efa-32");
  ASSERT_EQ(p5->rows.size(), striped->rows.size());
  for (size_t i = 0; i < p5->rows.size(); ++i) {
    EXPECT_DOUBLE_EQ(p5->rows[i].predicted_s, striped->rows[i].predicted_s);
  }
  EXPECT_EQ(by_id.at("no-nic-rate")->skip_reason,
            "inter: 'InfiniBand' gives no NIC count and rate (write e.g. '8x 400 Gb/s')");
  EXPECT_EQ(by_id.at("h100-pcie")->skip_reason,
            "gpu: 'H100 PCIe' is a PCIe card; every cluster here joins its GPUs by NVLink or "
            "Infinity Fabric");
}

TEST(CollectiveValidation, BadFilesGiveExactMessages) {
  fs::path p = write_temp(
      "negative_time",
      std::string(kTableHead) + R"([{"bytes": 8, "time_us": 1}, {"bytes": 16, "time_us": -3}]}]})");
  EXPECT_EQ(message_of(p),
            p.string() + ": tables[0].rows[1].time_us: got -3, expected a positive number");

  p = write_temp("no_tables", R"({"about": "x"})");
  EXPECT_EQ(message_of(p), p.string() + ": tables: missing");

  p = write_temp("text_bytes", std::string(kTableHead) + R"([{"bytes": "8", "time_us": 1}]}]})");
  EXPECT_EQ(message_of(p),
            p.string() + ": tables[0].rows[0].bytes: got a string, expected a positive number");

  p = write_temp("gpus",
                 R"({"tables": [{"id": "t", "system": "s", "gpu": "B200", "collective": "alltoall",
      "gpus": 12, "nodes": 2, "gpus_per_node": 8, "rows": [{"bytes": 8, "time_us": 1}]}]})");
  EXPECT_EQ(message_of(p),
            p.string() + ": tables[0].gpus: got 12, expected nodes x gpus_per_node = 16");

  p = write_temp("no_rows", std::string(kTableHead) + "[]}]}");
  EXPECT_EQ(message_of(p),
            p.string() + ": tables[0].rows: got an empty list, expected a list of measured rows");
}

}  // namespace
}  // namespace orrery::sim
