#pragma once
// Small training tasks for the trainer tests (not *_test.cpp, so CMake does not compile it alone):
//   TinyLmTask          a 2-layer Transformer (dropout 0.1, so the generator matters) learning the
//                       synthetic copy task, with token accuracy as its metric;
//   LinearRegressionTask a float64 linear model on a fixed data set (micro-batch i = examples
//                       i·b .. i·b+b-1 of the rank's shard), exact enough for equivalence checks.
// And run_test_child: this test binary run again as a child with a role in its environment.
#include "attnkit/data/synthetic_tasks.h"
#include "attnkit/models/transformer_model.h"
#include "attnkit/train/data_tensors.h"
#include "attnkit/train/trainer.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

extern char** environ;

namespace attnkit::testing {

struct TinyLmImpl : torch::nn::Module {
  explicit TinyLmImpl(const models::TransformerConfig& config) {
    model = register_module("model", models::TransformerModel(config));
    head = register_module("head", torch::nn::Linear(config.hidden, config.vocab_size));
  }
  at::Tensor logits(const at::Tensor& inputs) {
    models::ModelInputs model_inputs;
    model_inputs.input_ids = inputs;
    return head->forward(model->forward(model_inputs).last_hidden_state);
  }
  models::TransformerModel model{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(TinyLm);

class TinyLmTask : public train::TrainingTask {
 public:
  explicit TinyLmTask(int64_t batch_size = 4, uint64_t init_seed = 123) : batch_size_(batch_size) {
    options_.task = data::SyntheticTask::kCopy;
    options_.min_length = options_.max_length = 5;
    options_.num_symbols = 6;
    config_ = models::TransformerConfig::bert(data::synthetic_vocab_size(options_), 16, 2, 2, 32);
    config_.max_positions = 16;
    config_.pooler = false;
    config_.type_vocab_size = 0;
    config_.dropout = 0.1;
    torch::manual_seed(init_seed);
    net_ = TinyLm(config_);
    validation_ = train::make_synthetic_batch(data::generate_synthetic_task(options_, 777, 16));
  }
  torch::nn::Module& module() override { return *net_; }
  train::MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    const uint64_t seed = 1000 + static_cast<uint64_t>(index * world + rank);
    auto batch = train::make_synthetic_batch(data::generate_synthetic_task(options_, seed, batch_size_));
    at::Tensor loss = loss_of(batch);
    if (index == nan_at_index) loss = loss * std::numeric_limits<double>::quiet_NaN();
    return {loss, batch.inputs.numel()};
  }
  std::map<std::string, double> evaluate() override {
    at::Tensor logits = net_->logits(validation_.inputs);
    at::Tensor predicted = logits.argmax(-1);
    at::Tensor counted = validation_.targets != train::SyntheticBatch::kIgnoreIndex;
    double correct = (predicted.eq(validation_.targets) & counted).sum().item<double>();
    return {{"accuracy", correct / counted.sum().item<double>()}, {"loss", loss_of(validation_).item<double>()}};
  }
  std::string primary_metric() const override { return "accuracy"; }
  bool higher_is_better() const override { return true; }
  std::map<std::string, std::string> checkpoint_metadata() const override { return {{"task", "tiny-lm"}}; }

  int64_t nan_at_index = -1;  // train_loss(nan_at_index) returns NaN

 private:
  at::Tensor loss_of(const train::SyntheticBatch& batch) {
    at::Tensor logits = net_->logits(batch.inputs);
    return torch::nn::functional::cross_entropy(
        logits.reshape({-1, logits.size(-1)}), batch.targets.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(train::SyntheticBatch::kIgnoreIndex));
  }
  data::SyntheticTaskOptions options_;
  models::TransformerConfig config_;
  int64_t batch_size_;
  TinyLm net_{nullptr};
  train::SyntheticBatch validation_;
};

// y = x·w* + 0.1·sin(j) on 4 float64 features; the loss is the mean squared error.
class LinearRegressionTask : public train::TrainingTask {
 public:
  explicit LinearRegressionTask(int64_t batch_size) : batch_size_(batch_size) {
    torch::manual_seed(5);
    linear_ = torch::nn::Linear(4, 1);
    linear_->to(torch::kDouble);
    net_->register_module("linear", linear_);
  }
  torch::nn::Module& module() override { return *net_; }
  // Example j of the whole data set.
  static std::pair<at::Tensor, at::Tensor> examples(int64_t first, int64_t count) {
    at::Tensor j = torch::arange(first, first + count, torch::kDouble).unsqueeze(1);
    at::Tensor x = torch::cat({torch::sin(j), torch::cos(0.5 * j), torch::sin(0.3 * j + 1), j.remainder(7) / 7}, 1);
    at::Tensor w = torch::tensor({1.5, -2.0, 0.5, 3.0}, torch::kDouble).unsqueeze(1);
    return {x, x.matmul(w) + 0.1 * torch::sin(j) + 0.25};
  }
  train::MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    // The shard of rank r: micro-batch i holds examples (i·world + r)·b ...
    auto [x, y] = examples((index * world + rank) * batch_size_, batch_size_);
    at::Tensor loss = (linear_->forward(x) - target_scale * y).pow(2).mean();
    if (nan_gradient) loss = loss + torch::sqrt((linear_->weight * 0).sum());
    return {loss, batch_size_};
  }
  std::map<std::string, double> evaluate() override {
    auto [x, y] = examples(100000, 64);
    return {{"mse", (linear_->forward(x) - y).pow(2).mean().item<double>()},
            {"weight_sum", linear_->weight.sum().item<double>()}};
  }
  std::string primary_metric() const override { return "mse"; }
  bool higher_is_better() const override { return false; }

  bool nan_gradient = false;  // adds sqrt(0·w): a finite loss with NaN gradients
  double target_scale = 1.0;  // training targets are multiplied by it

 private:
  int64_t batch_size_;
  std::shared_ptr<torch::nn::Module> net_ = std::make_shared<torch::nn::Module>();
  torch::nn::Linear linear_{nullptr};
};

// Starts this test binary with --gtest_filter=`filter` and `environment` added; stdout is dropped,
// stderr goes to `stderr_path` ("" = inherited). Returns the pid (-1 when it cannot start).
inline pid_t spawn_test_child(const std::string& filter, const std::map<std::string, std::string>& environment,
                              const std::string& stderr_path = "") {
  std::vector<std::string> env_strings;
  for (char** entry = environ; *entry != nullptr; ++entry) env_strings.emplace_back(*entry);
  for (const auto& [key, value] : environment) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter_arg = "--gtest_filter=" + filter;
  std::vector<char*> argv = {self.data(), filter_arg.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  pid_t pid = 0;
  int error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return error == 0 ? pid : -1;
}

// The same, waiting for it: returns the wait status.
inline int run_test_child(const std::string& filter, const std::map<std::string, std::string>& environment) {
  pid_t pid = spawn_test_child(filter, environment);
  if (pid < 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

}  // namespace attnkit::testing
