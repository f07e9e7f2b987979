// A model whose forward pass uses a depth chosen per call (DynamicMlp): the trainer
// asks it to draw each training step's depth and to run at a given depth for the
// final per-depth evaluation, without knowing which model it holds.
#pragma once
#include <torch/nn/module.h>

#include <cstdint>
#include <optional>

namespace kiln::nn {

/// Implemented beside torch::nn::Module by models of run-time depth.
/// Example: if (auto* d = dynamic_cast<kiln::nn::DepthSampled*>(module.get())) d->begin_step(seed, step);
class DepthSampled {
 public:
  virtual ~DepthSampled() = default;
  /// Draws the depth of training step `step` (0-based) of a run seeded `seed`: a pure
  /// function of the two, so a resumed run draws what a straight one does. Every
  /// forward call in training mode until the next begin_step uses it (so all
  /// micro-batches of one step share it).
  virtual void begin_step(uint64_t seed, int64_t step) = 0;
  /// The depths the model can run at, min_depth()..max_depth().
  virtual int64_t min_depth() const = 0;
  virtual int64_t max_depth() const = 0;
  /// Forward calls use `depth` (in min_depth..max_depth) in any mode until reset with
  /// nullopt, which returns to the default: the step's drawn depth in training,
  /// max_depth in evaluation.
  virtual void force_depth(std::optional<int64_t> depth) = 0;
};

/// Calls begin_step when `model` is DepthSampled; does nothing for other models.
/// Example: kiln::nn::begin_step(*module, seed, step);
inline void begin_step(torch::nn::Module& model, uint64_t seed, int64_t step) {
  if (auto* d = dynamic_cast<DepthSampled*>(&model)) d->begin_step(seed, step);
}

}  // namespace kiln::nn
