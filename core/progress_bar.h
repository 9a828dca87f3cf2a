// A progress display for long byte-oriented jobs (data prep): bytes done of the total, a bar,
// throughput and the estimated time left. On a terminal the line is redrawn in place; into a log
// file it prints a line at every tenth of the work instead, so logs stay short.
#pragma once
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace fathom {

// "label  12.3/24.0 MB [#####.....]  51%  85.2 MB/s  ETA 0:00:01" (1 MB = 10^6 bytes).
// The rate is done / seconds; before any time has passed, or with nothing done, rate and ETA show "-".
std::string format_byte_progress(std::string_view label, uint64_t done, uint64_t total, double seconds);

class ProgressBar {
 public:
  ProgressBar(std::ostream& out, std::string label, uint64_t total_bytes, bool redraw_in_place);
  void advance(uint64_t bytes);
  // The final line (always printed), ending with a line break.
  void finish();
  double seconds() const;

 private:
  void draw(bool final_line);

  std::ostream& out_;
  std::string label_;
  uint64_t total_ = 0, done_ = 0;
  bool in_place_ = false;
  int tenths_shown_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace fathom
