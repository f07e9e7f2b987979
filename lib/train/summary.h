// What `kiln summary` and `kiln train --dry-run` show before a run: every module of
// the model with its type, output shape and parameters, the totals, and an estimate
// of a training step's memory at the configured batch size and precision —
// parameters, gradients, optimizer state and activations — measured on the meta
// device where the whole step runs there, else by short steps on the run's device.
#pragma once
#include <c10/core/ScalarType.h>
#include <torch/arg.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace kiln::train {

struct SummaryOptions {
  /// How activations are measured: "auto" (on meta when the whole step runs there,
  /// else on the run's device), "meta" (an error when it cannot) or "device".
  TORCH_ARG(std::string, activations) = "auto";
};

/// One module of the model, in named_modules() order.
struct ModuleRow {
  std::string name;  // as named_modules() gives it; "" for the model itself
  std::string type;  // "kiln::nn::Linear", "torch::nn::Conv2d"
  /// Its forward's output for one micro-batch, or nullopt with the reason in no_output.
  std::optional<std::vector<int64_t>> shape;
  c10::ScalarType dtype = c10::kFloat;
  std::string no_output;
  int64_t parameters = 0;  // elements of the parameters in its subtree, each tensor once
  int64_t bytes = 0;       // of those parameters and of the subtree's buffers
};

/// A training step's memory at the run's batch size, precision and device.
struct MemoryEstimate {
  int64_t batch_size = 0;
  /// What one forward sees: batch_size / train.accumulate (no more than the data holds).
  int64_t micro_batch = 0;
  std::string precision, device;
  int64_t parameter_bytes = 0, gradient_bytes = 0;
  /// The optimizer's state after one step (optim::StateReporter).
  int64_t optimizer_state_bytes = 0;
  int64_t uncounted_optimizer_states = 0;
  /// What forward keeps for backward, held when the loss is computed: the figure
  /// ActivationProbe reports on the CPU (memory.jsonl's activation_peak_bytes).
  int64_t activation_bytes = 0;
  /// The most a step holds at once above the parameters and optimizer state —
  /// activations, then gradients and backward's buffers — where it was measured
  /// (on meta, or on a CUDA device): ActivationProbe's figure on CUDA.
  std::optional<int64_t> step_peak_bytes;
  /// "meta" or "device".
  std::string method;
  /// How the activations were measured, and why not on meta when they were not.
  std::string method_detail;

  /// Parameters, gradients, optimizer state and activations.
  int64_t total_bytes() const {
    return parameter_bytes + gradient_bytes + optimizer_state_bytes + activation_bytes;
  }
};

struct ModelSummary {
  std::string model;      // the model's own description (pretty_print)
  std::string data;       // format, task, examples, shapes
  std::string optimizer;  // optim.name
  std::vector<ModuleRow> modules;
  int64_t parameters = 0, trainable_parameters = 0;
  std::map<std::string, int64_t> parameter_bytes_by_dtype;  // "float32" → bytes
  int64_t buffers = 0, buffer_bytes = 0;
  /// The training and test tensors as loaded (held on the device with train.data_on_device).
  int64_t data_bytes = 0;
  MemoryEstimate memory;
  double data_seconds = 0.0, model_seconds = 0.0, estimate_seconds = 0.0;

  /// The module table with its footnotes, the totals and the memory estimate, as the
  /// console shows them.
  std::string table() const;
};

/// Loads the run's data, builds its model and optimizer as `kiln train` would, and
/// measures one step (nothing is written anywhere). Bad data throws kiln::InputError.
/// Example: std::cout << kiln::train::summarize(spec).table();
ModelSummary summarize(const RunSpec& spec, const SummaryOptions& options = {});

}  // namespace kiln::train
