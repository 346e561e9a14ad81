// Spec files in JSON read as a stream of parser events (traces/src/json_stream.cpp), for files
// too large to hold as text and a tree: measured traces reach hundreds of MB.
#pragma once

#include <filesystem>

#include <google/protobuf/message.h>

#include "orrery/traces/spec_io.hpp"

namespace orrery {

// read_spec_file for a JSON file, each value going straight into its field: memory for the
// message alone, never the file's text or a tree of it. Same checks, messages and result as
// read_spec_file.
void read_json_file_streaming(const std::filesystem::path& file, google::protobuf::Message* out,
                              SourceMap* where = nullptr);

}  // namespace orrery
