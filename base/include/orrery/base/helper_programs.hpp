// orrery's helper programs: what would load a heavy library (libtorch: orrery-run; SimGrid:
// orrery-des) runs as an executable of its own, so that the `orrery` front and the libraries
// start without loading it (docs/architecture.md, "Executables").
#pragma once

#include <string>
#include <vector>

namespace orrery::base {

// The directories searched for a helper, in order: the running executable's own directory
// (/proc/self/exe: the build tree's cli/ and an installed bin/ beside an orrery there), its
// ../libexec/orrery (the installed tree), then the build tree's cli/ for code running from inside
// the build tree (test programs, the Python module there), or, in a program built against the
// installed package, that install's libexec/orrery. An installed orrery never falls back to the
// build tree it came from.
std::vector<std::string> helper_directories();

// The absolute path of helper `name` (an executable file in one of helper_directories());
// EnvironmentError naming every directory searched when none has it.
std::string find_helper(const std::string& name);

}  // namespace orrery::base
