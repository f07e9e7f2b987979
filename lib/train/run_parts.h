// The parts of a run built from its RunSpec — the data as the model reads it, the
// model sized to that data, its optimizer, the training loss — in one place, so
// `kiln train` and `kiln summary` (train/summary.h) build the same run.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>

#include <memory>

#include "data/dataset.h"
#include "nn/factory.h"
#include "nn/mlp.h"
#include "optim/spec.h"
#include "train/amp.h"

namespace kiln::train {

/// data::load_data for a run of model `model_name`: a sequence model (gpt) gets token
/// ids and every position's next token; `saved` is a resumed run's schema.
/// Example: auto data = kiln::train::load_run_data(spec.data, spec.model.name);
data::Data load_run_data(const data::DataOptions& options, const std::string& model_name,
                         const data::DataSchema* saved = nullptr);

/// The model `spec` names, sized to the data `schema` describes (nn::fit_to_data).
/// Example: auto model = kiln::train::build_model(spec.model, data.schema);
torch::nn::AnyModule build_model(const nn::ModelSpec& spec, const data::DataSchema& schema);

/// `spec`'s optimizer over `model`'s parameters as they are now (after any move to a
/// device); Muon leaves the output head the model names to its AdamW group.
/// Example: auto optimizer = kiln::train::build_optimizer(spec.optim, *model.ptr());
std::unique_ptr<torch::optim::Optimizer> build_optimizer(const optim::OptimizerSpec& spec,
                                                         const torch::nn::Module& model);

/// The loss a training step minimises for `output`, the model's output for a batch
/// whose targets are `targets`: mean squared error of the standardised targets
/// (regression, in float32), else kiln's cross-entropy (over every position for a
/// sequence model's (B, T, V) logits and (B, T) targets).
/// Example: auto loss = kiln::train::training_loss(model.forward(x), y, data.schema);
at::Tensor training_loss(const at::Tensor& output, const at::Tensor& targets,
                         const data::DataSchema& schema);

/// The model itself when its training step runs taped — nn::MlpImpl::forward_taped,
/// the loss's forward and backward ops (taped_loss), backward_taped: the ops autograd's
/// graph runs, in its order, with the same gradients bit for bit, without building the
/// graph or running autograd's engine — else null, and the step runs through autograd.
/// Taped: an Mlp (relu, gelu or sigmoid hidden layers, with dropout or without) in any
/// precision (fp32; bf16 and fp16 autocast, fp16's loss scaling included), in one
/// process or data-parallel (dist::GradientReducer's taped mode all-reduces the buckets
/// as backward_taped reports the gradients). KILN_TAPED_STEP=off keeps autograd
/// everywhere (for A/B runs); any other value warns and means auto.
/// Example: auto* mlp = kiln::train::taped_step(*model.ptr());
nn::MlpImpl* taped_step(torch::nn::Module& model);

/// training_loss of a taped step, below autograd: the loss and what its backward reads
/// (cross-entropy's log-sum-exp of each row, none for mean squared error; the float32
/// outputs the loss read: the model's own, or their cast from autocast's dtype).
struct TapedLoss {
  at::Tensor loss, lse, input;
};
/// Example: auto l = kiln::train::taped_loss(logits, y, schema);
TapedLoss taped_loss(const at::Tensor& output, const at::Tensor& targets, const data::DataSchema& schema);
/// The gradient autograd gives `output` through training_loss from `grad`, the loss's
/// gradient: the op of the loss's node (cross_entropy_backward, mse_loss_backward).
/// Example: auto g = kiln::train::taped_loss_backward(one, logits, y, l, schema);
at::Tensor taped_loss_backward(const at::Tensor& grad, const at::Tensor& output, const at::Tensor& targets,
                               const TapedLoss& saved, const data::DataSchema& schema);

}  // namespace kiln::train
