// Reading and writing the protobuf-defined formats as YAML or JSON, driven by the messages'
// descriptors: one reader checks every file type against its schema (unknown fields with
// near-miss suggestions, types, enums, units, required and sign constraints from
// orrery/pb/options.proto) and rejects a bad file with the file, the line, the field path and
// the reason. Modules add their semantic checks on top and point at lines through SourceMap.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include <google/protobuf/message.h>

namespace orrery {

enum class SpecFormat { kYaml, kJson };

// Where each field of a parsed file came from, so later semantic checks can name a line.
class SourceMap {
 public:
  SourceMap() = default;
  explicit SourceMap(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  void set_file(std::string file) { file_ = std::move(file); }
  void record(std::string path, int line) { lines_.emplace(std::move(path), line); }
  // Line of `path` or of its nearest recorded ancestor ("a.b[2].c" -> "a.b[2]" -> "a.b" -> "a");
  // 0 when unknown (a built-in preset, a spec made in code).
  int line(std::string_view path) const;

  // Throws InputError at this file and the line of `path`.
  [[noreturn]] void fail(std::string_view path, std::string_view reason) const;

 private:
  std::string file_;
  std::map<std::string, int, std::less<>> lines_;
};

// Parses `text` (YAML or JSON) into `out`, which is cleared first. `file` names the source in
// errors. Throws InputError.
void parse_spec(std::string_view text, std::string_view file, SpecFormat format,
                google::protobuf::Message* out, SourceMap* where = nullptr);

// Reads a file; the format follows the extension (.json is JSON, anything else YAML). Throws
// EnvironmentError when the file cannot be read, InputError when it is bad.
void read_spec_file(const std::filesystem::path& file, google::protobuf::Message* out,
                    SourceMap* where = nullptr);

// Deterministic text in the file format: fields in declaration order, defaults left out, enums
// by their short lower-case names, numbers in SI as the shortest text that reads back exactly.
std::string to_json(const google::protobuf::Message& message, int indent = 2);
// The same for results a script reads (simulate, plan): every field present, unset ones at their
// default (0, false, "", [], {...}), so the shape of the output never depends on its values.
std::string to_json_every_field(const google::protobuf::Message& message, int indent = 2);
std::string to_yaml(const google::protobuf::Message& message);

// Writes `text` to `file` through a temporary and a rename, so a reader never sees half a file.
// Refuses to replace an existing file unless `overwrite` (nothing a user wrote is lost).
void write_file_atomically(const std::filesystem::path& file, std::string_view text,
                           bool overwrite);

// The lower-case file name of an enum value ("rmsnorm" for NORM_RMSNORM).
std::string enum_value_name(const google::protobuf::EnumValueDescriptor& value);

}  // namespace orrery
