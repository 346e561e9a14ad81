// Validated ranges of the file formats' physical and count fields: a value outside its range is
// a typo or a damaged file (a 0.5 B/s NVLink, a 1.3 s switch latency, 1e308), never a real machine
// or job, so the reader, and every flag that sets such a field, refuses it naming the bound and
// the reason. Each bound and its reason is listed in docs/formats.md (a test checks they agree).
#pragma once

#include <map>
#include <string>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "orrery/traces/spec_io.hpp"

namespace orrery {

// Both ends included, in the field's SI unit; -inf / +inf where only the sign (options.proto's
// positive, non_negative) bounds it.
struct FieldRange {
  double min;
  double max;
  const char* reason;
};

// Every range, keyed by "Message.field" ("LinkSpec.latency_s").
const std::map<std::string, FieldRange, std::less<>>& field_ranges();

// Why `value` breaks what the file format allows `field` (a finite number, its sign from
// options.proto, its range), quoting `text` as the user wrote it; "" when it is allowed. Flags
// that set a file's field call it, so a flag gets the same checks and messages as the file.
std::string field_value_problem(const google::protobuf::FieldDescriptor& field, double value,
                                const std::string& text);

// field_value_problem for every number set in `message` and the messages in it, for a spec made
// in code (an imported Hugging Face config, a cluster resized by --nodes) rather than read:
// throws InputError through `where` at the first field out of its range.
void check_field_values(const google::protobuf::Message& message, const SourceMap& where,
                        const std::string& path = "");

}  // namespace orrery
