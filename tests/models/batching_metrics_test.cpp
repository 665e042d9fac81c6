// The models' shared helpers: right padding of id rows (models/batching.h), the evaluation
// metrics the training tasks and the head analysis share (models/prediction_metrics.h) with their
// empty-data rule, and the tied / untied language-model head weight (models/transformer_model.h).
#include "attnkit/models/batching.h"
#include "attnkit/models/prediction_metrics.h"
#include "attnkit/models/transformer_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace {

using attnkit::models::kIgnoreLabel;
using attnkit::models::PredictionMetrics;
using attnkit::models::right_padded_ids;

TEST(RightPaddedIds, PadsAfterEachRowToTheLongest) {
  const std::vector<std::vector<int64_t>> rows{{5, 6, 7}, {8}, {}};
  auto padded = right_padded_ids(rows, 0);
  EXPECT_TRUE(padded.ids.equal(torch::tensor({5, 6, 7, 8, 0, 0, 0, 0, 0}, torch::kLong).view({3, 3})));
  EXPECT_TRUE(padded.attention_mask.equal(
      torch::tensor({1, 1, 1, 1, 0, 0, 0, 0, 0}, torch::kLong).view({3, 3})));
  // The pointer form gives the same; the padding value is the caller's (kIgnoreLabel for labels).
  std::vector<const std::vector<int64_t>*> pointers{&rows[1], &rows[0]};
  auto labels = right_padded_ids(pointers, kIgnoreLabel);
  EXPECT_TRUE(labels.ids.equal(
      torch::tensor(std::vector<int64_t>{8, kIgnoreLabel, kIgnoreLabel, 5, 6, 7}).view({2, 3})));
}

TEST(RightPaddedIds, EmptyRowsGiveOneColumn) {
  auto padded = right_padded_ids(std::vector<std::vector<int64_t>>{{}, {}}, 3);
  EXPECT_EQ(padded.ids.sizes(), (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(padded.ids.eq(3).all().item<bool>());
  EXPECT_TRUE(padded.attention_mask.eq(0).all().item<bool>());
  EXPECT_EQ(right_padded_ids(std::vector<std::vector<int64_t>>{}, 0).ids.sizes(),
            (std::vector<int64_t>{0, 1}));
}

TEST(PredictionMetrics, CountsOnlyLabelledPositions) {
  // Two rows of three positions, four classes; argmax per position written out.
  const at::Tensor predicted = torch::tensor({1, 2, 3, 0, 0, 1}, torch::kLong).view({2, 3});
  const at::Tensor logits = torch::one_hot(predicted, 4).to(torch::kDouble) * 3.0;
  const at::Tensor labels =
      torch::tensor(std::vector<int64_t>{1, 2, kIgnoreLabel, 0, 3, kIgnoreLabel}).view({2, 3});
  PredictionMetrics metrics;
  metrics.add(logits, labels);
  EXPECT_EQ(metrics.counted(), 4);
  EXPECT_EQ(metrics.correct(), 3);
  EXPECT_EQ(metrics.rows_all_right(), 1);  // row 0: both counted positions right
  EXPECT_DOUBLE_EQ(metrics.accuracy(), 0.75);
  EXPECT_DOUBLE_EQ(metrics.mean_loss(),
                   attnkit::models::cross_entropy(logits, labels).item<double>());
  // A second batch weighs by its counted positions; add_predictions leaves the loss alone.
  const double loss = metrics.mean_loss();
  metrics.add_predictions(logits.narrow(0, 0, 1), labels.narrow(0, 0, 1));
  EXPECT_EQ(metrics.counted(), 6);
  EXPECT_DOUBLE_EQ(metrics.accuracy(), 5.0 / 6.0);
  EXPECT_DOUBLE_EQ(metrics.mean_loss(), loss);
}

TEST(PredictionMetrics, RecordedRowsSumEachRowsCountedLosses) {
  // Three rows of four positions over five classes, float32 logits as a model gives them; row 1
  // has no counted position and is left out. Oracle: float64 log-softmax written out.
  torch::manual_seed(3);
  const at::Tensor logits = torch::randn({3, 4, 5}) * 2.0;
  const at::Tensor labels = torch::tensor(std::vector<int64_t>{4, 0, kIgnoreLabel, 2, kIgnoreLabel, kIgnoreLabel,
                                                               kIgnoreLabel, kIgnoreLabel, 1, 1, 3, kIgnoreLabel})
                                .view({3, 4});
  PredictionMetrics metrics;
  metrics.record_rows();
  metrics.add(logits, labels);
  metrics.add_predictions(logits, labels);  // no loss: no rows either
  const at::Tensor log_p = logits.to(torch::kDouble).log_softmax(-1);
  std::vector<double> expected_sums, expected_counts;
  for (int64_t row : {0, 2}) {
    double sum = 0, count = 0;
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t label = labels[row][t].item<int64_t>();
      if (label == kIgnoreLabel) continue;
      sum -= log_p[row][t][label].item<double>();
      count += 1;
    }
    expected_sums.push_back(sum);
    expected_counts.push_back(count);
  }
  ASSERT_EQ(metrics.row_loss_sums().size(), 2u);
  EXPECT_EQ(metrics.row_counts(), expected_counts);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(metrics.row_loss_sums()[i], expected_sums[i], 1e-5);
  // Their corpus score is the printed perplexity's.
  EXPECT_NEAR((metrics.row_loss_sums()[0] + metrics.row_loss_sums()[1]) / 6.0, metrics.mean_loss(), 1e-6);
  // Each row's right positions (argmax == label, counted ones only).
  std::vector<double> expected_correct;
  for (int64_t row : {0, 2}) {
    double right = 0;
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t label = labels[row][t].item<int64_t>();
      if (label != kIgnoreLabel && logits[row][t].argmax().item<int64_t>() == label) right += 1;
    }
    expected_correct.push_back(right);
  }
  EXPECT_EQ(metrics.row_correct(), expected_correct);
  // Not recorded unless asked.
  PredictionMetrics plain;
  plain.add(logits, labels);
  EXPECT_TRUE(plain.row_loss_sums().empty());
}

