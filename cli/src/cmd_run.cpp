// `orrery run`: train a plan for real with libtorch (CPU, Gloo). Without RANK/WORLD_SIZE (or
// mpirun's OMPI_COMM_WORLD_RANK/SIZE) in the environment it launches tp x cp x dp x pp local ranks
// (re-running this command line in each) and prints rank 0's loss per step; with them
// (torchrun-style, under mpirun, or as one of the launched ranks) it is one rank of the job.
// Built only when the executor is (ORRERY_HAVE_EXECUTOR); otherwise `run` is still listed and
// explains why it cannot run.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "orrery/base/error.hpp"

#ifdef ORRERY_HAVE_EXECUTOR
#include "host_memory_guard.hpp"
#include "number_flags.hpp"
#include "orrery/executor/blas_kernels.hpp"
#include "orrery/executor/checkpoint.hpp"
#include "orrery/executor/launcher.hpp"
#include "orrery/executor/rank_env.hpp"
#include "orrery/executor/token_corpus.hpp"
#include "orrery/executor/trainer.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/traces/spec_io.hpp"
#include "plan_args.hpp"
#include "run_trace.hpp"
#endif

namespace orrery::cli {
namespace {

#ifdef ORRERY_HAVE_EXECUTOR

// A collective's timeout beyond a day waits on a dead peer for longer than anyone watches; far
// larger ones overflow the time arithmetic of Gloo's deadlines.
constexpr double kMaxTimeoutS = 86400;

struct RunArgs {
  PlanArgs plan;
  executor::TrainConfig train;
  executor::CheckpointOptions checkpoint;
  std::string inject_failure;  // --inject-failure, parsed into checkpoint.inject
  int64_t max_restarts = 0;
  std::string data_file, data_dtype;       // --data, --data-dtype
  std::optional<std::string> host_memory;  // --host-memory
  bool force = false;
  std::optional<double> loss_scale;          // --loss-scale
  std::optional<int64_t> loss_scale_growth;  // --loss-scale-growth-interval
};

// fp16's loss scaling: plans have no field for it, so its flags are its only source (their
// absence keeps GradScaler's defaults, printed with the run); refused on other precisions.
void apply_loss_scaling(const RunArgs& a, executor::TrainConfig& config) {
  if (!a.loss_scale && !a.loss_scale_growth) return;
  if (config.plan.job().precision() != pb::PRECISION_FP16) {
    throw base::InputError(
        "", 0, a.loss_scale ? "--loss-scale" : "--loss-scale-growth-interval",
        "loss scaling applies to job.precision fp16 only; this run's precision is " +
            enum_value_name(
                *pb::Precision_descriptor()->FindValueByNumber(config.plan.job().precision())));
  }
  if (a.loss_scale) config.loss_scaling.init_scale = *a.loss_scale;
  if (a.loss_scale_growth) config.loss_scaling.growth_interval = *a.loss_scale_growth;
}

// The loss scaling an fp16 run trains with, every value stated (empty for other precisions).
std::string loss_scaling_line(const executor::TrainConfig& config) {
  if (config.plan.job().precision() != pb::PRECISION_FP16) return "";
  const auto& s = config.loss_scaling;
  std::ostringstream line;
  line << "orrery run: fp16 dynamic loss scaling: initial scale " << s.init_scale << ", x"
       << s.growth_factor << " after " << s.growth_interval << " steps without inf/nan, x"
       << s.backoff_factor
       << " and the step skipped on inf/nan (torch.cuda.amp.GradScaler's rule; on a CPU the "
          "GEMMs run in fp32)\n";
  return line.str();
}

// --data: the whole corpus checked once, before any rank starts (ranks check the rows they read).
void check_corpus(const executor::TokenSource& data, const executor::TrainConfig& config) {
  if (data.file.empty()) return;
  executor::TokenCorpus(data.file, data.dtype.value(), config.model.vocab_size(),
                        config.plan.job().seq_len())
      .validate_all();
}

// `orrery run` on this machine starts one rank per device of the plan, so the cluster the
// simulator lowers for the trace is this machine with that many cores: fewer than it has when the
// plan is smaller, more (oversubscribed, said on stderr) when it is larger.
void fit_local_cluster(LoadedJob& job) {
  if (job.plan.cluster() != "local" || job.cluster.node_types_size() != 1 ||
      job.cluster.node_groups_size() != 1 || job.cluster.node_groups(0).count() != 1) {
    return;
  }
  const auto& p = job.plan.parallel();
  const int64_t world = std::max<int64_t>(p.tp(), 1) * std::max<int64_t>(p.cp(), 1) *
                        std::max<int64_t>(p.dp(), 1) * std::max<int64_t>(p.pp(), 1);
  auto* node = job.cluster.mutable_node_types(0);
  if (world > node->devices_per_node() && executor::rank_env_from_environment() == std::nullopt) {
    std::cerr << "orrery run: " << world << " ranks on " << node->devices_per_node()
              << " cores: oversubscribed, the measured times will not be representative\n";
  }
  node->set_devices_per_node(world);
}

// The local launcher starts every rank on this machine, so it takes a cluster that is one machine:
// `local`, or a cluster file or preset of one node (a GPU box described by hand, say).
bool one_node(const pb::ClusterSpec& cluster) {
  int64_t nodes = 0;
  for (const auto& g : cluster.node_groups()) nodes += g.count();
  return nodes == 1;
}

// What the ranks train on (TrainConfig::device_kind): the kind of the cluster's devices.
pb::DeviceKind cluster_device_kind(const pb::ClusterSpec& cluster) {
  pb::DeviceKind kind = pb::DEVICE_KIND_UNSPECIFIED;
  for (const auto& node : cluster.node_types()) {
    const pb::DeviceSpec* d = topologies::lookup_device(cluster, node.device());
    if (d == nullptr) continue;
    if (kind != pb::DEVICE_KIND_UNSPECIFIED && d->kind() != kind)
      throw base::InputError("", 0, "--cluster",
                             "mixes CPU and GPU devices; orrery run trains every rank on one kind");
    kind = d->kind();
  }
  return kind;
}

// The plan as it will train, every filled-in value included, so nothing unstated is silent.
std::string run_shape(const LoadedJob& job) {
  const auto& p = job.plan;
  const auto d = plan::degrees_of(p.parallel());
  std::string s = "tp" + std::to_string(d.tp) + " pp" + std::to_string(d.pp) + " dp" +
                  std::to_string(d.dp) + (d.cp > 1 ? " cp" + std::to_string(d.cp) : "") +
                  (d.ep > 1 ? " ep" + std::to_string(d.ep) : "") + ", micro-batch " +
                  std::to_string(p.micro_batch_size()) + ", global batch " +
                  std::to_string(p.job().global_batch_size());
  if (job.global_batch_filled) s += " (not stated: dp x micro-batch x pp)";
  return s + ", seq " + std::to_string(p.job().seq_len()) + ", " +
         enum_value_name(*pb::Precision_descriptor()->FindValueByNumber(p.job().precision()));
}

// What a checkpoint of this run's manifest must say (executor/checkpoint.hpp), step aside.
struct ExpectedRun {
  const executor::TrainConfig& config;
  const std::string& data_file;
  int64_t world_size;
};

// The step the ranks start at: 1, or the one after the newest checkpoint under `resume_dir`,
// refused (manifest, field, reason) before any rank starts when it is of another run.
int64_t first_step(const std::string& resume_dir, const ExpectedRun& run) {
  if (resume_dir.empty()) return 1;
  const auto folder = executor::newest_checkpoint(resume_dir);
  if (!folder) {
    throw base::InputError(resume_dir, 0, "--resume",
                           "holds no complete checkpoint (step_NNNNNN/manifest.json)");
  }
  const auto file = executor::manifest_file(*folder);
  const executor::Manifest m = executor::read_manifest(file);
  executor::check_same_run(
      m, executor::manifest_for(run.config, run.data_file, run.world_size, m.step), file);
  executor::check_steps_left(m, run.config.steps, file);
  return m.step + 1;
}

// New checkpoints go into a folder of their own, or continue the run whose checkpoints it holds:
// a save must never meet another run's manifest of the same step.
void check_checkpoint_dir(const executor::CheckpointOptions& k) {
  if (k.dir.empty() || k.dir == k.resume_dir) return;
  if (const auto newest = executor::newest_checkpoint(k.dir)) {
    throw base::InputError("", 0, "--checkpoint-dir",
                           k.dir + " already holds checkpoints (newest: " + newest->string() +
                               "): continue them with --resume " + k.dir +
                               ", or choose another directory");
  }
}

// The command line of a restarted attempt: the first one's, resuming from `resume_dir` instead of
// any --resume it had (none when empty: the job starts over at step 1).
std::vector<std::string> restart_command_line(std::vector<std::string> argv,
                                              const std::string& resume_dir) {
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--resume") {
      ++i;
      continue;
    }
    if (argv[i].rfind("--resume=", 0) == 0) continue;
    out.push_back(argv[i]);
  }
  if (!resume_dir.empty()) {
    out.push_back("--resume");
    out.push_back(resume_dir);
  }
  return out;
}

