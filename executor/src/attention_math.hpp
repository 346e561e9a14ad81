// The attention variants beyond plain causal softmax attention, as tensors: which keys a query
// may see (causal, or within a sliding window), ALiBi's per-head linear biases, and logit
// soft-capping. Free functions so tests can check each against hand-computed values.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace orrery::executor {

// [s, s] booleans, true where query i may NOT attend to key j: j > i (causal), and with a sliding
// window w > 0 also j <= i - w (each query sees itself and the w - 1 keys before it, the
// ModelSpec's sliding_window as Mistral and Gemma define it). window 0 or >= s: causal only.
torch::Tensor attention_mask(int64_t s, int64_t window, const torch::TensorOptions& options);

// ALiBi slopes of all `heads` heads (Press et al. 2022, as BLOOM and MPT compute them): for the
// largest power of two n <= heads, 2^(-8 i / n) for i = 1..n; the remaining heads take every
// other slope of the 2n sequence, 2^(-4 (2 i - 1) / n) for i = 1..heads - n.
std::vector<double> alibi_slopes(int64_t heads);

// [count, s, s]: slope_h x (j - i) for the heads [first, first + count) (a TP rank's heads), to be
// added to the scores: 0 on the diagonal, more negative the further back the key. (BLOOM adds
// slope x j; a softmax row does not see the difference, which is slope x i for every key.)
torch::Tensor alibi_bias(int64_t heads, int64_t first, int64_t count, int64_t s,
                         const torch::TensorOptions& options);

// cap x tanh(x / cap) (Gemma 2's attention and final-logit soft-capping).
torch::Tensor softcap(const torch::Tensor& x, double cap);

}  // namespace orrery::executor
