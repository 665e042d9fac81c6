#include "attnkit/train/progress.h"

#include "attnkit/error.h"
#include "attnkit/io/atomic_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace attnkit::train {

void report_step(ProgressReporter& progress, const StepProgress& p) {
  const bool budgeted = p.cpu_budget > 0;
  progress.update(p.step, p.tokens, [&](ProgressStyle style) {
    const std::string cpu =
        budgeted ? fmt::format("cpu {} of {}", format_duration(p.cpu_seconds), format_duration(p.cpu_budget)) : "";
    if (style == ProgressStyle::Bar)
      return fmt::format("loss {:.4f}  lr {:.2e}  {} tok/s{}{}", p.loss, p.learning_rate,
                         format_rate(progress.rate()), budgeted ? "  " : "", cpu);
    if (budgeted)
      return fmt::format("step {} loss {:.4f} lr {:.2e} grad_norm {:.4f} tok/s {:.0f} {}", p.step, p.loss,
                         p.learning_rate, p.grad_norm, progress.rate(), cpu);
    return fmt::format("step {}/{} loss {:.4f} lr {:.2e} grad_norm {:.4f} tok/s {:.0f} eta {}", p.step,
                       progress.total(), p.loss, p.learning_rate, p.grad_norm, progress.rate(),
                       format_duration(progress.eta_seconds(p.step)));
  });
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
