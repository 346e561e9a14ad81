// `orrery bench`: microbenchmarks of this machine's CPU and Gloo collectives with libtorch (see
// executor/include/orrery/executor/microbench.hpp), printed against the `local` cluster's peaks
// and, with --out, written as a measured trace for `orrery calibrate`. Built only with the
// executor (ORRERY_HAVE_EXECUTOR); otherwise `bench` is still listed and explains why it
// cannot run.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "orrery/base/error.hpp"
#include "text.hpp"

#ifdef ORRERY_HAVE_EXECUTOR
#include "orrery/base/units.hpp"
#include "orrery/executor/blas_kernels.hpp"
#include "orrery/executor/microbench.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/traces/spec_io.hpp"
#include "output.hpp"
#include "table.hpp"
#endif

namespace orrery::cli {
namespace {

#ifdef ORRERY_HAVE_EXECUTOR

struct BenchArgs {
  std::string out_file;
  bool json = false;
  bool quick = false;
  bool force = false;
  int64_t ranks = 2;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? " x " : "") + std::to_string(shape[i]);
  return s;
}

std::string op_class_name(pb::OpClass c) {
  return enum_value_name(*pb::OpClass_descriptor()->FindValueByNumber(c));
}

struct Machine {
  pb::ClusterSpec cluster;
  pb::DeviceSpec device;
  std::string blas;
  std::string blas_kernels;   // openblas_get_corename(): the kernels the GEMMs ran on
  std::string blas_coretype;  // OPENBLAS_CORETYPE, and who set it
};

// The CPU cores of this machine as `orrery topo show local` describes them.
Machine local_machine(int64_t ranks) {
  Machine m;
  m.cluster = topologies::preset("local");
  const std::string& name = m.cluster.node_types(0).device();
  m.device = topologies::find_device(m.cluster, name);
  m.blas = executor::blas_description();
  m.blas_kernels = executor::blas_corename();
  m.blas_coretype = executor::blas_coretype_note();
  if (m.device.kind() != pb::DEVICE_KIND_CPU) {
    throw base::EnvironmentError(
        "orrery bench measures CPU cores with libtorch, but this machine's `local` cluster is "
        "its " +
        name + " GPUs");
  }
  const int64_t cores = topologies::total_devices(m.cluster);
  if (ranks > cores) {
    throw base::InputError("", 0, "--ranks",
                           "got " + std::to_string(ranks) + ", this machine has " +
                               std::to_string(cores) +
                               " cores (the devices of `local`); one rank per core");
  }
  return m;
}

void print_json(const executor::BenchResults& r, const Machine& m) {
  const double peak = m.device.peak_flops().fp32(), bw = m.device.memory_bandwidth_bytes_per_s();
  nlohmann::ordered_json compute = nlohmann::ordered_json::array();
  for (const auto& op : r.compute) {
    const double bytes = op.bytes_read + op.bytes_written;
    compute.push_back({{"name", op.name},
                       {"op", op.op},
                       {"op_class", op_class_name(op.op_class)},
                       {"shape", op.shape},
                       {"flops", op.flops},
                       {"bytes", bytes},
                       {"seconds", op.seconds},
                       {"flops_per_s", op.flops / op.seconds},
                       {"peak_fraction", op.flops / op.seconds / peak},
                       {"bytes_per_s", bytes / op.seconds},
                       {"bandwidth_fraction", bytes / op.seconds / bw}});
  }
  nlohmann::ordered_json collectives = nlohmann::ordered_json::array();
  for (const auto& c : r.collectives) {
    collectives.push_back(
        {{"name", c.name},
         {"collective",
          enum_value_name(*pb::CollectiveKind_descriptor()->FindValueByNumber(c.collective))},
         {"algorithm", c.algorithm},
         {"ranks", c.ranks},
         {"bytes", c.bytes},
         {"seconds", c.seconds},
         {"algbw_bytes_per_s", c.algbw()},
         {"busbw_bytes_per_s", c.busbw()}});
  }
  nlohmann::ordered_json j{{"device", m.device.name()},
                           {"blas", m.blas},
                           {"blas_kernels", m.blas_kernels},
                           {"openblas_coretype", m.blas_coretype},
                           {"peak_fp32_flops_per_s", peak},
                           {"memory_bandwidth_bytes_per_s", bw},
                           {"compute", compute},
                           {"collectives", collectives}};
  std::cout << with_header("orrery.bench", j).dump(2) << "\n";
}

void print_tables(const executor::BenchResults& r, const Machine& m) {
  const double peak = m.device.peak_flops().fp32(), bw = m.device.memory_bandwidth_bytes_per_s();
  std::cout << render_fields(
                   {{"device", m.device.name() + " (one core, one intra-op thread)"},
                    {"blas", m.blas},
                    {"blas kernels", m.blas_kernels.empty() ? "(not OpenBLAS)" : m.blas_kernels},
                    {"OPENBLAS_CORETYPE", m.blas_coretype},
                    {"peak fp32", base::units::flop_rate(peak)},
                    {"memory bandwidth",
                     base::units::bandwidth(bw) + " (measured by `topo discover`)"}})
            << "\n";
  Table gemm({"gemm m x n x k", "time", "FLOP/s", "of peak", "bytes/s"});
  Table attention({"attention op", "shape", "time", "FLOP/s", "of peak"});
  Table memory({"memory-bound op", "shape", "bytes", "time", "bytes/s", "of bandwidth"});
  for (const auto& op : r.compute) {
    const double rate = op.flops / op.seconds, bytes = op.bytes_read + op.bytes_written;
    if (op.op == "gemm") {
      gemm.add_row({shape_text(op.shape), base::units::seconds(op.seconds),
                    base::units::flop_rate(rate), percent(rate / peak),
                    base::units::bandwidth(bytes / op.seconds)});
    } else if (op.op.rfind("attn.", 0) == 0) {
      attention.add_row({op.op, shape_text(op.shape), base::units::seconds(op.seconds),
                         base::units::flop_rate(rate), percent(rate / peak)});
    } else {
      memory.add_row({op.op, shape_text(op.shape), base::units::bytes(bytes),
                      base::units::seconds(op.seconds), base::units::bandwidth(bytes / op.seconds),
                      percent(bytes / op.seconds / bw)});
    }
  }
  std::cout << gemm.render() << "\n" << attention.render() << "\n" << memory.render();
  if (!r.collectives.empty()) {
    Table coll({"collective", "ranks", "size", "time", "algbw", "busbw", "algorithm"});
    for (const auto& c : r.collectives) {
      coll.add_row(
          {enum_value_name(*pb::CollectiveKind_descriptor()->FindValueByNumber(c.collective)),
           std::to_string(c.ranks), base::units::bytes(c.bytes), base::units::seconds(c.seconds),
           base::units::bandwidth(c.algbw()), base::units::bandwidth(c.busbw()), c.algorithm});
    }
    std::cout << "\n" << coll.render();
  }
}

void bench(const BenchArgs& a) {
  // Refuse before minutes of measuring, not after.
  if (!a.out_file.empty() && !a.force && std::filesystem::exists(a.out_file)) {
    throw base::InputError(a.out_file, 0, "",
                           "refusing to overwrite an existing file (use --force)");
  }
  // OpenBLAS reads OPENBLAS_CORETYPE only when it loads: get this CPU's kernels by running again.
  executor::reexec_with_blas_kernels();
  const Machine m = local_machine(a.ranks);
  executor::BenchOptions options;
  options.quick = a.quick;
  options.max_ranks = a.ranks;
  if (a.quick) options.repetitions = 3;
  options.progress = [](const std::string& line) { std::cerr << "bench: " << line << "\n"; };
  executor::BenchResults results;
  results.compute = executor::bench_compute(options);
  results.collectives = executor::bench_collectives(options);
  if (!a.out_file.empty()) {
    const pb::ExecGraph trace = executor::bench_trace(results, m.cluster, m.device.name(), m.blas);
    const bool json = std::filesystem::path(a.out_file).extension() == ".json";
    write_file_atomically(a.out_file, json ? to_json(trace) : to_yaml(trace), a.force);
    std::cerr << "wrote " << a.out_file << " (a measured trace: orrery calibrate --traces "
              << a.out_file << ")\n";
  }
  if (a.json) {
    print_json(results, m);
  } else {
    print_tables(results, m);
  }
}

#endif  // ORRERY_HAVE_EXECUTOR

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("bench",
                                     "Measure this machine's CPU (GEMM, attention, memory-bound "
                                     "ops) and Gloo collectives with libtorch");
#ifdef ORRERY_HAVE_EXECUTOR
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("--out", a->out_file,
                  "Write the measurements as a measured trace (ExecGraph; .json or YAML)");
  cmd->add_flag("--json", a->json, "Print JSON for scripts");
  cmd->add_flag("--quick", a->quick, "A few shapes and sizes (seconds, for tests)");
  cmd->add_flag("--force", a->force, "Replace --out if it exists");
  cmd->add_option("--ranks", a->ranks,
                  "Largest collective group (one rank per core; 1: no collectives)")
      ->check(CLI::PositiveNumber);
  cmd->callback([a] { bench(*a); });
#else
  cmd->allow_extras();
  cmd->callback([] {
    throw base::EnvironmentError(
        "orrery bench: this orrery was built without the executor (libtorch was not found at build "
        "time)");
  });
#endif
}

}  // namespace orrery::cli