// Launches the ranks; when one dies, the whole job again from the newest checkpoint under
// --checkpoint-dir, up to --max-restarts times, as torchrun's elastic agent does (each attempt's
// ranks see TORCHELASTIC_RESTART_COUNT). Returns the step the last attempt started at.
int64_t launch_with_restarts(const RunArgs& a, const ExpectedRun& run,
                             executor::LaunchOptions launch) {
  int64_t start = first_step(a.checkpoint.resume_dir, run);
  for (int64_t attempt = 0;; ++attempt) {
    ::setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(attempt).c_str(), 1);
    try {
      executor::launch_local(launch);
      return start;
    } catch (const base::EnvironmentError& e) {
      if (attempt >= a.max_restarts) throw;
      const auto folder = executor::newest_checkpoint(a.checkpoint.dir);
      start = folder ? first_step(a.checkpoint.dir, run) : 1;
      std::cerr << "orrery run: " << e.what() << "\norrery run: restart " << attempt + 1 << " of "
                << a.max_restarts << ", from "
                << (folder ? folder->string() : std::string("step 1 (no checkpoint yet)"))
                << std::endl;
      launch.argv = restart_command_line(launch.argv, folder ? a.checkpoint.dir : "");
    }
  }
}

void run(RunArgs& a) {
  // A rank started by torchrun or mpirun (the local launcher's get it from the launcher): OpenBLAS
  // reads OPENBLAS_CORETYPE only when it loads, so get this CPU's kernels by running again.
  if (executor::rank_env_from_environment()) executor::reexec_with_blas_kernels();
  LoadedJob job = load_job(a.plan);
  fit_local_cluster(job);
  executor::TrainConfig config = a.train;
  config.model = job.model;
  config.plan = job.plan;
  config.device_kind = cluster_device_kind(job.cluster);
  apply_loss_scaling(a, config);
  const executor::TokenSource data{a.data_file, executor::parse_token_dtype(a.data_dtype)};
  if (const auto why = executor::unsupported_reason(config); !why.empty()) {
    throw base::InputError(a.plan.plan_file, 0, "plan", why);
  }
  if (const auto env = executor::rank_env_from_environment()) {
    // Every op is timed under the simulator's node names (run_trace.hpp).
    if (!config.out_dir.empty()) config.trace_graph = predicted_rank_graph(job, env->rank);
    // mpirun passes every rank's standard output through unprefixed: rank 0 speaks for the job
    // (the local launcher and torchrun keep their own per-rank streams).
    std::ostream quiet(nullptr);
    const bool speak = env->source != executor::RankEnv::Source::kOpenMpi || env->rank == 0;
    executor::train_rank(config, *env, speak ? std::cout : quiet, data, a.checkpoint);
    return;
  }
  if (!one_node(job.cluster)) {
    throw base::InputError("", 0, "--cluster",
                           "orrery run launches ranks only on this machine (--cluster local, or a "
                           "cluster of one node); "
                           "for '" +
                               job.plan.cluster() +
                               "' start one `orrery run` per rank with RANK, WORLD_SIZE, "
                               "MASTER_ADDR and MASTER_PORT set "
                               "(torchrun-style), or under mpirun");
  }
  if (!config.out_dir.empty() && std::filesystem::exists(config.out_dir) &&
      !std::filesystem::is_empty(config.out_dir) && !a.force) {
    throw base::InputError(
        "", 0, "--out",
        config.out_dir + " exists and is not empty (pass --force to write into it)");
  }
  check_checkpoint_dir(a.checkpoint);
  check_corpus(data, config);
  if (config.device_kind == pb::DEVICE_KIND_CPU)
    check_host_memory(job, host_memory_limit(a.host_memory));
  // Lowered once here too, so a plan the simulator cannot lower fails before any rank starts.
  if (!config.out_dir.empty()) predicted_rank_graph(job, 0);
  const auto& p = job.plan.parallel();
  executor::LaunchOptions launch;
  launch.argv = executor::own_command_line();
  launch.world_size = plan::degrees_of(p).world_size();
  launch.timeout_s = config.timeout_s;
  std::cerr << "orrery run: " << launch.world_size << " local rank(s), model " << job.model.name()
            << ", " << config.steps << " step(s)"
            << (config.out_dir.empty() ? "" : ", results in " + config.out_dir) << "\n"
            << "orrery run: " << run_shape(job) << "\n"
            << loss_scaling_line(config);
  int64_t first = 1;
  try {
    first = launch_with_restarts(a, ExpectedRun{config, a.data_file, launch.world_size}, launch);
  } catch (const executor::Interrupted& e) {
    std::cerr << "orrery run: " << e.what() << std::endl;
    std::exit(128 + e.signal());  // what a shell expects of an interrupted program
  }
  if (!config.out_dir.empty()) {
    const auto trace = merge_run_trace(job, config.out_dir, first, config.steps);
    std::cerr << "orrery run: measured " << trace.ranks_size() << " rank(s) x "
              << (trace.ranks_size() > 0 ? trace.ranks(0).nodes_size() : 0) << " ops; wrote "
              << config.out_dir << "/trace.json and " << config.out_dir
              << "/timeline.json (open in ui.perfetto.dev)\n";
    std::cout << throughput_line(job, trace, first) << std::endl;
  }
}

