// Lowering invariants, on every rank of small plans on one DGX H100 node (8 GPUs):
//   - node ids are 0..n-1; data_deps point backwards and to other streams;
//   - every send has exactly one matching recv (peer, tag, bytes) and vice versa;
//   - every collective's group contains its rank, and all members issue the same collectives;
//   - the graph runs to completion under lower.hpp's stream semantics (no deadlock);
//   - FLOPs, TP bytes and DP bytes add up to hand-derived totals;
//   - lowering is deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "orrery/models/layer_ops.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/rank_layout.hpp"
#include "orrery/topologies/cluster_catalog.hpp"

namespace orrery::sim {
namespace {

struct Case {
  std::string name;
  std::string model;
  int64_t global_batch, seq;
  std::function<void(pb::Plan&)> set;
};

plan::ResolvedPlan make(const Case& c) {
  pb::Plan p;
  p.set_model(c.model);
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(c.global_batch);
  p.mutable_job()->set_seq_len(c.seq);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.set_micro_batch_size(1);
  c.set(p);
  return plan::resolve_plan(p, models::load_model(c.model),
                            topologies::load_cluster("dgx-h100", 1));
}

// The plans the issue names, each filling the 8 GPUs.
std::vector<Case> cases() {
  return {
      {"tiny_tp2_pp2_dp2", "tiny", 8, 64,
       [](pb::Plan& p) {
         auto* x = p.mutable_parallel();
         x->set_tp(2), x->set_pp(2), x->set_dp(2);
       }},
      {"llama_tp2_sp_pp2_dp2_overlap", "llama3-8b", 4, 1024,
       [](pb::Plan& p) {
         auto* x = p.mutable_parallel();
         x->set_tp(2), x->set_pp(2), x->set_dp(2), x->set_sequence_parallel(true);
         p.set_overlap_grad_reduce(true);
       }},
      {"mixtral_tp2_dp4_ep4", "mixtral-8x7b", 8, 512,
       [](pb::Plan& p) {
         auto* x = p.mutable_parallel();
         x->set_tp(2), x->set_dp(4), x->set_ep(4);
       }},
      {"llama_tp2_cp2_dp2", "llama3-8b", 4, 2048,
       [](pb::Plan& p) {
         auto* x = p.mutable_parallel();
         x->set_tp(2), x->set_cp(2), x->set_dp(2);
       }},
      {"llama_pp4_vp2_dp2", "llama3-8b", 8, 512,
       [](pb::Plan& p) {
         auto* x = p.mutable_parallel();
         x->set_pp(4), x->set_vp(2), x->set_dp(2);
       }},
      {"llama_fsdp_dp8_prefetch1", "llama3-8b", 16, 512,
       [](pb::Plan& p) {
         p.mutable_parallel()->set_dp(8);
         p.set_sharding(pb::SHARDING_FSDP);
         p.set_prefetch_buckets(1);
       }},
      {"llama_hsdp_dp8_shard4", "llama3-8b", 8, 512,
       [](pb::Plan& p) {
         p.mutable_parallel()->set_dp(8);
         p.set_sharding(pb::SHARDING_HSDP);
         p.set_shard_group_size(4);
       }},
      {"llama_zero1_tp2_dp4_overlap_param_gather", "llama3-8b", 8, 512,
       [](pb::Plan& p) {
         p.mutable_parallel()->set_tp(2);
         p.mutable_parallel()->set_dp(4);
         p.set_sharding(pb::SHARDING_ZERO1);
         p.set_overlap_param_gather(true);
         p.set_overlap_grad_reduce(true);
       }},
      {"tiny_tp2_pp2_dp2_full_recompute", "tiny", 8, 64,
       [](pb::Plan& p) {
         auto* x = p.mutable_parallel();
         x->set_tp(2), x->set_pp(2), x->set_dp(2);
         p.set_recompute(pb::RECOMPUTE_FULL);
       }},
      {"llama_dp8_op_level_selective_checkpointing", "llama3-8b", 8, 2048,
       [](pb::Plan& p) {
         p.mutable_parallel()->set_dp(8);
         p.set_recompute(pb::RECOMPUTE_SELECTIVE_OP);
       }},
      {"llama_tp2_cp2_dp2_selective_recompute", "llama3-8b", 4, 2048,
       [](pb::Plan& p) {
         auto* x = p.mutable_parallel();
         x->set_tp(2), x->set_cp(2), x->set_dp(2);
         p.set_recompute(pb::RECOMPUTE_SELECTIVE);
       }},
  };
}

const Case& find_case(const std::string& name) {
  static const std::vector<Case> all = cases();
  for (const auto& c : all) {
    if (c.name == name) return c;
  }
  throw std::runtime_error("no case " + name);
}

bool is_comm(const pb::ExecNode& n) { return n.kind() != pb::NODE_KIND_COMPUTE; }

void check_structure(const pb::ExecGraph& g) {
  ASSERT_EQ(g.ranks_size(), g.world_size());
  for (int i = 0; i < g.ranks_size(); ++i) {
    const auto& rg = g.ranks(i);
    EXPECT_EQ(rg.rank(), i);
    ASSERT_EQ(rg.streams_size(), static_cast<int>(plan::kStreams.size()));
    for (int s = 0; s < rg.streams_size(); ++s)
      EXPECT_EQ(rg.streams(s), plan::kStreams[static_cast<size_t>(s)]);
    for (int k = 0; k < rg.nodes_size(); ++k) {
      const auto& n = rg.nodes(k);
      ASSERT_EQ(n.id(), k) << "rank " << i;
      ASSERT_GE(n.stream(), 0);
      ASSERT_LT(n.stream(), static_cast<int>(plan::kStreams.size()));
      for (int64_t d : n.data_deps()) {
        ASSERT_GE(d, 0);
        ASSERT_LT(d, n.id()) << "rank " << i << " " << n.name() << ": a dependency must point back";
        EXPECT_NE(rg.nodes(static_cast<int>(d)).stream(), n.stream())
            << "rank " << i << " " << n.name() << ": same-stream order is implicit";
      }
      // Sends and receives sit on the point-to-point streams of their direction.
      if (n.kind() == pb::NODE_KIND_SEND) {
        EXPECT_TRUE(n.stream() == plan::kSendNext || n.stream() == plan::kSendPrev ||
                    n.stream() == plan::kCommCpSend)
            << n.name();
      }
      if (n.kind() == pb::NODE_KIND_RECV) {
        EXPECT_TRUE(n.stream() == plan::kRecvPrev || n.stream() == plan::kRecvNext ||
                    n.stream() == plan::kCommCpRecv)
            << n.name();
      }
      if (n.kind() == pb::NODE_KIND_COMPUTE) {
        EXPECT_EQ(n.stream(), plan::kCompute) << n.name();
      }
    }
  }
}

// (src, dst, tag) -> bytes, for every send (and separately every recv); each key exactly once,
// and each send's bytes equal its recv's. Problems are counted, the first few shown.
void check_point_to_point(const pb::ExecGraph& g) {
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<double>> sends, recvs;
  for (const auto& rg : g.ranks()) {
    for (const auto& n : rg.nodes()) {
      if (n.kind() == pb::NODE_KIND_SEND)
        sends[{rg.rank(), n.peer(), n.tag()}].push_back(n.comm_bytes());
      if (n.kind() == pb::NODE_KIND_RECV)
        recvs[{n.peer(), rg.rank(), n.tag()}].push_back(n.comm_bytes());
    }
  }
  int problems = 0;
  std::string shown;
  auto problem = [&](const std::string& what, const std::tuple<int64_t, int64_t, int64_t>& key) {
    if (++problems <= 5) {
      shown += what + " " + std::to_string(std::get<0>(key)) + "->" +
               std::to_string(std::get<1>(key)) + " tag " + std::to_string(std::get<2>(key)) + "\n";
    }
  };
  for (const auto& [key, bytes] : sends) {
    if (bytes.size() != 1) problem("send issued " + std::to_string(bytes.size()) + " times:", key);
    if (std::get<0>(key) == std::get<1>(key)) problem("send to itself:", key);
    auto it = recvs.find(key);
    if (it == recvs.end()) {
      problem("send without recv:", key);
    } else if (it->second != bytes) {
      problem("send and recv sizes differ:", key);
    }
  }
  for (const auto& [key, bytes] : recvs) {
    if (bytes.size() != 1) problem("recv issued " + std::to_string(bytes.size()) + " times:", key);
    if (!sends.count(key)) problem("recv without send:", key);
  }
  EXPECT_EQ(problems, 0) << shown;
}

// Each group's members issue the same sequence of (kind, bytes, stream), in their node order.
void check_collectives(const pb::ExecGraph& g) {
  std::map<int64_t, std::set<int64_t>> members;
  for (const auto& pg : g.process_groups()) {
    members[pg.id()] = std::set<int64_t>(pg.ranks().begin(), pg.ranks().end());
  }
  using Seq = std::vector<std::tuple<int, double, int>>;
  std::map<int64_t, std::map<int64_t, Seq>> seq;  // group -> rank -> sequence
  for (const auto& rg : g.ranks()) {
    for (const auto& n : rg.nodes()) {
      if (n.kind() != pb::NODE_KIND_COLLECTIVE) continue;
      auto it = members.find(n.process_group());
      ASSERT_NE(it, members.end()) << "rank " << rg.rank() << " " << n.name() << ": unknown group";
      EXPECT_TRUE(it->second.count(rg.rank()))
          << "rank " << rg.rank() << " " << n.name() << " on a group without it";
      EXPECT_GE(it->second.size(), 2u);
      EXPECT_GT(n.comm_bytes(), 0) << n.name();
      seq[n.process_group()][rg.rank()].push_back({n.collective(), n.comm_bytes(), n.stream()});
    }
  }
  for (const auto& [group, by_rank] : seq) {
    EXPECT_EQ(by_rank.size(), members[group].size())
        << "group " << group << ": some members never join";
    const Seq& first = by_rank.begin()->second;
    for (const auto& [rank, s] : by_rank) {
      EXPECT_EQ(s, first) << "group " << group << ": rank " << rank
                          << " issues a different sequence than rank " << by_rank.begin()->first;
    }
  }
}

// Runs the graph with zero-time nodes under lower.hpp's semantics: a stream runs its nodes in
// order; a node waits for its data_deps; a send/recv pair starts when both are at the head of
// their streams, a collective when all its group's members are. Returns the nodes left undone.
int64_t unfinished_after_run(const pb::ExecGraph& g, std::string* stuck) {
  const size_t ranks = static_cast<size_t>(g.ranks_size());
  std::vector<std::vector<std::vector<int>>> queue(
      ranks, std::vector<std::vector<int>>(plan::kStreams.size()));
  std::vector<std::vector<size_t>> head(ranks, std::vector<size_t>(plan::kStreams.size(), 0));
  std::vector<std::vector<char>> done(ranks);
  std::map<int64_t, size_t> group_size;
  for (const auto& pg : g.process_groups())
    group_size[pg.id()] = static_cast<size_t>(pg.ranks_size());
  for (size_t r = 0; r < ranks; ++r) {
    const auto& rg = g.ranks(static_cast<int>(r));
    done[r].assign(static_cast<size_t>(rg.nodes_size()), 0);
    for (const auto& n : rg.nodes())
      queue[r][static_cast<size_t>(n.stream())].push_back(static_cast<int>(n.id()));
  }
  auto node = [&](size_t r, int id) -> const pb::ExecNode& {
    return g.ranks(static_cast<int>(r)).nodes(id);
  };
  auto ready = [&](size_t r, int id) {
    for (int64_t d : node(r, id).data_deps()) {
      if (!done[r][static_cast<size_t>(d)]) return false;
    }
    return true;
  };
  auto finish = [&](size_t r, size_t s) {
    done[r][static_cast<size_t>(queue[r][s][head[r][s]])] = 1;
    ++head[r][s];
  };
  for (bool progress = true; progress;) {
    progress = false;
    std::map<std::tuple<int64_t, int64_t, int64_t>, std::pair<size_t, size_t>> sends, recvs;
    std::map<int64_t, std::vector<std::pair<size_t, size_t>>> colls;
    for (size_t r = 0; r < ranks; ++r) {
      for (size_t s = 0; s < plan::kStreams.size(); ++s) {
        while (head[r][s] < queue[r][s].size()) {
          const int id = queue[r][s][head[r][s]];
          if (!ready(r, id)) break;
          const auto& n = node(r, id);
          if (!is_comm(n)) {
            finish(r, s);
            progress = true;
            continue;
          }
          const int64_t me = g.ranks(static_cast<int>(r)).rank();
          if (n.kind() == pb::NODE_KIND_SEND) sends[{me, n.peer(), n.tag()}] = {r, s};
          if (n.kind() == pb::NODE_KIND_RECV) recvs[{n.peer(), me, n.tag()}] = {r, s};
          if (n.kind() == pb::NODE_KIND_COLLECTIVE) colls[n.process_group()].push_back({r, s});
          break;
        }
      }
    }
    for (const auto& [key, at] : sends) {
      auto it = recvs.find(key);
      if (it == recvs.end()) continue;
      finish(at.first, at.second);
      finish(it->second.first, it->second.second);
      progress = true;
    }
    for (const auto& [group, at] : colls) {
      if (at.size() != group_size[group]) continue;
      for (const auto& [r, s] : at) finish(r, s);
      progress = true;
    }
  }
  int64_t left = 0;
  for (size_t r = 0; r < ranks; ++r) {
    for (size_t s = 0; s < plan::kStreams.size(); ++s) {
      left += static_cast<int64_t>(queue[r][s].size() - head[r][s]);
      if (head[r][s] < queue[r][s].size() && stuck->size() < 2000) {
        *stuck += "rank " + std::to_string(r) + " " + std::string(plan::kStreams[s]) +
                  " waits at " + node(r, queue[r][s][head[r][s]]).name() + "\n";
      }
    }
  }
  return left;
}

TEST(Lowering, InvariantsHoldOnEveryRankOfEveryCase) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const plan::ResolvedPlan plan = make(c);
    const pb::ExecGraph g = plan::lower(plan);
    check_structure(g);
    check_point_to_point(g);
    check_collectives(g);
    std::string stuck;
    EXPECT_EQ(unfinished_after_run(g, &stuck), 0) << stuck;
  }
}

