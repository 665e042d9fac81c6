#include "attnkit/train/trainer.h"

#include "attnkit/error.h"
#include "attnkit/train/checkpoint.h"
#include "attnkit/train/distributed.h"
#include "attnkit/train/ema.h"
#include "attnkit/train/progress.h"

#include <torch/torch.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <unordered_set>

namespace fs = std::filesystem;

namespace attnkit::train {

void TrainerOptions::validate() const {
  auto check = [](bool ok, const std::string& message) {
    if (!ok) throw Error("trainer options: " + message);
  };
  check(steps >= 0, fmt::format("steps must be >= 0, got {}", steps));
  check(accumulation >= 1, fmt::format("accumulation must be >= 1, got {}", accumulation));
  check(clip_norm >= 0, fmt::format("clip_norm must be >= 0 (0 = off), got {}", clip_norm));
  check(ema_decay == 0 || (ema_decay > 0 && ema_decay < 1),
        fmt::format("ema_decay must be 0 (off) or in (0, 1), got {}", ema_decay));
  check(eval_every >= 0, fmt::format("eval_every must be >= 0, got {}", eval_every));
  check(checkpoint_every >= 0, fmt::format("checkpoint_every must be >= 0, got {}", checkpoint_every));
  check(std::isfinite(cpu_budget) && cpu_budget >= 0,
        fmt::format("cpu_budget must be >= 0 seconds (0 = none), got {}", cpu_budget));
  optimizer.validate();
}

namespace {

// User + system CPU time of this process (all threads), in seconds.
double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::string rng_name(int rank) { return rank == 0 ? "rng.cpu" : fmt::format("rng.cpu.{}", rank); }

at::Tensor cpu_rng_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// "NaN", "inf" or "-inf" (fmt would print "-nan" for some NaNs).
std::string non_finite_name(double value) {
  if (std::isnan(value)) return "NaN";
  return value > 0 ? "inf" : "-inf";
}

std::string one_line(std::string text) {
  auto newline = text.find('\n');
  if (newline != std::string::npos) text.resize(newline);
  return text;
}

// The global L2 norm of the gradients, computed as torch.nn.utils.clip_grad_norm_ does; when
// clip_norm > 0 and the norm is finite, gradients are scaled by min(1, clip_norm / (norm + 1e-6)).
double clip_gradients(const std::vector<at::Tensor>& parameters, double clip_norm) {
  std::vector<at::Tensor> gradients, norms;
  for (const at::Tensor& parameter : parameters) {
    if (parameter.grad().defined()) {
      gradients.push_back(parameter.grad().detach());
      norms.push_back(at::linalg_vector_norm(gradients.back(), 2));
    }
  }
  if (norms.empty()) return 0.0;
  at::Tensor total = at::linalg_vector_norm(at::stack(norms), 2);
  const double norm = total.item<double>();
  if (clip_norm > 0 && std::isfinite(norm)) {
    at::Tensor coefficient = at::clamp_max(clip_norm / (total + 1e-6), 1.0);
    if (coefficient.item<double>() < 1.0) {
      for (at::Tensor& gradient : gradients) gradient.mul_(coefficient);
    }
  }
  return norm;
}

}  // namespace

struct Trainer::State {
  TrainingTask& task;
  TrainerOptions options;
  DataParallel* data_parallel;
  std::vector<at::Tensor> parameters;  // trainable, each once
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<ExponentialMovingAverage> ema;
  int64_t step = 0;
  std::optional<double> best_metric;
  int64_t best_step = -1;
  double cpu_seconds = 0;  // of the training steps, resumes included
  bool resumed = false;
  std::function<void(const StepRecord&)> callback;

  State(TrainingTask& t, TrainerOptions o, DataParallel* dp)
      : task(t), options(std::move(o)), data_parallel(dp) {}

  int rank() const { return data_parallel ? data_parallel->rank() : 0; }
  int world() const { return data_parallel ? data_parallel->world_size() : 1; }
  bool writer() const { return rank() == 0; }
  fs::path checkpoints_directory() const { return fs::path(options.run_directory) / "checkpoints"; }
  std::string last_checkpoint_note() const {
    auto checkpoints = list_checkpoints(checkpoints_directory().string());
    return checkpoints.empty() ? "no checkpoint was written"
                               : "the last good checkpoint is " + checkpoints.back().path;
  }

