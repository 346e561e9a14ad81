// Checkpoint storage bandwidths from the saves and loads a measured run timed (`orrery run
// --checkpoint-every / --resume --out`, RankGraph.checkpoint_io): the goodput checkpoint model's
// host copy, local NVMe and remote store bandwidths (cluster.proto CheckpointStorage), written to
// CalibrationProfile.checkpoint_storage (docs/calibration.md, "Checkpoint storage").
//
// A node's ranks save and load their shards at once, so a node's bandwidth is its ranks' bytes
// over the slowest rank's file time, as the model divides a node's bytes by its bandwidth. The
// file system the folder sat on says which field it measures: a local disk the NVMe fields, a
// network file system the remote store's per-node fields; memory (tmpfs) and unknown types (FUSE,
// 9p) measure neither and are left out with the reason.
#pragma once

#include <string>
#include <vector>

#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/exec_graph.pb.h"

namespace orrery::calibration {

// One save or load on one node of one trace.
struct CheckpointSample {
  pb::CheckpointOp op = pb::CHECKPOINT_OP_UNSPECIFIED;
  std::string filesystem;  // CheckpointIo.filesystem
  int64_t step = 0;
  int64_t ranks = 0;            // the node's ranks that took part
  double node_bytes = 0;        // their shards together
  double file_s = 0;            // the slowest rank's file time
  double host_bytes_per_s = 0;  // median over the ranks of bytes / host_s (saves; 0: not timed)
  std::string source;           // "file: node N, save after step S"
};

// Appends the trace's checkpoint samples; `notes` gets what was left out and why (a save whose
// node the trace's cluster cannot place, a zero time).
void add_checkpoint_samples(const pb::ExecGraph& trace, const std::string& file,
                            std::vector<CheckpointSample>& samples,
                            std::vector<std::string>& notes);

struct CheckpointFitLine {
  std::string field;  // "local_write_bytes_per_s"; empty for a note about left-out samples
  double value = 0;   // the median over the samples
  double min = 0, max = 0;
  int64_t samples = 0;
  std::string what;  // "3 saves on ext2/ext3 (local disk)", or why nothing was fitted
};

struct CheckpointFit {
  pb::CheckpointStorage storage;  // the fields measured, nothing else set
  std::vector<CheckpointFitLine> lines;
};

// Deterministic: the same samples give the same fit.
CheckpointFit fit_checkpoint_storage(const std::vector<CheckpointSample>& samples);

}  // namespace orrery::calibration
