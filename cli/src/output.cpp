#include "output.hpp"

#include "orrery/base/error.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::cli {

void add_output_flags(CLI::App* cmd, OutputFlags& flags, bool spec_output) {
  CLI::Option* json = cmd->add_flag(
      "--json", flags.json,
      spec_output ? "Print the spec as JSON in the file format" : "Print JSON for scripts");
  if (spec_output) {
    cmd->add_flag("--yaml", flags.yaml, "Print the spec as YAML in the file format")
        ->excludes(json);
  }
}

CLI::Option* add_csv_flag(CLI::App* cmd, OutputFlags& flags, const std::string& rows) {
  return cmd
      ->add_flag("--csv", flags.csv,
                 "Print the table as CSV for spreadsheets: a header line, then " + rows +
                     " (docs/formats.md, CSV outputs)")
      ->excludes("--json");
}

nlohmann::ordered_json json_header(const char* schema) {
  return {{"schema", schema}, {"schema_version", kJsonSchemaVersion}};
}

nlohmann::ordered_json with_header(const char* schema, const nlohmann::ordered_json& body) {
  nlohmann::ordered_json j = json_header(schema);
  for (const auto& [key, value] : body.items()) j[key] = value;
  return j;
}

nlohmann::ordered_json result_json(const char* schema, const google::protobuf::Message& message) {
  return with_header(schema, nlohmann::ordered_json::parse(to_json_every_field(message)));
}

bool print_spec_if_asked(const google::protobuf::Message& spec, const OutputFlags& flags) {
  if (flags.json) {
    std::cout << to_json(spec);
    return true;
  }
  if (flags.yaml) {
    std::cout << to_yaml(spec);
    return true;
  }
  return false;
}

void emit(const std::string& text, const std::string& out_file, bool force) {
  if (out_file.empty()) {
    std::cout << text;
    return;
  }
  write_file_atomically(out_file, text, force);
  std::cerr << "wrote " << out_file << "\n";
}

void check_divides(const std::string& flag, int64_t divisor, const std::string& what,
                   int64_t value) {
  if (value % divisor != 0) {
    throw base::InputError("", 0, flag,
                           "got " + std::to_string(divisor) + ", must divide " + what + " (" +
                               std::to_string(value) + ")");
  }
}

}  // namespace orrery::cli
