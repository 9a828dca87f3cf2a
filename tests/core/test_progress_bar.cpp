// The data prep progress line: amounts, bar, rate and ETA; in-log mode prints at every tenth.
#include <gtest/gtest.h>

#include <sstream>

#include "core/progress_bar.h"

using namespace fathom;

TEST(ProgressBar, FormatShowsAmountsBarRateAndEta) {
  // 12.4 of 24.8 MB after 2 s: 6.2 MB/s, 12.4 MB left -> 2 s.
  const std::string line = format_byte_progress("tokenizing", 12'400'000, 24'800'000, 2.0);
  EXPECT_EQ(line, "tokenizing  12.4/24.8 MB [##########..........]  50%  6.2 MB/s  ETA 0:00:02");
  const std::string slow = format_byte_progress("x", 1'000'000, 7'201'000'000, 1.0);
  EXPECT_NE(slow.find("ETA 2:00:00"), std::string::npos) << slow;
}

TEST(ProgressBar, FormatWithoutElapsedTimeOrWorkShowsDashes) {
  EXPECT_EQ(format_byte_progress("p", 0, 1000, 0.0), "p  0.0/0.0 MB [....................]   0%  - MB/s  ETA -");
  const std::string empty_job = format_byte_progress("p", 0, 0, 1.0);
  EXPECT_NE(empty_job.find("100%"), std::string::npos) << empty_job;
}

TEST(ProgressBar, LogModePrintsATenthAtATimeThenTheFinalLine) {
  std::ostringstream out;
  ProgressBar bar(out, "job", 1000, false);
  for (int i = 0; i < 100; ++i) bar.advance(10);
  bar.finish();
  const std::string text = out.str();
  int lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 10);  // 10%, ..., 90%, then finish at 100%
  EXPECT_NE(text.find(" 10%"), std::string::npos) << text;
  EXPECT_NE(text.rfind("100%"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(ProgressBar, TerminalModeRedrawsInPlace) {
  std::ostringstream out;
  ProgressBar bar(out, "job", 100, true);
  bar.advance(100);
  bar.finish();
  const std::string text = out.str();
  EXPECT_EQ(text.front(), '\r');
  EXPECT_EQ(text.back(), '\n');
  EXPECT_NE(text.find("100%"), std::string::npos) << text;
}
