// Unigram tokenizers against Hugging Face tokenizers (the official Python binding, in the test venv
// scripts/setup.sh makes): a tokenizer HF trained on the varied corpus, and variants with the
// SentencePiece-era normalisers (Nmt, NFKC, Replace, Strip, Lowercase, an ALBERT-like Sequence
// with a Precompiled charsmap) and byte fallback must give identical ids, offsets, decodes and
// normalised text; load -> save -> load must keep the file and the ids.
#include <gtest/gtest.h>

#include <cstdio>

#include "attnkit/error.h"
#include "attnkit/text/normalizer.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/sentencepiece_model.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/unicode.h"
#include "attnkit/text/unigram.h"
#include "reference_support.h"

namespace attnkit::text {
namespace {

using testing::fs::path;

void expect_matches(const Tokenizer& tokenizer, const nlohmann::json& config) {
  testing::expect_peer_cases(tokenizer, config, [&](const nlohmann::json& item, const std::string& text, const Encoding&,
                                                    const std::string& what) {
    if (!tokenizer.parts().normalizer) return;
    const AlignedText original = AlignedText::identity(unicode::decode_utf8(text, unicode::InvalidUtf8::kReplace));
    const AlignedText normalized = normalize(*tokenizer.parts().normalizer, original);
    EXPECT_EQ(unicode::encode_utf8(normalized.chars), item.at("normalized").get<std::string>()) << what;
  });
}

TEST(UnigramReference, EveryConfigMatchesHuggingFace) {
  ATTNKIT_REQUIRE_PEER_REFERENCE(ref, "hf_unigram_reference.py");
  ASSERT_GE(ref->at("configs").size(), 7u);
  for (const auto& config : ref->at("configs")) {
    // A directory: tokenizer.json, or (config "spm") a SentencePiece spiece.model.
    const std::string dir = config.at("dir").get<std::string>();
    SCOPED_TRACE(dir);
    const Tokenizer tokenizer = load_tokenizer(dir);
    ASSERT_NE(dynamic_cast<const Unigram*>(tokenizer.parts().model.get()), nullptr);
    expect_matches(tokenizer, config);
  }
}

TEST(UnigramReference, BatchEncodingMatchesOneByOne) {
  ATTNKIT_REQUIRE_PEER_REFERENCE(ref, "hf_unigram_reference.py");
  const auto& config = ref->at("configs").at(2);
  ASSERT_EQ(config.at("name"), "albert");
  const Tokenizer tokenizer = read_tokenizer_json((path(config.at("dir").get<std::string>()) / "tokenizer.json").string());
  std::vector<EncodeInput> inputs;
  for (const auto& item : config.at("cases")) inputs.push_back({item.at("text").get<std::string>(), std::nullopt});
  const auto batch = tokenizer.encode_batch(inputs, 2);
  for (size_t i = 0; i < inputs.size(); ++i) EXPECT_EQ(batch[i].ids, config.at("cases").at(i).at("ids").get<std::vector<uint32_t>>());
}

TEST(UnigramReference, SaveLoadKeepsFileAndIds) {
  ATTNKIT_REQUIRE_PEER_REFERENCE(ref, "hf_unigram_reference.py");
  for (const auto& config : ref->at("configs")) {
    const path file = path(config.at("dir").get<std::string>()) / "tokenizer.json";
    SCOPED_TRACE(file.string());
    const Tokenizer first = load_tokenizer(config.at("dir").get<std::string>());
    const std::string saved = tokenizer_to_json_string(first);
    const Tokenizer second = tokenizer_from_json_string(saved);
    EXPECT_EQ(tokenizer_to_json_string(second), saved);
    expect_matches(second, config);
    if (!testing::fs::exists(file)) continue;  // spiece.model
    // The model, normaliser and pre-tokenizer parts are written as HF writes them.
    const auto hf = nlohmann::json::parse(testing::read_all(file));
    const auto ours = nlohmann::json::parse(saved);
    EXPECT_EQ(ours.at("model"), hf.at("model"));
    EXPECT_EQ(ours.at("normalizer"), hf.at("normalizer"));
    EXPECT_EQ(ours.at("pre_tokenizer"), hf.at("pre_tokenizer"));
    EXPECT_EQ(ours.at("decoder"), hf.at("decoder"));
  }
}

// ---- bad files: one line naming the file and the problem ---------------------------------------
std::string load_error(const std::string& json) {
  try {
    tokenizer_from_json_string(json, "bad/tokenizer.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string unigram_json(const std::string& vocab, const std::string& normalizer = "null") {
  return R"({"normalizer": )" + normalizer + R"(, "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
    "add_prefix_space": true, "prepend_scheme": "always"}, "model": {"type": "Unigram", "unk_id": 0, "vocab": )" + vocab + "}}";
}

void expect_one_line(const std::string& message, const std::string& needle) {
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.rfind("bad/tokenizer.json: ", 0), 0u) << message;
  EXPECT_NE(message.find(needle), std::string::npos) << message;
}

