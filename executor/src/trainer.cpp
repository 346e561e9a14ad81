#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "keep_freed_memory.hpp"
#include "loss_scaler.hpp"
#include "measured_trace.hpp"
#include "mixed_precision.hpp"
#include "model.hpp"
#include "op_checkpoint.hpp"
#include "op_trace.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/filesystem_type.hpp"
#include "orrery/base/temp_files.hpp"
#include "orrery/executor/checkpoint.hpp"
#include "orrery/executor/results.hpp"
#include "orrery/executor/token_corpus.hpp"
#include "orrery/executor/trainer.hpp"
#include "orrery/plan/rank_layout.hpp"
#include "orrery/traces/spec_io.hpp"
#include "parallel_sharding.hpp"
#include "pipeline.hpp"
#include "recompute.hpp"
#include "run_device.hpp"

namespace orrery::executor {
namespace {

// Learnable synthetic tokens for step `step`, the same on every rank: each sequence counts up from
// a random start by a random stride in [1, 8] modulo the vocabulary. [global_batch, seq + 1].
torch::Tensor synthetic_batch(uint64_t seed, int64_t step, int64_t batch, int64_t seq,
                              int64_t vocab) {
  auto gen = at::detail::createCPUGenerator(seed * 1000003ULL + static_cast<uint64_t>(step));
  auto start = torch::randint(vocab, {batch, 1}, gen, torch::kInt64);
  auto stride = torch::randint(1, 9, {batch, 1}, gen, torch::kInt64);
  return (start + stride * torch::arange(seq + 1, torch::kInt64)).remainder(vocab);
}

// Rows [first, first + rows) of step `step`'s global batch read from the corpus
// (token_corpus.hpp): [rows, seq + 1]. Only this rank's rows are read.
torch::Tensor corpus_rows(const TokenCorpus& corpus, int64_t step, int64_t global_batch,
                          int64_t first, int64_t rows, int64_t seq) {
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(rows * (seq + 1)));
  for (int64_t r = first; r < first + rows; ++r) corpus.append_row(step, r, global_batch, ids);
  return torch::tensor(ids, torch::kInt64).view({rows, seq + 1});
}

// Test hook, ORRERY_FAULT_INJECT="rank:step:exit|hang|error": at the start of that step, that rank
// exits with status 17, stops making progress, or fails as a libtorch op does (a c10::Error; see
// docs/executor.md).
void maybe_inject_fault(int64_t rank, int64_t step) {
  const char* spec = std::getenv("ORRERY_FAULT_INJECT");
  if (spec == nullptr) return;
  long long r = -1, s = -1;
  char kind[16] = {0};
  if (std::sscanf(spec, "%lld:%lld:%15s", &r, &s, kind) != 3 || r != rank || s != step) return;
  std::cerr << "fault injected: rank " << rank << " " << kind << " at step " << step << std::endl;
  if (std::string(kind) == "hang") {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  TORCH_CHECK(std::string(kind) != "error", "fault injected: an op failed");
  std::_Exit(17);
}

// The torch device of a RunDevice (run_device.hpp).
c10::Device torch_device(const RunDevice& d) {
  return d.cuda ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(d.index))
                : c10::Device(c10::DeviceType::CPU);
}

struct Run {
  const TrainConfig& c;
  const RankEnv& env;
  c10::Device device;  // every tensor of the step lives here; NCCL groups when it is a GPU
  RankGroups groups;
  Transformer model;
  DataParallelOptimizer
      optimizer;  // DP gradient reduction, clipping, AdamW (parallel_sharding.hpp)
  int64_t dp_size, micro_batches;
  PipelineStage pipe;
  std::vector<std::map<std::string, OpTiming>> timings;  // per step, when tracing
  std::vector<double> untimed;                  // per step, when tracing (OpTrace::untimed_s)
  std::unique_ptr<TokenCorpus> corpus;          // --data; null: synthetic tokens
  std::vector<pb::CheckpointIo> checkpoint_io;  // this rank's saves and resume, timed
  std::optional<LossScaler> scaler;             // fp16 only (loss_scaler.hpp)