TEST(Lowering, TheRunnerStallsOnAMismatchedGraph) {
  // The no-deadlock check is not vacuous: a recv whose tag matches no send, or a collective moved
  // to a group whose other members never issue it, leaves nodes unfinished.
  const pb::ExecGraph good = plan::lower(make(find_case("tiny_tp2_pp2_dp2")));
  std::string stuck;
  ASSERT_EQ(unfinished_after_run(good, &stuck), 0) << stuck;
  pb::ExecGraph bad_tag = good;
  bool changed = false;
  for (auto& n : *bad_tag.mutable_ranks(2)->mutable_nodes()) {
    if (n.kind() == pb::NODE_KIND_RECV && !changed) n.set_tag(n.tag() + 1000), changed = true;
  }
  ASSERT_TRUE(changed);
  EXPECT_GT(unfinished_after_run(bad_tag, &stuck), 0);
  pb::ExecGraph bad_group = good;
  const plan::RankLayout layout(make(find_case("tiny_tp2_pp2_dp2")).degrees,
                                {plan::Dim::kTp, plan::Dim::kCp, plan::Dim::kDp, plan::Dim::kPp});
  changed = false;
  for (auto& n : *bad_group.mutable_ranks(0)->mutable_nodes()) {
    if (n.kind() == pb::NODE_KIND_COLLECTIVE &&
        n.process_group() == layout.group_id(plan::GroupKind::kTp, 0) && !changed) {
      n.set_process_group(layout.group_id(plan::GroupKind::kDp, 0)), changed = true;
    }
  }
  ASSERT_TRUE(changed);
  EXPECT_GT(unfinished_after_run(bad_group, &stuck), 0);
}

