// `orrery validate --runs F --holdout-by KEY`: the leave-one-family-out table (text or JSON).
#pragma once

#include <string>

#include "orrery/validation/run_holdout.hpp"

namespace orrery::cli {

void print_holdout(const validation::RunHoldout& h, const std::string& file,
                   const std::string& engine, bool json);

}  // namespace orrery::cli
