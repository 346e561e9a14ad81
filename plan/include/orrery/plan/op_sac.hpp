// Op-level selective activation checkpointing (plan field `recompute: selective_op`): torchtitan's
// "selective, op" policy (torch.utils.checkpoint's selective checkpointing around each decoder
// layer). In a layer's forward it keeps the outputs of the ops on its save list, the attention
// kernel (scaled_dot_product_attention) and every other matmul, counted in the order the layer
// calls them (the 1st, 3rd, 5th ... are kept), and nothing else but the layer's input; in backward
// it re-runs the layer's forward, taking the kept outputs from memory instead of recomputing
// them. So a layer holds its input and those outputs between its forward and its backward, and
// the backward re-runs every other op (norms, RoPE, activations, residual adds) and every second
// matmul. docs/simulator.md, "Op-level selective checkpointing".
//
// orrery's ops fuse some matmuls the policy counts one by one: attn.qkv is the q, k and v
// projections (q and v kept, k recomputed: matmuls 1-3 of a layer), a gated mlp.up is the gate
// and up projections. The routed experts' grouped GEMMs (moe.*) are not plain matmuls and are not
// on the save list: recomputed, as are a materialized attention's batched matmuls (only the fused
// attention kernel, attn.core, is kept). The embedding and the head are outside the
// checkpointed layers.
#pragma once

#include <cstdint>
#include <vector>

#include "orrery/models/layer_ops.hpp"
#include "orrery/pb/model.pb.h"

namespace orrery::plan {

struct OpSacSplit {
  double kept_bytes = 0;          // of the op's outputs, what stays in memory until backward
  double recompute_fraction = 0;  // of the op's forward work, what the backward re-runs
};

// Whether a decoder layer's matmul number `index` (0-based, in the order the layer calls them,
// counted afresh in each layer's forward) is kept: every other one, starting with the first
// (torchtitan counts aten.mm calls and saves the odd ones, 1-based).
constexpr bool keeps_matmul(int64_t index) { return index % 2 == 0; }

// Whether `op` is one of the plain matmuls the policy counts: a GEMM of a decoder layer that is
// neither a routed/shared expert's (moe.*) nor a materialized attention's batched matmul
// (attn.scores, attn.context: aten.bmm, not aten.mm).
bool counted_matmul(const models::LayerOp& op);

// Whether `op` belongs to a decoder layer (not the embedding or the head).
bool in_decoder_layer(const models::LayerOp& op);

// One decoder layer's ops, in forward order, split as the policy above does; `act_bytes`: bytes
// per activation element.
std::vector<OpSacSplit> op_sac_split(const std::vector<models::LayerOp>& layer,
                                     const pb::ModelSpec& model, double act_bytes);

}  // namespace orrery::plan