  bool improves(double value) const {
    if (!best_metric) return true;
    return task.higher_is_better() ? value > *best_metric : value < *best_metric;
  }

  std::map<std::string, double> evaluate() {
    torch::nn::Module& module = task.module();
    const bool was_training = module.is_training();
    EmaSwap swap(ema.get());
    module.eval();
    std::map<std::string, double> metrics;
    {
      torch::NoGradGuard no_grad;
      metrics = task.evaluate();
    }
    module.train(was_training);
    return metrics;
  }

  // Where a non-finite loss or gradient norm came from: the first parameter (or, with `gradients`,
  // the first gradient) holding NaN or inf, named with the element; else the step's micro-batches.
  std::string non_finite_location(int64_t step, bool gradients) {
    for (const auto& item : task.module().named_parameters()) {
      const at::Tensor tensor = gradients ? item.value().grad() : item.value().detach();
      if (!tensor.defined()) continue;
      const at::Tensor bad = at::logical_not(at::isfinite(tensor)).reshape({-1});
      if (!bad.any().item<bool>()) continue;
      const int64_t element = bad.nonzero()[0][0].item<int64_t>();
      const double value = tensor.reshape({-1})[element].item<double>();
      return fmt::format(" ({} '{}' holds {} at flat element {} of shape [{}])",
                         gradients ? "the gradient of parameter" : "parameter", item.key(),
                         non_finite_name(value), element, fmt::join(tensor.sizes(), ", "));
    }
    const int64_t first = (step - 1) * options.accumulation;
    return fmt::format(" (every parameter{} is finite: the input of micro-batch {}..{} on rank {} gave it)",
                       gradients ? " and the loss" : "", first, first + options.accumulation - 1, rank());
  }

  [[noreturn]] void stop(int64_t step, const std::string& why) const {
    throw Error(fmt::format("training stopped at step {}: {}; {}", step, why, last_checkpoint_note()));
  }

  // Runs the step's micro-batches (backward of loss / accumulation each); with data parallelism
  // averages gradients and losses over the ranks. Returns the mean loss; adds up `tokens`.
  double accumulate_gradients(int64_t step, int64_t& tokens) {
    const int64_t accumulation = options.accumulation;
    optimizer->zero_grad();
    double loss_sum = 0;
    tokens = 0;
    for (int64_t micro = 0; micro < accumulation; ++micro) {
      MicroBatchLoss batch = task.train_loss((step - 1) * accumulation + micro, rank(), world());
      if (!batch.loss.defined() || batch.loss.numel() != 1) {
        throw Error(fmt::format("step {}: the task's train_loss must return a scalar loss", step));
      }
      loss_sum += batch.loss.item<double>();
      tokens += batch.tokens;
      (accumulation == 1 ? batch.loss : batch.loss / static_cast<double>(accumulation)).backward();
    }
    double loss = loss_sum / static_cast<double>(accumulation);
    if (data_parallel) {
      data_parallel->average_gradients(parameters);
      std::vector<double> sums = data_parallel->sum({loss, static_cast<double>(tokens)});
      loss = sums[0] / world();
      tokens = static_cast<int64_t>(std::llround(sums[1]));
    }
    return loss;
  }

  // Updates the best primary metric; true when this evaluation improved it.
  bool track_best(int64_t step, const std::map<std::string, double>& metrics) {
    auto primary = metrics.find(task.primary_metric());
    if (primary == metrics.end()) {
      throw Error(fmt::format("step {}: the task's evaluate() has no primary metric '{}'", step,
                              task.primary_metric()));
    }
    if (!std::isfinite(primary->second) || !improves(primary->second)) return false;
    best_metric = primary->second;
    best_step = step;
    return true;
  }

  std::string evaluation_line(int64_t step, const std::map<std::string, double>& metrics) const {
    std::string line = fmt::format("eval step {}:", step);
    for (const auto& [name, value] : metrics) line += fmt::format(" {} {:.4f}", name, value);
    if (best_metric) line += fmt::format(" (best {} {:.4f} at step {})", task.primary_metric(), *best_metric, best_step);
    return line;
  }

