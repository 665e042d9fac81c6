// Batch encoding: threads give the same encodings as one at a time, in input order.
#include <gtest/gtest.h>

#include "attnkit/error.h"
#include "attnkit/text/trainer.h"
#include "reference_support.h"

namespace attnkit::text {
namespace {

TEST(BatchEncoding, ThreadsMatchSequentialEncoding) {
  BpeTrainerOptions options;
  options.vocab_size = 800;
  Tokenizer tokenizer = train_byte_level_bpe({testing::fortune_path("computers")}, options);
  std::vector<EncodeInput> batch;
  for (const auto& line : testing::fortune_lines("people", 500)) batch.push_back({line, std::nullopt});
  for (const auto& text : testing::varied_texts()) batch.push_back({text, std::string("second text")});
  const auto sequential = tokenizer.encode_batch(batch, 1);
  for (int threads : {0, 2, 3, 8}) {
    const auto parallel = tokenizer.encode_batch(batch, threads);
    ASSERT_EQ(parallel.size(), batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      EXPECT_EQ(parallel[i].ids, sequential[i].ids) << threads << " threads, input " << i;
      EXPECT_EQ(parallel[i].offsets, sequential[i].offsets) << threads << " threads, input " << i;
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const Encoding single = batch[i].second ? tokenizer.encode_pair(batch[i].first, *batch[i].second) : tokenizer.encode(batch[i].first);
    EXPECT_EQ(sequential[i].ids, single.ids) << i;
  }
}

TEST(BatchEncoding, ErrorsInWorkerThreadsReachTheCaller) {
  BpeTrainerOptions options;
  options.vocab_size = 400;
  Tokenizer tokenizer = train_byte_level_bpe({testing::fortune_path("computers")}, options);
  TruncationOptions truncation;
  truncation.max_length = 2;
  truncation.strategy = TruncationStrategy::kOnlySecond;
  tokenizer.set_truncation(truncation);
  std::vector<EncodeInput> batch(300, EncodeInput{"a long enough first text", std::nullopt});
  EXPECT_THROW(tokenizer.encode_batch(batch, 4), Error);
}

}  // namespace
}  // namespace attnkit::text