void add_checkpoint_flags(CLI::App* cmd, RunArgs& a) {
  auto& k = a.checkpoint;
  auto* every = cmd->add_option("--checkpoint-every", k.every,
                                "Save a checkpoint after every N steps (docs/executor.md)")
                    ->check(CLI::PositiveNumber);
  auto* dir = cmd->add_option("--checkpoint-dir", k.dir,
                              "Directory of the checkpoints: step_NNNNNN/ with one shard per rank "
                              "and a manifest");
  every->needs(dir);
  dir->needs(every);
  cmd->add_option("--resume", k.resume_dir,
                  "Continue from the newest complete checkpoint in this directory");
  cmd->add_option("--max-restarts", a.max_restarts,
                  "Restart the job from the newest checkpoint when a rank dies, up to K times")
      ->check(CLI::NonNegativeNumber)
      ->needs(dir);
  cmd->add_option("--inject-failure", a.inject_failure,
                  "For tests: rank=R,step=S[,at=step|save] exits abnormally at the start of step "
                  "S or while saving its checkpoint (first attempt only)");
}

#endif  // ORRERY_HAVE_EXECUTOR

}  // namespace

void add_run_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Train a plan for real (libtorch, Gloo process groups) and print the loss of every step");
#ifdef ORRERY_HAVE_EXECUTOR
  auto a = std::make_shared<RunArgs>();
  add_plan_flags(cmd, a->plan);
  a->plan.global_batch_fills_pipeline = true;
  cmd->get_option("--global-batch")
      ->description(
          "Sequences per step (default: the plan's job.global_batch_size, else one micro-batch "
          "per pipeline stage and replica, dp x micro-batch x pp)");
  cmd->get_option("--precision")
      ->description(
          "fp32 | bf16 | fp16 (default: the plan's job.precision, else bf16 on GPUs, fp32 on "
          "CPUs)");
  auto& t = a->train;
  cmd->add_option("--steps", t.steps, "Optimizer steps")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", t.seed, "Seed of the initial weights and of the synthetic tokens");
  auto* data = cmd->add_option("--data", a->data_file,
                               "Pre-tokenized corpus: a flat file of little-endian token ids, "
                               "memory-mapped (docs/formats.md; default: synthetic tokens)");
  auto* dtype = cmd->add_option("--data-dtype", a->data_dtype,
                                "Token width of --data: uint16 | uint32 (no default)")
                    ->check(CLI::IsMember({"uint16", "uint32"}));
  data->needs(dtype);
  dtype->needs(data);
  cmd->add_option("--out", t.out_dir,
                  "Directory for step_NNNNNN.json, the measured trace (trace.json) and its "
                  "Perfetto timeline (timeline.json); params.bin with --save-params");
  cmd->add_flag("--save-params", t.save_parameters,
                "Write the trained parameters (TP shards gathered) to --out");
  cmd->add_flag("--force", a->force, "Write into an --out directory that is not empty");
  cmd->add_option("--lr", t.learning_rate, "AdamW learning rate")->check(finite_positive());
  cmd->add_option("--weight-decay", t.weight_decay, "AdamW weight decay")
      ->check(finite_non_negative());
  cmd->add_option("--clip-grad", t.clip_grad_norm, "Clip gradients to this global L2 norm (0: off)")
      ->check(finite_non_negative());
  cmd->add_option("--loss-scale", a->loss_scale,
                  "fp16: the initial loss scale (default 65536, torch.cuda.amp.GradScaler's)")
      ->check(finite_positive());
  cmd->add_option("--loss-scale-growth-interval", a->loss_scale_growth,
                  "fp16: steps without inf/nan gradients before the loss scale doubles (default "
                  "2000, GradScaler's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--host-memory", a->host_memory,
                  "Host memory the local ranks may use together, e.g. '64 GiB' (default: what "
                  "/proc/meminfo calls available); a CPU plan the memory model puts above it is "
                  "refused before any rank starts");
  cmd->add_option("--timeout", t.timeout_s,
                  "Seconds a collective may wait, and a rank may stay silent, before the job fails")
      ->check(finite_positive() & CLI::Range(0.0, kMaxTimeoutS));
  add_checkpoint_flags(cmd, *a);
  cmd->callback([a] {
    if (!a->inject_failure.empty())
      a->checkpoint.inject = executor::parse_failure_injection(a->inject_failure);
    run(*a);
  });
#else
  cmd->allow_extras();
  cmd->callback([] {
    throw base::EnvironmentError(
        "orrery run: this orrery was built without the executor (libtorch was not found at build "
        "time)");
  });
#endif
}

}  // namespace orrery::cli
