// Human units at the edges, SI everywhere else. One parser and one printer for every quantity
// orrery reads or shows: "400 GB/s", "200 Gb/s", "2.5 us", "80 GiB", "989 TFLOPS".
#pragma once

#include <string>
#include <string_view>

namespace orrery::base::units {

// The quantities orrery reads and prints. traces/ maps the protos' field option (pb::Unit, which
// declares each field's unit once) onto this, so base needs no generated code.
enum class Unit { kNone, kSeconds, kBytes, kBytesPerSecond, kFlop, kFlopPerSecond, kWatts };

// Parses "<number> [unit]" into SI. A bare number is taken as already SI. Throws
// std::invalid_argument whose what() says what was expected (no file or field: callers add them).
double parse(std::string_view text, Unit unit);

// Prints an SI value with a readable unit and 3-4 significant digits ("450 GB/s", "1.3 us").
std::string format(double value, Unit unit);

// The SI unit symbol, for table headers and docs: "s", "B", "B/s", "FLOP", "FLOP/s", "W".
std::string_view si_symbol(Unit unit);

// Shorthands for common prints.
inline std::string seconds(double s) { return format(s, Unit::kSeconds); }
inline std::string bytes(double b) { return format(b, Unit::kBytes); }
inline std::string bandwidth(double bps) { return format(bps, Unit::kBytesPerSecond); }
inline std::string flops(double f) { return format(f, Unit::kFlop); }
inline std::string flop_rate(double f) { return format(f, Unit::kFlopPerSecond); }

// Shortest decimal text that reads back to the same double ("0.1", "4.5e+11", "128").
std::string number(double v);

}  // namespace orrery::base::units
