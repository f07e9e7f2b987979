// PrefetchLoader: the worker's batches are BatchLoader's bit for bit (every depth,
// several epochs, a mid-epoch start, another device); an error in the worker
// reaches next() as itself; stop() is prompt with a full queue; depth 0 has no worker.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <chrono>
#include <optional>
#include <thread>

#include "data/loader.h"
#include "data/prefetch.h"
#include "fake_device.h"
#include "support.h"
#include "util/error.h"

using kiln::data::Batch;
using kiln::data::BatchLoader;
using kiln::data::PrefetchLoader;
using kiln::data::PrefetchOptions;

namespace {

using Clock = std::chrono::steady_clock;

// 103 examples of (4, 3) floats and int64 labels: batches of 10, the last one 3.
BatchLoader make_loader(bool shuffle = true) {
  torch::manual_seed(1);
  return BatchLoader(torch::randn({103, 4, 3}), torch::randint(0, 10, {103}), 10, shuffle, 7);
}

// Every batch of `epoch` from `first`, through the prefetcher and straight from the
// loader; the prefetcher's on `device` where it moves them (host data to CUDA), else
// where the loader's are.
void require_same_batches(PrefetchLoader& prefetched, BatchLoader loader, int64_t epoch,
                          int64_t first, std::optional<at::Device> device = std::nullopt) {
  prefetched.start(epoch, first);
  loader.set_epoch(epoch);
  for (int64_t i = first; i < loader.size(); ++i) {
    const Batch got = prefetched.next(), want = loader.batch(i);
    INFO("epoch " << epoch << ", batch " << i);
    REQUIRE(got.x.dtype() == want.x.dtype());
    REQUIRE(got.x.device() == device.value_or(want.x.device()));
    REQUIRE(got.y.device() == device.value_or(want.y.device()));
    REQUIRE(torch::equal(got.x.cpu(), want.x.cpu()));
    REQUIRE(torch::equal(got.y.cpu(), want.y.cpu()));
  }
  const std::string taken = c10::str("batches of epoch ", epoch, " are taken");
  REQUIRE_THROWS_WITH(prefetched.next(), Catch::Contains(taken));
}

}  // namespace

TEST_CASE("prefetched batches are the loader's, bit for bit, at every depth", "[loader][data]") {
  for (const bool shuffle : {true, false})
    for (const int64_t depth : {0, 1, 2, 5, 20}) {
      INFO("depth " << depth << ", shuffle " << shuffle);
      const auto loader = make_loader(shuffle);
      PrefetchLoader prefetched(loader, PrefetchOptions().depth(depth));
      REQUIRE(prefetched.size() == 11);
      for (int64_t epoch = 0; epoch < 3; ++epoch)
        require_same_batches(prefetched, loader, epoch, 0);
      require_same_batches(prefetched, loader, 5, 4);   // a resumed run starts mid-epoch
      require_same_batches(prefetched, loader, 2, 10);  // the last, short batch alone
      require_same_batches(prefetched, loader, 1, 0);   // back to an earlier epoch
      prefetched.start(3, 11);  // a run stopped after an epoch's last batch
      REQUIRE_THROWS(prefetched.next());
    }
}

TEST_CASE("a restart mid-epoch drops the queued batches", "[loader][data]") {
  const auto loader = make_loader();
  PrefetchLoader prefetched(loader, PrefetchOptions().depth(4));
  prefetched.start(0, 0);
  prefetched.next();
  prefetched.next();
  require_same_batches(prefetched, loader, 0, 2);  // the same epoch again, from batch 2
}

TEST_CASE("the worker converts the dtype and copies to another device", "[loader][data]") {
  const auto fake = kiln::test::fake_device();
  for (const int64_t depth : {0, 2}) {
    INFO("depth " << depth);
    auto loader = make_loader();
    PrefetchLoader prefetched(loader,
                              PrefetchOptions().depth(depth).device(fake).dtype(at::kDouble));
    prefetched.start(1, 3);
    loader.set_epoch(1);
    for (int64_t i = 3; i < loader.size(); ++i) {
      const Batch got = prefetched.next(), want = loader.batch(i);
      REQUIRE(got.x.device() == fake);
      REQUIRE(got.y.device() == fake);
      REQUIRE(got.x.scalar_type() == at::kDouble);
      REQUIRE(torch::equal(got.x.cpu(), want.x.to(at::kDouble)));
      REQUIRE(torch::equal(got.y.cpu(), want.y));
    }
  }
  // Data already on the device: the worker gathers there.
  BatchLoader on_fake(torch::randn({103, 4, 3}).to(fake), torch::randint(0, 10, {103}).to(fake), 10,
                      true, 7);
  PrefetchLoader prefetched(on_fake, PrefetchOptions().device(fake));
  require_same_batches(prefetched, on_fake, 2, 0);
}

TEST_CASE("host data to CUDA: pinned, copied on the worker's stream, the loader's batches",
          "[loader][data][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  const auto loader = make_loader();
  for (const int64_t depth : {0, 2}) {
    PrefetchLoader prefetched(loader, PrefetchOptions().depth(depth).device(at::Device("cuda")));
    require_same_batches(prefetched, loader, 0, 0, at::Device("cuda:0"));
    require_same_batches(prefetched, loader, 4, 6, at::Device("cuda:0"));
    // The pinned gather itself.
    const Batch pinned = loader.batch(3, /*pin_memory=*/true);
    REQUIRE(pinned.x.is_pinned());
    REQUIRE(torch::equal(pinned.x, loader.batch(3).x));
  }
}

