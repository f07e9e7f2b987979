// The device a run trains on, resolved once when the run starts: "cuda" becomes
// the current CUDA device with its real index, so everything downstream (memory
// fraction, allocator figures, RNG states, OOM reports) sees cuda:N, never -1.
#pragma once
#include <c10/core/Device.h>

#include <string>

namespace kiln::train {

/// Parses `name` ("cpu", "cuda", "cuda:N", or any device type libtorch knows, such
/// as a PrivateUse1 backend's "name:N") and gives a device with a real index: a
/// type without an index is that type's current device. A name libtorch cannot
/// parse, a type with no device visible, or an index past the last device throws
/// kiln::InputError naming train.device, what was expected and what was found.
/// Example: const c10::Device d = kiln::train::resolve_device("cuda");  // cuda:0
c10::Device resolve_device(const std::string& name);

}  // namespace kiln::train
