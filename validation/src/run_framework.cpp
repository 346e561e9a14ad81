#include "run_framework.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include "published_run_fields.hpp"

namespace orrery::validation::detail {
namespace {

bool version_char(char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; }

// `word` in `text` with no letter, digit, '-' or '_' either side.
bool names_exact_word(const std::string& text, const std::string& word) {
  auto part = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const size_t end = at + word.size();
    if ((at == 0 || !part(text[at - 1])) && (end == text.size() || !part(text[end]))) return true;
  }
  return false;
}

// A profile's name in `text` as a word, its hyphens written as hyphens or as spaces.
bool names_word(const std::string& text, const std::string& name) {
  std::string spaced = name;
  std::replace(spaced.begin(), spaced.end(), '-', ' ');
  return names_exact_word(text, name) || names_exact_word(text, spaced);
}

// `version` in `text` with no digit or dot either side ("0.6.0" in "core_v0.6.0", "2024-12" in
// "(2024-12-26)"; not "0.6" in "0.6.0").
bool names_version(const std::string& text, const std::string& version) {
  for (size_t at = text.find(version); at != std::string::npos; at = text.find(version, at + 1)) {
    const size_t end = at + version.size();
    if ((at == 0 || !version_char(text[at - 1])) &&
        (end == text.size() || !version_char(text[end])))
      return true;
  }
  return false;
}

}  // namespace

std::string profile_named_by(const std::string& framework_text) {
  const std::string text = lowercase(framework_text);
  std::string found;
  std::set<std::string> named;                        // every profile name the text holds
  const pb::FrameworkProfile* unversioned = nullptr;  // the last unversioned one of them
  for (const auto& p : plan::framework_profiles()) {
    if (!names_word(text, p.name())) continue;
    named.insert(p.name());
    if (p.unversioned()) unversioned = &p;
    for (const auto& v : p.versions()) {
      if (!names_version(text, v)) continue;
      if (!found.empty()) return {};  // two releases: the text decides neither
      found = p.name() + "@" + v;
    }
  }
  if (!found.empty()) return found;
  // No release named: an unversioned profile, when it is the only framework the text names (a
  // Megatron-Core run that also says "FSDP" is not a PyTorch FSDP run of unknown release).
  return named.size() == 1 && unversioned != nullptr ? unversioned->name() : std::string();
}

}  // namespace orrery::validation::detail