  Run(const TrainConfig& config, const RankEnv& e, const plan::RankLayout& grid,
      const RunDevice& run_device)
      : c(config),
        env(e),
        device(torch_device(run_device)),
        groups(make_groups(e, grid, config.timeout_s, config.model.tied_embeddings(),
                           run_device.cuda ? GroupBackend::kNccl : GroupBackend::kGloo)),
        model(config.model, groups.tp, grid.degrees().tp, groups.coord.tp, config.seed,
              stage_layers_of(layers_per_stage(config.plan, config.model), grid.degrees().pp,
                              groups.coord.pp),
              config.plan.parallel().sequence_parallel(),
              ExpertParallel{groups.ep, grid.degrees().ep, groups.ep_index}, device),
        optimizer(model, groups, config, grid.degrees().ep),
        dp_size(grid.degrees().dp),
        micro_batches(config.plan.job().global_batch_size() /
                      (dp_size * config.plan.micro_batch_size())) {
    pipe.pp = groups.pp;
    pipe.stage = groups.coord.pp;
    pipe.stages = grid.degrees().pp;
    pipe.chunks = grid.degrees().vp;
    // A stage's hidden states hold this CP rank's tokens (seq / cp), split over TP under SP.
    const int64_t seq = config.plan.job().seq_len() / grid.degrees().cp /
                        (config.plan.parallel().sequence_parallel() ? grid.degrees().tp : 1);
    pipe.activation_shape = {config.plan.micro_batch_size(), seq, config.model.hidden_size()};
    pipe.wire_dtype = bf16() ? torch::kBFloat16 : autocast_fp16() ? torch::kHalf : torch::kFloat32;
    if (fp16()) scaler.emplace(config.loss_scaling);
    pipe.device = device;
    // flash, flash_2 and flash_3 all run libtorch's fused SDPA here: the generation only changes
    // how the simulator prices the kernel, the executor runs whichever fused kernel libtorch picks.
    model.set_materialized_attention(config.plan.attention_kernel() ==
                                     pb::ATTENTION_KERNEL_MATERIALIZED);
    model.set_per_expert_nodes(config.plan.moe_expert_gemm() == pb::MOE_EXPERT_GEMM_PER_EXPERT);
    if (config.plan.has_moe_capacity_factor()) {
      model.set_moe_capacity(
          {config.plan.moe_capacity_factor(), config.plan.moe_pad_to_capacity()});
    }
    model.set_context_parallel(groups.cp, config.plan.job().seq_len());
    set_recompute_mode(config.plan);  // recompute.hpp
  }

  // This rank's rows of step n's global batch, [rows, seq + 1], drawn or read on the CPU (the same
  // tokens whatever the device).
  torch::Tensor rank_rows(int64_t n, int64_t rows) const {
    const int64_t global = c.plan.job().global_batch_size(), seq = c.plan.job().seq_len();
    const int64_t first = groups.coord.dp * rows;
    if (corpus) return corpus_rows(*corpus, n, global, first, rows, seq);
    return synthetic_batch(c.seed, n, global, seq, c.model.vocab_size()).narrow(0, first, rows);
  }

  bool bf16() const { return c.plan.job().precision() == pb::PRECISION_BF16; }
  bool fp16() const { return c.plan.job().precision() == pb::PRECISION_FP16; }
  // fp16 GEMMs under autocast on a GPU; a CPU's libtorch 1.13 has neither fp16 GEMM kernels nor
  // fp16 CPU autocast, so there an fp16 plan computes in fp32 (with the loss scaling all the same).
  bool autocast_fp16() const { return fp16() && device.is_cuda(); }

