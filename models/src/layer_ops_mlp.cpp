// The FFN half of a decoder layer: a dense MLP (up [+ gate], activation, down) or an MoE block
// (router, shared experts, routed experts), then the residual.
//
// Tensor parallelism follows Megatron: up/gate are column parallel, down is row parallel and
// followed by the TP reduction. Experts are split by TP the same way (expert tensor parallelism
// equal to TP, Megatron-Core's default) and by EP over ranks: each rank holds
// num_experts / ep experts. EP ranks are data-parallel replicas of the dense part, each with its
// own micro-batch, so the EP group routes ep * tokens * top_k expert-token pairs to ep ranks: a
// rank's experts process tokens * top_k pairs on average (times moe_imbalance on the busiest).
#include <cmath>

#include "layer_ops_build.hpp"
#include "orrery/models/activation.hpp"

namespace orrery::models::detail {
namespace {

// Arithmetic per output element (these kernels are bandwidth-bound; the count is for honesty).
double activation_flops(pb::Activation a) {
  switch (a) {
    case pb::ACTIVATION_RELU:
      return 1;
    case pb::ACTIVATION_SQUARED_RELU:
      return 2;
    case pb::ACTIVATION_GELU:
      return 8;  // tanh form: cube, 2 mul-adds, tanh, 1 + t, halve
    case pb::ACTIVATION_SWIGLU:
      return 6;  // sigmoid (neg, exp, add, divide), x * s, times up
    case pb::ACTIVATION_GEGLU:
      return 9;  // GeLU, times up
    default:
      return 0;
  }
}

struct FfnShape {
  std::string prefix;     // "mlp", "moe.shared", "moe.experts"
  int64_t rows = 0;       // tokens (or expert-token pairs) through it
  double rows_exact = 0;  // the same before rounding (imbalance makes it fractional)
  int64_t width = 0;      // this rank's FFN columns
  int64_t copies = 1;     // experts held by this rank
  bool keep_input = true;
};

// up (+ gate, fused), activation, down. The down projection is returned last so callers can
// attach the collectives that follow it.
void append_ffn(const View& v, const FfnShape& f, std::vector<LayerOp>& ops) {
  const auto& spec = v.spec;
  const double act = v.ctx.activation_bytes;
  const int64_t h = spec.hidden_size();
  const int64_t up_width = (models::gated_activation(spec.activation()) ? 2 : 1) * f.width;
  const double scale = f.rows_exact / static_cast<double>(std::max<int64_t>(f.rows, 1));
  // Keeps its input: for the dense MLP under SP the sequence-sharded copy (gathered again in
  // backward, Korthikanti et al. section 4.2.2); for experts the permuted tokens.
  const double input_rows = f.prefix == "mlp" ? static_cast<double>(v.sp_tokens) : f.rows_exact;
  LayerOp up = gemm(f.prefix + ".up", f.rows, up_width, h, spec.linear_bias(),
                    f.keep_input ? input_rows * h * act : 0, v.ctx);
  LayerOp a = pointwise(f.prefix + ".act", pb::OP_CLASS_ELEMENTWISE, f.rows * f.width,
                        activation_flops(spec.activation()), kPointwiseBackwardFactor,
                        models::gated_activation(spec.activation()) ? 2 : 1,
                        f.rows_exact * up_width * act, v.ctx);
  LayerOp down = gemm(f.prefix + ".down", f.rows, h, f.width, spec.linear_bias(),
                      f.rows_exact * f.width * act, v.ctx);
  for (LayerOp* op : {&up, &a, &down}) {
    // Fractional rows (imbalance) scale the work; several experts scale weights.
    op->forward_flops *= scale;
    op->backward_flops *= scale;
    op->forward_bytes_written *= scale;
    const double weight_bytes = op->parameters * v.ctx.param_bytes;
    op->forward_bytes_read = (op->forward_bytes_read - weight_bytes) * scale +
                             weight_bytes * static_cast<double>(f.copies);
    op->parameters *= static_cast<double>(f.copies);
  }
  ops.push_back(up);
  ops.push_back(a);
  ops.push_back(down);
}

void append_dense(const View& v, std::vector<LayerOp>& ops) {
  // A parallel block's MLP reads the attention's normalized input, which attn.qkv keeps.
  const FfnShape f{"mlp",
                   v.tokens,
                   static_cast<double>(v.tokens),
                   v.spec.ffn_hidden_size() / v.ctx.tp,
                   1,
                   !v.spec.parallel_block()};
  append_ffn(v, f, ops);
}

// Copies of a token the dispatch all-to-all carries: top_k, or the nodes it reaches when its
// dispatcher sends it once per node (ShardContext::ep_dispatch_copies).
double dispatch_copies(const pb::MoeSpec& moe, const ShardContext& ctx) {
  const auto k = static_cast<double>(moe.top_k());
  return ctx.ep_dispatch_copies > 0 ? std::min(k, ctx.ep_dispatch_copies) : k;
}

LayerOp router(const View& v) {
  const auto& moe = v.spec.moe();
  const auto& ctx = v.ctx;
  const int64_t h = v.spec.hidden_size();
  const int64_t experts = moe.num_experts();
  const double rows = static_cast<double>(v.sp_tokens);  // Megatron routes SP-local tokens
  LayerOp op;
  op.name = "moe.router";
  op.op_class = pb::OP_CLASS_ROUTER;
  op.shape = {v.sp_tokens, experts, h};
  // Gating GEMM, then softmax over the experts (counted like the loss) and top-k.
  op.forward_flops = 2.0 * rows * experts * h + rows * experts * kSoftmaxLossFlopsPerElement;
  op.backward_flops = kGemmBackwardFactor * 2.0 * rows * experts * h +
                      kPointwiseBackwardFactor * rows * experts * kSoftmaxLossFlopsPerElement;
  op.parameters = static_cast<double>(h) * experts;  // replicated on every rank
  op.forward_bytes_read = rows * h * ctx.activation_bytes + op.parameters * ctx.param_bytes;
  op.forward_bytes_written = rows * experts * kRouterProbBytes;
  // Its input (also what the experts and shared experts are fed: kept once, here) and the fp32
  // routing probabilities.
  op.saved_activation_bytes = rows * h * ctx.activation_bytes + rows * experts * kRouterProbBytes;
  // In a parallel block that input is the attention's, kept by attn.qkv (or attn.q/q_down).
  if (v.spec.parallel_block()) op.saved_activation_bytes -= rows * h * ctx.activation_bytes;
  // Dispatch: each routed copy of a token goes to the rank holding its expert; (ep - 1) / ep of
  // them leave this rank. Sent once per node it reaches, a token is fewer copies.
  if (ctx.ep > 1) {
    op.ep_alltoall_bytes = rows * dispatch_copies(moe, ctx) * h * ctx.activation_bytes *
                           static_cast<double>(ctx.ep - 1) / static_cast<double>(ctx.ep) *
                           moe_traffic_scale(ctx);
  }
  // Folded experts split over etp ranks: each gathers the tokens its etp peers received.
  if (ctx.etp > 1) {
    op.etp_comm_bytes = static_cast<double>(ctx.etp) * rows * moe.top_k() * h *
                        ctx.activation_bytes * moe_traffic_scale(ctx);
  }
  return op;
}

void append_moe(const View& v, std::vector<LayerOp>& ops) {
  const auto& moe = v.spec.moe();
  const auto& ctx = v.ctx;
  LayerOp r = router(v);
  const double alltoall = r.ep_alltoall_bytes, r_etp_bytes = r.etp_comm_bytes;
  ops.push_back(r);
  if (moe.num_shared_experts() > 0) {
    // All shared experts run on every token: one FFN of their combined width.
    const int64_t width = moe.num_shared_experts() * (moe.shared_expert_ffn_hidden_size() > 0
                                                          ? moe.shared_expert_ffn_hidden_size()
                                                          : moe.expert_ffn_hidden_size());
    append_ffn(v, {"moe.shared", v.tokens, static_cast<double>(v.tokens), width / ctx.tp, 1, false},
               ops);
  }
  // Folded: the etp group holds the tokens its etp ranks routed (each its own sp_tokens).
  const bool folded = ctx.etp > 0;
  const double routed_tokens =
      folded ? static_cast<double>(ctx.etp * v.sp_tokens) : static_cast<double>(v.tokens);
  const double pairs = routed_tokens * moe.top_k() * moe_pairs_scale(ctx);
  append_ffn(v,
             {"moe.experts", static_cast<int64_t>(std::llround(pairs)), pairs,
              moe.expert_ffn_hidden_size() / (folded ? ctx.etp : ctx.tp),
              moe.num_experts() / ctx.ep, true},
             ops);
  // Combine (the reverse all-to-all) and the TP reduction of routed + shared outputs follow the
  // routed experts' down projection. Folded, the etp group reduce-scatters the routed outputs
  // and the TP reduction serves the shared experts alone.
  LayerOp& down = ops.back();
  down.ep_alltoall_bytes = alltoall;
  down.etp_comm_bytes = r_etp_bytes;
  if (folded) {
    if (ctx.tp > 1 && moe.num_shared_experts() > 0 && !v.spec.parallel_block()) {
      ops[ops.size() - 4].tp_comm_bytes =  // the shared experts' down projection
          static_cast<double>(v.tokens) * v.spec.hidden_size() * ctx.activation_bytes;
    }
    return;
  }
  if (ctx.tp > 1 && !v.spec.parallel_block()) {
    down.tp_comm_bytes =
        static_cast<double>(v.tokens) * v.spec.hidden_size() * ctx.activation_bytes;
  }
}

// Parallel block: attention and FFN outputs, each a partial sum over TP ranks, are added first
// and reduced once (GPT-NeoX's gpt_j_residual reduces mlp_output + attention_output). In backward
// the same add is the branch point where the norm's output gradient sums both branches'.
LayerOp block_sum(const View& v) {
  const int64_t elements = v.tokens * v.spec.hidden_size();
  LayerOp op = pointwise("block.sum", pb::OP_CLASS_ELEMENTWISE, elements, 1, kLinearBackwardFactor,
                         2, 0, v.ctx);
  if (v.ctx.tp > 1) op.tp_comm_bytes = static_cast<double>(elements) * v.ctx.activation_bytes;
  return op;
}

}  // namespace

void append_mlp(const View& v, int64_t layer, std::vector<LayerOp>& ops) {
  const bool parallel = v.spec.parallel_block();
  if (!parallel) {
    ops.push_back(norm("mlp.norm", v.spec.norm(), v.sp_tokens, v.spec.hidden_size(), v.ctx));
  }
  if (is_moe_layer(v.spec, layer)) {
    append_moe(v, ops);
  } else {
    append_dense(v, ops);
    if (v.ctx.tp > 1 && !parallel) {
      ops.back().tp_comm_bytes =
          static_cast<double>(v.tokens) * v.spec.hidden_size() * v.ctx.activation_bytes;
    }
  }
  if (parallel) {
    ops.push_back(block_sum(v));
    ops.push_back(residual("block.residual", v));
    return;
  }
  if (v.spec.post_block_norm()) {
    ops.push_back(norm("mlp.post_norm", v.spec.norm(), v.sp_tokens, v.spec.hidden_size(), v.ctx));
  }
  ops.push_back(residual("mlp.residual", v));
}

}  // namespace orrery::models::detail

namespace orrery::models {

// Megatron-core's capacity is per expert, ceil(factor x tokens x top_k / experts) on each rank's
// local tokens (moe_utils.get_capacity); priced here as the proportion, without the ceiling.
double moe_pairs_scale(const ShardContext& ctx) {
  if (ctx.moe_capacity_factor <= 0) return ctx.moe_imbalance;
  if (ctx.moe_pad_to_capacity) return ctx.moe_capacity_factor;
  return std::min(ctx.moe_imbalance, ctx.moe_capacity_factor);
}

// Dropped pairs are not sent (Megatron drops before the dispatch's all-to-all). moe_imbalance
// describes the busiest rank only, so above a factor of 1 the drops of hot experts are not
// subtracted from the mean: the bytes are an upper bound then.
double moe_traffic_scale(const ShardContext& ctx) {
  if (ctx.moe_capacity_factor <= 0) return 1.0;
  if (ctx.moe_pad_to_capacity) return ctx.moe_capacity_factor;
  return std::min(1.0, ctx.moe_capacity_factor);
}

}  // namespace orrery::models
