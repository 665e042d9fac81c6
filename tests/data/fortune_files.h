#pragma once
// Fortune files for the LRA text tests (tests/data/lra_text_test.cpp, tests/train/
// lra_text_tasks_test.cpp) and the small passage settings they use.
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/data/lra_text.h"
#include "support/test_files.h"

namespace attnkit::testing {

// Fortune files of `counts` fortunes per category; fortune i of category c reads "<c-i> " then
// filler words of the category (about `bytes` bytes), so every fortune names itself.
inline std::filesystem::path write_fortunes(const std::string& area, const std::map<std::string, int>& counts,
                                            int bytes = 150, const std::string& filler = "") {
  const auto dir = scratch_directory(area);
  for (const auto& [category, count] : counts) {
    std::string content;
    for (int i = 0; i < count; ++i) {
      std::string text = "<" + category + "-" + std::to_string(i) + ">";
      const std::string word = filler.empty() ? " " + category + " words\tand\\lines" : filler;
      while (static_cast<int>(text.size()) < bytes) text += (text.size() % 60 < 10 ? "\n" : "") + word;
      content += text + "\n%\n";
    }
    write_bytes(dir / category, content);
  }
  return dir;
}

inline data::LraTextOptions small_options(const std::filesystem::path& dir, std::vector<std::string> categories) {
  data::LraTextOptions o;
  o.categories = std::move(categories);
  o.fortunes_dir = dir.string();
  o.min_bytes = 400;
  o.max_bytes = 900;
  o.val_fraction = 0.15;
  o.test_fraction = 0.15;
  o.seed = 3;
  return o;
}

}  // namespace attnkit::testing
