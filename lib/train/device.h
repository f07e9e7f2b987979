// The device a run trains on, resolved once when the run starts: "cuda" becomes
// the current CUDA device with its real index, so everything downstream (memory
// fraction, allocator figures, RNG states, OOM reports) sees cuda:N, never -1.
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace kiln::train {

/// Parses `name` ("cpu", "cuda", "cuda:N", or any device type libtorch knows, such
/// as a PrivateUse1 backend's "name:N") and gives a device with a real index: a
/// type without an index is that type's current device. A name libtorch cannot
/// parse, a type with no device visible, or an index past the last device throws
/// kiln::InputError naming train.device, what was expected and what was found.
/// Example: const c10::Device d = kiln::train::resolve_device("cuda");  // cuda:0
c10::Device resolve_device(const std::string& name);

/// The most CPU threads a run or a command takes (train.threads, --threads). OpenMP
/// pools of thousands fail to start (20,000 on a 2-core machine: "libgomp: Thread
/// creation failed", exit 1; 100,000: a segmentation fault), and threads past the
/// machine's own only wait their turn.
constexpr int64_t kMaxThreads = 1024;

}  // namespace kiln::train
