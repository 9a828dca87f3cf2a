#include "train/run/stop_signal.h"

#include <atomic>
#include <csignal>

namespace fathom {

namespace {
std::atomic<bool> stop_flag{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_stop_signal(int) { stop_flag.store(true); }
}  // namespace

StopSignalScope::StopSignalScope() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
  // A parent may have started us with them blocked; blocked, a stop request would never arrive
  // (and one already pending arrives now).
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &stop, &previous_mask_);
}

StopSignalScope::~StopSignalScope() {
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

bool stop_requested() { return stop_flag.load(); }
void clear_stop_request() { stop_flag.store(false); }
void request_stop() { stop_flag.store(true); }

}  // namespace fathom