TEST(PredictionMetrics, ClassificationRowsAreOnePositionEach) {
  const at::Tensor logits = torch::tensor({{2.0, 0.0}, {0.0, 1.0}, {3.0, 0.0}});
  PredictionMetrics metrics;
  metrics.add(logits, torch::tensor({0, 0, 0}, torch::kLong));
  EXPECT_EQ(metrics.counted(), 3);
  EXPECT_EQ(metrics.rows_all_right(), 2);
  EXPECT_DOUBLE_EQ(metrics.accuracy(), 2.0 / 3.0);
}

TEST(PredictionMetrics, EmptyDataIsNotANumber) {
  PredictionMetrics metrics;
  EXPECT_EQ(metrics.counted(), 0);
  EXPECT_TRUE(std::isnan(metrics.accuracy()));
  EXPECT_TRUE(std::isnan(metrics.mean_loss()));
  // A batch with nothing counted adds nothing, its rows included.
  metrics.add(torch::zeros({2, 3, 4}), torch::full({2, 3}, kIgnoreLabel, torch::kLong));
  EXPECT_EQ(metrics.counted(), 0);
  EXPECT_EQ(metrics.rows_all_right(), 0);
  EXPECT_TRUE(std::isnan(metrics.accuracy()));
}

TEST(LmHeadWeight, OwnHeadElseTheWordEmbeddings) {
  attnkit::models::TransformerModel model(attnkit::models::TransformerConfig::gpt2(20, 8, 1, 2));
  EXPECT_TRUE(attnkit::models::lm_head_weight({}, *model).is_same(model->word_embeddings()));
  const at::Tensor own = torch::randn({20, 8});
  EXPECT_TRUE(attnkit::models::lm_head_weight(own, *model).is_same(own));
}

}  // namespace
