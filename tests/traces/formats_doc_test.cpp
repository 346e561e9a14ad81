// docs/formats.md documents every field of every file format: a field added to a .proto without
// a line in the reference fails here.
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"
#include "orrery/pb/sim_result.pb.h"
#include "orrery/traces/field_ranges.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

std::string formats_doc() {
  std::ifstream in(std::string(ORRERY_SOURCE_DIR) + "/docs/formats.md");
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// Every file format's messages.
std::vector<const google::protobuf::Descriptor*> messages() {
  const google::protobuf::FileDescriptor* files[] = {
      pb::ModelSpec::descriptor()->file(), pb::ClusterSpec::descriptor()->file(),
      pb::Plan::descriptor()->file(),      pb::ExecGraph::descriptor()->file(),
      pb::SimResult::descriptor()->file(), pb::CalibrationProfile::descriptor()->file()};
  std::vector<const google::protobuf::Descriptor*> out;
  for (const auto* file : files) {
    for (int m = 0; m < file->message_type_count(); ++m) out.push_back(file->message_type(m));
  }
  return out;
}

TEST(FormatsDoc, EveryMessageAndFieldIsDocumented) {
  const std::string doc = formats_doc();
  ASSERT_FALSE(doc.empty()) << "docs/formats.md missing";
  int fields = 0;
  for (const auto* msg : messages()) {
    EXPECT_NE(doc.find("`" + msg->name() + "`"), std::string::npos)
        << msg->name() << " is not described in docs/formats.md";
    for (int f = 0; f < msg->field_count(); ++f, ++fields) {
      EXPECT_NE(doc.find("| `" + msg->field(f)->name() + "` |"), std::string::npos)
          << msg->name() << "." << msg->field(f)->name() << " has no row in docs/formats.md";
    }
  }
  EXPECT_GT(fields, 100);
}

// Every range (field_ranges.hpp) names a field of a file format, and has its row, with the
// reason, in the ranges table of docs/formats.md.
TEST(FormatsDoc, EveryRangeIsDocumentedWithItsReason) {
  const std::string doc = formats_doc();
  std::set<std::string> fields;
  for (const auto* msg : messages()) {
    for (int f = 0; f < msg->field_count(); ++f)
      fields.insert(msg->name() + "." + msg->field(f)->name());
  }
  for (const auto& [name, range] : field_ranges()) {
    EXPECT_TRUE(fields.contains(name)) << name << " is no field of a file format";
    EXPECT_LE(range.min, range.max) << name;
    const std::string row = "| `" + name + "` |";
    const size_t at = doc.find(row);
    ASSERT_NE(at, std::string::npos) << row << " missing from the ranges in docs/formats.md";
    const std::string line = doc.substr(at, doc.find('\n', at) - at);
    EXPECT_NE(line.find(range.reason), std::string::npos) << line;
  }
  EXPECT_GE(field_ranges().size(), 50u);
}

}  // namespace
}  // namespace orrery