TEST(Lowering, IsDeterministicAndRankSubsetsMatchTheFullGraph) {
  for (const std::string name : {"llama_pp4_vp2_dp2", "mixtral_tp2_dp4_ep4", "llama_tp2_cp2_dp2"}) {
    SCOPED_TRACE(name);
    const plan::ResolvedPlan plan = make(find_case(name));
    const pb::ExecGraph a = plan::lower(plan);
    const pb::ExecGraph b = plan::lower(plan);
    EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
    plan::LowerOptions one;
    one.ranks = {5};
    const pb::ExecGraph sub = plan::lower(plan, one);
    ASSERT_EQ(sub.ranks_size(), 1);
    EXPECT_EQ(sub.ranks(0).SerializeAsString(), a.ranks(5).SerializeAsString());
    EXPECT_EQ(sub.process_groups_size(), a.process_groups_size());
  }
}

// --- FLOPs -------------------------------------------------------------------------------------

struct PhaseFlops {
  double forward = 0, backward = 0, recompute = 0, optimizer = 0;
  double forward_layers = 0;  // forward FLOPs of decoder-layer nodes
  double forward_attention_core = 0;
};

PhaseFlops flops(const pb::ExecGraph& g) {
  PhaseFlops f;
  for (const auto& rg : g.ranks()) {
    for (const auto& n : rg.nodes()) {
      if (n.kind() != pb::NODE_KIND_COMPUTE) continue;
      switch (n.phase()) {
        case pb::PHASE_FORWARD:
          f.forward += n.flops();
          if (n.layer() >= 0) f.forward_layers += n.flops();
          if (n.op() == "attn.core") f.forward_attention_core += n.flops();
          break;
        case pb::PHASE_BACKWARD:
          f.backward += n.flops();
          break;
        case pb::PHASE_RECOMPUTE:
          f.recompute += n.flops();
          break;
        case pb::PHASE_OPTIMIZER:
          f.optimizer += n.flops();
          break;
        default:
          ADD_FAILURE() << n.name() << " has no phase";
      }
    }
  }
  return f;
}

