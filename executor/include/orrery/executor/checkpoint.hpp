// Checkpoints of a training run (docs/executor.md, "Checkpoints"), and the files they are made
// of. Torch-free: the CLI finds and checks checkpoints before it starts any rank.
//
// <dir>/step_NNNNNN/ holds one checkpoint: rank<R>.pt per rank (its own shard: the parameters it
// holds, the tensors AdamW updates and AdamW's state, in libtorch's archive format) and
// manifest.json, written by rank 0 after every shard is on disk. Each file is written durably
// (base::write_file_durably: a temporary, fsync, rename), so a folder either has a manifest whose
// shards are all complete, or it is a save that never finished and is never used.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "orrery/executor/train_config.hpp"

namespace orrery::executor {

// --inject-failure rank=R,step=S[,at=step|save], for tests: rank R exits abnormally (status 17)
// at the start of step S (at=step), or halfway through writing its shard of the checkpoint after
// step S (at=save). Only in a job's first attempt (TORCHELASTIC_RESTART_COUNT unset or 0): a
// restarted job runs past it, as it would past a transient fault.
struct FailureInjection {
  int64_t rank = -1, step = -1;  // -1: none
  bool during_save = false;
};
FailureInjection parse_failure_injection(const std::string& text);
// Whether the injection applies to this process (see above).
bool injection_armed(const FailureInjection& injection, int64_t rank, int64_t step);

struct CheckpointOptions {
  int64_t every = 0;        // a checkpoint after every `every` steps; 0: none
  std::string dir;          // where they are written (needed with every > 0)
  std::string resume_dir;   // continue from its newest checkpoint; empty: start at step 1
  FailureInjection inject;  // tests
};

struct ShardEntry {
  int64_t rank = 0;
  std::string file;  // relative to the checkpoint's folder
  uint64_t bytes = 0;
  std::string checksum;  // checksum() of its bytes
};

// What manifest.json says. The digests identify the model, the plan and the run's settings (seed,
// data, optimizer) the shards were written for; a run of anything else refuses them.
struct Manifest {
  int64_t step = 0;  // the last step the checkpoint includes; training continues at step + 1
  int64_t world_size = 0;
  std::string layout;  // "tp 1 cp 1 dp 2 pp 1 ep 1 sharding none": for the messages
  std::string model_digest, plan_digest, run_digest;
  std::vector<ShardEntry> shards;  // one per rank, in rank order
};

// 16 hex digits of FNV-1a 64 over `bytes`: catches a torn or altered shard, not an adversary.
std::string checksum(std::string_view bytes);

std::filesystem::path checkpoint_folder(const std::string& dir, int64_t step);
std::string shard_file_name(int64_t rank);
std::filesystem::path manifest_file(const std::filesystem::path& folder);

// The manifest a run of `config` on `world_size` ranks writes after `step`, shards left empty.
Manifest manifest_for(const TrainConfig& config, const std::string& data_file, int64_t world_size,
                      int64_t step);

void write_manifest(const std::filesystem::path& folder, const Manifest& manifest);
// InputError (the manifest, the field, the reason) when it does not read as a manifest.
Manifest read_manifest(const std::filesystem::path& file);

// InputError naming the manifest and the field when `found` was written for another model, plan,
// run settings or world size than `expected`.
void check_same_run(const Manifest& found, const Manifest& expected,
                    const std::filesystem::path& file);

// InputError naming the manifest's `step` when the checkpoint already holds all of `steps`
// (--steps): a resumed run would train nothing.
void check_steps_left(const Manifest& found, int64_t steps, const std::filesystem::path& file);

// The bytes of `rank`'s shard, checked against the manifest (size and checksum): InputError
// naming the shard and the field otherwise.
std::string read_shard(const std::filesystem::path& folder, const Manifest& manifest, int64_t rank);
// Every shard present, of its size and checksum (InputError otherwise).
void verify_checkpoint(const std::filesystem::path& folder, const Manifest& manifest);

// The folder of the newest checkpoint under `dir` that has a manifest (a save that never finished
// has none and is skipped); nullopt when there is none.
std::optional<std::filesystem::path> newest_checkpoint(const std::string& dir);

}  // namespace orrery::executor
