#include "orrery/traces/chakra.hpp"

#include <fstream>
#include <map>
#include <memory>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <nlohmann/json.hpp>

#include "atomic_write.hpp"
#include "chakra_nodes.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "orrery/base/temp_files.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery {
namespace {

namespace io = google::protobuf::io;

// ASTRA-sim runs one NPU per file, `<prefix>.<n>.et` for n in 0..NPUs-1: a graph with a rank
// missing (a representative-rank graph) would leave NPUs without a workload.
void require_every_rank(const pb::ExecGraph& graph) {
  const int64_t world = graph.world_size() > 0 ? graph.world_size() : graph.ranks_size();
  std::vector<bool> seen(static_cast<size_t>(world), false);
  for (const auto& rank : graph.ranks()) {
    if (rank.rank() < 0 || rank.rank() >= world || seen[static_cast<size_t>(rank.rank())]) {
      throw base::InputError("", 0, "ranks",
                             "Chakra export: rank " + std::to_string(rank.rank()) +
                                 " is outside 0.." + std::to_string(world - 1) + " or repeated");
    }
    seen[static_cast<size_t>(rank.rank())] = true;
  }
  if (graph.ranks_size() != world) {
    throw base::InputError("", 0, "ranks",
                           "Chakra export: the graph holds " + std::to_string(graph.ranks_size()) +
                               " of its " + std::to_string(world) +
                               " ranks; ASTRA-sim needs a file for every rank");
  }
}

// ASTRA-sim's --comm-group-configuration file: {"<group id>": [rank, ...], ...}.
std::string comm_groups_json(const std::map<int64_t, detail::ChakraGroup>& groups) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [orrery_id, g] : groups) j[std::to_string(g.id)] = g.ranks;
  return j.dump(1) + "\n";
}

std::string rank_bytes(const pb::ExecGraph& graph, const pb::RankGraph& rank,
                       const std::map<int64_t, detail::ChakraGroup>& groups) {
  chakra::GlobalMetadata meta;
  meta.set_version("0.0.4");
  auto* producer = meta.add_attr();
  producer->set_name("producer");
  producer->set_string_val(graph.producer().empty() ? "orrery" : graph.producer());
  std::string bytes;
  {
    io::StringOutputStream raw(&bytes);
    io::CodedOutputStream out(&raw);  // flushes into `bytes` when it goes out of scope
    out.SetSerializationDeterministic(true);
    auto write = [&](const google::protobuf::Message& m) {
      out.WriteVarint32(static_cast<uint32_t>(m.ByteSizeLong()));
      m.SerializeWithCachedSizes(&out);
    };
    write(meta);
    for (const auto& n : detail::chakra_nodes(rank, groups)) write(n);
  }
  return bytes;
}

}  // namespace

std::vector<std::filesystem::path> write_chakra(const pb::ExecGraph& graph,
                                                const std::filesystem::path& prefix,
                                                bool overwrite) {
  // Every rank's file is written to a temporary first and renamed only when all are complete: a
  // failed or interrupted export leaves the previous set (or nothing), never part of a new one.
  require_every_rank(graph);
  const auto groups = detail::chakra_groups(graph);
  std::vector<std::filesystem::path> files;
  std::vector<std::unique_ptr<base::TempPath>> temps;
  for (const auto& rank : graph.ranks()) {
    const std::string bytes = rank_bytes(graph, rank, groups);
    files.push_back(prefix.string() + "." + std::to_string(rank.rank()) + ".et");
    temps.push_back(detail::write_temporary(files.back(), bytes, overwrite));
  }
  files.push_back(chakra_comm_groups_path(prefix));
  temps.push_back(detail::write_temporary(files.back(), comm_groups_json(groups), overwrite));
  for (size_t i = 0; i < files.size(); ++i) detail::commit_temporary(*temps[i], files[i]);
  return files;
}

std::filesystem::path chakra_comm_groups_path(const std::filesystem::path& prefix) {
  return prefix.string() + ".comm_groups.json";
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
