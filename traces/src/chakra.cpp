#include "orrery/traces/chakra.hpp"

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include "atomic_write.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "orrery/base/temp_files.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery {
namespace {

namespace io = google::protobuf::io;

chakra::CollectiveCommType comm_type(pb::CollectiveKind k) {
  switch (k) {
    case pb::COLLECTIVE_KIND_ALL_REDUCE:
      return chakra::ALL_REDUCE;
    case pb::COLLECTIVE_KIND_ALL_GATHER:
      return chakra::ALL_GATHER;
    case pb::COLLECTIVE_KIND_REDUCE_SCATTER:
      return chakra::REDUCE_SCATTER;
    case pb::COLLECTIVE_KIND_ALL_TO_ALL:
      return chakra::ALL_TO_ALL;
    case pb::COLLECTIVE_KIND_BROADCAST:
      return chakra::BROADCAST;
    case pb::COLLECTIVE_KIND_REDUCE:
      return chakra::REDUCE;
    default:
      return chakra::BARRIER;
  }
}

void attr(chakra::Node& n, const std::string& name, int64_t v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_int64_val(v);
}
void attr(chakra::Node& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_string_val(v);
}
void attr(chakra::Node& n, const std::string& name, bool v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_bool_val(v);
}

uint64_t micros(double seconds) { return static_cast<uint64_t>(std::llround(seconds * 1e6)); }

std::vector<chakra::Node> convert(const pb::ExecGraph& g, const pb::RankGraph& rank) {
  std::map<int64_t, std::string> group_names;
  for (const auto& pg : g.process_groups())
    group_names[pg.id()] = pg.dim() + "." + std::to_string(pg.id());
  std::vector<int64_t> last_on_stream(static_cast<size_t>(rank.streams_size()), -1);
  std::vector<chakra::Node> out;
  for (const auto& n : rank.nodes()) {
    chakra::Node c;
    c.set_id(static_cast<uint64_t>(n.id()));
    c.set_name(n.name());
    for (int64_t d : n.data_deps()) c.add_data_deps(static_cast<uint64_t>(d));
    for (int64_t d : n.ctrl_deps()) c.add_ctrl_deps(static_cast<uint64_t>(d));
    // Chakra has no streams: a node follows its stream predecessor.
    auto& prev = last_on_stream.at(static_cast<size_t>(n.stream()));
    if (prev >= 0) c.add_ctrl_deps(static_cast<uint64_t>(prev));
    prev = n.id();
    if (n.has_start_s()) c.set_start_time_micros(micros(n.start_s()));
    if (n.has_duration_s()) c.set_duration_micros(micros(n.duration_s()));
    attr(c, "is_cpu_op", false);
    switch (n.kind()) {
      case pb::NODE_KIND_COMPUTE:
        c.set_type(chakra::COMP_NODE);
        attr(c, "num_ops", static_cast<int64_t>(std::llround(n.flops())));
        attr(c, "tensor_size",
             static_cast<int64_t>(std::llround(n.bytes_read() + n.bytes_written())));
        attr(c, "op_class",
             enum_value_name(*pb::OpClass_descriptor()->FindValueByNumber(n.op_class())));
        break;
      case pb::NODE_KIND_COLLECTIVE:
        c.set_type(chakra::COMM_COLL_NODE);
        attr(c, "comm_type", static_cast<int64_t>(comm_type(n.collective())));
        attr(c, "comm_size", static_cast<int64_t>(std::llround(n.comm_bytes())));
        attr(c, "pg_name",
             group_names.count(n.process_group()) ? group_names[n.process_group()] : std::string());
        break;
      case pb::NODE_KIND_SEND:
      case pb::NODE_KIND_RECV: {
        const bool send = n.kind() == pb::NODE_KIND_SEND;
        c.set_type(send ? chakra::COMM_SEND_NODE : chakra::COMM_RECV_NODE);
        attr(c, "comm_src", send ? rank.rank() : n.peer());
        attr(c, "comm_dst", send ? n.peer() : rank.rank());
        attr(c, "comm_tag", n.tag());
        attr(c, "comm_size", static_cast<int64_t>(std::llround(n.comm_bytes())));
        break;
      }
      default:
        c.set_type(chakra::INVALID_NODE);
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

std::vector<std::filesystem::path> write_chakra(const pb::ExecGraph& graph,
                                                const std::filesystem::path& prefix,
                                                bool overwrite) {
  // Every rank's file is written to a temporary first and renamed only when all are complete: a
  // failed or interrupted export leaves the previous set (or nothing), never part of a new one.
  std::vector<std::filesystem::path> files;
  std::vector<std::unique_ptr<base::TempPath>> temps;
  for (const auto& rank : graph.ranks()) {
    std::string bytes;
    {
      io::StringOutputStream raw(&bytes);
      io::CodedOutputStream out(&raw);
      out.SetSerializationDeterministic(true);
      chakra::GlobalMetadata meta;
      meta.set_version("0.0.4");
      auto* producer = meta.add_attr();
      producer->set_name("producer");
      producer->set_string_val(graph.producer().empty() ? "orrery" : graph.producer());
      auto write = [&](const google::protobuf::Message& m) {
        out.WriteVarint32(static_cast<uint32_t>(m.ByteSizeLong()));
        m.SerializeWithCachedSizes(&out);
      };
      write(meta);
      for (const auto& n : convert(graph, rank)) write(n);
    }
    const std::filesystem::path file = prefix.string() + "." + std::to_string(rank.rank()) + ".et";
    temps.push_back(detail::write_temporary(file, bytes, overwrite));
    files.push_back(file);
  }
  for (size_t i = 0; i < files.size(); ++i) detail::commit_temporary(*temps[i], files[i]);
  return files;
}

ChakraRank read_chakra(const std::filesystem::path& file) {
  base::require_input_file(file, "a Chakra ET file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw base::EnvironmentError(file.string() + ": exists but cannot be read");
  io::IstreamInputStream raw(&in);
  io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(1 << 30);
  ChakraRank out;
  auto read = [&](google::protobuf::Message& m) {
    uint32_t size = 0;
    if (!coded.ReadVarint32(&size)) return false;
    const auto limit = coded.PushLimit(static_cast<int>(size));
    m.Clear();  // parsing merges: start from an empty message every time
    const bool ok = m.ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
    coded.PopLimit(limit);
    if (!ok)
      throw base::InputError(file.string(), 0, "",
                             "not a Chakra execution trace (a record does not parse)");
    return true;
  };
  if (!read(out.metadata)) throw base::InputError(file.string(), 0, "", "empty Chakra trace");
  chakra::Node node;
  while (read(node)) out.nodes.push_back(node);
  return out;
}

}  // namespace orrery
