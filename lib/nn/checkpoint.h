// kiln::nn::checkpoint: activation checkpointing for C++ (libtorch has none) — run a
// piece of a model without keeping its activations and recompute it in backward.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace kiln::nn {

/// A checkpointed segment: maps its input tensors to its output tensors. It may use
/// module parameters (captured), dropout and any op; it must be a function of its
/// inputs, the parameters and the random generators only.
using CheckpointFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
using CheckpointTensorFn = std::function<at::Tensor(const at::Tensor&)>;

/// Runs fn(inputs) without keeping its activations: only the inputs are saved, and
/// backward runs fn again (with grad) to get the gradients — memory for compute.
///
/// What is recorded in forward and restored for the recomputation, so it computes
/// the same values (dropout draws the same masks):
/// - the CPU generator's state, and the default generator state of each other
///   device (CUDA) an input lives on; after the recomputation the generators are put back where they
///   were, so the random stream of training is the same with and without checkpointing;
/// - the autocast state (enabled, lower-precision dtype) of CPU, CUDA and PrivateUse1.
///
/// This is the *reentrant* form (Python's `use_reentrant=True`): backward calls
/// torch::autograd::backward on the recomputed graph from inside the outer backward.
/// Parameters used by fn get their .grad accumulated there, exactly as in a plain
/// backward; input gradients are returned to the outer graph (undefined for inputs
/// that do not require grad). kiln has no non-reentrant form because that one
/// needs saved-tensor hooks, which libtorch exposes to Python only. Consequences:
/// - gradients flow only through torch::autograd::backward / Tensor::backward; under
///   torch::autograd::grad the parameters inside fn still get .grad and are not
///   returned; create_graph (double backward) through a checkpoint is not supported;
/// - when no input requires grad (or grad mode is off) there is nothing to
///   recompute against, so fn runs plainly (its parameters still get gradients).
/// The autocast cast cache is off inside fn, so no weight cast made without grad in
/// forward is reused by the recomputation or by later code.
///
/// Example:
///   auto ys = kiln::nn::checkpoint(
///       [&](const std::vector<at::Tensor>& xs) { return std::vector<at::Tensor>{block(xs[0], xs[1])}; },
///       {x, mask});
std::vector<at::Tensor> checkpoint(CheckpointFn fn, const std::vector<at::Tensor>& inputs);

/// The one-tensor form. Example: auto y = kiln::nn::checkpoint([&](const at::Tensor& t) { return block(t); }, x);
at::Tensor checkpoint(CheckpointTensorFn fn, const at::Tensor& input);

/// Runs layers [begin, end) of a stack: x → the output of layer end − 1.
using SegmentFn = std::function<at::Tensor(int64_t begin, int64_t end, const at::Tensor& x)>;

/// Runs the first `n` layers of a stack as segments of `every` layers, each one
/// checkpoint (the last may be shorter); every == 0 runs run(0, n, x) plainly. `run`
/// is called again in backward: capture what it needs by value.
/// Example: x = kiln::nn::checkpoint_segments(depth, 5, x, [layers, rule](int64_t b, int64_t e, const at::Tensor& t) { … });
at::Tensor checkpoint_segments(int64_t n, int64_t every, const at::Tensor& x, const SegmentFn& run);

}  // namespace kiln::nn
