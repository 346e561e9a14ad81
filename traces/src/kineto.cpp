// Kineto import (see kineto.hpp): read the complete events, nest CPU ops per thread, keep the
// outermost op orrery knows in each nest, attach GPU kernels through "External id", and write
// one ExecGraph rank.
#include "orrery/traces/kineto.hpp"
#include "orrery/traces/kineto_file.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "kineto_ops.hpp"
#include "orrery/base/error.hpp"

namespace orrery {
namespace {

using detail::KinetoOpKind;
using nlohmann::json;

constexpr double kMicro = 1e-6;
constexpr int32_t kComputeStream = 0;
constexpr int32_t kCommStream = 1;

struct Event {
  size_t index = 0;  // in traceEvents
  std::string name;
  std::string thread;  // "pid/tid"
  double ts = 0, dur = 0;
  const json* args = nullptr;
  detail::KinetoOpClass op;
  int64_t parent = -1;  // index into the CPU op list
  int64_t owner = -1;   // the outermost known op this one belongs to (itself included)
  std::vector<int64_t> children;
};

struct Kernels {
  double sum_us = 0;
  double first_us = std::numeric_limits<double>::infinity();
};

class Importer {
 public:
  Importer(std::string_view text, std::string_view file) : file_(file) {
    try {
      root_ = json::parse(text);
    } catch (const json::parse_error& e) {
      throw base::InputError(file_, line_of(text, e.byte), "",
                             std::string("not valid JSON: ") + e.what());
    } catch (const json::out_of_range& e) {
      throw base::InputError(
          file_, 0, "",
          "not valid JSON: a number too large for a double (" + std::string(e.what()) + ")");
    }
  }

  KinetoImport run() {
    check_shape();
    read_events();
    nest();
    attach_kernels();
    build();
    return std::move(out_);
  }

 private:
  static int line_of(std::string_view text, size_t byte) {
    return 1 + static_cast<int>(
                   std::count(text.begin(), text.begin() + std::min(byte, text.size()), '\n'));
  }

  [[noreturn]] void fail(size_t event, const std::string& field, const std::string& reason) const {
    throw base::InputError(
        file_, 0, "traceEvents[" + std::to_string(event) + "]" + (field.empty() ? "" : "." + field),
        reason);
  }

  void check_shape() {
    if (root_.is_array()) {
      throw base::InputError(
          file_, 0, "traceEvents",
          "a bare event list is the legacy autograd profiler's format, which records no shapes; "
          "profile with torch.profiler (Kineto) and record_shapes=True");
    }
    if (!root_.is_object() || !root_.contains("traceEvents") || !root_["traceEvents"].is_array()) {
      throw base::InputError(file_, 0, "traceEvents",
                             "missing: not a PyTorch profiler (Kineto) trace");
    }
  }

  static std::string id_text(const json& v) {
    return v.is_string() ? v.get<std::string>() : v.is_number() ? v.dump() : "";
  }

  void read_events() {
    const json& events = root_["traceEvents"];
    for (size_t i = 0; i < events.size(); ++i) {
      const json& e = events[i];
      if (!e.is_object()) continue;
      // json::value throws when the key holds another type: a non-text phase or category is
      // refused here, naming the event, rather than escaping as an internal error.
      if (e.contains("ph") && !e["ph"].is_string())
        fail(i, "ph", "got " + e["ph"].dump() + ", expected a phase such as \"X\"");
      if (e.value("ph", "") != "X") continue;
      ++out_.events;
      if (!e.contains("name") || !e["name"].is_string())
        fail(i, "name", "missing: a complete event needs a name");
      for (const char* f : {"ts", "dur"}) {
        if (!e.contains(f) || !e[f].is_number()) fail(i, f, "missing or not a number");
      }
      if (e["dur"].get<double>() < 0)
        fail(i, "dur", "got " + e["dur"].dump() + ", expected a value >= 0");
      t0_us_ = std::min(t0_us_, e["ts"].get<double>());
      if (e.contains("cat") && !e["cat"].is_string())
        fail(i, "cat", "got " + e["cat"].dump() + ", expected a category such as \"cpu_op\"");
      const std::string cat = e.value("cat", "");
      const json* args = e.contains("args") && e["args"].is_object() ? &e["args"] : &kEmpty;
      if (cat == "kernel" || cat == "Kernel") {
        if (const auto it = args->find("External id");
            it != args->end() && it->is_number_integer()) {
          kernels_.push_back({it->get<int64_t>(), e["ts"].get<double>(), e["dur"].get<double>()});
        }
        continue;
      }
      if (cat != "cpu_op" && cat != "Operator" && cat != "user_annotation") continue;
      Event ev;
      ev.index = i;
      ev.name = e["name"].get<std::string>();
      ev.thread = id_text(e.value("pid", json())) + "/" + id_text(e.value("tid", json()));
      ev.ts = e["ts"].get<double>();
      ev.dur = e["dur"].get<double>();
      ev.args = args;
      ev.op = detail::classify_kineto_op(ev.name);
      ops_.push_back(std::move(ev));
    }
  }

