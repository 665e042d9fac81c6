// Regression tests for inputs found by fuzzing the tokenizer files (fuzz/, docs/robustness.md):
// each once crashed, hung or exhausted memory; now each is one attnkit::Error line naming the file.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "attnkit/error.h"
#include "attnkit/text/byte_level.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/text_tokenizer.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/vocab_files.h"
#include "reference_support.h"
#include "support/test_files.h"

namespace attnkit::text {
namespace {

using attnkit::testing::error_of;

// An id of 2^32 - 1 made the table size wrap to 0 (a write out of bounds); a huge id allocated a
// table of billions of entries for one token.
TEST(Hardening, VocabJsonHugeIds) {
  const auto dir = testing::scratch_dir();
  const std::string path = (dir / "vocab.json").string();
  for (const std::string id : {"4294967295", "4000000000", "3000000"}) {
    testing::write_all(path, "{\"a\": 0, \"b\": " + id + "}");
    const std::string message = error_of([&] { read_vocab_json(path); });
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("too large"), std::string::npos) << message;
  }
  // Beyond uint32: no silent wrap to a small id.
  testing::write_all(path, R"({"a": 0, "b": 4294967297})");
  std::string message = error_of([&] { read_vocab_json(path); });
  EXPECT_NE(message.find("not an integer in [0, 2^32)"), std::string::npos) << message;
  // Gaps within the limit are fine (Hugging Face allows them).
  testing::write_all(path, R"({"a": 0, "b": 1000})");
  EXPECT_EQ(read_vocab_json(path).find("b"), 1000u);
}

TEST(Hardening, TokenizerJsonVocabIds) {
  const auto dir = testing::scratch_dir();
  const std::string path = (dir / "tokenizer.json").string();
  for (const std::string id : {"-1", "4294967295", "1.5", "4294967296"}) {
    testing::write_all(path, R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": )" + id + "}}}");
    const std::string message = error_of([&] { read_tokenizer_json(path); });
    EXPECT_NE(message.find(path), std::string::npos) << id << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// nlohmann's get<uint32_t>() converted 1e41 (undefined behaviour, UBSan: "outside the range of
// representable values"), -1 or 1.5 without a check: fuzz/regressions/tokenizer_json/crash-ad39....
TEST(Hardening, TokenizerJsonIntegersOutsideTheirRange) {
  const auto dir = testing::scratch_dir();
  const std::string path = (dir / "tokenizer.json").string();
  const std::string model =
      R"("pre_tokenizer": {"type": "BertPreTokenizer"}, "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1}})";
  for (const std::string bad : {"1e41", "-1", "1.5", "4294967296"}) {
    for (const std::string& rest :
         {R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "a", "type_id": )" + bad + "}}], \"pair\": [], \"special_tokens\": {}}",
          R"("post_processor": {"type": "BertProcessing", "cls": ["a", )" + bad + R"(], "sep": ["a", 1]})",
          R"("post_processor": {"type": "TemplateProcessing", "single": [], "pair": [], "special_tokens": {"a": {"ids": [)" + bad + R"(], "tokens": ["a"]}}})",
          R"("added_tokens": [{"id": )" + bad + R"(, "content": "a"}])"}) {
      testing::write_all(path, "{" + model + ", " + rest + "}");
      const std::string message = error_of([&] { read_tokenizer_json(path); });
      EXPECT_NE(message.find(path), std::string::npos) << rest << ": " << message;
      EXPECT_NE(message.find("expected an integer in [0, 4294967295]"), std::string::npos) << rest << ": " << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

// A duplicate vocabulary key kept only its last id, so the post-processor's [SEP] (id 3) was in
// neither the vocabulary nor the added tokens and encode's own output failed in decode:
// fuzz/regressions/tokenizer_json/crash-....
TEST(Hardening, TokenizerJsonPostProcessorIdsMustDecode) {
  const auto dir = testing::scratch_dir();
  const std::string path = (dir / "tokenizer.json").string();
  testing::write_all(path, R"({"pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 2], "sep": ["[SEP]", 3]},
    "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1, "[CLS]": 2, "[SEP]": 3, "[SEP]": 4}}})");
  const std::string message = error_of([&] { read_tokenizer_json(path); });
  EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
  EXPECT_NE(message.find("special token '[SEP]' has id 3"), std::string::npos) << message;
}