// FLOPs per token that every TP rank computes in full (not split by TP), so a TP group does them
// tp times while model_stats counts them once. From models/src/layer_ops*.cpp:
//   without SP, per decoder layer: attn.norm and mlp.norm (RMSNorm 4 FLOPs/element forward,
//     2 x 4 backward: 12 h) x 2 = 24 h; attn.residual and mlp.residual (1 forward + 1 backward
//     without dropout: 2 h) x 2 = 4 h; so 28 h. An MoE layer's router is replicated too:
//     2 E h + 5 E forward, 2 x 2 E h + 2 x 5 E backward = 6 E h + 15 E.
//   the head's norm: 12 h.
//   with SP all of those run on seq / tp tokens (split, not replicated).
//   either way, the embedding's backward scatter-add over all tokens: h (it has no forward FLOPs).
// Everything else is split: GEMMs by columns or rows, attention and RoPE by heads, the loss by
// vocabulary shard; CP splits tokens (and the attention triangle), EP the expert-token pairs.
double replicated_flops_per_token(const pb::ModelSpec& m, bool sp) {
  const double h = static_cast<double>(m.hidden_size());
  double r = h;
  if (sp) return r;
  r += 12 * h;
  for (int64_t l = 0; l < m.num_layers(); ++l) {
    r += 28 * h;
    if (models::is_moe_layer(m, l)) {
      const double e = static_cast<double>(m.moe().num_experts());
      r += 6 * e * h + 15 * e;
    }
  }
  return r;
}

void expect_total_flops(const Case& c) {
  SCOPED_TRACE(c.name);
  const plan::ResolvedPlan plan = make(c);
  const PhaseFlops f = flops(plan::lower(plan));
  const auto stats = models::model_stats(plan.model, plan.seq_len);
  const double tokens = static_cast<double>(c.global_batch * c.seq);
  const double tp = static_cast<double>(plan.degrees.tp);
  const double expected =
      (stats.training_flops_per_token +
       (tp - 1) * replicated_flops_per_token(plan.model, plan.sequence_parallel())) *
      tokens;
  EXPECT_NEAR(f.forward + f.backward, expected, expected * 1e-9)
      << "relative error " << (f.forward + f.backward - expected) / expected;
}

TEST(LoweringFlops, ForwardPlusBackwardOverAllRanksIsTheModelsTrainingFlops) {
  // tp = 1: nothing replicated, so exactly training_flops_per_token x global tokens
  // (llama3-8b at seq 512: about 6 x 8.03e9 per token plus attention).
  expect_total_flops(find_case("llama_pp4_vp2_dp2"));
  expect_total_flops(find_case("llama_fsdp_dp8_prefetch1"));
  // tp = 2 without SP: + 1 x (909 h) per token for llama3-8b (32 x 28 h + 12 h + h).
  expect_total_flops(find_case("llama_tp2_cp2_dp2"));
  expect_total_flops(find_case("tiny_tp2_pp2_dp2"));
  expect_total_flops(find_case("llama_zero1_tp2_dp4_overlap_param_gather"));
  // tp = 2 with SP: only the embedding's backward (h per token) is replicated.
  expect_total_flops(find_case("llama_tp2_sp_pp2_dp2_overlap"));
  // MoE with EP 4 and TP 2: + the replicated router, 6 x 8 x 4096 + 120 per token per layer.
  expect_total_flops(find_case("mixtral_tp2_dp4_ep4"));
}

TEST(LoweringFlops, ReplicatedShareIsWhatTheSumMeasures) {
  // The same plan at tp 1 and tp 2 (dp 8 vs dp 4): the difference is exactly the replicated
  // part, 909 h = 3,723,264 FLOPs per token for llama3-8b, x 8 x 512 tokens.
  Case tp1{"llama_dp8", "llama3-8b", 8, 512, [](pb::Plan& p) { p.mutable_parallel()->set_dp(8); }};
  Case tp2{"llama_tp2_dp4", "llama3-8b", 8, 512, [](pb::Plan& p) {
             p.mutable_parallel()->set_tp(2);
             p.mutable_parallel()->set_dp(4);
           }};
  const PhaseFlops a = flops(plan::lower(make(tp1)));
  const PhaseFlops b = flops(plan::lower(make(tp2)));
  const double diff = (b.forward + b.backward) - (a.forward + a.backward);
  EXPECT_NEAR(diff, 909.0 * 4096 * 8 * 512, 1e3);
}

TEST(LoweringFlops, FullRecomputeAddsExactlyTheLayersForwardFlops) {
  const Case& with = find_case("tiny_tp2_pp2_dp2_full_recompute");
  const Case& without = find_case("tiny_tp2_pp2_dp2");
  const PhaseFlops r = flops(plan::lower(make(with)));
  const PhaseFlops n = flops(plan::lower(make(without)));
  // Recomputation re-runs each decoder layer's forward (not the embedding or head) once per
  // micro-batch; forward and backward themselves are unchanged.
  EXPECT_GT(r.recompute, 0);
  EXPECT_DOUBLE_EQ(r.recompute, n.forward_layers);
  EXPECT_DOUBLE_EQ(r.forward, n.forward);
  EXPECT_DOUBLE_EQ(r.backward, n.backward);
  EXPECT_EQ(n.recompute, 0);
}

TEST(LoweringFlops, SelectiveRecomputeAddsTheAttentionCoresForwardFlops) {
  // Selective recomputation re-runs only the attention core (Korthikanti et al.), once per
  // micro-batch, in phase RECOMPUTE; the backward is unchanged. Here with CP 2 (ring attention).
  const Case& with = find_case("llama_tp2_cp2_dp2_selective_recompute");
  const Case& without = find_case("llama_tp2_cp2_dp2");
  const PhaseFlops s = flops(plan::lower(make(with)));
  const PhaseFlops n = flops(plan::lower(make(without)));
  EXPECT_DOUBLE_EQ(s.recompute, n.forward_attention_core);
  EXPECT_DOUBLE_EQ(s.backward, n.backward);
  EXPECT_DOUBLE_EQ(s.forward, n.forward);
}

