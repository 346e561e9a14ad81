#include "text.hpp"

#include <cstdio>
#include <sstream>

namespace orrery::cli {

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * fraction);
  return buf;
}

std::string signed_percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * fraction);
  return buf;
}

std::string memory_verdict(double peak_bytes, double capacity_bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f of %.1f GiB%s", peak_bytes / (1 << 30),
                capacity_bytes / (1 << 30), peak_bytes > capacity_bytes ? " OOM" : "");
  return buf;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

}  // namespace orrery::cli
