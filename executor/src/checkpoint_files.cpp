#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "orrery/base/error.hpp"
#include "orrery/base/temp_files.hpp"
#include "orrery/executor/checkpoint.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::executor {
namespace {

constexpr const char* kFormat = "orrery-checkpoint 1";

std::string read_bytes(const std::filesystem::path& file, const std::string& field) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw base::InputError(file.string(), 0, field, "cannot be read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t positive(int64_t v) { return v > 0 ? v : 1; }

// The run's own settings that decide its numbers besides the model and the plan.
std::string run_settings(const TrainConfig& c, const std::string& data_file) {
  std::ostringstream s;
  s.precision(17);
  s << "seed " << c.seed << " lr " << c.learning_rate << " betas " << c.beta1 << " " << c.beta2
    << " eps " << c.adam_eps << " weight_decay " << c.weight_decay << " clip " << c.clip_grad_norm
    << " data " << (data_file.empty() ? "synthetic" : data_file);
  return s.str();
}

nlohmann::json to_json(const Manifest& m) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& s : m.shards) {
    shards.push_back(
        {{"rank", s.rank}, {"file", s.file}, {"bytes", s.bytes}, {"checksum", s.checksum}});
  }
  return {{"format", kFormat},
          {"step", m.step},
          {"world_size", m.world_size},
          {"layout", m.layout},
          {"model_digest", m.model_digest},
          {"plan_digest", m.plan_digest},
          {"run_digest", m.run_digest},
          {"shards", shards}};
}

Manifest from_json(const nlohmann::json& j) {
  Manifest m;
  m.step = j.at("step").get<int64_t>();
  m.world_size = j.at("world_size").get<int64_t>();
  m.layout = j.at("layout").get<std::string>();
  m.model_digest = j.at("model_digest").get<std::string>();
  m.plan_digest = j.at("plan_digest").get<std::string>();
  m.run_digest = j.at("run_digest").get<std::string>();
  for (const auto& s : j.at("shards")) {
    m.shards.push_back({s.at("rank").get<int64_t>(), s.at("file").get<std::string>(),
                        s.at("bytes").get<uint64_t>(), s.at("checksum").get<std::string>()});
  }
  return m;
}

}  // namespace

std::string checksum(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::filesystem::path checkpoint_folder(const std::string& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%06lld", static_cast<long long>(step));
  return std::filesystem::path(dir) / name;
}

std::string shard_file_name(int64_t rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank%05lld.pt", static_cast<long long>(rank));
  return name;
}

std::filesystem::path manifest_file(const std::filesystem::path& folder) {
  return folder / "manifest.json";
}

Manifest manifest_for(const TrainConfig& config, const std::string& data_file, int64_t world_size,
                      int64_t step) {
  const auto& p = config.plan.parallel();
  Manifest m;
  m.step = step;
  m.world_size = world_size;
  m.layout = "tp " + std::to_string(positive(p.tp())) + " cp " + std::to_string(positive(p.cp())) +
             " dp " + std::to_string(positive(p.dp())) + " pp " + std::to_string(positive(p.pp())) +
             " ep " + std::to_string(positive(p.ep())) + " sharding " +
             (config.plan.sharding() == pb::SHARDING_UNSPECIFIED
                  ? std::string("none")
                  : enum_value_name(
                        *pb::Sharding_descriptor()->FindValueByNumber(config.plan.sharding())));
  m.model_digest = checksum(orrery::to_json(config.model));
  m.plan_digest = checksum(orrery::to_json(config.plan));
  m.run_digest = checksum(run_settings(config, data_file));
  return m;
}

void write_manifest(const std::filesystem::path& folder, const Manifest& manifest) {
  base::write_file_durably(manifest_file(folder), to_json(manifest).dump(2) + "\n");
}

Manifest read_manifest(const std::filesystem::path& file) {
  const std::string text = read_bytes(file, "");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw base::InputError(file.string(), 0, "", std::string("is not JSON: ") + e.what());
  }
  if (!j.is_object() || j.value("format", "") != kFormat) {
    throw base::InputError(file.string(), 0, "format",
                           std::string("is not \"") + kFormat + "\": not an orrery checkpoint");
  }
  try {
    return from_json(j);
  } catch (const nlohmann::json::exception& e) {
    throw base::InputError(file.string(), 0, "", std::string("malformed: ") + e.what());
  }
}

