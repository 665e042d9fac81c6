#pragma once
// Progress of long work (training steps, forward passes), shared by every command. No LibTorch.
//   - On a terminal: one status line redrawn with '\r' (at most ~10 times a second, and at every
//     log_every-th unit and the last):
//       [=========>          ]  450/1000  45%  ETA 1m12s  <detail>
//   - Otherwise (plain_lines): a line every log_every units, every log_seconds seconds when set,
//     and at the last one; nothing when plain_lines is false.
//   - quiet: nothing (timing and rates are still measured).
// Notes are printed as their own lines in both modes. Timing starts at the first update: that
// unit's time is not measured, so the ETA and the rate ignore start-up work.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

namespace attnkit {

struct ProgressOptions {
  int64_t total = 0;        // units of work; settable later (set_total)
  std::string unit;         // what a unit is ("forward passes"), the default detail
  int64_t log_every = 10;   // plain lines and forced redraws; <= 0 means only the last unit
  bool plain_lines = true;  // off a terminal: plain lines (false: print nothing)
  // Off a terminal, with plain_lines: also a line once this many seconds have passed since the
  // previous line (or the first update); 0 = off. For work whose units are many and short.
  double log_seconds = 0;
  bool quiet = false;
  std::optional<bool> terminal;  // default: isatty(out)
};

// What a detail callback is asked for: the text after the bar, or the whole plain line.
enum class ProgressStyle { Bar, Line };
using ProgressDetail = std::function<std::string(ProgressStyle)>;

class ProgressReporter {
 public:
  explicit ProgressReporter(const ProgressOptions& options, std::FILE* out = stderr);
  ~ProgressReporter();  // finishes the status line
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // `done` units are done (1-based); `count` items (tokens, ...) were processed by this unit and
  // feed rate(). `detail`, called only when something is printed, gives the text after the bar
  // and the plain line; without it the bar shows the unit and the line "done/total unit, ETA".
  void update(int64_t done, int64_t count = 0, const ProgressDetail& detail = nullptr);
  void tick() { update(done_ + 1); }  // one more unit
  void note(const std::string& line);
  void finish();
  void set_total(int64_t total) { options_.total = total; }

  int64_t total() const { return options_.total; }
  int64_t done() const { return done_; }
  bool terminal() const { return terminal_; }
  // Items per second and seconds to the end, measured from the first update() to the last one.
  double rate() const;
  double eta_seconds(int64_t done) const;  // -1 when not yet known

 private:
  void write_bar(const std::string& detail);

  ProgressOptions options_;
  std::FILE* out_;
  bool terminal_;
  bool bar_open_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::chrono::steady_clock::time_point last_line_;  // the latest plain line (or the first update)
  int64_t first_done_ = -1;  // units done before the first update()
  int64_t done_ = 0;
  int64_t count_ = 0;
  double elapsed_ = 0;
};

// "45s", "12m05s", "3h02m"; "?" for a negative or non-finite time.
std::string format_duration(double seconds);
// "950", "12.3k", "1.5M".
std::string format_rate(double per_second);

}  // namespace attnkit
