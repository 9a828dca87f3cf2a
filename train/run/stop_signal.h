// SIGINT/SIGTERM ask a run to stop: the trainer finishes its step, writes a checkpoint and exits 0.
// A request that arrives during start-up stops the run after its first step; a second request
// changes nothing (the handler only sets a flag, so no save is ever cut short).
#pragma once

#include <csignal>

namespace fathom {

// While alive, SIGINT and SIGTERM set the stop request instead of ending the process (and are
// unblocked in this thread). The handlers
// that were there before come back when it ends, so a program (or test binary) that ran a training
// job is not left ignoring them.
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  struct sigaction previous_int_ = {}, previous_term_ = {};
  sigset_t previous_mask_ = {};
};

bool stop_requested();
void clear_stop_request();  // tests
void request_stop();        // tests, and the signal handler

}  // namespace fathom