void check_steps_left(const Manifest& found, int64_t steps, const std::filesystem::path& file) {
  if (found.step < steps) return;
  throw base::InputError(file.string(), 0, "step",
                         std::to_string(found.step) +
                             ": the checkpoint already holds every step of "
                             "--steps " +
                             std::to_string(steps) +
                             ", nothing left to train (a larger --steps continues it)");
}

void check_same_run(const Manifest& found, const Manifest& expected,
                    const std::filesystem::path& file) {
  const auto refuse = [&](const std::string& field, const std::string& what) {
    throw base::InputError(file.string(), 0, field,
                           "the checkpoint was written for another " + what +
                               " (checkpoint: " + found.layout + "; this run: " + expected.layout +
                               "): it cannot continue this run");
  };
  if (found.model_digest != expected.model_digest) refuse("model_digest", "model");
  if (found.plan_digest != expected.plan_digest) refuse("plan_digest", "plan");
  if (found.world_size != expected.world_size) refuse("world_size", "number of ranks");
  if (found.run_digest != expected.run_digest) {
    refuse("run_digest", "seed, data or optimizer setting (--seed, --data, --lr, ...)");
  }
  if (static_cast<int64_t>(found.shards.size()) != found.world_size)
    throw base::InputError(file.string(), 0, "shards", "does not list one shard per rank");
}

std::string read_shard(const std::filesystem::path& folder, const Manifest& manifest,
                       int64_t rank) {
  const ShardEntry& e = manifest.shards.at(static_cast<size_t>(rank));
  const auto path = folder / e.file;
  const std::string bytes = read_bytes(path, "shards[" + std::to_string(rank) + "]");
  if (bytes.size() != e.bytes) {
    throw base::InputError(path.string(), 0, "bytes",
                           "is " + std::to_string(bytes.size()) + " bytes, the manifest says " +
                               std::to_string(e.bytes) + ": the shard is damaged");
  }
  if (checksum(bytes) != e.checksum) {
    throw base::InputError(path.string(), 0, "checksum",
                           "differs from the manifest's: the shard is damaged");
  }
  return bytes;
}

void verify_checkpoint(const std::filesystem::path& folder, const Manifest& manifest) {
  for (size_t r = 0; r < manifest.shards.size(); ++r) {
    read_shard(folder, manifest, static_cast<int64_t>(r));
  }
}

std::optional<std::filesystem::path> newest_checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::optional<fs::path> best;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) != 0 || !fs::exists(manifest_file(entry.path()))) continue;
    if (!best || name > best->filename().string()) best = entry.path();
  }
  return best;
}

FailureInjection parse_failure_injection(const std::string& text) {
  FailureInjection f;
  std::istringstream in(text);
  std::string item;
  const auto refuse = [&](const std::string& why) {
    throw base::InputError("", 0, "--inject-failure", "'" + text + "': " + why);
  };
  while (std::getline(in, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) refuse("expected rank=R,step=S[,at=step|save]");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "at") {
      if (value != "step" && value != "save") refuse("at is step or save");
      f.during_save = value == "save";
      continue;
    }
    if (key != "rank" && key != "step") refuse("unknown key '" + key + "'");
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos ||
        value.size() > 12)
      refuse(key + " is not a non-negative integer");
    (key == "rank" ? f.rank : f.step) = std::stoll(value);
  }
  if (f.rank < 0 || f.step < 1) refuse("needs rank=R and step=S (S >= 1)");
  return f;
}

bool injection_armed(const FailureInjection& injection, int64_t rank, int64_t step) {
  if (injection.rank != rank || injection.step != step) return false;
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return restarts == nullptr || std::string(restarts) == "0";
}

}  // namespace orrery::executor
