// Corrections by message size (CommCurve.size_points): a collective size that training runs
// issued alone is priced as they measured it, sizes near it take part of the correction, sizes
// far from it and other group sizes none; bench's back-to-back samples make no point.
#include <cmath>

#include <gtest/gtest.h>

#include "all_reduce_sample.hpp"
#include "orrery/calibration/calibration_fit.hpp"
#include "orrery/sim/collective_cost.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {
namespace {

// An all-reduce of `bytes` on `ranks` ranks taking 40 us + bytes x 2(n-1)/n / 2 GB/s, times
// `slower`.
calibration::CommSample all_reduce(double bytes, int64_t ranks, double slower, bool bench) {
  calibration::CommSample s = test::all_reduce_sample(bytes, ranks, 40e-6, 2e9);
  s.seconds *= slower;
  s.back_to_back = bench;
  return s;
}

// Bench's sizes, 4 KiB to 64 MiB on 2 ranks, on the curve.
std::vector<calibration::CommSample> bench() {
  std::vector<calibration::CommSample> out;
  for (double b = 4096; b <= 64.0 * 1024 * 1024; b *= 4) out.push_back(all_reduce(b, 2, 1.0, true));
  return out;
}

TEST(SizeCorrections, BenchSamplesMakeNoPoint) {
  const calibration::CalibrationFit fit = calibration::fit_calibration({}, bench(), {});
  ASSERT_EQ(fit.profile.comm_size(), 1);
  EXPECT_EQ(fit.profile.comm(0).size_points_size(), 0);
}

TEST(SizeCorrections, ARunsSizeIsPricedAsMeasuredAndItsNeighboursInPart) {
  // A training run's 20 MB gradient all-reduces took 1.6, 1.8 and 1.7 times the bench's law (a
  // clipped mean of 1.7), beside bench's 4 KiB-64 MiB on it.
  const double grads = 20e6;
  std::vector<calibration::CommSample> samples = bench();
  for (double slower : {1.6, 1.8, 1.7}) samples.push_back(all_reduce(grads, 2, slower, false));
  const calibration::CalibrationFit fit = calibration::fit_calibration({}, samples, {});
  ASSERT_EQ(fit.profile.comm_size(), 1);
  const pb::CommCurve& c = fit.profile.comm(0);
  ASSERT_EQ(c.size_points_size(), 1);
  EXPECT_EQ(c.size_points(0).ranks(), 2);
  EXPECT_EQ(c.size_points(0).bytes(), grads);
  EXPECT_EQ(c.size_points(0).samples(), 3);

  const topologies::Topology node(topologies::load_cluster("dgx-h100", 1));
  const CollectiveCostModel model(node, &fit.profile);
  auto seconds = [&](double bytes, std::vector<int64_t> devices) {
    return model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devices, bytes).seconds;
  };
  // At the run's size: the mean of what the run measured (the point is its mean over the curve).
  const double measured = (1.6 + 1.8 + 1.7) / 3 * (40e-6 + grads / 2e9);
  EXPECT_NEAR(seconds(grads, {0, 1}) / measured, 1, 1e-9);
  // One octave away: exp(-1/4) = 78% of the log correction; twelve octaves: none to speak of.
  const double ratio = c.size_points(0).time_ratio();
  auto curve = [&](double bytes) { return c.latency_s() + bytes / c.bandwidth_bytes_per_s(); };
  EXPECT_NEAR(seconds(2 * grads, {0, 1}) / curve(2 * grads),
              std::exp(std::exp(-0.25) * std::log(ratio)), 1e-9);
  EXPECT_NEAR(seconds(grads / 4096, {0, 1}) / curve(grads / 4096), 1, 1e-9);
  // Another group size took no point: its curve alone (bus factor 2(n-1)/n = 1.5 on 4 ranks).
  EXPECT_NEAR(
      seconds(grads, {0, 1, 2, 3}) / (c.latency_s() + 1.5 * grads / c.bandwidth_bytes_per_s()), 1,
      1e-9);
  // The same samples give the same profile.
  EXPECT_EQ(calibration::fit_calibration({}, samples, {}).profile.SerializeAsString(),
            fit.profile.SerializeAsString());
}

}  // namespace
}  // namespace orrery::sim
