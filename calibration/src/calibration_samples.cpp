// add_trace_samples (see calibration_samples.hpp): which nodes a measured trace contributes, on
// which device, against which peak, and in which communication scope.
#include "orrery/calibration/calibration_samples.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

#include "orrery/base/error.hpp"
#include "orrery/base/intervals.hpp"
#include "orrery/calibration/skew_count.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/sim/collective_cost.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/discover.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::calibration {
namespace {

const std::vector<std::string> kDtypes = {"fp64", "fp32", "tf32", "bf16",
                                          "fp16", "fp8",  "int8", "fp4"};

// A communication-stream stretch beside compute for at most this share of its time ran alone:
// its collectives are curve samples. What compute it touched is an op boundary's rounding or the
// tail of the op that launched it (a ZeRO reduce-scatter after the last backward op: 0.2%), and
// moves its time by at most this share of the overlap slowdown.
constexpr double kAloneAtMost = 0.05;

std::string node_path(int r, int i) {
  return "ranks[" + std::to_string(r) + "].nodes[" + std::to_string(i) + "]";
}

class TraceReader {
 public:
  TraceReader(const pb::ExecGraph& trace, const std::string& file, const SampleOptions& options,
              TraceSamples& out)
      : trace_(trace), file_(file), options_(options), out_(out) {
    if (trace.has_cluster_spec()) {
      topologies::validate_cluster(trace.cluster_spec(), SourceMap(file));
      topology_ = std::make_unique<topologies::Topology>(trace.cluster_spec());
      collectives_ = std::make_unique<sim::CollectiveCostModel>(*topology_);
    }
  }

  void run() {
    check_measured();
    for (int r = 0; r < trace_.ranks_size(); ++r) {
      const pb::RankGraph& rank = trace_.ranks(r);
      in_flight_ = busy_spans(rank, communication_stream_collective);
      host_ranks_ = host_ranks(rank);
      computing_ =
          busy_spans(rank, [](const pb::ExecNode& n) { return n.kind() == pb::NODE_KIND_COMPUTE; });
      beside_compute_ = add_overlapped_comm(rank, r);
      for (int i = 0; i < rank.nodes_size(); ++i) add_node(r, i);
      add_dispatch(rank, r);
      add_arrivals(r);
    }
    for (const auto& [key, sample] : instances_) out_.comm.push_back(sample);
    add_skew();
    for (const auto& [why, count] : left_out_) {
      out_.notes.push_back(file_ + ": " + std::to_string(count) + " node(s) left out: " + why);
    }
  }

 private:
  // ComputeSample.host_ranks of `rank`'s samples: `orrery bench` runs its compute ops alone; in a
  // run's trace every rank computes, so the trace's ranks on the same node of its cluster; 0
  // (unknown) for other traces.
  int64_t host_ranks(const pb::RankGraph& rank) const {
    if (trace_.producer().rfind("orrery bench", 0) == 0) return 1;
    if (!trace_.has_plan() || topology_ == nullptr) return 0;
    auto node = [&](int64_t device) {
      return device >= 0 && device < topology_->num_devices() ? topology_->device(device).node
                                                              : int64_t{-1};
    };
    const int64_t mine = node(rank.device());
    if (mine < 0) return 0;
    int64_t n = 0;
    for (const auto& other : trace_.ranks()) n += node(other.device()) == mine ? 1 : 0;
    return n;
  }

  void check_measured() const {
    for (const auto& rank : trace_.ranks()) {
      for (const auto& node : rank.nodes()) {
        if (node.has_duration_s()) return;
      }
    }
    throw base::InputError(
        file_, 0, "ranks[].nodes[].duration_s",
        "no node has a measured duration: this is a lowered graph (orrery simulate --graph), not a "
        "measured trace (orrery bench --out, orrery run --out, a PyTorch profiler trace)");
  }

  void leave_out(const std::string& why) { ++left_out_[why]; }
  void leave_out_n(const std::string& why, size_t n) { left_out_[why] += static_cast<int64_t>(n); }

