// Framework profiles (plan/frameworks/*.yaml, docs/simulator.md#framework-profiles): what a
// framework release does, as values of plan fields with a source each. A plan names its framework
// (`framework: megatron-core@0.6`); the profile fills the mechanism fields the plan leaves
// unstated and never changes one it states, and says which it filled.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "orrery/pb/plan.pb.h"

namespace orrery::plan {

// Every shipped profile, checked (each setting has one source, each source names a setting),
// sorted by name and first version.
const std::vector<pb::FrameworkProfile>& framework_profiles();

// "NAME@VERSION" of every release the profiles cover, and the bare "NAME" of each unversioned
// profile, sorted: the known values errors list.
std::vector<std::string> known_frameworks();

// The profile `text` ("NAME@VERSION", or "NAME" of an unversioned profile) names. Throws
// base::InputError at `file`, `line` and `field` naming the known values when the name or the
// version is unknown, or the text has no '@' and the profile needs a version.
const pb::FrameworkProfile& find_framework_profile(std::string_view text, std::string_view file,
                                                   std::string_view field, int line = 0);

// One plan field as the profile set it.
struct ProfileValue {
  std::string field;   // the plan field ("overlap_grad_reduce")
  std::string value;   // as a plan file writes it ("true", "fp32", "1")
  std::string source;  // the profile's source for it
};

struct AppliedProfile {
  std::string framework;             // "megatron-core@0.6"; empty when none applied
  std::vector<ProfileValue> filled;  // set from the profile
  std::vector<ProfileValue> stated;  // the profile's value, not used: the plan states the field
};

// Fills each field `profile` sets that `is_stated(field)` says the plan leaves unstated; a stated
// field keeps the plan's value (and is listed in `stated` with the profile's). `framework` names
// the release in the result.
AppliedProfile apply_framework_profile(pb::Plan& plan, const pb::FrameworkProfile& profile,
                                       std::string_view framework,
                                       const std::function<bool(const std::string&)>& is_stated);

}  // namespace orrery::plan
