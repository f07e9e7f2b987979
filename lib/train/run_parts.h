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
#include "optim/spec.h"

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

}  // namespace kiln::train
