// Attention kernel generations (plan attention_kernel flash_2 / flash_3): the compute cost model
// prices attn.core at the kernel's published efficiency on the device (topologies/
// attention_kernels.hpp), forward and backward apart; plan resolution refuses a kernel the device
// has no figure for; the op carries its kernel into the lowered graph, and both engines price it
// alike. Each expected number is derived next to it.
#include <gtest/gtest.h>

#include <string>

#include "orrery/base/error.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/op_tables.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/attention_kernels.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::sim {
namespace {

const pb::DeviceSpec& device(const std::string& cluster, const std::string& name) {
  static const pb::ClusterSpec h100 = topologies::load_cluster("dgx-h100", 1);
  static const pb::ClusterSpec a100 = topologies::load_cluster("dgx-a100", 1);
  return topologies::find_device(cluster == "dgx-h100" ? h100 : a100, name);
}

// The compute part of an attention op's time: the time less the kernel overhead (4 us, the
// device's attention curve), with no bytes, so the roofline is compute-bound.
double compute_s(const ComputeCostModel& m, const pb::DeviceSpec& d, pb::Phase phase,
                 pb::AttentionKernel kernel) {
  const double f = 1e12;
  const double overhead = m.curve(d, pb::OP_CLASS_ATTENTION).overhead_s();
  return m.seconds(d, pb::OP_CLASS_ATTENTION, f, 0, {}, phase, "attn.core", "", kernel) - overhead;
}

// Same work, same half-saturation (8 GFLOP on Hopper): the times are in the inverse ratio of the
// papers' efficiencies. Forward 0.75 (FlashAttention-3) against 0.35 (FlashAttention-2 on H100),
// backward 0.567 against 0.326.
TEST(AttentionKernels, Flash3OnH100IsFasterThanFlash2ByTheirEfficiencies) {
  const ComputeCostModel m("bf16");
  const pb::DeviceSpec& h100 = device("dgx-h100", "H100-SXM");
  const double fwd2 = compute_s(m, h100, pb::PHASE_FORWARD, pb::ATTENTION_KERNEL_FLASH_2);
  const double fwd3 = compute_s(m, h100, pb::PHASE_FORWARD, pb::ATTENTION_KERNEL_FLASH_3);
  EXPECT_NEAR(fwd2 / fwd3, 0.75 / 0.35, 1e-9);
  const double bwd2 = compute_s(m, h100, pb::PHASE_BACKWARD, pb::ATTENTION_KERNEL_FLASH_2);
  const double bwd3 = compute_s(m, h100, pb::PHASE_BACKWARD, pb::ATTENTION_KERNEL_FLASH_3);
  EXPECT_NEAR(bwd2 / bwd3, 0.567 / 0.326, 1e-9);
  // 1e12 FLOP at 989e12 x 0.75 x 1e12 / (1e12 + 8e9) forward.
  EXPECT_NEAR(fwd3, 1e12 / (989e12 * 0.75 * 1e12 / (1e12 + 8e9)), 1e-12);
  // Recomputation re-runs the forward: the forward efficiency.
  EXPECT_DOUBLE_EQ(compute_s(m, h100, pb::PHASE_RECOMPUTE, pb::ATTENTION_KERNEL_FLASH_3), fwd3);
}

// flash (and an unset kernel) keep the device's generic attention curve: 0.58 on Hopper.
TEST(AttentionKernels, FlashKeepsTheGenericCurve) {
  const ComputeCostModel m("bf16");
  const pb::DeviceSpec& h100 = device("dgx-h100", "H100-SXM");
  const double generic = 1e12 / (989e12 * 0.58 * 1e12 / (1e12 + 8e9));
  EXPECT_NEAR(compute_s(m, h100, pb::PHASE_FORWARD, pb::ATTENTION_KERNEL_FLASH), generic, 1e-12);
  EXPECT_NEAR(compute_s(m, h100, pb::PHASE_BACKWARD, pb::ATTENTION_KERNEL_UNSPECIFIED), generic,
              1e-12);
  // FlashAttention-2 on A100: 0.73 forward (4 GFLOP half saturation), 0.50 backward.
  const pb::DeviceSpec& a100 = device("dgx-a100", "A100-SXM-80GB");
  EXPECT_NEAR(compute_s(m, a100, pb::PHASE_FORWARD, pb::ATTENTION_KERNEL_FLASH_2),
              1e12 / (312e12 * 0.73 * 1e12 / (1e12 + 4e9)), 1e-12);
  EXPECT_NEAR(compute_s(m, a100, pb::PHASE_BACKWARD, pb::ATTENTION_KERNEL_FLASH_2),
              1e12 / (312e12 * 0.50 * 1e12 / (1e12 + 4e9)), 1e-12);
}

TEST(AttentionKernels, EveryFigureHasASource) {
  for (const pb::DeviceSpec& d : topologies::builtin_devices()) {
    for (const auto k : {pb::ATTENTION_KERNEL_FLASH_2, pb::ATTENTION_KERNEL_FLASH_3}) {
      const auto e = topologies::attention_kernel_efficiency(d, k);
      EXPECT_EQ(e.has_value(), topologies::attention_kernel_problem(d, k).empty()) << d.name();
      if (!e) continue;
      EXPECT_NE(std::string(e->source).find("arXiv"), std::string::npos) << d.name();
      EXPECT_GT(e->forward, e->backward) << d.name();  // both papers: backward runs lower
    }
  }
}

pb::Plan plan_with(pb::AttentionKernel kernel, const std::string& cluster) {
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster(cluster);
  p.mutable_job()->set_global_batch_size(8);
  p.mutable_job()->set_seq_len(4096);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_dp(8);
  p.set_micro_batch_size(1);
  p.set_attention_kernel(kernel);
  return p;
}

plan::ResolvedPlan resolve(pb::AttentionKernel kernel, const pb::ClusterSpec& cluster) {
  pb::ModelSpec spec = models::load_model("llama3-8b");
  spec.set_num_layers(4);
  return plan::resolve_plan(plan_with(kernel, cluster.name()), spec, cluster);
}

plan::ResolvedPlan resolve(pb::AttentionKernel kernel, const std::string& cluster = "dgx-h100") {
  return resolve(kernel, topologies::load_cluster(cluster, 1));
}

// One DGX H100 whose GPU is the user's own device file: the H100 SXM's figures under a name no
// preset starts with, stating `architecture` (or not).
pb::ClusterSpec own_device_cluster(const std::string& name, pb::DeviceArchitecture architecture) {
  pb::ClusterSpec c = topologies::load_cluster("dgx-h100", 1);
  pb::DeviceSpec mine = topologies::find_device(c, "H100-SXM");
  mine.set_name(name);
  mine.set_architecture(architecture);
  *c.add_devices() = mine;
  c.mutable_node_types(0)->set_device(name);
  return c;
}

// The architecture decides, not the name: a device called "my-h100-sxm" that states hopper gets
// FlashAttention-3's figures (0.75 forward, 0.567 backward) and is priced as the H100-SXM preset.
TEST(AttentionKernels, AnOwnDeviceStatingHopperTakesTheHopperFigures) {
  const pb::ClusterSpec c = own_device_cluster("my-h100-sxm", pb::DEVICE_ARCHITECTURE_HOPPER);
  const pb::DeviceSpec& mine = topologies::find_device(c, "my-h100-sxm");
  const auto e = topologies::attention_kernel_efficiency(mine, pb::ATTENTION_KERNEL_FLASH_3);
  ASSERT_TRUE(e.has_value());
  EXPECT_DOUBLE_EQ(e->forward, 0.75);
  EXPECT_DOUBLE_EQ(e->backward, 0.567);
  const ComputeCostModel m("bf16");
  const pb::DeviceSpec& h100 = device("dgx-h100", "H100-SXM");
  for (const auto phase : {pb::PHASE_FORWARD, pb::PHASE_BACKWARD}) {
    for (const auto k : {pb::ATTENTION_KERNEL_FLASH_2, pb::ATTENTION_KERNEL_FLASH_3}) {
      EXPECT_DOUBLE_EQ(compute_s(m, mine, phase, k), compute_s(m, h100, phase, k));
    }
  }
  EXPECT_NEAR(compute_s(m, mine, pb::PHASE_FORWARD, pb::ATTENTION_KERNEL_FLASH_3),
              1e12 / (989e12 * 0.75 * 1e12 / (1e12 + 8e9)), 1e-12);
  EXPECT_NO_THROW(resolve(pb::ATTENTION_KERNEL_FLASH_3, c));
  // The same device stating ampere runs flash_2 at the A100's figure and is refused flash_3.
  const pb::ClusterSpec amp = own_device_cluster("my-h100-sxm", pb::DEVICE_ARCHITECTURE_AMPERE);
  EXPECT_DOUBLE_EQ(topologies::attention_kernel_efficiency(
                       topologies::find_device(amp, "my-h100-sxm"), pb::ATTENTION_KERNEL_FLASH_2)
                       ->forward,
                   0.73);
  EXPECT_THROW(resolve(pb::ATTENTION_KERNEL_FLASH_3, amp), base::InputError);
}

// The generic GEMM and attention curves follow the architecture too: Hopper and Blackwell take
// the Hopper figures (GEMM 0.72, attention 0.58), any other GPU, one stating none included, the
// A100's (0.80, 0.62).
TEST(AttentionKernels, GenericCurvesFollowTheArchitecture) {
  const ComputeCostModel m("bf16");
  for (const auto arch : {pb::DEVICE_ARCHITECTURE_HOPPER, pb::DEVICE_ARCHITECTURE_BLACKWELL,
                          pb::DEVICE_ARCHITECTURE_AMPERE, pb::DEVICE_ARCHITECTURE_UNSPECIFIED}) {
    const bool hopper =
        arch == pb::DEVICE_ARCHITECTURE_HOPPER || arch == pb::DEVICE_ARCHITECTURE_BLACKWELL;
    const pb::ClusterSpec c = own_device_cluster("my-h100-sxm", arch);
    const pb::DeviceSpec& mine = topologies::find_device(c, "my-h100-sxm");
    EXPECT_DOUBLE_EQ(m.curve(mine, pb::OP_CLASS_GEMM).max_efficiency(), hopper ? 0.72 : 0.80)
        << arch;
    EXPECT_DOUBLE_EQ(m.curve(mine, pb::OP_CLASS_ATTENTION).max_efficiency(), hopper ? 0.58 : 0.62)
        << arch;
  }
}

// A device stating no architecture is refused a named generation, naming the device and the
// field, even one called like a preset (the name is no longer read); plain flash still runs.
TEST(AttentionKernels, ADeviceWithoutArchitectureIsRefusedNamingTheField) {
  for (const char* name : {"my-h100-sxm", "H100-SXM"}) {
    SCOPED_TRACE(name);
    const pb::ClusterSpec c = own_device_cluster(name, pb::DEVICE_ARCHITECTURE_UNSPECIFIED);
    for (const auto k : {pb::ATTENTION_KERNEL_FLASH_2, pb::ATTENTION_KERNEL_FLASH_3}) {
      try {
        resolve(k, c);
        FAIL() << "resolved without an architecture";
      } catch (const base::InputError& e) {
        EXPECT_EQ(e.field(), "attention_kernel");
        EXPECT_NE(e.reason().find("rule attention-kernel-on-device: device " + std::string(name) +
                                  " states no architecture"),
                  std::string::npos)
            << e.reason();
        EXPECT_NE(e.reason().find("set the device's `architecture` field"), std::string::npos)
            << e.reason();
      }
      // The cost model refuses it as well, rather than pricing a default.
      const ComputeCostModel m("bf16");
      EXPECT_THROW(compute_s(m, topologies::find_device(c, name), pb::PHASE_FORWARD, k),
                   base::InputError);
    }
    EXPECT_NO_THROW(resolve(pb::ATTENTION_KERNEL_FLASH, c));
  }
}

TEST(AttentionKernels, ADeviceWithoutTheKernelIsRefused) {
  try {
    resolve(pb::ATTENTION_KERNEL_FLASH_3, "dgx-a100");
    FAIL() << "flash_3 on A100 resolved";
  } catch (const base::InputError& e) {
    EXPECT_EQ(e.field(), "attention_kernel");
    EXPECT_NE(
        e.reason().find(
            "rule attention-kernel-on-device: device A100-SXM-80GB (architecture ampere) does not "
            "run flash_3"),
        std::string::npos)
        << e.reason();
  }
  EXPECT_NO_THROW(resolve(pb::ATTENTION_KERNEL_FLASH_2, "dgx-a100"));
}

TEST(AttentionKernels, PlanFilesReadTheNewValuesAndRefuseUnknownOnes) {
  const std::string head =
      "model: llama3-8b\ncluster: dgx-h100\n"
      "job: {global_batch_size: 8, seq_len: 2048, precision: bf16}\n"
      "parallel: {dp: 8}\nmicro_batch_size: 1\n";
  pb::Plan p;
  parse_spec(head + "attention_kernel: flash_3\n", "plan.yaml", SpecFormat::kYaml, &p);
  EXPECT_EQ(p.attention_kernel(), pb::ATTENTION_KERNEL_FLASH_3);
  parse_spec(head + "attention_kernel: flash_2\n", "plan.yaml", SpecFormat::kYaml, &p);
  EXPECT_EQ(p.attention_kernel(), pb::ATTENTION_KERNEL_FLASH_2);
  try {
    parse_spec(head + "attention_kernel: flash_4\n", "plan.yaml", SpecFormat::kYaml, &p);
    FAIL() << "flash_4 read";
  } catch (const base::InputError& e) {
    EXPECT_EQ(e.file(), "plan.yaml");
    EXPECT_EQ(e.line(), 6);
    EXPECT_EQ(e.field(), "attention_kernel");
    EXPECT_EQ(e.reason(), "got 'flash_4' (did you mean 'flash_2'?)");
  }
}

// The lowering puts the kernel on attn.core's nodes and nowhere else; the analytic and des
// engines then agree on the step (one DGX H100, no contention), and flash_3's is the shorter.
TEST(AttentionKernels, BothEnginesPriceTheKernelOnTheOp) {
  const plan::ResolvedPlan r3 = resolve(pb::ATTENTION_KERNEL_FLASH_3);
  const pb::ExecGraph g = plan::lower(r3);
  int cores = 0;
  for (const auto& rank : g.ranks()) {
    for (const auto& n : rank.nodes()) {
      if (n.op() == "attn.core") {
        ++cores;
        EXPECT_EQ(n.attention_kernel(), pb::ATTENTION_KERNEL_FLASH_3) << n.name();
      } else {
        EXPECT_EQ(n.attention_kernel(), pb::ATTENTION_KERNEL_UNSPECIFIED) << n.name();
      }
    }
  }
  EXPECT_GT(cores, 0);
  auto step = [](const plan::ResolvedPlan& p, EngineKind engine) {
    const topologies::Topology topology(p.cluster);
    const CostModels costs(topology, p.precision.dtype);
    return simulate(p, costs, engine).result.step_time_s();
  };
  const plan::ResolvedPlan r2 = resolve(pb::ATTENTION_KERNEL_FLASH_2);
  const double a2 = step(r2, EngineKind::kAnalytic), a3 = step(r3, EngineKind::kAnalytic);
  EXPECT_LT(a3, a2);
  EXPECT_NEAR(step(r2, EngineKind::kDes), a2, 0.02 * a2);
  EXPECT_NEAR(step(r3, EngineKind::kDes), a3, 0.02 * a3);
}

}  // namespace
}  // namespace orrery::sim
