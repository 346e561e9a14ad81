#include "orrery/traces/perfetto.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include <google/protobuf/descriptor.h>

#include "orrery/base/units.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery {
namespace {

// JSON string literal (names are ours, but a model name may hold anything).
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
      continue;
    }
    out += c;
  }
  return out + "\"";
}

int64_t to_ns(double seconds) { return std::llround(seconds * 1e9); }

// The format's unit is the microsecond; whole nanoseconds print exactly as three decimals.
std::string micros(int64_t ns) {
  char buf[32];
  const int64_t whole = ns / 1000, frac = ns % 1000;
  if (frac == 0) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(whole));
  } else {
    std::snprintf(buf, sizeof buf, "%s%lld.%03lld", ns < 0 && whole == 0 ? "-" : "",
                  static_cast<long long>(whole), static_cast<long long>(std::llabs(frac)));
    // Trailing zeros of the fraction carry nothing.
    std::string s(buf);
    while (s.back() == '0') s.pop_back();
    return s;
  }
  return buf;
}

std::string enum_name(const google::protobuf::EnumDescriptor* e, int v) {
  const auto* value = e->FindValueByNumber(v);
  return value ? enum_value_name(*value) : std::to_string(v);
}

std::string category(const pb::ExecNode& n) {
  switch (n.kind()) {
    case pb::NODE_KIND_COMPUTE:
      return enum_name(pb::OpClass_descriptor(), n.op_class());
    case pb::NODE_KIND_COLLECTIVE:
      return enum_name(pb::CollectiveKind_descriptor(), n.collective());
    case pb::NODE_KIND_SEND:
      return "send";
    case pb::NODE_KIND_RECV:
      return "recv";
    default:
      return "node";
  }
}

std::string args(const pb::ExecNode& n,
                 const std::vector<std::pair<std::string, long long>>& indices) {
  std::string a = "{\"id\":" + std::to_string(n.id()) + ",\"node\":" + quoted(n.name());
  for (const auto& [key, value] : indices) a += ",\"" + key + "\":" + std::to_string(value);
  if (n.flops() > 0) a += ",\"flops\":" + base::units::number(n.flops());
  if (n.bytes_read() + n.bytes_written() > 0) {
    a += ",\"bytes\":" + base::units::number(n.bytes_read() + n.bytes_written());
  }
  if (n.comm_bytes() > 0) a += ",\"comm_bytes\":" + base::units::number(n.comm_bytes());
  if (n.kind() == pb::NODE_KIND_COLLECTIVE)
    a += ",\"process_group\":" + std::to_string(n.process_group());
  if (!n.algorithm().empty()) a += ",\"algorithm\":" + quoted(n.algorithm());
  if (n.kind() == pb::NODE_KIND_SEND || n.kind() == pb::NODE_KIND_RECV) {
    a += ",\"peer\":" + std::to_string(n.peer()) + ",\"tag\":" + std::to_string(n.tag());
  }
  return a + "}";
}

// One drawn node: its whole-nanosecond interval and the track (tid) it lands on.
struct Slice {
  const pb::ExecNode* node = nullptr;
  int64_t start_ns = 0, end_ns = 0;
  int tid = 0;
};

// A rank's slices with tracks assigned, and the names of every track it uses.
struct RankTracks {
  std::vector<Slice> slices;                       // in the rank's node order
  std::vector<std::pair<int, std::string>> names;  // (tid, name), tid order
};

std::string stream_name(const pb::RankGraph& rank, int stream) {
  return stream >= 0 && stream < rank.streams_size() ? rank.streams(stream)
                                                     : "stream " + std::to_string(stream);
}

