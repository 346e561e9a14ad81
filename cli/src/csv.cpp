#include "csv.hpp"

#include <nlohmann/json.hpp>

namespace orrery::cli {

std::string csv_field(const std::string& field) {
  if (field.find_first_of(",\"\r\n") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out += ',';
    out += csv_field(fields[i]);
  }
  return out + "\n";
}

std::string csv_number(double value) { return nlohmann::json(value).dump(); }

std::string csv_number(int64_t value) { return std::to_string(value); }

}  // namespace orrery::cli
