// Compute cost model: per-op roofline with efficiency curves per device and op class,
//   time = overhead + max(flops / (peak(dtype) * efficiency(flops)),
//                         bytes / (memory bandwidth * memory efficiency))
//   efficiency(F) = max_efficiency * F / (F + half_saturation_flops)
// with defaults per op class (compute_defaults.cpp, fitted to public data and documented there)
// that a CalibrationProfile replaces per (device, op class). A calibrated curve may carry
// corrections by shape (ComputeCurve.shape_points): the time above is then multiplied by an
// interpolation of the measured time ratios of nearby shapes of the same pass.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/exec_graph.pb.h"

namespace orrery::sim {

// The factor HostSharing `h` puts on a rank whose plan has `ranks_on_host` of its ranks on the
// rank's host: 1 + (slowdown - 1) x (ranks_on_host - 1) / (h.ranks - 1). A slowdown below 1 (ranks
// ran faster sharing the host than alone) applies as measured, with ranks_on_host at most h.ranks:
// a speed-up is not extrapolated.
double host_sharing_factor(const pb::HostSharing& h, int64_t ranks_on_host);

class ComputeCostModel {
 public:
  // `dtype`: the plan's precision ("bf16", "fp16", "fp8", "fp32"). Ops run at its peak, except
  // under "fp8", where only the ops the recipe puts in fp8 (their `op_dtype` "fp8", plan/fp8.hpp)
  // run at the fp8 peak, on the fp8 curves (compute_defaults.hpp), and every other op at bf16's.
  ComputeCostModel(std::string dtype, const pb::CalibrationProfile* calibration = nullptr);

  double seconds(const pb::DeviceSpec& device, pb::OpClass op_class, double flops,
                 double bytes) const {
    return seconds(device, op_class, flops, bytes, {}, pb::PHASE_UNSPECIFIED);
  }
  // `shape` and `phase` select the shape corrections (ExecNode.shape; empty: none); `op`
  // (ExecNode.op, LayerOp.name) and `phase` the op's own curve for that pass where the profile
  // has one (op empty: the class's). `op_dtype` (ExecNode.dtype, LayerOp.dtype): "fp8" for an op
  // an fp8 recipe runs in fp8, priced on the default fp8 curve (a profile's curves were fitted
  // at the precision its traces ran in, and the executor has no fp8); anything else: the plan's.
  // `kernel` (ExecNode.attention_kernel, LayerOp.attention_kernel): an attention op's fused
  // kernel; flash_2 and flash_3 take their published efficiency on the device for the op's pass
  // (compute_defaults.hpp, topologies/attention_kernels.hpp) where no calibrated curve covers
  // the op; anything else the device's generic attention curve.
  double seconds(const pb::DeviceSpec& device, pb::OpClass op_class, double flops, double bytes,
                 std::span<const int64_t> shape, pb::Phase phase, std::string_view op = {},
                 std::string_view op_dtype = {},
                 pb::AttentionKernel kernel = pb::ATTENTION_KERNEL_UNSPECIFIED) const;
  double seconds(const pb::DeviceSpec& device, const pb::ExecNode& node) const {
    return seconds(
        device, node.op_class(), node.flops(), node.bytes_read() + node.bytes_written(),
        std::span<const int64_t>(node.shape().data(), static_cast<size_t>(node.shape().size())),
        node.phase(), node.op(), node.dtype(), node.attention_kernel());
  }
  // The calibrated host time between consecutive ops on a device's compute stream that no op's
  // time covers (CalibrationProfile.dispatch_overhead): both engines add it before every op they
  // issue on the compute stream. 0 without a profile that measured it for this device.
  double dispatch_s(const pb::DeviceSpec& device) const;
  // The calibrated rank skew of a device (CalibrationProfile.rank_skew: the spread of a rank's
  // arrival at a synchronization, RankSkew.jitter_s + cv x its compute since); null without one.
  const pb::RankSkew* rank_skew(const pb::DeviceSpec& device) const;
  // The expected wait for the slowest member at a collective of `ranks` ranks on this device,
  // `compute_s` seconds of compute after the group last synchronized: (jitter + cv x compute_s) x
  // the expected maximum of `ranks` standard normals (docs/calibration.md, "Rank skew"); 0 after
  // no compute. Both engines add it to every collective of two or more ranks.
  double skew_wait_s(const pb::DeviceSpec& device, int64_t ranks, double compute_s) const;
  // The calibrated host sharing of a device (CalibrationProfile.host_sharing); null without one.
  const pb::HostSharing* host_sharing(const pb::DeviceSpec& device) const;
  // The curve in force for a device and op class (calibrated or default), or for one op of the
  // class in one pass: its own curve where the profile has one, else the class's.
  pb::ComputeCurve curve(const pb::DeviceSpec& device, pb::OpClass op_class,
                         std::string_view op = {}, pb::Phase phase = pb::PHASE_UNSPECIFIED) const;
  // The profile's curve for this device, class, op and pass (ComputeCurve.op, .phase): the op's
  // own for the pass of `phase`, else the class's (op empty); null when the profile has neither.
  static const pb::ComputeCurve* calibrated_curve(const pb::CalibrationProfile& profile,
                                                  std::string_view device, pb::OpClass op_class,
                                                  std::string_view op, pb::Phase phase);
  // The pass an op of `phase` runs in, as curves per op and shape points are keyed:
  // PHASE_BACKWARD, else PHASE_FORWARD (recomputation re-runs the forward; an unspecified pass, a
  // bench op, is a forward).
  static pb::Phase pass_of(pb::Phase phase) {
    return phase == pb::PHASE_BACKWARD ? pb::PHASE_BACKWARD : pb::PHASE_FORWARD;
  }
  const std::string& dtype() const { return dtype_; }

  // The factor a curve's shape points apply to an op of this shape and pass (1: none apply).
  // Exposed for calibration's reports and tests.
  static double shape_correction(const pb::ComputeCurve& curve, std::span<const int64_t> shape,
                                 pb::Phase phase);

 private:
  std::string dtype_;
  const pb::CalibrationProfile* calibration_;
};

}  // namespace orrery::sim
