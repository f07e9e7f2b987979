// kiln's run log: a narrow interface over spdlog so that no file that includes
// torch (which ships its own fmt) ever includes spdlog.
#pragma once
#include <functional>
#include <string>
#include <string_view>

namespace kiln::log {

enum class Level { kDebug, kInfo, kWarn, kError };

/// Sends every following message to `path` as well (append); a file that cannot be
/// opened throws kiln::IoError, a line the disk refuses later is dropped. Example:
/// kiln::log::open_file("runs/x/train.log");
void open_file(const std::string& path);
/// Flushes and closes the file sink.
void close_file();
/// Mirrors messages at or above `level` to stderr (off by default).
void set_stderr_level(Level level);
/// Hands every message at or above kWarn to `listener` as well, after the log's sinks,
/// under the log's lock (so it must not log itself; kiln train's console shows them:
/// app/console.h); an empty function removes it. Example: kiln::log::set_warning_listener([](Level, std::string_view m) {…});
void set_warning_listener(std::function<void(Level, std::string_view)> listener);
void write(Level level, std::string_view message);

inline void debug(std::string_view m) { write(Level::kDebug, m); }
inline void info(std::string_view m) { write(Level::kInfo, m); }
inline void warn(std::string_view m) { write(Level::kWarn, m); }
inline void error(std::string_view m) { write(Level::kError, m); }

}  // namespace kiln::log
