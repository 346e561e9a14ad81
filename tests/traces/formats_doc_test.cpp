// docs/formats.md documents every field of every file format: a field added to a .proto without
// a line in the reference fails here.
#include <fstream>
#include <sstream>

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"
#include "orrery/pb/sim_result.pb.h"

namespace orrery {
namespace {

TEST(FormatsDoc, EveryMessageAndFieldIsDocumented) {
  std::ifstream in(std::string(ORRERY_SOURCE_DIR) + "/docs/formats.md");
  ASSERT_TRUE(in) << "docs/formats.md missing";
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string doc = buf.str();
  const google::protobuf::FileDescriptor* files[] = {
      pb::ModelSpec::descriptor()->file(),  pb::ClusterSpec::descriptor()->file(),
      pb::Plan::descriptor()->file(),       pb::ExecGraph::descriptor()->file(),
      pb::SimResult::descriptor()->file(),  pb::CalibrationProfile::descriptor()->file()};
  int fields = 0;
  for (const auto* file : files) {
    for (int m = 0; m < file->message_type_count(); ++m) {
      const auto* msg = file->message_type(m);
      EXPECT_NE(doc.find("`" + msg->name() + "`"), std::string::npos)
          << msg->name() << " is not described in docs/formats.md";
      for (int f = 0; f < msg->field_count(); ++f, ++fields) {
        EXPECT_NE(doc.find("| `" + msg->field(f)->name() + "` |"), std::string::npos)
            << msg->name() << "." << msg->field(f)->name() << " has no row in docs/formats.md";
      }
    }
  }
  EXPECT_GT(fields, 100);
}

}  // namespace
}  // namespace orrery
