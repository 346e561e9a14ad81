// The generic reader: walks a YAML (or JSON) tree alongside a message descriptor and fills the
// message field by field, so that every file type gets the same checks and the same errors.
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "field_unit.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "orrery/base/units.hpp"
#include "orrery/pb/options.pb.h"
#include "orrery/traces/field_ranges.hpp"
#include "orrery/traces/spec_io.hpp"
#include "yaml_documents.hpp"

namespace orrery {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string child_path(const std::string& parent, std::string_view field) {
  return parent.empty() ? std::string(field) : parent + "." + std::string(field);
}

const char* node_kind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "nothing (null)";
    default:
      return "a scalar";
  }
}

class Reader {
 public:
  Reader(std::string file, SourceMap* where) : file_(std::move(file)), where_(where) {}

  void fill(const YAML::Node& node, Message* out, const std::string& path) {
    record(path, node);
    if (!node.IsMap()) {
      fail(path, node,
           std::string("got ") + node_kind(node) + ", expected a mapping of " +
               out->GetDescriptor()->name() + " fields");
    }
    const Descriptor* desc = out->GetDescriptor();
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      // A key that is itself a mapping or a list ("{a: 1}: 2", or JSON made YAML by a stray
      // character) names no field; as<std::string> would throw yaml-cpp's own exception.
      if (!it->first.IsScalar()) {
        fail(path, it->first,
             std::string("a key is ") + node_kind(it->first) + ", expected a field name");
      }
      const auto key = it->first.as<std::string>();
      const std::string field_path = child_path(path, key);
      if (!seen.insert(key).second) fail(field_path, it->first, "appears twice");
      const FieldDescriptor* field = desc->FindFieldByName(key);
      if (field == nullptr) {
        std::vector<std::string> names;
        for (int i = 0; i < desc->field_count(); ++i) names.push_back(desc->field(i)->name());
        fail(field_path, it->first, "unknown field" + base::suggest(key, names));
      }
      record(field_path, it->first);
      if (it->second.IsNull()) {
        // A key with no value ("num_layers:"): point at the key, yaml-cpp marks the next line.
        fail(field_path, it->first, "got nothing (null), expected " + describe(field));
      }
      if (field->is_repeated()) {
        fill_repeated(it->second, out, field, field_path);
      } else {
        fill_single(it->second, out, field, field_path);
      }
    }
    check_required(node, *out, seen, path);
  }

 private:
  void record(const std::string& path, const YAML::Node& node) {
    if (where_ != nullptr && node.Mark().line >= 0) where_->record(path, node.Mark().line + 1);
  }

  [[noreturn]] void fail(const std::string& path, const YAML::Node& node,
                         const std::string& reason) const {
    int line = node.Mark().line >= 0 ? node.Mark().line + 1 : 0;
    throw base::InputError(file_, line, path, reason);
  }

  static pb::FieldMeta meta(const FieldDescriptor* field) {
    return field->options().GetExtension(pb::meta);
  }

  // The field's declared unit (options.proto) as base's.
  static base::units::Unit unit_of(const FieldDescriptor* field) {
    return detail::base_unit(meta(field).unit());
  }

  void check_required(const YAML::Node& node, const Message& msg, const std::set<std::string>& seen,
                      const std::string& path) const {
    const Descriptor* desc = msg.GetDescriptor();
    for (int i = 0; i < desc->field_count(); ++i) {
      const FieldDescriptor* field = desc->field(i);
      if (meta(field).required() && !seen.contains(field->name())) {
        fail(child_path(path, field->name()), node,
             "required field is missing (" + std::string(describe(field)) + ")");
      }
    }
  }

  static std::string describe(const FieldDescriptor* field) {
    if (field->is_repeated()) return "a list";
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE:
        return "a " + field->message_type()->name();
      case FieldDescriptor::CPPTYPE_ENUM:
        return "one of: " + enum_choices(field->enum_type());
      case FieldDescriptor::CPPTYPE_STRING:
        return "a string";
      case FieldDescriptor::CPPTYPE_BOOL:
        return "true or false";
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT: {
        const auto unit = unit_of(field);
        return unit == base::units::Unit::kNone
                   ? "a number"
                   : "a number in " + std::string(base::units::si_symbol(unit));
      }
      default:
        return "an integer";
    }
  }

  static std::vector<std::string> enum_names(const EnumDescriptor* e) {
    std::vector<std::string> names;
    for (int i = 0; i < e->value_count(); ++i) {
      if (e->value(i)->number() != 0) names.push_back(enum_value_name(*e->value(i)));
    }
    return names;
  }

  static std::string enum_choices(const EnumDescriptor* e) {
    std::string out;
    for (const auto& n : enum_names(e)) out += (out.empty() ? "" : ", ") + n;
    return out;
  }

  void fill_repeated(const YAML::Node& node, Message* out, const FieldDescriptor* field,
                     const std::string& path) {
    if (!node.IsSequence()) {
      fail(path, node, std::string("got ") + node_kind(node) + ", expected a list");
    }
    const Reflection* refl = out->GetReflection();
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      const YAML::Node item = node[i];
      record(item_path, item);
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_MESSAGE:
          fill(item, refl->AddMessage(out, field), item_path);
          break;
        case FieldDescriptor::CPPTYPE_STRING:
          refl->AddString(out, field, scalar(item, item_path));
          break;
        case FieldDescriptor::CPPTYPE_INT64:
          refl->AddInt64(out, field, integer(item, field, item_path));
          break;
        case FieldDescriptor::CPPTYPE_INT32:
          refl->AddInt32(out, field, static_cast<int32_t>(integer(item, field, item_path)));
          break;
        case FieldDescriptor::CPPTYPE_DOUBLE:
          refl->AddDouble(out, field, real(item, field, item_path));
          break;
        case FieldDescriptor::CPPTYPE_BOOL:
          refl->AddBool(out, field, boolean(item, item_path));
          break;
        case FieldDescriptor::CPPTYPE_ENUM:
          refl->AddEnumValue(out, field, enumeration(item, field, item_path));
          break;
        default:
          ORRERY_CHECK(false, "unsupported repeated field type in " + field->full_name());
      }
    }
    if (node.size() == 0 && meta(field).required()) {
      fail(path, node, "must not be empty");
    }
  }

  void fill_single(const YAML::Node& node, Message* out, const FieldDescriptor* field,
                   const std::string& path) {
    const Reflection* refl = out->GetReflection();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE:
        fill(node, refl->MutableMessage(out, field), path);
        break;
      case FieldDescriptor::CPPTYPE_STRING: {
        std::string s = scalar(node, path);
        if (meta(field).required() && s.empty()) fail(path, node, "must not be empty");
        refl->SetString(out, field, s);
        break;
      }
      case FieldDescriptor::CPPTYPE_INT64:
        refl->SetInt64(out, field, integer(node, field, path));
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        refl->SetInt32(out, field, static_cast<int32_t>(integer(node, field, path)));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        refl->SetDouble(out, field, real(node, field, path));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        refl->SetBool(out, field, boolean(node, path));
        break;
      case FieldDescriptor::CPPTYPE_ENUM:
        refl->SetEnumValue(out, field, enumeration(node, field, path));
        break;
      default:
        ORRERY_CHECK(false, "unsupported field type in " + field->full_name());
    }
  }

  std::string scalar(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar()) {
      fail(path, node, std::string("got ") + node_kind(node) + ", expected a single value");
    }
    return node.Scalar();
  }

  int64_t integer(const YAML::Node& node, const FieldDescriptor* field,
                  const std::string& path) const {
    const std::string s = scalar(node, path);
    int64_t value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec == std::errc::result_out_of_range) fail(path, node, "got " + s + ", which is too large");
    if (ec != std::errc() || end != s.data() + s.size()) {
      fail(path, node, "got '" + s + "', expected an integer");
    }
    // An int32 field would otherwise keep the low 32 bits of a larger number.
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT32 &&
        (value > std::numeric_limits<int32_t>::max() ||
         value < std::numeric_limits<int32_t>::min())) {
      fail(path, node, "got " + s + ", which is too large");
    }
    check_sign(node, field, path, static_cast<double>(value), s);
    return value;
  }

  double real(const YAML::Node& node, const FieldDescriptor* field, const std::string& path) const {
    const std::string s = scalar(node, path);
    double value = 0;
    try {
      value = base::units::parse(s, unit_of(field));
    } catch (const std::invalid_argument& e) {
      fail(path, node, e.what());
    }
    check_sign(node, field, path, value, s);
    return value;
  }

  void check_sign(const YAML::Node& node, const FieldDescriptor* field, const std::string& path,
                  double value, const std::string& text) const {
    if (auto problem = field_value_problem(*field, value, text); !problem.empty()) {
      fail(path, node, problem);
    }
  }

  bool boolean(const YAML::Node& node, const std::string& path) const {
    const std::string s = scalar(node, path);
    if (s == "true") return true;
    if (s == "false") return false;
    fail(path, node, "got '" + s + "', expected true or false");
  }

  int enumeration(const YAML::Node& node, const FieldDescriptor* field,
                  const std::string& path) const {
    const std::string s = scalar(node, path);
    const EnumDescriptor* e = field->enum_type();
    for (int i = 0; i < e->value_count(); ++i) {
      if (e->value(i)->number() != 0 && enum_value_name(*e->value(i)) == s) {
        return e->value(i)->number();
      }
    }
    fail(path, node, "got '" + s + "'" + base::suggest(s, enum_names(e)));
  }

  std::string file_;
  SourceMap* where_;
};

