// A data file compiled into the binary (presets), see cmake/OrreryEmbed.cmake.
#pragma once

#include <string_view>

namespace orrery {

struct EmbeddedFile {
  std::string_view name;  // file name without folder and extension: the preset's name
  std::string_view text;
};

}  // namespace orrery
