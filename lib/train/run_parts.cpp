// The parts every run builds the same way: its data, model, optimizer and loss.
#include "train/run_parts.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Reduction.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/mse_loss_backward.h>

#include <c10/util/Exception.h>

#include <string>

#include "optim/factory.h"
#include "ops/ops.h"
#include "util/env_switch.h"
#include "util/error.h"

namespace kiln::train {

data::Data load_run_data(const data::DataOptions& options, const std::string& model_name,
                         const data::DataSchema* saved) {
  auto o = options;
  o.sequence(nn::takes_tokens(model_name));  // a sequence model learns every position's next token
  return data::load_data(o, saved);
}

torch::nn::AnyModule build_model(const nn::ModelSpec& spec, const data::DataSchema& schema) {
  auto sized = spec;
  nn::fit_to_data(sized, schema.input_shape, data::model_input_size(schema), schema.outputs,
                  data::takes_tokens(schema));
  // Sizes that outgrow the machine (model.hidden = [2000000000]: 6 TiB of weights, a
  // zero too many) are the config's to fix: say so, naming it, instead of a bare
  // allocator message with exit code 1.
  const auto too_big = [&](const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    return InputError(c10::str("model: the ", spec.name, " this config describes does not fit in memory (",
                               what.substr(0, what.find('\n')), ", while making its parameters): expected "
                               "model sizes (model.*) whose parameters this machine can hold"));
  };
  try {
    return nn::make_model(sized);
  } catch (const c10::OutOfMemoryError& e) {  // kiln's block cache, a device allocator
    throw too_big(e);
  } catch (const c10::Error& e) {
    // ATen's heap allocator (KILN_CPU_BLOCK_CACHE=off) refuses with a plain c10::Error.
    if (std::string(e.what_without_backtrace()).find("DefaultCPUAllocator: can't allocate memory") ==
        std::string::npos)
      throw;
    throw too_big(e);
  }
}

std::unique_ptr<torch::optim::Optimizer> build_optimizer(const optim::OptimizerSpec& spec,
                                                         const torch::nn::Module& model) {
  // Muon orthogonalises hidden matrices only: the output head the model names goes
  // to its AdamW group.
  auto s = spec;
  for (auto& name : nn::head_parameters(model)) s.muon_exclude.push_back(std::move(name));
  return optim::make_optimizer(s, model.named_parameters());
}

at::Tensor training_loss(const at::Tensor& output, const at::Tensor& targets,
                         const data::DataSchema& schema) {
  if (schema.task == data::Task::kRegression)
    return at::mse_loss(output.to(at::kFloat), targets);  // standardised targets
  if (output.dim() == 3)  // (B, T, V) logits of every position, (B, T) targets
    return kiln::ops::cross_entropy(output.reshape({-1, output.size(2)}), targets.reshape(-1));
  return kiln::ops::cross_entropy(output, targets);
}

nn::MlpImpl* taped_step(torch::nn::Module& model) {
  static const bool off = util::env_switch("KILN_TAPED_STEP", {"auto", "off"}) == 1;
  auto* mlp = dynamic_cast<nn::MlpImpl*>(&model);
  if (off || mlp == nullptr || !mlp->taped_supported()) return nullptr;
  return mlp;
}

// Lower-precision outputs (autocast's) go to the loss in float32: cross-entropy's
// autocast kernel casts its logits with kiln::ops::autocast_cast's cast; training_loss
// casts a regression's outputs with at::to itself.
TapedLoss taped_loss(const at::Tensor& output, const at::Tensor& targets, const data::DataSchema& schema) {
  TORCH_CHECK(output.dim() == 2, "taped_loss: expected (B, outputs) model outputs, got ", output.sizes());
  at::AutoDispatchBelowADInplaceOrView below;
  if (schema.task == data::Task::kRegression) {
    auto input = output.to(at::kFloat);
    auto loss = at::mse_loss(input, targets);
    return {std::move(loss), {}, std::move(input)};
  }
  auto input = kiln::ops::autocast_cast(output, at::kFloat);
  auto [loss, lse] = kiln::ops::cross_entropy_forward(input, targets);
  return {std::move(loss), std::move(lse), std::move(input)};
}

at::Tensor taped_loss_backward(const at::Tensor& grad, const at::Tensor& output, const at::Tensor& targets,
                               const TapedLoss& saved, const data::DataSchema& schema) {
  at::AutoDispatchBelowADInplaceOrView below;
  if (schema.task == data::Task::kRegression) {  // then ToCopyBackward0's at::to
    const auto g = at::mse_loss_backward(grad, saved.input, targets, at::Reduction::Mean);
    return g.scalar_type() == output.scalar_type() ? g : g.to(output.scalar_type());
  }
  const auto g = kiln::ops::cross_entropy_backward(grad, saved.input, targets, saved.lse);
  return kiln::ops::autocast_cast_backward(g, output.scalar_type());
}

}  // namespace kiln::train
