// The nccl-tests tables of a public_collectives.json-format file, checked field by field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace orrery::validation::detail {

struct MeasuredRow {
  double bytes = 0;
  double time_s = 0;
};

struct MeasuredTable {
  std::string id, system, gpu, collective, inter, algo;
  int64_t gpus = 0, nodes = 0, gpus_per_node = 0;
  bool derived = false;
  std::vector<MeasuredRow> rows;
};

std::vector<MeasuredTable> read_measured_tables(const std::filesystem::path& file);

}  // namespace orrery::validation::detail
