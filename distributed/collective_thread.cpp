#include "distributed/collective_thread.h"

#include <exception>
#include <string>

namespace fathom {

struct CollectiveThread::Job {
  std::function<void()> work;
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::string error;  // what the work threw; empty when it succeeded
};

class CollectiveThread::Queued final : public PendingCollective {
 public:
  explicit Queued(std::shared_ptr<Job> job) : job_(std::move(job)) {}
  ~Queued() override {
    if (!waited_) finished();  // dropped unwaited (an error unwinds): the buffer outlives the job
  }
  void wait() override {  // each call reports the job's error again
    const std::string error = finished();
    waited_ = true;
    FATHOM_CHECK(error.empty(), error);
  }

 private:
  // Blocks until the job has run; its error, if any.
  std::string finished() {
    std::unique_lock<std::mutex> lock(job_->mutex);
    job_->finished.wait(lock, [this] { return job_->done; });
    return job_->error;
  }
  std::shared_ptr<Job> job_;
  bool waited_ = false;
};

CollectiveThread::~CollectiveThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<PendingCollective> CollectiveThread::submit(std::function<void()> job) {
  auto queued = std::make_shared<Job>();
  queued->work = std::move(job);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(queued);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  wake_.notify_one();
  return std::make_unique<Queued>(std::move(queued));
}

void CollectiveThread::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    std::string error;
    try {
      job->work();
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "a queued collective failed";
    }
    {
      std::lock_guard<std::mutex> lock(job->mutex);
      job->done = true;
      job->error = std::move(error);
    }
    job->finished.notify_all();
  }
}

}  // namespace fathom
