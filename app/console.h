// What `kiln train` shows on the console: a live progress bar on a terminal,
// plain lines when the output is piped, only the result with --quiet, and JSON
// lines with --log-format=json.
#pragma once
#include <nlohmann/json.hpp>

#include "interrupt.h"
#include "train/trainer.h"

namespace kiln::app {

enum class ConsoleMode {
  kLive,   // a terminal: the bar redrawn in place, a line per epoch
  kPlain,  // piped: a line per epoch
  kQuiet,  // --quiet: nothing while training (the result only)
  kJson,   // --log-format=json: one JSON object per line, for programs
};

/// The mode for a run's flags and its stdout (a terminal or not).
/// Example: auto mode = console_mode(quiet, "json", isatty(1));
ConsoleMode console_mode(bool quiet, const std::string& log_format, bool terminal);

/// Writes `event` as one JSON line ({"event": name, …fields}) on stdout and flushes.
void print_json_event(const std::string& name, nlohmann::ordered_json fields);

class ConsoleObserver : public train::TrainObserver {
 public:
  /// With `warnings`, the run's warnings (kiln::log::warn and above, which train.log
  /// holds too) show while it lives: "kiln: warning: …" on stderr, the bar cleared
  /// first, or {"event": "warning", "message": …} lines in JSON mode; also when quiet.
  explicit ConsoleObserver(ConsoleMode mode, bool warnings = true);
  ~ConsoleObserver() override;
  ConsoleObserver(const ConsoleObserver&) = delete;
  ConsoleObserver& operator=(const ConsoleObserver&) = delete;
  void on_start(const std::string& summary) override;
  void on_step(const train::StepReport& r) override;
  void on_eval(const train::EvalReport& r) override;
  void on_checkpoint(const std::string& dir, int64_t step) override;
  void on_memory(const train::MemoryReport& r) override;
  void on_profile(const train::ProfileReport& r) override;
  /// The first SIGINT/SIGTERM/SIGHUP since this observer was made (its InterruptGuard).
  int stop_requested() override { return interrupt_.requested(); }

 private:
  InterruptGuard interrupt_;
  void clear_bar();
  void on_warning(std::string_view message);
  ConsoleMode mode_;
  bool warnings_;
  bool bar_shown_ = false;
  double last_draw_ = -1.0;
  std::string last_metric_;  // the bar's "test_accuracy 88.73%" once a test ran
};

/// "test_accuracy 88.73%" or "test_rmse 0.5120  test_r2 0.8012", in the
/// metrics' order (accuracy first).
std::string format_metrics(const std::map<std::string, double>& metrics);

/// Durations for people: "17ms" under a second, "12.3s", "1m05s", "3h07m"; "?" when unknown.
std::string format_duration(double seconds);

}  // namespace kiln::app
