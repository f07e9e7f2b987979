// ThreadSanitizer check of kiln's threads (docs/reliability.md): the PrefetchLoader's
// worker and its queue, and the InterruptGuard's signal handlers while a worker runs.
// Built by clang with -fsanitize=thread in the clang project of tests/fuzz, with
// lib/data/prefetch.cpp, lib/data/loader.cpp and app/interrupt.cpp compiled again,
// instrumented (the executable's definitions take the place of libkiln's). libtorch is
// not instrumented, so what is checked is kiln's own synchronisation: every access
// kiln's code makes on either side of the queue, the worker's start and join, the
// handlers' atomic. A race, a lock-order inversion or a signal-unsafe call in a
// handler is a TSan report, and the program exits non-zero (TSAN_OPTIONS halt_on_error).
// Usage: tsan_threads [ROUNDS]  (default 40)
#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>

#include "data/loader.h"
#include "data/prefetch.h"
#include "interrupt.h"
#include "util/error.h"

using kiln::data::Batch;
using kiln::data::BatchLoader;
using kiln::data::PrefetchLoader;
using kiln::data::PrefetchOptions;

namespace {

int g_checks = 0;

void check(bool ok, const std::string& what) {
  ++g_checks;
  if (ok) return;
  std::fprintf(stderr, "tsan_threads: FAILED: %s\n", what.c_str());
  std::exit(1);
}

// 103 examples of (4, 3) floats: batches of 10, the last one 3.
BatchLoader make_loader() {
  torch::manual_seed(1);
  return BatchLoader(torch::randn({103, 4, 3}), torch::randint(0, 10, {103}), 10, true, 7);
}

bool same(const Batch& a, const Batch& b) { return torch::equal(a.x, b.x) && torch::equal(a.y, b.y); }

// Random walks over start / next / restart / stop at several depths, each batch checked
// against the loader's own: the queue is used from both sides while the worker fills it.
void random_walks(int rounds) {
  std::mt19937 rng(5);
  BatchLoader loader = make_loader();
  for (const int64_t depth : {1, 2, 5}) {
    PrefetchLoader prefetched(loader, PrefetchOptions().depth(depth));
    for (int round = 0; round < rounds; ++round) {
      const int64_t epoch = rng() % 4, first = rng() % prefetched.size();
      prefetched.start(epoch, first);
      loader.set_epoch(epoch);
      const int64_t take = rng() % (prefetched.size() - first + 1);
      for (int64_t i = first; i < first + take; ++i) {
        if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
        check(same(prefetched.next(), loader.batch(i)),
              "depth " + std::to_string(depth) + ", epoch " + std::to_string(epoch) + ", batch " +
                  std::to_string(i) + ": the prefetched batch is the loader's");
      }
      if (rng() % 2) prefetched.stop();  // otherwise the next start() stops it, queue full or not
    }
  }  // destroyed with a worker running
}

// A transform on the worker throws at one batch: the batches before it arrive, then
// next() rethrows the worker's exception on the caller's thread.
void worker_error() {
  BatchLoader loader = make_loader();
  for (const int64_t depth : {1, 3}) {
    PrefetchLoader prefetched(loader, PrefetchOptions().depth(depth).transform([](Batch b) {
      if (b.index == 6) throw kiln::InputError("batch 6: refused");
      return b;
    }));
    prefetched.start(2, 0);
    int64_t delivered = 0;
    std::string message;
    try {
      for (;;) {
        prefetched.next();
        ++delivered;
      }
    } catch (const kiln::InputError& e) {
      message = e.what();
    }
    check(delivered == 6 && message == "batch 6: refused",
          "the worker's error follows the 6 batches before it (got " + std::to_string(delivered) +
              ", '" + message + "')");
  }
}

// A signal while the worker gathers: the worker has SIGINT, SIGTERM and SIGHUP
// blocked, so the handler runs on the main thread, which sees requested() between
// batches and stops the worker.
void signal_during_prefetch(int signal) {
  std::atomic<bool> worker_blocks{true};
  BatchLoader loader = make_loader();
  kiln::app::InterruptGuard guard;
  PrefetchLoader prefetched(loader, PrefetchOptions().depth(2).transform([&](Batch b) {
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    if (!sigismember(&mask, signal)) worker_blocks = false;
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    return b;
  }));
  int64_t taken = 0;
  bool sent = false;
  for (int64_t epoch = 0; epoch < 50 && !guard.requested(); ++epoch) {
    prefetched.start(epoch, 0);
    for (int64_t i = 0; i < prefetched.size() && !guard.requested(); ++i) {
      prefetched.next();
      if (++taken == 15 && !sent) {
        // From another thread, as a terminal or `kill` would: the kernel picks a thread
        // that does not block it (the main thread; the worker blocks it).
        std::thread([signal] { kill(getpid(), signal); }).join();
        sent = true;
      }
    }
  }
  prefetched.stop();
  check(guard.requested() == signal,
        std::string("the handler saw ") + kiln::app::InterruptGuard::name(signal));
  check(worker_blocks, std::string("the worker blocks ") + kiln::app::InterruptGuard::name(signal));
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 40;
  // One intra-op thread: libtorch's OpenMP team is not instrumented, and TSan cannot
  // see libgomp's barriers, so the copies libtorch makes inside a parallel region would
  // be reported as races that are not there. kiln's own threads are what is checked.
  at::set_num_threads(1);
  const auto start = std::chrono::steady_clock::now();
  random_walks(rounds);
  worker_error();
  // Under nohup SIGHUP is ignored, and the guard leaves it so: then it is not sent.
  struct sigaction hup {};
  sigaction(SIGHUP, nullptr, &hup);
  for (const int signal : {SIGINT, SIGTERM, SIGHUP})
    if (signal != SIGHUP || hup.sa_handler != SIG_IGN) signal_during_prefetch(signal);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("tsan_threads: %d checks passed in %.1f s (%d rounds of random walks at depths 1, 2, 5; "
              "a worker's error; SIGINT, SIGTERM, SIGHUP during prefetching), no ThreadSanitizer report\n",
              g_checks, seconds, rounds);
  return 0;
}
