#include "host_memory_guard.hpp"

#include <fstream>
#include <sstream>

#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/memory_model.hpp"

namespace orrery::cli {
namespace {

// MemAvailable (kB) of /proc/meminfo: what the kernel can give without swapping; 0 when the file
// does not say (then nothing is checked).
double available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    double kb = 0;
    if (fields >> key >> kb && key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

}  // namespace

double host_memory_limit(const std::optional<std::string>& flag) {
  if (!flag) return available_bytes();
  double bytes = 0;
  try {
    bytes = base::units::parse(*flag, base::units::Unit::kBytes);
  } catch (const std::exception& e) {
    throw base::InputError("", 0, "--host-memory", e.what());
  }
  if (!(bytes > 0)) {
    throw base::InputError("", 0, "--host-memory", "got " + *flag + ", expected a size > 0");
  }
  return bytes;
}

double local_ranks_peak_bytes(const LoadedJob& job) {
  const plan::ResolvedPlan plan =
      plan::resolve_plan(job.plan, job.model, job.cluster, job.plan_where);
  const auto stages = sim::memory_per_stage(plan);
  const double ranks_per_stage =
      static_cast<double>(plan.world_size()) / static_cast<double>(stages.size());
  double total = 0;
  for (const auto& stage : stages) total += stage.peak_bytes() * ranks_per_stage;
  return total;
}

void check_host_memory(const LoadedJob& job, double limit) {
  if (limit <= 0) return;
  const double need = local_ranks_peak_bytes(job);
  if (need <= limit) return;
  throw base::InputError(
      "", 0, "plan",
      "its local ranks need about " + base::units::bytes(need) +
          " of host memory together (the memory model's peak: parameters, gradients, optimizer "
          "state, activations), more than the limit of " +
          base::units::bytes(limit) +
          " (--host-memory, else what /proc/meminfo calls available); a smaller model, --seq or "
          "--micro-batch, or ZeRO/FSDP sharding over more ranks lowers it, and --host-memory SIZE "
          "raises the limit");
}

}  // namespace orrery::cli
