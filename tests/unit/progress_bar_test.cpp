// `train`'s progress bar (train/metrics/progress_bar.h): its text for a step, a total and a pace,
// the durations of its ETA, the in-place redraw of a live line, and that a bar is never drawn where
// stdout is not a terminal (as in every test and log).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "train/metrics/progress_bar.h"

namespace strata {
namespace {

TEST(ProgressBar, TextShowsTheBarCountsPaceAndTimeLeft) {
  EXPECT_EQ(progress_bar_text(120, 400, 2.1),
            "[######..............] 120/400 steps 30% | 2.1 s/step | ETA 9m48s");
  EXPECT_EQ(progress_bar_text(0, 400, 0), "[....................] 0/400 steps 0%");
  EXPECT_EQ(progress_bar_text(400, 400, 0.0452),
            "[####################] 400/400 steps 100% | 45.2 ms/step | ETA 0s");
  EXPECT_EQ(progress_bar_text(1, 3, 125.0),
            "[######..............] 1/3 steps 33% | 125 s/step | ETA 4m10s");
  // The last cell and 100% only once every step is done.
  EXPECT_EQ(progress_bar_text(399, 400, 12.345),
            "[###################.] 399/400 steps 99% | 12.3 s/step | ETA 12s");
  EXPECT_EQ(progress_bar_text(5, 1000000, 3.6),
            "[....................] 5/1000000 steps 0% | 3.6 s/step | ETA 999h59m");
}

TEST(ProgressBar, DurationsKeepTheTwoLargestUnits) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(44.6), "45s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(588), "9m48s");
  EXPECT_EQ(format_duration(3600), "1h00m");
  EXPECT_EQ(format_duration(11250), "3h07m");
  EXPECT_EQ(format_duration(-3), "0s");
}

TEST(LiveLine, RedrawsInPlaceErasesAndFinishesBelow) {
  std::FILE* stream = std::tmpfile();
  ASSERT_NE(stream, nullptr);
  LiveLine line(stream);
  line.erase();  // nothing drawn: nothing to erase
  line.draw("one");
  line.draw("two");
  line.erase();
  line.erase();
  line.draw("three");
  line.finish();
  line.finish();
  std::rewind(stream);
  std::string written;
  for (int c; (c = std::fgetc(stream)) != EOF;) written += static_cast<char>(c);
  std::fclose(stream);
  EXPECT_EQ(written, "\rone\x1b[K\rtwo\x1b[K\r\x1b[K\rthree\x1b[K\n");
}

TEST(ProgressBar, DrawsNothingWhenStdoutIsNotATerminal) {
  ::testing::internal::CaptureStdout();  // stdout is then a file, as when piped to a log
  {
    ProgressBar bar(true, 0, 10);
    bar.draw(0);
    bar.draw(5);
    bar.erase();
  }
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
}

}  // namespace
}  // namespace strata
