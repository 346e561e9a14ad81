#include "orrery/base/error.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>

namespace orrery::base {
namespace {

std::string compose(const std::string& file, int line, const std::string& field,
                    const std::string& reason) {
  std::string out;
  if (!file.empty()) {
    out += file;
    if (line > 0) out += ":" + std::to_string(line);
    out += ": ";
  }
  if (!field.empty()) out += field + ": ";
  out += reason;
  return out;
}

bool same_letter(char x, char y) {
  return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
}

// Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of two
// neighbouring letters ("bf61" is one edit from "bf16"), case-insensitive.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = same_letter(a[i - 1], b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && same_letter(a[i - 1], b[j - 2]) && same_letter(a[i - 2], b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

InputError::InputError(std::string file, int line, std::string field, std::string reason)
    : std::runtime_error(compose(file, line, field, reason)),
      file_(std::move(file)),
      line_(line),
      field_(std::move(field)),
      reason_(std::move(reason)) {}

void fail_check(const char* condition, const char* file, int line, std::string_view what) {
  std::ostringstream out;
  out << "internal error (a bug in orrery, please report it): " << what << " [" << condition
      << " failed at " << file << ":" << line << "]";
  throw InternalError(out.str());
}

std::string suggest(std::string_view got, const std::vector<std::string>& candidates) {
  if (candidates.empty()) return {};
  const std::string* best = nullptr;
  size_t best_distance = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = edit_distance(got, c);
    if (d < best_distance) best_distance = d, best = &c;
  }
  // A near miss: at most a third of the word wrong (and at least one edit allowed).
  if (best != nullptr && best_distance <= std::max<size_t>(1, got.size() / 3)) {
    return " (did you mean '" + *best + "'?)";
  }
  std::string list;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (i == 12) {
      list += ", ... (" + std::to_string(candidates.size()) + " in all)";
      break;
    }
    list += (i ? ", " : "") + candidates[i];
  }
  return " (expected one of: " + list + ")";
}

}  // namespace orrery::base
