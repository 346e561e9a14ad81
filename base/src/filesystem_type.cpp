#include "orrery/base/filesystem_type.hpp"

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>

namespace orrery::base {
namespace {

struct KnownType {
  uint64_t magic;  // statfs f_type, from linux/magic.h and each file system's sources
  const char* name;
  StorageTier tier;
};

constexpr std::array kTypes{
    KnownType{0xEF53, "ext2/ext3", StorageTier::kLocalDisk},  // ext4 shares ext2's magic
    KnownType{0x58465342, "xfs", StorageTier::kLocalDisk},
    KnownType{0x9123683E, "btrfs", StorageTier::kLocalDisk},
    KnownType{0x2FC12FC1, "zfs", StorageTier::kLocalDisk},
    KnownType{0xF2F52010, "f2fs", StorageTier::kLocalDisk},
    // A container's writable layer sits on the host's local disk.
    KnownType{0x794C7630, "overlayfs", StorageTier::kLocalDisk},
    KnownType{0x01021994, "tmpfs", StorageTier::kMemory},
    KnownType{0x858458F6, "ramfs", StorageTier::kMemory},
    KnownType{0x6969, "nfs", StorageTier::kNetwork},
    KnownType{0x0BD00BD0, "lustre", StorageTier::kNetwork},
    KnownType{0x47504653, "gpfs", StorageTier::kNetwork},
    KnownType{0x19830326, "beegfs", StorageTier::kNetwork},
    KnownType{0x00C36400, "ceph", StorageTier::kNetwork},
    KnownType{0xFF534D42, "cifs", StorageTier::kNetwork},
    KnownType{0xFE534D42, "smb2", StorageTier::kNetwork},
    KnownType{0x65735546, "fuse", StorageTier::kUnknown},
    KnownType{0x01021997, "9p", StorageTier::kUnknown},
};

}  // namespace

std::string filesystem_type(const std::filesystem::path& path) {
  struct statfs info {};
  if (::statfs(path.c_str(), &info) != 0) return "";
  const auto magic = static_cast<uint64_t>(static_cast<uint32_t>(info.f_type));
  for (const auto& t : kTypes) {
    if (t.magic == magic) return t.name;
  }
  char hex[24];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(magic));
  return hex;
}

StorageTier storage_tier(const std::string& filesystem_type) {
  for (const auto& t : kTypes) {
    if (filesystem_type == t.name) return t.tier;
  }
  return StorageTier::kUnknown;
}

bool drop_cached_pages(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool dropped = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return dropped;
}

}  // namespace orrery::base
