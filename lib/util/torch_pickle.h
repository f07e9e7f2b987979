// PyTorch's .pt format (torch.save's zip archive) for tensors and plain values, written
// so that Python's default `torch.load(path)` (weights_only=True since torch 2.6) reads
// it, and read back from kiln's files and from Python's torch.save of such values.
// torch::save writes a TorchScript archive that weights_only refuses, and
// torch::pickle_save tags lists and dicts with globals it refuses too; this is the
// form that loads: storages as persistent ids (torch.save's own layout), no type tags.
#pragma once
#include <ATen/core/ivalue.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::torch_pickle {

/// Records written into the archive beside the pickle (name → bytes), e.g.
/// {{"kiln_data.json", text}}: Python's zipfile reads them, torch.load ignores them.
using Records = std::map<std::string, std::string>;

/// The bytes of a .pt file holding `value`: a tensor, None, bool, int, float, str, or
/// a list, tuple or dict (str, int, bool or float keys) of those, nested to any depth.
/// Tensors keep their dtype, sizes, strides and storage offset; views of one storage
/// stay views of one storage; tensors on another device are copied to the CPU (one
/// copy per storage) and load on the CPU; requires_grad is not kept. dtypes: bool,
/// uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64. Anything
/// else — another dtype or layout, another kind of value, two dtypes over one storage
/// (torch.save refuses that too), a record name the archive itself uses (data.pkl,
/// data/…, version, byteorder, .data/…) — is a TORCH_CHECK error naming where in
/// `value` it is. Example: std::string pt = kiln::torch_pickle::serialize(dict);
std::string serialize(const c10::IValue& value, const Records& records = {});

/// Parses a whole .pt file held in `bytes` (kiln's, or torch.save's zip format of
/// tensors and plain values); `source` (the file name) starts every error message.
/// A file that is not such an archive, or a damaged one, throws kiln::InputError, and
/// so does an OrderedDict (a module's state_dict() as saved: libtorch's unpickler has
/// none; torch.save(dict(model.state_dict())) writes the plain dict this reads).
/// Views of one storage in the file load as views of one storage.
/// Example: c10::IValue v = kiln::torch_pickle::deserialize(bytes, "state.pt");
c10::IValue deserialize(std::string_view bytes, const std::string& source);

/// serialize() into `path`, crash-safely (kiln::files::replace_synced).
/// Example: kiln::torch_pickle::save_file("weights.pt", c10::Dict<std::string, at::Tensor>(...));
void save_file(const std::string& path, const c10::IValue& value, const Records& records = {});

/// Reads `path` (see deserialize()); a missing or unreadable file throws
/// kiln::InputError naming it. Example: auto d = kiln::torch_pickle::load_file(p).toGenericDict();
c10::IValue load_file(const std::string& path);

/// The names of the records in the .pt file held in `bytes` (without the archive's
/// top folder: "data.pkl", "data/0", …); not a zip archive throws kiln::InputError
/// naming `source`. Example: bool ts = has(record_names(bytes, p), "constants.pkl");
std::vector<std::string> record_names(std::string_view bytes, const std::string& source);

/// The record `name` of the .pt file `path` (one written through `records`), or
/// nullopt when it has none. Example: auto json = read_record("m.pt", "kiln_data.json");
std::optional<std::string> read_record(const std::string& path, const std::string& name);

}  // namespace kiln::torch_pickle