// Op-level selective checkpointing re-runs, before each op's backward, what the forward did not
// keep: of attn.qkv the k projection (1,024 of its 6,144 columns), all of attn.out, half of the
// gated mlp.up (the up projection), and every non-matmul op; attention and mlp.down not at all.
TEST(Lowering, OpLevelSelectiveCheckpointingRerunsWhatItDidNotKeep) {
  const pb::ExecGraph g =
      plan::lower(make(find_case("llama_dp8_op_level_selective_checkpointing")));
  std::map<std::string, double> forward, rerun;
  for (const auto& n : g.ranks(0).nodes()) {
    if (n.kind() != pb::NODE_KIND_COMPUTE || n.layer() != 0 || n.micro_batch() != 0) continue;
    if (n.phase() == pb::PHASE_FORWARD) forward[n.op()] += n.flops();
    if (n.phase() == pb::PHASE_RECOMPUTE) rerun[n.op()] += n.flops();
  }
  EXPECT_DOUBLE_EQ(rerun["attn.qkv"], forward["attn.qkv"] * 1024 / 6144);
  EXPECT_DOUBLE_EQ(rerun["attn.out"], forward["attn.out"]);
  EXPECT_DOUBLE_EQ(rerun["mlp.up"], forward["mlp.up"] / 2);
  EXPECT_EQ(rerun.count("attn.core"), 0U);
  EXPECT_EQ(rerun.count("mlp.down"), 0U);
  EXPECT_DOUBLE_EQ(rerun["attn.norm"], forward["attn.norm"]);
  EXPECT_GT(rerun.size(), 5U);
}

// Layer-level checkpointing (recompute full, recompute_every 2 on the two-layer tiny model):
// layer 1 is re-run whole, layer 0 not at all.
TEST(Lowering, EveryNthLayerRecomputesOnlyThoseLayers) {
  Case c = find_case("tiny_tp2_pp2_dp2_full_recompute");
  const auto base = c.set;
  c.set = [base](pb::Plan& p) {
    base(p);
    p.mutable_parallel()->set_pp(1), p.mutable_parallel()->set_dp(4);
    p.set_recompute_every(2);
  };
  const pb::ExecGraph g = plan::lower(make(c));
  std::map<int64_t, double> forward, rerun;
  for (const auto& n : g.ranks(0).nodes()) {
    if (n.kind() != pb::NODE_KIND_COMPUTE || n.layer() < 0 || n.micro_batch() != 0) continue;
    if (n.phase() == pb::PHASE_FORWARD) forward[n.layer()] += n.flops();
    if (n.phase() == pb::PHASE_RECOMPUTE) rerun[n.layer()] += n.flops();
  }
  EXPECT_EQ(rerun.count(0), 0U);
  EXPECT_GT(rerun[1], 0);
  EXPECT_DOUBLE_EQ(rerun[1], forward[1]);
}

// Megatron-core's output-discarding modules: layernorm re-runs both block norms, moe_act the
// routed experts' activation, each once per layer and micro-batch, nothing else.
TEST(Lowering, RecomputeModulesRerunTheirOpsOnly) {
  Case c = find_case("mixtral_tp2_dp4_ep4");
  const auto base = c.set;
  c.set = [base](pb::Plan& p) {
    base(p);
    p.set_recompute(pb::RECOMPUTE_SELECTIVE);
    p.add_recompute_modules(pb::RECOMPUTE_MODULE_LAYERNORM);
    p.add_recompute_modules(pb::RECOMPUTE_MODULE_MOE_ACT);
  };
  const pb::ExecGraph g = plan::lower(make(c));
  std::map<std::string, double> forward, rerun;
  for (const auto& n : g.ranks(0).nodes()) {
    if (n.kind() != pb::NODE_KIND_COMPUTE || n.layer() != 0 || n.micro_batch() != 0) continue;
    if (n.phase() == pb::PHASE_FORWARD) forward[n.op()] += n.flops();
    if (n.phase() == pb::PHASE_RECOMPUTE) rerun[n.op()] += n.flops();
  }
  ASSERT_EQ(rerun.size(), 3U);
  EXPECT_DOUBLE_EQ(rerun["attn.norm"], forward["attn.norm"]);
  EXPECT_DOUBLE_EQ(rerun["mlp.norm"], forward["mlp.norm"]);
  EXPECT_DOUBLE_EQ(rerun["moe.experts.act"], forward["moe.experts.act"]);
  EXPECT_GT(rerun["moe.experts.act"], 0);
}

// --- Communication volumes ---------------------------------------------------------------------

struct Coll {
  pb::CollectiveKind kind;
  double bytes;
};

std::vector<Coll> tp_collectives(const pb::RankGraph& rg, int64_t tp_group, int64_t layer,
                                 pb::Phase phase) {
  std::vector<Coll> out;
  for (const auto& n : rg.nodes()) {
    if (n.kind() == pb::NODE_KIND_COLLECTIVE && n.process_group() == tp_group &&
        n.layer() == layer && n.micro_batch() == 0 && n.phase() == phase) {
      out.push_back({n.collective(), n.comm_bytes()});
    }
  }
  return out;
}

