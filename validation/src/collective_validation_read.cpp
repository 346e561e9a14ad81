// Reads measured nccl-tests tables: every field the validation uses is checked for presence,
// type and sign, and a bad one is reported as file: tables[i].field: reason.
#include "collective_validation_read.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "validation_json.hpp"

namespace orrery::validation::detail {
namespace {

using nlohmann::json;

const char* kind_of(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "a list";
    case json::value_t::object:
      return "an object";
    case json::value_t::discarded:
      return "nothing";
    default:
      return "a number";
  }
}

std::string join(const std::string& path, const char* key) {
  return path.empty() ? std::string(key) : path + "." + key;
}

// Bounds of a row: beyond any nccl-tests run, so only a damaged value is refused.
constexpr double kMaxBytes = 1125899906842624.0;  // 2^50
constexpr const char* kBytesWhy =
    "1 PiB: no GPU holds a buffer that large; nccl-tests tables stop at tens of GB";
constexpr double kMaxTime_us = 86400e6;  // a day
constexpr const char* kTimeWhy =
    "a day; nccl-tests times one collective in microseconds to seconds";

constexpr double kMaxGBps = 1e6;  // 1 PB/s
constexpr const char* kGBpsWhy = "1 PB/s is 500x NVLink 5";

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& reason) const {
    throw base::InputError(file_, 0, path, reason);
  }

  const json& field(const json& obj, const std::string& path, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) fail(join(path, key), "missing");
    return *it;
  }

  std::string text(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_string())
      fail(join(path, key), std::string("got ") + kind_of(v) + ", expected a string");
    return v.get<std::string>();
  }

  std::string optional_text(const json& obj, const std::string& path, const char* key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? std::string() : text(obj, path, key);
  }

  double positive(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_number())
      fail(join(path, key), std::string("got ") + kind_of(v) + ", expected a positive number");
    const double x = v.get<double>();
    if (!(x > 0) || !std::isfinite(x))
      fail(join(path, key), "got " + v.dump() + ", expected a positive number");
    return x;
  }

  // A required measured number: finite, > 0 and at most `max` (docs/formats.md#measured-
  // collective-tables says why each bound).
  double measured(const json& obj, const std::string& path, const char* key, double max,
                  const char* why) const {
    const double x = positive(obj, path, key);
    if (const std::string problem = above_bound(obj.at(key), max, why); !problem.empty())
      fail(join(path, key), problem);
    return x;
  }

  // A column the validation does not use (the printed bandwidths): still, when present, a
  // finite number >= 0 and at most `max`, so that a damaged row is not passed over.
  void unused_number(const json& obj, const std::string& path, const char* key, double max,
                     const char* why) const {
    auto it = obj.find(key);
    if (it == obj.end()) return;
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
      fail(join(path, key), "got " + it->dump() + ", expected a finite number >= 0");
    }
    if (const std::string problem = above_bound(*it, max, why); !problem.empty())
      fail(join(path, key), problem);
  }

  int64_t count(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
      fail(join(path, key), "got " + v.dump() + ", expected a positive whole number");
    }
    return v.get<int64_t>();
  }

  bool flag(const json& obj, const std::string& path, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return false;
    if (!it->is_boolean())
      fail(join(path, key), std::string("got ") + kind_of(*it) + ", expected true or false");
    return it->get<bool>();
  }

  MeasuredTable table(const json& t, const std::string& path) const {
    if (!t.is_object()) fail(path, std::string("got ") + kind_of(t) + ", expected an object");
    MeasuredTable m;
    m.id = text(t, path, "id");
    m.system = text(t, path, "system");
    m.gpu = text(t, path, "gpu");
    m.collective = text(t, path, "collective");
    m.inter = optional_text(t, path, "inter");
    m.algo = optional_text(t, path, "algo");
    m.gpus = count(t, path, "gpus");
    m.nodes = count(t, path, "nodes");
    m.gpus_per_node = count(t, path, "gpus_per_node");
    int64_t product = 0;
    if (__builtin_mul_overflow(m.nodes, m.gpus_per_node, &product)) {
      fail(path + ".nodes", "nodes x gpus_per_node overflows: " + std::to_string(m.nodes) + " x " +
                                std::to_string(m.gpus_per_node));
    }
    if (m.gpus != product) {
      fail(path + ".gpus", "got " + std::to_string(m.gpus) + ", expected nodes x gpus_per_node = " +
                               std::to_string(m.nodes * m.gpus_per_node));
    }
    m.derived = flag(t, path, "derived");
    flag(t, path, "inplace_only");  // not read, but a damaged value is refused
    const json& rows = field(t, path, "rows");
    if (!rows.is_array() || rows.empty()) {
      fail(path + ".rows", std::string("got ") +
                               (rows.is_array() ? "an empty list" : kind_of(rows)) +
                               ", expected a list of measured rows");
    }
    for (size_t r = 0; r < rows.size(); ++r) {
      const std::string row_path = path + ".rows[" + std::to_string(r) + "]";
      if (!rows[r].is_object())
        fail(row_path, std::string("got ") + kind_of(rows[r]) + ", expected an object");
      const json& row = rows[r];
      const double bytes = measured(row, row_path, "bytes", kMaxBytes, kBytesWhy);
      const double time_us = measured(row, row_path, "time_us", kMaxTime_us, kTimeWhy);
      for (const char* unused : {"algbw_GBps", "busbw_GBps"})
        unused_number(row, row_path, unused, kMaxGBps, kGBpsWhy);
      m.rows.push_back({bytes, time_us * 1e-6});
    }
    return m;
  }

  std::vector<MeasuredTable> read(const json& root) const {
    if (!root.is_object())
      fail("", std::string("got ") + kind_of(root) + ", expected an object with `tables`");
    const json& tables = field(root, "", "tables");
    if (!tables.is_array())
      fail("tables", std::string("got ") + kind_of(tables) + ", expected a list");
    if (tables.empty()) fail("tables", "got an empty list, expected at least one measured table");
    std::vector<MeasuredTable> out;
    for (size_t i = 0; i < tables.size(); ++i) {
      out.push_back(table(tables[i], "tables[" + std::to_string(i) + "]"));
    }
    return out;
  }

 private:
  std::string file_;
};

}  // namespace

std::vector<MeasuredTable> read_measured_tables(const std::filesystem::path& file) {
  const std::string text = base::read_input_file(file, "a JSON file");
  const json root = parse_validation_json(text, file.string());
  return Reader(file.string()).read(root);
}

}  // namespace orrery::validation::detail
