// `orrery run --data FILE`: training on a pre-tokenized corpus (executor/token_corpus.hpp,
// docs/formats.md). A corpus generated here, a Markov chain whose entropy is known, is learned
// well below what uniformly random tokens allow; every plan reads the same bytes as one process;
// and what the file cannot be is refused naming the file, the field and the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "executor_test_util.hpp"
#include "orrery/executor/results.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

using test::Ran;

Ran run_cli(const std::string& args) { return test::run_cli(ORRERY_RUN_CLI_BIN, args); }

// A first-order Markov chain over the byte vocabulary: after token t comes (5t + 1) mod 256 or
// (5t + 129) mod 256 with equal odds (a fixed LCG's top bit picks). Its entropy rate is ln 2 =
// 0.693 nats per token; uniformly random tokens allow no less than ln 256 = 5.545.
std::vector<uint32_t> markov_tokens(size_t n) {
  std::vector<uint32_t> t{7};
  uint64_t state = 12345;
  while (t.size() < n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const uint32_t bit = static_cast<uint32_t>(state >> 63);
    t.push_back((5 * t.back() + 1 + 128 * bit) % 256);
  }
  return t;
}

// Little-endian, `width` bytes per token.
std::string write_tokens(const std::string& dir, const std::string& name,
                         const std::vector<uint32_t>& tokens, int width) {
  const std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary);
  for (uint32_t t : tokens) {
    for (int b = 0; b < width; ++b) out.put(static_cast<char>((t >> (8 * b)) & 0xff));
  }
  return path;
}

std::vector<double> losses(const std::string& dir, int64_t steps) {
  std::vector<double> l;
  for (int64_t s = 1; s <= steps; ++s) l.push_back(read_step_result(step_file(dir, s)).loss);
  return l;
}

const char* kJob = "--model tiny --cluster local --global-batch 8 --seq 64 --seed 1 ";

TEST(TokenData, LearnsAMarkovCorpusBelowWhatRandomTokensAllow) {
  const std::string dir = test::fresh_dir("data-learn");
  const std::string corpus = write_tokens(dir, "markov.u16", markov_tokens(40000), 2);
  constexpr int64_t kSteps = 60;
  const Ran r = run_cli(std::string(kJob) + "--dp 1 --lr 1e-2 --steps " + std::to_string(kSteps) +
                        " --data " + corpus + " --data-dtype uint16 --out " + dir + "/out");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto l = losses(dir + "/out", kSteps);
  std::cout << "loss: step 1 " << l.front() << ", step " << kSteps << " " << l.back()
            << " (entropy of the chain ln 2 = 0.693; random tokens ln 256 = 5.545)\n";
  EXPECT_GT(l.front(), 5.0);  // starts near ln 256: the model knows nothing yet
  // Well below what any model reaches on uniformly random tokens, and not below the chain's own
  // entropy (a loss under it would mean the targets leak into the inputs).
  EXPECT_LT(l.back(), 1.5);
  EXPECT_GT(l.back(), std::log(2.0) - 0.05);
  std::filesystem::remove_all(dir);
}

// Every rank reads its data-parallel share of the same global batch: dp 2 (and tp 2 x dp 2) train
// on exactly the rows one process trains on; and the same ids as uint32 read identically.
TEST(TokenData, EveryPlanReadsTheSameBytesAsOneProcess) {
  const std::string dir = test::fresh_dir("data-parity");
  const auto tokens = markov_tokens(1000);  // 15 windows: the 3 steps of 8 rows wrap around
  const std::string u16 = write_tokens(dir, "c.u16", tokens, 2);
  const std::string u32 = write_tokens(dir, "c.u32", tokens, 4);
  const std::string job = std::string(kJob) + "--steps 3 --micro-batch 2 ";
  const auto run = [&](const std::string& name, const std::string& args) {
    const Ran r = run_cli(job + args + " --out " + dir + "/" + name);
    EXPECT_EQ(r.status, 0) << r.out;
    return losses(dir + "/" + name, 3);
  };
  const auto one = run("one", "--dp 1 --data " + u16 + " --data-dtype uint16");
  const auto wide = run("wide", "--dp 1 --data " + u32 + " --data-dtype uint32");
  const auto dp2 = run("dp2", "--dp 2 --data " + u16 + " --data-dtype uint16");
  const auto tpdp = run("tpdp", "--tp 2 --dp 2 --data " + u16 + " --data-dtype uint16");
  const auto synthetic = run("synthetic", "--dp 1");
  for (size_t s = 0; s < one.size(); ++s) {
    EXPECT_EQ(wide[s], one[s]) << "step " << s + 1;
    EXPECT_NEAR(dp2[s], one[s], 1e-5) << "step " << s + 1;
    EXPECT_NEAR(tpdp[s], one[s], 1e-5) << "step " << s + 1;
    EXPECT_GT(std::abs(synthetic[s] - one[s]), 1e-3) << "the corpus was not read";
  }
  std::filesystem::remove_all(dir);
}

TEST(TokenData, RefusesWhatTheFileCannotBe) {
  const std::string dir = test::fresh_dir("data-refuse");
  const auto expect_refused = [&](const std::string& args, const std::string& message) {
    const Ran r = run_cli(std::string(kJob) + "--dp 1 --steps 1 " + args);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
  };
  auto tokens = markov_tokens(200);
  const std::string odd = dir + "/odd.u16";
  std::ofstream(odd, std::ios::binary) << std::string(201, '\0');
  expect_refused("--data " + odd + " --data-dtype uint16",
                 odd +
                     ": --data-dtype: the file's 201 bytes are not a whole number of uint16 "
                     "tokens (2 bytes each)");
  tokens[150] = 300;
  const std::string big = write_tokens(dir, "big.u16", tokens, 2);
  expect_refused("--data " + big + " --data-dtype uint16",
                 big + ": token 150: id 300 is not below the model's vocab_size 256");
  const std::string short_file = write_tokens(dir, "short.u32", markov_tokens(64), 4);
  expect_refused("--data " + short_file + " --data-dtype uint32",
                 short_file +
                     ": --data: holds 64 tokens, fewer than one sequence (--seq 64 "
                     "needs 65");
  expect_refused("--data " + dir + "/absent.u16 --data-dtype uint16",
                 dir + "/absent.u16: --data: No such file or directory");
  expect_refused("--data " + short_file, "--data requires --data-dtype");
  expect_refused("--data-dtype uint16", "--data-dtype requires --data");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace orrery::executor