  // The step checkpoint (then pruning) and/or "best"; only rank 0 writes.
  void write_checkpoints(int64_t step, bool step_checkpoint, bool best) {
    // Finite gradients can still overflow the weights: never checkpoint those.
    for (const auto& item : task.module().named_parameters()) {
      if (!at::isfinite(item.value()).all().item<bool>()) {
        stop(step, fmt::format("parameter '{}' is not finite after the update", item.key()));
      }
    }
    TrainingCheckpoint checkpoint = snapshot();  // a collective with data parallelism
    if (!writer()) return;
    const fs::path directory = checkpoints_directory();
    // A failed write (a full disk) leaves the earlier checkpoints as they were: say which one a
    // resume would use.
    auto save_or_explain = [&](const fs::path& target) {
      try {
        save_checkpoint(target.string(), checkpoint);
      } catch (const Error& e) {
        const auto kept = list_checkpoints(directory.string());
        throw Error(fmt::format("checkpoint {} not written ({}); {}", target.string(), e.what(),
                                kept.empty() ? std::string("no earlier checkpoint exists")
                                             : fmt::format("the last complete checkpoint {} is kept",
                                                           kept.back().path)));
      }
    };
    if (step_checkpoint) {
      save_or_explain(directory / checkpoint_directory_name(step));
      prune_checkpoints(directory.string(), options.keep_last);
    }
    if (best) save_or_explain(directory / "best");
  }

