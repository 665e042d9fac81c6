// The trainer: exact resume after a kill (bit-identical losses and parameters), NaN stops that keep
// the last good checkpoint, keep-last-k + best, EMA evaluation, gradient accumulation equivalence,
// progress lines and metrics.jsonl.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attnkit/io/safetensors.h"
#include "attnkit/train/checkpoint.h"
#include "attnkit/train/ema.h"
#include "attnkit/train/progress.h"
#include "attnkit/train/trainer.h"
#include "support/test_files.h"
#include "train/toy_tasks.h"

namespace fs = std::filesystem;

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::LinearRegressionTask;
using attnkit::testing::read_bytes;
using attnkit::testing::scratch_directory;
using attnkit::testing::TinyLmTask;

TrainerOptions lm_options(const std::string& run_directory) {
  TrainerOptions o;
  o.steps = 12;
  o.accumulation = 2;
  o.clip_norm = 0.5;
  o.optimizer.learning_rate = 3e-3;
  o.schedule.warmup_steps = 3;
  o.ema_decay = 0.9;
  o.eval_every = 4;
  o.checkpoint_every = 4;
  o.keep_last = 2;
  o.run_directory = run_directory;
  o.seed = 42;
  o.quiet = true;
  o.log_every = 1;
  return o;
}

std::vector<nlohmann::json> metrics_lines(const fs::path& run_directory) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(read_bytes(run_directory / "metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    auto json = nlohmann::json::parse(line);
    json.erase("tokens_per_second");  // timing
    json.erase("cpu_seconds");
    lines.push_back(json);
  }
  return lines;
}

constexpr int64_t kKillAfterStep = 10;  // the child's last step; its last checkpoint is step 8

// Child role: trains into the given run directory and kills itself (SIGKILL, no cleanup) after
// step kKillAfterStep.
TEST(TrainerChild, TrainThenDie) {
  const char* run_directory = std::getenv("ATTNKIT_TRAINER_CHILD_RUN");
  if (run_directory == nullptr) GTEST_SKIP() << "run by Trainer.ResumeAfterKillIsBitExact";
  TinyLmTask task;
  Trainer trainer(task, lm_options(run_directory));
  trainer.set_step_callback([](const StepRecord& record) {
    if (record.step == kKillAfterStep) std::raise(SIGKILL);
  });
  trainer.train();
}

TEST(Trainer, ResumeAfterKillIsBitExact) {
  const fs::path dir = scratch_directory("train");
  // The uninterrupted run.
  std::map<int64_t, double> losses;
  TinyLmTask reference_task;
  {
    Trainer trainer(reference_task, lm_options((dir / "full").string()));
    trainer.set_step_callback([&](const StepRecord& record) { losses[record.step] = record.loss; });
    trainer.train();
  }
  // Killed at step 10 (last checkpoint: 8), plus debris of a checkpoint being written at the kill.
  const int status = attnkit::testing::run_test_child("TrainerChild.TrainThenDie",
                                                      {{"ATTNKIT_TRAINER_CHILD_RUN", (dir / "killed").string()}});
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  const fs::path debris = dir / "killed" / "checkpoints" / ".tmp-step-00000012.99999.0";
  fs::create_directories(debris);
  attnkit::testing::write_bytes(debris / "model.safetensors", "half");
  EXPECT_EQ(metrics_lines(dir / "killed").back()["step"], kKillAfterStep);

  TinyLmTask task;  // fresh weights (the same initialisation; resume overwrites them anyway)
  Trainer trainer(task, lm_options(""));
  EXPECT_EQ(trainer.resume((dir / "killed").string()), 8);
  EXPECT_FALSE(fs::exists(debris));
  std::map<int64_t, double> resumed;
  trainer.set_step_callback([&](const StepRecord& record) { resumed[record.step] = record.loss; });
  trainer.train();
  ASSERT_EQ(resumed.size(), 4u);
  for (const auto& [step, loss] : resumed) EXPECT_EQ(loss, losses.at(step)) << "step " << step;
  auto expected = reference_task.module().named_parameters();
  for (const auto& item : task.module().named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
  }
  // The logs agree line by line (the kill's steps 9-10 were dropped and redone).
  EXPECT_EQ(metrics_lines(dir / "killed"), metrics_lines(dir / "full"));
  // The same checkpoints, and identical final files.
  auto names = [](const fs::path& run) {
    std::vector<std::string> result;
    for (const auto& entry : fs::directory_iterator(run / "checkpoints")) result.push_back(entry.path().filename());
    std::sort(result.begin(), result.end());
    return result;
  };
  EXPECT_EQ(names(dir / "killed"), names(dir / "full"));
  for (const char* file : {"model.safetensors", "ema.safetensors", "trainer.safetensors"}) {
    EXPECT_EQ(read_bytes(dir / "killed/checkpoints/step-00000012" / file),
              read_bytes(dir / "full/checkpoints/step-00000012" / file)) << file;
  }
  auto model = io::SafetensorsFile::open((dir / "full/checkpoints/step-00000012/model.safetensors").string());
  EXPECT_EQ(model.metadata().at("task"), "tiny-lm");
}