  // The rank's untimed time per step spread over the ops it issued on its compute stream (the
  // ops the engines charge the dispatch overhead to).
  void add_dispatch(const pb::RankGraph& rank, int r) {
    if (rank.untimed_s() <= 0) return;  // not measured (bench files, profiler traces, older runs)
    const auto ops =
        std::count_if(rank.nodes().begin(), rank.nodes().end(),
                      [](const pb::ExecNode& n) { return n.stream() == plan::kCompute; });
    if (ops == 0) return;
    DispatchSample d;
    d.device = device_spec(device_name(rank, r), "ranks[" + std::to_string(r) + "].device").name();
    d.per_op_s = rank.untimed_s() / static_cast<double>(ops);
    d.source = file_ + ": rank " + std::to_string(rank.rank());
    out_.dispatch.push_back(std::move(d));
  }

  // The rank's collectives, each with its time and the compute the rank ran since it last waited
  // on the collective's group (skew_count.hpp).
  void add_arrivals(int r) {
    const pb::RankGraph& rank = trace_.ranks(r);
    const std::vector<double> since = detail::compute_since_group_wait(
        rank, [](const pb::ExecNode& n) { return n.duration_s(); });
    std::map<std::pair<int64_t, std::string>, int> seen;
    std::string device;  // looked up at the rank's first collective
    for (int i = 0; i < rank.nodes_size(); ++i) {
      if (since[static_cast<size_t>(i)] < 0) continue;
      const pb::ExecNode& n = rank.nodes(i);
      if (device.empty())
        device =
            device_spec(device_name(rank, r), "ranks[" + std::to_string(r) + "].device").name();
      const int occurrence = seen[{n.process_group(), n.name()}]++;
      arrivals_[std::make_tuple(n.process_group(), n.name(), occurrence)].push_back(
          {device, n.duration_s(), since[static_cast<size_t>(i)]});
    }
  }

  // One skew sample per collective instance that every member of its group timed on one device.
  void add_skew() {
    for (const auto& [key, members] : arrivals_) {
      const auto& [group_id, name, occurrence] = key;
      const pb::ProcessGroup* g = find_group(group_id);
      if (g == nullptr || g->ranks_size() < 2 ||
          static_cast<int>(members.size()) != g->ranks_size())
        continue;
      double fastest = members.front().seconds, wait = 0, compute = 0;
      bool one_device = true;
      for (const Arrival& m : members) {
        fastest = std::min(fastest, m.seconds);
        one_device = one_device && m.device == members.front().device;
      }
      if (!one_device) {
        leave_out("rank skew: collectives across devices of different kinds");
        continue;
      }
      for (const Arrival& m : members) wait += m.seconds - fastest, compute += m.compute_s;
      SkewSample s;
      s.device = members.front().device;
      s.ranks = g->ranks_size();
      s.wait_s = wait / static_cast<double>(members.size());
      s.compute_s = compute / static_cast<double>(members.size());
      s.source = file_ + ": " + name;
      out_.skew.push_back(std::move(s));
    }
  }

  // Merged [start, end) spans of the rank's timed nodes that `pick` selects.
  template <typename Pick>
  static std::vector<base::Interval> busy_spans(const pb::RankGraph& rank, Pick pick) {
    std::vector<base::Interval> spans;
    for (const auto& n : rank.nodes()) {
      if (pick(n) && n.has_start_s() && n.has_duration_s() && n.duration_s() > 0)
        spans.emplace_back(n.start_s(), n.start_s() + n.duration_s());
    }
    return base::merge_intervals(std::move(spans));
  }

  // A collective on a communication stream (not the blocking TP/EP collectives on the compute
  // stream, during which no compute runs).
  static bool communication_stream_collective(const pb::ExecNode& n) {
    return n.kind() == pb::NODE_KIND_COLLECTIVE && !plan::is_blocking_collective(n);
  }

  // Fraction of `node`'s [start, start + duration) covered by `spans`.
  static double covered_fraction(const pb::ExecNode& node,
                                 const std::vector<base::Interval>& spans) {
    if (!node.has_start_s() || node.duration_s() <= 0) return 0;
    return covered_fraction({node.start_s(), node.start_s() + node.duration_s()}, spans);
  }
  static double covered_fraction(const base::Interval& w,
                                 const std::vector<base::Interval>& spans) {
    if (spans.empty() || !(w.second > w.first)) return 0;
    double covered = 0;
    for (const auto& [s, e] : spans)
      covered += std::max(0.0, std::min(w.second, e) - std::max(w.first, s));
    return std::clamp(covered / (w.second - w.first), 0.0, 1.0);
  }

