// What `kiln train` shows on the console: a live progress bar on a terminal,
// plain lines when the output is piped.
#pragma once
#include "interrupt.h"
#include "train/trainer.h"

namespace kiln::app {

class ConsoleObserver : public train::TrainObserver {
 public:
  explicit ConsoleObserver(bool live);
  void on_start(const std::string& summary) override;
  void on_step(const train::StepReport& r) override;
  void on_eval(const train::EvalReport& r) override;
  void on_checkpoint(const std::string& dir, int64_t step) override;
  void on_memory(const train::MemoryReport& r) override;
  /// The first SIGINT/SIGTERM since this observer was made (its InterruptGuard).
  int stop_requested() override { return interrupt_.requested(); }

 private:
  InterruptGuard interrupt_;
  void clear_bar();
  bool live_;
  bool bar_shown_ = false;
  double last_draw_ = -1.0;
};

/// "test_accuracy 88.73%" or "test_rmse 0.5120  test_r2 0.8012", in the
/// metrics' order (accuracy first).
std::string format_metrics(const std::map<std::string, double>& metrics);

/// "1m05s" style durations.
std::string format_duration(double seconds);

}  // namespace kiln::app
