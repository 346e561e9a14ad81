// `orrery validate --runs F --holdout-by KEY`: the leave-one-family-out table (text, JSON or
// CSV).
#pragma once

#include <string>

#include "orrery/validation/run_holdout.hpp"

namespace orrery::cli {

void print_holdout(const validation::RunHoldout& h, const std::string& file,
                   const std::string& engine, bool json);

// One line per case of every family (the unread cases last): family, the factor fitted without
// it, the case's measurement, its held-out and shipped predictions and errors, or why it was
// skipped (its figures empty).
std::string holdout_csv(const validation::RunHoldout& h);

}  // namespace orrery::cli
