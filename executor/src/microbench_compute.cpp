// The compute microbenchmarks (see microbench.hpp): fp32 GEMMs, the attention core, memory-bound
// ops. FLOPs and bytes as models/src/layer_ops_build.hpp counts them: GEMM 2mnk FLOPs reading
// A and B and writing C; attention 2 x 2bhs^2d (QK^T and PV, no causal mask here) reading Q, K,
// V and writing O; softmax 5, LayerNorm 8, RMSNorm 4, add 1 FLOP per element, a copy none; norms
// read the input and their weights, embedding lookups the gathered rows and the indices.
#include <string>

#include <torch/torch.h>

#include "keep_freed_memory.hpp"
#include "microbench_timing.hpp"
#include "orrery/base/error.hpp"
#include "orrery/executor/microbench.hpp"

namespace orrery::executor {
namespace {

constexpr double kFloatBytes = 4;
constexpr double kIndexBytes = 8;  // int64 token ids
constexpr double kSoftmaxFlopsPerElement = 5;
constexpr double kLayerNormFlopsPerElement = 8;
constexpr double kRmsNormFlopsPerElement = 4;
constexpr double kNormEps = 1e-5;
constexpr int64_t kHidden = 1024;  // row width of the norms and softmax, and the embedding's

struct GemmShape {
  int64_t m, n, k;
};

std::vector<GemmShape> gemm_shapes(bool quick) {
  if (quick)
    return {{64, 64, 64}, {256, 256, 256}, {512, 512, 512}, {1, 2048, 2048}, {16, 2048, 2048}};
  // Squares for the efficiency curve, tall and deep ones, and skinny ones (few rows against a
  // large weight) that are bound by reading the weight: calibration needs both regimes.
  return {{16, 16, 16},     {64, 64, 64},       {128, 128, 128},    {256, 256, 256},
          {512, 512, 512},  {1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 512, 512},
          {512, 4096, 512}, {512, 512, 4096},   {1, 4096, 4096},    {4, 4096, 4096},
          {16, 4096, 4096}, {64, 4096, 4096}};
}

std::vector<int64_t> attention_lengths(bool quick) {
  if (quick) return {128, 256};
  return {128, 256, 512, 1024};
}

// From 16 KiB, where a call costs little more than its dispatch (the fixed cost per op the fit
// calls overhead_s), to 64 MiB, past the private caches.
std::vector<int64_t> memory_elements(bool quick) {
  if (quick) return {int64_t{1} << 12, int64_t{1} << 18, int64_t{1} << 22};
  return {int64_t{1} << 12, int64_t{1} << 18, int64_t{1} << 20, int64_t{1} << 22, int64_t{1} << 24};
}

std::string dims(const std::vector<int64_t>& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s;
}

class ComputeBench {
 public:
  explicit ComputeBench(const BenchOptions& options)
      : options_(options), origin_(detail::BenchClock::now()) {}

  std::vector<OpMeasurement> run() {
    torch::NoGradGuard no_grad;
    const int threads = at::get_num_threads();
    at::set_num_threads(1);        // one `local` device is one core
    detail::KeepFreedMemory keep;  // no page faults measured as the op (keep_freed_memory.hpp)
    torch::manual_seed(0);
    total_ = static_cast<int64_t>(gemm_shapes(options_.quick).size() +
                                  4 * attention_lengths(options_.quick).size() +
                                  6 * memory_elements(options_.quick).size());
    for (const GemmShape& g : gemm_shapes(options_.quick)) gemm(g);
    for (int64_t s : attention_lengths(options_.quick)) attention(s);
    for (int64_t n : memory_elements(options_.quick)) memory_bound(n);
    at::set_num_threads(threads);
    return std::move(out_);
  }

 private:
  template <typename Fn>
  void measure(OpMeasurement m, Fn&& fn) {
    if (options_.progress) {
      options_.progress(m.name + " (" + std::to_string(out_.size() + 1) + "/" +
                        std::to_string(total_) + ")");
    }
    const detail::Timing t = detail::time_op(fn, options_, origin_);
    m.seconds = t.seconds;
    m.start_s = t.start_s;
    out_.push_back(std::move(m));
  }

  void gemm(const GemmShape& g) {
    const auto a = torch::randn({g.m, g.k}), b = torch::randn({g.k, g.n});
    OpMeasurement m;
    m.op = "gemm";
    m.op_class = pb::OP_CLASS_GEMM;
    m.shape = {g.m, g.n, g.k};
    m.name = "gemm." + dims(m.shape);
    m.flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    m.bytes_read = static_cast<double>(g.m * g.k + g.k * g.n) * kFloatBytes;
    m.bytes_written = static_cast<double>(g.m * g.n) * kFloatBytes;
    measure(std::move(m), [&] { return torch::mm(a, b); });
  }

