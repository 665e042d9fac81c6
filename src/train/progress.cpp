#include "attnkit/train/progress.h"

#include "attnkit/error.h"
#include "attnkit/io/atomic_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace attnkit::train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  if (total < 60) return fmt::format("{}s", total);
  if (total < 3600) return fmt::format("{}m{:02d}s", total / 60, total % 60);
  return fmt::format("{}h{:02d}m", total / 3600, (total % 3600) / 60);
}

namespace {

std::string format_rate(double per_second) {
  if (per_second >= 1e6) return fmt::format("{:.1f}M", per_second / 1e6);
  if (per_second >= 1e3) return fmt::format("{:.1f}k", per_second / 1e3);
  return fmt::format("{:.0f}", per_second);
}

}  // namespace

ProgressReporter::ProgressReporter(const ProgressOptions& options, std::FILE* out)
    : options_(options), out_(out) {
  terminal_ = options.terminal.value_or(::isatty(::fileno(out)) != 0);
}

ProgressReporter::~ProgressReporter() { finish(); }

double ProgressReporter::tokens_per_second() const { return elapsed_ > 0 ? tokens_ / elapsed_ : 0.0; }

double ProgressReporter::eta_seconds(int64_t step) const {
  const int64_t done = step - first_step_;
  if (done <= 0 || elapsed_ <= 0) return -1;
  return elapsed_ / static_cast<double>(done) * static_cast<double>(options_.total_steps - step);
}

void ProgressReporter::step(const StepProgress& progress) {
  const auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) {
    first_step_ = progress.step - 1;
    start_ = now;
    // The first step's time is not measured (it starts the clock); its tokens are not counted.
  } else {
    tokens_ += progress.tokens;
  }
  elapsed_ = std::chrono::duration<double>(now - start_).count();
  if (options_.quiet) return;
  const bool last = progress.step >= options_.total_steps;
  const bool every = options_.log_every > 0 && progress.step % options_.log_every == 0;
  if (terminal_) {
    if (last || every || now - last_draw_ >= std::chrono::milliseconds(100)) {
      last_draw_ = now;
      write_bar(progress);
    }
    return;
  }
  if (last || every) {
    std::fprintf(out_, "step %lld/%lld loss %.4f lr %.2e grad_norm %.4f tok/s %.0f eta %s\n",
                 static_cast<long long>(progress.step), static_cast<long long>(options_.total_steps),
                 progress.loss, progress.learning_rate, progress.grad_norm, tokens_per_second(),
                 format_duration(eta_seconds(progress.step)).c_str());
    std::fflush(out_);
  }
}

void ProgressReporter::write_bar(const StepProgress& progress) {
  constexpr int kWidth = 20;
  const double fraction =
      options_.total_steps > 0 ? std::min(1.0, static_cast<double>(progress.step) / options_.total_steps) : 1.0;
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  const std::string line = fmt::format(
      "[{}] {:>{}}/{} {:3.0f}%  ETA {}  loss {:.4f}  lr {:.2e}  {} tok/s", bar, progress.step,
      std::to_string(options_.total_steps).size(), options_.total_steps, 100 * fraction,
      format_duration(eta_seconds(progress.step)), progress.loss, progress.learning_rate,
      format_rate(tokens_per_second()));
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

MetricsLog::MetricsLog(const std::string& path, std::optional<int64_t> keep_through_step) : path_(path) {
  std::string kept;
  if (keep_through_step) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!json.is_object() || !json.contains("step") || !json["step"].is_number_integer()) continue;
      if (json["step"].get<int64_t>() > *keep_through_step) continue;
      kept += line;
      kept += '\n';
    }
  }
  io::write_file_atomically(path, kept);
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) throw Error(fmt::format("{}: cannot open for appending: {}", path, std::strerror(errno)));
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsLog::append(const std::string& json_object) {
  std::fputs(json_object.c_str(), file_);
  std::fputc('\n', file_);
  if (std::fflush(file_) != 0) throw Error(fmt::format("{}: cannot write: {}", path_, std::strerror(errno)));
}

}  // namespace attnkit::train
