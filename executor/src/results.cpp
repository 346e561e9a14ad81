#include "orrery/executor/results.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "orrery/base/error.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::executor {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::EnvironmentError("cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::string step_file(const std::string& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%06lld.json", static_cast<long long>(step));
  return (std::filesystem::path(dir) / name).string();
}

std::string trace_rank_file(const std::string& dir, int64_t rank) {
  return (std::filesystem::path(dir) / ("trace.rank" + std::to_string(rank) + ".json")).string();
}

void write_step_result(const std::string& dir, const StepResult& r) {
  const nlohmann::json j = {
      {"step", r.step}, {"loss", r.loss}, {"grad_norm", r.grad_norm}, {"seconds", r.seconds}};
  // Through the one atomic writer: a registered temporary (removed on a signal, named and removed
  // by the next run after a SIGKILL), fsync, rename.
  write_file_atomically(step_file(dir, r.step), j.dump(2) + "\n", true);
}

StepResult read_step_result(const std::string& path) {
  const auto j = nlohmann::json::parse(read_all(path));
  StepResult r;
  r.step = j.at("step").get<int64_t>();
  r.loss = j.at("loss").get<double>();
  r.grad_norm = j.at("grad_norm").get<double>();
  r.seconds = j.at("seconds").get<double>();
  return r;
}

std::string params_file(const std::string& dir) {
  return (std::filesystem::path(dir) / "params.bin").string();
}

void write_parameters(const std::string& path, const std::vector<NamedArray>& arrays) {
  std::string bytes = "orrery-params 1\n";
  for (const auto& a : arrays) {
    bytes += a.name + " " + std::to_string(a.shape.size());
    for (int64_t d : a.shape) bytes += " " + std::to_string(d);
    bytes += "\n";
    bytes.append(reinterpret_cast<const char*>(a.values.data()), a.values.size() * sizeof(double));
  }
  write_file_atomically(path, bytes, true);
}

std::vector<NamedArray> read_parameters(const std::string& path) {
  std::istringstream in(read_all(path));
  std::string header;
  std::getline(in, header);
  if (header != "orrery-params 1")
    throw base::EnvironmentError(path + ": not an orrery parameter file");
  std::vector<NamedArray> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    NamedArray a;
    size_t rank = 0;
    fields >> a.name >> rank;
    int64_t numel = 1;
    for (size_t i = 0; i < rank; ++i) {
      int64_t d = 0;
      fields >> d;
      a.shape.push_back(d);
      numel *= d;
    }
    if (!fields) throw base::EnvironmentError(path + ": bad array header '" + line + "'");
    a.values.resize(static_cast<size_t>(numel));
    in.read(reinterpret_cast<char*>(a.values.data()),
            numel * static_cast<std::streamsize>(sizeof(double)));
    if (!in) throw base::EnvironmentError(path + ": truncated array " + a.name);
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace orrery::executor
