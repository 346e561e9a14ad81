// The Python module's result objects: thin views over orrery's own messages, so that Python reads
// exactly what `orrery simulate --json` and `orrery plan --json` print.
#pragma once

#include <pybind11/pybind11.h>

namespace orrery::python {

// Registers Model, Cluster, SimResult and RankedPlan on the module.
void add_result_classes(pybind11::module_& m);

}  // namespace orrery::python