  StepResult step(int64_t n) {
    if (OpTrace* t = current_trace()) t->begin_step();
    const auto start = std::chrono::steady_clock::now();
    const int64_t mbs = c.plan.micro_batch_size(), local = mbs * micro_batches;
    const auto mine = rank_rows(n, local).to(device);
    optimizer.zero_grad();
    auto forward = [&](int64_t m, int64_t chunk, const torch::Tensor& hidden) {
      const AutocastScope autocast(bf16() || autocast_fp16(), device.type(),
                                   bf16() ? at::kBFloat16 : at::kHalf);  // mixed_precision.hpp
      auto out = model.forward(mine.narrow(0, m * mbs, mbs), hidden, chunk);
      return pipe.ends_model(chunk) ? out / static_cast<double>(micro_batches) : out;
    };
    if (scaler) pipe.loss_scale = scaler->scale();
    // The last stage's summed loss, zero on the others (fp64, on the device).
    auto loss = run_pipeline(pipe, micro_batches, c.plan.parallel().schedule(), forward);
    // Every output op-level checkpointing kept was taken back by its layer's re-run.
    ORRERY_CHECK(kept_outputs_pending() == 0,
                 std::to_string(kept_outputs_pending()) +
                     " kept outputs were never re-used by the step's backward pass");
    StepResult r;
    r.step = n;
    // Megatron's finalize-gradients all-reduces (SP norms over TP, tied embeddings over the first
    // and last stage), the gradient reduction over DP (buckets; ZeRO reduce-scatters; FSDP's ran
    // in backward), the MoE experts' over the expert-data-parallel group, clipping and AdamW, all
    // timed under the lowering's names (parallel_sharding.hpp).
    const auto norm =
        optimizer.step(scaler ? std::optional<double>(scaler->scale()) : std::nullopt);
    r.grad_norm = norm.value_or(std::numeric_limits<double>::quiet_NaN());
    if (scaler) {
      r.loss_scale = scaler->scale();
      r.skipped = !norm;
      scaler->update(r.skipped);
    }
    if (OpTrace* t = current_trace()) {
      timings.push_back(t->end_step());
      untimed.push_back(t->untimed_s());
    }
    // Reading the loss back waits for the step's last kernels on a GPU, so the step's wall time
    // below is the GPU's too.
    all_reduce_sum(groups.pp, loss);
    // The mean over every replica's tokens (under CP the dp group holds the dp x cp ranks, each
    // with its own share of every sequence's tokens).
    all_reduce_sum(groups.dp, loss);
    r.loss = loss.item<double>() / static_cast<double>(groups.dp ? groups.dp->getSize() : 1);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }

  // This rank's shard of a checkpoint (checkpoint.hpp), in libtorch's archive format.
  std::string shard_bytes() const {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    if (scaler) archive.write("loss_scaler", scaler->state());
    std::ostringstream bytes;
    archive.save_to(bytes);
    return bytes.str();
  }

  void load_shard(const std::string& bytes) {
    std::istringstream in(bytes);
    torch::serialize::InputArchive archive;
    archive.load_from(in, device);
    optimizer.load(archive);
    if (scaler) {
      torch::Tensor state;
      archive.read("loss_scaler", state);
      scaler->load_state(state);
    }
  }

