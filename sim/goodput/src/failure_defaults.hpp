// Published defaults of the failure model; docs/goodput.md, "Sources", explains each.
#pragma once

namespace orrery::sim::defaults {

constexpr double kDay = 86400;
// How often a node fails at all: Meta's study of its two A100 research clusters (Kokolis et al.,
// "Revisiting Reliability in Large-Scale Machine Learning Research Clusters", arXiv 2410.21680,
// HPCA 2025) reports 6.50 (RSC-1) and 2.34 (RSC-2) failures per 1000 node-days; their mean.
constexpr double kNodeFailuresPerS = (6.50 + 2.34) / 2 / 1000 / kDay;
// What fails, as shares of that rate: the Llama 3 paper's (arXiv 2407.21783, Table 5) root causes
// of 419 unexpected interruptions, less its 35 switch/cable ones (links and switches below have a
// per-component source): 384 of which GPU (faulty GPU 148, SRAM 19, system processor 17,
// thermal 6, silent data corruption 6) 196, HBM3 72, host (maintenance 32, SSD 3, PSU 3,
// chassis 2, IO board 2, CPU 2, memory 2) 46, NIC 7, software (bugs 54, dependencies 2) 56 and
// NCCL watchdog hangs 7. Only the shares are used: the count is what docs/goodput.md checks.
constexpr double kCauses = 384;
// Components of each kind per node in both sources (8-GPU nodes with one NIC per GPU).
constexpr double kPerNode = 8;
constexpr double mtbf(double per_node, double cause_count) {
  return per_node / (kNodeFailuresPerS * cause_count / kCauses);
}
constexpr double kGpuMtbfS = mtbf(kPerNode, 196);
constexpr double kHbmMtbfS = mtbf(kPerNode, 72);
constexpr double kHostMtbfS = mtbf(1, 46);
constexpr double kNicMtbfS = mtbf(kPerNode, 7);
constexpr double kSoftwareMtbfS = mtbf(1, 56);
constexpr double kHangMtbfS = mtbf(1, 7);
// Links and switches: Alibaba's HPN paper (Qian et al., SIGCOMM 2024) measured 0.057% of
// NIC-to-ToR links and 0.051% of ToR switches failing per month in its GPU clusters.
constexpr double kMonth = 30 * kDay;
constexpr double kLinkMtbfS = kMonth / 0.00057;
constexpr double kSwitchMtbfS = kMonth / 0.00051;
// PyTorch's NCCL process groups time a stuck collective out after 10 minutes by default.
constexpr double kHangDetectionS = 600;
// No published rate of stragglers fits a per-GPU probability: none unless the spec gives one.
constexpr double kStragglerFraction = 0;
constexpr double kStragglerSlowdown = 1;

}  // namespace orrery::sim::defaults
