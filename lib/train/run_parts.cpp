// The parts every run builds the same way: its data, model, optimizer and loss.
#include "train/run_parts.h"

#include <ATen/ops/mse_loss.h>

#include "optim/factory.h"
#include "ops/ops.h"

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
  return nn::make_model(sized);
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

}  // namespace kiln::train
