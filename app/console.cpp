// ConsoleObserver: redraws one line at most ten times a second on a terminal;
// prints a line per epoch everywhere.
#include "console.h"

#include <cmath>
#include <cstdio>

namespace kiln::app {

std::string format_duration(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}

std::string format_metrics(const std::map<std::string, double>& metrics) {
  std::string out;
  char buf[64];
  for (const char* name : {"accuracy", "bits_per_char", "bits_per_byte", "rmse", "r2"}) {
    const auto it = metrics.find(name);
    if (it == metrics.end()) continue;
    if (it->first == "accuracy") std::snprintf(buf, sizeof buf, "test_accuracy %.2f%%", 100.0 * it->second);
    else std::snprintf(buf, sizeof buf, "test_%s %.4g", name, it->second);
    out += (out.empty() ? "" : "  ") + std::string(buf);
  }
  return out;
}

ConsoleObserver::ConsoleObserver(bool live) : live_(live) {}

void ConsoleObserver::clear_bar() {
  if (bar_shown_) std::fputs("\r\033[2K", stdout);
  bar_shown_ = false;
}

void ConsoleObserver::on_start(const std::string& summary) {
  std::printf("%s\n", summary.c_str());
  std::fflush(stdout);
}

void ConsoleObserver::on_step(const train::StepReport& r) {
  if (!live_) return;
  if (r.elapsed_s - last_draw_ < 0.1 && r.batch != r.batches) return;
  last_draw_ = r.elapsed_s;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * r.batch / std::max<int64_t>(r.batches, 1));
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  std::printf("\r\033[2Kepoch %lld/%lld [%s] %lld/%lld loss %.4f lr %.3g |g| %.3g %.0f samples/s ETA %s",
              static_cast<long long>(r.epoch), static_cast<long long>(r.epochs), bar.c_str(),
              static_cast<long long>(r.batch), static_cast<long long>(r.batches), r.loss, r.lr,
              r.grad_norm, r.samples_per_s, format_duration(r.eta_s).c_str());
  std::fflush(stdout);
  bar_shown_ = true;
}

void ConsoleObserver::on_eval(const train::EvalReport& r) {
  clear_bar();
  std::printf("epoch %lld/%lld  step %lld  train_loss %.4f  test_loss %.4f  %s  %.0f samples/s  "
              "elapsed %s  ETA %s\n",
              static_cast<long long>(r.epoch), static_cast<long long>(r.epochs),
              static_cast<long long>(r.step), r.train_loss, r.loss,
              format_metrics(r.metrics).c_str(), r.samples_per_s,
              format_duration(r.elapsed_s).c_str(), format_duration(r.eta_s).c_str());
  std::fflush(stdout);
}

void ConsoleObserver::on_checkpoint(const std::string& dir, int64_t step) {
  if (!live_) return;  // piped output stays one line per epoch; the log has every save
  clear_bar();
  std::printf("checkpoint %s\n", dir.c_str());
  std::fflush(stdout);
}

void ConsoleObserver::on_memory(const train::MemoryReport& r) {
  clear_bar();
  std::fputs(r.table().c_str(), stdout);  // headed "memory at step N"
  std::fflush(stdout);
}

}  // namespace kiln::app
