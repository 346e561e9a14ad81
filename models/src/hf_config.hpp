// Typed access to a Hugging Face config.json, with errors that name the file, the key's line and
// the key. Private to hf_import.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace orrery::models::detail {

class HfConfig {
 public:
  // Reads and parses the file: EnvironmentError when unreadable, InputError when not a JSON
  // object.
  explicit HfConfig(const std::filesystem::path& file);

  const std::string& file() const { return file_; }
  // 1-based line of `"key":` in the text, 0 when absent.
  int line(std::string_view key) const;
  [[noreturn]] void fail(std::string_view key, const std::string& reason) const;

  // Present and not null (HF writes null for "use the default").
  bool has(std::string_view key) const;
  // Required keys: missing or mistyped ones fail. Integers must be > 0.
  int64_t positive(std::string_view key) const;
  std::string string(std::string_view key) const;
  // Optional keys: nullopt when absent or null; mistyped ones fail.
  std::optional<int64_t> optional_non_negative(std::string_view key) const;
  std::optional<double> optional_number(std::string_view key) const;
  std::optional<bool> optional_bool(std::string_view key) const;
  std::optional<std::string> optional_string(std::string_view key) const;
  // The first entry of `architectures`.
  std::string architecture() const;
  const nlohmann::json& json() const { return json_; }

 private:
  const nlohmann::json& at(std::string_view key, const char* expected) const;
  [[noreturn]] void wrong_type(std::string_view key, const char* expected) const;

  std::string file_;
  std::string text_;
  nlohmann::json json_;
};

}  // namespace orrery::models::detail
