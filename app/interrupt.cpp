// The handlers only touch a lock-free atomic and call _exit, both
// async-signal-safe; everything else happens in the loop, between steps.
#include "interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace kiln::app {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_previous_int, g_previous_term;

void on_signal(int signal) {
  int expected = 0;
  // The second signal (of either kind) does not wait for the step: the checkpoint
  // being written, if any, is a temporary directory, and the last complete one
  // stays as it was.
  if (!g_signal.compare_exchange_strong(expected, signal)) _exit(128 + signal);
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

int InterruptGuard::requested() const { return g_signal.load(); }

}  // namespace kiln::app
