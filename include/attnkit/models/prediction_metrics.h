#pragma once
// Evaluation metrics over a model's predictions, accumulated batch by batch: the accuracy of the
// argmax over the counted positions, the mean cross entropy over them, and how many rows had every
// counted position right. The training tasks (train/) and the head analysis (analysis/heads.h)
// evaluate with it.
//
// Counted positions: labels other than kIgnoreLabel (task_model.h). Empty data, one rule for
// every caller: a batch without a counted position adds nothing (its rows included); with nothing
// counted, accuracy() and mean_loss() are NaN (0 / 0). Callers that must refuse empty data check
// counted() first and say why in their own words.
#include "attnkit/models/task_model.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace attnkit::models {

class PredictionMetrics {
 public:
  // One batch: logits [rows, ..., classes] against labels [rows, ...] int64 (cross_entropy's
  // shapes, e.g. [batch, labels] and [batch], or [batch, n, vocab] and [batch, n]).
  void add(const at::Tensor& logits, const at::Tensor& labels);
  // The same without the cross entropy (accuracy only; mean_loss() leaves the batch out).
  void add_predictions(const at::Tensor& logits, const at::Tensor& labels);

  int64_t counted() const { return counted_; }  // positions counted so far
  int64_t correct() const { return correct_; }  // of them, argmax == label
  // Rows of the batches added whose every counted position is right (a row without a counted
  // position in a batch that has some counts as right).
  int64_t rows_all_right() const { return rows_all_right_; }
  double accuracy() const;   // correct() / counted()
  double mean_loss() const;  // the cross entropy's mean over the positions add() counted

 private:
  void add_batch(const at::Tensor& logits, const at::Tensor& labels, bool with_loss);

  int64_t counted_ = 0, correct_ = 0, rows_all_right_ = 0, loss_counted_ = 0;
  double loss_sum_ = 0;  // Σ batch mean × batch count
};

}  // namespace attnkit::models