TEST_CASE("an error in the worker reaches next() as itself, after the batches before it",
          "[loader][data]") {
  const auto loader = make_loader();
  for (const int64_t depth : {0, 1, 3}) {
    INFO("depth " << depth);
    // A transform that fails on batch 3 (rows 30..39 in the unshuffled order); an
    // InputError stays an InputError.
    const auto rows_30_to_39 = make_loader(false).batch(3).x;
    const auto fail_on_batch_3 = [=](Batch b) {
      if (torch::equal(b.x, rows_30_to_39))
        throw kiln::InputError("rows 30..39: expected finite values, found a NaN");
      return b;
    };
    PrefetchLoader prefetched(make_loader(false),
                              PrefetchOptions().depth(depth).transform(fail_on_batch_3));
    prefetched.start(0, 0);
    for (int i = 0; i < 3; ++i) REQUIRE_NOTHROW(prefetched.next());
    REQUIRE_THROWS_AS(prefetched.next(), kiln::InputError);
    REQUIRE_THROWS_WITH(prefetched.next(), "rows 30..39: expected finite values, found a NaN");
    prefetched.stop();
  }
  // An ATen error in the gather (an index past the data's end) keeps its type and message.
  PrefetchLoader bad_gather(loader, PrefetchOptions().transform([](Batch b) {
    b.x = b.x.index_select(0, torch::tensor({0, 99}));
    return b;
  }));
  bad_gather.start(0, 0);
  REQUIRE_THROWS_AS(bad_gather.next(), c10::IndexError);
  REQUIRE_THROWS_WITH(bad_gather.next(), Catch::Contains("out of range"));
}

TEST_CASE("stop() returns promptly with the queue full, and is idempotent", "[loader][data]") {
  const auto loader = make_loader();
  std::atomic<int> assembled{0};
  PrefetchLoader prefetched(loader, PrefetchOptions().depth(4).transform([&](Batch b) {
    ++assembled;
    return b;
  }));
  prefetched.start(0, 0);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (assembled < 4 && Clock::now() < deadline) std::this_thread::yield();
  REQUIRE(assembled == 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(assembled == 4);  // bounded: the worker waits for room
  const auto t0 = Clock::now();
  prefetched.stop();
  REQUIRE(Clock::now() - t0 < std::chrono::seconds(1));
  prefetched.stop();
  REQUIRE_THROWS_WITH(prefetched.next(), Catch::Contains("before start()"));

  // A batch in assembly is finished, no more: a slow transform holds stop() one batch.
  PrefetchLoader slow(loader, PrefetchOptions().depth(2).transform([](Batch b) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return b;
  }));
  slow.start(0, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t1 = Clock::now();
  slow.stop();
  REQUIRE(Clock::now() - t1 < std::chrono::milliseconds(1000));

  // The destructor stops a worker with a full queue too.
  {
    PrefetchLoader dropped(loader, PrefetchOptions().depth(2));
    dropped.start(0, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST_CASE("depth 0 assembles on the caller's thread; the worker gathers with one thread",
          "[loader][data]") {
  const auto loader = make_loader();
  const int caller_threads = at::get_num_threads();
  for (const int64_t depth : {0, 2}) {
    std::thread::id on;
    int threads = 0;
    PrefetchLoader prefetched(loader, PrefetchOptions().depth(depth).transform([&](Batch b) {
      on = std::this_thread::get_id();
      threads = at::get_num_threads();
      return b;
    }));
    prefetched.start(0, 0);
    prefetched.next();
    prefetched.stop();
    INFO("depth " << depth);
    REQUIRE((on == std::this_thread::get_id()) == (depth == 0));
    REQUIRE(threads == (depth == 0 ? caller_threads : 1));
    REQUIRE(at::get_num_threads() == caller_threads);
  }
  REQUIRE_THROWS_WITH(PrefetchLoader(loader, PrefetchOptions().depth(-1)),
                      Catch::Contains("depth: expected >= 0"));
}

TEST_CASE("a sharded loader gives each rank every world-th example, padded, and the ranks' batches "
          "together are one process's batch", "[data][loader][dist]") {
  const auto x = at::arange(10, at::kFloat).reshape({10, 1});
  const auto y = at::arange(10, at::kLong);
  kiln::data::BatchLoader whole(x, y, 4, /*shuffle=*/true, 3);
  for (const int64_t world : {2, 3}) {
    INFO("world " << world);
    std::vector<kiln::data::BatchLoader> ranks;
    for (int64_t r = 0; r < world; ++r) {
      ranks.emplace_back(x, y, 2, true, 3);
      ranks.back().shard(r, world);
    }
    for (const int64_t epoch : {0, 1}) {
      whole.set_epoch(epoch);
      std::vector<int64_t> seen;
      for (auto& l : ranks) {
        l.set_epoch(epoch);
        REQUIRE(l.examples() == (10 + world - 1) / world);  // padded: every rank as many
        REQUIRE(l.size() == (l.examples() + 1) / 2);
      }
      // World 2: rank r's batch k and the other's hold one process's batch k of 4.
      if (world == 2)
        for (int64_t k = 0; k < 2; ++k) {
          auto a = ranks[0].batch(k).y, b = ranks[1].batch(k).y;
          auto both = std::get<0>(at::sort(at::cat({a, b})));
          auto one = std::get<0>(at::sort(whole.batch(k).y));
          REQUIRE(at::equal(both, one));
        }
      for (auto& l : ranks)
        for (int64_t k = 0; k < l.size(); ++k) {
          const auto ids = l.batch(k).y.contiguous();
          seen.insert(seen.end(), ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
        }
      std::sort(seen.begin(), seen.end());
      // Every example at least once; the padding repeats the order's first ones.
      REQUIRE(std::set<int64_t>(seen.begin(), seen.end()).size() == 10);
      REQUIRE(static_cast<int64_t>(seen.size()) == ranks[0].examples() * world);
    }
  }
}
