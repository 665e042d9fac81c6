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
  if (with_loss) {
    loss_sum_ += cross_entropy(logits, labels).item<double>() * static_cast<double>(count);
    loss_counted_ += count;
  }
  const at::Tensor right = logits.argmax(-1).eq(labels).logical_and(counted);
  counted_ += count;
  correct_ += right.sum().item<int64_t>();
  const int64_t rows = labels.dim() == 0 ? 1 : labels.size(0);
  rows_all_right_ +=
      right.reshape({rows, -1}).sum(1).eq(counted.reshape({rows, -1}).sum(1)).sum().item<int64_t>();
}

double PredictionMetrics::accuracy() const {
  return static_cast<double>(correct_) / static_cast<double>(counted_);
}

double PredictionMetrics::mean_loss() const {
  return loss_sum_ / static_cast<double>(loss_counted_);
}

}  // namespace attnkit::models
