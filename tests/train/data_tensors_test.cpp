// The data sets as tensors (train/data_tensors.h): ListOps and synthetic-task batches, and
// classification data tokenised, truncated and padded.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/vocabulary.h"
#include "attnkit/train/data_tensors.h"

namespace attnkit::train {
namespace {

// The sort task of tests/data/synthetic_tasks_test.cpp's task_options(SyntheticTask::kSort):
// task, min_length 5, max_length 40, num_symbols 7, num_keys 50, num_values 9.
data::SyntheticTaskOptions sort_options() { return {data::SyntheticTask::kSort, 5, 40, 7, 50, 9}; }

// The vocabulary of tests/data/text_datasets_test.cpp's squad_tokenizer().
text::Tokenizer squad_tokenizer() {
  return text::make_bert_tokenizer(text::Vocabulary::from_tokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "beyonce", "sang", "at", "super", "bowl", "50", "in", "santa", "clara",
       ".", "who", "where", "which", "game", "lost", "?"}));
}

TEST(ListOpsBatch, PadsTruncatesAndLabels) {
  using V = data::ListOpsVocabulary;
  const std::vector<data::ListOpsExample> examples = {{"( ( ( [MAX 2 ) 9 ) ] )", 9}, {"4", 4}};
  ListOpsBatch batch = make_listops_batch(examples);
  ASSERT_EQ(batch.ids.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(batch.ids.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(batch.ids, at::tensor({V::kMax, V::kFirstDigit + 2, V::kFirstDigit + 9, V::kClose,
                                               V::kFirstDigit + 4, V::kPad, V::kPad, V::kPad}, at::kLong).view({2, 4})));
  EXPECT_TRUE(at::equal(batch.lengths, at::tensor({4, 1}, at::kLong)));
  EXPECT_TRUE(at::equal(batch.labels, at::tensor({9, 4}, at::kLong)));

  batch = make_listops_batch(examples, /*max_length=*/3);  // LRA: inputs[:max_length]
  EXPECT_EQ(batch.ids.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(at::equal(batch.lengths, at::tensor({3, 1}, at::kLong)));
  batch = make_listops_batch(examples, /*max_length=*/6, /*pad_to_max_length=*/true);
  EXPECT_EQ(batch.ids.sizes(), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(batch.ids[0][5].item<int64_t>(), V::kPad);

  EXPECT_THROW(make_listops_batch({}), Error);
  EXPECT_THROW(make_listops_batch({{"[MAX 1 2 ]", 11}}), Error);
}

TEST(SyntheticBatch, ShiftsAndIgnoresPromptPositions) {
  using V = data::SyntheticVocabulary;
  constexpr int64_t kIgnore = SyntheticBatch::kIgnoreIndex;
  // copy of (3 4 5): sequence 3 4 5 <sep> 3 4 5; recall: 2 9 <sep> 2 -> 9.
  const std::vector<data::SyntheticExample> examples = {{{3, 4, 5, V::kSeparator}, {3, 4, 5}},
                                                        {{2, 9, V::kSeparator, 2}, {9}}};
  const SyntheticBatch batch = make_synthetic_batch(examples);
  ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{2, 6}));
  EXPECT_TRUE(at::equal(batch.inputs, at::tensor({3, 4, 5, 1, 3, 4,  //
                                                  2, 9, 1, 2, 0, 0}, at::kLong).view({2, 6})));
  const std::vector<int64_t> expected_targets = {kIgnore, kIgnore, kIgnore, 3, 4, 5,  //
                                                 kIgnore, kIgnore, kIgnore, 9, kIgnore, kIgnore};
  EXPECT_TRUE(at::equal(batch.targets, at::tensor(expected_targets, at::kLong).view({2, 6})));
  EXPECT_TRUE(at::equal(batch.lengths, at::tensor({6, 4}, at::kLong)));

  // Generated examples: the kept targets are exactly the target tokens, in order.
  const auto generated = data::generate_synthetic_task(sort_options(), 5, 8);
  const SyntheticBatch sorted = make_synthetic_batch(generated);
  for (size_t b = 0; b < generated.size(); ++b) {
    const at::Tensor row = sorted.targets[static_cast<int64_t>(b)];
    const at::Tensor kept = row.masked_select(row.ne(kIgnore));
    EXPECT_TRUE(at::equal(kept, at::tensor(generated[b].target, at::kLong)));
  }
  EXPECT_THROW(make_synthetic_batch({}), Error);
  EXPECT_THROW(make_synthetic_batch({{{1, 2}, {}}}), Error);
}

TEST(ClassificationData, TensorsTruncatePadAndMask) {
  // [CLS] text [SEP]; "sang at" -> 4 ids, the empty text -> [CLS] [SEP], a long text cut at 5.
  const text::Tokenizer tokenizer = squad_tokenizer();
  data::ClassificationData data;
  data.examples = {{"sang at", 1}, {"", 0}, {"who sang at super bowl 50", 1}};
  data.labels = {"a", "b"};
  const auto t = classification_tensors(data, tokenizer, 5, 0);
  ASSERT_EQ(t.input_ids.sizes(), (std::vector<int64_t>{3, 5}));
  const std::vector<std::vector<int64_t>> ids = {{2, 5, 6, 3, 0}, {2, 3, 0, 0, 0}, {2, 14, 5, 6, 7}};
  const std::vector<int64_t> lengths = {4, 2, 5};
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      EXPECT_EQ(t.input_ids[i][j].item<int64_t>(), ids[i][j]) << i << "," << j;
      EXPECT_EQ(t.attention_mask[i][j].item<int64_t>(), j < lengths[i] ? 1 : 0) << i << "," << j;
    }
  EXPECT_EQ(t.labels[0].item<int64_t>(), 1);
  EXPECT_EQ(t.labels[1].item<int64_t>(), 0);
  EXPECT_EQ(classification_tensors({}, tokenizer, 5, 0).input_ids.size(0), 0);
}

}  // namespace
}  // namespace attnkit::train
