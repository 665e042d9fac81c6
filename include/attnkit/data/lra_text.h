#pragma once
// The Long-Range Arena's byte-level text tasks, built from Debian's fortunes (LRA's IMDB reviews
// and ACL Anthology papers cannot be downloaded here): stand-ins, named as such in docs/lra.md.
//
// lra-text: a passage is consecutive fortunes of ONE category file joined by "\n", cut to a length
// drawn uniformly in [min_bytes, max_bytes]; its label is the category. There is no header, so the
// label is not written in the first bytes (what can still leak: style, topic words, formatting).
// lra-retrieval: pairs of passages (left, right), label 1 when both come from one category, 0
// when not; LRA's two-tower setup encodes each side alone.
//
// Splits are by fortune: every fortune goes to test, val or train by a hash of its text (corpus.h's
// in_validation_split: the bucket of FNV-1a 64 modulo 10^6, below test_fraction · 10^6 → test,
// below (test_fraction + val_fraction) · 10^6 → val), BEFORE passages are built, so no fortune is
// in two splits. Passages start every `stride` fortunes of a split's run of one category (they may
// overlap within a split when stride is below a passage's fortune count). Labels are balanced per
// split by keeping, for each category, a seeded random choice of as many passages as the smallest
// category has. Retrieval pairs are exactly half positive: each passage of the split is the left
// side of one pair; for alternate passages (in a seeded order) the right side is a passage of the
// same category sharing no fortune with it, else one of another category.
//
// Files (`attnkit data lra-text` / `lra-retrieval`): text_{train,val,test}.tsv with lines
// "category<TAB>text", retrieval_{train,val,test}.tsv with "label<TAB>left<TAB>right" (label 0 or 1);
// texts escape '\\' as "\\\\", newline as "\\n", tab as "\\t", carriage return as "\\r".
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::data {

// Four English categories with the most text whose fortunes do not announce their file: computers,
// people, science, songs-poems (docs/lra.md says why these).
const std::vector<std::string>& default_text_categories();

struct LraTextOptions {
  std::vector<std::string> categories = default_text_categories();
  std::string fortunes_dir = "/usr/share/games/fortunes";
  int64_t min_bytes = 1024;
  int64_t max_bytes = 4096;
  int64_t stride = 1;  // fortunes between the starts of consecutive passages of a category
  double val_fraction = 0.1;
  double test_fraction = 0.1;
  uint64_t seed = 0;
};

// The retrieval defaults: passages of 2–4K bytes.
LraTextOptions retrieval_text_options();

// One-line attnkit::Error for bad settings (bounds, fractions, fewer than 2 categories, a category
// named twice). Checked before anything is read.
void check_lra_text_options(const LraTextOptions& options);

struct TextPassage {
  int64_t label = 0;  // index into the categories
  std::string text;
  // The fortunes it joins: indices [first, end) into its category's fortunes of its split.
  size_t first = 0, end = 0;
};

struct LraTextSplits {
  std::vector<std::string> categories;
  std::vector<TextPassage> train, val, test;
};

// Reads the category files (read_documents, DocumentFormat::kFortune) and builds the balanced
// splits. Errors: a missing category file (naming the `fortunes` package), a category with no
// passage in a split.
LraTextSplits build_lra_text(const LraTextOptions& options);

// Splits the fortunes of one category as build_lra_text does: 0 train, 1 val, 2 test.
int split_of_fortune(const std::string& text, const LraTextOptions& options);

struct TextPair {
  int64_t label = 0;  // 1: same category
  std::string left, right;
};
// The pairs of one split's passages (at least two categories, and for a positive a second
// passage of the category with no shared fortune; passages without one are skipped).
std::vector<TextPair> make_retrieval_pairs(const std::vector<TextPassage>& passages, uint64_t seed);

std::string escape_tsv_text(const std::string& text);
// Throws attnkit::Error "bad escape" for a backslash not followed by \\, n, t or r.
std::string unescape_tsv_text(const std::string& text);

struct LraTextFiles {
  std::string train, val, test;
  size_t train_count = 0, val_count = 0, test_count = 0;
};
// Builds and writes text_{train,val,test}.tsv (atomically) under out_dir.
LraTextFiles write_lra_text(const LraTextOptions& options, const std::string& out_dir);
// Builds passages with these options and writes retrieval_{train,val,test}.tsv.
LraTextFiles write_lra_retrieval(const LraTextOptions& options, const std::string& out_dir);

// A text file read back: category names as written, texts unescaped.
struct LabelledTexts {
  std::vector<std::string> labels;
  std::vector<std::string> texts;
};
// Errors "<path>:<line>: ..." for a line without exactly one tab, an empty label or a bad escape.
LabelledTexts read_lra_text_file(const std::string& path);
// Errors "<path>:<line>: ..." for a line without exactly two tabs or a label other than 0 / 1.
std::vector<TextPair> read_lra_retrieval_file(const std::string& path);

}  // namespace attnkit::data
