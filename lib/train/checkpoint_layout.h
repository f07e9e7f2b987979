// What checkpoint.cpp (save, load) and checkpoint_dirs.cpp (listing, retention,
// --resume) agree on: file names, directory names and the manifest reader.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "train/checkpoint.h"

namespace kiln::train::layout {

inline constexpr const char* kCheckpoints = "checkpoints";
inline constexpr const char* kManifest = "manifest.json";
inline constexpr const char* kModel = "model.safetensors";
inline constexpr const char* kOptimizer = "optimizer.pt";
inline constexpr const char* kTrainer = "trainer.pt";
inline constexpr const char* kConfig = "config.toml";
inline constexpr const char* kFormat = "kiln checkpoint";
inline constexpr int64_t kVersion = 1;
/// Directories that are not checkpoints: a save in progress, one being deleted.
inline constexpr std::string_view kTmpPrefix = ".tmp-";
inline constexpr std::string_view kTrashPrefix = ".trash-";

/// "step_000000042": zero-padded so names sort like steps.
std::string step_dir_name(int64_t step);

/// The step of a directory named step_<digits>, or nullopt for any other name.
std::optional<int64_t> step_of(const std::string& dir_name);

/// The parsed manifest of `checkpoint_dir`; missing, unreadable or not a kiln
/// manifest throws kiln::InputError naming the file.
nlohmann::json read_manifest(const std::filesystem::path& checkpoint_dir);

/// Renames `dir` to a .trash- name beside it (atomic), then removes it: a crash
/// midway leaves a .trash- directory that the next save removes, never a
/// half-deleted checkpoint.
void remove_checkpoint_dir(const std::filesystem::path& dir);

/// Removes what interrupted saves and deletions left in RUN/checkpoints.
void remove_leftovers(const std::filesystem::path& checkpoints_root);

/// Deletes the checkpoints of `run_dir` that `options` does not keep: all but
/// the newest keep_last (by step), the best by best_metric, and `just_saved`.
void apply_retention(const std::string& run_dir, const std::string& just_saved,
                     const CheckpointOptions& options);

}  // namespace kiln::train::layout
