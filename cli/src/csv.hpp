// CSV output (--csv): RFC 4180 lines (CRLF-free: "\n" ends a line, as every other output here),
// fields quoted only when they hold a comma, a quote or a line break; numbers printed as JSON
// prints them (the shortest text that reads back to the same double), so the bytes never vary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orrery::cli {

// `field`, quoted with its quotes doubled when it needs to be.
std::string csv_field(const std::string& field);
// The fields joined by commas, then "\n".
std::string csv_line(const std::vector<std::string>& fields);
// A number as a CSV field: the shortest round-trip text ("0.5", "1e-06", "8").
std::string csv_number(double value);
std::string csv_number(int64_t value);

}  // namespace orrery::cli
