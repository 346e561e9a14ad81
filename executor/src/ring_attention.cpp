#include "ring_attention.hpp"

#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "attention_math.hpp"
#include "mixed_precision.hpp"
#include "op_checkpoint.hpp"
#include "op_trace.hpp"

namespace orrery::executor {

torch::Tensor cp_positions(int64_t seq_len, int64_t cp, int64_t rank) {
  if (cp <= 1) return torch::arange(seq_len, torch::kLong);
  const int64_t chunk = seq_len / (2 * cp), mirror = 2 * cp - 1 - rank;
  return torch::cat({torch::arange(rank * chunk, (rank + 1) * chunk, torch::kLong),
                     torch::arange(mirror * chunk, (mirror + 1) * chunk, torch::kLong)});
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Transfers of the ring pair up by tag. Every rank of a CP group runs the same layers, micro-
// batches and recomputations in the same order, so a per-process count of its transfers is the
// same number on both ends of each one.
int next_tag() {
  static int tag = 0;
  tag = (tag + 1) % (1 << 30);
  return tag;
}

// What a step needs besides the tensors, fixed in the forward pass (this rank's place in the
// ring, the current micro-batch) and carried to the backward pass in the autograd context. The
// group outlives training.
struct Ring : torch::CustomClassHolder {
  explicit Ring(const RingAttention& o)
      : group(o.ring.get()),
        cp(group->getSize()),
        me(group->getRank()),
        seq_len(o.seq_len),
        window(o.window),
        layer(o.layer),
        micro_batch(current_micro_batch()),
        scale(o.scale),
        cap(o.softcap),
        alibi(o.alibi_slopes) {}
  Group* group;
  int64_t cp, me, seq_len, window, layer, micro_batch;
  double scale, cap;
  std::vector<double> alibi;

  // The trace name of step `step`'s kernel (suffix "") or transfer (".send", ".recv").
  std::string name(const char* phase, int64_t step, const char* suffix = "") const {
    return site_name(layer, micro_batch, phase, "attn.core.ring" + std::to_string(step) + suffix);
  }
};

// The scores of this rank's queries (fp32, [b, heads, sq, d]) against the keys of CP rank
// `source` (fp32, [b, heads, sk, d], GQA heads already repeated): ALiBi's bias and the cap as the
// single-process kernel applies them (attention_math.hpp), then -inf where the key's position is
// after the query's or outside its window. `raw` receives the scores before the cap (for the
// cap's derivative).
torch::Tensor scores_of(const Ring& r, const torch::Tensor& q, const torch::Tensor& k,
                        int64_t source, torch::Tensor* raw = nullptr) {
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * r.scale;
  const auto q_pos = cp_positions(r.seq_len, r.cp, r.me).to(q.device()).view({-1, 1});
  const auto k_pos = cp_positions(r.seq_len, r.cp, source).to(q.device()).view({1, -1});
  if (!r.alibi.empty()) {
    const int64_t heads = static_cast<int64_t>(r.alibi.size());
    auto slopes = torch::tensor(r.alibi, torch::kFloat64).view({heads, 1, 1}).to(q.device());
    scores = scores + (slopes * (k_pos - q_pos).to(torch::kFloat64).unsqueeze(0)).to(q.options());
  }
  if (raw != nullptr) *raw = scores;
  if (r.cap > 0) scores = softcap(scores, r.cap);
  auto masked = k_pos > q_pos;
  if (r.window > 0) masked = masked.logical_or(k_pos <= q_pos - r.window);
  return scores.masked_fill(masked, -std::numeric_limits<float>::infinity());
}

// K or V of one block as the kernel uses them: fp32, each KV head repeated for its query heads.
torch::Tensor expanded(const torch::Tensor& kv, int64_t heads) {
  const auto x = kv.to(torch::kFloat);
  return heads == x.size(1) ? x : x.repeat_interleave(heads / x.size(1), 1);
}

// dK or dV of the repeated heads summed back onto their KV heads.
torch::Tensor folded(const torch::Tensor& grad, int64_t kv_heads) {
  if (grad.size(1) == kv_heads) return grad;
  auto s = grad.sizes().vec();
  return grad.view({s[0], kv_heads, s[1] / kv_heads, s[2], s[3]}).sum(2);
}

// Sends `out` to ring rank `to` and receives `in` from `from` while `compute()` runs; the
// transfers are timed as `send` and `recv` from when they were queued to the first op boundary
// at which they were seen complete (op_trace.hpp), as the pipeline's sends are.
template <typename Fn>
void exchange(Group* g, const torch::Tensor& out, torch::Tensor& in, int64_t to, int64_t from,
              const std::string& send, const std::string& recv, Fn&& compute) {
  std::vector<torch::Tensor> sent{gloo_view(out)}, received{gloo_view(in)};
  const int tag = next_tag();
  const auto start = TraceClock::now();
  auto send_work = g->send(sent, static_cast<int>(to), tag);
  auto recv_work = g->recv(received, static_cast<int>(from), tag);
  OpTrace* trace = current_trace();
  std::shared_ptr<const OpTrace::Watch> send_done, recv_done;
  if (trace != nullptr) {
    send_done = trace->watch([send_work] { return send_work->isCompleted(); });
    recv_done = trace->watch([recv_work] { return recv_work->isCompleted(); });
  }
  compute();
  send_work->wait();
  recv_work->wait();
  if (trace != nullptr) {
    trace->add(send, start, send_done->end_or_now());
    trace->add(recv, start, recv_done->end_or_now());
  }
}

struct RingFunction : torch::autograd::Function<RingFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const RingAttention* options) {
    const auto ring = c10::make_intrusive<Ring>(*options);
    const Ring& r = *ring;
    // The kernels compute in fp32: autocast would run their matmuls in bf16.
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const int64_t d = q.size(3);
    // Inside a layer under op-level checkpointing the ring runs in the layer's first forward
    // only: the re-run takes its output, log-sum-exp and last block from memory, as it takes a
    // collective's (op_checkpoint.hpp), and the backward below goes round the ring as usual.
    torch::Tensor last;
    const auto out_lse = kept_collective([&] {
      auto [out, lse] = forward_ring(r, q, k, v, last);
      return torch::cat({out, lse}, -1);
    });
    last = kept_collective([&] { return last; });
    ctx->saved_data["ring"] = c10::IValue::make_capsule(ring);
    // The block used last (CP rank me + 1's) starts the backward ring.
    ctx->save_for_backward(
        {q, k, v, out_lse.narrow(-1, 0, d), out_lse.narrow(-1, d, 1).contiguous(), last});
    return out_lse.narrow(-1, 0, d).to(q.scalar_type());
  }

