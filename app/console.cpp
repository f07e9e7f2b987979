// ConsoleObserver: redraws one line at most ten times a second on a terminal;
// prints a line per epoch (plain text or JSON) unless quiet.
#include "console.h"

#include <cmath>
#include <cstdio>

#include "util/error.h"
#include "util/log.h"

namespace kiln::app {

std::string format_duration(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  // Under a second in milliseconds: a short run's elapsed time and its last ETA read
  // "17ms", not "0.0s".
  if (s < 0.9995) {
    std::snprintf(buf, sizeof buf, "%.0fms", s * 1000.0);
    return buf;
  }
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

ConsoleMode console_mode(bool quiet, const std::string& log_format, bool terminal) {
  if (log_format == "json") return ConsoleMode::kJson;
  if (log_format != "text")
    throw InputError("--log-format: expected text or json, found \"" + log_format + "\"");
  if (quiet) return ConsoleMode::kQuiet;
  return terminal ? ConsoleMode::kLive : ConsoleMode::kPlain;
}

void print_json_event(const std::string& name, nlohmann::ordered_json fields) {
  nlohmann::ordered_json line = {{"event", name}};
  for (auto& [key, value] : fields.items()) line[key] = std::move(value);
  // Non-finite numbers (a diverged loss) as null rather than invalid JSON.
  std::fputs((line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n").c_str(),
             stdout);
  std::fflush(stdout);
}

ConsoleObserver::ConsoleObserver(ConsoleMode mode, bool warnings) : mode_(mode), warnings_(warnings) {
  if (warnings_)
    log::set_warning_listener([this](log::Level level, std::string_view message) {
      if (level == log::Level::kWarn) on_warning(message);
    });
}

ConsoleObserver::~ConsoleObserver() {
  if (warnings_) log::set_warning_listener(nullptr);
  // A run that ends in an error leaves no half-drawn bar for the error line to follow.
  clear_bar();
  std::fflush(stdout);
}

void ConsoleObserver::on_warning(std::string_view message) {
  if (mode_ == ConsoleMode::kJson) return print_json_event("warning", {{"message", std::string(message)}});
  clear_bar();
  std::fflush(stdout);  // the lines before it first, where both go to one terminal or file
  std::fprintf(stderr, "kiln: warning: %.*s\n", static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
}

void ConsoleObserver::clear_bar() {
  if (bar_shown_) std::fputs("\r\033[2K", stdout);
  bar_shown_ = false;
}

void ConsoleObserver::on_start(const std::string& summary) {
  if (mode_ == ConsoleMode::kQuiet) return;
  if (mode_ == ConsoleMode::kJson) return print_json_event("start", {{"summary", summary}});
  std::printf("%s\n", summary.c_str());
  std::fflush(stdout);
}

void ConsoleObserver::on_step(const train::StepReport& r) {
  if (mode_ == ConsoleMode::kJson) {  // progress at most once a second, and each epoch's last step
    if (r.elapsed_s - last_draw_ < 1.0 && r.batch != r.batches) return;
    last_draw_ = r.elapsed_s;
    const auto [loss, grad_norm] = r.loss_and_grad_norm();  // read only when shown
    return print_json_event("progress", {{"step", r.step}, {"total_steps", r.total_steps},
                                         {"epoch", r.epoch}, {"epochs", r.epochs}, {"loss", loss},
                                         {"lr", r.lr}, {"grad_norm", grad_norm},
                                         {"samples_per_s", r.samples_per_s}, {"elapsed_s", r.elapsed_s},
                                         {"eta_s", r.eta_s}, {"skipped_steps", r.skipped_steps}});
  }
  if (mode_ != ConsoleMode::kLive) return;
  if (r.elapsed_s - last_draw_ < 0.1 && r.batch != r.batches) return;
  last_draw_ = r.elapsed_s;
  const auto [loss, grad_norm] = r.loss_and_grad_norm();  // read only when drawn
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * r.batch / std::max<int64_t>(r.batches, 1));
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  // The ETA is the whole run's (every epoch left), at the mean step time so far.
  std::printf("\r\033[2Kepoch %lld/%lld [%s] %lld/%lld loss %.4f lr %.3g |g| %.3g %.0f samples/s%s%s "
              "run ETA %s",
              static_cast<long long>(r.epoch), static_cast<long long>(r.epochs), bar.c_str(),
              static_cast<long long>(r.batch), static_cast<long long>(r.batches), loss, r.lr,
              grad_norm, r.samples_per_s, last_metric_.empty() ? "" : " last ",
              last_metric_.c_str(), format_duration(r.eta_s).c_str());
  std::fflush(stdout);
  bar_shown_ = true;
}

void ConsoleObserver::on_eval(const train::EvalReport& r) {
  const auto metrics = format_metrics(r.metrics);
  // The task's headline metric: bits per character (text), else the first (accuracy, RMSE).
  const auto bits = metrics.find("test_bits_per");
  const auto from = bits == std::string::npos ? 0 : bits;
  last_metric_ = metrics.substr(from, metrics.find("  ", from) - from);
  if (mode_ == ConsoleMode::kQuiet) return;
  if (mode_ == ConsoleMode::kJson) {
    nlohmann::ordered_json m;
    for (const auto& [name, value] : r.metrics) m[name] = value;
    return print_json_event("eval", {{"step", r.step}, {"epoch", r.epoch}, {"epochs", r.epochs},
                                     {"train_loss", r.train_loss}, {"test_loss", r.loss}, {"metrics", m},
                                     {"samples_per_s", r.samples_per_s}, {"elapsed_s", r.elapsed_s},
                                     {"eta_s", r.eta_s}});
  }
  clear_bar();
  std::printf("epoch %lld/%lld  step %lld  train_loss %.4f  test_loss %.4f  %s  %.0f samples/s  "
              "elapsed %s  ETA %s\n",
              static_cast<long long>(r.epoch), static_cast<long long>(r.epochs),
              static_cast<long long>(r.step), r.train_loss, r.loss,
              metrics.c_str(), r.samples_per_s,
              format_duration(r.elapsed_s).c_str(), format_duration(r.eta_s).c_str());
  std::fflush(stdout);
}

void ConsoleObserver::on_checkpoint(const std::string& dir, int64_t step) {
  if (mode_ == ConsoleMode::kJson) return print_json_event("checkpoint", {{"step", step}, {"dir", dir}});
  if (mode_ != ConsoleMode::kLive) return;  // piped output stays one line per epoch; the log has every save
  clear_bar();
  std::printf("checkpoint %s\n", dir.c_str());
  std::fflush(stdout);
}

void ConsoleObserver::on_memory(const train::MemoryReport& r) {
  if (mode_ == ConsoleMode::kQuiet) return;
  if (mode_ == ConsoleMode::kJson) return print_json_event("memory", nlohmann::ordered_json::parse(r.json().dump()));
  clear_bar();
  std::fputs(r.table().c_str(), stdout);  // headed "memory at step N"
  std::fflush(stdout);
}

void ConsoleObserver::on_profile(const train::ProfileReport& r) {
  if (mode_ == ConsoleMode::kQuiet) return;
  if (mode_ == ConsoleMode::kJson) {
    auto row = [](const train::OpStats& s) {
      return nlohmann::ordered_json{{"name", s.name}, {"shapes", s.shapes}, {"calls", s.calls},
                                    {"self_ns", s.self_ns}, {"total_ns", s.total_ns},
                                    {"self_alloc_bytes", s.self_alloc_bytes}};
    };
    nlohmann::ordered_json top = nlohmann::ordered_json::array();
    for (size_t i = 0; i < std::min<size_t>(10, r.cpu.size()); ++i) top.push_back(row(r.cpu[i]));
    nlohmann::ordered_json fields = {{"first_step", r.first}, {"last_step", r.last},
                                     {"trace", r.trace_path}, {"table", r.table_path},
                                     {"profiled_ms_per_step", r.profiled_ms_per_step}};
    fields["unprofiled_ms_per_step"] =
        r.unprofiled_ms_per_step ? nlohmann::ordered_json(*r.unprofiled_ms_per_step) : nlohmann::ordered_json();
    fields["top_cpu"] = top;
    return print_json_event("profile", fields);
  }
  clear_bar();
  std::fputs(r.text.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace kiln::app

