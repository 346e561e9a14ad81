// What a run leaves on disk: one JSON file per step (written atomically: a temporary file, then
// rename), and optionally the trained parameters, full (TP shards gathered), in a small binary
// format that needs no libtorch to read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orrery/executor/train_config.hpp"

namespace orrery::executor {

// <dir>/step_000001.json: {"step":1,"loss":...,"grad_norm":...,"seconds":...}, fp16 runs adding
// "loss_scale" and "skipped" (a skipped step's grad_norm is null).
std::string step_file(const std::string& dir, int64_t step);
void write_step_result(const std::string& dir, const StepResult& result);
StepResult read_step_result(const std::string& path);

// <dir>/trace.rank<N>.json: one rank's measured RankGraph (merged into trace.json by the
// launching `orrery run`).
std::string trace_rank_file(const std::string& dir, int64_t rank);

struct NamedArray {
  std::string name;  // "layers.0.attn.qkv.q_weight", ...
  std::vector<int64_t> shape;
  std::vector<double> values;
};

// <dir>/params.bin: "orrery-params 1\n", then per array a line "name rank d0 d1 ...\n" followed
// by the values as little-endian float64.
std::string params_file(const std::string& dir);
void write_parameters(const std::string& path, const std::vector<NamedArray>& arrays);
std::vector<NamedArray> read_parameters(const std::string& path);

}  // namespace orrery::executor
