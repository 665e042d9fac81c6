#pragma once
// Oniguruma, the regex engine of the Hugging Face tokenizers library (its `onig` binding), for the
// patterns of tokenizer.json's Split pre-tokenizer and Replace decoder (internal to src/text).
// Patterns use Oniguruma's default syntax and options, as that binding compiles them; matches are
// found as its find_iter finds them (an empty match right after the previous match is skipped).
// Every search is bounded (a retry limit): a pattern that backtracks without end on some text
// gives an attnkit::Error instead of running for ever.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attnkit::text {

class OnigRegex {
 public:
  // Throws attnkit::Error (one line, "<what>: regex '...' does not compile: <reason>").
  OnigRegex(const std::string& pattern, const std::string& what);
  ~OnigRegex();
  OnigRegex(const OnigRegex&) = delete;
  OnigRegex& operator=(const OnigRegex&) = delete;

  const std::string& pattern() const { return pattern_; }
  // Byte ranges [begin, end) of the successive matches in `utf8` (valid UTF-8).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view utf8) const;

 private:
  std::string pattern_;
  std::string what_;
  void* regex_ = nullptr;  // OnigRegex (kept out of this header)
};

// A literal string as an Oniguruma pattern that matches exactly it.
std::string onig_escape(std::string_view literal);

}  // namespace attnkit::text
