// The executor's token dropping at an expert capacity (executor/src/moe_capacity.hpp), on cases
// small enough to work out by hand: which copies each expert keeps, in which order they travel,
// how many rows each expert receives, and where padding puts them.
#include <gtest/gtest.h>

#include <vector>

#include "moe_capacity.hpp"

namespace orrery::executor {
namespace {

torch::Tensor ints(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64); }
torch::Tensor floats(const std::vector<float>& v) { return torch::tensor(v, torch::kFloat32); }
std::vector<int64_t> values(const torch::Tensor& t) {
  const auto c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Megatron's get_capacity: ceil(tokens x top_k / experts x factor).
TEST(ExpertCapacity, RoundsTheMeanShareUp) {
  EXPECT_EQ(expert_capacity(1.0, 4096, 8, 256), 128);
  EXPECT_EQ(expert_capacity(1.25, 4096, 8, 256), 160);
  EXPECT_EQ(expert_capacity(1.0, 10, 2, 3), 7);  // 6.67 copies
  EXPECT_EQ(expert_capacity(0.5, 4, 1, 2), 1);
}

// Without a capacity every copy travels, grouped by expert, in token order within an expert.
TEST(RouteCopies, WithoutCapacityKeepsEveryCopy) {
  const RoutedCopies r =
      route_copies(ints({1, 0, 1, 0}), floats({0.5, 0.9, 0.7, 0.6}), 2, 1, 4, 1, {});
  EXPECT_EQ(values(r.order), (std::vector<int64_t>{1, 3, 0, 2}));
  EXPECT_EQ(values(r.rows), (std::vector<int64_t>{2, 2}));
  EXPECT_FALSE(r.slot.defined());
}

// Four one-copy tokens, three to expert 0: capacity ceil(4 / 2 x 1) = 2 keeps expert 0's two
// heaviest (copies 1 and 2, weights 0.9 and 0.7) and drops copy 0 (0.5); at factor 0.5 the
// capacity is 1 and only the heaviest of each expert stays.
TEST(RouteCopies, EachExpertKeepsItsHeaviestCopies) {
  const auto expert = ints({0, 0, 0, 1});
  const auto weight = floats({0.5, 0.9, 0.7, 0.6});
  const RoutedCopies r = route_copies(expert, weight, 2, 1, 4, 1, {1.0, false});
  EXPECT_EQ(values(r.order), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(values(r.rows), (std::vector<int64_t>{2, 1}));
  const RoutedCopies half = route_copies(expert, weight, 2, 1, 4, 1, {0.5, false});
  EXPECT_EQ(values(half.order), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(values(half.rows), (std::vector<int64_t>{1, 1}));
}

// Equal weights: the earlier copies stay.
TEST(RouteCopies, TiesKeepTheEarlierCopy) {
  const RoutedCopies r =
      route_copies(ints({0, 0, 0}), floats({0.5, 0.5, 0.5}), 1, 1, 3, 1, {0.5, false});
  EXPECT_EQ(values(r.order), (std::vector<int64_t>{0, 1}));
}

// Padded: expert 0's two kept copies fill its two rows, expert 1's one copy the first of its two
// (slot 2), and row 3 is padding.
TEST(RouteCopies, PaddingFillsEachExpertToItsCapacity) {
  const RoutedCopies r =
      route_copies(ints({0, 0, 0, 1}), floats({0.5, 0.9, 0.7, 0.6}), 2, 1, 4, 1, {1.0, true});
  EXPECT_EQ(values(r.order), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(values(r.rows), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values(r.slot), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(r.padded_rows, 4);
}

// Sequence parallelism: each of 2 slices of the sequence decides alone, with a capacity of
// ceil(2 tokens x 1 / 2 experts x 1) = 1 per slice and expert. All four copies go to expert 0
// (weights 0.8 0.9 | 0.7 0.6): one pool of capacity 2 keeps copies 0 and 1, two slices of capacity
// 1 keep 1 and 2.
TEST(RouteCopies, SequenceSlicesDecideApart) {
  const auto expert = ints({0, 0, 0, 0});
  const auto weight = floats({0.8, 0.9, 0.7, 0.6});
  EXPECT_EQ(values(route_copies(expert, weight, 2, 1, 4, 1, {1.0, false}).order),
            (std::vector<int64_t>{0, 1}));
  const RoutedCopies sliced = route_copies(expert, weight, 2, 1, 4, 2, {1.0, false});
  EXPECT_EQ(values(sliced.order), (std::vector<int64_t>{1, 2}));
  // Padded per slice: each expert receives 2 slices x 1 row; expert 1's rows are all padding.
  const RoutedCopies padded = route_copies(expert, weight, 2, 1, 4, 2, {1.0, true});
  EXPECT_EQ(values(padded.rows), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values(padded.slot), (std::vector<int64_t>{0, 1}));
}

// Two sequences of two tokens, top-2 of 2 experts, sliced in two: a token's slice is its
// position in its sequence (tokens 0 and 2 in slice 0, tokens 1 and 3 in slice 1), not its
// index in the batch. Copy c is token c / 2's; at factor 0.5 each (slice, expert) keeps one:
// slice 0 expert 0 copy 0 (0.6 over 0.45), expert 1 copy 4 (0.55 over 0.4); slice 1 expert 0
// copy 2 (0.7 over 0.2), expert 1 copy 6 (0.8 over 0.3).
TEST(RouteCopies, SlicesFollowThePositionInEachSequence) {
  const auto expert = ints({0, 1, 0, 1, 1, 0, 1, 0});
  const auto weight = floats({0.6, 0.4, 0.7, 0.3, 0.55, 0.45, 0.8, 0.2});
  const RoutedCopies r = route_copies(expert, weight, 2, 2, 2, 2, {0.5, false});
  EXPECT_EQ(values(r.order), (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(values(r.rows), (std::vector<int64_t>{2, 2}));
}

}  // namespace
}  // namespace orrery::executor
