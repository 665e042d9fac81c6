#pragma once
// The training loop: optimiser + schedule, gradient accumulation, global-norm clipping, EMA,
// periodic evaluation with the task's metrics, checkpoints (keep last k + best), exact resume,
// progress output and metrics.jsonl, and optionally data parallelism (DataParallel).
//
// One step (update number t = 1, 2, ...):
//   for m in 0 .. accumulation-1: loss_m = task.train_loss((t-1)·accumulation + m, rank, world);
//                                 backward(loss_m / accumulation)
//   [data parallel: gradients averaged over ranks (bucketed all-reduce), losses averaged]
//   step loss = mean of loss_m; a NaN/Inf loss or gradient norm stops here (attnkit::Error naming
//   the step; nothing is updated or written, the last good checkpoint stays)
//   grad_norm = global L2 norm before clipping; if clip_norm > 0 and grad_norm > clip_norm, the
//   gradients are scaled by clip_norm / (grad_norm + 1e-6) (as torch.nn.utils.clip_grad_norm_)
//   lr = schedule(t-1); optimiser step; EMA update
//   log (every log_every steps: progress + metrics.jsonl); evaluate (every eval_every steps and at
//   the end); checkpoint (every checkpoint_every steps and at the end; "best" after an evaluation
//   that improved the primary metric); then the step callback.
// Dropout and any other use of the default CPU generator are reproducible: the generator is seeded
// with `seed` at the start and its state is checkpointed; data order comes from the micro-batch
// index alone. So a run resumed from step s repeats the uninterrupted run's losses bit-exactly.
#include "attnkit/train/optimizers.h"
#include "attnkit/train/schedule.h"

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <map>
#include "attnkit/metrics/stats.h"
#include "attnkit/models/model.h"

#include <memory>
#include <optional>
#include <string>

namespace attnkit::train {

struct MicroBatchLoss {
  at::Tensor loss;      // scalar, mean over this micro-batch, requires grad
  int64_t tokens = 0;   // input tokens in the micro-batch (throughput)
};

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;
  virtual torch::nn::Module& module() = 0;  // what is optimised and checkpointed
  // Deterministic: micro-batch number `index` (0, 1, ...) of this rank's shard. Same (index, rank,
  // world) -> same examples, so resuming needs only the step counter; ranks see disjoint data.
  virtual MicroBatchLoss train_loss(int64_t index, int rank, int world) = 0;
  // Validation metrics (called in eval mode under NoGradGuard by the trainer).
  virtual std::map<std::string, double> evaluate() = 0;
  // The per-item statistics of the last evaluate() (a language model's rows: summed negative
  // log-likelihood and tokens), for paired comparisons of two models on the same data (`attnkit
  // eval --items / --paired-bs`); nullopt for a task without them or before any evaluation.
  virtual std::optional<metrics::ItemStatistics> evaluation_items() const { return std::nullopt; }
  virtual std::string primary_metric() const = 0;   // e.g. "accuracy"
  virtual bool higher_is_better() const = 0;
  // Saved as safetensors metadata of the model file (e.g. the model config JSON).
  virtual std::map<std::string, std::string> checkpoint_metadata() const { return {}; }
  // The model being trained, when the task trains a models::Model (every task of make_task):
  // what eval, export and the run-directory loaders see.
  virtual std::shared_ptr<models::Model> trained_model() const { return nullptr; }
  // Files written into every checkpoint directory beside the model (name -> content), e.g. the
  // run's tokenizer.json, so a checkpoint is a model directory with its tokenizer.
  const std::map<std::string, std::string>& checkpoint_files() const { return checkpoint_files_; }
  void add_checkpoint_file(const std::string& name, std::string content) {
    checkpoint_files_[name] = std::move(content);
  }

 private:
  std::map<std::string, std::string> checkpoint_files_;
};

class DataParallel;
struct TrainingCheckpoint;  // checkpoint.h

