// Model specs by name or file: the built-in presets (models/presets/*.yaml, compiled in), files
// in the ModelSpec format, and the semantic checks every spec must pass.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "orrery/pb/model.pb.h"
#include "orrery/traces/spec_io.hpp"

namespace orrery::models {

// Sorted preset names ("gpt3-175b", "llama3-8b", ..., "tiny").
std::vector<std::string> preset_names();

// A preset by name; InputError naming the closest preset when there is none.
pb::ModelSpec preset(std::string_view name);

// `name_or_file` is a file when it contains '/' or ends in .yaml/.yml/.json, else a preset.
// The spec is validated; `where` (optional) receives line numbers for later checks.
pb::ModelSpec load_model(std::string_view name_or_file, SourceMap* where = nullptr);

// Semantic rules beyond the schema (GQA divisibility, MoE top-k <= experts, MLA fields, ...).
// Throws InputError through `where` so the message names the file, line and field.
void validate_model(const pb::ModelSpec& spec, const SourceMap& where);

// head_dim when set, else hidden_size / num_attention_heads.
int64_t head_dim(const pb::ModelSpec& spec);

}  // namespace orrery::models
