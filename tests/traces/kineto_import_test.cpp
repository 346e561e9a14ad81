// The Kineto importer on two traces in tests/inputs/traces/kineto/ (a CPU run with Gloo
// collectives and a GPU run with NCCL; see the README there) and on its bad-input corpus
// (kineto/bad/NAME.json fails with the exact message in NAME.expect).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/traces/kineto.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path inputs() { return fs::path(ORRERY_TEST_INPUTS) / "traces"; }

const pb::ExecNode& node_named(const pb::RankGraph& rank, const std::string& name,
                               int occurrence = 0) {
  for (const auto& n : rank.nodes()) {
    if (n.name() == name && occurrence-- == 0) return n;
  }
  throw std::runtime_error("no node " + name);
}

std::vector<int64_t> group_ranks(const pb::ExecGraph& g, int64_t id) {
  for (const auto& pg : g.process_groups()) {
    if (pg.id() == id) return {pg.ranks().begin(), pg.ranks().end()};
  }
  return {};
}

class CpuTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    k_ = import_kineto(read(inputs() / "kineto/cpu_gloo_rank0.json"), "cpu_gloo_rank0.json");
    ASSERT_EQ(k_.graph.ranks_size(), 1);
  }
  const pb::RankGraph& rank() const { return k_.graph.ranks(0); }
  KinetoImport k_;
};

TEST_F(CpuTrace, OneNodePerOutermostKnownOp) {
  EXPECT_EQ(k_.graph.world_size(), 2);  // distributedInfo
  EXPECT_EQ(rank().rank(), 0);
  EXPECT_EQ(k_.events, 23);
  // addmm, bmm, _softmax and native_layer_norm sit inside linear, matmul, softmax and
  // layer_norm; relu is not an op orrery knows; the c10d:: launches are timed by their gloo:
  // worker events, which become the collective nodes.
  std::vector<std::string> names;
  for (const auto& n : rank().nodes()) names.push_back(n.name());
  EXPECT_EQ(names,
            (std::vector<std::string>{"aten::linear", "aten::mm", "aten::matmul", "aten::softmax",
                                      "aten::layer_norm", "aten::embedding", "aten::add",
                                      "gloo:all_reduce", "gloo:all_reduce", "gloo:all_gather"}));
  EXPECT_TRUE(k_.skipped.empty());
  for (int i = 0; i < rank().nodes_size(); ++i) EXPECT_EQ(rank().nodes(i).id(), i);
}

TEST_F(CpuTrace, GemmsCountedFromTheRecordedShapes) {
  // linear: x [64, 128] times weight [256, 128] transposed plus bias [256]:
  //   2 x 64 x 256 x 128 + 64 x 256 = 4,210,688 FLOPs; reads (8,192 + 32,768 + 256) x 4 B,
  //   writes 64 x 256 x 4 B; its own span, 424 us (a CPU trace has no kernels).
  const auto& linear = node_named(rank(), "aten::linear");
  EXPECT_EQ(linear.kind(), pb::NODE_KIND_COMPUTE);
  EXPECT_EQ(linear.op_class(), pb::OP_CLASS_GEMM);
  EXPECT_EQ(linear.op(), "aten::linear");
  EXPECT_DOUBLE_EQ(linear.flops(), 4210688);
  EXPECT_DOUBLE_EQ(linear.bytes_read(), 164864);
  EXPECT_DOUBLE_EQ(linear.bytes_written(), 65536);
  EXPECT_EQ(std::vector<int64_t>(linear.shape().begin(), linear.shape().end()),
            (std::vector<int64_t>{64, 256, 128}));
  EXPECT_EQ(linear.dtype(), "fp32");
  EXPECT_DOUBLE_EQ(linear.duration_s(), 424e-6);
  // Starts are from the first event (ProfilerStep#1 at ...200.000): linear at ...226.000.
  EXPECT_NEAR(linear.start_s(), 26e-6, 1e-12);
  // mm [64, 128] x [128, 256]: 2 x 64 x 256 x 128 = 4,194,304 FLOPs, no bias.
  EXPECT_DOUBLE_EQ(node_named(rank(), "aten::mm").flops(), 4194304);
  // matmul [8, 64, 32] x [8, 32, 64]: 8 products, 2 x 8 x 64 x 64 x 32 = 2,097,152 FLOPs, the
  // batch folded into m.
  const auto& matmul = node_named(rank(), "aten::matmul");
  EXPECT_DOUBLE_EQ(matmul.flops(), 2097152);
  EXPECT_EQ(std::vector<int64_t>(matmul.shape().begin(), matmul.shape().end()),
            (std::vector<int64_t>{512, 64, 32}));
}

