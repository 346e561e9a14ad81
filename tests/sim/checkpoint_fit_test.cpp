// Checkpoint storage bandwidths from measured saves and loads (calibration/checkpoint_fit.hpp),
// on a two-node trace whose numbers are checked by hand.
#include <gtest/gtest.h>

#include "orrery/calibration/checkpoint_fit.hpp"
#include "orrery/topologies/cluster_catalog.hpp"

namespace orrery::calibration {
namespace {

pb::CheckpointIo io(pb::CheckpointOp op, double bytes, double host_s, double file_s,
                    const std::string& fs) {
  pb::CheckpointIo x;
  x.set_op(op);
  x.set_step(4);
  x.set_bytes(bytes);
  x.set_host_s(host_s);
  x.set_file_s(file_s);
  x.set_filesystem(fs);
  return x;
}

// 16 ranks on two DGX H100 nodes (8 GPUs each, ranks on devices 0-15). Every rank saves 1 GB on
// xfs, serialized in 0.5 s; on node 0 one rank's write takes 2 s, the others 1 s. Every rank
// loads its 1 GB from NFS in 0.25 s (node 1: 0.5 s).
pb::ExecGraph two_node_trace() {
  pb::ExecGraph g;
  *g.mutable_cluster_spec() = topologies::load_cluster("dgx-h100", 2);
  for (int r = 0; r < 16; ++r) {
    auto* rank = g.add_ranks();
    rank->set_rank(r);
    rank->set_device(r);
    *rank->add_checkpoint_io() = io(pb::CHECKPOINT_OP_SAVE, 1e9, 0.5, r == 3 ? 2.0 : 1.0, "xfs");
    *rank->add_checkpoint_io() = io(pb::CHECKPOINT_OP_LOAD, 1e9, 0.1, r < 8 ? 0.25 : 0.5, "nfs");
  }
  return g;
}

TEST(CheckpointFit, NodeBandwidthsByHand) {
  std::vector<CheckpointSample> samples;
  std::vector<std::string> notes;
  add_checkpoint_samples(two_node_trace(), "t.json", samples, notes);
  ASSERT_EQ(samples.size(), 4u);  // save and load on each of two nodes
  EXPECT_TRUE(notes.empty());
  const CheckpointFit fit = fit_checkpoint_storage(samples);
  // Saves: node 0 writes 8 GB in its slowest rank's 2 s (4 GB/s), node 1 in 1 s (8 GB/s).
  EXPECT_DOUBLE_EQ(fit.storage.local_write_bytes_per_s(), 6e9);  // the median of the two
  // Loads over NFS: 8 GB in 0.25 s and in 0.5 s.
  EXPECT_DOUBLE_EQ(fit.storage.remote_node_read_bytes_per_s(), (32e9 + 16e9) / 2);
  // Host copies: 1 GB in 0.5 s on every rank (loads' deserialization is not a host copy).
  EXPECT_DOUBLE_EQ(fit.storage.host_copy_bytes_per_s(), 2e9);
  EXPECT_FALSE(fit.storage.has_remote_node_bytes_per_s());
  EXPECT_FALSE(fit.storage.has_local_read_bytes_per_s());
  ASSERT_EQ(fit.lines.size(), 3u);
  EXPECT_EQ(fit.lines[1].field, "local_write_bytes_per_s");
  EXPECT_EQ(fit.lines[1].samples, 2);
  EXPECT_DOUBLE_EQ(fit.lines[1].min, 4e9);
  EXPECT_DOUBLE_EQ(fit.lines[1].max, 8e9);
}

TEST(CheckpointFit, MemoryAndUnknownFileSystemsAreLeftOutWithTheReason) {
  pb::ExecGraph g = two_node_trace();
  for (auto& rank : *g.mutable_ranks()) {
    rank.mutable_checkpoint_io(0)->set_filesystem("tmpfs");
    rank.mutable_checkpoint_io(1)->set_filesystem("fuse");
  }
  std::vector<CheckpointSample> samples;
  std::vector<std::string> notes;
  add_checkpoint_samples(g, "t.json", samples, notes);
  const CheckpointFit fit = fit_checkpoint_storage(samples);
  EXPECT_FALSE(fit.storage.has_local_write_bytes_per_s());
  EXPECT_FALSE(fit.storage.has_remote_node_read_bytes_per_s());
  EXPECT_TRUE(fit.storage.has_host_copy_bytes_per_s());
  std::string said;
  for (const auto& l : fit.lines) said += l.what + "\n";
  EXPECT_NE(said.find("tmpfs (memory) left out: a memory file system measures RAM"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("fuse (unknown) left out"), std::string::npos) << said;
}

TEST(CheckpointFit, ATraceWithoutItsClusterIsNamedInTheNotes) {
  pb::ExecGraph g = two_node_trace();
  g.clear_cluster_spec();
  std::vector<CheckpointSample> samples;
  std::vector<std::string> notes;
  add_checkpoint_samples(g, "t.json", samples, notes);
  EXPECT_TRUE(samples.empty());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("t.json: checkpoint saves and loads left out"), std::string::npos);
}

}  // namespace
}  // namespace orrery::calibration
