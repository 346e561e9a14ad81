#include "orrery/base/units.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>

namespace orrery::base::units {
namespace {

struct Suffix {
  std::string_view text;
  double factor;  // multiply by this to get SI
};

// Accepted spellings per unit. Decimal prefixes are powers of 1000 and binary ones (KiB, MiB,
// GiB, TiB) powers of 1024, as everywhere in networking and storage; "Gb/s" is bits.
constexpr std::array kSeconds{Suffix{"s", 1},     Suffix{"ms", 1e-3}, Suffix{"us", 1e-6},
                              Suffix{"µs", 1e-6}, Suffix{"ns", 1e-9}, Suffix{"min", 60},
                              Suffix{"h", 3600}};
constexpr std::array kBytes{Suffix{"B", 1},
                            Suffix{"kB", 1e3},
                            Suffix{"KB", 1e3},
                            Suffix{"MB", 1e6},
                            Suffix{"GB", 1e9},
                            Suffix{"TB", 1e12},
                            Suffix{"PB", 1e15},
                            Suffix{"KiB", 1024.0},
                            Suffix{"MiB", 1048576.0},
                            Suffix{"GiB", 1073741824.0},
                            Suffix{"TiB", 1099511627776.0}};
constexpr std::array kBytesPerSecond{Suffix{"B/s", 1},
                                     Suffix{"kB/s", 1e3},
                                     Suffix{"KB/s", 1e3},
                                     Suffix{"MB/s", 1e6},
                                     Suffix{"GB/s", 1e9},
                                     Suffix{"TB/s", 1e12},
                                     Suffix{"GiB/s", 1073741824.0},
                                     Suffix{"b/s", 0.125},
                                     Suffix{"bps", 0.125},
                                     Suffix{"Kb/s", 125.0},
                                     Suffix{"Mb/s", 1.25e5},
                                     Suffix{"Gb/s", 1.25e8},
                                     Suffix{"Gbps", 1.25e8},
                                     Suffix{"Tb/s", 1.25e11}};
constexpr std::array kFlop{Suffix{"FLOP", 1},    Suffix{"KFLOP", 1e3},  Suffix{"MFLOP", 1e6},
                           Suffix{"GFLOP", 1e9}, Suffix{"TFLOP", 1e12}, Suffix{"PFLOP", 1e15},
                           Suffix{"EFLOP", 1e18}};
constexpr std::array kFlopPerSecond{Suffix{"FLOP/s", 1},     Suffix{"FLOPS", 1},
                                    Suffix{"GFLOP/s", 1e9},  Suffix{"GFLOPS", 1e9},
                                    Suffix{"TFLOP/s", 1e12}, Suffix{"TFLOPS", 1e12},
                                    Suffix{"PFLOP/s", 1e15}, Suffix{"PFLOPS", 1e15}};
constexpr std::array kWatts{Suffix{"W", 1}, Suffix{"kW", 1e3}};

std::span<const Suffix> suffixes(Unit unit) {
  switch (unit) {
    case Unit::kSeconds:
      return kSeconds;
    case Unit::kBytes:
      return kBytes;
    case Unit::kBytesPerSecond:
      return kBytesPerSecond;
    case Unit::kFlop:
      return kFlop;
    case Unit::kFlopPerSecond:
      return kFlopPerSecond;
    case Unit::kWatts:
      return kWatts;
    default:
      return {};
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string expected_units(Unit unit) {
  std::string list;
  for (const auto& s : suffixes(unit)) list += (list.empty() ? "" : ", ") + std::string(s.text);
  return list;
}

}  // namespace

std::string_view si_symbol(Unit unit) {
  switch (unit) {
    case Unit::kSeconds:
      return "s";
    case Unit::kBytes:
      return "B";
    case Unit::kBytesPerSecond:
      return "B/s";
    case Unit::kFlop:
      return "FLOP";
    case Unit::kFlopPerSecond:
      return "FLOP/s";
    case Unit::kWatts:
      return "W";
    default:
      return "";
  }
}

double parse(std::string_view text, Unit unit) {
  std::string_view s = trim(text);
  double value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end == s.data()) {
    throw std::invalid_argument("got '" + std::string(text) + "', expected a number" +
                                (unit == Unit::kNone
                                     ? std::string()
                                     : " with an optional unit (" + expected_units(unit) + ")"));
  }
  if (!std::isfinite(value)) {
    throw std::invalid_argument("got '" + std::string(text) + "', expected a finite number");
  }
  std::string_view rest = trim(s.substr(static_cast<size_t>(end - s.data())));
  if (rest.empty()) return value;
  for (const auto& suffix : suffixes(unit)) {
    if (rest != suffix.text) continue;
    // "1e308 TB/s" is finite as written and infinite in SI.
    if (!std::isfinite(value * suffix.factor)) {
      throw std::invalid_argument("got '" + std::string(text) + "', expected a finite number");
    }
    return value * suffix.factor;
  }
  throw std::invalid_argument(
      "unknown unit '" + std::string(rest) + "' in '" + std::string(text) + "'" +
      (unit == Unit::kNone ? std::string(", this field takes a plain number")
                           : ", expected one of: " + expected_units(unit)));
}

std::string number(double v) {
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), end);
}

