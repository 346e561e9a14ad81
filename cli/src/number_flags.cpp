#include "number_flags.hpp"

#include <cmath>
#include <string>

#include "orrery/base/error.hpp"
#include "orrery/traces/field_ranges.hpp"

namespace orrery::cli {
namespace {

// CLI11 calls a validator with the flag's text and prefixes its message with the flag's name.
CLI::Validator finite(bool zero_allowed) {
  const std::string bound = zero_allowed ? ">= 0" : "> 0";
  return CLI::Validator(
      [zero_allowed, bound](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) {
          return "got '" + text + "', expected a number";
        }
        if (!std::isfinite(value)) return "got " + text + ", expected a finite number";
        if (value < 0 || (value == 0 && !zero_allowed)) {
          return "got " + text + ", expected a value " + bound;
        }
        return std::string();
      },
      zero_allowed ? "FINITE >= 0" : "FINITE > 0");
}

}  // namespace

CLI::Validator finite_positive() { return finite(false); }

void refuse_empty_values(CLI::App& app) {
  const CLI::Validator non_empty(
      [](std::string& text) -> std::string {
        return text.empty() ? "got an empty value, expected one (leave the flag out instead)"
                            : std::string();
      },
      "");
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size() > 0) option->check(non_empty);
  }
  for (CLI::App* sub : app.get_subcommands({})) refuse_empty_values(*sub);
}
CLI::Validator finite_non_negative() { return finite(true); }

}  // namespace orrery::cli

namespace orrery::cli {

void check_flag(const std::string& flag, const google::protobuf::Descriptor* message,
                const std::string& field, double value, const std::string& text) {
  const auto* f = message->FindFieldByName(field);
  ORRERY_CHECK(f != nullptr, message->name() + " has no field " + field);
  if (const auto problem = field_value_problem(*f, value, text); !problem.empty()) {
    throw base::InputError("", 0, flag, problem);
  }
}

void check_flag(const std::string& flag, const google::protobuf::Descriptor* message,
                const std::string& field, const std::optional<int64_t>& value) {
  if (value) check_flag(flag, message, field, static_cast<double>(*value), std::to_string(*value));
}

}  // namespace orrery::cli
