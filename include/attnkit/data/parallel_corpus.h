#pragma once
// Parallel corpora for translation: verse-aligned Bibles from SWORD modules (Debian's
// sword-text-web, sword-text-sparv, sword-text-kjv, exported by libsword-utils' mod2imp), or any
// user TSV of "source<TAB>target" pairs, written as train / val / test TSV files.
//
// mod2imp prints a module as records: a line "$$$KEY" ("$$$Genesis 1:1") followed by the entry's
// OSIS markup on the next lines. Verses are the keys "BOOK C:V" with V >= 1 (V = 0 holds book and
// chapter introductions; "[ Module Heading ]" and the like are skipped). Their markup becomes
// plain text (osis_to_text). A pair is a key present in both modules whose text is non-empty in
// both, in the source module's order. Keys are matched as written, so the two modules should use
// the same versification or close ones (WEB: NRSVA, Reina-Valera 1909: KJV; they differ in a
// handful of verses, which then pair neighbouring verses).
//
// Bible splits are by book, so that validation and test books are never seen in training. A user
// TSV is split in file order: the last test_fraction of its lines is the test file, the block
// before it the validation file (contiguous blocks keep neighbouring lines of one document in one
// split).
//
// Leak-free splits. Books retell each other: the synoptic gospels (Matthew, Mark, Luke, and John's
// passion), Samuel and Kings with Chronicles, Kings with Isaiah 36-39 and Jeremiah 52, Ezra 2 with
// Nehemiah 7, Ephesians with Colossians, Jude with II Peter, psalms with II Samuel 22 and
// I Chronicles 16, the laws of Exodus with Leviticus and Deuteronomy. A held-out book with a
// parallel in training is a test of recall, not translation (the earlier default test books
// Esther, Mark and Galatians: 101 of their 994 verses shared at least half of their word 4-grams
// with one training verse, 99 of them in Mark). The defaults therefore hold out only books
// outside every such group, and leave each group whole in training: validation = Ruth,
// Philippians, I John, II John, III John (narrative and letters; the three letters of John
// together; of the earlier validation books Colossians left, as it retells Ephesians, and Jonah,
// whose chapter 2 the two modules number differently, so that its verses pair with neighbours);
// test = Esther, Daniel, Ecclesiastes, Galatians, James (narrative, wisdom, letters). Each of these
// books, measured against all the others, had at most 3.5% of its verses sharing half of their
// word 4-grams with one verse elsewhere (Ruth: 3 of 85, its genealogy; Mark: 99 of 678). What remains is measured
// (measure_split_overlap) and removed (drop_near_duplicates): a held-out pair whose source shares
// at least half of its word 4-grams with one training source (a genealogy, an epistolary formula)
// is dropped from validation and test;
// docs/training.md ("Translation") gives the numbers on the Debian modules.
//
// No LibTorch.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnkit::data {

// OSIS markup of one entry as plain text:
//   - <note>...</note> (footnotes, cross references) goes with its content; where it sat between
//     two words it leaves a space; before closing punctuation (. , ; : ! ? ) ] ” ’ ») it leaves
//     none and takes the spaces around it along ("coins</q> <note>..</note> <q>?" -> "coins?");
//   - the end of a book (<div eID=".." type="book"/>) ends the text: what follows in the entry is
//     back matter (WEB's glossary after Revelation 22:21) or the next book's front matter;
//   - <title>...</title> (section and book headings) goes with its content, except a canonical
//     title (canonical="true": the psalm superscriptions, which other translations print as
//     verse text), whose text stays followed by a space; <speaker>...</speaker> (the speaker
//     labels of the Song of Solomon) goes with its content too;
//   - any other tag goes, keeping its content; the block tags (div, p, l, lg, lb, list, item,
//     chapter, milestone, title) leave a space, the inline ones (w, q, transChange, seg, name,
//     ...) nothing, as the words inside them are spaced in the text itself;
//   - entities are decoded (&amp; &lt; &gt; &quot; &apos; &#N; &#xH;; an unknown one stays);
//   - whitespace runs become one space, and the ends are trimmed.
std::string osis_to_text(std::string_view markup);

struct SwordEntry {
  std::string key;   // "Genesis 1:1"
  std::string book;  // "Genesis"
  int chapter = 0;
  int verse = 0;
  std::string text;  // plain text (osis_to_text)
};