struct TrainerOptions {
  int64_t steps = 1000;        // optimiser updates in total (a resumed run continues to this)
  int64_t accumulation = 1;    // micro-batches per update
  double clip_norm = 1.0;      // global L2 norm; 0 = no clipping (the norm is still reported)
  OptimizerOptions optimizer;
  ScheduleOptions schedule;    // decays over `steps`
  double ema_decay = 0.0;      // 0 = off; else in (0, 1), and evaluation uses the EMA weights
  int64_t eval_every = 0;      // 0 = evaluate only at the end
  int64_t checkpoint_every = 0;  // 0 = checkpoint only at the end
  int64_t keep_last = 3;       // step checkpoints kept (plus "best"); <= 0 keeps all
  std::string run_directory;   // "" = write nothing (no checkpoints, no metrics.jsonl)
  uint64_t seed = 0;           // seeds the default CPU generator at the start of a fresh run
  bool quiet = false;
  int64_t log_every = 10;      // progress lines and metrics.jsonl records
  std::optional<bool> terminal;  // progress bar or plain lines; default: isatty(stderr)
  // A budget of process CPU time (user + system, all threads) for the training steps, summed over
  // resumes; evaluations and checkpoints do not count. 0 = none. With a budget, training stops
  // after the first step that reaches it (or at `steps`, whichever comes first), and the
  // learning-rate decay after warm-up follows the spent fraction of the budget instead of the step
  // count. Equal budgets make runs of different speed comparable (the LRA table); such a run's
  // length depends on the machine, so it is not repeatable bit for bit. Single process only.
  double cpu_budget = 0;
  // Throws attnkit::Error naming the first bad field.
  void validate() const;
};

// One completed step, given to the step callback.
struct StepRecord {
  int64_t step = 0;
  double loss = 0;       // mean micro-batch loss (averaged over ranks)
  double grad_norm = 0;  // before clipping
  double learning_rate = 0;
  int64_t tokens = 0;    // this step, all ranks
  double cpu_seconds = 0;  // CPU time of the training steps so far (resumes included)
  std::map<std::string, double> metrics;  // when this step evaluated, else empty
};

struct TrainResult {
  int64_t steps = 0;  // the step reached
  double last_loss = 0;
  std::map<std::string, double> last_metrics;  // the final evaluation
  std::optional<double> best_metric;
  int64_t best_step = -1;
  double cpu_seconds = 0;  // CPU time of the training steps (resumes included)
};

class Trainer {
 public:
  // The task (and `data_parallel`, if any) must outlive the trainer. With data_parallel the
  // parameters are broadcast from rank 0 when training starts, and only rank 0 writes files or
  // prints. Throws attnkit::Error for invalid options.
  Trainer(TrainingTask& task, TrainerOptions options, DataParallel* data_parallel = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Restores the newest complete checkpoint of `run_directory` (model, optimiser, schedule step,
  // EMA, RNG state, best metric) after removing incomplete ".tmp-" ones; later steps of
  // metrics.jsonl are dropped when train() starts. Sets options.run_directory to it. Throws
  // attnkit::Error when there is no checkpoint or it does not fit the model or options
  // (accumulation and world size must be the same). Returns the resumed step.
  int64_t resume(const std::string& run_directory);

  // For evaluation: loads the model weights (and the EMA weights, when enabled) of one checkpoint
  // directory, e.g. RUN/checkpoints/best; the optimiser, step and generator are left as they are.
  // Throws attnkit::Error like resume. Returns the checkpoint's step.
  int64_t load_weights(const std::string& checkpoint_directory);

  // Trains from the current step to options.steps. Throws attnkit::Error on NaN/Inf (naming the
  // step), a fresh run into a directory that already has checkpoints, or I/O failures.
  TrainResult train();

  // Called after every completed step (after its evaluation and checkpoint).
  void set_step_callback(std::function<void(const StepRecord&)> callback);

  // The task's metrics in eval mode under NoGradGuard, with the EMA weights when enabled.
  std::map<std::string, double> evaluate();
  std::optional<metrics::ItemStatistics> evaluation_items() const;  // the task's, of the last evaluate()

  int64_t step() const;
  torch::optim::Optimizer& optimizer();
  class ExponentialMovingAverage* ema();  // null when off
  const TrainerOptions& options() const;

 private:
  void restore_weights(const TrainingCheckpoint& checkpoint, const std::string& path);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace attnkit::train
