// span: SQuAD-style extractive QA, scored by exact match and F1.
#include "task_common.h"

#include "attnkit/error.h"
#include "attnkit/metrics/metrics.h"

#include <fmt/format.h>

#include <limits>

namespace attnkit::train::detail {
namespace {

// Extractive QA (SQuAD JSON): encode_pair(question, context) truncated in the context, start and
// end labels on the first answer's tokens ([CLS], position 0, when there is none or it was cut
// away). Predictions take the best start <= end within the context (at most kMaxAnswerTokens
// long), map back to the context's characters and are scored with SQuAD's exact match and F1.
struct SpanRow {
  Ids ids;
  int64_t start = 0, end = 0;
  std::vector<std::pair<uint32_t, uint32_t>> offsets;  // per token, characters of the context
  std::vector<int32_t> sequence_ids;
  const data::SquadExample* example = nullptr;
};

// Characters [begin, end) (Unicode code points) of UTF-8 text.
std::string code_point_substring(const std::string& text, size_t begin, size_t end) {
  size_t cp = 0, from = text.size(), to = text.size();
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;
    if (cp == begin) from = std::min(from, i);
    if (cp == end) {
      to = i;
      break;
    }
    ++cp;
  }
  return from < to ? text.substr(from, to - from) : std::string();
}

class SpanTask : public ModelTask {
 public:
  static constexpr int64_t kMaxAnswerTokens = 30;

  SpanTask(models::TaskModel model, const RunConfig& config, data::SquadData train, data::SquadData val,
           std::vector<SpanRow> train_rows, std::vector<SpanRow> val_rows, int64_t pad)
      : ModelTask(std::move(model), config), train_data_(std::move(train)), val_data_(std::move(val)),
        train_(std::move(train_rows)), val_(std::move(val_rows)), pad_(pad),
        order_(train_.size(), config.task.batch_size, config.trainer.seed) {}

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const SpanRow*> rows;
    for (size_t i : order_.batch(index, rank, world)) rows.push_back(&train_[i]);
    auto [start_logits, end_logits, mask] = run(rows);
    auto [starts, ends] = positions(rows);
    return {models::span_loss(start_logits, end_logits, starts, ends), mask.sum().item<int64_t>()};
  }

  std::map<std::string, double> evaluate() override {
    double loss = 0;
    std::vector<std::string> predictions;
    std::vector<std::vector<std::string>> gold;
    for_each_batch(val_, batch_size_, [&](size_t, const std::vector<const SpanRow*>& rows) {
      auto [start_logits, end_logits, mask] = run(rows);
      auto [starts, ends] = positions(rows);
      loss += models::span_loss(start_logits, end_logits, starts, ends).item<double>() * rows.size();
      auto start_cpu = start_logits.to(at::kDouble).contiguous(), end_cpu = end_logits.to(at::kDouble).contiguous();
      for (size_t b = 0; b < rows.size(); ++b) {
        predictions.push_back(predict(*rows[b], start_cpu[b].data_ptr<double>(), end_cpu[b].data_ptr<double>()));
        std::vector<std::string> answers;
        for (const auto& a : rows[b]->example->answers) answers.push_back(a.text);
        gold.push_back(std::move(answers));
      }
    });
    const auto scores = metrics::squad_scores(predictions, gold);
    return {{"loss", loss / static_cast<double>(val_.size())},
            {"exact_match", scores.exact_match},
            {"f1", scores.f1}};
  }
  std::string primary_metric() const override { return "f1"; }
  bool higher_is_better() const override { return true; }

 private:
  // The best-scoring span inside the context, as text of the context ("" when none fits).
  static std::string predict(const SpanRow& row, const double* start, const double* end) {
    double best = -std::numeric_limits<double>::infinity();
    int64_t best_s = -1, best_e = -1;
    const int64_t n = static_cast<int64_t>(row.ids.size());
    for (int64_t s = 0; s < n; ++s) {
      if (row.sequence_ids[s] != 1) continue;
      for (int64_t e = s; e < std::min(n, s + kMaxAnswerTokens); ++e) {
        if (row.sequence_ids[e] != 1) break;
        if (start[s] + end[e] > best) {
          best = start[s] + end[e];
          best_s = s;
          best_e = e;
        }
      }
    }
    if (best_s < 0) return {};
    return code_point_substring(row.example->context, row.offsets[best_s].first, row.offsets[best_e].second);
  }
  std::pair<at::Tensor, at::Tensor> positions(const std::vector<const SpanRow*>& rows) const {
    std::vector<int64_t> starts, ends;
    for (const auto* r : rows) {
      starts.push_back(r->start);
      ends.push_back(r->end);
    }
    return {torch::tensor(starts, at::kLong), torch::tensor(ends, at::kLong)};
  }
  std::tuple<at::Tensor, at::Tensor, at::Tensor> run(const std::vector<const SpanRow*>& rows) {
    std::vector<const Ids*> ids;
    for (const auto* r : rows) ids.push_back(&r->ids);
    auto [input, mask] = models::right_padded_ids(ids, pad_);
    models::TaskInputs in;
    in.input_ids = input;
    in.attention_mask = mask;
    auto out = model_->forward(in);
    // Padding can never be a prediction or a label.
    const auto blocked = mask.eq(0);
    return {out.start_logits.masked_fill(blocked, -1e4), out.end_logits.masked_fill(blocked, -1e4), mask};
  }
  data::SquadData train_data_, val_data_;  // the rows point into these
  std::vector<SpanRow> train_, val_;
  int64_t pad_;
  BatchOrder order_;
};

}  // namespace

std::unique_ptr<TrainingTask> make_span(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty()) throw Error("task 'span' needs task.data (the SQuAD-style training JSON)");
  auto tokenizer = task_tokenizer(config);
  text::TruncationOptions truncation;
  truncation.max_length = static_cast<size_t>(t.truncate);
  truncation.strategy = text::TruncationStrategy::kOnlySecond;  // cut the context, keep the question
  tokenizer.set_truncation(truncation);
  tokenizer.set_padding(std::nullopt);
  const auto options = read_options(config);
  auto train = read_reported<data::SquadData>(t.data, [&](const std::string& p) { return data::read_squad_json(p, options); });
  auto val = read_reported<data::SquadData>(evaluation_path(t.data, t.eval_split),
                                      [&](const std::string& p) { return data::read_squad_json(p, options); });
  if (t.eval_examples > 0 && static_cast<int64_t>(val.examples.size()) > t.eval_examples)
    val.examples.resize(t.eval_examples);
  auto features = [&](const data::SquadData& data) {
    std::vector<SpanRow> rows;
    for (const auto& example : data.examples) {
      const auto f = data::make_squad_feature(tokenizer, example);
      SpanRow row;
      row.ids.assign(f.encoding.ids.begin(), f.encoding.ids.end());
      row.start = static_cast<int64_t>(f.start_position);
      row.end = static_cast<int64_t>(f.end_position);
      row.offsets = f.encoding.offsets;
      row.sequence_ids = f.encoding.sequence_ids;
      row.example = &example;
      rows.push_back(std::move(row));
    }
    return rows;
  };
  auto train_rows = features(train), val_rows = features(val);
  models::HeadsConfig heads;
  heads.span = true;
  auto model = build_model(config, tokenizer.vocab_size(), t.truncate, false, heads);
  const int64_t pad = pad_id(tokenizer);
  // The rows point at examples inside the SquadData objects; moving a vector keeps its elements.
  return std::make_unique<SpanTask>(model, config, std::move(train), std::move(val), std::move(train_rows),
                                    std::move(val_rows), pad);
}

}  // namespace attnkit::train::detail