TEST(UnigramFiles, BadFilesGiveOneLineErrors) {
  const std::string vocab = R"([["<unk>", 0.0], ["a", -1.0]])";
  // "AAAA" is 3 zero bytes: no room for the trie size; "/////w==" claims a trie larger than the blob.
  expect_one_line(load_error(unigram_json(vocab, R"({"type": "Precompiled", "precompiled_charsmap": "AAAA"})")), "truncated");
  expect_one_line(load_error(unigram_json(vocab, R"({"type": "Precompiled", "precompiled_charsmap": "EAAAAAAA"})")), "truncated");
  expect_one_line(load_error(unigram_json(vocab, R"({"type": "Precompiled", "precompiled_charsmap": "not base64!"})")), "base64");
  expect_one_line(load_error(unigram_json(vocab, R"({"type": "Sequence", "normalizers": [{"type": "Frobnicate"}]})")),
                  "normalizer type \"Frobnicate\"");
  expect_one_line(load_error(unigram_json(R"([["<unk>", 0.0], ["a", "high"]])")), "score that is not a number");
  expect_one_line(load_error(unigram_json(R"([["<unk>", 0.0], ["a"]])")), "vocab[1] is not [piece, score]");
  expect_one_line(load_error(unigram_json(R"([["<unk>", 0.0], ["a", -1.0], ["a", -2.0]])")), "a");
  expect_one_line(load_error(R"({"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "Unigram", "unk_id": 7, "vocab": [["<unk>", 0.0]]}})"),
                  "unk_id 7");
  expect_one_line(load_error(R"({"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "Unigram2", "vocab": []}})"),
                  "model type \"Unigram2\"");
  expect_one_line(load_error(unigram_json(vocab, R"({"type": "Replace", "pattern": {"Regex": "(unclosed"}, "content": ""})")), "regex");
}

TEST(UnigramFiles, RegexesThatBacktrackingEnginesCannotTakeAreSafe) {
  // Backreferences and lookaround (no linear-time engine has them) are refused when read.
  const std::string vocab = R"([["<unk>", 0.0], ["a", -1.0]])";
  expect_one_line(load_error(unigram_json(vocab, R"({"type": "Replace", "pattern": {"Regex": "(a)\\1"}, "content": ""})")),
                  "backreferences");
  expect_one_line(load_error(unigram_json(vocab, R"j({"type": "Replace", "pattern": {"Regex": "a(?=b)"}, "content": ""})j")),
                  "does not compile");
  // A nested quantifier on 200,000 characters: a backtracking engine (std::regex) recurses per
  // character and tries exponentially many splits; RE2 finishes in one pass.
  const auto step = make_replace("(a|aa)*c", true, "X");
  const std::u32string long_text(200000, U'a');
  const auto unchanged = normalize(NormalizerStep{step}, AlignedText::identity(long_text + U"b"));
  EXPECT_EQ(unchanged.chars, long_text + U"b");
  const auto replaced = normalize(NormalizerStep{step}, AlignedText::identity(U"xaaacaac"));
  EXPECT_EQ(replaced.chars, U"xXX");
  // Multi-line ^ and $, empty matches, characters beyond one byte, alignment to the match's end.
  const auto lines = normalize(NormalizerStep{make_replace("^ *", true, "")}, AlignedText::identity(U"  é\n  ü"));
  EXPECT_EQ(lines.chars, U"é\nü");
  const auto wide = normalize(NormalizerStep{make_replace("é+", true, "e")}, AlignedText::identity(U"aééb"));
  EXPECT_EQ(wide.chars, U"aeb");
  EXPECT_EQ(wide.origin, (std::vector<uint32_t>{0, 2, 3}));
}

TEST(UnigramFiles, BadSentencePieceModelsGiveOneLineErrors) {
  auto error_of = [](const std::string& bytes) {
    try {
      tokenizer_from_sentencepiece(bytes, "bad/spiece.model");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  // pieces { piece: "a" (length 5 claimed, 1 given) }
  std::string message = error_of(std::string("\x0a\x05\x0a\x01", 4));
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_NE(message.find("bad/spiece.model: ModelProto: a field of 5 bytes runs past the end"), std::string::npos) << message;
  // trainer_spec { model_type: BPE } and one piece
  message = error_of(std::string("\x0a\x03\x0a\x01\x61\x12\x02\x18\x02", 9));
  EXPECT_NE(message.find("model type BPE is not supported"), std::string::npos) << message;
  message = error_of("");
  EXPECT_NE(message.find("no pieces"), std::string::npos) << message;
}

TEST(UnigramModel, ViterbiPicksTheBestSegmentation) {
  // "ab" as one piece (-3) loses to "a" + "b" (-1 + -1); "abc" (-1.5) beats everything.
  Unigram model({{"<unk>", 0.0}, {"a", -1.0}, {"b", -1.0}, {"ab", -3.0}, {"abc", -1.5}, {"c", -1.0}}, 0u, false);
  std::vector<ModelToken> out;
  model.tokenize("ab", out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].id, 1u);
  EXPECT_EQ(out[1].id, 2u);
  out.clear();
  model.tokenize("abcxyc", out);  // "abc", then "xy" fused into one unknown, then "c"
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].id, 4u);
  EXPECT_EQ(out[1].id, 0u);
  EXPECT_EQ(out[1].begin, 3u);
  EXPECT_EQ(out[1].end, 5u);
  EXPECT_EQ(out[2].id, 5u);
}

}  // namespace
}  // namespace attnkit::text
