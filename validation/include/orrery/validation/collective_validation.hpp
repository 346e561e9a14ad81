// Validation of the collective cost model against measured nccl-tests tables (the format of
// shared/validation/public_collectives.json): each table is mapped to a cluster like the one it
// was measured on, every row's time is predicted, and the relative errors are summarised.
// `orrery validate --collectives FILE` prints the result.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace orrery::validation {

struct CollectiveValidationRow {
  double bytes = 0;
  double measured_s = 0;
  double predicted_s = 0;
  double relative_error = 0;  // (predicted - measured) / measured
  std::string algorithm;      // what the model chose, e.g. "ring"
  std::string protocol;       // e.g. "simple"
};

struct CollectiveValidationTable {
  std::string id;
  std::string system;
  std::string gpu;
  std::string collective;  // as the file names it: all_reduce, all_gather, alltoall, sendrecv...
  int64_t gpus = 0;
  int64_t nodes = 0;
  int64_t gpus_per_node = 0;
  bool derived = false;      // rows computed from published busbw rather than timed
  bool nvls_pinned = false;  // the table forced NCCL_ALGO=NVLS and so does the prediction
  std::string cluster;       // the cluster the table was mapped to, in words
  bool skipped = false;
  std::string skip_reason;
  std::vector<CollectiveValidationRow> rows;
  double median_abs_error = 0;
  double p90_abs_error = 0;
};

struct CollectiveValidation {
  std::string file;
  std::vector<CollectiveValidationTable> tables;
  int64_t rows = 0;  // rows compared, over the tables not skipped
  double median_abs_error = 0;
  double p90_abs_error = 0;
};

// Reads `file` (InputError naming the file, the field path such as `tables[3].rows[2].time_us`
// and the reason when it is malformed; EnvironmentError when unreadable) and compares.
CollectiveValidation validate_collectives(const std::filesystem::path& file);

}  // namespace orrery::validation
