// A fixed set of worker threads running submitted tasks in submission order, each returning its
// result (or exception) through a std::future. For coarse-grained work such as tokenizing pieces
// of text; the numeric kernels use OpenMP instead.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace fathom {

// The most threads a recipe or command may ask for: above any machine fathom runs on, below where
// thread creation fails (100000 OpenMP threads crash the process).
inline constexpr int kMaxThreads = 1024;

class ThreadPool {
 public:
  // threads >= 1.
  explicit ThreadPool(int threads);
  // Drops tasks that have not started (their futures report broken_promise) and waits for the
  // running ones.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()); }

  template <typename Fn>
  std::future<std::invoke_result_t<Fn>> submit(Fn&& fn) {
    // std::function needs a copyable callable; the task itself is move-only, so it is shared.
    auto task = std::make_shared<std::packaged_task<std::invoke_result_t<Fn>()>>(std::forward<Fn>(fn));
    std::future<std::invoke_result_t<Fn>> result = task->get_future();
    enqueue([task] { (*task)(); });
    return result;
  }

 private:
  void enqueue(std::function<void()> job);
  void work();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace fathom