TEST(Trainer, FreshRunRefusesADirectoryWithCheckpoints) {
  const fs::path dir = scratch_directory("train");
  TrainerOptions o = lm_options(dir.string());
  o.steps = 4;
  {
    TinyLmTask task;
    Trainer(task, o).train();
  }
  TinyLmTask task;
  Trainer trainer(task, o);
  EXPECT_EQ(error_of([&] { trainer.train(); }),
            dir.string() + ": the run directory already has checkpoints; resume it or choose another");
  Trainer other(task, o);
  EXPECT_EQ(error_of([&] { other.resume((dir / "nothing").string()); }),
            (dir / "nothing" / "checkpoints").string() + ": no complete checkpoint to resume from");
  o.accumulation = 3;
  Trainer mismatched(task, o);
  EXPECT_EQ(error_of([&] { mismatched.resume(dir.string()); }),
            (dir / "checkpoints" / "step-00000004").string() + ": trained with accumulation 2, cannot resume with 3");
}

TEST(Trainer, NanLossStopsAndKeepsTheLastGoodCheckpoint) {
  const fs::path dir = scratch_directory("train");
  TinyLmTask task;
  task.nan_at_index = 6 * 2 + 1;  // step 7's second micro-batch
  TrainerOptions o = lm_options(dir.string());
  o.checkpoint_every = 5;
  o.eval_every = 0;
  Trainer trainer(task, o);
  EXPECT_EQ(error_of([&] { trainer.train(); }),
            "training stopped at step 7: the loss is NaN (every parameter is finite: the input of "
            "micro-batch 12..13 on rank 0 gave it); the last good checkpoint is " +
                (dir / "checkpoints" / "step-00000005").string());
  EXPECT_EQ(trainer.step(), 6);
  auto checkpoints = list_checkpoints((dir / "checkpoints").string());
  ASSERT_EQ(checkpoints.size(), 1u);
  for (const auto& [name, tensor] : io::load_safetensors(checkpoints[0].path + "/model.safetensors")) {
    EXPECT_TRUE(torch::isfinite(tensor).all().item<bool>()) << name;
  }
  for (const auto& parameter : task.module().parameters()) EXPECT_TRUE(torch::isfinite(parameter).all().item<bool>());
}

TEST(Trainer, NanGradientStopsBeforeTheUpdate) {
  LinearRegressionTask task(4);
  task.nan_gradient = true;
  TrainerOptions o;
  o.steps = 3;
  o.quiet = true;
  const at::Tensor before = task.module().parameters()[0].clone();
  Trainer trainer(task, o);
  const std::string message = error_of([&] { trainer.train(); });
  EXPECT_EQ(message.rfind("training stopped at step 1: the gradient norm is NaN (the gradient of parameter '", 0), 0u)
      << message;
  EXPECT_NE(message.find("' holds NaN at flat element "), std::string::npos) << message;
  EXPECT_NE(message.find("); no checkpoint was written"), std::string::npos) << message;
  EXPECT_TRUE(torch::equal(task.module().parameters()[0], before));
}

