// Checks for number flags: one that sets a file's field by that field's rules, the others by
// these validators. CLI11's PositiveNumber and NonNegativeNumber let "nan" through (every
// comparison with NaN is false) and "inf" too, so floating-point flags take these instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <google/protobuf/descriptor.h>
#include <CLI/CLI.hpp>

namespace orrery::cli {

// A finite number > 0.
CLI::Validator finite_positive();
// A finite number >= 0.
CLI::Validator finite_non_negative();

// Gives every option of `app` and its subcommands that takes a value a check that the value is
// not empty: CLI11 reads `--moe-imbalance ''` as the flag left out (std::optional) or as 0, a
// silent default; an empty value is refused naming the flag instead.
void refuse_empty_values(CLI::App& app);

// A flag that sets a file's field gets the field's own checks (finite, sign, range from
// orrery/pb/options.proto) and messages, so a flag never lets through what a file would refuse.
// Throws InputError naming `flag`.
void check_flag(const std::string& flag, const google::protobuf::Descriptor* message,
                const std::string& field, double value, const std::string& text);
// The same for an integer flag, when given.
void check_flag(const std::string& flag, const google::protobuf::Descriptor* message,
                const std::string& field, const std::optional<int64_t>& value);

}  // namespace orrery::cli
