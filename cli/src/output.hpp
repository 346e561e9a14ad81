// Output choices shared by the commands: a readable table by default, --json for scripts,
// --yaml where the output is a spec a user may edit.
#pragma once

#include <cstdint>
#include <iostream>
#include <string>

#include <google/protobuf/message.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace orrery::cli {

struct OutputFlags {
  bool json = false;
  bool yaml = false;
  bool csv = false;
};

// --json (and --yaml when `spec_output`: the command can print a spec in the file format).
void add_output_flags(CLI::App* cmd, OutputFlags& flags, bool spec_output);

// --csv (excludes --json): the command's table as CSV on stdout; `rows` says what a row holds.
CLI::Option* add_csv_flag(CLI::App* cmd, OutputFlags& flags, const std::string& rows);

// Prints `spec` as JSON or YAML if either flag is set; returns whether it printed.
bool print_spec_if_asked(const google::protobuf::Message& spec, const OutputFlags& flags);

// The first keys of a command's JSON result: which shape it is ("orrery.simulate") and the
// version of that shape (docs/formats.md, "JSON outputs"): a script checks them before reading.
inline constexpr int kJsonSchemaVersion = 1;
nlohmann::ordered_json json_header(const char* schema);

// json_header(schema), then the keys of `body` in order.
nlohmann::ordered_json with_header(const char* schema, const nlohmann::ordered_json& body);

// `message` (a result) with every field present, after json_header(schema).
nlohmann::ordered_json result_json(const char* schema, const google::protobuf::Message& message);

// Prints `text`, or writes it to `out_file` (never replacing one unless `force`).
void emit(const std::string& text, const std::string& out_file, bool force);

// InputError "<flag>: got N, must divide <what> (M)" unless divisor divides value.
void check_divides(const std::string& flag, int64_t divisor, const std::string& what,
                   int64_t value);

}  // namespace orrery::cli
