// The preset files (models/presets/*.yaml) as compiled into the library by orrery_embed.
#pragma once

#include <span>

#include "orrery/traces/embedded.hpp"

namespace orrery::models::presets {

// Generated at build time (cmake/OrreryEmbed.cmake).
std::span<const orrery::EmbeddedFile> embedded_files();

}  // namespace orrery::models::presets
