#include "attnkit/models/prediction_metrics.h"

namespace attnkit::models {

void PredictionMetrics::add(const at::Tensor& logits, const at::Tensor& labels) {
  add_batch(logits, labels, true);
}

void PredictionMetrics::add_predictions(const at::Tensor& logits, const at::Tensor& labels) {
  add_batch(logits, labels, false);
}

void PredictionMetrics::add_batch(const at::Tensor& logits, const at::Tensor& labels,
                                  bool with_loss) {
  const at::Tensor counted = labels.ne(kIgnoreLabel);
  const int64_t count = counted.sum().item<int64_t>();
  if (count == 0) return;
  const at::Tensor right = logits.argmax(-1).eq(labels).logical_and(counted);
  if (with_loss) {
    loss_sum_ += cross_entropy(logits, labels).item<double>() * static_cast<double>(count);
    loss_counted_ += count;
    if (record_rows_) add_rows(logits, labels, counted, right);
  }
  counted_ += count;
  correct_ += right.sum().item<int64_t>();
  const int64_t rows = labels.dim() == 0 ? 1 : labels.size(0);
  rows_all_right_ +=
      right.reshape({rows, -1}).sum(1).eq(counted.reshape({rows, -1}).sum(1)).sum().item<int64_t>();
}

void PredictionMetrics::add_rows(const at::Tensor& logits, const at::Tensor& labels,
                                 const at::Tensor& counted, const at::Tensor& right) {
  const int64_t rows = labels.dim() == 0 ? 1 : labels.size(0);
  const int64_t classes = logits.size(-1);
  const at::Tensor losses =
      at::cross_entropy_loss(logits.reshape({-1, classes}), labels.reshape({-1}).to(at::kLong), {},
                             at::Reduction::None, kIgnoreLabel);
  const at::Tensor sums = losses.to(at::kDouble).reshape({rows, -1}).sum(1).contiguous();
  const at::Tensor counts = counted.reshape({rows, -1}).sum(1).to(at::kDouble).contiguous();
  const at::Tensor rights = right.reshape({rows, -1}).sum(1).to(at::kDouble).contiguous();
  const double* sum = sums.data_ptr<double>();
  const double* count = counts.data_ptr<double>();
  const double* correct = rights.data_ptr<double>();
  for (int64_t row = 0; row < rows; ++row) {
    if (count[row] == 0) continue;
    row_loss_sums_.push_back(sum[row]);
    row_counts_.push_back(count[row]);
    row_correct_.push_back(correct[row]);
  }
}

double PredictionMetrics::accuracy() const {
  return static_cast<double>(correct_) / static_cast<double>(counted_);
}

double PredictionMetrics::mean_loss() const {
  return loss_sum_ / static_cast<double>(loss_counted_);
}

}  // namespace attnkit::models