// ---- the decoder families' files (Llama 3 / Qwen2 / SmolLM2 and Llama 2 / Mistral / Gemma) ------

// A tiny Llama 3-style file: byte-level BPE behind a Split regex, the post-processor Sequence.
nlohmann::json llama3_like() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte) vocab[byte_level::bytes_to_token(std::string(1, static_cast<char>(byte)))] = byte;
  vocab["he"] = 256;
  vocab["<|begin_of_text|>"] = 257;
  nlohmann::json file = nlohmann::json::parse(R"({
    "added_tokens": [{"id": 257, "content": "<|begin_of_text|>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|\\p{L}+|\\p{N}{1,3}|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "post_processor": {"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
       "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [257], "tokens": ["<|begin_of_text|>"]}}}]},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
              "fuse_unk": false, "byte_fallback": false, "merges": ["h e"]}})");
  file["model"]["vocab"] = vocab;
  return file;
}

// A tiny Llama 2-style file: SentencePiece-style BPE with byte fallback.
nlohmann::json llama2_like() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int byte = 0; byte < 256; ++byte) vocab[fmt::format("<0x{:02X}>", byte)] = 3 + byte;
  uint32_t next = 259;
  for (const char* token : {"\u2581", "h", "e", "l", "o", "he", "\u2581he", "ll", "llo"}) vocab[token] = next++;
  nlohmann::json file = nlohmann::json::parse(R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
                     {"id": 1, "content": "<s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                       {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
       {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null, "end_of_word_suffix": null,
              "fuse_unk": true, "byte_fallback": true, "merges": ["h e", "\u2581 he", "l l", "ll o"]}})");
  file["model"]["vocab"] = vocab;
  return file;
}

std::string family_error(const nlohmann::json& file) {
  return error_of([&] { tokenizer_from_json_string(file.dump(), "bad/tokenizer.json"); });
}

void expect_family_error(const nlohmann::json& file, const std::string& needle) {
  const std::string message = family_error(file);
  EXPECT_EQ(message.rfind("bad/tokenizer.json: ", 0), 0u) << needle << ": " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find(needle), std::string::npos) << needle << ": " << message;
}

TEST(Hardening, DecoderFamilyFilesLoadAndEncode) {
  const Tokenizer llama3 = tokenizer_from_json_string(llama3_like().dump());
  // <|begin_of_text|>, "he" merged, then the bytes of "'s" (a byte's token id is the byte here).
  EXPECT_EQ(llama3.encode("he's").ids, (std::vector<uint32_t>{257, 256, '\'', 's'}));
  EXPECT_EQ(llama3.decode(llama3.encode("he's").ids), "he's");
  const Tokenizer llama2 = tokenizer_from_json_string(llama2_like().dump());
  // "<s>" + "▁he" + "llo" + "▁" + "x" (no piece: its byte, <0x78> = 3 + 0x78).
  EXPECT_EQ(llama2.encode("hello x").ids, (std::vector<uint32_t>{1, 265, 267, 259, 3 + 0x78}));
  EXPECT_EQ(llama2.decode(llama2.encode("hello x").ids), "hello x");
  // Both put one begin token alone before a text (what analyze heads starts its windows with).
  EXPECT_EQ(leading_special_token(llama3), std::optional<int64_t>(257));
  EXPECT_EQ(leading_special_token(llama2), std::optional<int64_t>(1));
}

