// SIGINT/SIGTERM during `kiln train`: the first signal asks the loop to finish its
// step, write a checkpoint and return (the console observer answers the loop's
// stop_requested() with it); a second one ends the process at once (exit 130/143)
// without touching the last complete checkpoint. It lives in app/ because ending
// the process is the app's to decide: lib/ never prints or exits.
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

  /// The first signal received (SIGINT or SIGTERM), or 0.
  int requested() const;
  /// The exit status a shell reports for `signal`: 128 + signal (130, 143).
  static int exit_code(int signal) { return 128 + signal; }
};

}  // namespace kiln::app