// The verses (V >= 1) of mod2imp output, in order, with their plain text (possibly empty).
// Records whose key is not "BOOK C:V" are skipped.
std::vector<SwordEntry> parse_mod2imp(std::string_view imp);

// mod2imp MODULE's output; Error "cannot run mod2imp (...): install libsword-utils" when it is
// missing, and Error with its first line of stderr when it fails or prints no verse.
std::string export_sword_module(const std::string& module);

struct ParallelPair {
  std::string book;  // "" for user pairs
  std::string key;   // the verse key, or "LINE N" for user pairs
  std::string source;
  std::string target;
};

// Pairs of the verses present and non-empty in both, in the source's order. A key that appears
// twice in a module keeps its first entry.
std::vector<ParallelPair> align_verses(const std::vector<SwordEntry>& source,
                                       const std::vector<SwordEntry>& target);

// See "Leak-free splits" above.
inline const std::vector<std::string> kDefaultValidationBooks = {"Ruth", "Philippians", "I John", "II John",
                                                                 "III John"};
inline const std::vector<std::string> kDefaultTestBooks = {"Esther", "Daniel", "Ecclesiastes", "Galatians", "James"};

struct ParallelSplits {
  std::vector<ParallelPair> train, validation, test;
};

// Splits by book. Error when a book is named in both lists, or when a named book has no pair (a
// misspelt name would otherwise leave its verses in training).
ParallelSplits split_by_book(const std::vector<ParallelPair>& pairs,
                             const std::vector<std::string>& validation_books,
                             const std::vector<std::string>& test_books);

// ---------------------------------------------------------------------------------------------
// Overlap between splits. A source's words are its maximal runs of letters and digits (Unicode
// categories L* and N*), lower-cased; its n-grams are its distinct word 4-grams, or for a source
// of one to three words the whole word sequence as one n-gram (a source without words has none).
// The overlap of a held-out source h with a training source t is |ngrams(h) ∩ ngrams(t)| /
// |ngrams(h)|: the share of h's n-grams found in that one training source.
constexpr double kDefaultNearDuplicateThreshold = 0.5;

// For each held-out pair, the largest overlap of its source with a single training source (0 for
// a source without n-grams), found through an inverted index from n-grams to training pairs.
std::vector<double> largest_training_overlap(const std::vector<ParallelPair>& held_out,
                                             const std::vector<ParallelPair>& train);

struct SplitOverlap {
  size_t pairs = 0;
  size_t at_least_half = 0;   // largest overlap >= 0.5
  size_t at_least_80 = 0;     // largest overlap >= 0.8
  size_t exact_repeats = 0;   // the same word sequence (non-empty) as some training source
};
struct SplitsOverlap {
  SplitOverlap validation, test;  // each against the training split
};
SplitOverlap measure_overlap(const std::vector<ParallelPair>& held_out, const std::vector<ParallelPair>& train);
SplitsOverlap measure_split_overlap(const ParallelSplits& splits);

struct NearDuplicatesDropped {
  size_t validation = 0, test = 0;
};
// Drops from validation and test every pair whose largest overlap with a training source is
// >= threshold (order kept). Error when threshold is not in (0, 1] or a split is left empty.
NearDuplicatesDropped drop_near_duplicates(ParallelSplits& splits,
                                           double threshold = kDefaultNearDuplicateThreshold);

// {"pairs", "at_least_50", "at_least_80", "exact_repeats"} (counts) and the shares
// "share_at_least_50", "share_at_least_80", "share_exact" (fractions of pairs).
nlohmann::json overlap_json(const SplitOverlap& overlap);

// Reads a user TSV of pairs (read_seq2seq_tsv's checks: exactly one tab, both sides non-blank,
// valid UTF-8; Error "FILE:LINE: ..." otherwise) and splits it in file order as described above.
// Error when a fraction is outside [0, 1), their sum is >= 1, or a split would be empty.
ParallelSplits split_user_pairs(const std::string& path, double validation_fraction,
                                double test_fraction);

struct ParallelFiles {
  std::string train, validation, test;
};

// Writes DIRECTORY/train.tsv, val.tsv and test.tsv ("source<TAB>target\n" lines; tabs and line
// breaks inside a side become spaces), creating DIRECTORY when needed. Each file is written
// atomically; nothing is written when a split is empty.
ParallelFiles write_parallel_splits(const ParallelSplits& splits, const std::string& directory);

}  // namespace attnkit::data
