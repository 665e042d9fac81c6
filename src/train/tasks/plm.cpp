// plm: permutation LM (XLNet through the mask; train/pretraining.h): text files packed into blocks
// of task.truncate tokens, each example a fresh factorisation order per micro-batch (a pure
// function of run seed and micro-batch), the order's next token predicted by a model whose
// attention mask is the order's (any kind that takes a general mask); with task.two_stream, by
// XLNet's query stream at the predicted token's own position (models::TaskModelImpl::
// two_stream_forward).
#include "task_common.h"

#include "attnkit/error.h"
#include "attnkit/train/pretraining.h"

#include <fmt/format.h>

namespace attnkit::train::detail {
namespace {

class PermutationLanguageModelTask : public ModelTask {
 public:
  PermutationLanguageModelTask(models::TaskModel model, const RunConfig& config, TextBlocks blocks)
      : ModelTask(std::move(model), config), train_(std::move(blocks.train)), val_(std::move(blocks.val)),
        predict_last_(config.task.predict_last), two_stream_(config.task.two_stream), seed_(config.trainer.seed),
        order_(train_.size(), config.task.batch_size, config.trainer.seed) {}

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const Ids*> rows;
    for (size_t i : order_.batch(index, rank, world)) rows.push_back(&train_[i]);
    auto [logits, targets] = run(rows, static_cast<uint64_t>(index * world + rank));
    return {models::cross_entropy(logits, targets), targets.numel()};
  }

  std::map<std::string, double> evaluate() override {
    models::PredictionMetrics metrics;
    for_each_batch(val_, batch_size_, [&](size_t start, const std::vector<const Ids*>& rows) {
      auto [logits, targets] = run(rows, kEvaluationStream + start);
      metrics.add(logits, targets);
    });
    const double loss = metrics.mean_loss();
    return {{"loss", loss}, {"perplexity", std::exp(loss)}, {"token_accuracy", metrics.accuracy()}};
  }
  std::string primary_metric() const override { return "perplexity"; }
  bool higher_is_better() const override { return false; }

 private:
  std::pair<at::Tensor, at::Tensor> run(const std::vector<const Ids*>& rows, uint64_t stream) {
    const auto orders = sample_orders(rows.size(), static_cast<int64_t>(rows.front()->size()), seed_, stream);
    auto batch = permutation_batch(rows, orders, predict_last_);
    models::TaskInputs in;
    in.input_ids = batch.input_ids;
    in.mask = batch.mask;
    if (two_stream_) return {model_->two_stream_forward(in, batch.query_mask).query_logits, batch.query_targets};
    return {model_->forward(in).causal_lm_logits, batch.targets};
  }
  std::vector<Ids> train_, val_;
  int64_t predict_last_;
  bool two_stream_;
  uint64_t seed_;
  BatchOrder order_;
};

void require_general_mask(const layers::AttentionSpec& spec, const std::string& where) {
  if (!spec.uses_logits())
    throw Error(fmt::format("task 'plm': {} '{}' cannot take the permutation mask (it takes causality, "
                            "padding and prefix lengths only); use softmax, talking-heads or a synthesizer kind",
                            where, spec.to_string()));
}

}  // namespace

std::unique_ptr<TrainingTask> make_plm(const RunConfig& config) {
  const auto& t = config.task;
  if (t.truncate < 2) throw Error("task 'plm': task.truncate must be at least 2 (a block predicts its tokens after the first)");
  if (t.predict_last < 0 || t.predict_last > t.truncate - 1)
    throw Error(fmt::format("task.predict_last: {} is outside [0, {}] (0 = all; a block of task.truncate = {} tokens "
                            "has {} predictions)", t.predict_last, t.truncate - 1, t.truncate, t.truncate - 1));
  if (config.model.init.empty()) require_general_mask(config.model.attention.value(), "model.attention");
  if (t.two_stream && config.model.init.empty() && config.model.positions.value() == layers::PositionEncoding::None)
    throw Error("task.two_stream: model.positions = none gives the query stream nothing to know its position by "
                "(use learned or sinusoidal)");
  if (t.data.empty()) throw Error(fmt::format("task '{}' needs task.data (text files separated by commas)", t.name));
  auto tokenizer = task_tokenizer(config);
  auto blocks = text_blocks(config, tokenizer, t.truncate, special_id(tokenizer, {"<|endoftext|>", "[SEP]", "</s>"}));
  models::HeadsConfig heads;
  heads.causal_lm = true;
  heads.query_stream = t.two_stream;
  // Not causal: the permutation mask decides what each position sees. GPT-2's blocks (pre-LN) by
  // default: on the permutation test task BERT's post-LN blocks of the same size stayed at
  // uniform over the symbols for 1000 steps where GPT-2's learned (docs/training.md).
  RunConfig settings = config;
  if (settings.model.family->task_default()) settings.model.family = models::ModelFamily::Gpt2.name();
  auto model = build_model(settings, tokenizer.vocab_size(), t.truncate, false, heads);
  if (!config.model.init.empty()) {
    require_general_mask(model->config().attention, "the attention of model.init " + config.model.init + ",");
    if (model->config().attention.causal)
      throw Error(fmt::format("task 'plm': model.init {} is a causal model; the permutation mask needs a "
                              "bidirectional one", config.model.init));
    if (t.two_stream && model->config().positions == layers::PositionEncoding::None)
      throw Error(fmt::format("task.two_stream: model.init {} has no position encoding, so the query stream "
                              "cannot know its position", config.model.init));
  }
  return std::make_unique<PermutationLanguageModelTask>(model, config, std::move(blocks));
}

}  // namespace attnkit::train::detail