  // Full parameters, written by rank 0: TP shards gathered (every TP rank takes part), other
  // stages' parameters sent to stage 0 over the PP group, one at a time in model order.
  void save_parameters() {
    optimizer.gather_parameters();  // FSDP: the full parameters back in the model
    std::vector<NamedArray> arrays;
    const auto& all = model.all_parameters();
    for (size_t i = 0; i < all.size(); ++i) {
      const int64_t owner =
          pipeline_rank_of(layers_per_stage(c.plan, c.model), pipe.stages, all[i].layer);
      torch::Tensor full;
      if (const ShardedParam* p = model.find(all[i].name)) full = gather_full(*p, groups.tp);
      // A routed expert lives on one rank of the EP group.
      if (all[i].expert >= 0 && pipe.stage == owner) {
        full = share_expert_tensor(full, all[i].full_shape, groups.ep,
                                   torch::dtype(torch::kFloat32).device(device));
      }
      if (groups.pp && owner != 0 && pipe.stage == owner) {
        std::vector<torch::Tensor> buf{full.contiguous()};
        groups.pp->send(buf, 0, static_cast<int>(i))->wait();
      } else if (groups.pp && owner != 0 && pipe.stage == 0) {
        std::vector<torch::Tensor> buf{
            torch::empty(all[i].full_shape, torch::dtype(torch::kFloat32).device(device))};
        groups.pp->recv(buf, static_cast<int>(owner), static_cast<int>(i))->wait();
        full = buf[0];
      }
      if (pipe.stage != 0) continue;
      full = full.to(torch::dtype(torch::kFloat64).device(torch::kCPU))
                 .contiguous();  // read on the host
      NamedArray a;
      a.name = all[i].name;
      a.shape = full.sizes().vec();
      a.values.assign(full.data_ptr<double>(), full.data_ptr<double>() + full.numel());
      arrays.push_back(std::move(a));
    }
    if (env.rank == 0) write_parameters(params_file(c.out_dir), arrays);
  }
};

// Installs `trace` as the process's current trace for the lifetime of the guard.
struct TraceGuard {
  explicit TraceGuard(OpTrace* trace) { set_current_trace(trace); }
  ~TraceGuard() { set_current_trace(nullptr); }
  TraceGuard(const TraceGuard&) = delete;
  TraceGuard& operator=(const TraceGuard&) = delete;
};

// What a rank needs to save and resume checkpoints (checkpoint.hpp).
struct Checkpointing {
  const TrainConfig& config;
  const RankEnv& env;
  const CheckpointOptions& options;
  const std::string& data_file;
};

// --inject-failure ...,at=save: half of this rank's shard written to its temporary, then the rank
// dies as a SIGKILL would leave it (the temporary stays behind, no manifest is written).
[[noreturn]] void die_while_writing(const std::filesystem::path& file, const std::string& bytes,
                                    int64_t rank, int64_t step) {
  std::ofstream(base::temp_path_for(file), std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2))
      .flush();
  std::cerr << "failure injected: rank " << rank << " exits while saving the checkpoint of step "
            << step << std::endl;
  std::_Exit(17);
}

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// One save or load of this rank's shard for the measured trace (exec_graph.proto CheckpointIo).
pb::CheckpointIo timed_io(pb::CheckpointOp op, int64_t step, size_t bytes,
                          const std::filesystem::path& folder, double host_s, double file_s) {
  pb::CheckpointIo io;
  io.set_op(op);
  io.set_step(step);
  io.set_bytes(static_cast<double>(bytes));
  io.set_host_s(host_s);
  io.set_file_s(file_s);
  io.set_filesystem(base::filesystem_type(folder));
  return io;
}

// This rank's shard of the checkpoint after `step`, durably; then, once every rank's is on disk
// (the all-reduce of their sizes and checksums says so), rank 0's manifest, which makes the
// checkpoint complete. Returns this rank's seconds.
double save_checkpoint(const Checkpointing& k, Run& run, int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  const auto folder = checkpoint_folder(k.options.dir, step);
  std::filesystem::create_directories(folder);
  const std::string bytes = run.shard_bytes();
  const auto serialized = std::chrono::steady_clock::now();
  const auto file = folder / shard_file_name(k.env.rank);
  if (k.options.inject.during_save && injection_armed(k.options.inject, k.env.rank, step))
    die_while_writing(file, bytes, k.env.rank, step);
  base::write_file_durably(file, bytes);
  run.checkpoint_io.push_back(timed_io(pb::CHECKPOINT_OP_SAVE, step, bytes.size(), folder,
                                       seconds_between(start, serialized),
                                       seconds_between(serialized, Clock::now())));
  const std::string sum = checksum(bytes);
  auto table = torch::zeros({k.env.world_size, 2}, torch::kInt64);
  table[k.env.rank][0] = static_cast<int64_t>(bytes.size());
  table[k.env.rank][1] = static_cast<int64_t>(std::stoull(sum, nullptr, 16));
  all_reduce_sum(run.groups.world, table);
  if (k.env.rank == 0) {
    Manifest m = manifest_for(k.config, k.data_file, k.env.world_size, step);
    for (int64_t r = 0; r < k.env.world_size; ++r) {
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx",
                    static_cast<unsigned long long>(table[r][1].item<int64_t>()));
      m.shards.push_back(
          {r, shard_file_name(r), static_cast<uint64_t>(table[r][0].item<int64_t>()), hex});
    }
    write_manifest(folder, m);
  }
  return seconds_between(start, Clock::now());
}

