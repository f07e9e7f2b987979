// Every kiln op schema, declared once, and the C++ API that calls them through
// the dispatcher. Backends register their kernels in <op>/<op>_{cpu,cuda}.cpp,
// autograd in <op>/<op>.cpp.
#include "ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

TORCH_LIBRARY(kiln, m) {
  m.def("relu(Tensor x) -> Tensor");
  m.def("relu_backward(Tensor grad, Tensor y) -> Tensor");
}

namespace kiln::ops {
namespace {

template <typename Signature>
c10::TypedOperatorHandle<Signature> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

}  // namespace

at::Tensor relu(const at::Tensor& x) {
  static const auto op = op_handle<at::Tensor(const at::Tensor&)>("kiln::relu");
  return op.call(x);
}

at::Tensor relu_backward(const at::Tensor& grad, const at::Tensor& y) {
  static const auto op =
      op_handle<at::Tensor(const at::Tensor&, const at::Tensor&)>("kiln::relu_backward");
  return op.call(grad, y);
}

bool built_with_cuda() {
#if defined(KILN_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

}  // namespace kiln::ops