TEST(LoweringComm, TpCollectivesPerLayerFollowMegatron) {
  // llama3-8b tp 2 cp 2: micro-batch 1 x seq 2048 / cp 2 x hidden 4096 x 2 bytes (bf16)
  // = 8,388,608 bytes per TP collective (Megatron's b s h activations).
  {
    const plan::ResolvedPlan plan = make(find_case("llama_tp2_cp2_dp2"));
    const pb::ExecGraph g = plan::lower(plan, {{0}});
    const plan::RankLayout layout(plan.degrees, plan.placement);
    const int64_t tp = layout.group_id(plan::GroupKind::kTp, 0);
    const double bytes = 1.0 * 2048 / 2 * 4096 * 2;
    for (const pb::Phase phase : {pb::PHASE_FORWARD, pb::PHASE_BACKWARD}) {
      // No SP: all-reduce after attn.out and mlp.down forward; of the input gradient before
      // attn.norm and mlp.norm backward.
      const auto c = tp_collectives(g.ranks(0), tp, 7, phase);
      ASSERT_EQ(c.size(), 2u) << pb::Phase_Name(phase);
      for (const auto& x : c) {
        EXPECT_EQ(x.kind, pb::COLLECTIVE_KIND_ALL_REDUCE);
        EXPECT_EQ(x.bytes, bytes);
      }
    }
    // The vocabulary-parallel loss: two fp32 all-reduces over the 1024 tokens of this CP rank, as
    // the executor issues them, the maximum (4 bytes a token), then the two sums stacked (8).
    std::vector<std::pair<std::string, double>> loss;
    for (const auto& n : g.ranks(0).nodes()) {
      if (n.kind() == pb::NODE_KIND_COLLECTIVE && n.micro_batch() == 0 &&
          n.name().find("head.loss") != std::string::npos) {
        EXPECT_EQ(n.collective(), pb::COLLECTIVE_KIND_ALL_REDUCE) << n.name();
        EXPECT_EQ(n.process_group(), tp) << n.name();
        loss.emplace_back(n.name(), n.comm_bytes());
      }
    }
    const std::vector<std::pair<std::string, double>> expected{
        {"mb0.fwd.head.loss.max.all_reduce", 1024.0 * 4},
        {"mb0.fwd.head.loss.sum.all_reduce", 1024.0 * 8}};
    EXPECT_EQ(loss, expected);
  }
  // With SP (tp 2 pp 2, seq 1024): 1 x 1024 x 4096 x 2 = 8,388,608 bytes; forward all-gather
  // after each norm, reduce-scatter after each row-parallel GEMM; backward mirrored.
  {
    const plan::ResolvedPlan plan = make(find_case("llama_tp2_sp_pp2_dp2_overlap"));
    const pb::ExecGraph g = plan::lower(plan, {{0}});
    const plan::RankLayout layout(plan.degrees, plan.placement);
    const int64_t tp = layout.group_id(plan::GroupKind::kTp, 0);
    const double bytes = 1.0 * 1024 * 4096 * 2;
    const auto fwd = tp_collectives(g.ranks(0), tp, 3, pb::PHASE_FORWARD);
    ASSERT_EQ(fwd.size(), 4u);
    const pb::CollectiveKind ag = pb::COLLECTIVE_KIND_ALL_GATHER,
                             rs = pb::COLLECTIVE_KIND_REDUCE_SCATTER;
    const std::vector<pb::CollectiveKind> fwd_kinds{ag, rs, ag,
                                                    rs};  // attn.norm, attn.out, mlp.norm, mlp.down
    const std::vector<pb::CollectiveKind> bwd_kinds{ag, rs, ag,
                                                    rs};  // mlp.down, mlp.norm, attn.out, attn.norm
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(fwd[i].kind, fwd_kinds[i]) << i;
      EXPECT_EQ(fwd[i].bytes, bytes);
    }
    const auto bwd = tp_collectives(g.ranks(0), tp, 3, pb::PHASE_BACKWARD);
    ASSERT_EQ(bwd.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(bwd[i].kind, bwd_kinds[i]) << i;
      EXPECT_EQ(bwd[i].bytes, bytes);
    }
  }
}

// Sum of comm_bytes of rank `rank`'s collectives whose name contains `what`.
double collective_bytes(const pb::RankGraph& rg, const std::string& what,
                        int64_t micro_batch = -2) {
  double sum = 0;
  for (const auto& n : rg.nodes()) {
    if (n.kind() == pb::NODE_KIND_COLLECTIVE && n.name().find(what) != std::string::npos &&
        (micro_batch == -2 || n.micro_batch() == micro_batch)) {
      sum += n.comm_bytes();
    }
  }
  return sum;
}

// llama3-8b parameters by hand (h 4096, 32 heads + 8 KV heads of 128, FFN 14336, vocab 128256):
//   per layer at tp 1: qkv 4096 x (32 + 16) x 128 = 25,165,824; out 4096 x 4096 = 16,777,216;
//     up+gate 4096 x 2 x 14336 = 117,440,512; down 14336 x 4096 = 58,720,256; 2 norms 8,192
//     -> 218,112,000.
//   at tp 2: 12,582,912 + 8,388,608 + 58,720,256 + 29,360,128 + 8,192 (norms replicated)
//     = 109,060,096.
//   embedding and the untied LM head: 128256 / tp x 4096 each (tp 2: 262,668,288); head norm 4096.
constexpr double kLayerTp1 = 218112000, kLayerTp2 = 109060096;
constexpr double kTableTp1 = 525336576, kTableTp2 = 262668288;

TEST(LoweringComm, DdpBucketsCarryEveryGradientOnceInFp32) {
  // tp 2, pp 2: stage 0 holds the embedding + 16 layers = 262,668,288 + 16 x 109,060,096
  // = 2,007,629,824 parameters; stage 1 16 layers + head norm + LM head = 2,007,633,920.
  const plan::ResolvedPlan plan = make(find_case("llama_tp2_sp_pp2_dp2_overlap"));
  const pb::ExecGraph g = plan::lower(plan);
  const plan::RankLayout layout(plan.degrees, plan.placement);
  for (const auto& rg : g.ranks()) {
    const int64_t pp = layout.coord(rg.rank()).pp;
    const double params = pp == 0 ? kTableTp2 + 16 * kLayerTp2 : 16 * kLayerTp2 + 4096 + kTableTp2;
    EXPECT_DOUBLE_EQ(collective_bytes(rg, "dp.bucket"), params * 4) << "rank " << rg.rank();
    // Buckets hold at least Megatron's 40M parameters except the last one.
    std::vector<double> buckets;
    for (const auto& n : rg.nodes()) {
      if (n.name().find("dp.bucket") != std::string::npos) buckets.push_back(n.comm_bytes() / 4);
    }
    ASSERT_FALSE(buckets.empty());
    for (size_t i = 0; i + 1 < buckets.size(); ++i) EXPECT_GE(buckets[i], 40e6);
  }
}

