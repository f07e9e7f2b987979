// kiln::nn::Linear: parameters, their initialisation, and the kiln op in forward.
#include "nn/linear.h"

#include <torch/nn/init.h>

#include <cmath>

#include "nn/trace.h"
#include "ops/ops.h"

namespace kiln::nn {

LinearImpl::LinearImpl(LinearOptions options_) : options(options_) {
  TORCH_CHECK(options.in_features() > 0, "Linear: in_features: expected > 0, got ",
              options.in_features());
  TORCH_CHECK(options.out_features() > 0, "Linear: out_features: expected > 0, got ",
              options.out_features());
  reset();
}

void LinearImpl::reset() {
  weight = register_parameter("weight",
                              torch::empty({options.out_features(), options.in_features()}));
  bias = options.bias() ? register_parameter("bias", torch::empty(options.out_features()))
                        : register_parameter("bias", {}, /*requires_grad=*/false);
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5));
  if (bias.defined()) {
    const double bound = 1 / std::sqrt(static_cast<double>(options.in_features()));
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  return traced(*this, kiln::ops::linear(x, weight, bias.defined() ? std::optional<torch::Tensor>(bias) : std::nullopt));
}

void LinearImpl::to(torch::Device device, bool non_blocking) {
  if (!device.is_meta()) return torch::nn::Module::to(device, non_blocking);
  torch::NoGradGuard no_grad;
  const auto to_meta = [&](const char* name, torch::Tensor& member) {
    if (!member.defined()) return;
    auto meta = member.to(device);
    meta.set_requires_grad(member.requires_grad());
    member = parameters_[name] = meta;
  };
  to_meta("weight", weight);
  to_meta("bias", bias);
}

void LinearImpl::pretty_print(std::ostream& stream) const {
  stream << "kiln::nn::Linear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << std::boolalpha
         << options.bias() << ")";
}

}  // namespace kiln::nn
