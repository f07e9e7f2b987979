// Starting a run from weights written elsewhere (`model.init_from`): a
// .safetensors file — kiln's, PyTorch's `safetensors.torch.save_file`, a hub
// model's — or a kiln checkpoint directory, matched to the model by name.
#pragma once
#include <torch/nn/module.h>

#include <string>

namespace kiln::train {

/// Copies every tensor of `path` (a .safetensors file, a checkpoint directory's
/// model.safetensors, or a run directory's newest checkpoint's) into the parameter or buffer of `model` with the same name,
/// converting the dtype where they differ. Nothing is copied unless all match: the
/// tensors the model has and the file lacks, those the file has and the model lacks,
/// and those whose shapes differ are listed together in one kiln::InputError.
/// Returns how many tensors were copied.
/// Example: kiln::train::init_from(*model, "pretrained.safetensors");
int64_t init_from(torch::nn::Module& model, const std::string& path);

}  // namespace kiln::train
