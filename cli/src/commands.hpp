// Each `orrery <group>` registers its subcommands on the app; the handlers run after parsing.
#pragma once

#include <CLI/CLI.hpp>

namespace orrery::cli {

void add_model_commands(CLI::App& app);
void add_topo_commands(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_validate_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);

}  // namespace orrery::cli
