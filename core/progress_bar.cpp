#include "core/progress_bar.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

namespace fathom {

namespace {

std::string clock_text(double seconds) {
  const long long s = (long long)std::llround(seconds);
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return text;
}

}  // namespace

std::string format_byte_progress(std::string_view label, uint64_t done, uint64_t total, double seconds) {
  constexpr int kWidth = 20;
  const double fraction = total ? std::min(1.0, double(done) / double(total)) : 1.0;
  const int filled = int(fraction * kWidth);
  const std::string bar = std::string(size_t(filled), '#') + std::string(size_t(kWidth - filled), '.');
  const bool have_rate = seconds > 0 && done > 0;
  const double rate = have_rate ? double(done) / seconds : 0;  // bytes per second
  char rate_text[32] = "-";
  if (have_rate) std::snprintf(rate_text, sizeof rate_text, "%.1f", rate / 1e6);
  const std::string eta = have_rate ? clock_text(double(total > done ? total - done : 0) / rate) : "-";
  char text[256];
  std::snprintf(text, sizeof text, "%.*s  %.1f/%.1f MB [%s] %3d%%  %s MB/s  ETA %s", int(label.size()), label.data(),
                double(done) / 1e6, double(total) / 1e6, bar.c_str(), int(fraction * 100), rate_text, eta.c_str());
  return text;
}

ProgressBar::ProgressBar(std::ostream& out, std::string label, uint64_t total_bytes, bool redraw_in_place)
    : out_(out),
      label_(std::move(label)),
      total_(total_bytes),
      in_place_(redraw_in_place),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

double ProgressBar::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::advance(uint64_t bytes) {
  done_ += bytes;
  if (in_place_) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100)) return;  // at most ten redraws a second
    last_draw_ = now;
    draw(false);
  } else {
    const int tenths = total_ ? int(std::min<uint64_t>(10, done_ * 10 / total_)) : 10;
    if (tenths > tenths_shown_ && tenths < 10) {  // the last tenth is finish()'s line
      tenths_shown_ = tenths;
      draw(false);
    }
  }
}

void ProgressBar::finish() { draw(true); }

void ProgressBar::draw(bool final_line) {
  const std::string line = format_byte_progress(label_, done_, total_, seconds());
  if (in_place_)
    out_ << '\r' << line << "\x1b[K" << (final_line ? "\n" : "") << std::flush;  // ESC[K clears a longer old line
  else
    out_ << line << '\n' << std::flush;
}

}  // namespace fathom
