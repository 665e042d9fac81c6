#include "attnkit/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace attnkit {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  if (total < 60) return fmt::format("{}s", total);
  if (total < 3600) return fmt::format("{}m{:02d}s", total / 60, total % 60);
  return fmt::format("{}h{:02d}m", total / 3600, (total % 3600) / 60);
}

std::string format_rate(double per_second) {
  if (per_second >= 1e6) return fmt::format("{:.1f}M", per_second / 1e6);
  if (per_second >= 1e3) return fmt::format("{:.1f}k", per_second / 1e3);
  return fmt::format("{:.0f}", per_second);
}

ProgressReporter::ProgressReporter(const ProgressOptions& options, std::FILE* out)
    : options_(options), out_(out) {
  terminal_ = options.terminal.value_or(::isatty(::fileno(out)) != 0);
}

ProgressReporter::~ProgressReporter() { finish(); }

double ProgressReporter::rate() const { return elapsed_ > 0 ? count_ / elapsed_ : 0.0; }

double ProgressReporter::eta_seconds(int64_t done) const {
  const int64_t measured = done - first_done_;
  if (measured <= 0 || elapsed_ <= 0) return -1;
  return elapsed_ / static_cast<double>(measured) * static_cast<double>(options_.total - done);
}

void ProgressReporter::update(int64_t done, int64_t count, const ProgressDetail& detail) {
  const auto now = std::chrono::steady_clock::now();
  done_ = done;
  if (first_done_ < 0) {
    first_done_ = done - 1;
    start_ = now;  // the first unit starts the clock; its items are not counted
    last_line_ = now;
  } else {
    count_ += count;
  }
  elapsed_ = std::chrono::duration<double>(now - start_).count();
  if (options_.quiet) return;
  const bool last = done >= options_.total;
  const bool every = options_.log_every > 0 && done % options_.log_every == 0;
  if (terminal_) {
    if (last || every || now - last_draw_ >= std::chrono::milliseconds(100)) {
      last_draw_ = now;
      write_bar(detail ? detail(ProgressStyle::Bar) : options_.unit);
    }
    return;
  }
  const bool due = options_.log_seconds > 0 &&
                   std::chrono::duration<double>(now - last_line_).count() >= options_.log_seconds;
  if (options_.plain_lines && (last || every || due)) {
    last_line_ = now;
    const std::string line =
        detail ? detail(ProgressStyle::Line)
               : fmt::format("{}/{} {}, ETA {}", done, options_.total, options_.unit,
                             format_duration(eta_seconds(done)));
    std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);
  }
}

void ProgressReporter::write_bar(const std::string& detail) {
  constexpr int kWidth = 20;
  const double fraction =
      options_.total > 0 ? std::min(1.0, static_cast<double>(done_) / options_.total) : 1.0;
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  std::string line = fmt::format("[{}] {:>{}}/{} {:3.0f}%  ETA {}", bar, done_,
                                 std::to_string(options_.total).size(), options_.total,
                                 100 * fraction, format_duration(eta_seconds(done_)));
  if (!detail.empty()) line += "  " + detail;
  // \033[K clears what a longer previous line left on the right.
  std::fprintf(out_, "\r%s\033[K", line.c_str());
  std::fflush(out_);
  bar_open_ = true;
}

void ProgressReporter::note(const std::string& line) {
  if (options_.quiet) return;
  if (bar_open_) std::fputs("\r\033[K", out_);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  bar_open_ = false;
}

void ProgressReporter::finish() {
  if (bar_open_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    bar_open_ = false;
  }
}

}  // namespace attnkit
