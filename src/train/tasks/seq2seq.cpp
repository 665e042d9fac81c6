// seq2seq: UniLM on source<TAB>target pairs, scored by corpus BLEU of greedy decodes.
#include "task_common.h"

#include "attnkit/decode/language_models.h"
#include "attnkit/error.h"
#include "attnkit/metrics/metrics.h"

#include <fmt/format.h>

#include <sstream>

namespace attnkit::train::detail {
namespace {

// UniLM seq2seq (Dong et al. 2019) on "source<TAB>target" pairs: a BERT-family model whose
// masked-LM head predicts the next target token under the UniLM mask (token types 0 = source,
// 1 = target; see models::unilm_batch). Every attention kind trains it: linear attention and
// cosFormer take the mask as prefix lengths, in O(n), and decode from the source's summary. A pair longer than task.truncate loses tokens from the end
// of its longer side first. Evaluation: loss, perplexity and token accuracy of the target under
// teacher forcing, and corpus BLEU (4-gram) of greedy decodes against the (possibly cut) target,
// both taken as the whitespace-separated words of the tokenizer's decoded text. Decoding stops at
// [SEP], at the longest training target, or at task.truncate tokens of input.
struct PairRow {
  Ids source, target;
};

class Seq2SeqTask : public ModelTask {
 public:
  Seq2SeqTask(models::TaskModel model, const RunConfig& config, text::Tokenizer tokenizer,
              std::vector<PairRow> train, std::vector<PairRow> val, int64_t cls, int64_t sep, int64_t pad)
      : ModelTask(std::move(model), config), tokenizer_(std::move(tokenizer)), train_(std::move(train)),
        val_(std::move(val)), cls_(cls), sep_(sep), pad_(pad), max_length_(config.task.truncate),
        order_(train_.size(), config.task.batch_size, config.trainer.seed) {
    for (const auto& r : train_) longest_target_ = std::max<int64_t>(longest_target_, r.target.size());
  }

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const PairRow*> rows;
    for (size_t i : order_.batch(index, rank, world)) rows.push_back(&train_[i]);
    auto [logits, batch] = run(rows);
    return {models::cross_entropy(logits, batch.targets), batch.attention_mask.sum().item<int64_t>()};
  }

  std::map<std::string, double> evaluate() override {
    models::PredictionMetrics metrics;
    std::vector<std::vector<std::string>> hypotheses;
    std::vector<std::vector<std::vector<std::string>>> references;
    for_each_batch(val_, batch_size_, [&](size_t, const std::vector<const PairRow*>& rows) {
      auto [logits, batch] = run(rows);
      metrics.add(logits, batch.targets);
      std::vector<Ids> sources;
      for (const auto* r : rows) sources.push_back(r->source);
      const auto decoded =
          decode::unilm_greedy(model_, sources, cls_, sep_, pad_, longest_target_, max_length_);
      for (size_t b = 0; b < rows.size(); ++b) {
        hypotheses.push_back(words(decoded[b]));
        references.push_back({words(rows[b]->target)});
      }
    });
    const double loss = metrics.mean_loss();
    return {{"loss", loss},
            {"perplexity", std::exp(loss)},
            {"token_accuracy", metrics.accuracy()},
            {"bleu", metrics::corpus_bleu(hypotheses, references).score}};
  }
  std::string primary_metric() const override { return "bleu"; }
  bool higher_is_better() const override { return true; }

 private:
  std::vector<std::string> words(const Ids& ids) const {
    const std::string text = tokenizer_.decode(std::vector<uint32_t>(ids.begin(), ids.end()));
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  }
  std::pair<at::Tensor, models::UnilmBatch> run(const std::vector<const PairRow*>& rows) {
    std::vector<Ids> sources, targets;
    for (const auto* r : rows) {
      sources.push_back(r->source);
      targets.push_back(r->target);
    }
    auto batch = models::unilm_batch(sources, targets, cls_, sep_, pad_);
    // The UniLM mask explicitly (softmax, synthesizers) and as prefix lengths (linear attention
    // and cosFormer run it in O(n)).
    return {model_->forward(batch.inputs()).masked_lm_logits, std::move(batch)};
  }
  text::Tokenizer tokenizer_;
  std::vector<PairRow> train_, val_;
  int64_t cls_, sep_, pad_, max_length_;
  int64_t longest_target_ = 1;
  BatchOrder order_;
};

}  // namespace

std::unique_ptr<TrainingTask> make_seq2seq(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty()) throw Error("task 'seq2seq' needs task.data (the training TSV: source<TAB>target)");
  if (t.truncate < 5) throw Error("task 'seq2seq' needs task.truncate >= 5 ([CLS] src [SEP] tgt [SEP])");
  auto tokenizer = task_tokenizer(config);
  const auto cls = special_id(tokenizer, {"[CLS]", "<s>"});
  const auto sep = special_id(tokenizer, {"[SEP]", "</s>"});
  if (!cls || !sep)
    throw Error(fmt::format("task 'seq2seq': the tokenizer {} has no [CLS]/<s> or no [SEP]/</s> token",
                            t.tokenizer));
  auto [train, val] = encoded_pair_files(config, tokenizer, "seq2seq");
  auto cut = [&](std::vector<TranslationPair>& pairs) {
    std::vector<PairRow> rows;
    for (auto& p : pairs) {
      PairRow row{std::move(p.source), std::move(p.target)};
      while (static_cast<int64_t>(row.source.size() + row.target.size()) > t.truncate - 3)
        (row.source.size() >= row.target.size() ? row.source : row.target).pop_back();
      rows.push_back(std::move(row));
    }
    return rows;
  };
  auto train_rows = cut(train), val_rows = cut(val);
  models::HeadsConfig heads;
  heads.masked_lm = true;
  auto model = build_model(config, tokenizer.vocab_size(), t.truncate, false, heads, /*token_types=*/2);
  const int64_t pad = pad_id(tokenizer);
  return std::make_unique<Seq2SeqTask>(model, config, std::move(tokenizer), std::move(train_rows),
                                       std::move(val_rows), *cls, *sep, pad);
}

}  // namespace attnkit::train::detail
