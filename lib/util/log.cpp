// The spdlog side of kiln::log: one logger, a file sink per run, an optional
// stderr sink, and an optional listener for warnings and errors.
#include "log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <mutex>

#include "error.h"

namespace kiln::log {
namespace {

std::mutex g_mutex;
std::shared_ptr<spdlog::logger> g_logger;
std::shared_ptr<spdlog::sinks::basic_file_sink_mt> g_file;
std::shared_ptr<spdlog::sinks::stderr_color_sink_mt> g_stderr;
std::function<void(Level, std::string_view)> g_listener;  // set_warning_listener's

spdlog::level::level_enum to_spd(Level l) {
  switch (l) {
    case Level::kDebug: return spdlog::level::debug;
    case Level::kInfo: return spdlog::level::info;
    case Level::kWarn: return spdlog::level::warn;
    default: return spdlog::level::err;
  }
}

spdlog::logger& logger() {
  if (!g_logger) {
    g_logger = std::make_shared<spdlog::logger>("kiln");
    g_logger->set_level(spdlog::level::debug);
    g_logger->set_pattern("%Y-%m-%d %H:%M:%S.%e [%l] %v");
    // train.log is the run's diary, not its record: a line the disk refuses is
    // dropped without spdlog's "[*** LOG ERROR ***]" lines on the console, and the
    // writes that matter (metrics.jsonl, checkpoints) report the disk as kiln::IoError.
    g_logger->set_error_handler([](const std::string&) {});
  }
  return *g_logger;
}

void replace_sink(spdlog::sink_ptr old_sink, spdlog::sink_ptr new_sink) {
  auto& sinks = logger().sinks();
  if (old_sink) std::erase(sinks, old_sink);
  if (new_sink) sinks.push_back(std::move(new_sink));
}

}  // namespace

void open_file(const std::string& path) {
  // Opened once here first, for the OS's reason when it cannot be (spdlog's own
  // exception words it otherwise and is no kiln::IoError).
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(path, "open the log file", errno);
  ::close(fd);
  std::lock_guard lock(g_mutex);
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  sink->set_pattern("%Y-%m-%d %H:%M:%S.%e [%l] %v");
  replace_sink(g_file, sink);
  g_file = sink;
}

void close_file() {
  std::lock_guard lock(g_mutex);
  if (g_file) g_file->flush();
  replace_sink(g_file, nullptr);
  g_file.reset();
}

void set_stderr_level(Level level) {
  std::lock_guard lock(g_mutex);
  if (!g_stderr) {
    g_stderr = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    g_stderr->set_pattern("[%l] %v");
    replace_sink(nullptr, g_stderr);
  }
  g_stderr->set_level(to_spd(level));
}

void set_warning_listener(std::function<void(Level, std::string_view)> listener) {
  std::lock_guard lock(g_mutex);
  g_listener = std::move(listener);
}

void write(Level level, std::string_view message) {
  std::lock_guard lock(g_mutex);
  logger().log(to_spd(level), "{}", message);
  if (g_file) g_file->flush();
  // Under the lock, so that a listener being removed is not called after.
  if (level >= Level::kWarn && g_listener) g_listener(level, message);
}

}  // namespace kiln::log