// Loads this rank's shard of the newest checkpoint under --resume, after checking that it was
// written for this model, plan and run; returns the step it holds (0 without --resume).
int64_t resume_checkpoint(const Checkpointing& k, Run& run) {
  if (k.options.resume_dir.empty()) return 0;
  const auto start = Clock::now();
  const auto folder = newest_checkpoint(k.options.resume_dir);
  if (!folder) {
    throw base::InputError(k.options.resume_dir, 0, "--resume",
                           "holds no complete checkpoint (step_NNNNNN/manifest.json)");
  }
  const Manifest m = read_manifest(manifest_file(*folder));
  check_same_run(m, manifest_for(k.config, k.data_file, k.env.world_size, m.step),
                 manifest_file(*folder));
  check_steps_left(m, k.config.steps, manifest_file(*folder));
  // The shard was written (and fsynced) by an earlier process, maybe minutes ago on this machine:
  // read from the page cache, the load would time memory instead of the checkpoint's storage.
  base::drop_cached_pages(*folder / shard_file_name(k.env.rank));
  const auto reading = Clock::now();
  const std::string bytes = read_shard(*folder, m, k.env.rank);
  const auto read = Clock::now();
  run.load_shard(bytes);
  const double seconds = seconds_between(start, Clock::now());
  run.checkpoint_io.push_back(timed_io(pb::CHECKPOINT_OP_LOAD, m.step, bytes.size(), *folder,
                                       seconds_between(read, Clock::now()),
                                       seconds_between(reading, read)));
  if (k.env.rank == 0) {
    std::cerr << "resumed from " << folder->string() << " (step " << m.step << ") in " << seconds
              << " s" << std::endl;
  }
  return m.step;
}

// The rank's measured graph, written for the launcher to merge. A mismatch with the predicted
// graph is a bug in the executor or the lowering, never the user's: InternalError.
void write_rank_trace(const TrainConfig& c, const RankEnv& env, const Run& run,
                      const std::vector<StepResult>& results) {
  const auto& timings = run.timings;
  const auto& untimed = run.untimed;
  pb::RankGraph measured = *c.trace_graph;
  for (const auto& io : run.checkpoint_io) *measured.add_checkpoint_io() = io;
  std::vector<double> seconds;
  for (const auto& r : results) seconds.push_back(r.seconds);
  if (const auto problems = fill_measured(measured, timings, untimed, seconds); !problems.empty()) {
    throw base::InternalError(
        "rank " + std::to_string(env.rank) +
        ": the executor and the simulator's lowering disagree about the plan's ops:\n" + problems);
  }
  write_file_atomically(trace_rank_file(c.out_dir, env.rank), to_json(measured), true);
}

// A failure in communication: Gloo's errors (std::runtime_error: gloo::IoException for a closed
// connection or a timeout), and the store's during setup (step 0, the rendezvous).
std::string step_failed(const RankEnv& env, int64_t step, const TrainConfig& c,
                        const std::string& why) {
  return "rank " + std::to_string(env.rank) + ": step " + std::to_string(step) +
         " failed (a peer died, or a collective waited longer than " +
         std::to_string(static_cast<int>(c.timeout_s)) + " s): " + why;
}

// Any other libtorch error in a step (c10::Error: an op refused its inputs, or memory ran out):
// the rank's own failure, which says nothing about its peers.
std::string op_failed(const RankEnv& env, int64_t step, const std::string& why) {
  return "rank " + std::to_string(env.rank) + ": step " + std::to_string(step) +
         " failed in libtorch: " + why;
}

// A loss or gradient norm that is no longer a number: training diverged (a learning rate far
// too large), and no later step can recover.
std::string diverged(const RankEnv& env, const StepResult& r) {
  std::ostringstream why;
  why << "rank " << env.rank << ": step " << r.step << ": the loss is " << r.loss
      << " and the gradient norm " << r.grad_norm
      << ": training diverged (a smaller --lr, or --clip-grad, keeps it finite); stopped before "
      << "writing step " << r.step;
  return why.str();
}

}  // namespace

