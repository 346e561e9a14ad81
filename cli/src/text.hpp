// Small text helpers every command's tables use, written once.
#pragma once

#include <string>
#include <vector>

namespace orrery::cli {

// "12.3%" for 0.123.
std::string percent(double fraction);
// "+12.3%" / "-4.0%": an error, signed.
std::string signed_percent(double fraction);
// "71.3 of 79.6 GiB" and, past the capacity, " OOM": the memory model's verdict on a rank.
std::string memory_verdict(double peak_bytes, double capacity_bytes);
// The items of a comma list, empty ones kept ("a,,b" has three): the caller says what an empty
// item means.
std::vector<std::string> split_commas(const std::string& text);

}  // namespace orrery::cli
