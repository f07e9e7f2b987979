// torch::serialize archives — what optimizers, LR schedules and scalers save() — kept
// in .pt files that Python's default torch.load (weights_only=True) reads, instead of
// the TorchScript module archive OutputArchive::save_to writes, which it refuses.
#pragma once
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <string>
#include <string_view>

namespace kiln::torch_pickle {

/// `archive` as a .pt file (kiln::torch_pickle::serialize): a dict of its values by key,
/// each nested archive a nested dict. (Tensors written as buffers come back as
/// parameters: InputArchive reads both alike.) A value that is itself a dict, which could
/// not be told from a nested archive, is a TORCH_CHECK error.
/// Example: OutputArchive ar; optimizer.save(ar); files::write_synced(p, serialize_archive(ar));
std::string serialize_archive(torch::serialize::OutputArchive& archive);

/// Loads into `archive` a .pt file of serialize_archive(): data only, nothing in the
/// file is compiled or run. Any other file — a TorchScript archive (what
/// OutputArchive::save_to writes, and kiln's checkpoints held before 2026-11-30), a
/// damaged file, a .pt of something other than a dict — throws kiln::InputError naming
/// `source`.
/// Example: InputArchive ar; load_archive(ar, files::read(p), p); optimizer.load(ar);
void load_archive(torch::serialize::InputArchive& archive, std::string_view bytes,
                  const std::string& source);

}  // namespace kiln::torch_pickle