TEST(LoweringComm, DistributedOptimizerReduceScattersGradsAndGathersBf16Params) {
  // tp 2, dp 4, zero1: every rank holds 32 x 109,060,096 + 2 x 262,668,288 + 4096
  // = 4,015,263,744 parameters: 4 bytes each reduce-scattered, 2 bytes each all-gathered
  // (layer by layer at the step start, with overlap_param_gather).
  const plan::ResolvedPlan plan = make(find_case("llama_zero1_tp2_dp4_overlap_param_gather"));
  const pb::ExecGraph g = plan::lower(plan);
  const double params = 32 * kLayerTp2 + 2 * kTableTp2 + 4096;
  EXPECT_EQ(params, 4015263744.0);
  for (const auto& rg : g.ranks()) {
    EXPECT_DOUBLE_EQ(collective_bytes(rg, "reduce_scatter"), params * 4);
    EXPECT_DOUBLE_EQ(collective_bytes(rg, "param_all_gather"), params * 2);
    // One gather per layer + embedding + head, issued before any forward.
    int gathers = 0;
    for (const auto& n : rg.nodes())
      gathers += n.name().find("param_all_gather") != std::string::npos;
    EXPECT_EQ(gathers, 34);
    // Each gather is copied into its part's parameters (the executor's copy-out): on the compute
    // stream, after its gather, just before the part's first forward op of micro-batch 0.
    std::map<std::string, const pb::ExecNode*> by_name;
    for (const auto& n : rg.nodes()) by_name[n.name()] = &n;
    int copies = 0;
    for (int i = 0; i < rg.nodes_size(); ++i) {
      const auto& n = rg.nodes(i);
      const auto at = n.name().find(".param_copy");
      if (at == std::string::npos) continue;
      ++copies;
      const std::string part = n.name().substr(0, at);  // "opt.L3"
      const pb::ExecNode* gather = by_name.at(part + ".param_all_gather");
      EXPECT_EQ(n.op_class(), pb::OP_CLASS_COPY) << n.name();
      EXPECT_EQ(n.op(), "zero.copy_out") << n.name();
      EXPECT_EQ(n.stream(), 0) << n.name();
      EXPECT_EQ(n.bytes_read(), gather->comm_bytes()) << n.name();
      EXPECT_EQ(n.bytes_written(), gather->comm_bytes()) << n.name();
      EXPECT_NE(std::find(n.data_deps().begin(), n.data_deps().end(), gather->id()),
                n.data_deps().end())
          << n.name();
      const auto& next = rg.nodes(i + 1);
      EXPECT_EQ(next.phase(), pb::PHASE_FORWARD) << n.name();
      EXPECT_EQ(next.micro_batch(), 0) << n.name();
      const std::string layer = part.substr(4);  // "L3", "embed" or "head"
      EXPECT_TRUE(next.name().starts_with(layer + ".mb0.fwd.") ||
                  next.name() == "mb0.fwd." + layer + ".tokens" ||
                  next.name() == "mb0.fwd." + layer + ".norm")
          << n.name() << " is followed by " << next.name();
    }
    EXPECT_EQ(copies, 34);
  }
}

TEST(LoweringComm, ExpertAndDenseGradientsReduceOverTheirOwnGroups) {
  // mixtral tp 2: per layer, one expert's up+gate 4096 x 2 x 7168 and down 7168 x 4096
  // = 88,080,384 parameters; dense: qkv 12,582,912 + out 8,388,608 + router 4096 x 8 = 32,768
  // + 2 norms 8,192 = 21,012,480. Tables 32000 / 2 x 4096 = 65,536,000 each, head norm 4096.
  const double dense = 32 * 21012480.0 + 2 * 65536000.0 + 4096;
  // ep 2 with dp 4: each rank holds 8 / 2 = 4 experts, replicated over dp x cp / ep = 2 ranks
  // (the EDP group), which reduce them: 32 x 4 x 88,080,384 x 4 bytes.
  Case ep2{"mixtral_tp2_dp4_ep2", "mixtral-8x7b", 8, 512, [](pb::Plan& p) {
             auto* x = p.mutable_parallel();
             x->set_tp(2), x->set_dp(4), x->set_ep(2);
           }};
  {
    const plan::ResolvedPlan plan = make(ep2);
    const pb::ExecGraph g = plan::lower(plan);
    const plan::RankLayout layout(plan.degrees, plan.placement);
    for (const auto& rg : g.ranks()) {
      EXPECT_DOUBLE_EQ(collective_bytes(rg, "edp.bucket"), 32 * 4 * 88080384.0 * 4);
      EXPECT_DOUBLE_EQ(collective_bytes(rg, "dp.bucket") - collective_bytes(rg, "edp.bucket"),
                       dense * 4);
      const int64_t edp = layout.group_id(plan::GroupKind::kEdp, rg.rank());
      const int64_t dp = layout.group_id(plan::GroupKind::kDp, rg.rank());
      ASSERT_GE(edp, 0);
      EXPECT_EQ(layout.group(plan::GroupKind::kEdp, rg.rank()).size(), 2u);
      for (const auto& n : rg.nodes()) {
        if (n.name().find("edp.bucket") != std::string::npos) {
          EXPECT_EQ(n.process_group(), edp) << n.name();
        } else if (n.name().find("dp.bucket") != std::string::npos) {
          EXPECT_EQ(n.process_group(), dp) << n.name();
        }
      }
    }
  }
  // ep 4 = dp x cp: every expert lives on one rank of the plane, so its gradient is final there
  // and nothing reduces it; the dense part still goes over dp.
  {
    const plan::ResolvedPlan plan = make(find_case("mixtral_tp2_dp4_ep4"));
    const pb::ExecGraph g = plan::lower(plan);
    for (const auto& rg : g.ranks()) {
      EXPECT_EQ(collective_bytes(rg, "edp.bucket"), 0);
      EXPECT_DOUBLE_EQ(collective_bytes(rg, "dp.bucket"), dense * 4);
    }
  }
}

