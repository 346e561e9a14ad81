// Each `orrery <group>` registers its subcommands on the app; the handlers run after parsing.
#pragma once

#include <CLI/CLI.hpp>

namespace orrery::cli {

// The one-line help of the simulator's commands, shared with the executor-only build, which
// lists them as left out (main.cpp).
inline constexpr const char* kPlanHelp = "Find and rank the fastest plans for a job on a cluster";
inline constexpr const char* kSimulateHelp =
    "Predict a plan's step time, throughput, MFU and memory";
inline constexpr const char* kValidateHelp =
    "Compare predictions with measured runs or collective tables";
inline constexpr const char* kSweepHelp =
    "Simulate a job over one or two varied axes (nodes, device, network speed, batch...)";
inline constexpr const char* kGoodputHelp =
    "Predict a run's goodput: failures, checkpoints, restarts and tokens per day";
inline constexpr const char* kCalibrateHelp =
    "Fit the simulator's compute and collective cost parameters to measured traces";

void add_model_commands(CLI::App& app);
void add_topo_commands(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_goodput_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_validate_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);

}  // namespace orrery::cli
