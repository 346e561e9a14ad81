// The bad-input corpus for the formats themselves: tests/inputs/traces/bad/*.yaml. Each file's
// first line is `# type: <Message>` and its second `# expect: <exact error message>` (the file
// name in the message is the file's name relative to tests/inputs).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"
#include "orrery/traces/spec_io.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<google::protobuf::Message> make(const std::string& type) {
  if (type == "Plan") return std::make_unique<pb::Plan>();
  if (type == "ModelSpec") return std::make_unique<pb::ModelSpec>();
  if (type == "ClusterSpec") return std::make_unique<pb::ClusterSpec>();
  if (type == "ExecGraph") return std::make_unique<pb::ExecGraph>();
  if (type == "CalibrationProfile") return std::make_unique<pb::CalibrationProfile>();
  return nullptr;
}

std::string header(const std::string& line, const std::string& key) {
  const std::string prefix = "# " + key + ": ";
  return line.rfind(prefix, 0) == 0 ? line.substr(prefix.size()) : std::string();
}

TEST(BadInputs, EveryFileFailsWithItsExactMessage) {
  const fs::path root = ORRERY_TEST_INPUTS;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(root / "traces" / "bad")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 8u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.filename().string());
    std::ifstream in(file);
    std::string type_line, expect_line;
    std::getline(in, type_line);
    std::getline(in, expect_line);
    auto msg = make(header(type_line, "type"));
    ASSERT_NE(msg, nullptr) << "first line must be '# type: <Message>'";
    const std::string expect = header(expect_line, "expect");
    ASSERT_FALSE(expect.empty()) << "second line must be '# expect: <message>'";
    std::ifstream whole(file);
    std::string text((std::istreambuf_iterator<char>(whole)), {});
    const std::string shown = fs::relative(file, root).string();
    try {
      parse_spec(text, shown, SpecFormat::kYaml, msg.get());
      ADD_FAILURE() << "accepted";
    } catch (const base::InputError& e) {
      EXPECT_EQ(e.what(), expect);
    }
  }
}

// A number past a double's range made the JSON parser throw out_of_range, which escaped the
// reader as an internal error (found by model_spec_fuzz): an input error now.
TEST(BadInputs, AJsonNumberPastADoubleIsAnInputError) {
  pb::ModelSpec m;
  try {
    parse_spec(R"({"name": "x", "num_layers": 1e999})", "big.json", SpecFormat::kJson, &m);
    ADD_FAILURE() << "accepted";
  } catch (const base::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("big.json: not valid JSON: a number too large"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace orrery