  // The cp steps of the forward pass: the merged output and log-sum-exp (fp32), and in `last`
  // the block the last step used.
  static std::pair<torch::Tensor, torch::Tensor> forward_ring(const Ring& r, const torch::Tensor& q,
                                                              const torch::Tensor& k,
                                                              const torch::Tensor& v,
                                                              torch::Tensor& last) {
    const int64_t heads = q.size(1);
    const auto qf = q.to(torch::kFloat);
    torch::Tensor block = torch::stack({k, v}).contiguous();  // what travels, in the wire type
    torch::Tensor out, lse;
    for (int64_t t = 0; t < r.cp; ++t) {
      auto attend = [&] {
        const OpTrace::Scope scope(current_trace(), r.name("fwd", t));
        const auto scores = scores_of(r, qf, expanded(block[0], heads), (r.me - t + r.cp) % r.cp);
        // A query row sees no key of this block when all of it lies in the query's future: its
        // log-sum-exp is -inf and its probabilities 0 (step 0, the rank's own block, always
        // holds the query itself, so the merged log-sum-exp is finite from the first step).
        const auto block_lse = torch::logsumexp(scores, -1, true);
        const auto finite =
            torch::where(block_lse.isinf(), torch::zeros_like(block_lse), block_lse);
        const auto part = torch::matmul(torch::exp(scores - finite), expanded(block[1], heads));
        if (t == 0) {
          out = part, lse = block_lse;
          return;
        }
        const auto merged = torch::logaddexp(lse, block_lse);
        out = out * torch::exp(lse - merged) + part * torch::exp(block_lse - merged);
        lse = merged;
      };
      if (t + 1 == r.cp) {
        attend();
        break;
      }
      auto arriving = torch::empty_like(block);
      exchange(r.group, block, arriving, (r.me + 1) % r.cp, (r.me + r.cp - 1) % r.cp,
               r.name("fwd", t, ".send"), r.name("fwd", t, ".recv"), attend);
      block = arriving;
    }
    last = block;
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto ring = c10::static_intrusive_pointer_cast<Ring>(ctx->saved_data["ring"].toCapsule());
    const Ring& r = *ring;
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    torch::Tensor block = saved[5];
    // This function's kernels and transfers are timed below; nothing else of it belongs to the
    // backward op that ran before it.
    if (OpTrace* trace = current_trace()) trace->close_segment();
    const int64_t heads = q.size(1), kv_heads = k.size(1);
    const auto qf = q.to(torch::kFloat), dout = grads[0].to(torch::kFloat);
    const auto delta = (dout * out).sum(-1, true);  // rowsum(dO * O), FlashAttention's D
    auto dq = torch::zeros_like(qf);
    // The gradients of the travelling block's K and V, summed over the ranks it visited.
    auto block_grads = torch::zeros_like(block);
    for (int64_t u = 0; u < r.cp; ++u) {
      const int64_t source = (r.me + 1 + u) % r.cp;
      auto attend = [&] {
        const OpTrace::Scope scope(current_trace(), r.name("bwd", u));
        const auto kf = expanded(block[0], heads), vf = expanded(block[1], heads);
        torch::Tensor raw;
        const auto probs = torch::exp(scores_of(r, qf, kf, source, &raw) - lse);
        const auto dv = torch::matmul(probs.transpose(-2, -1), dout);
        auto dscores = probs * (torch::matmul(dout, vf.transpose(-2, -1)) - delta);
        if (r.cap > 0) dscores = dscores * (1 - torch::tanh(raw / r.cap).pow(2));
        dscores = dscores * r.scale;
        dq = dq + torch::matmul(dscores, kf);
        const auto dk = torch::matmul(dscores.transpose(-2, -1), qf);
        block_grads = block_grads + torch::stack({folded(dk, kv_heads), folded(dv, kv_heads)})
                                        .to(block_grads.scalar_type());
      };
      if (u + 1 == r.cp) {
        attend();
        break;
      }
      // Backwards round the ring, so the block ends on its owner after cp - 1 hops: its K and V
      // travel while this step computes with them, the gradients it has gathered once they
      // include this step's (as ring attention's backward passes them); both transfers are
      // timed under the step's one send and one receive, which the lowering prices as one
      // transfer of the two.
      const int64_t to = (r.me + r.cp - 1) % r.cp, from = (r.me + 1) % r.cp;
      auto next_block = torch::empty_like(block), next_grads = torch::empty_like(block_grads);
      exchange(r.group, block, next_block, to, from, r.name("bwd", u, ".send"),
               r.name("bwd", u, ".recv"), attend);
      exchange(r.group, block_grads.contiguous(), next_grads, to, from, r.name("bwd", u, ".send"),
               r.name("bwd", u, ".recv"), [] {});
      block = next_block;
      block_grads = next_grads;
    }
    return {dq.to(q.scalar_type()), block_grads[0].to(k.scalar_type()),
            block_grads[1].to(v.scalar_type()), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const RingAttention& ring) {
  return RingFunction::apply(q, k, v, &ring);
}

}  // namespace orrery::executor
