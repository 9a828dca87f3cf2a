// A thread of its own for host collectives that run while the caller computes (the MPI backend's
// overlapped gradient all-reduce): jobs run one at a time in the order submitted, and each submit
// returns a PendingCollective that wait()s for its job. The caller makes no MPI call of its own
// until it has waited for every job (MPI_THREAD_SERIALIZED: one thread in MPI at a time), so the
// collectives are the same blocking calls, in the same order on every rank, as without the thread.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "distributed/communicator.h"

namespace fathom {

class CollectiveThread {
 public:
  CollectiveThread() = default;
  // Runs what is queued, then ends the thread.
  ~CollectiveThread();
  CollectiveThread(const CollectiveThread&) = delete;
  CollectiveThread& operator=(const CollectiveThread&) = delete;

  // Queues `job` (started on first use). A job that throws makes its wait() throw fathom::Error with
  // the same message.
  std::unique_ptr<PendingCollective> submit(std::function<void()> job);

 private:
  struct Job;
  class Queued;
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fathom