namespace {

// Three significant digits, trailing zeros dropped: 449.9999 -> "450", 1.25 -> "1.25".
std::string significant(double v) {
  char buf[32];
  double magnitude = std::fabs(v);
  int decimals = magnitude >= 100 ? 0 : magnitude >= 10 ? 1 : 2;
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s(buf);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

std::string scaled(double v, std::span<const std::pair<double, const char*>> steps) {
  for (const auto& [factor, symbol] : steps) {
    if (std::fabs(v) >= factor) return significant(v / factor) + " " + symbol;
  }
  const auto& last = steps.back();
  return significant(v / last.first) + " " + last.second;
}

}  // namespace

std::string format(double v, Unit unit) {
  using Step = std::pair<double, const char*>;
  static constexpr std::array<Step, 5> kTime{
      {{1, "s"}, {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}, {1e-12, "ps"}}};
  static constexpr std::array<Step, 5> kSize{{{1099511627776.0, "TiB"},
                                              {1073741824.0, "GiB"},
                                              {1048576.0, "MiB"},
                                              {1024.0, "KiB"},
                                              {1, "B"}}};
  static constexpr std::array<Step, 5> kRate{
      {{1e12, "TB/s"}, {1e9, "GB/s"}, {1e6, "MB/s"}, {1e3, "kB/s"}, {1, "B/s"}}};
  static constexpr std::array<Step, 6> kWork{{{1e18, "EFLOP"},
                                              {1e15, "PFLOP"},
                                              {1e12, "TFLOP"},
                                              {1e9, "GFLOP"},
                                              {1e6, "MFLOP"},
                                              {1, "FLOP"}}};
  static constexpr std::array<Step, 5> kWorkRate{
      {{1e18, "EFLOP/s"}, {1e15, "PFLOP/s"}, {1e12, "TFLOP/s"}, {1e9, "GFLOP/s"}, {1, "FLOP/s"}}};
  static constexpr std::array<Step, 2> kPower{{{1e3, "kW"}, {1, "W"}}};
  if (v == 0) return "0 " + std::string(si_symbol(unit));
  switch (unit) {
    case Unit::kSeconds:
      return std::fabs(v) >= 120 ? significant(v / 60) + " min" : scaled(v, kTime);
    case Unit::kBytes:
      return scaled(v, kSize);
    case Unit::kBytesPerSecond:
      return scaled(v, kRate);
    case Unit::kFlop:
      return scaled(v, kWork);
    case Unit::kFlopPerSecond:
      return scaled(v, kWorkRate);
    case Unit::kWatts:
      return scaled(v, kPower);
    default:
      return significant(v);
  }
}

}  // namespace orrery::base::units
