// An all-reduce sample that follows an alpha-beta law exactly, for the calibration-fit tests:
// latency + bytes x nccl-tests' bus factor 2(n-1)/n / bus_bw.
#pragma once

#include <cstdint>

#include "orrery/calibration/calibration_fit.hpp"

namespace orrery::sim::test {

inline calibration::CommSample all_reduce_sample(double bytes, int64_t ranks, double latency,
                                                 double bus_bw) {
  calibration::CommSample s;
  s.scope = "intra_node";
  s.collective = pb::COLLECTIVE_KIND_ALL_REDUCE;
  s.bytes = bytes;
  s.ranks = ranks;
  s.seconds =
      latency + bytes * 2.0 * static_cast<double>(ranks - 1) / static_cast<double>(ranks) / bus_bw;
  s.source = "test";
  return s;
}

}  // namespace orrery::sim::test
