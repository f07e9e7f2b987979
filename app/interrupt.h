// SIGINT/SIGTERM/SIGHUP during `kiln train`: the first signal asks the loop to
// finish its step, write a checkpoint and return (the console observer answers the
// loop's stop_requested() with it); a second one ends the process at once (exit
// 128 + signal) without touching the last complete checkpoint. SIGHUP — the
// terminal went away — stops the run as SIGTERM does, unless the process was
// started with SIGHUP ignored (nohup), and a console gone away costs no signal:
// SIGPIPE is ignored, so a write to a closed pipe fails instead of killing the run.
// It lives in app/ because ending the process is the app's to decide: lib/ never
// prints or exits.
#pragma once

namespace kiln::app {

/// Installs the handlers for its lifetime and restores the previous ones after.
/// Example: InterruptGuard guard; … if (guard.requested()) { save; return; }
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  /// The first signal received (SIGINT, SIGTERM or SIGHUP), or 0.
  int requested() const;
  /// The exit status a shell reports for `signal`: 128 + signal (130, 143, 129).
  static int exit_code(int signal) { return 128 + signal; }
  /// "SIGINT", "SIGTERM", "SIGHUP" (what the run's result says stopped it).
  static const char* name(int signal);
};

}  // namespace kiln::app
