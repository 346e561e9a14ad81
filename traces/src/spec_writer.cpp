// The generic writer: the inverse of spec_reader.cpp, with deterministic output (declaration
// order, defaults omitted, shortest round-trip numbers) so the same spec gives the same bytes.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iostream>
#include <memory>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <yaml-cpp/yaml.h>

#include "atomic_write.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/temp_files.hpp"
#include "orrery/base/units.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// One scalar or nested value, independent of the output syntax.
struct Value {
  enum class Kind { kNumber, kString, kBool, kEnum, kMessage } kind;
  std::string text;                  // number, string, bool or enum, already formatted
  const Message* message = nullptr;  // kMessage
};

bool is_set(const Message& msg, const FieldDescriptor* field) {
  const Reflection* refl = msg.GetReflection();
  if (field->is_repeated()) return refl->FieldSize(msg, field) > 0;
  return refl->HasField(msg, field);  // proto3: scalars without presence are "set" when non-zero
}

std::string integer_text(int64_t v) { return std::to_string(v); }

Value get(const Message& msg, const FieldDescriptor* field, int index) {
  const Reflection* r = msg.GetReflection();
  const bool rep = field->is_repeated();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return {Value::Kind::kMessage,
              {},
              rep ? &r->GetRepeatedMessage(msg, field, index) : &r->GetMessage(msg, field)};
    case FieldDescriptor::CPPTYPE_STRING:
      return {Value::Kind::kString,
              rep ? r->GetRepeatedString(msg, field, index) : r->GetString(msg, field)};
    case FieldDescriptor::CPPTYPE_INT64:
      return {Value::Kind::kNumber,
              integer_text(rep ? r->GetRepeatedInt64(msg, field, index) : r->GetInt64(msg, field))};
    case FieldDescriptor::CPPTYPE_INT32:
      return {Value::Kind::kNumber,
              integer_text(rep ? r->GetRepeatedInt32(msg, field, index) : r->GetInt32(msg, field))};
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return {Value::Kind::kNumber,
              base::units::number(rep ? r->GetRepeatedDouble(msg, field, index)
                                      : r->GetDouble(msg, field))};
    case FieldDescriptor::CPPTYPE_BOOL:
      return {Value::Kind::kBool,
              (rep ? r->GetRepeatedBool(msg, field, index) : r->GetBool(msg, field)) ? "true"
                                                                                     : "false"};
    case FieldDescriptor::CPPTYPE_ENUM:
      return {Value::Kind::kEnum, enum_value_name(*(rep ? r->GetRepeatedEnum(msg, field, index)
                                                        : r->GetEnum(msg, field)))};
    default:
      ORRERY_CHECK(false, "unsupported field type in " + field->full_name());
  }
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

class JsonWriter {
 public:
  static constexpr int kMaxDefaultDepth = 16;

  // every_field: results, whose shape must not change with their values (an unset field is
  // written at its default, an empty list as []); otherwise specs, which state only what is set.
  JsonWriter(int indent, bool every_field) : indent_(indent), every_field_(every_field) {}

  void message(const Message& msg, int depth) {
    const auto* desc = msg.GetDescriptor();
    std::vector<const FieldDescriptor*> fields;
    for (int i = 0; i < desc->field_count(); ++i) {
      const FieldDescriptor* f = desc->field(i);
      // A oneof's other members are absent by meaning, not by value.
      // An unset message field is written as its defaults, but not past a type that contains
      // itself (it would never end).
      const bool shown = every_field_ && f->real_containing_oneof() == nullptr &&
                         (f->message_type() == nullptr || depth < kMaxDefaultDepth);
      if (shown || is_set(msg, f)) fields.push_back(f);
    }
    if (fields.empty()) {
      out_ += "{}";
      return;
    }
    out_ += "{";
    for (size_t i = 0; i < fields.size(); ++i) {
      newline(depth + 1);
      out_ += json_string(fields[i]->name()) + ":" + (indent_ > 0 ? " " : "");
      field(msg, fields[i], depth + 1);
      if (i + 1 < fields.size()) out_ += ",";
    }
    newline(depth);
    out_ += "}";
  }

  std::string take() { return std::move(out_); }

 private:
  void field(const Message& msg, const FieldDescriptor* f, int depth) {
    if (!f->is_repeated()) return value(get(msg, f, 0), depth);
    const int n = msg.GetReflection()->FieldSize(msg, f);
    const bool scalars = f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE;
    out_ += "[";
    for (int i = 0; i < n; ++i) {
      if (scalars) {
        if (i) out_ += indent_ > 0 ? ", " : ",";
      } else {
        newline(depth + 1);
      }
      value(get(msg, f, i), depth + 1);
      if (!scalars && i + 1 < n) out_ += ",";
    }
    if (!scalars) newline(depth);
    out_ += "]";
  }