TEST_F(CpuTrace, MemoryBoundOpsCountedAsModelsCountsThem) {
  const double n = 256 * 1024;  // elements of the [256, 1024] activations
  const auto& softmax = node_named(rank(), "aten::softmax");
  EXPECT_EQ(softmax.op_class(), pb::OP_CLASS_ELEMENTWISE);
  EXPECT_DOUBLE_EQ(softmax.flops(), 5 * n);  // max, subtract, exp, sum, normalize
  EXPECT_DOUBLE_EQ(softmax.bytes_read(), 4 * n);
  EXPECT_DOUBLE_EQ(softmax.bytes_written(), 4 * n);
  const auto& norm = node_named(rank(), "aten::layer_norm");
  EXPECT_EQ(norm.op_class(), pb::OP_CLASS_NORM);
  EXPECT_DOUBLE_EQ(norm.flops(), 8 * n);
  EXPECT_DOUBLE_EQ(norm.bytes_read(), 4 * (n + 2 * 1024));  // input, weight and bias
  // embedding: 32 rows of 128 floats gathered, plus the 32 int64 ids.
  const auto& emb = node_named(rank(), "aten::embedding");
  EXPECT_EQ(emb.op_class(), pb::OP_CLASS_EMBEDDING);
  EXPECT_DOUBLE_EQ(emb.flops(), 0);
  EXPECT_DOUBLE_EQ(emb.bytes_read(), 32 * 128 * 4 + 32 * 8);
  EXPECT_DOUBLE_EQ(emb.bytes_written(), 32 * 128 * 4);
  const auto& add = node_named(rank(), "aten::add");
  EXPECT_DOUBLE_EQ(add.flops(), n);
  EXPECT_DOUBLE_EQ(add.bytes_read(), 8 * n);
}

TEST_F(CpuTrace, GlooCollectivesTimedByTheirWorkerEvents) {
  // all_reduce of [262144] floats in place: 1 MiB, on the two ranks of distributedInfo.
  const auto& first = node_named(rank(), "gloo:all_reduce", 0);
  EXPECT_EQ(first.kind(), pb::NODE_KIND_COLLECTIVE);
  EXPECT_EQ(first.collective(), pb::COLLECTIVE_KIND_ALL_REDUCE);
  EXPECT_DOUBLE_EQ(first.comm_bytes(), 1048576);
  EXPECT_DOUBLE_EQ(first.duration_s(), 23293e-6);
  EXPECT_EQ(group_ranks(k_.graph, first.process_group()), (std::vector<int64_t>{0, 1}));
  EXPECT_DOUBLE_EQ(node_named(rank(), "gloo:all_reduce", 1).comm_bytes(), 4194304);
  // all_gather's worker records one rank's input, [65536] floats; nccl-tests counts the
  // output, two of them: 512 KiB.
  const auto& gather = node_named(rank(), "gloo:all_gather");
  EXPECT_EQ(gather.collective(), pb::COLLECTIVE_KIND_ALL_GATHER);
  EXPECT_DOUBLE_EQ(gather.comm_bytes(), 524288);
}

