// One rank's part of a training run: builds its process groups from the plan's placement, its
// shard of the model, and trains `config.steps` steps (forward, backward, bucketed gradient
// all-reduce over DP, clipping by global norm, AdamW) on the tokens of `data`: a corpus file
// (token_corpus.hpp), or with none synthetic tokens from `config.seed`.
// Every rank prints "step N loss L grad_norm G time T s" per step on standard output (rank 0's
// lines are the job's; the launcher also takes them as heartbeats). Rank 0 writes the step files
// and, when asked, the gathered parameters under config.out_dir.
#pragma once

#include <ostream>
#include <vector>

#include "orrery/executor/checkpoint.hpp"
#include "orrery/executor/rank_env.hpp"
#include "orrery/executor/token_corpus.hpp"
#include "orrery/executor/train_config.hpp"

namespace orrery::executor {

// With `checkpoint` (checkpoint.hpp) it first loads the newest checkpoint under resume_dir and
// trains from the step after it, and saves one after every `every` steps.
// Throws InputError when unsupported_reason(config) is not empty, EnvironmentError when a peer
// fails or a collective times out (config.timeout_s); InputError too when the corpus or the
// checkpoint is refused.
std::vector<StepResult> train_rank(const TrainConfig& config, const RankEnv& env, std::ostream& out,
                                   const TokenSource& data = {},
                                   const CheckpointOptions& checkpoint = {});

}  // namespace orrery::executor
