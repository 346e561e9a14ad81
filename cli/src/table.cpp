#include "table.hpp"

#include <algorithm>
#include <cctype>

#include "orrery/base/error.hpp"

namespace orrery::cli {
namespace {

// Display width: count UTF-8 code points, not bytes ("µs" is two columns).
size_t width(const std::string& s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

bool looks_numeric(const std::string& s) {
  return !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) ||
                        (s.size() > 1 && (s[0] == '-' || s[0] == '+') &&
                         std::isdigit(static_cast<unsigned char>(s[1]))));
}

std::string pad(const std::string& s, size_t w, bool right) {
  std::string fill(w > width(s) ? w - width(s) : 0, ' ');
  return right ? fill + s : s + fill;
}

}  // namespace

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::add_row(std::vector<std::string> cells) {
  ORRERY_CHECK(cells.size() <= headers_.size(), "table row wider than its header");
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::add_separator() { rows_.emplace_back(); }

std::string Table::render() const {
  std::vector<size_t> widths(headers_.size());
  std::vector<bool> numeric(headers_.size(), true);
  for (size_t c = 0; c < headers_.size(); ++c) widths[c] = width(headers_[c]);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], width(row[c]));
      if (!row[c].empty() && !looks_numeric(row[c])) numeric[c] = false;
    }
  }
  size_t total = 0;
  for (size_t w : widths) total += w + 2;
  std::string out;
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    std::string text;
    for (size_t c = 0; c < cells.size(); ++c) {
      text += pad(cells[c], widths[c], numeric[c] && !header);
      if (c + 1 < cells.size()) text += "  ";
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  };
  line(headers_, true);
  out += std::string(total > 2 ? total - 2 : 0, '-') + "\n";
  for (const auto& row : rows_) {
    if (row.empty()) {
      out += std::string(total > 2 ? total - 2 : 0, '-') + "\n";
    } else {
      line(row, false);
    }
  }
  return out;
}

std::string render_fields(const std::vector<std::pair<std::string, std::string>>& fields) {
  size_t w = 0;
  for (const auto& [k, v] : fields) w = std::max(w, width(k));
  std::string out;
  for (const auto& [k, v] : fields) out += pad(k, w, false) + "  " + v + "\n";
  return out;
}

}  // namespace orrery::cli
