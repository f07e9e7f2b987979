// The handlers only touch a lock-free atomic and call _exit, both
// async-signal-safe; everything else happens in the loop, between steps.
#include "interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace kiln::app {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_previous_int, g_previous_term, g_previous_hup, g_previous_pipe;
bool g_hup_handled = false;

void on_signal(int signal) {
  int expected = 0;
  // The second signal (of any kind) does not wait for the step: the checkpoint
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
  // `nohup kiln train` asks for the run to outlive its terminal: SIGHUP stays ignored.
  sigaction(SIGHUP, nullptr, &g_previous_hup);
  g_hup_handled = g_previous_hup.sa_handler != SIG_IGN;
  if (g_hup_handled) sigaction(SIGHUP, &action, nullptr);
  // The terminal or the pipe the console writes to may go away (with SIGHUP, or a
  // `| tee` killed): the console's writes then fail, and the run goes on or stops
  // by its signal, with its checkpoint.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &g_previous_pipe);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  if (g_hup_handled) sigaction(SIGHUP, &g_previous_hup, nullptr);
  sigaction(SIGPIPE, &g_previous_pipe, nullptr);
}

int InterruptGuard::requested() const { return g_signal.load(); }

const char* InterruptGuard::name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

}  // namespace kiln::app
