// The profile files (plan/frameworks/*.yaml) as compiled into the library by orrery_embed.
#pragma once

#include <span>

#include "orrery/traces/embedded.hpp"

namespace orrery::plan::frameworks {

// Generated at build time (cmake/OrreryEmbed.cmake).
std::span<const orrery::EmbeddedFile> embedded_files();

}  // namespace orrery::plan::frameworks
