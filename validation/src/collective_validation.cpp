// validate_collectives: read the tables, map each to a cluster, predict every row with the
// collective cost model, summarise the absolute relative errors (median and p90, nearest rank).
#include "orrery/validation/collective_validation.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

#include "collective_validation_clusters.hpp"
#include "collective_validation_read.hpp"
#include "orrery/sim/collective_cost.hpp"

namespace orrery::validation {
namespace {

// nccl-tests binary names as the tables spell them; sendrecv has no CollectiveKind.
std::optional<pb::CollectiveKind> kind_of(const std::string& name) {
  if (name == "all_reduce") return pb::COLLECTIVE_KIND_ALL_REDUCE;
  if (name == "all_gather") return pb::COLLECTIVE_KIND_ALL_GATHER;
  if (name == "reduce_scatter") return pb::COLLECTIVE_KIND_REDUCE_SCATTER;
  if (name == "alltoall") return pb::COLLECTIVE_KIND_ALL_TO_ALL;
  if (name == "broadcast") return pb::COLLECTIVE_KIND_BROADCAST;
  if (name == "reduce") return pb::COLLECTIVE_KIND_REDUCE;
  return std::nullopt;
}

// Sorted |x|: the median (mean of the middle two for an even count) and the nearest-rank p90.
std::pair<double, double> median_p90(std::vector<double> abs_errors) {
  if (abs_errors.empty()) return {0, 0};
  std::sort(abs_errors.begin(), abs_errors.end());
  const size_t n = abs_errors.size();
  const double median = n % 2 ? abs_errors[n / 2] : (abs_errors[n / 2 - 1] + abs_errors[n / 2]) / 2;
  const auto rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n)));
  return {median, abs_errors[rank - 1]};
}

// nccl-tests' sendrecv: every rank sends `bytes` to the next and receives from the previous at
// once; the slowest pair sets the time.
CollectiveValidationRow predict_sendrecv(const sim::CollectiveCostModel& model,
                                         const std::vector<int64_t>& devices, double bytes) {
  CollectiveValidationRow row;
  for (size_t r = 0; r < devices.size(); ++r) {
    row.predicted_s =
        std::max(row.predicted_s,
                 model.p2p_seconds(devices[r], devices[(r + 1) % devices.size()], bytes, devices));
  }
  row.algorithm = to_string(sim::CollectiveAlgorithm::kDirect);
  row.protocol = to_string(sim::CollectiveProtocol::kSimple);
  return row;
}

CollectiveValidationTable compare(const detail::MeasuredTable& measured) {
  CollectiveValidationTable t;
  t.id = measured.id;
  t.system = measured.system;
  t.gpu = measured.gpu;
  t.collective = measured.collective;
  t.gpus = measured.gpus;
  t.nodes = measured.nodes;
  t.gpus_per_node = measured.gpus_per_node;
  t.derived = measured.derived;
  t.nvls_pinned = measured.algo.find("NCCL_ALGO=NVLS") != std::string::npos;
  const std::optional<pb::CollectiveKind> kind = kind_of(measured.collective);
  if (!kind && measured.collective != "sendrecv") {
    t.skipped = true;
    t.skip_reason = "no cost model for collective '" + measured.collective + "'";
    return t;
  }
  detail::MappedCluster cluster = detail::map_cluster(measured);
  t.cluster = cluster.description;
  if (!cluster.topology) {
    t.skipped = true;
    t.skip_reason = cluster.skip_reason;
    return t;
  }
  const sim::CollectiveCostModel model(*cluster.topology);
  sim::CollectivePin pin;
  if (t.nvls_pinned) {
    if (!model.nvls_available(cluster.devices)) {
      t.skipped = true;
      t.skip_reason = "the table forces NVLS, which " + t.cluster + " does not have";
      return t;
    }
    pin.algorithm = sim::CollectiveAlgorithm::kNvls;
  }
  std::vector<double> abs_errors;
  for (const auto& m : measured.rows) {
    CollectiveValidationRow row;
    if (kind) {
      const sim::CollectiveCost cost = model.estimate(*kind, cluster.devices, m.bytes, pin);
      row.predicted_s = cost.seconds;
      row.algorithm = to_string(cost.algorithm);
      row.protocol = to_string(cost.protocol);
    } else {
      row = predict_sendrecv(model, cluster.devices, m.bytes);
    }
    row.bytes = m.bytes;
    row.measured_s = m.time_s;
    row.relative_error = (row.predicted_s - m.time_s) / m.time_s;
    abs_errors.push_back(std::abs(row.relative_error));
    t.rows.push_back(row);
  }
  std::tie(t.median_abs_error, t.p90_abs_error) = median_p90(abs_errors);
  return t;
}

}  // namespace

CollectiveValidation validate_collectives(const std::filesystem::path& file) {
  CollectiveValidation v;
  v.file = file.string();
  std::vector<double> abs_errors;
  for (const auto& measured : detail::read_measured_tables(file)) {
    v.tables.push_back(compare(measured));
    for (const auto& row : v.tables.back().rows) abs_errors.push_back(std::abs(row.relative_error));
  }
  v.rows = static_cast<int64_t>(abs_errors.size());
  std::tie(v.median_abs_error, v.p90_abs_error) = median_p90(abs_errors);
  return v;
}

}  // namespace orrery::validation