  // The stretches during which some communication-stream collective of `rank` was in flight,
  // per stream, each with its nodes. A collective's node runs from its launch to the first op
  // boundary at which the executor saw it complete (OpTrace::watch), so it ends up to one op
  // late: it is taken to end in the middle of the stretch between the last op boundary before
  // its node's end and that end (the op during which it completed), or at its node's end when
  // the rank computed for less than half of that stretch (it was waiting for the collective,
  // and saw it end when it did).
  struct Stretch {
    base::Interval span;
    std::vector<int> nodes;
  };
  std::vector<Stretch> comm_stretches(const pb::RankGraph& rank) const {
    std::vector<double> boundaries;
    for (const auto& n : rank.nodes()) {
      if (n.stream() == plan::kCompute && n.has_start_s() && n.has_duration_s()) {
        boundaries.push_back(n.start_s());
        boundaries.push_back(n.start_s() + n.duration_s());
      }
    }
    std::sort(boundaries.begin(), boundaries.end());
    std::map<int32_t, std::vector<std::pair<base::Interval, int>>> by_stream;
    for (int i = 0; i < rank.nodes_size(); ++i) {
      const pb::ExecNode& n = rank.nodes(i);
      if (!communication_stream_collective(n) || !n.has_start_s() || !(n.duration_s() > 0))
        continue;
      const double launch = n.start_s(), seen = launch + n.duration_s();
      const auto before =
          std::lower_bound(boundaries.begin(), boundaries.end(), seen - 1e-9 * seen);
      const double last =
          before == boundaries.begin() ? launch : std::max(launch, *std::prev(before));
      const double end = covered_fraction(base::Interval{last, seen}, computing_) >= 0.5
                             ? (last + seen) / 2
                             : seen;
      by_stream[n.stream()].push_back({{launch, end}, i});
    }
    std::vector<Stretch> out;
    for (auto& [stream, flights] : by_stream) {
      std::stable_sort(flights.begin(), flights.end());
      const size_t first = out.size();  // this stream's stretches start here
      for (const auto& [span, i] : flights) {
        if (out.size() == first || span.first > out.back().span.second) out.push_back({span, {}});
        out.back().span.second = std::max(out.back().span.second, span.second);
        out.back().nodes.push_back(i);
      }
    }
    return out;
  }

  // Communication-stream collectives during which the rank computed measure the communication
  // slowdown beside compute, one sample per stretch (OverlappedCommSample), and are kept out of
  // the curves: returns those nodes.
  std::set<int> add_overlapped_comm(const pb::RankGraph& rank, int r) {
    std::set<int> taken;
    for (const Stretch& st : comm_stretches(rank)) {
      const double f = covered_fraction(st.span, computing_);
      // Communication alone (kAloneAtMost): its collectives are curve samples.
      if (f <= kAloneAtMost) continue;
      taken.insert(st.nodes.begin(), st.nodes.end());
      if (f < kOverlapMeasured) {
        leave_out_n(
            "collectives beside compute for more than 5% and less than half of their stretch in "
            "flight",
            st.nodes.size());
        continue;
      }
      OverlappedCommSample o;
      o.seconds = st.span.second - st.span.first;
      o.overlap = f;
      o.source =
          file_ + ": rank " + std::to_string(rank.rank()) + ", " +
          rank.nodes(st.nodes.front()).name() +
          (st.nodes.size() > 1 ? " and " + std::to_string(st.nodes.size() - 1) + " more" : "");
      size_t unusable = 0;
      for (int i : st.nodes) {
        const pb::ExecNode& n = rank.nodes(i);
        const pb::ProcessGroup& g = group(n.process_group(), node_path(r, i) + ".process_group");
        if (n.collective() == pb::COLLECTIVE_KIND_UNSPECIFIED || n.comm_bytes() <= 0 ||
            g.ranks_size() < 2) {
          ++unusable;  // add_collective says why for this node
          continue;
        }
        o.collectives.push_back(comm_sample(n, g));
      }
      if (unusable == 0) {
        out_.overlapped_comm.push_back(std::move(o));
      } else {
        leave_out_n("collectives beside compute in flight with one that cannot be costed",
                    st.nodes.size() - unusable);
      }
    }
    return taken;
  }

