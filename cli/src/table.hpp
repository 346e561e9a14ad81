// Readable tables for the terminal: aligned columns, numbers right-aligned.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace orrery::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  // Cells beyond the header count are an error (a bug), missing cells print empty.
  void add_row(std::vector<std::string> cells);
  // A full-width line between row groups.
  void add_separator();
  std::string render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;  // an empty row is a separator
};

// "key    value" lines, keys padded to one column.
std::string render_fields(const std::vector<std::pair<std::string, std::string>>& fields);

}  // namespace orrery::cli
