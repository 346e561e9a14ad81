// A field's declared unit (options.proto's pb::Unit) as base's units::Unit, so that base stays
// free of generated code. Private to traces/: its readers and range checks print with it.
#pragma once

#include "orrery/base/units.hpp"
#include "orrery/pb/options.pb.h"

namespace orrery::detail {

inline base::units::Unit base_unit(pb::Unit unit) {
  switch (unit) {
    case pb::UNIT_SECONDS:
      return base::units::Unit::kSeconds;
    case pb::UNIT_BYTES:
      return base::units::Unit::kBytes;
    case pb::UNIT_BYTES_PER_SECOND:
      return base::units::Unit::kBytesPerSecond;
    case pb::UNIT_FLOP:
      return base::units::Unit::kFlop;
    case pb::UNIT_FLOP_PER_SECOND:
      return base::units::Unit::kFlopPerSecond;
    case pb::UNIT_WATTS:
      return base::units::Unit::kWatts;
    default:
      return base::units::Unit::kNone;
  }
}

}  // namespace orrery::detail