// Interval partitioning per stream: a slice goes to the first track of its stream whose last
// slice ended by its start; a stream's first track keeps the stream's own tid, extra tracks get
// tids after every stream's.
RankTracks assign_tracks(const pb::RankGraph& rank) {
  RankTracks out;
  std::map<int, std::vector<size_t>> by_stream;
  for (const auto& n : rank.nodes()) {
    if (!n.has_start_s() || !n.has_duration_s()) continue;
    const int64_t start = to_ns(n.start_s());
    out.slices.push_back({&n, start, std::max(start, to_ns(n.start_s() + n.duration_s())), 0});
    by_stream[n.stream()].push_back(out.slices.size() - 1);
  }
  int next_tid = rank.streams_size();
  for (const auto& [stream, members] : by_stream) next_tid = std::max(next_tid, stream + 1);
  for (int t = 0; t < rank.streams_size(); ++t) out.names.push_back({t, rank.streams(t)});
  for (auto& [stream, members] : by_stream) {
    if (stream >= rank.streams_size()) out.names.push_back({stream, stream_name(rank, stream)});
    std::stable_sort(members.begin(), members.end(), [&](size_t a, size_t b) {
      const Slice &x = out.slices[a], &y = out.slices[b];
      return std::tie(x.start_ns, y.end_ns) < std::tie(y.start_ns, x.end_ns);
    });
    std::vector<std::pair<int64_t, int>> tracks;  // (end of its last slice, tid)
    for (size_t i : members) {
      Slice& s = out.slices[i];
      auto free = std::find_if(tracks.begin(), tracks.end(),
                               [&](const auto& t) { return t.first <= s.start_ns; });
      if (free == tracks.end()) {
        const int tid = tracks.empty() ? stream : next_tid++;
        if (!tracks.empty()) {
          out.names.push_back(
              {tid, stream_name(rank, stream) + " (" + std::to_string(tracks.size() + 1) + ")"});
        }
        tracks.push_back({0, tid});
        free = tracks.end() - 1;
      }
      free->first = s.end_ns;
      s.tid = free->second;
    }
  }
  std::sort(out.names.begin(), out.names.end());
  return out;
}

// A place on the timeline: process, track and instant.
struct Point {
  int64_t pid = 0;
  int tid = 0;
  int64_t ns = 0;
};

std::string where(const Point& p) {
  return ",\"pid\":" + std::to_string(p.pid) + ",\"tid\":" + std::to_string(p.tid) +
         ",\"ts\":" + micros(p.ns);
}

class Writer {
 public:
  void emit(const std::string& event) {
    out_ += (first_ ? "" : ",\n") + event;
    first_ = false;
  }
  // An arrow between two instants of two tracks; its end binds to the slice it enters.
  void flow(const char* name, const Point& from, const Point& to) {
    const std::string id = std::to_string(flow_id_++);
    const std::string common =
        ",\"id\":" + id + ",\"name\":\"" + name + "\",\"cat\":\"" + name + "\"";
    emit("{\"ph\":\"s\"" + common + where(from) + "}");
    emit("{\"ph\":\"f\",\"bp\":\"e\"" + common + where(to) + "}");
  }
  std::string finish() {
    return "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n" + out_ + "\n]}\n";
  }

 private:
  std::string out_;
  bool first_ = true;
  int64_t flow_id_ = 0;
};

void emit_metadata(Writer& w, int64_t pid, const std::string& process, const RankTracks& tracks) {
  const std::string p = "{\"ph\":\"M\",\"pid\":" + std::to_string(pid);
  w.emit(p + ",\"name\":\"process_name\",\"args\":{\"name\":" + quoted(process) + "}}");
  w.emit(p + ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":" + std::to_string(pid) +
         "}}");
  for (const auto& [tid, name] : tracks.names) {
    w.emit(p + ",\"tid\":" + std::to_string(tid) +
           ",\"name\":\"thread_name\",\"args\":{\"name\":" + quoted(name) + "}}");
  }
}

void emit_slices(Writer& w, int64_t pid, const RankTracks& tracks) {
  for (const Slice& s : tracks.slices) {
    std::vector<std::pair<std::string, long long>> indices;
    const std::string op = perfetto_op_name(s.node->name(), &indices);
    w.emit("{\"ph\":\"X\",\"name\":" + quoted(op) + ",\"cat\":" + quoted(category(*s.node)) +
           ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(s.tid) +
           ",\"ts\":" + micros(s.start_ns) + ",\"dur\":" + micros(s.end_ns - s.start_ns) +
           ",\"args\":" + args(*s.node, indices) + "}");
  }
}