  // Parents by time containment per thread; owners are the outermost known ops.
  void nest() {
    std::vector<int64_t> order(ops_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const Event &x = ops_[static_cast<size_t>(a)], &y = ops_[static_cast<size_t>(b)];
      if (x.thread != y.thread) return x.thread < y.thread;
      if (x.ts != y.ts) return x.ts < y.ts;
      if (x.dur != y.dur) return x.dur > y.dur;  // the enclosing one first
      return x.index < y.index;
    });
    std::vector<int64_t> stack;
    for (int64_t i : order) {
      Event& e = ops_[static_cast<size_t>(i)];
      while (!stack.empty()) {
        const Event& top = ops_[static_cast<size_t>(stack.back())];
        if (top.thread == e.thread && e.ts + e.dur <= top.ts + top.dur) break;
        stack.pop_back();
      }
      if (!stack.empty()) {
        e.parent = stack.back();
        ops_[static_cast<size_t>(e.parent)].children.push_back(i);
      }
      stack.push_back(i);
    }
    // Parents precede children in `order`, so one pass settles every owner.
    for (int64_t i : order) {
      Event& e = ops_[static_cast<size_t>(i)];
      const int64_t inherited = e.parent >= 0 ? ops_[static_cast<size_t>(e.parent)].owner : -1;
      e.owner = inherited >= 0 ? inherited : e.op.kind != KinetoOpKind::kNone ? i : -1;
    }
  }

  void attach_kernels() {
    std::map<int64_t, int64_t> by_external_id;
    for (size_t i = 0; i < ops_.size(); ++i) {
      const auto it = ops_[i].args->find("External id");
      if (it != ops_[i].args->end() && it->is_number_integer())
        by_external_id.emplace(it->get<int64_t>(), i);
    }
    for (const auto& k : kernels_) {
      const auto it = by_external_id.find(k.external_id);
      if (it == by_external_id.end()) continue;
      const int64_t owner = ops_[static_cast<size_t>(it->second)].owner;
      if (owner < 0) continue;
      Kernels& sum = device_time_[owner];
      sum.sum_us += k.dur_us;
      sum.first_us = std::min(sum.first_us, k.ts_us);
    }
  }

  // record_param_comms in the op or below it: PyTorch's description of a collective's buffers.
  const json* comms_args(int64_t i) const {
    const Event& e = ops_[static_cast<size_t>(i)];
    if (e.name == "record_param_comms" && e.args->contains("Collective name")) return e.args;
    for (int64_t c : e.children) {
      if (const json* a = comms_args(c)) return a;
    }
    return nullptr;
  }

  static std::optional<double> number_arg(const json& args, const char* key) {
    const auto it = args.find(key);
    if (it == args.end()) return std::nullopt;
    if (it->is_number()) return it->get<double>();
    return std::nullopt;
  }

  // "Process Group Ranks": a list, or its text "[0, 1, 2, 3]".
  std::vector<int64_t> group_ranks(const json& args, size_t event) const {
    const auto it = args.find("Process Group Ranks");
    if (it == args.end()) return {};
    json list = *it;
    if (it->is_string()) {
      try {
        list = json::parse(it->get<std::string>());
      } catch (const json::exception&) {  // a syntax error, or a number past a double's range
        fail(event, "args.Process Group Ranks", "got " + it->dump() + ", expected a list of ranks");
      }
    }
    std::vector<int64_t> ranks;
    if (!list.is_array())
      fail(event, "args.Process Group Ranks", "got " + it->dump() + ", expected a list of ranks");
    for (const json& r : list) {
      if (!r.is_number_integer())
        fail(event, "args.Process Group Ranks", "got " + it->dump() + ", expected a list of ranks");
      ranks.push_back(r.get<int64_t>());
    }
    return ranks;
  }

