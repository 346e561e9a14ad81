// Typed access to a config.json: every lookup either returns a checked value or throws an
// InputError at the key's line.
#include "hf_config.hpp"

#include <fstream>
#include <sstream>

#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"

namespace orrery::models::detail {
namespace {

const char* json_kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::array:
      return "a list";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::number_float:
      return "a fraction";
    default:
      return "a number";
  }
}

int line_at(std::string_view text, size_t offset) {
  int line = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

}  // namespace

HfConfig::HfConfig(const std::filesystem::path& file) : file_(file.string()) {
  text_ = base::read_input_file(file, "a config.json file");
  try {
    json_ = nlohmann::json::parse(text_);
  } catch (const nlohmann::json::parse_error& e) {
    std::string reason = e.what();
    if (auto pos = reason.find("syntax error"); pos != std::string::npos)
      reason = reason.substr(pos);
    throw base::InputError(file_, line_at(text_, e.byte == 0 ? 0 : e.byte - 1), "",
                           "not valid JSON: " + reason);
  } catch (const nlohmann::json::out_of_range& e) {
    throw base::InputError(
        file_, 0, "",
        "not valid JSON: a number too large for a double (" + std::string(e.what()) + ")");
  }
  if (!json_.is_object()) {
    throw base::InputError(
        file_, 1, "",
        std::string("got ") + json_kind(json_) + ", expected a JSON object of config keys");
  }
}

int HfConfig::line(std::string_view key) const {
  // The first `"key"` followed by a colon: config.json files are flat, and nested objects
  // (rope_scaling, quantization_config) do not reuse the model keys looked up here.
  const std::string quoted = "\"" + std::string(key) + "\"";
  for (size_t pos = text_.find(quoted); pos != std::string::npos;
       pos = text_.find(quoted, pos + 1)) {
    size_t after = pos + quoted.size();
    while (after < text_.size() && std::isspace(static_cast<unsigned char>(text_[after]))) ++after;
    if (after < text_.size() && text_[after] == ':') return line_at(text_, pos);
  }
  return 0;
}

void HfConfig::fail(std::string_view key, const std::string& reason) const {
  throw base::InputError(file_, line(key), std::string(key), reason);
}

bool HfConfig::has(std::string_view key) const {
  auto it = json_.find(key);
  return it != json_.end() && !it->is_null();
}

void HfConfig::wrong_type(std::string_view key, const char* expected) const {
  const auto& value = json_.at(std::string(key));
  fail(key, "got " + value.dump() + " (" + json_kind(value) + "), expected " + expected);
}

const nlohmann::json& HfConfig::at(std::string_view key, const char* expected) const {
  if (!has(key)) fail(key, std::string("required key is missing (expected ") + expected + ")");
  return json_.at(std::string(key));
}

int64_t HfConfig::positive(std::string_view key) const {
  const auto& value = at(key, "an integer > 0");
  if (!value.is_number_integer()) wrong_type(key, "an integer > 0");
  const int64_t v = value.get<int64_t>();
  if (v <= 0) fail(key, "got " + std::to_string(v) + ", expected an integer > 0");
  return v;
}

std::string HfConfig::string(std::string_view key) const {
  const auto& value = at(key, "a string");
  if (!value.is_string()) wrong_type(key, "a string");
  return value.get<std::string>();
}

std::optional<int64_t> HfConfig::optional_non_negative(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  const auto& value = json_.at(std::string(key));
  if (!value.is_number_integer()) wrong_type(key, "an integer >= 0");
  const int64_t v = value.get<int64_t>();
  if (v < 0) fail(key, "got " + std::to_string(v) + ", expected an integer >= 0");
  return v;
}

std::optional<double> HfConfig::optional_number(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  const auto& value = json_.at(std::string(key));
  if (!value.is_number()) wrong_type(key, "a number");
  return value.get<double>();
}

std::optional<bool> HfConfig::optional_bool(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  const auto& value = json_.at(std::string(key));
  if (!value.is_boolean()) wrong_type(key, "true or false");
  return value.get<bool>();
}

std::optional<std::string> HfConfig::optional_string(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  const auto& value = json_.at(std::string(key));
  if (!value.is_string()) wrong_type(key, "a string");
  return value.get<std::string>();
}

std::string HfConfig::architecture() const {
  const auto& value = at("architectures", "a list of model class names");
  if (!value.is_array() || value.empty() || !value.front().is_string()) {
    wrong_type("architectures", "a non-empty list of model class names");
  }
  return value.front().get<std::string>();
}

}  // namespace orrery::models::detail
