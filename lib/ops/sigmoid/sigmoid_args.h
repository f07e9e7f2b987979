// The argument check both sigmoid backends share: grad_clip, when given, is a
// bound ≥ 0 on the local derivative; the kernels take +inf for "no clip".
#pragma once
#include <c10/util/Exception.h>

#include <limits>
#include <optional>
#include <string_view>

namespace kiln::ops {

/// The clamp bound the kernels use. Example: const double clip = sigmoid_clip("kiln::sigmoid", grad_clip);
inline double sigmoid_clip(std::string_view op, std::optional<double> grad_clip) {
  if (!grad_clip) return std::numeric_limits<double>::infinity();
  TORCH_CHECK(*grad_clip >= 0.0, op, ": grad_clip: expected a value >= 0 (a bound on |ds/dx|), got ",
              *grad_clip);
  return *grad_clip;
}

}  // namespace kiln::ops
