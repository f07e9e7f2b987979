// What a config says about the optimizer, as plain values (no torch headers, so
// app/config.h can hold one): every tunable is optional, and an unset one is the
// chosen optimizer's own Options default, filled in by resolve_defaults().
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::optim {

/// The optimizer make_optimizer builds. Each optional left unset takes the
/// chosen optimizer's default from its Options (AdamWOptions, SGDOptions,
/// LionOptions, MuonOptions; muon's AdamW group from muon_adamw_group_defaults()),
/// the one place each default is written; resolve_defaults() shows what applies.
/// A field the chosen optimizer does not read is ignored.
struct OptimizerSpec {
  /// One of optimizer_names().
  std::string name = "adamw";
  std::optional<double> lr;            // all; for muon the matrices' lr
  /// Decoupled for adamw, lion, muon; an L2 term in the gradient for sgd (as torch's SGD).
  std::optional<double> weight_decay;
  std::optional<double> beta1;         // adamw, lion, muon's AdamW group
  std::optional<double> beta2;         // adamw, lion, muon's AdamW group
  std::optional<double> eps;           // adamw, muon's AdamW group
  std::optional<double> momentum;      // sgd, muon
  std::optional<bool> nesterov;        // sgd, muon
  std::optional<double> dampening;     // sgd
  std::optional<int64_t> ns_steps;     // muon: Newton–Schulz iterations
  std::optional<double> muon_adamw_lr; // muon: lr of the AdamW group (non-matrices, excluded names)
  /// muon: parameters whose name contains one of these go to the AdamW group (the
  /// trainer adds the names of the model's own output head).
  std::vector<std::string> muon_exclude = {"embed", "head"};
};

/// The names make_optimizer knows, in order: adamw, sgd, lion, muon.
const std::vector<std::string>& optimizer_names();

/// `spec` with every field that spec.name's optimizer reads, and `spec` leaves unset,
/// set to that optimizer's Options default; fields it does not read stay unset. An
/// unknown name throws kiln::InputError as make_optimizer does.
/// Example: OptimizerSpec s; s.name = "lion"; resolve_defaults(s).beta2 == 0.99
OptimizerSpec resolve_defaults(OptimizerSpec spec);

}  // namespace kiln::optim
