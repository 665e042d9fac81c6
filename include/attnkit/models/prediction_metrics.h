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
#include <vector>

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

  // Per-row statistics, kept once record_rows() is called (before the first batch): for each row of
  // the batches add() counted that has a counted position, in order, its summed cross entropy
  // (natural log; float64 sum of the per-position losses) and its counted positions — the items of
  // metrics::perplexity_item_statistics, whose corpus score is exp(mean_loss()) up to rounding —
  // and its right positions (argmax == label): with row_counts() the items of
  // metrics::accuracy_item_statistics, whose corpus score is accuracy().
  void record_rows() { record_rows_ = true; }
  const std::vector<double>& row_loss_sums() const { return row_loss_sums_; }
  const std::vector<double>& row_counts() const { return row_counts_; }
  const std::vector<double>& row_correct() const { return row_correct_; }

 private:
  void add_batch(const at::Tensor& logits, const at::Tensor& labels, bool with_loss);
  void add_rows(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& counted,
                const at::Tensor& right);

  int64_t counted_ = 0, correct_ = 0, rows_all_right_ = 0, loss_counted_ = 0;
  double loss_sum_ = 0;  // Σ batch mean × batch count
  bool record_rows_ = false;
  std::vector<double> row_loss_sums_, row_counts_, row_correct_;
};

}  // namespace attnkit::models
