#include "orrery/traces/chakra.hpp"

#include <fstream>
#include <map>
#include <string>
#include <utility>
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

// The names an export writes: `trace.<rank>.et` and `comm_groups.json`.
bool written_by_an_export(const std::string& name) {
  if (name == "comm_groups.json") return true;
  const std::string head = "trace.", tail = ".et";
  if (name.size() <= head.size() + tail.size() || name.rfind(head, 0) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  return digits.find_first_not_of("0123456789") == std::string::npos;
}

// The export replaces a folder only when asked to and only when it holds nothing but an earlier
// export's files: a folder of the user's own is never removed.
void check_output_folder(const std::filesystem::path& folder, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = folder.has_parent_path() ? folder.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw base::InputError(folder.string(), 0, "",
                           "its folder " + dir.string() + " does not exist");
  if (!fs::exists(folder, ec)) return;
  if (!overwrite)
    throw base::InputError(folder.string(), 0, "",
                           "already exists; refusing to overwrite it (choose another path or "
                           "remove it)");
  if (!fs::is_directory(folder, ec))
    throw base::InputError(folder.string(), 0, "",
                           "is a file; a Chakra export is a folder (choose another path)");
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (!written_by_an_export(name) || !entry.is_regular_file(ec))
      throw base::InputError(folder.string(), 0, "",
                             "holds " + name +
                                 ", which a Chakra export does not write; refusing to replace "
                                 "the folder (choose another path)");
  }
}

// "out/" names the folder "out"; "." and ".." name no new folder.
std::filesystem::path folder_named(const std::filesystem::path& given) {
  std::filesystem::path folder = given.lexically_normal();
  if (!folder.has_filename()) folder = folder.parent_path();
  const std::string name = folder.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw base::InputError(given.string(), 0, "",
                           "a Chakra export needs a folder name of its own (e.g. out/chakra)");
  return folder;
}

}  // namespace

std::vector<std::filesystem::path> write_chakra(const pb::ExecGraph& graph,
                                                const std::filesystem::path& given,
                                                bool overwrite) {
  // The files are written into a temporary folder and renamed into place as one: a failed,
  // interrupted or killed export leaves the previous set (or nothing), never part of a new one.
  require_every_rank(graph);
  const std::filesystem::path folder = folder_named(given);
  const auto groups = detail::chakra_groups(graph);
  check_output_folder(folder, overwrite);
  std::vector<std::pair<std::string, std::string>> contents;
  std::vector<std::filesystem::path> files;
  for (const auto& rank : graph.ranks()) {
    files.push_back(chakra_rank_path(folder, rank.rank()));
    contents.emplace_back(files.back().filename().string(), rank_bytes(graph, rank, groups));
  }
  files.push_back(chakra_comm_groups_path(folder));
  contents.emplace_back(files.back().filename().string(), comm_groups_json(groups));
  detail::remove_stale_temporaries(folder, folder.has_parent_path() ? folder.parent_path() : ".");
  base::write_folder_durably(folder, contents);
  return files;
}

std::filesystem::path chakra_workload_prefix(const std::filesystem::path& folder) {
  return folder / "trace";
}

std::filesystem::path chakra_rank_path(const std::filesystem::path& folder, int64_t rank) {
  return folder / ("trace." + std::to_string(rank) + ".et");
}

std::filesystem::path chakra_comm_groups_path(const std::filesystem::path& folder) {
  return folder / "comm_groups.json";
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