TEST(Trainer, NeverCheckpointsOverflowedWeights) {
  const fs::path dir = scratch_directory("train");
  LinearRegressionTask task(4);
  task.target_scale = 1e3;  // gradients of ~1e3
  TrainerOptions o;
  o.steps = 3;
  o.quiet = true;
  o.clip_norm = 0;
  o.checkpoint_every = 1;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.momentum = 0;
  o.optimizer.learning_rate = 1e308;  // finite gradients, infinite weights after the update
  o.run_directory = dir.string();
  Trainer trainer(task, o);
  const std::string message = error_of([&] { trainer.train(); });
  EXPECT_EQ(message.rfind("training stopped at step 1: parameter 'linear.", 0), 0u) << message;
  EXPECT_NE(message.find("' is not finite after the update; no checkpoint was written"), std::string::npos) << message;
  EXPECT_TRUE(list_checkpoints((dir / "checkpoints").string()).empty());
}

TEST(Trainer, KeepsTheLastKAndTheBest) {
  const fs::path dir = scratch_directory("train");
  LinearRegressionTask task(8);
  TrainerOptions o;
  o.steps = 10;
  o.checkpoint_every = 2;
  o.eval_every = 2;
  o.keep_last = 2;
  o.quiet = true;
  o.optimizer.learning_rate = 0.05;
  o.run_directory = dir.string();
  Trainer trainer(task, o);
  TrainResult result = trainer.train();
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir / "checkpoints")) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"best", "step-00000008", "step-00000010"}));
  ASSERT_TRUE(result.best_metric.has_value());
  EXPECT_EQ(result.last_metrics.at("mse"), *result.best_metric);  // the loss keeps falling
  EXPECT_EQ(load_checkpoint((dir / "checkpoints" / "best").string()).best_step, result.best_step);
  EXPECT_EQ(result.best_step, 10);
  // A fresh trainer evaluates any one of them (attnkit eval --checkpoint).
  LinearRegressionTask fresh(8);
  o.run_directory.clear();
  Trainer evaluator(fresh, o);
  EXPECT_EQ(evaluator.load_weights((dir / "checkpoints" / "best").string()), 10);
  EXPECT_EQ(evaluator.evaluate().at("mse"), *result.best_metric);
  EXPECT_EQ(evaluator.load_weights((dir / "checkpoints" / "step-00000008").string()), 8);
  EXPECT_GT(evaluator.evaluate().at("mse"), *result.best_metric);
  EXPECT_EQ(evaluator.step(), 0);  // weights only: the optimiser and step stay
  EXPECT_NE(error_of([&] { evaluator.load_weights((dir / "checkpoints" / "step-00000002").string()); }).find("step-00000002"),
            std::string::npos);
}

TEST(Trainer, EvaluatesWithTheAveragedWeights) {
  LinearRegressionTask task(8);
  TrainerOptions o;
  o.steps = 5;
  o.quiet = true;
  o.ema_decay = 0.5;
  o.optimizer.learning_rate = 0.1;
  Trainer trainer(task, o);
  trainer.train();
  ASSERT_NE(trainer.ema(), nullptr);
  std::map<std::string, at::Tensor> shadow;
  for (const auto& [name, tensor] : trainer.ema()->shadow()) shadow[name] = tensor;
  const at::Tensor weight = task.module().named_parameters()["linear.weight"].clone();
  const double metric = trainer.evaluate().at("weight_sum");
  EXPECT_EQ(metric, shadow.at("linear.weight").sum().item<double>());
  EXPECT_NE(metric, weight.sum().item<double>());
  EXPECT_TRUE(torch::equal(task.module().named_parameters()["linear.weight"], weight));  // swapped back
  EXPECT_TRUE(task.module().is_training());
}

TEST(Trainer, AccumulationEqualsOneLargeBatch) {
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
    SCOPED_TRACE(to_string(kind));
    TrainerOptions o;
    o.steps = 6;
    o.quiet = true;
    o.clip_norm = 0.3;  // clips: the norms must agree too
    o.optimizer.kind = kind;
    o.optimizer.learning_rate = 0.05;
    LinearRegressionTask large(12), small(3);
    std::vector<double> large_norms, small_norms;
    Trainer one(large, o);
    one.set_step_callback([&](const StepRecord& r) { large_norms.push_back(r.grad_norm); });
    one.train();
    o.accumulation = 4;
    Trainer accumulated(small, o);
    accumulated.set_step_callback([&](const StepRecord& r) { small_norms.push_back(r.grad_norm); });
    accumulated.train();
    for (size_t i = 0; i < large_norms.size(); ++i) EXPECT_NEAR(large_norms[i], small_norms[i], 1e-9);
    EXPECT_GT(large_norms[0], 0.3);
    auto expected = large.module().named_parameters();
    for (const auto& item : small.module().named_parameters()) {
      EXPECT_TRUE(torch::allclose(item.value(), expected[item.key()], 0, 1e-6)) << item.key();
    }
  }
}