TEST(Hardening, DecoderFamilyFilesGiveOneLineErrorsNamingTheField) {
  auto with = [](nlohmann::json file, const std::string& pointer, nlohmann::json value) {
    file[nlohmann::json::json_pointer(pointer)] = std::move(value);
    return file;
  };
  auto without = [](nlohmann::json file, const std::string& pointer) {
    const nlohmann::json::json_pointer at(pointer);
    file[at.parent_pointer()].erase(at.back());
    return file;
  };
  const nlohmann::json l3 = llama3_like();
  const nlohmann::json l2 = llama2_like();
  const std::string split = "/pre_tokenizer/pretokenizers/0";
  expect_family_error(with(l3, split + "/type", "Splitter"), "pre_tokenizer type \"Splitter\"");
  expect_family_error(with(l3, split + "/pattern", {{"Regex", "(unclosed"}}), "Split pre_tokenizer: regex '(unclosed' does not compile");
  expect_family_error(with(l3, split + "/pattern", {{"Regex", "\\p{NoSuchClass}"}}), "does not compile");
  expect_family_error(with(l3, split + "/pattern", {{"Glob", "*"}}), "Split pre_tokenizer: pattern is neither");
  expect_family_error(without(l3, split + "/pattern"), "Split pre_tokenizer: \"pattern\" is missing");
  expect_family_error(with(l3, split + "/behavior", "Sideways"), "Split pre_tokenizer: behavior \"Sideways\" is not Removed");
  expect_family_error(with(l3, split + "/behavior", 3), "behavior 3 is not");
  expect_family_error(without(l3, split + "/behavior"), "Split pre_tokenizer: \"behavior\" is missing");
  expect_family_error(with(l3, "/pre_tokenizer/pretokenizers", "x"), "\"pretokenizers\" is not an array");
  expect_family_error(with(l3, "/pre_tokenizer/pretokenizers/2", {{"type", "Digits"}}), "ByteLevel is step 2 of 3");
  expect_family_error(with(l3, "/post_processor/processors/0/type", "RobertaProcessing"),
                      "post_processor Sequence: only [ByteLevel, TemplateProcessing]");
  expect_family_error(without(l3, "/post_processor/processors"), "post_processor Sequence: \"processors\" is missing");
  expect_family_error(with(l3, "/model/unk_token", "<unk>"), "\"unk_token\" is not supported with the ByteLevel");
  expect_family_error(with(l3, "/model/merges", "h e"), "\"merges\" is not an array");
  expect_family_error(with(l3, "/model/merges/0", nlohmann::json::array({"h", 1})), "model.merges[0] is neither");

  expect_family_error(with(l2, "/model/byte_fallback", "yes"), "type must be boolean");
  expect_family_error(with(l2, "/model/unk_token", "<missing>"), "BPE model: unk_token '<missing>' is not in the vocabulary");
  expect_family_error(with(l2, "/model/unk_token", 7), "BPE model: \"unk_token\" is not a string");
  expect_family_error(with(l2, "/model/continuing_subword_prefix", "##"), "\"continuing_subword_prefix\" is not supported");
  expect_family_error(without(l2, "/model/merges"), "BPE model: \"merges\" is missing");
  expect_family_error(with(l2, "/normalizer/normalizers/0", {{"type", "Prepend"}}), "Prepend normalizer: \"prepend\" is missing");
  expect_family_error(with(l2, "/normalizer/normalizers/0/prepend", 1), "Prepend normalizer: \"prepend\" is not a string");
  expect_family_error(without(l2, "/normalizer/normalizers/1/content"), "Replace normalizer: \"content\" is missing");
  expect_family_error(with(l2, "/decoder/decoders/0/type", "Replacer"), "decoder type \"Replacer\"");
  expect_family_error(with(l2, "/decoder/decoders/0/pattern", {{"Regex", "a(?<=("}}), "Replace decoder: regex");
  expect_family_error(without(l2, "/decoder/decoders/0/content"), "Replace decoder: \"content\" is missing");
  expect_family_error(with(l2, "/decoder/decoders/3/content", "ab"), "Strip decoder: content \"ab\" is not one character");
  expect_family_error(with(l2, "/decoder/decoders/3/start", -1), "Strip decoder: start: expected an integer");
  expect_family_error(without(l2, "/decoder/decoders/3/stop"), "Strip decoder: \"stop\" is missing");
  expect_family_error(with(l2, "/decoder/decoders", {{"type", "Fuse"}}), "decoder Sequence: \"decoders\" is not an array");
  // A Sequence that ends in ByteLevel makes the model byte-level: no unknown token or byte fallback.
  nlohmann::json mixed = with(l2, "/pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}}, {{"type", "ByteLevel"}}}}});
  expect_family_error(mixed, "\"unk_token\" is not supported with the ByteLevel pre_tokenizer");
}

// Every field of both files replaced by a value of another type, or removed: each load gives the
// tokenizer or one attnkit::Error line, and a loaded tokenizer encodes and decodes without a crash.
TEST(Hardening, DecoderFamilyFilesSurviveEveryFieldMutation) {
  const std::vector<nlohmann::json> replacements = {nullptr, 1e41, -1, 0, "x", "", nlohmann::json::array(),
                                                    nlohmann::json::object(), true};
  size_t loads = 0;
  size_t errors = 0;
  for (const nlohmann::json& original : {llama3_like(), llama2_like()}) {
    const nlohmann::json flat = original.flatten();
    std::vector<std::string> pointers;
    for (const auto& [pointer, value] : flat.items()) {
      if (pointer.rfind("/model/vocab/", 0) == 0 && pointer.size() > 20) continue;  // the 256 byte tokens alike
      pointers.push_back(pointer);
    }
    for (const std::string& pointer : pointers) {
      for (size_t r = 0; r <= replacements.size(); ++r) {
        nlohmann::json file = original;
        const nlohmann::json::json_pointer at(pointer);
        if (r == replacements.size()) {
          nlohmann::json& parent = file[at.parent_pointer()];
          if (parent.is_array()) {
            parent.erase(std::stoul(at.back()));
          } else {
            parent.erase(at.back());
          }
        } else {
          file[at] = replacements[r];
        }
        try {
          const Tokenizer tokenizer = tokenizer_from_json_string(file.dump(), "mutated/tokenizer.json");
          ++loads;
          for (const std::string text : {"hello world", "he's 123 \xE4\xBD\xA0\xF0\x9F\x98\x80", "", "<s>x<|begin_of_text|>"}) {
            try {
              tokenizer.decode(tokenizer.encode(text).ids, false);
            } catch (const Error& e) {
              EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << pointer << ": " << e.what();
            }
          }
        } catch (const Error& e) {
          ++errors;
          const std::string message = e.what();
          EXPECT_EQ(message.rfind("mutated/tokenizer.json: ", 0), 0u) << pointer << ": " << message;
          EXPECT_EQ(message.find('\n'), std::string::npos) << pointer << ": " << message;
        }
      }
    }
  }
  EXPECT_GT(loads, 50u);
  EXPECT_GT(errors, 200u);
}

// A Split regex that backtracks without end fails the encode with one line instead of hanging.
TEST(Hardening, BacktrackingSplitRegexIsBounded) {
  nlohmann::json file = llama3_like();
  file["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a|aa)+c";
  const Tokenizer tokenizer = tokenizer_from_json_string(file.dump(), "slow/tokenizer.json");
  EXPECT_EQ(tokenizer.encode("aac").ids.size(), 4u);  // <|begin_of_text|> a a c: no merges apply
  const std::string message = error_of([&] { tokenizer.encode(std::string(40, 'a')); });
  EXPECT_NE(message.find("regex '(a|aa)+c' failed"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

}  // namespace
}  // namespace attnkit::text
