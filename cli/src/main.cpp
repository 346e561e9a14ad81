// The `orrery` command. Exit codes: 0 success, 2 bad input (the user's mistake: a bad file,
// flag or name), 3 the environment failed (unreadable file, missing tool), 70 a bug in orrery.
//
// Built twice (cli/CMakeLists.txt): as the `orrery` front, with every command, and as the helper
// orrery-run (ORRERY_RUN_HELPER_MAIN), with only `run` and `bench`, the commands that load
// libtorch. The front executes the helper for those two (ORRERY_RUN_IN_HELPER), so that every
// other command starts without libtorch (docs/architecture.md, "Executables").
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "number_flags.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/helper_programs.hpp"

namespace {

constexpr int kExitInput = 2;
constexpr int kExitEnvironment = 3;
constexpr int kExitBug = 70;

#if !defined(ORRERY_HAVE_SIMULATOR) && !defined(ORRERY_RUN_HELPER_MAIN)
// An executor-only build (ORRERY_SIMULATOR=OFF, for a GPU node without SimGrid and Ceres) still
// lists the simulator's commands, so that a script calling one learns why it cannot run.
void add_left_out_command(CLI::App& app, const std::string& name, const std::string& description) {
  CLI::App* cmd = app.add_subcommand(name, description + " (not in this build)");
  cmd->allow_extras();
  cmd->callback([name] {
    throw orrery::base::EnvironmentError(
        "orrery " + name +
        ": this orrery was built without the simulator (ORRERY_SIMULATOR=OFF); "
        "use a build with SimGrid and Ceres, for example on the traces this one wrote");
  });
}
#endif

#ifdef ORRERY_RUN_IN_HELPER
// `orrery run ...` and `orrery bench ...` become `orrery-run run ...`: the same arguments, and
// argv[0] kept, so the helper's messages and usage lines read as the front's.
void exec_run_helper(char** argv) {
  const std::string path = orrery::base::find_helper("orrery-run");
  ::execv(path.c_str(), argv);
  throw orrery::base::EnvironmentError("cannot execute " + path + ": " + std::strerror(errno));
}
#endif

void add_commands(CLI::App& app) {
#ifdef ORRERY_RUN_HELPER_MAIN
  orrery::cli::add_run_command(app);
  orrery::cli::add_bench_command(app);
#else
  orrery::cli::add_model_commands(app);
  orrery::cli::add_topo_commands(app);
#ifdef ORRERY_HAVE_SIMULATOR
  orrery::cli::add_plan_command(app);
  orrery::cli::add_simulate_command(app);
  orrery::cli::add_sweep_command(app);
  orrery::cli::add_goodput_command(app);
#else
  add_left_out_command(app, "plan", orrery::cli::kPlanHelp);
  add_left_out_command(app, "simulate", orrery::cli::kSimulateHelp);
  add_left_out_command(app, "sweep", orrery::cli::kSweepHelp);
  add_left_out_command(app, "goodput", orrery::cli::kGoodputHelp);
#endif
  orrery::cli::add_run_command(app);
#ifdef ORRERY_HAVE_SIMULATOR
  orrery::cli::add_validate_command(app);
#else
  add_left_out_command(app, "validate", orrery::cli::kValidateHelp);
#endif
  orrery::cli::add_bench_command(app);
#ifdef ORRERY_HAVE_SIMULATOR
  orrery::cli::add_calibrate_command(app);
#else
  add_left_out_command(app, "calibrate", orrery::cli::kCalibrateHelp);
#endif
#endif  // ORRERY_RUN_HELPER_MAIN
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "orrery: predict, plan and run large-model training on GPU clusters.\n"
      "Model and cluster arguments take a preset name or a YAML/JSON file."};
  app.name("orrery");
  app.require_subcommand(1);
  app.set_version_flag("--version", "orrery 0.1.0");
  // Every error starts with "error: ", CLI11's own (an unknown flag, a missing value) included.
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    return "error: " + CLI::FailureMessage::simple(failed, e);
  });
  add_commands(app);
  orrery::cli::refuse_empty_values(app);
  try {
#ifdef ORRERY_RUN_IN_HELPER
    if (argc > 1 && (std::string(argv[1]) == "run" || std::string(argv[1]) == "bench"))
      exec_run_helper(argv);
#endif
    app.parse(argc, argv);
    return 0;
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitInput;
  } catch (const orrery::base::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitInput;
  } catch (const orrery::base::EnvironmentError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitEnvironment;
  } catch (const orrery::base::InternalError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitBug;
  } catch (const std::exception& e) {
    std::cerr << "internal error (a bug in orrery, please report it): " << e.what() << "\n";
    return kExitBug;
  }
}