  int64_t process_group(std::vector<int64_t> ranks) {
    for (const auto& g : out_.graph.process_groups()) {
      if (std::equal(g.ranks().begin(), g.ranks().end(), ranks.begin(), ranks.end())) return g.id();
    }
    pb::ProcessGroup* g = out_.graph.add_process_groups();
    g->set_id(out_.graph.process_groups_size() - 1);
    for (int64_t r : ranks) g->add_ranks(r);
    return g->id();
  }

  void skip(const Event& e, const std::string& why) { ++out_.skipped[e.name + ": " + why]; }

  // The collective a launch or worker event runs: record_param_comms' name, else the op's own.
  pb::CollectiveKind collective_kind(int64_t i) const {
    const json* args = comms_args(i);
    // find, not a const operator[]: that is undefined for a missing key.
    const auto name = args != nullptr ? args->find("Collective name") : json::const_iterator();
    if (args != nullptr && name != args->end() && name->is_string()) {
      const auto kind = detail::collective_from_name(name->get<std::string>());
      if (kind != pb::COLLECTIVE_KIND_UNSPECIFIED) return kind;
    }
    return ops_[static_cast<size_t>(i)].op.collective;
  }

  // Buffer bytes as nccl-tests counts them (all_gather its output, the others their input) and
  // the group's ranks, from record_param_comms under `launch` (sizes in elements of "dtype"),
  // else from the worker event's own input tensors.
  std::optional<std::pair<double, std::vector<int64_t>>> buffer_and_group(int64_t launch,
                                                                          int64_t work,
                                                                          pb::CollectiveKind kind,
                                                                          std::string& why) const {
    const json* args = launch >= 0 ? comms_args(launch) : nullptr;
    std::vector<int64_t> ranks;
    if (args != nullptr) ranks = group_ranks(*args, ops_[static_cast<size_t>(launch)].index);
    if (ranks.empty()) {
      const auto size = args != nullptr ? number_arg(*args, "Group size") : std::nullopt;
      const int64_t n = size ? static_cast<int64_t>(*size) : world_size_from_info();
      for (int64_t r = 0; r < n; ++r) ranks.push_back(r);
    }
    if (ranks.empty()) {
      why = "no group size (record_param_comms' Group size, or distributedInfo.world_size)";
      return std::nullopt;
    }
    if (kind == pb::COLLECTIVE_KIND_BARRIER) return std::make_pair(0.0, ranks);
    if (args != nullptr) {
      const json dtype = args->value("dtype", json(""));
      const auto element = detail::element_type(dtype.is_string() ? dtype.get<std::string>() : "");
      const auto in = number_arg(*args, "In msg nelems"), out = number_arg(*args, "Out msg nelems");
      if (element && in && out) {
        return std::make_pair(
            (kind == pb::COLLECTIVE_KIND_ALL_GATHER ? *out : *in) * element->bytes, ranks);
      }
    }
    // A Gloo worker event records its input tensor: the buffer of an in-place reduce or
    // broadcast, one rank's share of an all_gather's output.
    const bool in_place = kind == pb::COLLECTIVE_KIND_ALL_REDUCE ||
                          kind == pb::COLLECTIVE_KIND_BROADCAST ||
                          kind == pb::COLLECTIVE_KIND_REDUCE;
    if (work >= 0 && (in_place || kind == pb::COLLECTIVE_KIND_ALL_GATHER)) {
      const json& wargs = *ops_[static_cast<size_t>(work)].args;
      std::string ignored;
      // find, not a const operator[]: that is undefined for a missing key.
      const auto types = wargs.find("Input type");
      const bool typed =
          types != wargs.end() && types->is_array() && !types->empty() && (*types)[0].is_string();
      const auto element = detail::element_type(typed ? (*types)[0].get<std::string>() : "");
      const auto dims = wargs.find("Input Dims");
      if (element && dims != wargs.end() && dims->is_array() && !dims->empty() &&
          (*dims)[0].is_array() && !(*dims)[0].empty()) {
        double elements = 1;
        for (const json& d : (*dims)[0]) elements *= d.is_number() ? d.get<double>() : 0;
        if (!in_place) elements *= static_cast<double>(ranks.size());
        return std::make_pair(elements * element->bytes, ranks);
      }
    }
    why = "no buffer sizes (record_param_comms' In/Out msg nelems and dtype)";
    return std::nullopt;
  }

