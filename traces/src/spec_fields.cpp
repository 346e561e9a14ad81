#include "spec_fields.hpp"

#include <charconv>
#include <limits>
#include <stdexcept>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include "field_unit.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "orrery/pb/options.pb.h"
#include "orrery/traces/field_ranges.hpp"

namespace orrery::detail {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

pb::FieldMeta meta(const FieldDescriptor* field) { return field->options().GetExtension(pb::meta); }

// The field's declared unit (options.proto) as base's.
base::units::Unit unit_of(const FieldDescriptor* field) {
  return detail::base_unit(meta(field).unit());
}

std::vector<std::string> enum_names(const EnumDescriptor* e) {
  std::vector<std::string> names;
  for (int i = 0; i < e->value_count(); ++i) {
    if (e->value(i)->number() != 0) names.push_back(enum_value_name(*e->value(i)));
  }
  return names;
}

std::string enum_choices(const EnumDescriptor* e) {
  std::string out;
  for (const auto& n : enum_names(e)) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::string child_path(const std::string& parent, std::string_view field) {
  return parent.empty() ? std::string(field) : parent + "." + std::string(field);
}

void FieldReader::fail(const std::string& path, int line, const std::string& reason) const {
  throw base::InputError(file_, line, path, reason);
}

void FieldReader::record(const std::string& path, int line) const {
  if (where_ != nullptr && line > 0) where_->record(path, line);
}

const FieldDescriptor* FieldReader::field_named(const Descriptor& desc, const std::string& key,
                                                const std::string& field_path, int line) const {
  const FieldDescriptor* field = desc.FindFieldByName(key);
  if (field != nullptr) return field;
  std::vector<std::string> names;
  for (int i = 0; i < desc.field_count(); ++i) names.push_back(desc.field(i)->name());
  fail(field_path, line, "unknown field" + base::suggest(key, names));
}

void FieldReader::check_required(const Message& msg, const std::set<std::string>& seen,
                                 const std::string& path, int line) const {
  const Descriptor* desc = msg.GetDescriptor();
  for (int i = 0; i < desc->field_count(); ++i) {
    const FieldDescriptor* field = desc->field(i);
    if (meta(field).required() && !seen.contains(field->name())) {
      fail(child_path(path, field->name()), line,
           "required field is missing (" + describe(field) + ")");
    }
  }
}

std::string FieldReader::describe(const FieldDescriptor* field) {
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

void FieldReader::set_scalar(Message* out, const FieldDescriptor* field, const std::string& text,
                             const std::string& path, int line) const {
  const Reflection* refl = out->GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      if (meta(field).required() && text.empty()) fail(path, line, "must not be empty");
      refl->SetString(out, field, text);
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      refl->SetInt64(out, field, integer(field, text, path, line));
      break;
    case FieldDescriptor::CPPTYPE_INT32:
      refl->SetInt32(out, field, static_cast<int32_t>(integer(field, text, path, line)));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      refl->SetDouble(out, field, real(field, text, path, line));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      refl->SetBool(out, field, boolean(text, path, line));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      refl->SetEnumValue(out, field, enumeration(field, text, path, line));
      break;
    default:
      ORRERY_CHECK(false, "unsupported field type in " + field->full_name());
  }
}

void FieldReader::add_scalar(Message* out, const FieldDescriptor* field, const std::string& text,
                             const std::string& path, int line) const {
  const Reflection* refl = out->GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      refl->AddString(out, field, text);
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      refl->AddInt64(out, field, integer(field, text, path, line));
      break;
    case FieldDescriptor::CPPTYPE_INT32:
      refl->AddInt32(out, field, static_cast<int32_t>(integer(field, text, path, line)));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      refl->AddDouble(out, field, real(field, text, path, line));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      refl->AddBool(out, field, boolean(text, path, line));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      refl->AddEnumValue(out, field, enumeration(field, text, path, line));
      break;
    default:
      ORRERY_CHECK(false, "unsupported repeated field type in " + field->full_name());
  }
}

int64_t FieldReader::integer(const FieldDescriptor* field, const std::string& s,
                             const std::string& path, int line) const {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec == std::errc::result_out_of_range) fail(path, line, "got " + s + ", which is too large");
  if (ec != std::errc() || end != s.data() + s.size()) {
    fail(path, line, "got '" + s + "', expected an integer");
  }
  // An int32 field would otherwise keep the low 32 bits of a larger number.
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT32 &&
      (value > std::numeric_limits<int32_t>::max() ||
       value < std::numeric_limits<int32_t>::min())) {
    fail(path, line, "got " + s + ", which is too large");
  }
  check_value(field, static_cast<double>(value), s, path, line);
  return value;
}

double FieldReader::real(const FieldDescriptor* field, const std::string& s,
                         const std::string& path, int line) const {
  double value = 0;
  try {
    value = base::units::parse(s, unit_of(field));
  } catch (const std::invalid_argument& e) {
    fail(path, line, e.what());
  }
  check_value(field, value, s, path, line);
  return value;
}

void FieldReader::check_value(const FieldDescriptor* field, double value, const std::string& text,
                              const std::string& path, int line) const {
  if (auto problem = field_value_problem(*field, value, text); !problem.empty()) {
    // A field without presence keeps no trace of a written 0: the program would read it as the
    // field left out and use the absent default, so say so rather than only the bound (a
    // required field has no default to point to).
    if (value == 0 && !field->is_repeated() && !field->has_presence() && !meta(field).required()) {
      problem += " (a written 0 reads as the field left out; leave it out for the default)";
    }
    fail(path, line, problem);
  }
}

bool FieldReader::boolean(const std::string& s, const std::string& path, int line) const {
  if (s == "true") return true;
  if (s == "false") return false;
  fail(path, line, "got '" + s + "', expected true or false");
}

int FieldReader::enumeration(const FieldDescriptor* field, const std::string& s,
                             const std::string& path, int line) const {
  const EnumDescriptor* e = field->enum_type();
  for (int i = 0; i < e->value_count(); ++i) {
    if (e->value(i)->number() != 0 && enum_value_name(*e->value(i)) == s) {
      return e->value(i)->number();
    }
  }
  fail(path, line, "got '" + s + "'" + base::suggest(s, enum_names(e)));
}

}  // namespace orrery::detail