  void value(const Value& v, int depth) {
    switch (v.kind) {
      case Value::Kind::kMessage:
        return message(*v.message, depth);
      case Value::Kind::kString:
      case Value::Kind::kEnum:
        out_ += json_string(v.text);
        return;
      default:
        out_ += v.text;
    }
  }

  void newline(int depth) {
    if (indent_ <= 0) return;
    out_ += "\n" + std::string(static_cast<size_t>(depth * indent_), ' ');
  }

  int indent_;
  bool every_field_ = false;
  std::string out_;
};

void emit_yaml(YAML::Emitter& out, const Message& msg);

void emit_yaml_value(YAML::Emitter& out, const Value& v) {
  switch (v.kind) {
    case Value::Kind::kMessage:
      return emit_yaml(out, *v.message);
    case Value::Kind::kString:
      out << YAML::DoubleQuoted << v.text;
      return;
    default:
      out << v.text;
  }
}

void emit_yaml(YAML::Emitter& out, const Message& msg) {
  const auto* desc = msg.GetDescriptor();
  out << YAML::BeginMap;
  for (int i = 0; i < desc->field_count(); ++i) {
    const FieldDescriptor* f = desc->field(i);
    if (!is_set(msg, f)) continue;
    out << YAML::Key << f->name() << YAML::Value;
    if (!f->is_repeated()) {
      emit_yaml_value(out, get(msg, f, 0));
      continue;
    }
    const bool scalars = f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE;
    if (scalars) out << YAML::Flow;
    out << YAML::BeginSeq;
    for (int j = 0; j < msg.GetReflection()->FieldSize(msg, f); ++j) {
      emit_yaml_value(out, get(msg, f, j));
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
}

}  // namespace

std::string to_json(const Message& message, int indent) {
  JsonWriter writer(indent, false);
  writer.message(message, 0);
  return writer.take() + "\n";
}

std::string to_json_every_field(const Message& message, int indent) {
  JsonWriter writer(indent, true);
  writer.message(message, 0);
  return writer.take() + "\n";
}

std::string to_yaml(const Message& message) {
  YAML::Emitter out;
  out.SetIndent(2);
  emit_yaml(out, message);
  return std::string(out.c_str()) + "\n";
}

namespace detail {

void remove_stale_temporaries(const std::filesystem::path& file, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto pid = base::stale_writer(file, entry.path());
    if (!pid) continue;
    fs::remove_all(entry.path(), ec);  // a temporary folder (a Chakra export's) goes whole
    std::cerr << "note: removed " << entry.path().string() << ", the partial " << file.string()
              << " of an earlier run (pid " << *pid << ") that was killed while writing it\n";
  }
}

std::unique_ptr<base::TempPath> write_temporary(const std::filesystem::path& file,
                                                std::string_view text, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!overwrite && fs::exists(file, ec)) {
    throw base::InputError(
        file.string(), 0, "",
        "already exists; refusing to overwrite it (choose another path or remove it)");
  }
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) {
    throw base::InputError(file.string(), 0, "", "its folder " + dir.string() + " does not exist");
  }
  remove_stale_temporaries(file, dir);
  base::remove_temporaries_on_signals();
  auto temp = std::make_unique<base::TempPath>(base::temp_path_for(file));
  // fsync before the rename: after a power cut the name then points at the whole file, never at
  // an empty one whose data had not reached the disk.
  const int fd = ::open(temp->path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  while (ok && ::fsync(fd) != 0) ok = errno == EINTR;
  if (fd >= 0 && ::close(fd) != 0) ok = false;
  if (!ok) throw base::EnvironmentError(file.string() + ": could not be written");
  return temp;
}

void commit_temporary(base::TempPath& temp, const std::filesystem::path& file) {
  std::error_code ec;
  std::filesystem::rename(temp.path(), file, ec);
  if (ec) {
    throw base::EnvironmentError(file.string() + ": could not be written (" + ec.message() + ")");
  }
  temp.release();
}

}  // namespace detail

void write_file_atomically(const std::filesystem::path& file, std::string_view text,
                           bool overwrite) {
  const auto temp = detail::write_temporary(file, text, overwrite);
  detail::commit_temporary(*temp, file);
}

}  // namespace orrery
