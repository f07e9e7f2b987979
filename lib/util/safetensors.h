// The safetensors format (Hugging Face's; what `safetensors.torch.load_file`,
// transformers and most tools read): model weights leave kiln in it, and every
// field of a file read back is validated, because a file is user input.
#pragma once
#include <ATen/Tensor.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::safetensors {

/// Tensors by name. Written in the order the safetensors library itself uses
/// (dtype alignment descending, then name), so kiln's file of a dict is
/// byte-identical to `safetensors.torch.save_file`'s; read back in file order.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
/// The header's "__metadata__": free-form string → string (e.g. {"format": "pt"}).
using Metadata = std::map<std::string, std::string>;

struct Contents {
  NamedTensors tensors;  // in file (data offset) order, on the CPU
  Metadata metadata;
};

/// The file's bytes: 8-byte little-endian header length, the JSON header padded
/// with spaces to a multiple of 8, the tensors' raw little-endian bytes.
/// Non-contiguous tensors are written contiguous, CUDA tensors are copied to the
/// CPU. dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL; another dtype, a
/// repeated name or the name "__metadata__" is a TORCH_CHECK error.
/// Example: std::string bytes = kiln::safetensors::serialize({{"w", w}}, {{"format", "pt"}});
std::string serialize(const NamedTensors& tensors, const Metadata& metadata = {});

/// Parses and validates a whole file held in `bytes`; `source` (the file name)
/// starts every error message. Anything malformed — too short for the header
/// length or the header, a header that is not a JSON object, an unknown dtype,
/// a shape whose size disagrees with its data_offsets, offsets outside the data
/// or overlapping or leaving bytes uncovered, a name given twice, a metadata
/// value that is not a string — throws kiln::InputError naming the file, the
/// tensor or field, what was expected and what was found.
/// Example: auto c = kiln::safetensors::deserialize(bytes, "model.safetensors");
Contents deserialize(std::string_view bytes, const std::string& source);

/// serialize() into `path`, flushed to disk (kiln::files::write_synced).
/// Example: kiln::safetensors::save_file("w.safetensors", {{"w", w}});
void save_file(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});

/// Reads and validates `path` (see deserialize()).
/// Example: for (auto& [name, t] : kiln::safetensors::load_file(path).tensors) …
Contents load_file(const std::string& path);

}  // namespace kiln::safetensors
