// checkpoint_argument(): --best reads the run's config.toml for its checkpoint.best
// metric and ranks the manifests' values, as the trainer's retention does.
#include "checkpoint_arg.h"

#include <c10/util/StringUtil.h>

#include <filesystem>

#include "config.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/trainer.h"
#include "util/error.h"

namespace kiln::app {
namespace fs = std::filesystem;

CheckpointChoice checkpoint_argument(const std::string& arg, bool best) {
  if (!best) return {train::resolve_checkpoint(arg), ""};
  fs::path run = fs::path(arg).lexically_normal();
  if (run.has_parent_path() && run.filename().empty()) run = run.parent_path();  // "dir/"
  if (!fs::is_directory(run / "checkpoints"))
    throw InputError(c10::str(arg, ": --best: expected a run directory (with checkpoints/), found ",
                              fs::exists(run / "manifest.json") ? "a checkpoint directory (it names one checkpoint: "
                                                                  "give it without --best)"
                              : fs::exists(run)                 ? "no checkpoints/ in it"
                                                                : "nothing"));
  const auto checkpoints = train::list_checkpoints(run.string());
  if (checkpoints.empty())
    throw InputError(c10::str(arg, ": --best: expected a complete checkpoint under checkpoints/, found none"));
  const std::string config_path = (run / "config.toml").string();
  if (!fs::exists(config_path))
    throw InputError(c10::str(config_path, ": --best: expected the run's config (its checkpoint.best metric), "
                              "found no file"));
  std::string metric = load_config(config_path).checkpoint.best;
  if (metric.empty())
    throw InputError(c10::str(config_path, ": checkpoint.best = \"\": the run ranked no checkpoint, so --best has "
                              "no metric; give a checkpoint directory (", run.string(), "/checkpoints/step_N)"));
  if (metric == "auto") {
    const auto schema = train::read_data_schema(checkpoints.back().dir);
    if (!schema)
      throw InputError(c10::str(checkpoints.back().dir, ": --best: expected ", train::kDataFile,
                                " (the task, which checkpoint.best = \"auto\" ranks by), found none"));
    metric = "test_" + train::schema_metrics(*schema).front();
  }
  if (metric.rfind("test_", 0) != 0)
    throw InputError(c10::str(config_path, ": checkpoint.best: expected test_loss or a test_ metric, found \"",
                              metric, "\""));
  const bool higher = train::higher_is_better(metric.substr(5));
  const auto found =
      train::best_checkpoint(checkpoints, metric, higher ? train::MetricMode::kMax : train::MetricMode::kMin);
  if (!found)
    throw InputError(c10::str(arg, ": --best: expected a checkpoint that records ", metric,
                              " (one written right after an evaluation), found none of the ", checkpoints.size(),
                              "; give a checkpoint directory, or the run without --best (its newest)"));
  return {found->dir, c10::str("the best ", metric, " (", found->metrics.at(metric), ") of ", checkpoints.size(),
                               checkpoints.size() == 1 ? " checkpoint" : " checkpoints")};
}

}  // namespace kiln::app