  TrainingCheckpoint snapshot() {
    TrainingCheckpoint checkpoint;
    checkpoint.step = step;
    checkpoint.accumulation = options.accumulation;
    checkpoint.world_size = world();
    checkpoint.best_metric = best_metric;
    checkpoint.best_step = best_step;
    if (options.cpu_budget > 0) checkpoint.cpu_seconds = cpu_seconds;
    torch::nn::Module& module = task.module();
    for (const auto& item : module.named_parameters()) checkpoint.model.emplace_back(item.key(), item.value().detach());
    for (const auto& item : module.named_buffers()) checkpoint.model.emplace_back(item.key(), item.value());
    if (ema) {
      io::NamedTensors averaged = ema->shadow();
      for (const auto& item : module.named_buffers()) averaged.emplace_back(item.key(), item.value());
      checkpoint.ema = std::move(averaged);
    }
    checkpoint.model_metadata = task.checkpoint_metadata();
    checkpoint.files = task.checkpoint_files();
    checkpoint.optimizer_state = save_optimizer_state(*optimizer);
    checkpoint.cpu_rng_state = cpu_rng_state();
    if (data_parallel) {
      // Every rank's generator (dropout masks differ by rank), gathered on every rank.
      std::vector<at::Tensor> states = data_parallel->all_gather(checkpoint.cpu_rng_state);
      for (size_t r = 1; r < states.size(); ++r) checkpoint.extra_tensors.emplace_back(rng_name(static_cast<int>(r)), states[r]);
    }
    return checkpoint;
  }
};

Trainer::Trainer(TrainingTask& task, TrainerOptions options, DataParallel* data_parallel)
    : state_(std::make_unique<State>(task, std::move(options), data_parallel)) {
  state_->options.validate();
  torch::nn::Module& module = task.module();
  std::unordered_set<const void*> seen;
  for (const at::Tensor& parameter : module.parameters()) {
    if (parameter.requires_grad() && seen.insert(parameter.unsafeGetTensorImpl()).second) {
      state_->parameters.push_back(parameter);
    }
  }
  state_->optimizer = make_optimizer(module, state_->options.optimizer);
  if (state_->options.ema_decay > 0) {
    state_->ema = std::make_unique<ExponentialMovingAverage>(module, state_->options.ema_decay);
  }
}

Trainer::~Trainer() = default;

void Trainer::set_step_callback(std::function<void(const StepRecord&)> callback) {
  state_->callback = std::move(callback);
}

std::map<std::string, double> Trainer::evaluate() { return state_->evaluate(); }
std::optional<metrics::ItemStatistics> Trainer::evaluation_items() const {
  return state_->task.evaluation_items();
}
int64_t Trainer::step() const { return state_->step; }
torch::optim::Optimizer& Trainer::optimizer() { return *state_->optimizer; }
ExponentialMovingAverage* Trainer::ema() { return state_->ema.get(); }
const TrainerOptions& Trainer::options() const { return state_->options; }

int64_t Trainer::resume(const std::string& run_directory) {
  State& s = *state_;
  s.options.run_directory = run_directory;
  const std::string checkpoints_directory = s.checkpoints_directory().string();
  if (s.writer()) remove_incomplete_checkpoints(checkpoints_directory);
  auto checkpoints = list_checkpoints(checkpoints_directory);
  if (checkpoints.empty()) {
    throw Error(fmt::format("{}: no complete checkpoint to resume from", checkpoints_directory));
  }
  const std::string& path = checkpoints.back().path;
  TrainingCheckpoint checkpoint = load_checkpoint(path);
  if (checkpoint.accumulation != s.options.accumulation) {
    throw Error(fmt::format("{}: trained with accumulation {}, cannot resume with {}", path,
                            checkpoint.accumulation, s.options.accumulation));
  }
  if (checkpoint.world_size != s.world()) {
    throw Error(fmt::format("{}: trained with {} process(es), cannot resume with {}", path,
                            checkpoint.world_size, s.world()));
  }
  restore_weights(checkpoint, path);
  load_optimizer_state(*s.optimizer, checkpoint.optimizer_state, path + "/optimizer.pt");
  std::map<std::string, at::Tensor> extra(checkpoint.extra_tensors.begin(), checkpoint.extra_tensors.end());
  at::Tensor rng = checkpoint.cpu_rng_state;
  if (s.rank() != 0) {
    auto found = extra.find(rng_name(s.rank()));
    if (found == extra.end()) throw Error(fmt::format("{}: no RNG state for rank {}", path, s.rank()));
    rng = found->second;
  }
  try {
    set_cpu_rng_state(rng);
  } catch (const c10::Error& e) {
    throw Error(fmt::format("{}/trainer.safetensors: bad RNG state ({})", path, one_line(e.what_without_backtrace())));
  }
  s.step = checkpoint.step;
  s.best_metric = checkpoint.best_metric;
  s.best_step = checkpoint.best_step;
  s.cpu_seconds = checkpoint.cpu_seconds.value_or(0.0);
  s.resumed = true;
  return s.step;
}

void Trainer::restore_weights(const TrainingCheckpoint& checkpoint, const std::string& path) {
  State& s = *state_;
  std::map<std::string, at::Tensor> model(checkpoint.model.begin(), checkpoint.model.end());
  torch::nn::Module& module = s.task.module();
  {
    torch::NoGradGuard no_grad;
    auto restore = [&](const std::string& name, at::Tensor target) {
      auto found = model.find(name);
      if (found == model.end()) throw Error(fmt::format("{}/model.safetensors: no tensor '{}'", path, name));
      if (found->second.sizes() != target.sizes()) {
        throw Error(fmt::format("{}/model.safetensors: '{}' has shape {}, the model's is {}", path, name,
                                c10::str(found->second.sizes()), c10::str(target.sizes())));
      }
      target.copy_(found->second);
    };
    for (const auto& item : module.named_parameters()) restore(item.key(), item.value());
    for (const auto& item : module.named_buffers()) restore(item.key(), item.value());
  }
  if (s.ema) {
    if (!checkpoint.ema) throw Error(fmt::format("{}: no ema.safetensors, but ema_decay is set", path));
    s.ema->load(std::map<std::string, at::Tensor>(checkpoint.ema->begin(), checkpoint.ema->end()),
                path + "/ema.safetensors");
  }
}

int64_t Trainer::load_weights(const std::string& checkpoint_directory) {
  const TrainingCheckpoint checkpoint = load_checkpoint(checkpoint_directory);
  restore_weights(checkpoint, checkpoint_directory);
  return checkpoint.step;
}

TrainResult Trainer::train() {
  State& s = *state_;
  const TrainerOptions& o = s.options;
  torch::nn::Module& module = s.task.module();
  const bool files = !o.run_directory.empty();
  const bool writer = s.writer();

  if (!s.resumed) {
    if (files && writer && !list_checkpoints(s.checkpoints_directory().string()).empty()) {
      throw Error(fmt::format("{}: the run directory already has checkpoints; resume it or choose another",
                              o.run_directory));
    }
    // Different dropout noise on each rank, the same on every run.
    at::manual_seed(o.seed + static_cast<uint64_t>(s.rank()));
  }
  if (s.data_parallel) {
    s.data_parallel->broadcast_parameters(module);
    if (s.ema && !s.resumed) s.ema = std::make_unique<ExponentialMovingAverage>(module, o.ema_decay);
  }

  std::unique_ptr<MetricsLog> metrics_log;
  if (files && writer) {
    fs::create_directories(o.run_directory);
    metrics_log = std::make_unique<MetricsLog>((fs::path(o.run_directory) / "metrics.jsonl").string(),
                                               s.resumed ? std::optional<int64_t>(s.step) : std::nullopt);
  }
  ProgressOptions progress_options;
  progress_options.total = o.steps;
  progress_options.unit = "steps";
  progress_options.log_every = o.log_every;
  progress_options.quiet = o.quiet || !writer;
  progress_options.terminal = o.terminal;
  ProgressReporter progress(progress_options);
  if (s.resumed) progress.note(fmt::format("resumed from step {} of {}", s.step, o.run_directory));

  const LearningRateSchedule schedule(o.schedule, o.optimizer.learning_rate, o.steps);
  TrainResult result;
  module.train();
  const bool budgeted = o.cpu_budget > 0;
  if (budgeted && s.data_parallel) {
    throw Error("run.cpu_budget: not supported with data parallelism (each rank would stop at its own step)");
  }
  if (budgeted && s.resumed && s.cpu_seconds >= o.cpu_budget) {
    progress.note(fmt::format("the CPU budget of {} s was already spent ({:.1f} s) at step {}", o.cpu_budget,
                              s.cpu_seconds, s.step));
  }
  while (s.step < o.steps && !(budgeted && s.cpu_seconds >= o.cpu_budget)) {
    const double cpu_before = process_cpu_seconds();
    StepRecord record;
    record.step = s.step + 1;
    record.loss = s.accumulate_gradients(record.step, record.tokens);
    if (!std::isfinite(record.loss))
      s.stop(record.step, "the loss is " + non_finite_name(record.loss) + s.non_finite_location(record.step, false));
    record.grad_norm = clip_gradients(s.parameters, o.clip_norm);
    if (!std::isfinite(record.grad_norm)) {
      s.stop(record.step, "the gradient norm is " + non_finite_name(record.grad_norm) +
                              s.non_finite_location(record.step, true));
    }
    record.learning_rate = budgeted ? schedule.rate(record.step - 1, s.cpu_seconds / o.cpu_budget)
                                    : schedule.rate(record.step - 1);
    set_learning_rate(*s.optimizer, record.learning_rate);
    s.optimizer->step();
    if (s.ema) s.ema->update();
    s.step = record.step;
    s.cpu_seconds += process_cpu_seconds() - cpu_before;
    record.cpu_seconds = s.cpu_seconds;

    const int64_t step = record.step;
    const bool last = step == o.steps || (budgeted && s.cpu_seconds >= o.cpu_budget);
    report_step(progress, {step, record.loss, record.learning_rate, record.grad_norm, record.tokens, s.cpu_seconds,
                           budgeted ? o.cpu_budget : 0.0});
    if (metrics_log && (last || (o.log_every > 0 && step % o.log_every == 0))) {
      metrics_log->append(nlohmann::json{{"step", step},
                                         {"loss", record.loss},
                                         {"lr", record.learning_rate},
                                         {"grad_norm", record.grad_norm},
                                         {"tokens", record.tokens},
                                         {"tokens_per_second", progress.rate()},
                                         {"cpu_seconds", s.cpu_seconds}}
                              .dump());
    }
    bool improved = false;
    if (last || (o.eval_every > 0 && step % o.eval_every == 0)) {
      record.metrics = s.evaluate();
      improved = s.track_best(step, record.metrics);
      progress.note(s.evaluation_line(step, record.metrics));
      if (metrics_log) {
        nlohmann::json entry{{"step", step}, {"eval", record.metrics}};
        if (s.best_metric) {
          entry["best"] = {{"metric", s.task.primary_metric()}, {"value", *s.best_metric}, {"step", s.best_step}};
        }
        metrics_log->append(entry.dump());
      }
      result.last_metrics = record.metrics;
    }
    const bool checkpoint_now = last || (o.checkpoint_every > 0 && step % o.checkpoint_every == 0);
    if (files && (checkpoint_now || improved)) s.write_checkpoints(step, checkpoint_now, improved);
    result.last_loss = record.loss;
    if (s.callback) s.callback(record);
  }
  progress.finish();
  result.steps = s.step;
  result.best_metric = s.best_metric;
  result.best_step = s.best_step;
  result.cpu_seconds = s.cpu_seconds;
  return result;
}

}  // namespace attnkit::train
