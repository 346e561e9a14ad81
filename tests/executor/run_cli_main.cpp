// A stand-in `orrery` with only the `run` command (cli/src/cmd_run.cpp), so the command is tested
// end to end before and independently of its registration in cli/src/main.cpp. Same exit codes:
// 2 bad input, 3 environment failure, 70 bug.
#include <iostream>

#include <CLI/CLI.hpp>

#include "orrery/base/error.hpp"

namespace orrery::cli {
void add_run_command(CLI::App& app);
}

int main(int argc, char** argv) {
  CLI::App app{"orrery (run only, for tests)"};
  app.name("orrery");
  app.require_subcommand(1);
  orrery::cli::add_run_command(app);
  try {
    app.parse(argc, argv);
    return 0;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const orrery::base::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const orrery::base::EnvironmentError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 70;
  }
}
