// The MPI backend's collective thread (distributed/collective_thread.h): jobs run on a thread of
// their own while the caller goes on, one at a time in the order submitted, and a job's error comes
// back from its wait() as fathom::Error.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "distributed/collective_thread.h"

using namespace fathom;

TEST(CollectiveThread, AJobRunsWhileTheCallerGoesOn) {
  CollectiveThread thread;
  std::promise<void> caller_went_on;
  std::future<void> signal = caller_went_on.get_future();
  bool saw_caller = false;
  // The job waits for what the caller does after submit: run in submit, it would time out.
  auto pending =
      thread.submit([&] { saw_caller = signal.wait_for(std::chrono::seconds(10)) == std::future_status::ready; });
  caller_went_on.set_value();
  pending->wait();
  EXPECT_TRUE(saw_caller);
}

TEST(CollectiveThread, JobsRunInTheOrderSubmittedAndWaitMeansDone) {
  CollectiveThread thread;
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::unique_ptr<PendingCollective>> pending;
  for (int i = 0; i < 8; ++i)
    pending.push_back(thread.submit([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(i % 2 ? 0 : 3));
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back(i);
    }));
  pending[3]->wait();
  {
    std::lock_guard<std::mutex> lock(mutex);
    ASSERT_GE(order.size(), 4u);
  }
  for (auto& p : pending) p->wait();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(CollectiveThread, AJobsErrorComesBackFromItsWait) {
  CollectiveThread thread;
  auto failing = thread.submit([] { FATHOM_FAIL("MPI all_reduce_sum failed: peer gone"); });
  bool later_ran = false;
  auto later = thread.submit([&] { later_ran = true; });
  try {
    failing->wait();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("peer gone"), std::string::npos) << e.what();
  }
  later->wait();
  EXPECT_TRUE(later_ran);                // the thread goes on with the queue
  EXPECT_THROW(failing->wait(), Error);  // and the failed job stays failed
}
