// Which kind of file system a folder lives on: a checkpoint's measured write speed means local
// disk, a network file system or memory, and calibration must know which (docs/calibration.md,
// "Checkpoint storage").
#pragma once

#include <filesystem>
#include <string>

namespace orrery::base {

enum class StorageTier { kLocalDisk, kNetwork, kMemory, kUnknown };

// Linux's name for the type of the file system holding `path` (statfs f_type: "ext2/ext3",
// "xfs", "nfs", "lustre", "tmpfs", ...), "0x<hex>" for a type without a name here, "" when
// statfs fails (the path does not exist).
std::string filesystem_type(const std::filesystem::path& path);

// The storage tier a type named by filesystem_type() stands for. FUSE, 9p and unnamed types are
// kUnknown: a FUSE mount may be an object store or a local disk, and nothing here can tell.
StorageTier storage_tier(const std::string& filesystem_type);

// Asks the kernel to drop `file`'s pages from the page cache (posix_fadvise DONTNEED: clean pages
// only, so a file written durably goes entirely), so that reading it next measures the storage,
// not memory. Best effort: false when the file cannot be opened or the kernel declines.
bool drop_cached_pages(const std::filesystem::path& file);

}  // namespace orrery::base