TEST(LoweringComm, FsdpReducesAndGathersEveryParameterEachMicroBatch) {
  // FSDP over dp 8 at tp 1: each micro-batch all-gathers every parameter in bf16 before its
  // forward and reduce-scatters every gradient in fp32 after its backward (PyTorch FSDP without
  // no_sync). The rank's parameters: 32 x 218,112,000 + 2 x 525,336,576 + 4096 = 8,030,261,248
  // (Llama 3 8B). The embedding and LM head are parameters too: unless the lowering gathers and
  // reduces them, their gradients are never averaged over the replicas.
  const plan::ResolvedPlan plan = make(find_case("llama_fsdp_dp8_prefetch1"));
  const pb::ExecGraph g = plan::lower(plan, {{0}});
  const double params = 32 * kLayerTp1 + 2 * kTableTp1 + 4096;
  EXPECT_EQ(params, 8030261248.0);
  for (int64_t mb = 0; mb < plan.num_micro_batches; ++mb) {
    SCOPED_TRACE("micro-batch " + std::to_string(mb));
    EXPECT_DOUBLE_EQ(collective_bytes(g.ranks(0), "fsdp.reduce_scatter", mb), params * 4);
    double gathered_forward = 0;
    for (const auto& n : g.ranks(0).nodes()) {
      if (n.name().find("fsdp.all_gather") != std::string::npos && n.micro_batch() == mb &&
          n.phase() == pb::PHASE_FORWARD) {
        gathered_forward += n.comm_bytes();
      }
    }
    EXPECT_DOUBLE_EQ(gathered_forward, params * 2);
  }
}

TEST(LoweringComm, HsdpAllReducesTheShardAfterItsLastReduceScatter) {
  // HSDP, shard groups of 4 over dp 8: one all-reduce per step over the two replicas of each
  // shard, of the shard's gradients in fp32 (8,030,261,248 / 4 parameters x 4 bytes). It reduces
  // what the reduce-scatters produced, so it must come after the last of them: it does, by
  // stream order (the graph keeps same-stream order implicit, GraphBuilder::add), on the stream
  // the reduce-scatters use, issued after them, and after the last backward op.
  const plan::ResolvedPlan plan = make(find_case("llama_hsdp_dp8_shard4"));
  const pb::ExecGraph g = plan::lower(plan, {{0}});
  const pb::ExecNode* last_reduce_scatter = nullptr;
  const pb::ExecNode* all_reduce = nullptr;
  for (const auto& n : g.ranks(0).nodes()) {
    if (n.name().find("fsdp.reduce_scatter") != std::string::npos) last_reduce_scatter = &n;
    if (n.name().find("hsdp.replica_all_reduce") != std::string::npos) {
      ASSERT_EQ(all_reduce, nullptr) << "a second replica all-reduce";
      all_reduce = &n;
    }
  }
  ASSERT_NE(all_reduce, nullptr);
  ASSERT_NE(last_reduce_scatter, nullptr);
  EXPECT_DOUBLE_EQ(all_reduce->comm_bytes(), 8030261248.0 / 4 * 4);
  EXPECT_EQ(all_reduce->stream(), last_reduce_scatter->stream());
  EXPECT_GT(all_reduce->id(), last_reduce_scatter->id());
  EXPECT_FALSE(all_reduce->data_deps().empty());  // the last backward op, on the compute stream
}

TEST(LoweringComm, InterleavedChunksNameTheirTransfersApart) {
  // pp 4 x vp 2: rank 0 runs virtual stages 0 and 4, so each micro-batch has two forward sends
  // (0 -> 1, 4 -> 5) and one receive (3 -> 4); each transfer carries its virtual stage, and no
  // two transfers of a rank share a name (the executor times each under its name).
  const plan::ResolvedPlan plan = make(find_case("llama_pp4_vp2_dp2"));
  const pb::ExecGraph g = plan::lower(plan, {{0}});
  std::set<std::string> names;
  int transfers = 0;
  for (const auto& n : g.ranks(0).nodes()) {
    if (n.kind() != pb::NODE_KIND_SEND && n.kind() != pb::NODE_KIND_RECV) continue;
    ++transfers;
    EXPECT_TRUE(names.insert(n.name()).second) << "two transfers named " << n.name();
  }
  EXPECT_GT(transfers, 0);
  EXPECT_EQ(names.count("mb0.fwd.send.act.v0"), 1u);
  EXPECT_EQ(names.count("mb0.fwd.send.act.v4"), 1u);
  EXPECT_EQ(names.count("mb0.fwd.recv.act.v4"), 1u);
  EXPECT_EQ(names.count("mb0.bwd.send.grad.v4"), 1u);
  EXPECT_EQ(names.count("mb0.fwd.send.act"), 0u);
}

TEST(LoweringComm, PipelineMessagesCarryOneMicroBatchOfHiddenStates) {
  // pp 4 vp 2 at tp 1: 1 x 512 x 4096 x 2 bytes = 4,194,304 per activation or gradient message;
  // each micro-batch crosses 7 virtual-stage boundaries both ways: 4 micro-batches x 7 x 2 = 56
  // messages over the 8 ranks' two DP replicas: 112 sends in all.
  const plan::ResolvedPlan plan = make(find_case("llama_pp4_vp2_dp2"));
  const pb::ExecGraph g = plan::lower(plan);
  int sends = 0;
  for (const auto& rg : g.ranks()) {
    for (const auto& n : rg.nodes()) {
      if (n.kind() != pb::NODE_KIND_SEND) continue;
      ++sends;
      EXPECT_EQ(n.comm_bytes(), 4194304.0) << n.name();
    }
  }
  EXPECT_EQ(sends, 112);
}

}  // namespace
}  // namespace orrery::sim