  // The device spec of a name: the trace's cluster, --cluster, the database, nvidia-smi names.
  const pb::DeviceSpec& device_spec(const std::string& name, const std::string& field) {
    if (const auto it = resolved_.find(name); it != resolved_.end())
      return out_.devices.at(it->second);
    const pb::DeviceSpec* spec = nullptr;
    if (trace_.has_cluster_spec()) spec = topologies::lookup_device(trace_.cluster_spec(), name);
    if (spec == nullptr && options_.cluster != nullptr)
      spec = topologies::lookup_device(*options_.cluster, name);
    const pb::ClusterSpec none;
    if (spec == nullptr) spec = topologies::lookup_device(none, name);
    if (spec == nullptr && name.rfind("NVIDIA ", 0) == 0) {  // a profiler's nvidia-smi product name
      const std::string db = topologies::database_gpu_name(name);
      if (!db.empty()) spec = topologies::lookup_device(none, db);
    }
    if (spec == nullptr) {
      std::vector<std::string> names =
          topologies::device_names(options_.cluster != nullptr ? *options_.cluster : none);
      throw base::InputError(file_, 0, field,
                             "device '" + name +
                                 "' is not in the trace's cluster or the device database" +
                                 base::suggest(name, names) +
                                 "; pass --device NAME, or --cluster FILE|local that defines it");
    }
    // Samples and curves name the device as the simulator will look it up: by its spec's name
    // (an nvidia-smi name becomes its database entry's).
    resolved_[name] = spec->name();
    return out_.devices.emplace(spec->name(), *spec).first->second;
  }

  std::string device_name(const pb::RankGraph& rank, int r) {
    if (!options_.device.empty()) return options_.device;
    if (topology_ != nullptr) {
      if (rank.device() < 0 || rank.device() >= topology_->num_devices()) {
        throw base::InputError(file_, 0, "ranks[" + std::to_string(r) + "].device",
                               "got " + std::to_string(rank.device()) +
                                   ", the trace's cluster has " +
                                   std::to_string(topology_->num_devices()) + " devices");
      }
      return topology_->device(rank.device()).device_type;
    }
    if (!trace_.device().empty()) return trace_.device();
    throw base::InputError(file_, 0, "device", "the trace names no device; pass --device NAME");
  }

  // The precision whose peak a compute sample is measured against: the one the simulator will
  // divide the node's FLOPs by. ComputeCostModel takes every op of a plan at the plan's precision
  // (a bf16 plan's fp32 norms and losses included), so a trace of a plan samples at that
  // precision; the node's own dtype (what the op's output was) serves traces without a plan,
  // such as `orrery bench`'s. Sampling a bf16 run's fp32 ops at the fp32 peak and predicting them
  // at the bf16 one put their calibrated times 15x too short on an H200.
  std::string dtype(const pb::ExecNode& node, int r, int i) const {
    const std::string& own = node.dtype();
    if (!own.empty() && std::find(kDtypes.begin(), kDtypes.end(), own) == kDtypes.end()) {
      throw base::InputError(file_, 0, node_path(r, i) + ".dtype",
                             "got '" + own + "'" + base::suggest(own, kDtypes));
    }
    if (trace_.has_plan() && trace_.plan().has_job() &&
        trace_.plan().job().precision() != pb::PRECISION_UNSPECIFIED) {
      return enum_value_name(
          *pb::Precision_descriptor()->FindValueByNumber(trace_.plan().job().precision()));
    }
    if (own.empty()) {
      throw base::InputError(file_, 0, node_path(r, i) + ".dtype",
                             "not set, and the trace has no plan.job.precision to take it from");
    }
    return own;
  }

  void add_node(int r, int i) {
    const pb::RankGraph& rank = trace_.ranks(r);
    const pb::ExecNode& node = rank.nodes(i);
    if (!node.has_duration_s()) return leave_out("no duration_s");
    if (!(node.duration_s() > 0)) return leave_out("a duration of 0");
    switch (node.kind()) {
      case pb::NODE_KIND_COMPUTE:
        return add_compute(r, i);
      case pb::NODE_KIND_COLLECTIVE:
        return add_collective(r, i);
      case pb::NODE_KIND_RECV:
        return add_receive(r, i);
      case pb::NODE_KIND_SEND:
        return;  // sampled with its receive
      default:
        return leave_out("a node without a kind");
    }
  }

