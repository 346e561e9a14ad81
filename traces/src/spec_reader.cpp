// The generic reader: walks a YAML (or JSON) tree alongside a message descriptor and fills the
// message field by field, so that every file type gets the same checks and the same errors.
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "orrery/pb/options.pb.h"
#include "orrery/traces/spec_io.hpp"
#include "spec_fields.hpp"
#include "yaml_documents.hpp"

namespace orrery {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

using detail::child_path;

const char* node_kind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return detail::kMapping;
    case YAML::NodeType::Sequence:
      return detail::kList;
    case YAML::NodeType::Null:
      return detail::kNull;
    default:
      return detail::kScalar;
  }
}

int line_of(const YAML::Node& node) { return node.Mark().line >= 0 ? node.Mark().line + 1 : 0; }

// Walks the YAML tree; the checks of each value are FieldReader's (spec_fields.hpp).
class Reader {
 public:
  Reader(std::string file, SourceMap* where) : fields_(std::move(file), where) {}

  void fill(const YAML::Node& node, Message* out, const std::string& path) {
    fields_.record(path, line_of(node));
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
      const FieldDescriptor* field =
          fields_.field_named(*desc, key, field_path, line_of(it->first));
      fields_.record(field_path, line_of(it->first));
      if (it->second.IsNull()) {
        // A key with no value ("num_layers:"): point at the key, yaml-cpp marks the next line.
        fail(field_path, it->first,
             "got nothing (null), expected " + detail::FieldReader::describe(field));
      }
      if (field->is_repeated()) {
        fill_repeated(it->second, out, field, field_path);
      } else {
        fill_single(it->second, out, field, field_path);
      }
    }
    fields_.check_required(*out, seen, path, line_of(node));
  }

 private:
  [[noreturn]] void fail(const std::string& path, const YAML::Node& node,
                         const std::string& reason) const {
    fields_.fail(path, line_of(node), reason);
  }

  void fill_repeated(const YAML::Node& node, Message* out, const FieldDescriptor* field,
                     const std::string& path) {
    if (!node.IsSequence()) {
      fail(path, node, std::string("got ") + node_kind(node) + ", expected a list");
    }
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      const YAML::Node item = node[i];
      fields_.record(item_path, line_of(item));
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        fill(item, out->GetReflection()->AddMessage(out, field), item_path);
      } else {
        fields_.add_scalar(out, field, scalar(item, item_path), item_path, line_of(item));
      }
    }
    if (node.size() == 0 && field->options().GetExtension(pb::meta).required()) {
      fail(path, node, "must not be empty");
    }
  }

  void fill_single(const YAML::Node& node, Message* out, const FieldDescriptor* field,
                   const std::string& path) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      fill(node, out->GetReflection()->MutableMessage(out, field), path);
    } else {
      fields_.set_scalar(out, field, scalar(node, path), path, line_of(node));
    }
  }

  std::string scalar(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar()) {
      fail(path, node, std::string("got ") + node_kind(node) + ", expected a single value");
    }
    return node.Scalar();
  }

  detail::FieldReader fields_;
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
