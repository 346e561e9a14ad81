#include "mixed_precision.hpp"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace orrery::executor {
namespace {

// PyTorch 2.4 replaced the per-device autocast setters by ones taking the device type (the old
// ones are deprecated); 1.13 has only the old ones.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool autocast_enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void set_autocast(c10::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
at::ScalarType autocast_dtype(c10::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void set_autocast_dtype(c10::DeviceType d, at::ScalarType t) {
  at::autocast::set_autocast_dtype(d, t);
}
#else
bool autocast_enabled(c10::DeviceType d) {
  return d == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
void set_autocast(c10::DeviceType d, bool on) {
  d == c10::DeviceType::CPU ? at::autocast::set_cpu_enabled(on) : at::autocast::set_enabled(on);
}
at::ScalarType autocast_dtype(c10::DeviceType d) {
  return d == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                   : at::autocast::get_autocast_gpu_dtype();
}
void set_autocast_dtype(c10::DeviceType d, at::ScalarType t) {
  d == c10::DeviceType::CPU ? at::autocast::set_autocast_cpu_dtype(t)
                            : at::autocast::set_autocast_gpu_dtype(t);
}
#endif

}  // namespace

AutocastScope::AutocastScope(bool enabled, c10::DeviceType device, at::ScalarType dtype)
    : enabled_(enabled), device_(device) {
  if (!enabled_) return;
  previous_ = autocast_enabled(device_);
  previous_dtype_ = autocast_dtype(device_);
  set_autocast(device_, true);
  set_autocast_dtype(device_, dtype);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  // As torch.autocast's __exit__: the cached bf16 weights go when the outermost scope ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast(device_, previous_);
  set_autocast_dtype(device_, previous_dtype_);
}

std::optional<at::ScalarType> autocast_type(c10::DeviceType device) {
  if (!autocast_enabled(device)) return std::nullopt;
  return autocast_dtype(device);
}

at::ScalarType activation_wire_type(const torch::Tensor& x) {
  const auto autocast = autocast_type(x.device().type());
  return autocast == at::kBFloat16 ? at::kBFloat16 : x.scalar_type();
}

torch::Tensor gloo_view(const torch::Tensor& t) {
  // Same element size (2 bytes), so the view keeps the shape and the collective moves the bytes.
  return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t;
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "fp32";
    case at::kBFloat16:
      return "bf16";
    case at::kHalf:
      return "fp16";
    case at::kDouble:
      return "fp64";
    default:
      return "";
  }
}

}  // namespace orrery::executor
