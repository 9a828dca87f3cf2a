// ThreadPool: results come back through futures whatever order tasks finish in; exceptions reach
// the caller; a pool with queued work can be destroyed.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"

using namespace fathom;

TEST(ThreadPool, ResultsMatchTheirTasksWhateverTheFinishingOrder) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3);
  std::mt19937 rng(11);
  std::vector<std::future<uint64_t>> results;
  std::vector<uint64_t> inputs;
  for (int i = 0; i < 40; ++i) {
    const uint64_t x = rng();
    const int sleep_us = int(rng() % 300);
    inputs.push_back(x);
    results.push_back(pool.submit([x, sleep_us] {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      return x * 3 + 1;
    }));
  }
  for (size_t i = 0; i < results.size(); ++i) EXPECT_EQ(results[i].get(), inputs[i] * 3 + 1);
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(2);
  auto failing = pool.submit([]() -> int { FATHOM_FAIL("piece 7 is bad"); });
  auto fine = pool.submit([] { return 5; });
  try {
    failing.get();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "piece 7 is bad");
  }
  EXPECT_EQ(fine.get(), 5);
}

TEST(ThreadPool, DestroyingWithQueuedTasksDropsThem) {
  std::future<int> last;
  {
    ThreadPool pool(1);
    pool.submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
    for (int i = 0; i < 50; ++i) last = pool.submit([i] { return i; });
  }
  // Either it ran before the pool stopped, or it was dropped: never a hang.
  try {
    EXPECT_EQ(last.get(), 49);
  } catch (const std::future_error& e) {
    EXPECT_EQ(e.code(), std::future_errc::broken_promise);
  }
}

TEST(ThreadPool, NeedsAtLeastOneThread) { EXPECT_THROW(ThreadPool(0), Error); }
