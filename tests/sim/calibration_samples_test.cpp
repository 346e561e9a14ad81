// From measured traces to samples: devices and peaks, one sample per collective instance timed
// by its fastest rank, the scope the collective cost model looks up, and the errors.
#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/calibration/calibration_samples.hpp"
#include "orrery/topologies/cluster_catalog.hpp"

namespace orrery::sim {
namespace {

// Two dgx-h100 nodes; ranks 0 and 1 on node 0's first two GPUs, rank 2 on node 1's first.
pb::ExecGraph measured_trace() {
  pb::ExecGraph g;
  g.set_world_size(3);
  *g.mutable_cluster_spec() = topologies::load_cluster("dgx-h100", 2);
  g.mutable_plan()->mutable_job()->set_precision(pb::PRECISION_BF16);
  pb::ProcessGroup* tp = g.add_process_groups();
  tp->set_id(0);
  tp->add_ranks(0);
  tp->add_ranks(1);
  pb::ProcessGroup* dp = g.add_process_groups();
  dp->set_id(1);
  dp->add_ranks(0);
  dp->add_ranks(2);
  const int64_t devices[] = {0, 1, 8};
  for (int64_t r = 0; r < 3; ++r) {
    pb::RankGraph& rank = *g.add_ranks();
    rank.set_rank(r);
    rank.set_device(devices[r]);
    pb::ExecNode& gemm = *rank.add_nodes();
    gemm.set_id(0);
    gemm.set_name("L0.mb0.fwd.attn.qkv");
    gemm.set_kind(pb::NODE_KIND_COMPUTE);
    gemm.set_op_class(pb::OP_CLASS_GEMM);
    gemm.set_flops(1e12);
    gemm.set_bytes_read(1e8);
    gemm.set_duration_s(2e-3);
    if (r < 2) {
      pb::ExecNode& ar = *rank.add_nodes();
      ar.set_id(1);
      ar.set_name("L0.mb0.fwd.attn.tp_all_reduce");
      ar.set_kind(pb::NODE_KIND_COLLECTIVE);
      ar.set_collective(pb::COLLECTIVE_KIND_ALL_REDUCE);
      ar.set_process_group(0);
      ar.set_comm_bytes(64e6);
      ar.set_duration_s(r == 0 ? 400e-6 : 300e-6);
    }
    if (r != 1) {
      pb::ExecNode& grad = *rank.add_nodes();
      grad.set_id(2);
      grad.set_name("dp.bucket0.all_reduce");
      grad.set_kind(pb::NODE_KIND_COLLECTIVE);
      grad.set_collective(pb::COLLECTIVE_KIND_ALL_REDUCE);
      grad.set_process_group(1);
      grad.set_comm_bytes(1e9);
      grad.set_duration_s(30e-3);
    }
    pb::ExecNode& untimed = *rank.add_nodes();
    untimed.set_id(3);
    untimed.set_name("L0.mb0.fwd.attn.norm");
    untimed.set_kind(pb::NODE_KIND_COMPUTE);
    untimed.set_op_class(pb::OP_CLASS_NORM);
    untimed.set_flops(1e6);
  }
  return g;
}

TEST(CalibrationSamples, OverlapIsTheShareOfTimeBesideAsyncCommunication) {
  pb::ExecGraph g = measured_trace();
  // Rank 0: the GEMM runs 0-2 ms; the TP all-reduce (compute stream, blocking) at 1-1.4 ms does
  // not count; the gradient all-reduce on the comm.dp stream at 1.5-31.5 ms covers a quarter.
  pb::RankGraph& rank = *g.mutable_ranks(0);
  rank.mutable_nodes(0)->set_start_s(0);
  rank.mutable_nodes(1)->set_start_s(1e-3);
  rank.mutable_nodes(2)->set_start_s(1.5e-3);
  rank.mutable_nodes(2)->set_stream(1);
  calibration::TraceSamples out;
  calibration::add_trace_samples(g, "t.json", {}, out);
  ASSERT_FALSE(out.compute.empty());
  EXPECT_EQ(out.compute[0].source, "t.json: L0.mb0.fwd.attn.qkv");
  EXPECT_NEAR(out.compute[0].overlap, 0.25, 1e-12);
  // Rank 1 has no comm-stream collective: nothing overlapped.
  EXPECT_EQ(out.compute[1].overlap, 0);
}

TEST(CalibrationSamples, EachComputeSampleCountsTheRanksOnItsHost) {
  // Ranks 0 and 1 share node 0, rank 2 has node 1 to itself; a bench file's ops ran alone; a
  // trace without a plan (an imported profile) does not say.
  calibration::TraceSamples run;
  calibration::add_trace_samples(measured_trace(), "t.json", {}, run);
  ASSERT_EQ(run.compute.size(), 3u);  // the GEMM of each rank (the norms are untimed)
  EXPECT_EQ(run.compute[0].host_ranks, 2);
  EXPECT_EQ(run.compute[1].host_ranks, 2);
  EXPECT_EQ(run.compute[2].host_ranks, 1);
  pb::ExecGraph bench = measured_trace();
  bench.set_producer("orrery bench (OpenBLAS)");
  calibration::TraceSamples b;
  calibration::add_trace_samples(bench, "b.json", {}, b);
  for (const auto& s : b.compute) EXPECT_EQ(s.host_ranks, 1) << s.source;
  pb::ExecGraph profile = measured_trace();
  profile.clear_plan();
  for (auto& rank : *profile.mutable_ranks()) {
    for (auto& n : *rank.mutable_nodes()) n.set_dtype("bf16");  // the plan said it before
  }
  calibration::TraceSamples k;
  calibration::SampleOptions o;
  o.device = "H100-SXM";
  calibration::add_trace_samples(profile, "k.json", o, k);
  ASSERT_FALSE(k.compute.empty());
  for (const auto& s : k.compute) EXPECT_EQ(s.host_ranks, 0) << s.source;
}

// The DP all-reduce on the comm.dp stream: rank 0's copy (20 ms) starts at `rank0_start`, beside
// its GEMM (0-2 ms) until 2 ms; rank 2's (30 ms) starts when its GEMM ends.
pb::ExecGraph dp_beside_compute(double rank0_start) {
  pb::ExecGraph g = measured_trace();
  for (int r : {0, 2}) {
    pb::RankGraph& rank = *g.mutable_ranks(r);
    pb::ExecNode& grad = *rank.mutable_nodes(r == 0 ? 2 : 1);
    EXPECT_EQ(grad.name(), "dp.bucket0.all_reduce");
    rank.mutable_nodes(0)->set_start_s(0);
    grad.set_stream(1);
    grad.set_start_s(r == 0 ? rank0_start : 2e-3);
    if (r == 0) grad.set_duration_s(20e-3);
  }
  return g;
}

TEST(CalibrationSamples, CollectivesBesideComputeFitNoCurveAndInLineOnesAreBlocking) {
  const pb::ExecGraph g = dp_beside_compute(0.5e-3);
  calibration::TraceSamples out;
  calibration::add_trace_samples(g, "t.json", {}, out);
  ASSERT_EQ(out.comm.size(), 2u);
  // The TP all-reduce sits on the compute stream: a blocking sample.
  EXPECT_EQ(out.comm[0].source, "t.json: L0.mb0.fwd.attn.tp_all_reduce");
  EXPECT_TRUE(out.comm[0].blocking);
  // The DP instance is timed by rank 2's copy alone: rank 0's ran beside compute (for 1.5 ms of
  // its 20, 7.5%: too little to measure the communication slowdown either).
  EXPECT_FALSE(out.comm[1].blocking);
  EXPECT_DOUBLE_EQ(out.comm[1].seconds, 30e-3);
  EXPECT_TRUE(out.overlapped_comm.empty());
  bool said = false;
  for (const auto& n : out.notes)
    said = said ||
           n == "t.json: 1 node(s) left out: collectives beside compute for more than 5% and less "
                "than half of their stretch in flight";
  EXPECT_TRUE(said);
}

TEST(CalibrationSamples, ACollectiveThatTouchedComputeForAtMostOneTwentiethRanAlone) {
  // Rank 0's copy ran beside its GEMM for 0.5 ms of its 20 (2.5%, the tail of the op that
  // launched it): a curve sample, and the instance's fastest.
  calibration::TraceSamples out;
  calibration::add_trace_samples(dp_beside_compute(1.5e-3), "t.json", {}, out);
  ASSERT_EQ(out.comm.size(), 2u);
  EXPECT_FALSE(out.comm[1].blocking);
  EXPECT_DOUBLE_EQ(out.comm[1].seconds, 20e-3);
  EXPECT_TRUE(out.overlapped_comm.empty());
  for (const auto& n : out.notes) EXPECT_EQ(n.find("beside compute"), std::string::npos) << n;
}

// One rank of a ZeRO-style step on dgx-h100: ten 1 ms ops from 0 to 10 ms; three all-gathers
// launched together at 0 on the comm.dp stream, seen complete at op boundaries (4, 8 and 8 ms);
// then a reduce-scatter launched at 10 ms, after the last op, and waited for until 15 ms.
pb::ExecGraph zero_step() {
  pb::ExecGraph g;
  g.set_world_size(2);
  *g.mutable_cluster_spec() = topologies::load_cluster("dgx-h100", 1);
  g.mutable_plan()->mutable_job()->set_precision(pb::PRECISION_BF16);
  pb::ProcessGroup* dp = g.add_process_groups();
  dp->set_id(0);
  dp->add_ranks(0);
  dp->add_ranks(1);
  for (int64_t r = 0; r < 2; ++r) {
    pb::RankGraph& rank = *g.add_ranks();
    rank.set_rank(r);
    rank.set_device(r);
    for (int i = 0; i < 10; ++i) {
      pb::ExecNode& op = *rank.add_nodes();
      op.set_name("L" + std::to_string(i) + ".mb0.fwd.mlp.up");
      op.set_kind(pb::NODE_KIND_COMPUTE);
      op.set_op_class(pb::OP_CLASS_GEMM);
      op.set_flops(1e12);
      op.set_start_s(i * 1e-3);
      op.set_duration_s(1e-3);
    }
    auto collective = [&](const std::string& name, pb::CollectiveKind kind, double start,
                          double seen) {
      pb::ExecNode& c = *rank.add_nodes();
      c.set_name(name);
      c.set_kind(pb::NODE_KIND_COLLECTIVE);
      c.set_stream(1);
      c.set_collective(kind);
      c.set_process_group(0);
      c.set_comm_bytes(8e6);
      c.set_start_s(start);
      c.set_duration_s(seen - start);
    };
    collective("opt.L0.param_all_gather", pb::COLLECTIVE_KIND_ALL_GATHER, 0, 4e-3);
    collective("opt.L1.param_all_gather", pb::COLLECTIVE_KIND_ALL_GATHER, 0, 8e-3);
    collective("opt.L2.param_all_gather", pb::COLLECTIVE_KIND_ALL_GATHER, 0, 8e-3);
    collective("opt.dp.bucket0.reduce_scatter", pb::COLLECTIVE_KIND_REDUCE_SCATTER, 10e-3, 15e-3);
  }
  return g;
}

TEST(CalibrationSamples, CollectivesBesideComputeAreStretchesOfTheCommunicationSlowdown) {
  calibration::TraceSamples out;
  calibration::add_trace_samples(zero_step(), "z.json", {}, out);
  // Each rank's gathers are one stretch: from their launch to the middle of the op during which
  // the last was seen complete (7-8 ms): 7.5 ms, all of it beside compute.
  ASSERT_EQ(out.overlapped_comm.size(), 2u);
  for (const calibration::OverlappedCommSample& o : out.overlapped_comm) {
    EXPECT_NEAR(o.seconds, 7.5e-3, 1e-12);
    EXPECT_NEAR(o.overlap, 1.0, 1e-12);
    ASSERT_EQ(o.collectives.size(), 3u);
    for (const calibration::CommSample& c : o.collectives) {
      EXPECT_EQ(c.collective, pb::COLLECTIVE_KIND_ALL_GATHER);
      EXPECT_EQ(c.bytes, 8e6);
      EXPECT_EQ(c.ranks, 2);
      EXPECT_EQ(c.scope, "intra_node");
    }
  }
  EXPECT_EQ(out.overlapped_comm[0].source, "z.json: rank 0, opt.L0.param_all_gather and 2 more");
  // The gathers are no curve samples; the reduce-scatter ran alone (the rank waited for it, so it
  // ended when its node did): one instance of 5 ms.
  ASSERT_EQ(out.comm.size(), 1u) << (out.notes.empty() ? "" : out.notes[0]);
  EXPECT_EQ(out.comm[0].collective, pb::COLLECTIVE_KIND_REDUCE_SCATTER);
  EXPECT_NEAR(out.comm[0].seconds, 5e-3, 1e-12);

  // Rank 1's first gather seen only at 9 ms and the others at 10 ms: its stretch ends in the
  // middle of the last op (9.5 ms).
  pb::ExecGraph late = zero_step();
  for (auto& n : *late.mutable_ranks(1)->mutable_nodes()) {
    if (n.name() == "opt.L0.param_all_gather") n.set_duration_s(9e-3);
    if (n.name() == "opt.L1.param_all_gather" || n.name() == "opt.L2.param_all_gather")
      n.set_duration_s(10e-3);
  }
  calibration::TraceSamples l;
  calibration::add_trace_samples(late, "z.json", {}, l);
  ASSERT_EQ(l.overlapped_comm.size(), 2u);
  EXPECT_NEAR(l.overlapped_comm[1].seconds, 9.5e-3, 1e-12);
}

TEST(CalibrationSamples, UntimedTimeIsSpreadOverTheComputeStreamsOps) {
  pb::ExecGraph g = measured_trace();
  g.mutable_ranks(0)->set_untimed_s(0.9e-3);
  g.mutable_ranks(0)->mutable_nodes(2)->set_stream(
      1);                                     // the DP all-reduce: not on the compute stream
  g.mutable_ranks(1)->set_untimed_s(0.6e-3);  // rank 2 did not measure it
  calibration::TraceSamples out;
  calibration::add_trace_samples(g, "t.json", {}, out);
  ASSERT_EQ(out.dispatch.size(), 2u);
  // Rank 0: the GEMM, the TP all-reduce and the norm; rank 1 the same three.
  EXPECT_DOUBLE_EQ(out.dispatch[0].per_op_s, 0.3e-3);
  EXPECT_DOUBLE_EQ(out.dispatch[1].per_op_s, 0.2e-3);
  EXPECT_EQ(out.dispatch[0].source, "t.json: rank 0");
  EXPECT_EQ(out.dispatch[0].device, out.compute[0].device);
  EXPECT_EQ(out.devices.count(out.dispatch[0].device), 1u);
}

TEST(CalibrationSamples, DevicesPeaksInstancesAndScopes) {
  calibration::TraceSamples out;
  calibration::add_trace_samples(measured_trace(), "run/trace.json", {}, out);
  // One GEMM per rank, on H100-SXM against its bf16 peak (the plan's precision): 989 TFLOP/s.
  ASSERT_EQ(out.compute.size(), 3u);
  EXPECT_EQ(out.compute[0].device, "H100-SXM");
  EXPECT_DOUBLE_EQ(out.compute[0].peak_flops_per_s, 989e12);
  EXPECT_DOUBLE_EQ(out.compute[0].bytes, 1e8);
  EXPECT_EQ(out.compute[0].source, "run/trace.json: L0.mb0.fwd.attn.qkv");
  ASSERT_TRUE(out.devices.count("H100-SXM"));
  // The TP all-reduce ran on ranks 0 and 1: one instance, timed by the faster rank (300 us);
  // its group stays in node 0. The DP one spans the two nodes.
  ASSERT_EQ(out.comm.size(), 2u);
  EXPECT_EQ(out.comm[0].scope, "intra_node");
  EXPECT_DOUBLE_EQ(out.comm[0].seconds, 300e-6);
  EXPECT_EQ(out.comm[0].ranks, 2);
  EXPECT_EQ(out.comm[1].scope, "inter_node");
  EXPECT_DOUBLE_EQ(out.comm[1].bytes, 1e9);
  ASSERT_EQ(out.notes.size(), 1u);
  EXPECT_EQ(out.notes[0], "run/trace.json: 3 node(s) left out: no duration_s");
}

TEST(CalibrationSamples, AReceivePostedAfterItsSendIsAPointToPointSample) {
  pb::ExecGraph g = measured_trace();
  // Rank 0 sends 1 MB to rank 2 (node 1) at 1 ms and to rank 1 at 3 ms; rank 2 posts its receive
  // at 2 ms (after the send: 0.5 ms is the transfer alone), rank 1 at 2.5 ms (before: it waited).
  auto transfer = [&](int64_t to, int64_t tag, double send_s, double recv_s) {
    pb::ExecNode& send = *g.mutable_ranks(0)->add_nodes();
    send.set_id(g.ranks(0).nodes_size() - 1);
    send.set_name("mb0.fwd.send.act");
    send.set_kind(pb::NODE_KIND_SEND);
    send.set_peer(to), send.set_tag(tag), send.set_comm_bytes(1e6);
    send.set_start_s(send_s), send.set_duration_s(9e-3);  // seen complete much later
    pb::ExecNode& recv = *g.mutable_ranks(to)->add_nodes();
    recv.set_id(g.ranks(to).nodes_size() - 1);
    recv.set_name("mb0.fwd.recv.act");
    recv.set_kind(pb::NODE_KIND_RECV);
    recv.set_peer(0), recv.set_tag(tag), recv.set_comm_bytes(1e6);
    recv.set_start_s(recv_s), recv.set_duration_s(0.5e-3);
  };
  transfer(2, 5, 1e-3, 2e-3);
  transfer(1, 6, 3e-3, 2.5e-3);
  calibration::TraceSamples out;
  calibration::add_trace_samples(g, "run/trace.json", {}, out);
  std::vector<calibration::CommSample> p2p;
  for (const auto& c : out.comm) {
    if (c.collective == pb::COLLECTIVE_KIND_UNSPECIFIED) p2p.push_back(c);
  }
  ASSERT_EQ(p2p.size(), 1u);
  EXPECT_EQ(p2p[0].scope, "inter_node");
  EXPECT_DOUBLE_EQ(p2p[0].seconds, 0.5e-3);
  EXPECT_DOUBLE_EQ(p2p[0].bytes, 1e6);
  EXPECT_EQ(p2p[0].ranks, 2);
  EXPECT_FALSE(p2p[0].blocking);
  EXPECT_EQ(p2p[0].source, "run/trace.json: rank 2, mb0.fwd.recv.act");
  // Next to the fixture's untimed nodes' note.
  ASSERT_EQ(out.notes.size(), 2u);
  EXPECT_EQ(out.notes[1],
            "run/trace.json: 1 node(s) left out: receives posted before their send (they waited "
            "for the sender)");
}

TEST(CalibrationSamples, ThePlansPrecisionWinsOverTheNodesDtype) {
  // The simulator takes every op of a plan at the plan's precision (ComputeCostModel), so the
  // samples of a plan's trace are measured against that peak, whatever an op's output was (a
  // bf16 run's norms and losses are fp32); the node's dtype serves traces without a plan.
  pb::ExecGraph g = measured_trace();
  g.mutable_plan()->mutable_job()->set_precision(pb::PRECISION_BF16);
  g.mutable_ranks(0)->mutable_nodes(0)->set_dtype("fp32");
  calibration::TraceSamples out;
  calibration::add_trace_samples(g, "t.json", {}, out);
  EXPECT_DOUBLE_EQ(out.compute[0].peak_flops_per_s, 989e12);  // H100-SXM bf16, not fp32's 67e12
  g.clear_plan();
  for (auto& rank : *g.mutable_ranks()) {
    for (auto& n : *rank.mutable_nodes()) n.set_dtype("bf16");
  }
  g.mutable_ranks(0)->mutable_nodes(0)->set_dtype("fp8");
  calibration::TraceSamples bench;
  calibration::add_trace_samples(g, "t.json", {}, bench);
  EXPECT_DOUBLE_EQ(bench.compute[0].peak_flops_per_s, 1979e12);  // H100-SXM fp8
}

TEST(CalibrationSamples, ALoweredGraphIsNotAMeasurement) {
  pb::ExecGraph g = measured_trace();
  for (auto& r : *g.mutable_ranks()) {
    for (auto& n : *r.mutable_nodes()) n.clear_duration_s();
  }
  calibration::TraceSamples out;
  try {
    calibration::add_trace_samples(g, "graph.json", {}, out);
    FAIL() << "accepted";
  } catch (const base::InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "graph.json: ranks[].nodes[].duration_s: no node has a measured duration: this is a "
              "lowered graph "
              "(orrery simulate --graph), not a measured trace (orrery bench --out, orrery run "
              "--out, a PyTorch "
              "profiler trace)");
  }
}

TEST(CalibrationSamples, UnknownDeviceAndDtypeAreNamed) {
  pb::ExecGraph g = measured_trace();
  g.clear_cluster_spec();
  g.set_device("H100-SXN");
  calibration::TraceSamples out;
  try {
    calibration::add_trace_samples(g, "k.json", {}, out);
    FAIL() << "accepted";
  } catch (const base::InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "k.json: device: device 'H100-SXN' is not in the trace's cluster or the device "
              "database (did you mean "
              "'H100-SXM'?); pass --device NAME, or --cluster FILE|local that defines it");
  }
  calibration::SampleOptions options;
  options.device = "H100-SXM";
  g.mutable_ranks(1)->mutable_nodes(0)->set_dtype("bf61");
  try {
    calibration::add_trace_samples(g, "k.json", options, out);
    FAIL() << "accepted";
  } catch (const base::InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "k.json: ranks[1].nodes[0].dtype: got 'bf61' (did you mean 'bf16'?)");
  }
}

TEST(CalibrationSamples, TracesWithoutAClusterUseTheGivenScope) {
  pb::ExecGraph g = measured_trace();
  g.clear_cluster_spec();
  calibration::SampleOptions options;
  options.device = "H100-SXM";
  options.comm_scope = "inter_node";
  calibration::TraceSamples out;
  calibration::add_trace_samples(g, "k.json", options, out);
  ASSERT_EQ(out.comm.size(), 2u);
  EXPECT_EQ(out.comm[0].scope, "inter_node");
  EXPECT_EQ(out.comm[1].scope, "inter_node");
}

}  // namespace
}  // namespace orrery::sim