// JSON goes through a strict JSON parser first (YAML would accept more), then through the YAML
// tree for line numbers.
void check_json_syntax(std::string_view text, std::string_view file) {
  try {
    const auto parsed = nlohmann::json::parse(text);
    (void)parsed;
  } catch (const nlohmann::json::parse_error& e) {
    size_t offset = std::min(e.byte, text.size());
    int line = 1;
    for (size_t i = 0; i + 1 < offset; ++i) line += text[i] == '\n';
    std::string reason = e.what();
    if (auto pos = reason.find("syntax error"); pos != std::string::npos)
      reason = reason.substr(pos);
    throw base::InputError(std::string(file), line, "", "not valid JSON: " + reason);
  } catch (const nlohmann::json::out_of_range& e) {
    // A number past a double's range ("1e999") is refused, not an exception out of the reader.
    throw base::InputError(
        std::string(file), 0, "",
        "not valid JSON: a number too large for a double (" + std::string(e.what()) + ")");
  }
}

}  // namespace

std::string enum_value_name(const google::protobuf::EnumValueDescriptor& value) {
  // NORM_RMSNORM in enum Norm -> "rmsnorm": strip the enum's UPPER_SNAKE prefix.
  std::string prefix;
  for (char c : value.type()->name()) {
    if (std::isupper(static_cast<unsigned char>(c)) && !prefix.empty()) prefix += '_';
    prefix += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  prefix += '_';
  std::string name = value.name();
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

int SourceMap::line(std::string_view path) const {
  std::string p(path);
  while (!p.empty()) {
    if (auto it = lines_.find(p); it != lines_.end()) return it->second;
    size_t cut = p.find_last_of(".[");
    if (cut == std::string::npos) break;
    p.resize(cut);
  }
  return 0;
}

void SourceMap::fail(std::string_view path, std::string_view reason) const {
  throw base::InputError(file_, line(path), std::string(path), std::string(reason));
}

void parse_spec(std::string_view text, std::string_view file, SpecFormat format, Message* out,
                SourceMap* where) {
  out->Clear();
  if (where != nullptr) *where = SourceMap(std::string(file));
  if (format == SpecFormat::kJson) check_json_syntax(text, file);
  YAML::Node root;
  try {
    // Every document is read, so that a second one ("---") is refused, not silently dropped.
    root = detail::load_single_document(std::string(text), file);
  } catch (const YAML::Exception& e) {
    throw base::InputError(std::string(file), e.mark.line >= 0 ? e.mark.line + 1 : 0, "",
                           "not valid YAML: " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) {
    throw base::InputError(std::string(file), 0, "", "the file is empty");
  }
  Reader(std::string(file), where).fill(root, out, "");
}

void read_spec_file(const std::filesystem::path& file, Message* out, SourceMap* where) {
  const std::string text = base::read_input_file(file);
  const bool json = file.extension() == ".json";
  parse_spec(text, file.string(), json ? SpecFormat::kJson : SpecFormat::kYaml, out, where);
}

}  // namespace orrery