// Arrows for dependencies that cross tracks of one rank (a GEMM waiting for an all-gather on
// the communication stream); dependencies along one track are its order already.
void emit_dependency_flows(Writer& w, int64_t pid, const RankTracks& tracks) {
  std::map<int64_t, const Slice*> by_id;
  for (const Slice& s : tracks.slices) by_id[s.node->id()] = &s;
  for (const Slice& s : tracks.slices) {
    for (int64_t dep : s.node->data_deps()) {
      auto it = by_id.find(dep);
      if (it == by_id.end() || it->second->tid == s.tid) continue;
      w.flow("dep", {pid, it->second->tid, it->second->end_ns}, {pid, s.tid, s.start_ns});
    }
  }
}

}  // namespace

std::string perfetto_op_name(const std::string& node_name,
                             std::vector<std::pair<std::string, long long>>* indices) {
  static const std::array<std::pair<const char*, const char*>, 4> kIndices = {
      {{"L", "layer"}, {"mb", "micro_batch"}, {"bucket", "bucket"}, {"chunk", "chunk"}}};
  std::string op;
  size_t begin = 0;
  while (begin <= node_name.size()) {
    const size_t end = std::min(node_name.find('.', begin), node_name.size());
    const std::string part = node_name.substr(begin, end - begin);
    bool index = false;
    for (const auto& [prefix, arg] : kIndices) {
      const size_t n = std::char_traits<char>::length(prefix);
      if (part.size() > n && part.size() <= n + 9 && part.compare(0, n, prefix) == 0 &&
          std::all_of(part.begin() + static_cast<std::ptrdiff_t>(n), part.end(),
                      [](char c) { return c >= '0' && c <= '9'; })) {
        indices->push_back({arg, std::stoll(part.substr(n))});
        index = true;
        break;
      }
    }
    if (!index) op += (op.empty() ? "" : ".") + part;
    begin = end + 1;
  }
  return op.empty() ? node_name : op;
}

std::string to_perfetto_json(const std::vector<TimelineSource>& sources) {
  Writer w;
  // Process ids: source s, rank r -> s * stride + r, so sources never collide.
  int64_t stride = 1;
  for (const auto& s : sources) stride = std::max(stride, s.graph->world_size());
  for (size_t si = 0; si < sources.size(); ++si) {
    const auto& src = sources[si];
    const std::string prefix = src.label.empty() ? "" : src.label + " ";
    std::map<int64_t, RankTracks> tracks;  // by rank
    for (const auto& rank : src.graph->ranks()) tracks[rank.rank()] = assign_tracks(rank);
    auto pid_of = [&](int64_t rank) { return static_cast<int64_t>(si) * stride + rank; };
    for (const auto& rank : src.graph->ranks()) {
      const RankTracks& t = tracks[rank.rank()];
      emit_metadata(w, pid_of(rank.rank()),
                    prefix + "rank " + std::to_string(rank.rank()) + " (device " +
                        std::to_string(rank.device()) + ")",
                    t);
      emit_slices(w, pid_of(rank.rank()), t);
      emit_dependency_flows(w, pid_of(rank.rank()), t);
    }
    // Sends by (sender, receiver, tag), each drawn to its matching receive.
    std::map<std::tuple<int64_t, int64_t, int64_t>, std::pair<int64_t, const Slice*>> sends;
    for (const auto& [rank, t] : tracks) {
      for (const Slice& s : t.slices)
        if (s.node->kind() == pb::NODE_KIND_SEND)
          sends[{rank, s.node->peer(), s.node->tag()}] = {rank, &s};
    }
    for (const auto& [rank, t] : tracks) {
      for (const Slice& s : t.slices) {
        if (s.node->kind() != pb::NODE_KIND_RECV) continue;
        auto it = sends.find({s.node->peer(), rank, s.node->tag()});
        if (it == sends.end()) continue;
        const Slice& send = *it->second.second;
        // From the send's start (the transfer is its whole slice) to the receive's end.
        w.flow("p2p", {pid_of(it->second.first), send.tid, send.start_ns},
               {pid_of(rank), s.tid, s.end_ns});
      }
    }
  }
  return w.finish();
}

}  // namespace orrery
