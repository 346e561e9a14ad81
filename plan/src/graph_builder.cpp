#include "orrery/plan/graph_builder.hpp"
#include "orrery/plan/layer_program.hpp"

#include <algorithm>

#include "orrery/base/error.hpp"

namespace orrery::plan::detail {

std::string site_prefix(const Site& s) {
  std::string out;
  if (s.layer >= 0) out += "L" + std::to_string(s.layer) + ".";
  if (s.micro_batch >= 0) out += "mb" + std::to_string(s.micro_batch) + ".";
  switch (s.phase) {
    case pb::PHASE_FORWARD:
      out += "fwd.";
      break;
    case pb::PHASE_BACKWARD:
      out += "bwd.";
      break;
    case pb::PHASE_RECOMPUTE:
      out += "rcp.";
      break;
    case pb::PHASE_OPTIMIZER:
      out += "opt.";
      break;
    default:
      break;
  }
  return out;
}

pb::ExecNode* GraphBuilder::add(const Site& site, pb::NodeKind kind, int32_t stream,
                                const std::string& what, std::vector<int64_t> deps) {
  pb::ExecNode* n = rank_->add_nodes();
  n->set_id(rank_->nodes_size() - 1);
  n->set_name(site_prefix(site) + what);
  n->set_kind(kind);
  n->set_stream(stream);
  n->set_phase(site.phase);
  n->set_layer(site.layer);
  n->set_micro_batch(site.micro_batch);
  n->set_stage(site.stage);
  // Same-stream order is implied; keep only cross-stream dependencies, sorted and unique, so the
  // graph is small and canonical.
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  for (int64_t d : deps) {
    if (d < 0) continue;
    ORRERY_CHECK(d < n->id(), "a dependency must precede its node");
    if (rank_->nodes(static_cast<int>(d)).stream() == stream) continue;
    n->add_data_deps(d);
  }
  ORRERY_CHECK(stream >= 0 && stream < static_cast<int32_t>(last_on_stream_.size()),
               "stream out of range");
  last_on_stream_[static_cast<size_t>(stream)] = n->id();
  return n;
}

int64_t GraphBuilder::last_on(int32_t stream) const {
  return last_on_stream_[static_cast<size_t>(stream)];
}

int64_t GraphBuilder::compute(const Site& site, const models::LayerOp& op, double flop_scale,
                              std::vector<int64_t> deps, const std::string& suffix) {
  pb::ExecNode* n = add(site, pb::NODE_KIND_COMPUTE, 0, op.name + suffix, std::move(deps));
  n->set_op_class(op.op_class);
  n->set_op(op.name);
  n->set_dtype(op.dtype);  // "fp8" for an fp8 recipe's ops, else empty: the plan's precision
  n->set_attention_kernel(op.attention_kernel);  // attn.core's kernel, else unspecified
  const Work w = op_work(op, site.phase);
  n->set_flops(w.flops * flop_scale);
  n->set_bytes_read(w.bytes_read * flop_scale);
  n->set_bytes_written(w.bytes_written * flop_scale);
  for (int64_t s : op.shape) n->add_shape(s);
  return n->id();
}

int64_t GraphBuilder::copy(const Site& site, const std::string& what, const std::string& op,
                           const CopyWork& work, std::vector<int64_t> deps) {
  pb::ExecNode* n = add(site, pb::NODE_KIND_COMPUTE, 0, what, std::move(deps));
  n->set_op_class(pb::OP_CLASS_COPY);
  n->set_op(op);
  n->set_bytes_read(work.bytes_read);
  n->set_bytes_written(work.bytes_written);
  for (int64_t s : work.shape) n->add_shape(s);
  return n->id();
}

int64_t GraphBuilder::optimizer(const std::string& name, double params, double read, double written,
                                std::vector<int64_t> deps) {
  pb::ExecNode* n =
      add({pb::PHASE_OPTIMIZER, -1, -1, -1}, pb::NODE_KIND_COMPUTE, 0, name, std::move(deps));
  n->set_op_class(pb::OP_CLASS_OPTIMIZER);
  n->set_op(name);
  // AdamW: about 12 FLOPs per parameter (moments, bias correction, sqrt, divide, decay, update).
  n->set_flops(12.0 * params);
  n->set_bytes_read(read * params);
  n->set_bytes_written(written * params);
  n->add_shape(static_cast<int64_t>(params));
  return n->id();
}

int64_t GraphBuilder::collective(const Site& site, int32_t stream, const std::string& what,
                                 pb::CollectiveKind kind, int64_t group, double bytes,
                                 std::vector<int64_t> deps) {
  pb::ExecNode* n = add(site, pb::NODE_KIND_COLLECTIVE, stream, what, std::move(deps));
  n->set_collective(kind);
  n->set_process_group(group);
  n->set_comm_bytes(bytes);
  return n->id();
}

int64_t GraphBuilder::p2p(pb::NodeKind kind, const Site& site, int32_t stream,
                          const std::string& what, int64_t peer, int64_t tag, double bytes,
                          std::vector<int64_t> deps) {
  pb::ExecNode* n = add(site, kind, stream, what, std::move(deps));
  n->set_peer(peer);
  n->set_tag(tag);
  n->set_comm_bytes(bytes);
  return n->id();
}

int64_t GraphBuilder::send(const Site& site, int32_t stream, const std::string& what, int64_t peer,
                           int64_t tag, double bytes, std::vector<int64_t> deps) {
  return p2p(pb::NODE_KIND_SEND, site, stream, what, peer, tag, bytes, std::move(deps));
}

int64_t GraphBuilder::recv(const Site& site, int32_t stream, const std::string& what, int64_t peer,
                           int64_t tag, double bytes, std::vector<int64_t> deps) {
  return p2p(pb::NODE_KIND_RECV, site, stream, what, peer, tag, bytes, std::move(deps));
}

}  // namespace orrery::plan::detail
