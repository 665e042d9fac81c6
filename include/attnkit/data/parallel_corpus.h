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
// Bible splits are by book, so that validation and test books are never seen in training:
// the defaults (kDefaultValidationBooks, kDefaultTestBooks) mix Old and New Testament narrative,
// poetry-free prose and letters. A user TSV is split in file order: the last test_fraction of
// its lines is the test file, the block before it the validation file (contiguous blocks keep
// neighbouring lines of one document in one split).
//
// No LibTorch.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

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

inline const std::vector<std::string> kDefaultValidationBooks = {"Ruth", "Jonah", "Philippians",
                                                                 "Colossians"};
inline const std::vector<std::string> kDefaultTestBooks = {"Esther", "Mark", "Galatians"};

struct ParallelSplits {
  std::vector<ParallelPair> train, validation, test;
};

// Splits by book. Error when a book is named in both lists, or when a named book has no pair (a
// misspelt name would otherwise leave its verses in training).
ParallelSplits split_by_book(const std::vector<ParallelPair>& pairs,
                             const std::vector<std::string>& validation_books,
                             const std::vector<std::string>& test_books);

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
