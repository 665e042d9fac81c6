#pragma once
// The pretraining objectives of the mlm and plm tasks (src/train/tasks/mlm.cpp, plm.cpp), as pure
// functions of their inputs and a seed, so a resumed run draws what the uninterrupted one did.
//
//   masked LM (RoBERTa's recipe): every micro-batch masks afresh ("dynamic masking"). Each
//     ordinary token (or, with whole-word masking, each word: a WordPiece token and the "##"
//     pieces after it, and with a Chinese word list also each listed word of CJK characters) is
//     selected with probability p; a selected token becomes the mask token with
//     probability mask_fraction, a random ordinary token with probability random_fraction, and
//     stays itself otherwise. Special tokens ([CLS], [SEP], [PAD], ...) are never selected and never
//     drawn as the random replacement. The selected positions are the targets (their original ids).
//   permutation LM (XLNet through the mask): each example samples a factorisation order z (a
//     permutation of its positions); position i attends position j iff j comes no later than i in
//     z (ops::xlnet_masks' content mask). Single stream: i predicts the token that follows i in z.
//     With partial prediction only the last K tokens of the order are targets. The identity order
//     is the causal LM. A single stream does not know which position it predicts: its output at i
//     is the same whatever comes next in the order. Two streams (XLNet's query stream,
//     models::TaskModelImpl::two_stream_forward): the query stream at i attends the content
//     stream at the positions before i in z (the query mask, never i itself) and predicts the
//     token AT i, knowing i's position but not its token; the same tokens are targets.
#include "attnkit/text/tokenizer.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace attnkit::train {

// One random stream per (seed, stream): the same numbers on every platform (std::mt19937_64).
std::mt19937_64 pretraining_rng(uint64_t seed, uint64_t stream);

struct MaskingOptions {
  double probability = 0.15;      // share of ordinary tokens (or words) selected
  double mask_fraction = 0.8;     // of the selected: replaced by the mask token
  double random_fraction = 0.1;   // of the selected: replaced by a random ordinary token
  bool whole_word = false;        // select WordPiece words ("##" continuations) as a whole
  // Throws attnkit::Error naming the setting (task.mask_probability in (0, 1], task.mask_fraction
  // and task.random_fraction in [0, 1] with a sum <= 1).
  void validate() const;
};

// Chinese whole-word masking (Chinese-BERT-wwm's, as bert4keras builds it): BERT-style tokenizers
// split every CJK ideograph into a token of its own, so a Chinese word is a run of such tokens.
// The words of a word list, as sequences of ideographs; a run of CJK-character tokens is cut into
// words by greedy longest match against it (at each position the longest listed word that starts
// there; a character that starts no listed word is a unit of its own). Longest match, not a
// statistical segmenter: the result can differ from jieba's or a CRF's.
struct ChineseWordList {
  std::unordered_set<std::u32string> words;  // two or more ideographs, each a token of the tokenizer
  size_t longest = 0;                        // ideographs in the longest word
  size_t lines = 0;                          // words read from the file (before filtering)
};

// Reads a UTF-8 word list: one word per line, its first whitespace-separated field (so jieba's
// "word freq tag" dict.txt reads as is; a UTF-8 byte-order mark is skipped). Kept: the words of two
// or more CJK ideographs (text::unicode::is_cjk_ideograph) each of which the tokenizer has as a
// token; the rest can never match a run of CJK-character tokens. Throws attnkit::Error (one line,
// naming task.word_list) when the file cannot be read, is not UTF-8, lists no word, or keeps none.
ChineseWordList read_word_list(const std::string& path, const text::Tokenizer& tokenizer);

// What masking needs to know of a vocabulary, per id.
struct MaskingVocabulary {
  int64_t mask_id = 0;
  std::vector<char> special;       // never selected, never a random replacement
  std::vector<char> continuation;  // a WordPiece "##" piece: continues the word before it
  std::vector<int64_t> ordinary;   // the ids a random replacement is drawn from
  std::vector<char32_t> character; // the CJK ideograph a token is (the whole token), else 0
  ChineseWordList words;           // empty: no Chinese word grouping
};

// From a tokenizer: its special added tokens and the usual special names ([CLS], [SEP], [PAD],
// [MASK], [UNK], <s>, </s>, <pad>, <mask>, <unk>, <|endoftext|>); "##" pieces as continuations.
// Throws attnkit::Error when the tokenizer has no [MASK] / <mask> token.
MaskingVocabulary masking_vocabulary(const text::Tokenizer& tokenizer);

struct MaskedRows {
  std::vector<std::vector<int64_t>> inputs;  // the rows after replacement
  std::vector<std::vector<int64_t>> labels;  // the original id where selected, else kIgnoreLabel
};

// The units whole-word masking selects in one row: [first, last) ranges of ordinary tokens, in
// order. Without whole_word every ordinary token is a unit; with it a token and the "##" pieces
// after it are one, and with vocabulary.words each listed word found in a run of CJK-character
// tokens by greedy longest match (then "##" pieces after its last character join it too).
// Special tokens belong to no unit. Ids outside the vocabulary are an attnkit::Error.
std::vector<std::pair<size_t, size_t>> masking_units(const std::vector<int64_t>& row,
                                                     const MaskingVocabulary& vocabulary, bool whole_word);

// Masks `rows` (ids; any length, each row masked on its own) with the random stream (seed, stream).
// Ids outside the vocabulary are an attnkit::Error.
MaskedRows mask_tokens(const std::vector<const std::vector<int64_t>*>& rows, const MaskingVocabulary& vocabulary,
                       const MaskingOptions& options, uint64_t seed, uint64_t stream);

// A uniformly random factorisation order of 0..n-1 per row, from the stream (seed, stream).
std::vector<std::vector<int64_t>> sample_orders(size_t rows, int64_t n, uint64_t seed, uint64_t stream);

struct PermutationBatch {
  at::Tensor input_ids;  // [batch, n] int64
  at::Tensor mask;       // [batch, 1, n, n] bool: i may attend j iff rank(j) <= rank(i)
  at::Tensor targets;    // [batch, n] int64: the id next after i in the order, kIgnoreLabel where
                         // i is last or the next token is not among the last `predict_last`
  // Two streams: i may attend j iff rank(j) < rank(i); the target of the query stream at i is
  // i's own id where i is among the last `predict_last` of the order (the same tokens as
  // `targets`, each at its own position), else kIgnoreLabel.
  at::Tensor query_mask;     // [batch, 1, n, n] bool
  at::Tensor query_targets;  // [batch, n] int64
};

// rows: equal lengths n >= 2; orders: a permutation of 0..n-1 per row; predict_last in [0, n-1]
// (0 = every token after the first of the order). Throws attnkit::Error otherwise.
PermutationBatch permutation_batch(const std::vector<const std::vector<int64_t>*>& rows,
                                   const std::vector<std::vector<int64_t>>& orders, int64_t predict_last);

}  // namespace attnkit::train