  // The send that `recv` (on rank `receiver`) matches: same peers and tag; null when the trace has
  // none.
  const pb::ExecNode* matching_send(int64_t receiver, const pb::ExecNode& recv) {
    if (!sends_indexed_) {
      sends_indexed_ = true;
      for (const auto& rank : trace_.ranks()) {
        for (const auto& n : rank.nodes()) {
          if (n.kind() == pb::NODE_KIND_SEND) sends_[{rank.rank(), n.peer(), n.tag()}] = &n;
        }
      }
    }
    const auto it = sends_.find({recv.peer(), receiver, recv.tag()});
    return it == sends_.end() ? nullptr : it->second;
  }

  // A point-to-point transfer (CommSample with no collective kind): a receive posted after its
  // send started, whose time is then the transfer alone, both ends posted, as the engines start
  // a transfer (a rendezvous). The executor's receive blocks its rank, so its node is timed
  // exactly; the send's start is its posting. A receive posted first also waited for its sender.
  void add_receive(int r, int i) {
    const pb::RankGraph& rank = trace_.ranks(r);
    const pb::ExecNode& recv = rank.nodes(i);
    if (recv.comm_bytes() <= 0) return leave_out("a receive of no bytes");
    const pb::ExecNode* send = matching_send(rank.rank(), recv);
    if (send == nullptr || !send->has_start_s() || !recv.has_start_s())
      return leave_out("receives without a timed send in the trace");
    if (send->start_s() > recv.start_s())
      return leave_out("receives posted before their send (they waited for the sender)");
    CommSample c;
    c.scope = scope_of({recv.peer(), rank.rank()}, node_path(r, i) + ".peer");
    c.bytes = recv.comm_bytes();
    c.ranks = 2;
    c.seconds = recv.duration_s();
    c.source = file_ + ": rank " + std::to_string(rank.rank()) + ", " + recv.name();
    out_.comm.push_back(std::move(c));
  }

  void add_compute(int r, int i) {
    const pb::RankGraph& rank = trace_.ranks(r);
    const pb::ExecNode& node = rank.nodes(i);
    if (node.op_class() == pb::OP_CLASS_UNSPECIFIED) return leave_out("compute without op_class");
    if (node.flops() <= 0 && node.bytes_read() + node.bytes_written() <= 0)
      return leave_out("compute with no FLOPs or bytes");
    const pb::DeviceSpec& spec =
        device_spec(device_name(rank, r), options_.device.empty() ? "device" : "--device");
    ComputeSample s;
    s.device = spec.name();
    s.op_class = node.op_class();
    s.op = node.op();
    s.flops = node.flops();
    s.bytes = node.bytes_read() + node.bytes_written();
    s.peak_flops_per_s = topologies::peak_flops(spec, dtype(node, r, i));
    if (s.peak_flops_per_s <= 0)
      s.peak_flops_per_s = spec.peak_flops().fp32();  // as ComputeCostModel
    s.memory_bytes_per_s = spec.memory_bandwidth_bytes_per_s();
    s.seconds = node.duration_s();
    s.source = file_ + ": " + node.name();
    s.shape.assign(node.shape().begin(), node.shape().end());
    s.phase = node.phase();
    s.overlap = covered_fraction(node, in_flight_);
    s.host_ranks = host_ranks_;
    out_.compute.push_back(std::move(s));
  }

  // The trace's process group with this id, or null.
  const pb::ProcessGroup* find_group(int64_t id) const {
    for (const auto& g : trace_.process_groups()) {
      if (g.id() == id) return &g;
    }
    return nullptr;
  }

  const pb::ProcessGroup& group(int64_t id, const std::string& field) const {
    if (const pb::ProcessGroup* g = find_group(id)) return *g;
    throw base::InputError(file_, 0, field,
                           "no process group with id " + std::to_string(id) + " in process_groups");
  }

  std::string scope(const pb::ProcessGroup& g) const {
    return scope_of({g.ranks().begin(), g.ranks().end()}, "process_groups",
                    "group " + std::to_string(g.id()));
  }

