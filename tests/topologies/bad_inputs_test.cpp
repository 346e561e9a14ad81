// The bad-input corpus: tests/inputs/topologies/bad/<kind>.yaml, each starting with
// "# expect: <message>", the full InputError::what() that loading it must produce.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "orrery/base/error.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "test_paths.hpp"

namespace orrery::topologies {
namespace {

TEST(TopologiesBadInputs, EachFileFailsWithItsExpectedMessage) {
  // Relative paths keep the messages independent of where the source tree lives.
  std::filesystem::current_path(std::filesystem::path(ORRERY_TEST_INPUTS) / "topologies");
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator("bad"))
    files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 30u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    std::ifstream in(file);
    std::string first;
    std::getline(in, first);
    const std::string prefix = "# expect: ";
    ASSERT_EQ(first.rfind(prefix, 0), 0u) << "first line must be '# expect: <message>'";
    try {
      load_cluster(file.string());
      ADD_FAILURE() << "loaded without an error";
    } catch (const base::InputError& e) {
      EXPECT_EQ(std::string(e.what()), first.substr(prefix.size()));
    }
  }
}

}  // namespace
}  // namespace orrery::topologies