// What a reporter for `total_steps` prints over steps 1 .. total_steps (loss, lr, grad norm and
// tokens fixed), then `note` if not empty.
std::string progress_output(bool terminal, int64_t total_steps, int64_t log_every, const std::string& note) {
  const fs::path path = scratch_directory("train") / "out.txt";
  std::FILE* out = std::fopen(path.c_str(), "w");
  {
    ProgressOptions o;
    o.total = total_steps;
    o.log_every = log_every;
    o.terminal = terminal;
    ProgressReporter progress(o, out);
    for (int64_t step = 1; step <= total_steps; ++step) report_step(progress, {step, 1.5, 1e-3, 0.25, 100});
    if (!note.empty()) progress.note(note);
  }
  std::fclose(out);
  return read_bytes(path);
}

TEST(Progress, PlainLinesWhenNotATerminal) {
  std::istringstream lines(progress_output(false, 5, 2, "eval step 5: accuracy 0.5000"));
  std::vector<std::string> got;
  std::string line;
  while (std::getline(lines, line)) got.push_back(line.substr(0, line.find(" tok/s")));
  EXPECT_EQ(got, (std::vector<std::string>{"step 2/5 loss 1.5000 lr 1.00e-03 grad_norm 0.2500",
                                           "step 4/5 loss 1.5000 lr 1.00e-03 grad_norm 0.2500",
                                           "step 5/5 loss 1.5000 lr 1.00e-03 grad_norm 0.2500",
                                           "eval step 5: accuracy 0.5000"}));
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(725), "12m05s");
  EXPECT_EQ(format_duration(3 * 3600 + 125), "3h02m");
}