  // A collective node: `launch` is the op that issued it (c10d::, record_param_comms, nccl:),
  // `work` the Gloo worker event that ran it (-1: none); the duration is the GPU kernels' time
  // when the launch has kernels, else the worker event's span.
  bool fill_collective(int64_t launch, int64_t work, pb::ExecNode& n) {
    const int64_t timed = work >= 0 ? work : launch;
    const Event& e = ops_[static_cast<size_t>(timed)];
    const pb::CollectiveKind kind = collective_kind(launch >= 0 ? launch : work);
    if (kind == pb::COLLECTIVE_KIND_UNSPECIFIED) {
      skip(e, "not a collective orrery models (send/recv, gather, scatter)");
      return false;
    }
    std::string why;
    const auto sized = buffer_and_group(launch, work, kind, why);
    if (!sized) {
      skip(e, why);
      return false;
    }
    max_group_ = std::max<int64_t>(max_group_, static_cast<int64_t>(sized->second.size()));
    n.set_kind(pb::NODE_KIND_COLLECTIVE);
    n.set_stream(kCommStream);
    n.set_collective(kind);
    n.set_process_group(process_group(sized->second));
    n.set_comm_bytes(sized->first);
    return true;
  }

  bool fill_compute(int64_t i, pb::ExecNode& n) {
    const Event& e = ops_[static_cast<size_t>(i)];
    std::string why;
    std::optional<detail::ComputeCount> c;
    try {
      c = detail::count_compute(e.name, e.op.op_class, *e.args, why);
    } catch (const std::invalid_argument& bad) {
      fail(e.index, "args.Input Dims", bad.what());
    }
    if (!c) {
      skip(e, why);
      return false;
    }
    n.set_kind(pb::NODE_KIND_COMPUTE);
    n.set_stream(kComputeStream);
    n.set_op_class(e.op.op_class);
    n.set_flops(c->flops);
    n.set_bytes_read(c->bytes_read);
    n.set_bytes_written(c->bytes_written);
    for (int64_t d : c->shape) n.add_shape(d);
    n.set_dtype(c->dtype);
    return true;
  }

  int64_t world_size_from_info() const {
    const json* info = distributed_info();
    return info != nullptr && info->value("world_size", json()).is_number_integer()
               ? (*info)["world_size"].get<int64_t>()
               : 0;
  }

  const json* distributed_info() const {
    const auto it = root_.find("distributedInfo");
    return it != root_.end() && it->is_object() ? &*it : nullptr;
  }

  static bool is_worker(const Event& e) { return e.name.rfind("gloo:", 0) == 0; }

  // Gloo runs a process group's collectives in the order they were issued: the k-th worker event
  // of a kind belongs to the k-th launch of that kind before it.
  std::map<int64_t, int64_t> match_workers() const {
    std::vector<int64_t> launches, workers;
    for (size_t i = 0; i < ops_.size(); ++i) {
      const Event& e = ops_[i];
      if (e.owner != static_cast<int64_t>(i) || e.op.kind != KinetoOpKind::kCollective) continue;
      (is_worker(e) ? workers : launches).push_back(static_cast<int64_t>(i));
    }
    const auto by_time = [&](int64_t a, int64_t b) {
      const Event &x = ops_[static_cast<size_t>(a)], &y = ops_[static_cast<size_t>(b)];
      return x.ts != y.ts ? x.ts < y.ts : x.index < y.index;
    };
    std::sort(launches.begin(), launches.end(), by_time);
    std::sort(workers.begin(), workers.end(), by_time);
    std::map<int64_t, int64_t> launch_of;
    std::set<int64_t> used;
    for (int64_t w : workers) {
      for (int64_t l : launches) {
        if (used.count(l) || ops_[static_cast<size_t>(l)].ts > ops_[static_cast<size_t>(w)].ts)
          continue;
        if (collective_kind(l) != collective_kind(w)) continue;
        used.insert(l);
        launch_of[w] = l;
        break;
      }
    }
    return launch_of;
  }

