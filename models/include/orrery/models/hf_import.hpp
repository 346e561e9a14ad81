// Import of a Hugging Face transformers `config.json` into a ModelSpec.
#pragma once

#include <filesystem>
#include <string>

#include "orrery/pb/model.pb.h"

namespace orrery::models {

// Supported `architectures`: LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM,
// Qwen2ForCausalLM, Qwen2MoeForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, GPT2LMHeadModel,
// GPTNeoXForCausalLM, DeepseekV3ForCausalLM. `name` names the result (default: the file's folder).
// Throws InputError naming the file and the missing or bad key.
pb::ModelSpec import_hf_config(const std::filesystem::path& config_json, std::string name = {});

}  // namespace orrery::models
