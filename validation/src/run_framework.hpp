// Which framework profile (plan/frameworks) a published run's free-text `framework` names, and
// applying it to the run's plan (docs/validation.md#published-training-runs).
#pragma once

#include <string>

#include "orrery/pb/plan.pb.h"
#include "orrery/plan/framework_profile.hpp"

namespace orrery::validation::detail {

// "NAME@VERSION" of the one profile release the text names, "" when none or several do. A
// release is named when the text holds the profile's name as a word (its hyphens also written as
// spaces: "PyTorch FSDP1" names pytorch-fsdp1) and one of its versions bounded by anything but a
// digit or a dot ("Megatron-LM megatron-core tag:core_v0.6.0" names megatron-core@0.6.0,
// "torchtitan 9dec370 (2024-12-26)" torchtitan@2024-12). When no release is named, the "NAME" of
// the unversioned profile the text names when it names no other framework ("fms-fsdp (2024-05,
// PyTorch FSDP1)" names pytorch-fsdp1); a profile that needs a version is never taken without one.
std::string profile_named_by(const std::string& framework_text);

}  // namespace orrery::validation::detail
