// Where a test finds its inputs and the programs it runs.
//
// The paths are compiled into one small generated file per test target (orrery_add_test in
// tests/CMakeLists.txt), never into the test sources themselves: a test's object file is then the
// same in every checkout of the repository, so ccache can share it between worktrees, and only the
// generated file is rebuilt when the checkout moves.
#pragma once

namespace orrery::test_paths {
const char* source_dir();         // the repository root
const char* test_inputs();        // tests/inputs
const char* orrery_bin();         // the `orrery` binary, where the target runs it
const char* executor_rank_bin();  // tests/executor's rank program
const char* executor_test_dir();  // tests/executor
const char* run_cli_bin();        // `orrery run` alone (tests/executor)
const char* mpirun();             // "" when CMake found no mpirun
const char* blas_check_bin();     // tests/executor's OpenBLAS kernel check
bool planner_has_mpi();           // the planner was built with MPI
}  // namespace orrery::test_paths

#define ORRERY_SOURCE_DIR (::orrery::test_paths::source_dir())
#define ORRERY_TEST_INPUTS (::orrery::test_paths::test_inputs())
#define ORRERY_BIN (::orrery::test_paths::orrery_bin())
#define ORRERY_EXECUTOR_RANK_BIN (::orrery::test_paths::executor_rank_bin())
#define ORRERY_EXECUTOR_TEST_DIR (::orrery::test_paths::executor_test_dir())
#define ORRERY_RUN_CLI_BIN (::orrery::test_paths::run_cli_bin())
#define ORRERY_MPIRUN (::orrery::test_paths::mpirun())
#define ORRERY_BLAS_CHECK_BIN (::orrery::test_paths::blas_check_bin())
#define ORRERY_PLANNER_HAS_MPI (::orrery::test_paths::planner_has_mpi())
