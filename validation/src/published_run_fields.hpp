// The fields of a published run (validate --runs) that are read against a documented vocabulary
// (docs/formats.md#published-runs): precision, model and architecture, MoE block, attention kernel,
// pipeline layout. A value orrery cannot read throws InputError naming the file, the field path
// and the reason; validate_runs turns it into a skipped case and goes on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"

namespace orrery::validation::detail {

// One object of a case, with the path that error messages name (`cases[3].model`).
class CaseReader {
 public:
  CaseReader(const nlohmann::json& j, std::string file, std::string path)
      : j_(j), file_(std::move(file)), path_(std::move(path)) {}

  bool has(const std::string& key) const;  // present and not null
  const nlohmann::json& at(const std::string& key) const;
  CaseReader child(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  // Optional positive integer: null or absent is `fallback`.
  int64_t integer_or(const std::string& key, int64_t fallback) const;
  // Optional integer >= 0: null or absent is `fallback`.
  int64_t count_or(const std::string& key, int64_t fallback) const;
  // Optional measured number: null or absent is 0; else a finite number > 0 and at most `max`,
  // `why` saying why the bound (docs/formats.md#published-runs).
  double measure_or(const std::string& key, double max, const char* why) const;
  // Optional boolean: null or absent is `fallback`.
  bool flag_or(const std::string& key, bool fallback) const;
  std::string text(const std::string& key) const;          // "" when absent or null
  void only(const std::vector<std::string>& known) const;  // fails on any other key
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  [[noreturn]] void fail(const std::string& key, const std::string& reason) const;

 private:
  const nlohmann::json& j_;
  std::string file_, path_;
};

std::string lowercase(std::string s);
bool contains(const std::string& text, const char* word);

// `precision`: fp8 (any recipe) > bf16 > fp16 > fp32/tf32, by the first of these the text names.
pb::Precision precision_of(const CaseReader& run);

// The fp8 recipe of an fp8 run: `fp8_recipe` when given (delayed, current or tensorwise,
// blockwise, mxfp8, rowwise; anything else fails naming the field), else the recipe the precision
// text names (mxfp8; blockwise, block or deepseek; delayed; current or tensorwise; rowwise), else
// UNSPECIFIED
// (the plan then takes Transformer Engine's default, and says so).
pb::Fp8Recipe fp8_recipe_of(const CaseReader& run);

// `parallel.moe_dispatcher`: alltoall (Megatron-core's NCCL all-to-all dispatcher) or deepep
// (its flex dispatcher with DeepEP); anything else fails naming the field.
pb::MoeDispatcher moe_dispatcher_of(const CaseReader& parallel);
// `optimizer_state_dtype` (fp32 | bf16: Adam's moments, bf16 under Megatron-core's
// precision-aware optimizer), as Plan.optimizer_state_dtype.
pb::OptimizerStateDtype optimizer_state_dtype_of(const CaseReader& run);

// `recompute`, by its leading word, into `plan`'s recompute fields: none (also no, off, false,
// disabled); full (whole layers; "N of M layers" with N < M is refused: a partial count is not
// modelled); selective: with "op" or "per op" among its words torchtitan's op-level policy
// (selective_op); with "layer" torchtitan's layer-level policy, which needs its frequency stated
// ("every 2nd", "every 2": full with recompute_every); with Megatron-core's "--recompute-modules:"
// the modules listed (core_attn; layernorm or norm; moe_act or act; the others refused, not
// modelled); else Megatron's attention-core recomputation. "not stated" is read as none and said
// in `assumed`. Anything else fails naming the field.
void read_recompute(const CaseReader& run, pb::Plan& plan, std::string& assumed);

// The sequence length: `model.seq_len`, else `batch.seq_len`.
int64_t seq_len_of(const CaseReader& run);

// `model`: a preset name, or an object whose `preset` (or `key`) names a preset, or an inline
// model with explicit architecture fields and an optional `moe` block. `label` says which.
pb::ModelSpec model_of(const CaseReader& run, std::string& label);

// `attention_kernel` when given, else what the framework's name and date say.
pb::AttentionKernel attention_kernel_of(const CaseReader& run);

// `parallel.pipeline_layout`: layers per virtual stage, as a list or as {first, last}; nothing
// when absent (the even split).
void read_pipeline_layout(const CaseReader& parallel, int64_t layers, pb::Plan& plan);

}  // namespace orrery::validation::detail
