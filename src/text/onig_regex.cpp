#include "onig_regex.h"

#include <fmt/format.h>
#include <oniguruma.h>

#include <mutex>

#include "attnkit/error.h"
#include "attnkit/text/unicode.h"

namespace attnkit::text {
namespace {

// Backtracking steps one search may take: ample for tokenizer patterns on any text (they take a
// few per character), small enough that a pathological pattern fails within a second or so.
constexpr unsigned long kRetryLimitInSearch = 50'000'000;

void initialize_oniguruma() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

std::string onig_message(int code, OnigErrorInfo* info) {
  OnigUChar buffer[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int length = info != nullptr ? onig_error_code_to_str(buffer, code, info) : onig_error_code_to_str(buffer, code);
  return std::string(reinterpret_cast<const char*>(buffer), length > 0 ? static_cast<size_t>(length) : 0);
}

}  // namespace

OnigRegex::OnigRegex(const std::string& pattern, const std::string& what) : pattern_(pattern), what_(what) {
  if (unicode::find_invalid_utf8(pattern) != std::string_view::npos)
    throw Error(fmt::format("{}: the regex is not valid UTF-8", what));
  initialize_oniguruma();
  regex_t* regex = nullptr;
  OnigErrorInfo info;
  const auto* begin = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int code = onig_new(&regex, begin, begin + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                            ONIG_SYNTAX_DEFAULT, &info);
  if (code != ONIG_NORMAL) throw Error(fmt::format("{}: regex '{}' does not compile: {}", what, pattern, onig_message(code, &info)));
  regex_ = regex;
}

OnigRegex::~OnigRegex() {
  if (regex_ != nullptr) onig_free(static_cast<regex_t*>(regex_));
}

std::vector<std::pair<size_t, size_t>> OnigRegex::find_all(std::string_view utf8) const {
  std::vector<std::pair<size_t, size_t>> matches;
  // Oniguruma trusts its input to be valid in the encoding; callers pass valid UTF-8.
  if (unicode::find_invalid_utf8(utf8) != std::string_view::npos)
    throw Error(fmt::format("{}: regex '{}' was given text that is not valid UTF-8", what_, pattern_));
  auto* regex = static_cast<regex_t*>(regex_);
  // One region and match parameter per thread, reused by every search (no allocation per call).
  thread_local std::unique_ptr<OnigRegion, void (*)(OnigRegion*)> region(onig_region_new(),
                                                                         [](OnigRegion* r) { onig_region_free(r, 1); });
  thread_local std::unique_ptr<OnigMatchParam, void (*)(OnigMatchParam*)> param(
      [] {
        OnigMatchParam* p = onig_new_match_param();
        if (p != nullptr) {
          onig_initialize_match_param(p);
          onig_set_retry_limit_in_search_of_match_param(p, kRetryLimitInSearch);
        }
        return p;
      }(),
      onig_free_match_param);
  if (!region || !param) throw Error(fmt::format("{}: out of memory for a regex search", what_));
  const auto* text = reinterpret_cast<const OnigUChar*>(utf8.data());
  const auto* end = text + utf8.size();
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (from <= utf8.size()) {
    onig_region_clear(region.get());
    const int found = onig_search_with_param(regex, text, end, text + from, end, region.get(), ONIG_OPTION_NONE, param.get());
    if (found == ONIG_MISMATCH) break;
    if (found < 0) throw Error(fmt::format("{}: regex '{}' failed on a text of {} bytes: {}", what_, pattern_, utf8.size(), onig_message(found, nullptr)));
    const size_t begin = static_cast<size_t>(region->beg[0]);
    const size_t stop = static_cast<size_t>(region->end[0]);
    if (begin == stop && have_last && last_end == stop) {
      // As the binding's find_iter: no empty match right after the previous one; step one character.
      size_t step = 1;
      if (from < utf8.size()) {
        const unsigned char lead = static_cast<unsigned char>(utf8[from]);
        step = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      }
      from += step;
      continue;
    }
    matches.emplace_back(begin, stop);
    from = stop;
    have_last = true;
    last_end = stop;
  }
  return matches;
}

std::string onig_escape(std::string_view literal) {
  std::string out;
  out.reserve(literal.size() * 2);
  for (const char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !((u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_')) {
      if (u < 0x20 || u == 0x7F) {
        out += fmt::format("\\x{:02X}", u);  // a control character written as \xHH
        continue;
      }
      out += '\\';
    }
    out += c;
  }
  return out;
}

}  // namespace attnkit::text