std::vector<StepResult> train_rank(const TrainConfig& config, const RankEnv& env, std::ostream& out,
                                   const TokenSource& data, const CheckpointOptions& checkpoint) {
  if (auto why = unsupported_reason(config); !why.empty())
    throw base::InputError("", 0, "plan", why);
  const plan::RankLayout grid = plan::layout_of(config.plan);
  // One `local` device is one core (topologies/, `orrery topo show local`), so a rank computes on
  // one intra-op thread unless OMP_NUM_THREADS says otherwise, alone or not: the simulator then
  // predicts the machine that really ran.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) torch::set_num_threads(1);
  if (!config.out_dir.empty()) std::filesystem::create_directories(config.out_dir);
  // The cluster's devices say where the rank trains (run_device.hpp has the rule).
  const RunDevice device = select_run_device(device_request(config.device_kind), env.local_rank);
  // On the CPU, freed tensors stay in the heap, as the CUDA caching allocator keeps them on a GPU
  // (keep_freed_memory.hpp): the simulator charges ops, not the allocator's page faults.
  std::optional<detail::KeepFreedMemory> keep_freed;
  if (!device.cuda) keep_freed.emplace();
  OpTrace trace(make_step_clock(device));
  const bool tracing = config.trace_graph.has_value() && !config.out_dir.empty();
  TraceGuard guard(tracing ? &trace : nullptr);
  std::vector<StepResult> results;
  int64_t step = 0;
  try {
    Run run(config, env, grid, device);
    if (!data.file.empty()) {
      run.corpus = std::make_unique<TokenCorpus>(
          data.file, data.dtype.value(), config.model.vocab_size(), config.plan.job().seq_len());
    }
    const Checkpointing k{config, env, checkpoint, data.file};
    for (step = resume_checkpoint(k, run) + 1; step <= config.steps; ++step) {
      maybe_inject_fault(env.rank, step);
      if (!checkpoint.inject.during_save && injection_armed(checkpoint.inject, env.rank, step)) {
        std::cerr << "failure injected: rank " << env.rank << " exits at step " << step
                  << std::endl;
        std::_Exit(17);
      }
      const StepResult r = run.step(step);
      // Both are all-reduced, so every rank stops at the same step, and nothing of this step is
      // written: the step files before it stay a consistent record of the run.
      if (!std::isfinite(r.loss) || (!r.skipped && !std::isfinite(r.grad_norm)))
        throw base::InputError("", 0, "", diverged(env, r));
      results.push_back(r);
      std::ostringstream line;
      line.precision(6);
      line << "step " << r.step << " loss " << std::fixed << r.loss << " grad_norm " << r.grad_norm;
      if (r.loss_scale > 0)
        line << " loss_scale " << std::defaultfloat << r.loss_scale << std::fixed
             << (r.skipped ? " skipped (inf/nan gradients)" : "");
      line << " time " << std::setprecision(3) << r.seconds << " s";
      out << line.str() << std::endl;
      if (!config.out_dir.empty() && env.rank == 0) write_step_result(config.out_dir, r);
      if (checkpoint.every > 0 && step % checkpoint.every == 0) {
        const double seconds = save_checkpoint(k, run, step);
        if (env.rank == 0)
          std::cerr << "checkpoint after step " << step << " saved in " << seconds << " s"
                    << std::endl;
      }
    }
    set_current_trace(nullptr);  // what follows is not part of a step
    if (tracing) write_rank_trace(config, env, run, results);
    if (config.save_parameters && !config.out_dir.empty()) run.save_parameters();
    if (run.groups.world) run.groups.world->barrier()->wait();
  } catch (const c10::Error& e) {
    if (step == 0)
      throw base::EnvironmentError(step_failed(env, step, config, e.what_without_backtrace()));
    throw base::EnvironmentError(op_failed(env, step, e.what_without_backtrace()));
  } catch (const base::InputError&) {
    throw;
  } catch (const base::EnvironmentError&) {
    throw;
  } catch (const base::InternalError&) {
    throw;
  } catch (const std::runtime_error& e) {  // Gloo's own errors (gloo::IoException)
    throw base::EnvironmentError(step_failed(env, step, config, e.what()));
  }
  return results;
}

}  // namespace orrery::executor
