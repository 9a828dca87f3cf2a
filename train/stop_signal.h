// SIGINT/SIGTERM ask a run to stop: the trainer finishes its step, writes a checkpoint and exits 0.
#pragma once

namespace fathom {

void install_stop_handlers();
bool stop_requested();
void clear_stop_request();  // tests
void request_stop();        // tests, and the signal handler

}  // namespace fathom
