// What both readers of the spec formats share, below the tree they walk: the field named by a key,
// a scalar's text checked and stored into a field, the required-field check, and the one message
// shape (file:line: field.path: reason). The YAML walker (spec_reader.cpp) and the streaming JSON
// reader (json_stream.cpp) differ only in how they reach a value, so a file gets the same checks
// and the same errors through either.
#pragma once

#include <set>
#include <string>

#include <google/protobuf/message.h>

#include "orrery/traces/spec_io.hpp"

namespace orrery::detail {

// How the messages name what a value is.
inline constexpr const char* kMapping = "a mapping";
inline constexpr const char* kList = "a list";
inline constexpr const char* kNull = "nothing (null)";
inline constexpr const char* kScalar = "a scalar";

std::string child_path(const std::string& parent, std::string_view field);

class FieldReader {
 public:
  FieldReader(std::string file, SourceMap* where) : file_(std::move(file)), where_(where) {}

  // `line` is 1-based; 0 when unknown.
  [[noreturn]] void fail(const std::string& path, int line, const std::string& reason) const;
  void record(const std::string& path, int line) const;

  // The field `key` of `desc`; "unknown field" with near-miss names when there is none.
  const google::protobuf::FieldDescriptor* field_named(const google::protobuf::Descriptor& desc,
                                                       const std::string& key,
                                                       const std::string& field_path,
                                                       int line) const;
  // Every required field of `msg` is among `seen`; `line` is the mapping's.
  void check_required(const google::protobuf::Message& msg, const std::set<std::string>& seen,
                      const std::string& path, int line) const;
  // "a list", "a Plan", "one of: ...", "a number in s": what a field expects, for messages.
  static std::string describe(const google::protobuf::FieldDescriptor* field);

  // A scalar's text checked against the field's type, unit and range, then set (single field)
  // or appended (repeated field).
  void set_scalar(google::protobuf::Message* out, const google::protobuf::FieldDescriptor* field,
                  const std::string& text, const std::string& path, int line) const;
  void add_scalar(google::protobuf::Message* out, const google::protobuf::FieldDescriptor* field,
                  const std::string& text, const std::string& path, int line) const;

 private:
  int64_t integer(const google::protobuf::FieldDescriptor* field, const std::string& s,
                  const std::string& path, int line) const;
  double real(const google::protobuf::FieldDescriptor* field, const std::string& s,
              const std::string& path, int line) const;
  bool boolean(const std::string& s, const std::string& path, int line) const;
  int enumeration(const google::protobuf::FieldDescriptor* field, const std::string& s,
                  const std::string& path, int line) const;
  void check_value(const google::protobuf::FieldDescriptor* field, double value,
                   const std::string& text, const std::string& path, int line) const;

  std::string file_;
  SourceMap* where_;
};

}  // namespace orrery::detail
