// The kind of file system a checkpoint folder sits on (base/filesystem_type.hpp): names and tiers
// as calibration maps them, read from the running kernel.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "orrery/base/filesystem_type.hpp"

namespace orrery::base {
namespace {

TEST(FilesystemType, TiersOfTheNamedTypes) {
  EXPECT_EQ(storage_tier("ext2/ext3"), StorageTier::kLocalDisk);
  EXPECT_EQ(storage_tier("xfs"), StorageTier::kLocalDisk);
  EXPECT_EQ(storage_tier("overlayfs"), StorageTier::kLocalDisk);
  EXPECT_EQ(storage_tier("nfs"), StorageTier::kNetwork);
  EXPECT_EQ(storage_tier("lustre"), StorageTier::kNetwork);
  EXPECT_EQ(storage_tier("tmpfs"), StorageTier::kMemory);
  EXPECT_EQ(storage_tier("fuse"), StorageTier::kUnknown);
  EXPECT_EQ(storage_tier("0x1234"), StorageTier::kUnknown);
  EXPECT_EQ(storage_tier(""), StorageTier::kUnknown);
}

TEST(FilesystemType, ReadsTheKernelsTypeOfAFolder) {
  // /proc is procfs on every Linux (magic 0x9fa0), which has no name here: a hex number.
  EXPECT_EQ(filesystem_type("/proc"), "0x9fa0");
  EXPECT_EQ(filesystem_type("/no/such/folder/anywhere"), "");
  EXPECT_FALSE(filesystem_type(std::filesystem::temp_directory_path()).empty());
}

TEST(FilesystemType, DropsAFilesCachedPages) {
  const auto file = std::filesystem::temp_directory_path() / "orrery_drop_cached_pages_test";
  std::ofstream(file) << "checkpoint bytes";
  EXPECT_TRUE(drop_cached_pages(file));
  std::filesystem::remove(file);
  EXPECT_FALSE(drop_cached_pages(file));
}

}  // namespace
}  // namespace orrery::base
