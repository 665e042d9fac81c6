// The shared progress reporter (include/attnkit/progress.h): bar and plain lines in a captured
// stream, what quiet and plain_lines = false suppress, details, notes, timing helpers.
#include "attnkit/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using attnkit::ProgressOptions;
using attnkit::ProgressReporter;
using attnkit::ProgressStyle;

// What a reporter writes while `work` runs on it (the reporter is destroyed before reading).
std::string captured(const ProgressOptions& options, const std::function<void(ProgressReporter&)>& work) {
  std::FILE* out = std::tmpfile();
  EXPECT_NE(out, nullptr);
  {
    ProgressReporter progress(options, out);
    work(progress);
  }
  std::rewind(out);
  std::string text;
  for (int ch; (ch = std::fgetc(out)) != EOF;) text += static_cast<char>(ch);
  std::fclose(out);
  return text;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

ProgressOptions options(int64_t total, bool terminal) {
  ProgressOptions o;
  o.total = total;
  o.unit = "forward passes";
  o.log_every = 2;
  o.terminal = terminal;
  return o;
}

// log_seconds adds a line once that much time has passed since the previous one: none before it
// (an hour), one per unit when every unit takes longer (2 ms units, 1 ms).
TEST(Progress, PlainLinesEveryLogSeconds) {
  ProgressOptions o = options(4, false);
  o.log_every = 0;
  o.log_seconds = 3600;
  EXPECT_EQ(lines_of(captured(o, [](ProgressReporter& p) {
              for (int i = 0; i < 4; ++i) p.tick();
            })).size(),
            1u);  // the last unit's line only
  o.log_seconds = 0.001;
  const auto lines = lines_of(captured(o, [](ProgressReporter& p) {
    for (int i = 0; i < 4; ++i) {
      p.tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }));
  ASSERT_EQ(lines.size(), 3u);  // units 2, 3, 4 (the first update starts the clock)
  EXPECT_EQ(lines[0].rfind("2/4 forward passes", 0), 0u) << lines[0];
  EXPECT_EQ(lines[2].rfind("4/4 forward passes", 0), 0u) << lines[2];
}

TEST(Progress, PlainLinesEveryLogEveryUnitsAndAtTheLast) {
  const auto lines = lines_of(captured(options(5, false), [](ProgressReporter& p) {
    for (int i = 0; i < 5; ++i) p.tick();
  }));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("2/5 forward passes, ETA ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("4/5 forward passes, ETA ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("5/5 forward passes, ETA ", 0), 0u) << lines[2];
}

TEST(Progress, QuietAndBarOnlyPrintNothingButStillCount) {
  ProgressOptions quiet = options(3, true);
  quiet.quiet = true;
  int64_t done = 0;
  EXPECT_EQ(captured(quiet, [&](ProgressReporter& p) {
              for (int i = 0; i < 3; ++i) p.tick();
              p.note("a note");
              done = p.done();
            }),
            "");
  EXPECT_EQ(done, 3);
  ProgressOptions bar_only = options(3, false);
  bar_only.plain_lines = false;
  EXPECT_EQ(captured(bar_only, [](ProgressReporter& p) { p.tick(); p.tick(); p.tick(); }), "");
}

TEST(Progress, TerminalBarIsRedrawnInPlaceAndFinished) {
  ProgressOptions o = options(0, true);
  o.log_every = 1;
  const std::string text = captured(o, [](ProgressReporter& p) {
    p.set_total(4);  // known once the work is planned
    for (int i = 0; i < 4; ++i) p.tick();
  });
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 4);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);  // finish() ends the line
  EXPECT_NE(text.find("[==========>         ] 2/4  50%  ETA "), std::string::npos) << text;
  EXPECT_NE(text.find("[====================] 4/4 100%  ETA "), std::string::npos) << text;
  EXPECT_NE(text.find("  forward passes\033[K"), std::string::npos) << text;
}

TEST(Progress, DetailGivesTheBarTextAndTheWholePlainLine) {
  const auto detail = [](ProgressStyle style) {
    return std::string(style == ProgressStyle::Bar ? "bar detail" : "whole line");
  };
  const std::string bar = captured(options(2, true), [&](ProgressReporter& p) { p.update(2, 0, detail); });
  EXPECT_NE(bar.find("2/2 100%  ETA ?  bar detail"), std::string::npos) << bar;
  const std::string plain = captured(options(2, false), [&](ProgressReporter& p) {
    p.update(1, 0, detail);  // not due: no line, no call
    p.update(2, 0, detail);
  });
  EXPECT_EQ(plain, "whole line\n");
}

TEST(Progress, NoteClearsTheBarLine) {
  const std::string text = captured(options(4, true), [](ProgressReporter& p) {
    p.tick();
    p.note("eval: accuracy 0.5");
  });
  EXPECT_NE(text.find("\r\033[Keval: accuracy 0.5\n"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');  // the note closed the bar; finish() adds nothing
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
}

TEST(Progress, RateAndEtaStartAtTheFirstUpdate) {
  std::FILE* out = std::tmpfile();
  ProgressOptions o = options(10, false);
  o.plain_lines = false;
  ProgressReporter p(o, out);
  EXPECT_EQ(p.eta_seconds(0), -1);  // nothing measured yet
  EXPECT_EQ(p.rate(), 0);
  p.update(1, 1000);  // starts the clock; its count is not measured
  EXPECT_EQ(p.eta_seconds(1), -1);
  EXPECT_EQ(p.rate(), 0);
  std::fclose(out);
}

TEST(Progress, Formats) {
  EXPECT_EQ(attnkit::format_duration(45), "45s");
  EXPECT_EQ(attnkit::format_duration(725), "12m05s");
  EXPECT_EQ(attnkit::format_duration(3 * 3600 + 125), "3h02m");
  EXPECT_EQ(attnkit::format_duration(-1), "?");
  EXPECT_EQ(attnkit::format_rate(950), "950");
  EXPECT_EQ(attnkit::format_rate(12345), "12.3k");
  EXPECT_EQ(attnkit::format_rate(1.5e6), "1.5M");
}

}  // namespace
