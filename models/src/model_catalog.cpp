// Presets by name, spec files, and the one entry point that loads and validates either.
#include "orrery/models/model_catalog.hpp"

#include <algorithm>
#include <map>

#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "presets.hpp"

namespace orrery::models {
namespace {

// Errors in a built-in preset name it like a file, so a broken preset is easy to find.
std::string preset_source(std::string_view name) {
  return "models/presets/" + std::string(name) + ".yaml";
}

struct PresetText {
  std::string_view text;
  std::string source;
};

// Keyed by each file's `name` field, the name users see in errors and outputs; a test checks that
// every preset's `name` equals its file name, so the two never drift apart.
using PresetMap = std::map<std::string, PresetText, std::less<>>;

PresetMap read_presets() {
  PresetMap out;
  for (const auto& file : presets::embedded_files()) {
    pb::ModelSpec spec;
    std::string source = preset_source(file.name);
    parse_spec(file.text, source, SpecFormat::kYaml, &spec);
    const bool fresh = out.emplace(spec.name(), PresetText{file.text, std::move(source)}).second;
    ORRERY_CHECK(fresh, "two model presets are named " + spec.name());
  }
  return out;
}

const PresetMap& preset_texts() {
  static const PresetMap texts = read_presets();
  return texts;
}

pb::ModelSpec parse_preset(std::string_view name, SourceMap* where) {
  const auto& texts = preset_texts();
  auto it = texts.find(name);
  if (it == texts.end()) {
    throw base::InputError(
        "", 0, "model",
        "no preset named '" + std::string(name) + "'" + base::suggest(name, preset_names()));
  }
  pb::ModelSpec spec;
  SourceMap local;
  SourceMap* map = where != nullptr ? where : &local;
  parse_spec(it->second.text, it->second.source, SpecFormat::kYaml, &spec, map);
  validate_model(spec, *map);
  return spec;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : preset_texts()) names.push_back(name);
  return names;  // std::map keeps them sorted
}

pb::ModelSpec preset(std::string_view name) { return parse_preset(name, nullptr); }

pb::ModelSpec load_model(std::string_view name_or_file, SourceMap* where) {
  if (!base::names_a_file(name_or_file)) return parse_preset(name_or_file, where);
  pb::ModelSpec spec;
  SourceMap local;
  SourceMap* map = where != nullptr ? where : &local;
  read_spec_file(std::filesystem::path(name_or_file), &spec, map);
  validate_model(spec, *map);
  return spec;
}

int64_t head_dim(const pb::ModelSpec& spec) {
  if (spec.has_head_dim()) return spec.head_dim();
  ORRERY_CHECK(spec.num_attention_heads() > 0, "head_dim of a spec without attention heads");
  return spec.hidden_size() / spec.num_attention_heads();
}

}  // namespace orrery::models
