// The preset files compiled in by orrery_embed (topologies/CMakeLists.txt): one function per
// preset folder, each file's name (without extension) and text.
#pragma once

#include <span>

#include "orrery/traces/embedded.hpp"

namespace orrery::topologies::device_files {
std::span<const orrery::EmbeddedFile> embedded_files();  // presets/devices/*.yaml
}

namespace orrery::topologies::cluster_files {
std::span<const orrery::EmbeddedFile> embedded_files();  // presets/clusters/*.yaml
}