  void build() {
    struct Pending {
      double start_us;
      size_t index;
      pb::ExecNode node;
    };
    const std::map<int64_t, int64_t> launch_of = match_workers();
    std::set<int64_t> launched_by_worker;
    for (const auto& [w, l] : launch_of) launched_by_worker.insert(l);
    std::vector<Pending> nodes;
    for (size_t i = 0; i < ops_.size(); ++i) {
      const Event& e = ops_[i];
      const auto self = static_cast<int64_t>(i);
      if (e.owner != self) continue;
      const auto kernels = device_time_.find(self);
      pb::ExecNode n;
      n.set_name(e.name);
      n.set_layer(-1);
      n.set_micro_batch(-1);
      n.set_stage(-1);
      bool ok = false;
      if (e.op.kind == KinetoOpKind::kCompute) {
        ok = fill_compute(self, n);
        if (ok) n.set_op(e.name);
      } else if (is_worker(e)) {
        const auto l = launch_of.find(self);
        ok = fill_collective(l == launch_of.end() ? -1 : l->second, self, n);
      } else if (kernels != device_time_.end()) {
        ok = fill_collective(self, -1, n);
      } else if (!launched_by_worker.count(self)) {
        // An asynchronous collective's CPU op only enqueues it; its time is on the GPU or in a
        // worker thread, and this trace has neither for it.
        skip(e, "launch only (no GPU kernel or gloo: worker event times it)");
      }
      if (!ok) continue;
      double start = e.ts, dur = e.dur;
      if (kernels != device_time_.end()) {
        start = kernels->second.first_us;
        dur = kernels->second.sum_us;
      }
      n.set_start_s((start - t0_us_) * kMicro);
      n.set_duration_s(dur * kMicro);
      nodes.push_back({start, e.index, std::move(n)});
    }
    std::sort(nodes.begin(), nodes.end(), [](const Pending& a, const Pending& b) {
      return a.start_us != b.start_us ? a.start_us < b.start_us : a.index < b.index;
    });
    pb::ExecGraph& g = out_.graph;
    const json* info = distributed_info();
    const int64_t rank = info != nullptr && info->value("rank", json()).is_number_integer()
                             ? (*info)["rank"].get<int64_t>()
                             : 0;
    g.set_producer("pytorch profiler (kineto), imported by orrery");
    g.set_world_size(std::max({world_size_from_info(), max_group_, rank + 1, int64_t{1}}));
    if (const auto it = root_.find("deviceProperties");
        it != root_.end() && it->is_array() && !it->empty() &&
        (*it)[0].value("name", json()).is_string()) {
      g.set_device((*it)[0]["name"].get<std::string>());
    }
    pb::RankGraph& r = *g.add_ranks();
    r.set_rank(rank);
    r.set_device(rank);
    r.add_streams("compute");
    r.add_streams("comm");
    for (size_t i = 0; i < nodes.size(); ++i) {
      nodes[i].node.set_id(static_cast<int64_t>(i));
      *r.add_nodes() = std::move(nodes[i].node);
    }
  }

  struct Kernel {
    int64_t external_id;
    double ts_us, dur_us;
  };

  static inline const json kEmpty = json::object();
  std::string file_;
  json root_;
  std::vector<Event> ops_;
  std::vector<Kernel> kernels_;
  std::map<int64_t, Kernels> device_time_;
  double t0_us_ = std::numeric_limits<double>::infinity();
  int64_t max_group_ = 0;
  KinetoImport out_;
};

}  // namespace

bool is_kineto_trace(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{') return false;
  return text.find("\"traceEvents\"") != std::string_view::npos;
}

bool is_kineto_trace_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  constexpr std::string_view key = "\"traceEvents\"";
  std::string chunk(size_t{1} << 20, '\0');
  std::string tail;  // the end of the previous piece, for a key split between two
  bool first = true;
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const std::string piece = tail + chunk.substr(0, static_cast<size_t>(in.gcount()));
    if (first) {
      const size_t start = piece.find_first_not_of(" \t\r\n");
      if (start == std::string::npos) {
        if (in) continue;
        return false;
      }
      if (piece[start] != '{') return false;
      first = false;
    }
    if (piece.find(key) != std::string::npos) return true;
    tail = piece.substr(piece.size() - std::min(piece.size(), key.size() - 1));
  }
  return false;
}

KinetoImport import_kineto(std::string_view text, std::string_view file) {
  return Importer(text, file).run();
}

}  // namespace orrery
