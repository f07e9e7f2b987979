// Autocast policies of kiln ops (docs/ops.md lists which op has which). Each op
// registers an AutocastCPU, an AutocastCUDA and an AutocastPrivateUse1 kernel (a
// backend outside PyTorch, such as the tests' fake accelerator) that applies its
// policy, then calls the op again with autocast excluded, as ATen's own wrappers do.
#pragma once
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <optional>

#include "ops.h"

namespace kiln::ops::autocast {

/// Excludes device D's autocast key for the nested call.
template <c10::DeviceType D>
struct Below {
  c10::impl::ExcludeDispatchKeyGuard guard{at::autocast::get_autocast_dispatch_key_from_device_type(D)};
};

/// The lower precision autocast runs in on D (float16 or bfloat16, as configured).
template <c10::DeviceType D>
at::ScalarType lower_dtype() {
  return at::autocast::get_autocast_dtype(D);
}

/// `t` in `dtype` when it is a floating tensor of another dtype. On the CPU through
/// kiln::cast, 1.0-1.7x faster than ATen's cast there (docs/ops.md; autocast casts
/// every weight and, backward, its gradient once a step); it keeps no cache, so a
/// weight used twice in one forward is cast twice. Elsewhere weights (leaves that
/// require grad) go through autocast's cast cache, as ATen's ops do.
template <c10::DeviceType D>
at::Tensor cast(const at::Tensor& t, at::ScalarType dtype) {
  if constexpr (D == c10::DeviceType::CPU) {
    // Strided tensors only: a oneDNN-layout or sparse CPU tensor keeps ATen's cast.
    if (t.defined() && t.layout() == at::kStrided) {
      if (!at::autocast::is_eligible(t, D) || t.scalar_type() == dtype) return t;
      return kiln::ops::cast(t, dtype);
    }
  }
  return at::autocast::cached_cast(dtype, t, D);
}
template <c10::DeviceType D>
std::optional<at::Tensor> cast(const std::optional<at::Tensor>& t, at::ScalarType dtype) {
  if (!t) return t;
  return cast<D>(*t, dtype);
}

/// Policy "input dtype": elementwise ops run in their input's dtype (the kernels
/// accumulate in float for half types); autocast casts nothing.
template <c10::DeviceType D, auto Fn>
struct KeepDtype;
template <c10::DeviceType D, typename R, typename... A, R (*Fn)(A...)>
struct KeepDtype<D, Fn> {
  static R call(A... args) {
    Below<D> below;
    return Fn(std::forward<A>(args)...);
  }
};

}  // namespace kiln::ops::autocast

/// Registers KERNEL<D> (a template over c10::DeviceType) as op NAME's autocast
/// kernel on every device type kiln trains on.
/// Example: KILN_AUTOCAST_KERNELS("bias_gelu", bias_gelu_autocast)
#define KILN_AUTOCAST_KERNELS(NAME, KERNEL)                                                  \
  TORCH_LIBRARY_IMPL(kiln, AutocastCPU, m) { m.impl(NAME, &KERNEL<c10::DeviceType::CPU>); }  \
  TORCH_LIBRARY_IMPL(kiln, AutocastCUDA, m) { m.impl(NAME, &KERNEL<c10::DeviceType::CUDA>); } \
  TORCH_LIBRARY_IMPL(kiln, AutocastPrivateUse1, m) {                                         \
    m.impl(NAME, &KERNEL<c10::DeviceType::PrivateUse1>);                                     \
  }

/// Registers the "input dtype" policy for op NAME implemented by C++ API function FN.
/// Example: KILN_AUTOCAST_KEEP_DTYPE("relu", kiln::ops::relu)
#define KILN_AUTOCAST_KEEP_DTYPE(NAME, FN)                                                   \
  TORCH_LIBRARY_IMPL(kiln, AutocastCPU, m) {                                                 \
    m.impl(NAME, &::kiln::ops::autocast::KeepDtype<c10::DeviceType::CPU, &FN>::call);        \
  }                                                                                          \
  TORCH_LIBRARY_IMPL(kiln, AutocastCUDA, m) {                                                \
    m.impl(NAME, &::kiln::ops::autocast::KeepDtype<c10::DeviceType::CUDA, &FN>::call);       \
  }                                                                                          \
  TORCH_LIBRARY_IMPL(kiln, AutocastPrivateUse1, m) {                                         \
    m.impl(NAME, &::kiln::ops::autocast::KeepDtype<c10::DeviceType::PrivateUse1, &FN>::call); \
  }
