// What an FFN activation implies for the layer's shape, shared by the op decomposition, the
// simulator's checkpointing policies and the executor's model.
#pragma once

#include "orrery/pb/model.pb.h"

namespace orrery::models {

// Gated activations (SwiGLU, GeGLU) have a gate projection beside the up projection: three FFN
// matrices instead of two.
inline bool gated_activation(pb::Activation a) {
  return a == pb::ACTIVATION_SWIGLU || a == pb::ACTIVATION_GEGLU;
}

}  // namespace orrery::models