  // softmax(Q K^T / sqrt(d)) V for one sequence of 8 heads of 64, as the core and as its pieces.
  void attention(int64_t s) {
    constexpr int64_t kBatch = 1, kHeads = 8, kHeadDim = 64;
    const auto q = torch::randn({kBatch, kHeads, s, kHeadDim}),
               k = torch::randn({kBatch, kHeads, s, kHeadDim}),
               v = torch::randn({kBatch, kHeads, s, kHeadDim});
    const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
    const double bh = kBatch * kHeads, sd = static_cast<double>(s), scores = bh * sd * sd;
    const double qkv_bytes = 3 * bh * sd * kHeadDim * kFloatBytes,
                 o_bytes = bh * sd * kHeadDim * kFloatBytes;
    const std::string tag = "b" + std::to_string(kBatch) + "h" + std::to_string(kHeads) + "s" +
                            std::to_string(s) + "d" + std::to_string(kHeadDim);
    OpMeasurement core;
    core.op = "attn.core";
    core.op_class = pb::OP_CLASS_ATTENTION;
    core.shape = {kBatch, kHeads, s, s, kHeadDim};
    core.name = "attn.core." + tag;
    core.flops = 2.0 * 2.0 * scores * kHeadDim;
    core.bytes_read = qkv_bytes;
    core.bytes_written = o_bytes;
    measure(core, [&] {
      return torch::matmul(torch::softmax(torch::matmul(q, k.transpose(-2, -1)) * scale, -1), v);
    });

    OpMeasurement qk;
    qk.op = "attn.scores";
    qk.op_class = pb::OP_CLASS_GEMM;
    qk.shape = {kBatch * kHeads * s, s, kHeadDim};
    qk.name = "attn.scores." + tag;
    qk.flops = 2.0 * scores * kHeadDim;
    qk.bytes_read = 2.0 / 3.0 * qkv_bytes;
    qk.bytes_written = scores * kFloatBytes;
    const auto kt = k.transpose(-2, -1).contiguous();
    measure(qk, [&] { return torch::matmul(q, kt); });

    const auto logits = torch::matmul(q, kt) * scale;
    OpMeasurement sm;
    sm.op = "attn.softmax";
    sm.op_class = pb::OP_CLASS_ELEMENTWISE;
    sm.shape = {static_cast<int64_t>(scores)};
    sm.name = "attn.softmax." + tag;
    sm.flops = kSoftmaxFlopsPerElement * scores;
    sm.bytes_read = scores * kFloatBytes;
    sm.bytes_written = scores * kFloatBytes;
    measure(sm, [&] { return torch::softmax(logits, -1); });

    const auto probs = torch::softmax(logits, -1);
    OpMeasurement pv;
    pv.op = "attn.context";
    pv.op_class = pb::OP_CLASS_GEMM;
    pv.shape = {kBatch * kHeads * s, kHeadDim, s};
    pv.name = "attn.context." + tag;
    pv.flops = 2.0 * scores * kHeadDim;
    pv.bytes_read = scores * kFloatBytes + qkv_bytes / 3;
    pv.bytes_written = o_bytes;
    measure(pv, [&] { return torch::matmul(probs, v); });
  }

  OpMeasurement pointwise(const std::string& op, pb::OpClass op_class, int64_t n,
                          double flops_per_element, double inputs) {
    OpMeasurement m;
    m.op = op;
    m.op_class = op_class;
    m.shape = {n};
    m.name = op + "." + std::to_string(n);
    const double e = static_cast<double>(n);
    m.flops = flops_per_element * e;
    m.bytes_read = inputs * e * kFloatBytes;
    m.bytes_written = e * kFloatBytes;
    return m;
  }

  void memory_bound(int64_t n) {
    const int64_t rows = n / kHidden;
    const auto x = torch::randn({rows, kHidden}), y = torch::randn({rows, kHidden});
    const auto w = torch::randn({kHidden}), bias = torch::randn({kHidden});
    measure(pointwise("add", pb::OP_CLASS_ELEMENTWISE, n, 1, 2), [&] { return x + y; });
    // A plain copy (FSDP's copy-in and copy-out are this): no FLOPs, so its curve is bytes alone.
    measure(pointwise("copy", pb::OP_CLASS_COPY, n, 0, 1), [&] { return x.clone(); });
    OpMeasurement rms = pointwise("rmsnorm", pb::OP_CLASS_NORM, n, kRmsNormFlopsPerElement, 1);
    rms.bytes_read += kHidden * kFloatBytes;
    // As the executor's RMSNorm computes it (executor/src/model_transformer.cpp).
    measure(rms, [&] { return x * torch::rsqrt(x.pow(2).mean(-1, true) + kNormEps) * w; });
    OpMeasurement ln = pointwise("layernorm", pb::OP_CLASS_NORM, n, kLayerNormFlopsPerElement, 1);
    ln.bytes_read += 2 * kHidden * kFloatBytes;
    measure(ln, [&] { return torch::layer_norm(x, {kHidden}, w, bias, kNormEps); });
    measure(pointwise("softmax", pb::OP_CLASS_ELEMENTWISE, n, kSoftmaxFlopsPerElement, 1),
            [&] { return torch::softmax(x, -1); });
    // Gathers `rows` rows of a 8192 x 1024 table (32 MiB).
    const auto table = torch::randn({8192, kHidden});
    const auto ids = torch::randint(0, 8192, {rows}, torch::kLong);
    OpMeasurement emb;
    emb.op = "embedding";
    emb.op_class = pb::OP_CLASS_EMBEDDING;
    emb.shape = {rows, kHidden};
    emb.name = "embedding." + std::to_string(rows) + "x" + std::to_string(kHidden);
    emb.bytes_read = static_cast<double>(n) * kFloatBytes + static_cast<double>(rows) * kIndexBytes;
    emb.bytes_written = static_cast<double>(n) * kFloatBytes;
    measure(emb, [&] { return torch::embedding(table, ids); });
  }

  const BenchOptions& options_;
  detail::BenchClock::time_point origin_;
  std::vector<OpMeasurement> out_;
  int64_t total_ = 0;
};

}  // namespace

std::vector<OpMeasurement> bench_compute(const BenchOptions& options) {
  try {
    return ComputeBench(options).run();
  } catch (const c10::Error& e) {
    throw base::EnvironmentError(std::string("orrery bench: libtorch failed: ") +
                                 e.what_without_backtrace());
  }
}

}  // namespace orrery::executor
