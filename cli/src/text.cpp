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

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

}  // namespace orrery::cli
