#include "orrery/traces/perfetto.hpp"

#include <cmath>
#include <map>
#include <tuple>

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

// Microseconds, rounded to the nanosecond so the text is stable.
std::string micros(double seconds) { return base::units::number(std::round(seconds * 1e9) / 1e3); }

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

std::string args(const pb::ExecNode& n) {
  std::string a = "{\"id\":" + std::to_string(n.id());
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

}  // namespace

std::string to_perfetto_json(const std::vector<TimelineSource>& sources) {
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const std::string& event) {
    out += (first ? "" : ",\n") + event;
    first = false;
  };
  // Process ids: source s, rank r -> s * stride + r, so sources never collide.
  int64_t stride = 1;
  for (const auto& s : sources) stride = std::max(stride, s.graph->world_size());
  int64_t flow_id = 0;
  for (size_t si = 0; si < sources.size(); ++si) {
    const auto& src = sources[si];
    const std::string prefix = src.label.empty() ? "" : src.label + " ";
    // Sends by (sender, receiver, tag), to draw arrows to the matching receives.
    std::map<std::tuple<int64_t, int64_t, int64_t>, std::pair<const pb::ExecNode*, int64_t>> sends;
    for (const auto& rank : src.graph->ranks()) {
      for (const auto& n : rank.nodes()) {
        if (n.kind() == pb::NODE_KIND_SEND && n.has_start_s()) {
          sends[{rank.rank(), n.peer(), n.tag()}] = {&n, rank.rank()};
        }
      }
    }
    for (const auto& rank : src.graph->ranks()) {
      const int64_t pid = static_cast<int64_t>(si) * stride + rank.rank();
      emit("{\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
           ",\"name\":\"process_name\",\"args\":{\"name\":" +
           quoted(prefix + "rank " + std::to_string(rank.rank()) + " (device " +
                  std::to_string(rank.device()) + ")") +
           "}}");
      emit("{\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
           ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":" + std::to_string(pid) +
           "}}");
      for (int t = 0; t < rank.streams_size(); ++t) {
        emit("{\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(t) +
             ",\"name\":\"thread_name\",\"args\":{\"name\":" + quoted(rank.streams(t)) + "}}");
      }
      for (const auto& n : rank.nodes()) {
        if (!n.has_start_s() || !n.has_duration_s()) continue;
        const std::string where =
            ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(n.stream());
        emit("{\"ph\":\"X\",\"name\":" + quoted(n.name()) + ",\"cat\":" + quoted(category(n)) +
             where + ",\"ts\":" + micros(n.start_s()) + ",\"dur\":" + micros(n.duration_s()) +
             ",\"args\":" + args(n) + "}");
        if (n.kind() != pb::NODE_KIND_RECV) continue;
        auto it = sends.find({n.peer(), rank.rank(), n.tag()});
        if (it == sends.end()) continue;
        const pb::ExecNode& s = *it->second.first;
        const int64_t spid = static_cast<int64_t>(si) * stride + it->second.second;
        const std::string id = std::to_string(flow_id++);
        emit("{\"ph\":\"s\",\"id\":" + id +
             ",\"name\":\"p2p\",\"cat\":\"p2p\",\"pid\":" + std::to_string(spid) +
             ",\"tid\":" + std::to_string(s.stream()) + ",\"ts\":" + micros(s.start_s()) + "}");
        emit("{\"ph\":\"f\",\"bp\":\"e\",\"id\":" + id + ",\"name\":\"p2p\",\"cat\":\"p2p\"" +
             where + ",\"ts\":" + micros(n.start_s() + n.duration_s()) + "}");
      }
    }
  }
  return out + "\n]}\n";
}

}  // namespace orrery