  // The calibration scope of the devices ranks `members` ran on; `field` and `who` name them in
  // errors.
  std::string scope_of(const std::vector<int64_t>& members, const std::string& field,
                       const std::string& who = "the transfer") const {
    if (collectives_ == nullptr) return options_.comm_scope;
    std::vector<int64_t> devices;
    std::set<int64_t> seen;
    for (int64_t member : members) {
      const auto it = std::find_if(trace_.ranks().begin(), trace_.ranks().end(),
                                   [&](const pb::RankGraph& rg) { return rg.rank() == member; });
      if (it == trace_.ranks().end()) {
        throw base::InputError(file_, 0, field,
                               who + " has rank " + std::to_string(member) +
                                   ", which has no entry in ranks[] to say its device");
      }
      if (it->device() < 0 || it->device() >= topology_->num_devices() ||
          !seen.insert(it->device()).second) {
        throw base::InputError(file_, 0, field,
                               who + " maps to device " + std::to_string(it->device()) +
                                   ", which is outside the cluster or taken by another member");
      }
      devices.push_back(it->device());
    }
    return collectives_->calibration_scope(devices);
  }

  // What the cost model needs to know of collective `n` on group `g` (its time aside).
  CommSample comm_sample(const pb::ExecNode& n, const pb::ProcessGroup& g) const {
    CommSample c;
    c.scope = scope(g);
    c.collective = n.collective();
    c.bytes = n.comm_bytes();
    c.ranks = g.ranks_size();
    c.source = file_ + ": " + n.name();
    c.back_to_back = trace_.producer().rfind("orrery bench", 0) == 0;
    return c;
  }

  void add_collective(int r, int i) {
    const pb::ExecNode& node = trace_.ranks(r).nodes(i);
    if (node.collective() == pb::COLLECTIVE_KIND_UNSPECIFIED)
      return leave_out("collective without a kind");
    if (node.comm_bytes() <= 0) return leave_out("collectives moving no bytes (barriers)");
    const pb::ProcessGroup& g = group(node.process_group(), node_path(r, i) + ".process_group");
    if (g.ranks_size() < 2) return leave_out("collectives on a one-rank group");
    // The same collective on several ranks is one instance, timed by its fastest rank.
    const int occurrence = occurrences_[{r, g.id(), node.name()}]++;
    const auto key = std::make_tuple(g.id(), node.name(), occurrence);
    // The curves describe collectives that ran alone (add_overlapped_comm took the others).
    if (beside_compute_.count(i) > 0) return;
    const auto it = instances_.find(key);
    if (it != instances_.end()) {
      it->second.seconds = std::min(it->second.seconds, node.duration_s());
      return;
    }
    CommSample s = comm_sample(node, g);
    s.seconds = node.duration_s();
    s.blocking = plan::is_blocking_collective(node);
    instances_.emplace(key, std::move(s));
  }

  const pb::ExecGraph& trace_;
  const std::string& file_;
  const SampleOptions& options_;
  TraceSamples& out_;
  std::unique_ptr<topologies::Topology> topology_;
  std::unique_ptr<sim::CollectiveCostModel> collectives_;
  // Of the rank being read: when a communication-stream collective was in flight, when compute
  // ran, and its collectives beside compute (add_overlapped_comm).
  std::vector<base::Interval> in_flight_, computing_;
  std::set<int> beside_compute_;  // its nodes add_overlapped_comm took
  int64_t host_ranks_ = 0;        // of the rank being read
  std::map<std::string, std::string>
      resolved_;  // device names as the trace gives them -> spec names
  std::map<std::string, int64_t> left_out_;
  // The trace's sends by (sender, receiver, tag), built at the first receive (matching_send).
  std::map<std::tuple<int64_t, int64_t, int64_t>, const pb::ExecNode*> sends_;
  bool sends_indexed_ = false;
  std::map<std::tuple<int, int64_t, std::string>, int> occurrences_;
  std::map<std::tuple<int64_t, std::string, int>, CommSample> instances_;
  struct Arrival {
    std::string device;
    double seconds = 0;
    double compute_s = 0;  // since the rank last waited on the group
  };
  std::map<std::tuple<int64_t, std::string, int>, std::vector<Arrival>> arrivals_;  // per instance
};

}  // namespace

void add_trace_samples(const pb::ExecGraph& trace, const std::string& file,
                       const SampleOptions& options, TraceSamples& out) {
  TraceReader(trace, file, options, out).run();
}

}  // namespace orrery::calibration
