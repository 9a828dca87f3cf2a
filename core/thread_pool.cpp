#include "core/thread_pool.h"

#include "core/error.h"

namespace fathom {

ThreadPool::ThreadPool(int threads) {
  FATHOM_CHECK(threads >= 1, "a thread pool needs at least one thread, got ", threads);
  workers_.reserve(size_t(threads));
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::enqueue(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    FATHOM_CHECK(!stopping_, "task submitted to a thread pool that is shutting down");
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void ThreadPool::work() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();  // a packaged_task: exceptions go to its future
  }
}

}  // namespace fathom