TEST(Progress, BudgetedRunShowsCpuTimeOfTheBudget) {
  const fs::path path = scratch_directory("train") / "budget.txt";
  std::FILE* out = std::fopen(path.c_str(), "w");
  ASSERT_NE(out, nullptr);
  {
    ProgressOptions o;
    o.total = 1000000;  // what a budgeted run's step limit usually is: not its end
    o.log_every = 1;
    o.terminal = false;
    ProgressReporter progress(o, out);
    report_step(progress, {7, 1.5, 1e-3, 0.25, 100, 125.0, 300.0});
  }
  std::fclose(out);
  const std::string text = read_bytes(path);
  EXPECT_EQ(text.substr(0, text.find(" tok/s")), "step 7 loss 1.5000 lr 1.00e-03 grad_norm 0.2500") << text;
  EXPECT_NE(text.find(" cpu 2m05s of 5m00s\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("eta"), std::string::npos) << text;
}

TEST(Progress, TerminalBarIsRedrawnInPlace) {
  const std::string text = progress_output(true, 4, 1, "");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 4);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_NE(text.find("[====================] 4/4 100%"), std::string::npos) << text;
  EXPECT_NE(text.find("loss 1.5000  lr 1.00e-03"), std::string::npos);
}

TEST(Progress, MetricsLogKeepsStepsUpToTheResumedOne) {
  const fs::path dir = scratch_directory("train");
  const std::string path = (dir / "metrics.jsonl").string();
  {
    MetricsLog log(path, std::nullopt);
    for (int step = 1; step <= 4; ++step) log.append(nlohmann::json{{"step", step}}.dump());
  }
  attnkit::testing::write_bytes(path, read_bytes(path) + "{\"step\": 5, \"lo");  // torn last line
  {
    MetricsLog log(path, 2);
    log.append("{\"step\":3,\"again\":true}");
  }
  EXPECT_EQ(read_bytes(path), "{\"step\":1}\n{\"step\":2}\n{\"step\":3,\"again\":true}\n");
  MetricsLog fresh(path, std::nullopt);
  EXPECT_EQ(read_bytes(path), "");
}

// run.cpu_budget: training stops at the first step whose CPU time reaches the budget; the decay
// after warm-up follows the spent fraction; the spent time is checkpointed and a resume continues
// to a larger budget from it.
TEST(Trainer, CpuBudgetStopsTrainingAndDecaysOverIt) {
  const fs::path dir = scratch_directory("train");
  TrainerOptions o = lm_options(dir.string());
  o.steps = 1000000;
  o.cpu_budget = 0.4;
  o.ema_decay = 0;
  o.eval_every = 0;
  o.checkpoint_every = 0;
  o.schedule.kind = ScheduleKind::kCosine;
  std::vector<StepRecord> records;
  TinyLmTask task;
  Trainer trainer(task, o);
  trainer.set_step_callback([&](const StepRecord& r) { records.push_back(r); });
  const TrainResult result = trainer.train();
  ASSERT_GE(records.size(), 6u);  // a tiny step takes milliseconds
  EXPECT_LT(result.steps, o.steps);
  EXPECT_EQ(result.steps, static_cast<int64_t>(records.size()));
  EXPECT_GE(result.cpu_seconds, o.cpu_budget);
  EXPECT_EQ(result.cpu_seconds, records.back().cpu_seconds);
  for (size_t i = 0; i + 1 < records.size(); ++i) {
    EXPECT_LT(records[i].cpu_seconds, o.cpu_budget) << "step " << records[i].step << " ran past the budget";
    EXPECT_LT(records[i].cpu_seconds, records[i + 1].cpu_seconds);
  }
  EXPECT_FALSE(records.back().metrics.empty());  // the last step evaluates
  // Warm-up by steps, then a cosine over the budget: non-increasing, and near zero at the end.
  EXPECT_DOUBLE_EQ(records[0].learning_rate, o.optimizer.learning_rate / 3);
  EXPECT_DOUBLE_EQ(records[2].learning_rate, o.optimizer.learning_rate);
  for (size_t i = 3; i < records.size(); ++i) EXPECT_LE(records[i].learning_rate, records[i - 1].learning_rate);
  EXPECT_LT(records.back().learning_rate, 0.3 * o.optimizer.learning_rate);
  EXPECT_TRUE(fs::exists(dir / "checkpoints" / checkpoint_directory_name(result.steps)));
  EXPECT_DOUBLE_EQ(
      load_checkpoint((dir / "checkpoints" / checkpoint_directory_name(result.steps)).string()).cpu_seconds.value_or(-1),
      result.cpu_seconds);
  EXPECT_NE(read_bytes(dir / "metrics.jsonl").find("\"cpu_seconds\":"), std::string::npos);

  // Resume with twice the budget: continues from the spent time, not from zero.
  o.cpu_budget = 0.8;
  TinyLmTask again;
  Trainer resumed(again, o);
  EXPECT_EQ(resumed.resume(dir.string()), result.steps);
  std::vector<StepRecord> more;
  resumed.set_step_callback([&](const StepRecord& r) { more.push_back(r); });
  const TrainResult second = resumed.train();
  ASSERT_FALSE(more.empty());
  EXPECT_GT(more.front().cpu_seconds, result.cpu_seconds);
  EXPECT_GE(second.cpu_seconds, 0.8);
  EXPECT_LT(more.front().learning_rate, records[3].learning_rate);  // half the new budget was spent

  // An exhausted budget trains no further step.
  TinyLmTask third;
  Trainer spent(third, o);
  spent.resume(dir.string());
  EXPECT_EQ(spent.train().steps, second.steps);
}

TEST(Trainer, OptionErrors) {
  TrainerOptions o;
  o.accumulation = 0;
  EXPECT_EQ(error_of([&] { o.validate(); }), "trainer options: accumulation must be >= 1, got 0");
  o = TrainerOptions();
  o.ema_decay = 1;
  EXPECT_EQ(error_of([&] { o.validate(); }), "trainer options: ema_decay must be 0 (off) or in (0, 1), got 1");
  o = TrainerOptions();
  o.cpu_budget = -1;
  EXPECT_EQ(error_of([&] { o.validate(); }), "trainer options: cpu_budget must be >= 0 seconds (0 = none), got -1");
}

}  // namespace
}  // namespace attnkit::train
