#include "orrery/plan/framework_profile.hpp"

#include <algorithm>

#include "framework_profiles.hpp"
#include "orrery/base/error.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::plan {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// The settings a profile gives: its fields that are set (an enum counts when not UNSPECIFIED).
std::vector<const FieldDescriptor*> set_fields(const pb::FrameworkSettings& s) {
  std::vector<const FieldDescriptor*> out;
  s.GetReflection()->ListFields(s, &out);
  return out;
}

// A profile's sources must match its settings one to one: a value without a source is a guess.
void check_sources(const pb::FrameworkProfile& p, const std::string& file) {
  std::vector<std::string> settings;
  for (const auto* f : set_fields(p.settings())) settings.push_back(f->name());
  std::vector<std::string> sourced;
  for (const auto& s : p.sources()) {
    if (std::find(settings.begin(), settings.end(), s.field()) == settings.end())
      throw base::InputError(file, 0, "sources", "'" + s.field() + "' names no setting");
    if (std::find(sourced.begin(), sourced.end(), s.field()) != sourced.end())
      throw base::InputError(file, 0, "sources", "'" + s.field() + "' has two sources");
    sourced.push_back(s.field());
  }
  for (const auto& name : settings) {
    if (std::find(sourced.begin(), sourced.end(), name) == sourced.end())
      throw base::InputError(file, 0, "settings." + name, "has no source");
  }
}

std::vector<pb::FrameworkProfile> read_profiles() {
  std::vector<pb::FrameworkProfile> out;
  for (const auto& file : frameworks::embedded_files()) {
    const std::string source = "plan/frameworks/" + std::string(file.name) + ".yaml";
    pb::FrameworkProfile p;
    parse_spec(file.text, source, SpecFormat::kYaml, &p);
    check_sources(p, source);
    for (const auto& have : out) {
      // A version-free name must mean one profile.
      ORRERY_CHECK(have.name() != p.name() || !(have.unversioned() || p.unversioned()),
                   "two framework profiles are named " + p.name() + " and one is unversioned");
      for (const auto& v : p.versions()) {
        const auto& vs = have.versions();
        ORRERY_CHECK(have.name() != p.name() || std::find(vs.begin(), vs.end(), v) == vs.end(),
                     "two framework profiles cover " + p.name() + "@" + v);
      }
    }
    out.push_back(std::move(p));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.name(), a.versions(0)) < std::make_pair(b.name(), b.versions(0));
  });
  return out;
}

// The value as a plan file writes it.
std::string value_text(const Message& m, const FieldDescriptor* f) {
  const Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(m, f) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_INT64:
      return std::to_string(r->GetInt64(m, f));
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      std::string t = std::to_string(r->GetDouble(m, f));
      t.erase(t.find_last_not_of('0') + 1);
      if (!t.empty() && t.back() == '.') t.pop_back();
      return t;
    }
    case FieldDescriptor::CPPTYPE_ENUM:
      return enum_value_name(*r->GetEnum(m, f));
    default:
      ORRERY_CHECK(false, "unsupported framework setting type: " + f->full_name());
  }
}

// Copies setting `f` of `from` into the plan field of the same name.
void copy_setting(const pb::FrameworkSettings& from, const FieldDescriptor* f, pb::Plan& plan) {
  const FieldDescriptor* to = pb::Plan::descriptor()->FindFieldByName(f->name());
  ORRERY_CHECK(to != nullptr && to->cpp_type() == f->cpp_type(),
               "framework setting " + f->name() + " is no plan field of its type");
  const Reflection* r = from.GetReflection();
  const Reflection* w = plan.GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL:
      w->SetBool(&plan, to, r->GetBool(from, f));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      w->SetInt64(&plan, to, r->GetInt64(from, f));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      w->SetDouble(&plan, to, r->GetDouble(from, f));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      w->SetEnumValue(&plan, to, r->GetEnumValue(from, f));
      break;
    default:
      ORRERY_CHECK(false, "unsupported framework setting type: " + f->full_name());
  }
}

std::string source_of(const pb::FrameworkProfile& p, const std::string& field) {
  for (const auto& s : p.sources()) {
    if (s.field() == field) return s.source();
  }
  return {};
}

std::string known_list() {
  std::string out;
  for (const auto& k : known_frameworks()) out += (out.empty() ? "" : ", ") + k;
  return out;
}

}  // namespace

const std::vector<pb::FrameworkProfile>& framework_profiles() {
  static const std::vector<pb::FrameworkProfile> profiles = read_profiles();
  return profiles;
}

std::vector<std::string> known_frameworks() {
  std::vector<std::string> out;
  for (const auto& p : framework_profiles()) {
    if (p.unversioned()) out.push_back(p.name());
    for (const auto& v : p.versions()) out.push_back(p.name() + "@" + v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

const pb::FrameworkProfile& find_framework_profile(std::string_view text, std::string_view file,
                                                   std::string_view field, int line) {
  const size_t at = text.find('@');
  const auto fail = [&](const std::string& why) -> const pb::FrameworkProfile& {
    throw base::InputError(std::string(file), line, std::string(field),
                           "got '" + std::string(text) + "', " + why + "; known: " + known_list());
  };
  if (at == std::string_view::npos) {
    for (const auto& p : framework_profiles()) {
      if (p.name() == text && p.unversioned()) return p;
    }
    return fail("expected NAME@VERSION (only an unversioned profile goes by its name alone)");
  }
  const std::string_view name = text.substr(0, at);
  const std::string_view version = text.substr(at + 1);
  bool named = false;
  for (const auto& p : framework_profiles()) {
    if (p.name() != name) continue;
    named = true;
    for (const auto& v : p.versions()) {
      if (v == version) return p;
    }
  }
  return fail(named ? "a version no " + std::string(name) + " profile covers"
                    : "a framework no profile describes");
}

AppliedProfile apply_framework_profile(pb::Plan& plan, const pb::FrameworkProfile& profile,
                                       std::string_view framework,
                                       const std::function<bool(const std::string&)>& is_stated) {
  AppliedProfile out;
  out.framework = std::string(framework);
  for (const auto* f : set_fields(profile.settings())) {
    ProfileValue v{f->name(), value_text(profile.settings(), f), source_of(profile, f->name())};
    if (is_stated(f->name())) {
      out.stated.push_back(std::move(v));
      continue;
    }
    copy_setting(profile.settings(), f, plan);
    out.filled.push_back(std::move(v));
  }
  return out;
}

}  // namespace orrery::plan