TEST(Kineto, GpuTraceTakesKernelTimeAndRecordParamComms) {
  const KinetoImport k =
      import_kineto(read(inputs() / "kineto/gpu_nccl_rank1.json"), "gpu_nccl_rank1.json");
  const pb::ExecGraph& g = k.graph;
  EXPECT_EQ(g.device(), "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(g.ranks_size(), 1);
  const pb::RankGraph& r = g.ranks(0);
  EXPECT_EQ(r.rank(), 1);
  // The device time of the kernels each op launched (through "External id"), not the CPU span.
  const auto& mm = node_named(r, "aten::mm");
  EXPECT_DOUBLE_EQ(mm.duration_s(), 212.448e-6);
  EXPECT_EQ(mm.dtype(), "bf16");
  EXPECT_DOUBLE_EQ(mm.flops(), 2.0 * 4096 * 4096 * 4096);
  // linear -> matmul -> mm launched two kernels: 301.120 + 300.864 us.
  const auto& linear = node_named(r, "aten::linear");
  EXPECT_NEAR(linear.duration_s(), 601.984e-6, 1e-15);
  EXPECT_DOUBLE_EQ(linear.flops(),
                   2.0 * 4096 * 14336 * 4096);  // [2, 2048, 4096] x [14336, 4096]^T, no bias
  // all_reduce of 16,777,216 bf16 elements (32 MiB), timed by its NCCL kernel.
  std::vector<const pb::ExecNode*> collectives;
  for (const auto& n : r.nodes()) {
    if (n.kind() == pb::NODE_KIND_COLLECTIVE) collectives.push_back(&n);
  }
  ASSERT_EQ(collectives.size(), 2u);
  EXPECT_EQ(collectives[0]->name(), "c10d::allreduce_");
  EXPECT_EQ(collectives[0]->collective(), pb::COLLECTIVE_KIND_ALL_REDUCE);
  EXPECT_DOUBLE_EQ(collectives[0]->comm_bytes(), 33554432);
  EXPECT_DOUBLE_EQ(collectives[0]->duration_s(), 201.76e-6);
  EXPECT_EQ(group_ranks(g, collectives[0]->process_group()), (std::vector<int64_t>{0, 1}));
  // _allgather_base: the output, 33,554,432 bf16 elements.
  EXPECT_EQ(collectives[1]->collective(), pb::COLLECTIVE_KIND_ALL_GATHER);
  EXPECT_DOUBLE_EQ(collectives[1]->comm_bytes(), 67108864);
  EXPECT_EQ(collectives[0]->process_group(), collectives[1]->process_group());
  // bmm was recorded without shapes: left out, and said so.
  ASSERT_EQ(k.skipped.size(), 1u);
  EXPECT_EQ(k.skipped.begin()->first, "aten::bmm: no Input Dims (profile with record_shapes=True)");
  EXPECT_EQ(k.skipped.begin()->second, 1);
}

TEST(Kineto, CopiesAreTheirBytesWithoutFlops) {
  // The op nesting PyTorch records for x.clone() (aten::clone around aten::empty_like and
  // aten::copy_) and for a standalone bf16 copy_: one copy node each, the outermost op, reading
  // and writing every element once. Written by hand in the schema of the CPU trace above.
  const std::string trace = R"({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::clone", "pid": 1, "tid": 1, "ts": 100, "dur": 900,
     "args": {"Input Dims": [[1024, 1024], []], "Input type": ["float", ""]}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::empty_like", "pid": 1, "tid": 1, "ts": 110, "dur": 20,
     "args": {"Input Dims": [[1024, 1024], [], [], [], [], []], "Input type": ["float", "", "", "", "", ""]}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 140, "dur": 850,
     "args": {"Input Dims": [[1024, 1024], [1024, 1024], []], "Input type": ["float", "float", "Scalar"]}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 1100, "dur": 300,
     "args": {"Input Dims": [[4096], [4096], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]}}
  ]})";
  const KinetoImport k = import_kineto(trace, "copies.json");
  ASSERT_EQ(k.graph.ranks_size(), 1);
  const auto& nodes = k.graph.ranks(0).nodes();
  ASSERT_EQ(nodes.size(), 2);
  EXPECT_EQ(nodes[0].name(), "aten::clone");
  EXPECT_EQ(nodes[1].name(), "aten::copy_");
  const double bytes[] = {1024.0 * 1024 * 4, 4096.0 * 2};
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(nodes[i].op_class(), pb::OP_CLASS_COPY) << nodes[i].name();
    EXPECT_EQ(nodes[i].flops(), 0) << nodes[i].name();
    EXPECT_DOUBLE_EQ(nodes[i].bytes_read(), bytes[i]) << nodes[i].name();
    EXPECT_DOUBLE_EQ(nodes[i].bytes_written(), bytes[i]) << nodes[i].name();
  }
  EXPECT_DOUBLE_EQ(nodes[0].duration_s(), 900e-6);
  EXPECT_EQ(nodes[1].dtype(), "bf16");
}

TEST(Kineto, RecognisesItsFormat) {
  EXPECT_TRUE(is_kineto_trace(read(inputs() / "kineto/cpu_gloo_rank0.json")));
  EXPECT_TRUE(is_kineto_trace("  {\"traceEvents\": []}"));
  EXPECT_FALSE(is_kineto_trace("{\"world_size\": 2, \"ranks\": []}"));
  EXPECT_FALSE(is_kineto_trace("world_size: 2\n"));
  EXPECT_FALSE(is_kineto_trace(read(inputs() / "kineto/bad/legacy_event_list.json")));
}

TEST(Kineto, BadTracesFailWithTheirExactMessage) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(inputs() / "kineto" / "bad")) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 6u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.filename().string());
    std::string expect = read(fs::path(file).replace_extension(".expect"));
    ASSERT_FALSE(expect.empty()) << "missing " << fs::path(file).replace_extension(".expect");
    if (expect.back() == '\n') expect.pop_back();
    try {
      import_kineto(read(file), fs::relative(file, inputs()).string());
      ADD_FAILURE() << "accepted";
    } catch (const base::InputError& e) {
      EXPECT_EQ(e.what(), expect);
    }
  }
}

}  // namespace
}  // namespace orrery
