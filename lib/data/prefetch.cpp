// PrefetchLoader: the worker thread, its bounded queue, and the copy to the device.
#include "data/prefetch.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace kiln::data {
namespace {

// The worker gathers with one thread: the training step's OpenMP team already has
// a thread per core, and a second team beside it would oversubscribe them.
// omp_set_num_threads sets this thread's own count (an ICV of its implicit task);
// at::set_num_threads would also change the process-wide count that threads
// created later start from. ATen initialises a thread's count lazily, on its first
// parallel call, which would undo ours: get_num_threads() makes that call first.
void use_one_thread() {
#ifdef _OPENMP
  (void)at::get_num_threads();
  omp_set_num_threads(1);
#endif
}

// A worker that gathers on the host runs at the lowest priority (nice 19, this
// thread only): it then takes a core when the step's OpenMP team leaves one, instead
// of taking it from the team. On the 2-core machine, at 2 threads, that lifted the
// loop with prefetching from 0.90–0.92 of the loop without to 0.97–1.01
// (kiln_bench_loader); unlike SCHED_IDLE it cannot starve under other load.
void lower_priority() { setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19); }

// Runs f with SIGINT, SIGTERM and SIGHUP blocked, so a thread it creates inherits the mask
// and the signals always reach the main thread, where the app's handler asks the
// training loop to stop between steps (the worker is then stopped and joined).
template <class F>
void with_stop_signals_blocked(F&& f) {
  sigset_t stop_signals, previous;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
  try {
    f();
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

}  // namespace

struct PrefetchLoader::Item {
  Batch batch;
  // Recorded on the worker's stream after a non-blocking copy (CUDA): the
  // consumer's stream waits for it before using the batch.
  std::optional<c10::Event> ready;
};

struct PrefetchLoader::Queue {
  std::mutex mutex;
  std::condition_variable changed;  // an item pushed or popped, an error, a stop
  std::deque<Item> items;           // at most depth
  std::exception_ptr error;         // the worker's, for the batch after the items
  bool stop = false;
  std::thread worker;
};

PrefetchLoader::PrefetchLoader(BatchLoader source, PrefetchOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  TORCH_CHECK(options_.depth() >= 0, "PrefetchLoader: depth: expected >= 0 (0: no worker), got ",
              options_.depth());
  const auto& device = options_.device();
  pin_ = options_.pin_memory() && device && device->is_cuda() && source_.device().is_cpu();
}

PrefetchLoader::~PrefetchLoader() { stop(); }

void PrefetchLoader::start(int64_t epoch, int64_t first_batch) {
  stop();
  TORCH_CHECK(first_batch >= 0 && first_batch <= size(),
              "PrefetchLoader: first_batch: expected 0..", size(), ", got ", first_batch);
  source_.set_epoch(epoch);
  epoch_ = epoch;
  next_ = first_batch;
  if (options_.depth() > 0) {
    auto queue = std::make_unique<Queue>();
    // The worker runs with the caller's thread-local state (grad mode, dispatch
    // keys, profiler callbacks), as the gather would have on the caller's thread.
    with_stop_signals_blocked([&] {
      queue->worker = std::thread([this, &q = *queue, first_batch, state = at::ThreadLocalState()] {
        at::ThreadLocalStateGuard guard(state);
        work(q, first_batch);
      });
    });
    queue_ = std::move(queue);
  }
  started_ = true;
}

// Gather (into page-locked memory for a CUDA copy), dtype, transform, copy: all of
// one batch's preparation, the same on the worker and in the synchronous path.
PrefetchLoader::Item PrefetchLoader::assemble(int64_t index) const {
  Batch b = source_.batch(index, pin_);  // x: (B, …), y: (B) or (B, outputs)
  if (const auto& dtype = options_.dtype(); dtype && b.x.scalar_type() != *dtype)
    b.x = pin_ ? at::empty(b.x.sizes(), b.x.options().dtype(*dtype).pinned_memory(true)).copy_(b.x)
               : b.x.to(*dtype);
  if (options_.transform()) b = options_.transform()(std::move(b));
  if (const auto& device = options_.device(); device && b.x.device() != *device) {
    // Non-blocking only from page-locked memory (pin_): the copy is queued on the
    // current stream (the worker's own) and the host buffer is kept by the CUDA
    // host allocator until the copy has run.
    b.x = b.x.to(*device, /*non_blocking=*/pin_);
    b.y = b.y.to(*device, /*non_blocking=*/pin_);
  }
  return {std::move(b), std::nullopt};
}

// NOT YET RUN ON A GPU (no CUDA device where it was written; compile-checked only):
// the CUDA side of a non-blocking copy on the worker's stream.
Batch PrefetchLoader::receive(Item item) const {
  if (item.ready) {
    const c10::impl::VirtualGuardImpl guard(item.ready->device_type());
    const c10::Stream current = guard.getStream(*options_.device());
    item.ready->block(current);  // the caller's stream waits for the copy, the host does not
    // The tensors were allocated on the worker's stream: tell the caching allocator
    // they are in use on the caller's too, or their memory could be handed out
    // again while the caller's kernels still read it.
    item.batch.x.record_stream(current);
    item.batch.y.record_stream(current);
  }
  return std::move(item.batch);
}

void PrefetchLoader::work(Queue& q, int64_t first_batch) {
  use_one_thread();
  if (source_.device().is_cpu()) lower_priority();
  try {
    // Copies to CUDA go on a stream from the pool, so they overlap the caller's
    // kernels on its own stream (the worker's current stream while it lives).
    std::optional<c10::StreamGuard> on_side_stream;
    if (pin_) {
      const c10::impl::VirtualGuardImpl guard(options_.device()->type());
      on_side_stream.emplace(guard.getStreamFromGlobalPool(*options_.device()));
    }
    for (int64_t i = first_batch; i < size(); ++i) {
      {
        std::unique_lock lock(q.mutex);
        q.changed.wait(lock, [&] {
          return q.stop || static_cast<int64_t>(q.items.size()) < options_.depth();
        });
        if (q.stop) return;
      }
      Item item = assemble(i);
      if (on_side_stream) {
        item.ready.emplace(options_.device()->type());
        item.ready->record(on_side_stream->current_stream());
      }
      {
        std::lock_guard lock(q.mutex);
        q.items.push_back(std::move(item));
      }
      q.changed.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard lock(q.mutex);
      q.error = std::current_exception();
    }
    q.changed.notify_all();
  }
}

Batch PrefetchLoader::next() {
  TORCH_CHECK(started_, "PrefetchLoader: next() before start() (or after stop())");
  TORCH_CHECK(next_ < size(), "PrefetchLoader: all ", size(), " batches of epoch ", epoch_,
              " are taken; start() the next epoch");
  if (!queue_) {  // depth 0
    Item item = assemble(next_);
    ++next_;
    return receive(std::move(item));
  }
  auto& q = *queue_;
  std::unique_lock lock(q.mutex);
  q.changed.wait(lock, [&] { return !q.items.empty() || q.error; });
  if (q.items.empty()) std::rethrow_exception(q.error);  // the failure is this batch's
  Item item = std::move(q.items.front());
  q.items.pop_front();
  lock.unlock();
  q.changed.notify_all();
  ++next_;
  return receive(std::move(item));
}

void PrefetchLoader::stop() {
  started_ = false;
  if (!queue_) return;
  {
    std::lock_guard lock(queue_->mutex);
    queue_->stop = true;
  }
  queue_->changed.notify_all();
  if (queue_->worker.joinable()) queue_->worker.join();
  queue_.reset();  // the assembled batches and any error go with it
}

}  // namespace kiln::data
